//! Real-time capacity: how many streams this process can keep continuous,
//! learned from what its own stages measure, and the load figure that
//! goes with it. Pure (every function takes its instants and figures), so
//! the rules are unit-tested with time under control.
//!
//! # The model
//! A stream is continuous when the engine makes its frames at least as
//! fast as they are played: `frame_rate` frames per second (12.5 for the
//! 12 Hz codec). The engine's stages run on groups of cores ([`Groups`]:
//! one shared kernel team by default, or an LM and a vocoder group when
//! the config places stages). A group is *busy* while any of its stages is
//! inside a step ([`BusyClock`]: the union of those intervals, so a step
//! waiting for another stage's region is not counted twice).
//!
//! With `n` streams computing, each group's busy seconds per frame made,
//! `c_g(n)`, is sampled over windows of steady `n` ([`Sampler`]) and kept
//! per `n` ([`CostCurve`]). `n` streams then need a share
//! `U(n) = max_g frame_rate · n · c_g(n)` of their cores' time, and the
//! capacity is the largest `n` whose `U` stays within the target share
//! (`EngineConfig::realtime_load`, 0.9 by default in `serve`): a new stream
//! is admitted only while the ones already admitted, with it, stay within
//! it. Costs between measured `n` are interpolated; beyond the largest
//! measured `n` the cost per frame is assumed not to fall further (no more
//! batching gain: conservative); below the smallest, the step time is
//! assumed not to shrink. Batching never makes a frame dearer, so a
//! measurement also bounds its neighbours (`c` is kept non-increasing in
//! `n`): a stale, pessimistic figure for a batch size the process no
//! longer reaches is pulled down by a fresh one below it.
//!
//! Until anything is measured the capacity is unknown and admission falls
//! back to the fixed `max_active_requests`; the server seeds the curve
//! with a short calibration at start (`Engine::calibrate`).
//!
//! # Placement by measurement
//! On the shared team the vocoder's step either holds the team or is lent
//! a core beside the LMs ([`Placement`]); which is cheaper depends on the
//! host and the batch (docs/performance.md, "A Zen 5 host: the vocoder
//! beside the LMs"). The model keeps one set of curves per placement, and
//! with [`LendPolicy::Measured`] ([`CapacityModel::placement`]) a batch
//! size first runs held, then lent (each for one window), and from then
//! on the one whose measured load is lower (by more than [`LEND_MARGIN`]
//! for the lent one). Capacity takes each batch size at its cheaper
//! placement. A window in which both placements stepped makes no sample.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Kernel groups at most: `[lm, vocoder]`.
pub const MAX_GROUPS: usize = 2;

/// How the vocoder's step takes the shared kernel team.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// The whole team for its step, the LMs' regions waiting.
    Held,
    /// One core beside the LM stages while they step (`Team::install_lent_as`).
    Lent,
}

impl Placement {
    pub const ALL: [Placement; 2] = [Placement::Held, Placement::Lent];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Placement::Held => "held",
            Placement::Lent => "lent",
        }
    }

    /// The placement that is not this one.
    pub fn other(self) -> Placement {
        match self {
            Placement::Held => Placement::Lent,
            Placement::Lent => Placement::Held,
        }
    }
}

/// Which placement the vocoder's steps take ([`CapacityModel::placement`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LendPolicy {
    /// Always held (the default).
    #[default]
    Never,
    /// Always lent.
    Always,
    /// Per batch size, the placement this process measured cheaper.
    Measured,
}

/// The lent placement is chosen only when its measured load is lower than
/// the held one's by more than this share: a near tie stays held, whose
/// steps deliver audio more smoothly (on the Zen 4 one stream measured
/// 3-5% lower lent, within the runs' spread, with a larger prebuffer
/// needed; three streams 15-25% lower).
pub const LEND_MARGIN: f64 = 0.10;

/// With [`LendPolicy::Measured`], every this many samples at one stream
/// count the placement not chosen runs one window again, so a figure from
/// one unlucky window (or from a host that since changed) is revisited.
pub const LEND_REVISIT: u32 = 32;

/// Weight of a new sample in a cost's moving average.
const ALPHA: f64 = 0.25;
/// A sample needs at least this many frames made over its window...
const MIN_FRAMES: u64 = 4;
/// ...and this much wall time.
const MIN_WINDOW: Duration = Duration::from_millis(150);
/// A window longer than this with `n` unchanged but too few frames (the
/// streams paused or waiting for text) is restarted rather than averaged
/// over idle time.
const MAX_WINDOW: Duration = Duration::from_secs(5);

/// The busy time of one group of stages: the union of the intervals in
/// which any of its stages is inside a step.
#[derive(Clone, Copy, Debug, Default)]
pub struct BusyClock {
    depth: u32,
    since: Option<Instant>,
    total: Duration,
}

impl BusyClock {
    /// A stage of the group starts a step at `now`.
    pub fn enter(&mut self, now: Instant) {
        if self.depth == 0 {
            self.since = Some(now);
        }
        self.depth += 1;
    }

    /// A stage of the group ends its step at `now`.
    pub fn exit(&mut self, now: Instant) {
        self.depth = self.depth.saturating_sub(1);
        if self.depth == 0 {
            if let Some(since) = self.since.take() {
                self.total += now.saturating_duration_since(since);
            }
        }
    }

    /// Busy time up to `now`, the current interval included.
    pub fn total(&self, now: Instant) -> Duration {
        self.total
            + self
                .since
                .map(|s| now.saturating_duration_since(s))
                .unwrap_or_default()
    }
}

/// Busy seconds per frame made, against the number of streams computing.
#[derive(Clone, Debug, Default)]
pub struct CostCurve {
    points: BTreeMap<usize, f64>,
}

impl CostCurve {
    /// A sample: `n` streams made frames at `cost` busy seconds each.
    pub fn observe(&mut self, n: usize, cost: f64) {
        if n == 0 || !cost.is_finite() || cost < 0.0 {
            return;
        }
        let c = match self.points.get(&n) {
            Some(old) => old + ALPHA * (cost - old),
            None => cost,
        };
        self.points.insert(n, c);
        // Batching never makes a frame dearer: what `n` costs bounds the
        // larger batches from above and the smaller ones from below.
        for (&m, v) in self.points.iter_mut() {
            if (m > n && *v > c) || (m < n && *v < c) {
                *v = c;
            }
        }
    }

    /// The cost per frame at `n` streams, `None` before any sample.
    pub fn cost(&self, n: usize) -> Option<f64> {
        let n = n.max(1);
        let below = self.points.range(..=n).next_back();
        let above = self.points.range(n..).next();
        match (below, above) {
            (Some((&lo, &cl)), Some((&hi, &ch))) if hi > lo => {
                let t = (n - lo) as f64 / (hi - lo) as f64;
                Some(cl + t * (ch - cl))
            }
            (Some((_, &c)), _) => Some(c),
            // Below the smallest measured batch a step takes no less time
            // than it: each frame carries a larger share of it.
            (None, Some((&hi, &c))) => Some(c * hi as f64 / n as f64),
            (None, None) => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The measured points, `(n, seconds per frame)`.
    pub fn points(&self) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.points.iter().map(|(&n, &c)| (n, c))
    }
}

/// What the capacity rule knows: one cost curve per group, the frame rate
/// a stream needs, the target share and the fixed upper bound.
#[derive(Clone, Debug)]
pub struct CapacityModel {
    /// Per [`Placement`], one curve per group.
    curves: [[CostCurve; MAX_GROUPS]; 2],
    groups: usize,
    frame_rate: f64,
    target: f64,
    max_streams: usize,
    lend: LendPolicy,
    /// Samples taken per stream count (the first group's), for
    /// [`LEND_REVISIT`].
    visits: BTreeMap<usize, u32>,
}

impl CapacityModel {
    /// `groups` kernel groups (1 or 2), streams needing `frame_rate`
    /// frames/s, admitted up to a `target` share of each group's time and
    /// never beyond `max_streams`.
    pub fn new(groups: usize, frame_rate: f64, target: f64, max_streams: usize) -> Self {
        CapacityModel {
            curves: Default::default(),
            groups: groups.clamp(1, MAX_GROUPS),
            frame_rate,
            target,
            max_streams: max_streams.max(1),
            lend: LendPolicy::Never,
            visits: BTreeMap::new(),
        }
    }

    /// This model with the vocoder's placement chosen by `lend`.
    pub fn with_lending(mut self, lend: LendPolicy) -> Self {
        self.lend = lend;
        self
    }

    /// A sample for group `g` at placement `p` ([`Sampler::sample`]).
    pub fn observe(&mut self, p: Placement, g: usize, n: usize, cost: f64) {
        if let Some(c) = self.curves[p.index()].get_mut(g) {
            c.observe(n, cost);
        }
        if g == 0 {
            *self.visits.entry(n).or_default() += 1;
        }
    }

    /// Group `g`'s curve at placement `p`.
    pub fn curve(&self, p: Placement, g: usize) -> &CostCurve {
        &self.curves[p.index()][g]
    }

    /// The stream counts every group has a figure for (at some placement).
    pub fn measured_streams(&self) -> Vec<usize> {
        let mut ns: Vec<usize> = self
            .curves
            .iter()
            .flat_map(|c| c[0].points().map(|(n, _)| n))
            .filter(|&n| self.measured(n))
            .collect();
        ns.sort_unstable();
        ns.dedup();
        ns
    }

    /// Whether every group has a figure measured at exactly `n` streams
    /// at placement `p`.
    pub fn measured_at(&self, p: Placement, n: usize) -> bool {
        self.curves[p.index()][..self.groups]
            .iter()
            .all(|c| c.points.contains_key(&n))
    }

    /// Whether `n` streams are measured at every placement the policy
    /// runs (both with [`LendPolicy::Measured`]).
    pub fn measured(&self, n: usize) -> bool {
        match self.lend {
            LendPolicy::Never => self.measured_at(Placement::Held, n),
            LendPolicy::Always => self.measured_at(Placement::Lent, n),
            LendPolicy::Measured => Placement::ALL.iter().all(|&p| self.measured_at(p, n)),
        }
    }

    /// Share of the busiest group's time `n` real-time streams need at
    /// placement `p`; `None` before any measurement there.
    pub fn utilization_at(&self, p: Placement, n: usize) -> Option<f64> {
        self.curves[p.index()][..self.groups]
            .iter()
            .filter_map(|c| c.cost(n))
            .map(|c| self.frame_rate * n as f64 * c)
            .reduce(f64::max)
    }

    /// Share of the busiest group's time `n` real-time streams need, at
    /// the placement the policy gives them ([`Self::placement`]); `None`
    /// before any measurement.
    pub fn utilization(&self, n: usize) -> Option<f64> {
        match self.lend {
            LendPolicy::Never => self.utilization_at(Placement::Held, n),
            LendPolicy::Always => self.utilization_at(Placement::Lent, n),
            // A batch size is taken at its lent load only once both
            // placements were measured there and lent is the cheaper.
            LendPolicy::Measured => match self.compared(n) {
                Some(Placement::Lent) => self.utilization_at(Placement::Lent, n),
                _ => self
                    .utilization_at(Placement::Held, n)
                    .or_else(|| self.utilization_at(Placement::Lent, n)),
            },
        }
    }

    /// Where the vocoder's steps run while `n` streams compute. With
    /// [`LendPolicy::Measured`]: held until `n` is measured held, then
    /// lent until it is measured lent, then lent only where its load is
    /// lower than held's by more than [`LEND_MARGIN`], the other
    /// placement again for one sample in every [`LEND_REVISIT`].
    pub fn placement(&self, n: usize) -> Placement {
        match self.lend {
            LendPolicy::Never => Placement::Held,
            LendPolicy::Always => Placement::Lent,
            LendPolicy::Measured => {
                let n = n.max(1);
                if !self.measured_at(Placement::Held, n) {
                    return Placement::Held;
                }
                let revisit =
                    self.visits.get(&n).copied().unwrap_or(0) % LEND_REVISIT == LEND_REVISIT - 1;
                match self.compared(n) {
                    None => Placement::Lent,
                    Some(p) if revisit => p.other(),
                    Some(p) => p,
                }
            }
        }
    }

    /// The cheaper placement at exactly `n` streams once both were
    /// measured there (lent only by more than [`LEND_MARGIN`]).
    fn compared(&self, n: usize) -> Option<Placement> {
        let n = n.max(1);
        if !Placement::ALL.iter().all(|&p| self.measured_at(p, n)) {
            return None;
        }
        match (
            self.utilization_at(Placement::Held, n),
            self.utilization_at(Placement::Lent, n),
        ) {
            (Some(h), Some(l)) if l < h * (1.0 - LEND_MARGIN) => Some(Placement::Lent),
            _ => Some(Placement::Held),
        }
    }

    /// Streams this process keeps continuous: the largest `n` (up to the
    /// fixed bound) whose every `k ≤ n` needs at most the target share.
    /// At least one once anything is measured (a machine too slow for one
    /// real-time stream still serves one: the slowest answer beats none,
    /// and it is logged); `None` before that.
    pub fn streams(&self) -> Option<usize> {
        self.utilization(1)?;
        let mut n = 1;
        while n < self.max_streams {
            match self.utilization(n + 1) {
                Some(u) if u <= self.target => n += 1,
                _ => break,
            }
        }
        Some(n)
    }

    /// Whether one more stream fits beside `computing`: `None` while the
    /// capacity is unknown (the fixed bound decides).
    pub fn admits(&self, computing: usize) -> Option<bool> {
        self.streams().map(|s| computing < s)
    }

    /// `computing` streams against the capacity, 0..1 while admission
    /// holds (above 1 only when the capacity fell under streams already
    /// admitted); `None` while unknown.
    pub fn load(&self, computing: usize) -> Option<f64> {
        self.streams().map(|s| computing as f64 / s as f64)
    }
}

/// Cuts the engine's running figures into windows of steady concurrency
/// and turns each into one cost sample per group.
#[derive(Clone, Debug, Default)]
pub struct Sampler {
    window: Option<Window>,
}

#[derive(Clone, Copy, Debug)]
struct Window {
    at: Instant,
    busy: [Duration; MAX_GROUPS],
    frames: u64,
    /// The vocoder's steps so far per [`Placement`].
    steps: [u64; 2],
    /// Where the vocoder's last step ran, as far as the counts tell
    /// (`None` after a window in which both placements stepped): a window
    /// in which no step started was spent in that step.
    last: Option<Placement>,
    n: usize,
    /// The first window after `n` changed holds the newcomer's prefill
    /// (or a leaver's drain): it closes without a sample.
    settled: bool,
}

impl Sampler {
    /// Looks at the figures at `now`: each group's busy total, frames made
    /// so far, the vocoder's steps so far per [`Placement`] and the streams
    /// computing. Returns `(n, placement, cost per group)` when a window of
    /// steady `n` closed with enough frames; a change of `n` (a stream
    /// admitted or ended, whose prefill or drain would blur the figure)
    /// starts a new window. A window in which the vocoder stepped at both
    /// placements makes no sample; one in which no step of it started was
    /// spent in its last step, and counts at that step's placement (held
    /// before any).
    pub fn sample(
        &mut self,
        now: Instant,
        busy: [Duration; MAX_GROUPS],
        frames: u64,
        steps: [u64; 2],
        n: usize,
    ) -> Option<(usize, Placement, [f64; MAX_GROUPS])> {
        let Some(w) = self.window else {
            self.window = Some(Window {
                at: now,
                busy,
                frames,
                steps,
                last: Some(Placement::Held),
                n,
                settled: false,
            });
            return None;
        };
        let stepped = |p: Placement| steps[p.index()] > w.steps[p.index()];
        let ran = match (stepped(Placement::Held), stepped(Placement::Lent)) {
            (true, true) => None,
            (false, true) => Some(Placement::Lent),
            (true, false) => Some(Placement::Held),
            (false, false) => w.last,
        };
        let fresh = Window {
            at: now,
            busy,
            frames,
            steps,
            last: ran,
            n,
            settled: false,
        };
        let elapsed = now.saturating_duration_since(w.at);
        let made = frames.saturating_sub(w.frames);
        if w.n != n || n == 0 || frames < w.frames {
            self.window = Some(fresh);
            return None;
        }
        if made < MIN_FRAMES || elapsed < MIN_WINDOW {
            if elapsed > MAX_WINDOW {
                self.window = Some(Window {
                    settled: w.settled,
                    ..fresh
                });
            } else if ran != w.last {
                // Still open; its placement so far is what a step-less
                // remainder inherits.
                self.window = Some(Window { last: ran, ..w });
            }
            return None;
        }
        self.window = Some(Window {
            settled: true,
            ..fresh
        });
        if !w.settled {
            return None;
        }
        let placement = ran?;
        let mut cost = [0.0; MAX_GROUPS];
        for (c, (now_b, then_b)) in cost.iter_mut().zip(busy.iter().zip(w.busy)) {
            *c = now_b.saturating_sub(then_b).as_secs_f64() / made as f64;
        }
        Some((n, placement, cost))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn busy_time_is_the_union_of_overlapping_steps() {
        let t0 = Instant::now();
        let mut c = BusyClock::default();
        c.enter(t0);
        c.enter(t0 + ms(10)); // a second stage joins
        c.exit(t0 + ms(30));
        assert_eq!(c.total(t0 + ms(35)), ms(35), "still busy: counted to now");
        c.exit(t0 + ms(40));
        c.enter(t0 + ms(100));
        c.exit(t0 + ms(110));
        assert_eq!(
            c.total(t0 + ms(500)),
            ms(50),
            "40 + 10, the gap not counted"
        );
        c.exit(t0 + ms(600));
        assert_eq!(
            c.total(t0 + ms(700)),
            ms(50),
            "a stray exit changes nothing"
        );
    }

    #[test]
    fn costs_between_samples_are_interpolated_and_beyond_them_held() {
        let mut c = CostCurve::default();
        assert_eq!(c.cost(1), None);
        c.observe(1, 0.040);
        c.observe(4, 0.016);
        assert_eq!(c.cost(1), Some(0.040));
        assert!((c.cost(2).unwrap() - 0.032).abs() < 1e-12);
        assert_eq!(c.cost(8), Some(0.016), "no batching gain assumed past 4");
        let mut hi = CostCurve::default();
        hi.observe(2, 0.030);
        assert_eq!(
            hi.cost(1),
            Some(0.060),
            "below the smallest sample the step time is held"
        );
    }

    #[test]
    fn a_sample_moves_the_average_and_bounds_its_neighbours() {
        let mut c = CostCurve::default();
        c.observe(3, 0.100); // measured while the host was busy
        c.observe(1, 0.040);
        c.observe(2, 0.030);
        assert_eq!(c.cost(3), Some(0.030), "a larger batch is never dearer");
        c.observe(2, 0.050);
        // 0.030 + 0.25 * 0.020 = 0.035; 1 stays 0.040; 3 is 0.030.
        assert!((c.cost(2).unwrap() - 0.035).abs() < 1e-12);
        c.observe(3, 0.060);
        assert!(c.cost(2).unwrap() >= c.cost(3).unwrap());
        assert!(c.cost(1).unwrap() >= c.cost(2).unwrap());
        c.observe(1, f64::NAN);
        c.observe(0, 1.0);
        assert_eq!(c.points().count(), 3, "nothing learned from nonsense");
    }

    fn host(costs: &[(usize, f64)], target: f64, max: usize) -> CapacityModel {
        let mut m = CapacityModel::new(1, 12.5, target, max);
        for &(n, c) in costs {
            m.observe(Placement::Held, 0, n, c);
        }
        m
    }

    #[test]
    fn capacity_is_the_most_streams_within_the_target_share() {
        // One stream: 48 ms per frame (rtf 0.6); three: 28.5 ms each.
        let m = host(&[(1, 0.048), (3, 0.0285)], 0.9, 16);
        assert!((m.utilization(1).unwrap() - 0.6).abs() < 1e-9);
        // Two: interpolated 38.25 ms → 0.956 > 0.9.
        assert_eq!(m.streams(), Some(1));
        let m = host(&[(1, 0.048), (2, 0.034), (3, 0.0285)], 0.9, 16);
        // Two: 0.85; three: 1.07.
        assert_eq!(m.streams(), Some(2));
        assert_eq!(m.admits(1), Some(true));
        assert_eq!(m.admits(2), Some(false));
        assert_eq!(m.load(1), Some(0.5));
        assert_eq!(
            host(&[(1, 0.001)], 0.9, 6).streams(),
            Some(6),
            "the fixed bound holds"
        );
    }

    #[test]
    fn an_unmeasured_process_defers_to_the_fixed_bound() {
        let m = CapacityModel::new(2, 12.5, 0.9, 16);
        assert_eq!(m.streams(), None);
        assert_eq!(m.admits(15), None);
        assert_eq!(m.load(3), None);
    }

    #[test]
    fn a_host_too_slow_for_one_stream_still_serves_one() {
        let m = host(&[(1, 0.140)], 0.9, 16);
        assert!(m.utilization(1).unwrap() > 1.0);
        assert_eq!(m.streams(), Some(1));
        assert_eq!(m.admits(0), Some(true));
        assert_eq!(m.admits(1), Some(false));
    }

    #[test]
    fn the_busiest_group_decides() {
        let mut m = CapacityModel::new(2, 12.5, 0.9, 16);
        m.observe(Placement::Held, 0, 1, 0.020); // LMs: 0.25 of their cores per stream
        m.observe(Placement::Held, 1, 1, 0.030); // vocoder: 0.375
        assert!((m.utilization(1).unwrap() - 0.375).abs() < 1e-9);
        assert!((m.utilization(2).unwrap() - 0.75).abs() < 1e-9);
        assert_eq!(m.streams(), Some(2));
        let one = CapacityModel { groups: 1, ..m };
        assert_eq!(one.streams(), Some(3), "a second group is ignored with one");
    }

    #[test]
    fn samples_come_from_windows_of_steady_concurrency() {
        let t0 = Instant::now();
        let mut s = Sampler::default();
        const H: [u64; 2] = [0, 0];
        let busy = |a: u64, b: u64| [ms(a), ms(b)];
        assert_eq!(s.sample(t0, busy(0, 0), 0, H, 2), None, "opens a window");
        // The first window after a change of `n` holds the prefill: no sample.
        assert_eq!(
            s.sample(t0 + ms(300), busy(200, 5), 6, H, 2),
            None,
            "settling"
        );
        let t0 = t0 + ms(300);
        let busy = |a: u64, b: u64| [ms(a + 200), ms(b + 5)];
        let f = |v: u64| v + 6;
        assert_eq!(
            s.sample(t0 + ms(100), busy(50, 10), f(4), H, 2),
            None,
            "too short"
        );
        let (n, _, c) = s.sample(t0 + ms(400), busy(240, 40), f(10), H, 2).unwrap();
        assert_eq!(n, 2);
        assert!((c[0] - 0.024).abs() < 1e-12 && (c[1] - 0.004).abs() < 1e-12);
        // A stream arrives: the window restarts, and the one holding its
        // prefill is not sampled.
        assert_eq!(s.sample(t0 + ms(450), busy(300, 40), f(11), H, 3), None);
        assert_eq!(s.sample(t0 + ms(700), busy(400, 50), f(20), H, 3), None);
        let (n, _, c) = s.sample(t0 + ms(900), busy(500, 50), f(30), H, 3).unwrap();
        assert_eq!(n, 3);
        assert!((c[0] - 0.010).abs() < 1e-12 && c[1] == 0.0);
        // Idle streams (paused, waiting for text) make no sample and, past
        // the longest window, restart it instead of averaging idle time.
        assert_eq!(s.sample(t0 + ms(6000), busy(501, 50), f(31), H, 3), None);
        let (n, _, _) = s.sample(t0 + ms(6300), busy(600, 60), f(40), H, 3).unwrap();
        assert_eq!(n, 3, "a restarted window of the same streams stays settled");
        assert_eq!(
            s.sample(t0 + ms(6600), busy(700, 60), f(50), H, 0),
            None,
            "no streams"
        );
    }

    fn lending(held: &[(usize, f64)], lent: &[(usize, f64)]) -> CapacityModel {
        let mut m = CapacityModel::new(1, 12.5, 0.9, 16).with_lending(LendPolicy::Measured);
        for &(n, c) in held {
            m.observe(Placement::Held, 0, n, c);
        }
        for &(n, c) in lent {
            m.observe(Placement::Lent, 0, n, c);
        }
        m
    }

    #[test]
    fn a_measured_policy_tries_held_then_lent_then_keeps_the_cheaper() {
        let m = lending(&[], &[]);
        assert_eq!(m.placement(2), Placement::Held, "nothing measured: held");
        assert!(!m.measured(2));
        let m = lending(&[(2, 0.040)], &[]);
        assert_eq!(m.placement(2), Placement::Lent, "held measured: try lent");
        assert!(!m.measured(2), "both placements are wanted");
        assert_eq!(m.placement(3), Placement::Held, "3 not measured held yet");
        // Held 2 streams: 12.5 * 2 * 0.040 = 1.0; lent 0.034: 0.85.
        let m = lending(&[(2, 0.040)], &[(2, 0.034)]);
        assert!(m.measured(2));
        assert_eq!(m.placement(2), Placement::Lent);
        assert!((m.utilization(2).unwrap() - 0.85).abs() < 1e-9);
        assert_eq!(m.streams(), Some(2), "2 fits at its lent load");
        // Within the margin a tie stays held, and so does its load.
        let m = lending(&[(2, 0.040)], &[(2, 0.0395)]);
        assert_eq!(m.placement(2), Placement::Held);
        assert!((m.utilization(2).unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(m.streams(), Some(1));
        // The placement not chosen is revisited once every LEND_REVISIT
        // samples, and capacity keeps counting on the chosen one.
        let mut m = lending(&[(2, 0.040)], &[(2, 0.034)]);
        let mut seen = [0; 2];
        for _ in 0..2 * LEND_REVISIT {
            let p = m.placement(2);
            seen[p.index()] += 1;
            m.observe(p, 0, 2, if p == Placement::Lent { 0.034 } else { 0.040 });
            assert!((m.utilization(2).unwrap() - 0.85).abs() < 1e-9);
        }
        assert_eq!(seen, [2, 2 * LEND_REVISIT as usize - 2]);
        // Exploring does not change what capacity counts on.
        let m = lending(&[(1, 0.048), (2, 0.034)], &[]);
        assert_eq!(m.placement(2), Placement::Lent);
        assert!((m.utilization(2).unwrap() - 0.85).abs() < 1e-9);
        assert_eq!(m.streams(), Some(2));
    }

    #[test]
    fn fixed_policies_use_their_own_curves() {
        let mut m = CapacityModel::new(1, 12.5, 0.9, 16);
        m.observe(Placement::Held, 0, 1, 0.048);
        m.observe(Placement::Lent, 0, 1, 0.010);
        assert_eq!(m.placement(1), Placement::Held);
        assert!((m.utilization(1).unwrap() - 0.6).abs() < 1e-9);
        let m = m.with_lending(LendPolicy::Always);
        assert_eq!(m.placement(1), Placement::Lent);
        assert!(m.measured(1));
        assert!((m.utilization(1).unwrap() - 0.125).abs() < 1e-9);
    }

    #[test]
    fn a_window_is_sampled_at_the_one_placement_it_ran() {
        let t0 = Instant::now();
        let mut s = Sampler::default();
        let busy = |a: u64| [ms(a), ms(0)];
        assert_eq!(s.sample(t0, busy(0), 0, [0, 0], 2), None);
        assert_eq!(
            s.sample(t0 + ms(200), busy(150), 6, [2, 0], 2),
            None,
            "settling"
        );
        let (n, p, c) = s.sample(t0 + ms(400), busy(300), 12, [4, 0], 2).unwrap();
        assert_eq!((n, p), (2, Placement::Held));
        assert!((c[0] - 0.025).abs() < 1e-12);
        assert_eq!(
            s.sample(t0 + ms(600), busy(420), 18, [5, 1], 2),
            None,
            "the placement changed inside the window"
        );
        let (_, p, c) = s.sample(t0 + ms(800), busy(540), 24, [5, 3], 2).unwrap();
        assert_eq!(p, Placement::Lent);
        assert!((c[0] - 0.020).abs() < 1e-12);
        // No step started: the window was spent in the last one (lent).
        let (_, p, _) = s.sample(t0 + ms(1000), busy(660), 30, [5, 3], 2).unwrap();
        assert_eq!(p, Placement::Lent);
        // Both placements, then nothing started: neither window is sampled.
        assert_eq!(s.sample(t0 + ms(1200), busy(780), 36, [6, 4], 2), None);
        assert_eq!(s.sample(t0 + ms(1400), busy(900), 42, [6, 4], 2), None);
        let (_, p, _) = s.sample(t0 + ms(1600), busy(1020), 48, [7, 4], 2).unwrap();
        assert_eq!(p, Placement::Held);
    }
}
