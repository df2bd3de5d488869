//! Buffer slack: which stream is closest to underrun, and the order the
//! stage schedulers take work in.
//!
//! Each admitted stream's slack is the audio its listener has and has not
//! played yet ([`FlowGate::slack_at`]: from playback acks where the client
//! sends them, from wall time where not). Before a round a stage:
//! - **holds** the inputs of a stream far ahead (at least [`HOLD_S`]
//!   buffered) while another stream that could use the cores is close to
//!   underrun (under [`URGENT_S`]), for at most [`MAX_HOLD`] per input, so
//!   the late one's steps are smaller and come sooner; offline work (no
//!   listener) is always far ahead;
//! - **orders** the rest so each step takes the least slack first: every
//!   request's first input of the round by slack, then every second input,
//!   and so on (a request's inputs keep their order, and a step still
//!   batches one input of as many requests as it can).
//!
//! The rules are pure functions of a [`Snapshot`] taken at one instant, so
//! their tests control time.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::contract::RequestKey;
use crate::flow::{FlowGate, LiveFeed};

/// A stream with less than this much audio in hand is close to underrun:
/// work for it comes before work for streams far ahead.
pub const URGENT_S: f64 = 0.5;

/// A stream with at least this much audio in hand can wait while another
/// is close to underrun: more than the largest chunk (8 frames, 0.64 s)
/// above [`URGENT_S`], so holding it never makes it urgent itself.
pub const HOLD_S: f64 = 2.0;

/// Longest one input is held for another stream's sake: a stream far
/// ahead is slowed, never stopped.
pub const MAX_HOLD: Duration = Duration::from_millis(500);

/// The streams the stages schedule by: the router registers each admitted
/// request and forgets it when it ends.
#[derive(Debug, Default)]
pub struct SlackBoard {
    streams: Mutex<HashMap<RequestKey, Listener>>,
}

/// What the router registers of an admitted stream.
#[derive(Debug)]
pub struct Listener {
    pub gate: Arc<FlowGate>,
    pub live: Option<Arc<LiveFeed>>,
    /// No one listens as it is made (a whole-file answer): always far
    /// ahead.
    pub offline: bool,
    /// The prebuffer its listener declared (`None`: the engine's). The
    /// code2wav stage paces its chunks by it (`stage::pace`), and the
    /// gate's wall-time listener holds it before playing
    /// ([`FlowGate::with_listener_prebuffer`]), so a client that buffers
    /// more yields to one that buffers less. Without a declaration the
    /// slack counts playback from the first chunk (conservative: a stream
    /// is never taken for further ahead than it is).
    pub prebuffer: Option<Duration>,
}

impl SlackBoard {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RequestKey, Listener>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Router: `key` is admitted.
    pub(crate) fn register(&self, key: RequestKey, listener: Listener) {
        self.lock().insert(key, listener);
    }

    /// The prebuffer `key`'s listener declared, if it did.
    pub fn prebuffer(&self, key: RequestKey) -> Option<Duration> {
        self.lock().get(&key).and_then(|l| l.prebuffer)
    }

    /// Router: `key` ended.
    pub(crate) fn forget(&self, key: RequestKey) {
        self.lock().remove(&key);
    }

    /// Every stream's slack at `now`.
    pub fn snapshot(&self, now: Instant) -> Snapshot {
        let streams = self.lock();
        let slack = streams
            .iter()
            .map(|(k, r)| {
                let s = if r.offline {
                    f64::INFINITY
                } else {
                    r.gate.slack_at(now)
                };
                // A live request parked for its text cannot use the cores:
                // its slack says nothing about who should get them.
                let computing = !r.live.as_ref().is_some_and(|f| f.is_waiting());
                (
                    *k,
                    Stream {
                        slack: s,
                        computing,
                    },
                )
            })
            .collect();
        Snapshot { streams: slack }
    }
}

/// One stream as a [`Snapshot`] saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stream {
    /// Seconds of audio in hand (negative: waiting that long for its first
    /// chunk; infinite: offline).
    pub slack: f64,
    /// Able to use the cores now (not parked waiting for text).
    pub computing: bool,
}

/// The streams' slack at one instant.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub streams: HashMap<RequestKey, Stream>,
}

impl Snapshot {
    /// `key`'s slack; a request the board does not know (a stage driven
    /// without the router) has no claim either way.
    pub fn slack(&self, key: RequestKey) -> f64 {
        self.streams.get(&key).map_or(f64::INFINITY, |s| s.slack)
    }

    /// Whether `key`'s input, waiting `age` so far, should wait for another
    /// stream's sake: `key` is at least [`HOLD_S`] ahead and another
    /// stream that can use the cores has less than [`URGENT_S`].
    pub fn holds(&self, key: RequestKey, age: Duration) -> bool {
        let Some(me) = self.streams.get(&key) else {
            return false;
        };
        age < MAX_HOLD
            && me.slack >= HOLD_S
            && self
                .streams
                .iter()
                .any(|(k, s)| *k != key && s.computing && s.slack < URGENT_S)
    }
}

/// Moves the inputs `snapshot` holds out of `ready` into `held` (their
/// order kept in both), given each input's request and age.
pub fn hold<I>(
    ready: &mut VecDeque<I>,
    held: &mut Vec<I>,
    snapshot: &Snapshot,
    key: impl Fn(&I) -> RequestKey,
    age: impl Fn(&I) -> Duration,
) {
    if ready.is_empty() || snapshot.streams.len() < 2 {
        return;
    }
    let mut keep = VecDeque::with_capacity(ready.len());
    for i in ready.drain(..) {
        if snapshot.holds(key(&i), age(&i)) {
            held.push(i);
        } else {
            keep.push_back(i);
        }
    }
    *ready = keep;
}

/// Orders `ready` for a round: each request's first input, least slack
/// first, then each request's second input the same way, and so on. Ties
/// keep their arrival order; so does each request's own inputs.
pub fn order<I>(
    ready: &mut VecDeque<I>,
    key: impl Fn(&I) -> RequestKey,
    slack: impl Fn(RequestKey) -> f64,
) {
    if ready.len() < 2 {
        return;
    }
    let mut seen: HashMap<RequestKey, usize> = HashMap::new();
    let mut ranked: Vec<(usize, f64, usize, I)> = ready
        .drain(..)
        .enumerate()
        .map(|(arrival, i)| {
            let k = key(&i);
            let n = seen.entry(k).or_insert(0);
            let occurrence = *n;
            *n += 1;
            (occurrence, slack(k), arrival, i)
        })
        .collect();
    ranked.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
    ready.extend(ranked.into_iter().map(|r| r.3));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(session: u64) -> RequestKey {
        RequestKey { session, epoch: 1 }
    }

    fn snapshot(streams: &[(u64, f64, bool)]) -> Snapshot {
        Snapshot {
            streams: streams
                .iter()
                .map(|&(s, slack, computing)| (key(s), Stream { slack, computing }))
                .collect(),
        }
    }

    /// Items are (session, label).
    fn ordered(items: &[(u64, char)], slack: &[(u64, f64)]) -> String {
        let mut q: VecDeque<(u64, char)> = items.iter().copied().collect();
        let s: HashMap<u64, f64> = slack.iter().copied().collect();
        order(
            &mut q,
            |i| key(i.0),
            |k| s.get(&k.session).copied().unwrap_or(f64::INFINITY),
        );
        q.iter().map(|i| i.1).collect()
    }

    #[test]
    fn the_stream_closest_to_underrun_goes_first() {
        // Session 2 has 0.1 s left, 1 has 3 s, 3 waits for its first chunk.
        let got = ordered(
            &[(1, 'a'), (2, 'b'), (3, 'c')],
            &[(1, 3.0), (2, 0.1), (3, -0.05)],
        );
        assert_eq!(got, "cba");
    }

    #[test]
    fn each_requests_inputs_keep_their_order_and_a_step_still_takes_one_of_each() {
        // 1 is late, 2 ahead: 1's first input, 2's first, then the seconds.
        let got = ordered(
            &[(2, 'p'), (1, 'a'), (2, 'q'), (1, 'b'), (1, 'c')],
            &[(1, 0.1), (2, 1.0)],
        );
        assert_eq!(got, "apbqc");
    }

    #[test]
    fn equal_or_unknown_slack_keeps_the_arrival_order() {
        assert_eq!(ordered(&[(1, 'a'), (2, 'b'), (3, 'c')], &[]), "abc");
        assert_eq!(
            ordered(
                &[(1, 'a'), (2, 'b'), (3, 'c')],
                &[(1, 0.3), (2, 0.3), (3, 0.3)]
            ),
            "abc"
        );
    }

    #[test]
    fn a_stream_far_ahead_waits_while_another_is_close_to_underrun() {
        let s = snapshot(&[(1, 3.0, true), (2, 0.2, true)]);
        assert!(s.holds(key(1), Duration::ZERO));
        assert!(!s.holds(key(2), Duration::ZERO), "the late one never waits");
        // Not far enough ahead to wait.
        let s = snapshot(&[(1, 1.5, true), (2, 0.2, true)]);
        assert!(!s.holds(key(1), Duration::ZERO));
        // Nobody close to underrun: nobody waits.
        let s = snapshot(&[(1, 3.0, true), (2, 0.8, true)]);
        assert!(!s.holds(key(1), Duration::ZERO));
    }

    #[test]
    fn a_newcomer_waiting_for_its_first_packet_counts_as_close_to_underrun() {
        let s = snapshot(&[(1, 5.0, true), (2, -0.01, true)]);
        assert!(s.holds(key(1), Duration::ZERO));
    }

    #[test]
    fn a_live_request_parked_for_text_does_not_hold_others() {
        // Its buffer ran dry waiting for the caller's text: the cores
        // cannot help it.
        let s = snapshot(&[(1, 3.0, true), (2, 0.0, false)]);
        assert!(!s.holds(key(1), Duration::ZERO));
    }

    #[test]
    fn offline_work_waits_for_any_stream_close_to_underrun_but_never_past_the_bound() {
        let s = snapshot(&[(1, f64::INFINITY, true), (2, 0.3, true)]);
        assert!(s.holds(key(1), Duration::from_millis(10)));
        assert!(s.holds(key(1), MAX_HOLD - Duration::from_millis(1)));
        assert!(
            !s.holds(key(1), MAX_HOLD),
            "held at most MAX_HOLD per input"
        );
    }

    #[test]
    fn unknown_requests_are_never_held_and_hold_no_one() {
        let s = snapshot(&[(1, 3.0, true)]);
        assert!(!s.holds(key(9), Duration::ZERO));
        assert!(
            !s.holds(key(1), Duration::ZERO),
            "alone: nobody to make room for"
        );
    }

    #[test]
    fn hold_moves_the_held_inputs_aside_in_order() {
        let s = snapshot(&[(1, 3.0, true), (2, 0.1, true)]);
        let mut ready: VecDeque<(u64, char, u64)> =
            [(1, 'a', 0), (2, 'b', 0), (1, 'c', 0), (1, 'd', 900)]
                .into_iter()
                .collect();
        let mut held = Vec::new();
        hold(
            &mut ready,
            &mut held,
            &s,
            |i| key(i.0),
            |i| Duration::from_millis(i.2),
        );
        assert_eq!(held.iter().map(|i| i.1).collect::<String>(), "ac");
        // 'd' waited past the bound already: it goes.
        assert_eq!(ready.iter().map(|i| i.1).collect::<String>(), "bd");
    }

    /// Two wall-time listeners sent the same audio at the same instants:
    /// the one whose client declared a deeper prebuffer has not started
    /// playing, so it has more in hand and the other goes first.
    #[test]
    fn a_client_that_buffers_more_yields_to_one_that_buffers_less() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let board = SlackBoard::default();
        let shallow = FlowGate::created_at(u64::MAX, 1000, t0).with_listener_prebuffer(ms(100));
        let deep = FlowGate::created_at(u64::MAX, 1000, t0).with_listener_prebuffer(ms(1000));
        for g in [&shallow, &deep] {
            g.produced_at(0, 400, t0);
            g.produced_at(1, 400, t0 + ms(300));
        }
        for (k, g) in [(1, shallow), (2, deep)] {
            let listener = Listener {
                gate: Arc::new(g),
                live: None,
                offline: false,
                prebuffer: None,
            };
            board.register(key(k), listener);
        }
        let s = board.snapshot(t0 + ms(600));
        // Shallow: playing since 100 ms, 500 played of 800.
        assert!((s.slack(key(1)) - 0.3).abs() < 1e-9, "{}", s.slack(key(1)));
        // Deep: starts at 1 s, everything in hand.
        assert_eq!(s.slack(key(2)), 0.8);
        let mut ready: VecDeque<(u64, char)> = [(2, 'd'), (1, 's')].into();
        order(&mut ready, |i| key(i.0), |k| s.slack(k));
        assert_eq!(ready.iter().map(|i| i.1).collect::<String>(), "sd");
    }

    #[test]
    fn the_board_reads_each_streams_gate_at_the_snapshots_instant_and_keeps_its_prebuffer() {
        let t0 = Instant::now();
        let board = SlackBoard::default();
        let ahead = Arc::new(FlowGate::created_at(u64::MAX, 1000, t0));
        ahead.produced_at(0, 5000, t0);
        let newcomer = Arc::new(FlowGate::created_at(u64::MAX, 1000, t0));
        let file = Arc::new(FlowGate::created_at(u64::MAX, 1000, t0));
        let listener = |gate, offline, prebuffer| Listener {
            gate,
            live: None,
            offline,
            prebuffer,
        };
        board.register(key(1), listener(ahead, false, None));
        let declared = Some(Duration::from_millis(1500));
        board.register(key(2), listener(newcomer, false, declared));
        board.register(key(3), listener(file, true, None));
        let s = board.snapshot(t0 + Duration::from_millis(1000));
        assert_eq!(s.slack(key(1)), 4.0);
        assert_eq!(s.slack(key(2)), -1.0);
        assert_eq!(s.slack(key(3)), f64::INFINITY);
        assert!(s.holds(key(1), Duration::ZERO) && s.holds(key(3), Duration::ZERO));
        // A declared prebuffer is the listener's, not audio in hand.
        assert_eq!(board.prebuffer(key(2)), declared);
        assert_eq!(board.prebuffer(key(1)), None);
        board.forget(key(2));
        assert_eq!(board.prebuffer(key(2)), None);
        let s = board.snapshot(t0 + Duration::from_millis(1000));
        assert!(!s.holds(key(1), Duration::ZERO), "the newcomer is gone");
    }
}
