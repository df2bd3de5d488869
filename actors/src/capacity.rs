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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Kernel groups at most: `[lm, vocoder]`.
pub const MAX_GROUPS: usize = 2;

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
    curves: [CostCurve; MAX_GROUPS],
    groups: usize,
    frame_rate: f64,
    target: f64,
    max_streams: usize,
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
        }
    }

    /// A sample for group `g` ([`Sampler::sample`]).
    pub fn observe(&mut self, g: usize, n: usize, cost: f64) {
        if let Some(c) = self.curves.get_mut(g) {
            c.observe(n, cost);
        }
    }

    pub fn curve(&self, g: usize) -> &CostCurve {
        &self.curves[g]
    }

    /// The stream counts every group has a figure for.
    pub fn measured_streams(&self) -> Vec<usize> {
        self.curves[0]
            .points()
            .map(|(n, _)| n)
            .filter(|&n| self.measured(n))
            .collect()
    }

    /// Whether every group has a figure measured at exactly `n` streams.
    pub fn measured(&self, n: usize) -> bool {
        self.curves[..self.groups]
            .iter()
            .all(|c| c.points.contains_key(&n))
    }

    /// Share of the busiest group's time `n` real-time streams need;
    /// `None` before any measurement.
    pub fn utilization(&self, n: usize) -> Option<f64> {
        self.curves[..self.groups]
            .iter()
            .filter_map(|c| c.cost(n))
            .map(|c| self.frame_rate * n as f64 * c)
            .reduce(f64::max)
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
    n: usize,
    /// The first window after `n` changed holds the newcomer's prefill
    /// (or a leaver's drain): it closes without a sample.
    settled: bool,
}

impl Sampler {
    /// Looks at the figures at `now`: each group's busy total, frames made
    /// so far and the streams computing. Returns `(n, cost per group)` when
    /// a window of steady `n` closed with enough frames; a change of `n`
    /// (a stream admitted or ended, whose prefill or drain would blur the
    /// figure) starts a new window.
    pub fn sample(
        &mut self,
        now: Instant,
        busy: [Duration; MAX_GROUPS],
        frames: u64,
        n: usize,
    ) -> Option<(usize, [f64; MAX_GROUPS])> {
        let fresh = Window {
            at: now,
            busy,
            frames,
            n,
            settled: false,
        };
        let Some(w) = self.window else {
            self.window = Some(fresh);
            return None;
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
        let mut cost = [0.0; MAX_GROUPS];
        for (c, (now_b, then_b)) in cost.iter_mut().zip(busy.iter().zip(w.busy)) {
            *c = now_b.saturating_sub(then_b).as_secs_f64() / made as f64;
        }
        Some((n, cost))
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
            m.observe(0, n, c);
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
        m.observe(0, 1, 0.020); // LMs: 0.25 of their cores per stream
        m.observe(1, 1, 0.030); // vocoder: 0.375
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
        let busy = |a: u64, b: u64| [ms(a), ms(b)];
        assert_eq!(s.sample(t0, busy(0, 0), 0, 2), None, "opens a window");
        // The first window after a change of `n` holds the prefill: no sample.
        assert_eq!(s.sample(t0 + ms(300), busy(200, 5), 6, 2), None, "settling");
        let t0 = t0 + ms(300);
        let busy = |a: u64, b: u64| [ms(a + 200), ms(b + 5)];
        let f = |v: u64| v + 6;
        assert_eq!(
            s.sample(t0 + ms(100), busy(50, 10), f(4), 2),
            None,
            "too short"
        );
        let (n, c) = s.sample(t0 + ms(400), busy(240, 40), f(10), 2).unwrap();
        assert_eq!(n, 2);
        assert!((c[0] - 0.024).abs() < 1e-12 && (c[1] - 0.004).abs() < 1e-12);
        // A stream arrives: the window restarts, and the one holding its
        // prefill is not sampled.
        assert_eq!(s.sample(t0 + ms(450), busy(300, 40), f(11), 3), None);
        assert_eq!(s.sample(t0 + ms(700), busy(400, 50), f(20), 3), None);
        let (n, c) = s.sample(t0 + ms(900), busy(500, 50), f(30), 3).unwrap();
        assert_eq!(n, 3);
        assert!((c[0] - 0.010).abs() < 1e-12 && c[1] == 0.0);
        // Idle streams (paused, waiting for text) make no sample and, past
        // the longest window, restart it instead of averaging idle time.
        assert_eq!(s.sample(t0 + ms(6000), busy(501, 50), f(31), 3), None);
        let (n, _) = s.sample(t0 + ms(6300), busy(600, 60), f(40), 3).unwrap();
        assert_eq!(n, 3, "a restarted window of the same streams stays settled");
        assert_eq!(
            s.sample(t0 + ms(6600), busy(700, 60), f(50), 0),
            None,
            "no streams"
        );
    }
}
