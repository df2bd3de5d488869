//! The router's per-request rules, apart from the actor that applies them:
//! a request's [`Lifecycle`] and the admission ledger ([`Admission`],
//! [`request_cost`]). Pure, so their tables are unit-tested here.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tts_models::Qwen3Tts;

use crate::config::EngineConfig;
use crate::contract::{RequestKey, SessionId};
use crate::error::EngineError;

/// Where a request is at the router. Each state says what is still owed:
/// events (`Running` only), the drop of its stage state (`Abandoned`,
/// `Dropping`) and the ledger reservation (every state but `Released`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// Events are still being produced.
    Running,
    /// The consumer dropped its stream before the end; the next tick starts
    /// dropping its stage state (dropping needs the actor context).
    Abandoned,
    /// No more events will be produced (cancel, failure, abandonment); its
    /// stage state is being dropped, and the reservation returns once every
    /// stage answered.
    Dropping,
    /// No more events and the reservation is back in the ledger; the entry
    /// stays until its last event reached the consumer.
    Released,
}

impl Lifecycle {
    pub fn is_running(self) -> bool {
        self == Lifecycle::Running
    }

    /// The consumer went away: a running request is abandoned; a request
    /// that already ended is unchanged.
    pub fn abandon(&mut self) {
        if self.is_running() {
            *self = Lifecycle::Abandoned;
        }
    }

    /// Ends a running request and starts dropping its stage state (cancel,
    /// failure). False (and unchanged) if it had already ended.
    pub fn stop(&mut self) -> bool {
        let running = self.is_running();
        if running {
            *self = Lifecycle::Dropping;
        }
        running
    }

    /// The tick picks up an abandoned request: true if its stage drop must
    /// start now (once).
    pub fn drop_abandoned(&mut self) -> bool {
        let abandoned = *self == Lifecycle::Abandoned;
        if abandoned {
            *self = Lifecycle::Dropping;
        }
        abandoned
    }

    /// The request's reservation goes back to the ledger: true the first
    /// time only.
    pub fn release(&mut self) -> bool {
        let held = *self != Lifecycle::Released;
        *self = Lifecycle::Released;
        held
    }
}

/// What admission looks at for one submit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Admission {
    pub shutting_down: bool,
    /// The session's request in progress, if any.
    pub busy: Option<RequestKey>,
    /// Requests in flight (all sessions) and the most allowed at once.
    pub in_flight: u64,
    pub max_in_flight: u64,
    /// Streams this process keeps continuous, when admission is by
    /// real-time capacity and the capacity is known
    /// ([`crate::capacity::CapacityModel::streams`]).
    pub realtime_streams: Option<u64>,
    /// Bytes reserved in the ledger and the memory budget.
    pub reserved: u64,
    pub budget: u64,
}

impl Admission {
    /// Admits a request of `cost` ledger bytes for `session`, or names the
    /// first rule that refuses it: shutting down, session busy, active
    /// requests, real-time capacity, then memory.
    pub fn check(&self, session: SessionId, cost: u64) -> Result<(), EngineError> {
        if self.shutting_down {
            return Err(EngineError::ShuttingDown);
        }
        if let Some(active) = self.busy {
            return Err(EngineError::SessionBusy { session, active });
        }
        if self.in_flight >= self.max_in_flight {
            return Err(EngineError::AtCapacity {
                resource: "active requests",
                needed: 1,
                in_use: self.in_flight,
                limit: self.max_in_flight,
            });
        }
        if let Some(limit) = self.realtime_streams {
            if self.in_flight >= limit {
                return Err(EngineError::AtCapacity {
                    resource: "real-time streams (what this machine keeps continuous)",
                    needed: 1,
                    in_use: self.in_flight,
                    limit,
                });
            }
        }
        if self.reserved + cost > self.budget {
            return Err(EngineError::AtCapacity {
                resource: "bytes of memory",
                needed: cost,
                in_use: self.reserved,
                limit: self.budget,
            });
        }
        Ok(())
    }
}

/// Ledger cost of a request: its talker KV cache at full length (prompt
/// rows + `max_frames`, capped by `kv_positions_cap` and the position
/// table) and the audio it may buffer for a slow consumer (the hard bound).
/// Decoder state and the predictor's per-frame cache are small and fixed
/// per request and not counted yet.
pub(crate) fn request_cost(
    model: &Qwen3Tts,
    config: &EngineConfig,
    prompt_rows: usize,
    max_frames: usize,
) -> u64 {
    let max_pos = model.config.talker.lm.max_position_embeddings;
    let positions = (prompt_rows + max_frames)
        .min(config.kv_positions_cap.unwrap_or(max_pos))
        .min(max_pos);
    let audio =
        (config.hard_unacked_audio_s * model.code2wav.sample_rate() as f64).ceil() as u64 * 4;
    model.session_kv_bytes(positions) as u64 + audio
}

/// How long a passed probe holds its place while its request is built
/// (tokenization, text projection; a first clone's reference decode can
/// take seconds at full size). A submit past it is checked on its own.
pub(crate) const PROBE_HOLD: Duration = Duration::from_secs(10);

/// Places held by probes that passed and whose submits have not come yet,
/// by session, with when each probed. Each counts as a request in flight
/// for everyone else's probes and submits, so a burst that arrives
/// together is refused at the probe, in a round trip to the router,
/// instead of each refused request first building its prompt on cores the
/// admitted ones need (docs/limits.md, "Real-time capacity").
#[derive(Debug, Default)]
pub(crate) struct ProbeHolds {
    held: HashMap<SessionId, Instant>,
}

impl ProbeHolds {
    /// Drops the holds older than [`PROBE_HOLD`] at `now`.
    pub fn expire(&mut self, now: Instant) {
        self.held
            .retain(|_, at| now.saturating_duration_since(*at) < PROBE_HOLD);
    }

    /// Holds a place for `session` from `now` (a later probe of the same
    /// session renews it).
    pub fn hold(&mut self, session: SessionId, now: Instant) {
        self.held.insert(session, now);
    }

    /// `session`'s submit came, or its request was dropped before it.
    pub fn release(&mut self, session: SessionId) {
        self.held.remove(&session);
    }

    /// The places held by sessions other than `session`.
    pub fn others(&self, session: SessionId) -> u64 {
        self.held.keys().filter(|&&s| s != session).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    /// A probe's place counts for every other session until its submit
    /// (or its release) and lapses after [`PROBE_HOLD`]: time in hand.
    #[test]
    fn a_probe_holds_a_place_until_its_submit_or_its_lapse() {
        let t0 = Instant::now();
        let mut h = ProbeHolds::default();
        h.hold(1, t0);
        assert_eq!((h.others(1), h.others(2)), (0, 1));
        h.hold(2, t0 + Duration::from_secs(3));
        assert_eq!((h.others(1), h.others(2), h.others(3)), (1, 1, 2));
        // A renewed probe is still one place.
        h.hold(2, t0 + Duration::from_secs(4));
        assert_eq!(h.others(3), 2);
        h.release(1);
        assert_eq!(h.others(3), 1);
        h.release(1);
        assert_eq!(h.others(3), 1, "releasing twice is harmless");
        h.expire(t0 + Duration::from_secs(4) + PROBE_HOLD - Duration::from_millis(1));
        assert_eq!(h.others(3), 1, "not lapsed yet");
        h.expire(t0 + Duration::from_secs(4) + PROBE_HOLD);
        assert_eq!(h.others(3), 0, "lapsed");
    }

    /// With the holds counted as requests in flight, the probes of a burst
    /// past the capacity are refused and a submit is not refused for its
    /// own hold.
    #[test]
    fn held_places_count_against_the_real_time_capacity() {
        let t0 = Instant::now();
        let mut h = ProbeHolds::default();
        let rules = |in_flight: u64| Admission {
            shutting_down: false,
            busy: None,
            in_flight,
            max_in_flight: 16,
            realtime_streams: Some(2),
            reserved: 0,
            budget: u64::MAX,
        };
        // One stream runs; sessions 1, 2 and 3 probe together.
        let mut passed = Vec::new();
        for s in 1..=3 {
            if rules(1 + h.others(s)).check(s, 0).is_ok() {
                h.hold(s, t0);
                passed.push(s);
            }
        }
        assert_eq!(passed, [1], "one place was left");
        let e = rules(1 + h.others(2)).check(2, 0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AtCapacity);
        // Session 1's submit: its own hold does not count against it.
        h.release(1);
        assert!(rules(1 + h.others(1)).check(1, 0).is_ok());
    }

    use Lifecycle::*;

    /// Applies one event to a copy of `s`: the state after, and what the
    /// event's method answered.
    fn after(s: Lifecycle, event: &str) -> (Lifecycle, bool) {
        let mut s = s;
        let r = match event {
            "abandon" => {
                s.abandon();
                false
            }
            "stop" => s.stop(),
            "drop_abandoned" => s.drop_abandoned(),
            "release" => s.release(),
            _ => unreachable!(),
        };
        (s, r)
    }

    #[test]
    fn lifecycle_transitions_follow_the_table() {
        // (state, event) -> (state after, answer)
        let table = [
            (Running, "abandon", Abandoned, false),
            (Running, "stop", Dropping, true),
            (Running, "drop_abandoned", Running, false),
            (Running, "release", Released, true),
            (Abandoned, "abandon", Abandoned, false),
            (Abandoned, "stop", Abandoned, false),
            (Abandoned, "drop_abandoned", Dropping, true),
            (Abandoned, "release", Released, true),
            (Dropping, "abandon", Dropping, false),
            (Dropping, "stop", Dropping, false),
            (Dropping, "drop_abandoned", Dropping, false),
            (Dropping, "release", Released, true),
            (Released, "abandon", Released, false),
            (Released, "stop", Released, false),
            (Released, "drop_abandoned", Released, false),
            (Released, "release", Released, false),
        ];
        for (s, e, want, answer) in table {
            assert_eq!(after(s, e), (want, answer), "{s:?} --{e}-->");
        }
        assert!(Running.is_running());
        assert!([Abandoned, Dropping, Released]
            .iter()
            .all(|s| !s.is_running()));
    }

    #[test]
    fn a_cancelled_or_failed_request_returns_its_reservation_once() {
        let mut s = Running;
        assert!(s.stop());
        assert!(!s.stop(), "a second cancel or failure does nothing");
        assert!(s.release());
        assert!(!s.release(), "the ledger is credited once");
    }

    fn open() -> Admission {
        Admission {
            shutting_down: false,
            busy: None,
            in_flight: 1,
            max_in_flight: 2,
            realtime_streams: None,
            reserved: 60,
            budget: 100,
        }
    }

    fn refusal(a: Admission, cost: u64) -> ErrorKind {
        a.check(7, cost).expect_err("refused").kind()
    }

    #[test]
    fn admission_fills_the_budget_exactly_and_no_further() {
        assert!(
            open().check(7, 40).is_ok(),
            "reserved + cost == budget fits"
        );
        match open().check(7, 41) {
            Err(EngineError::AtCapacity {
                resource,
                needed,
                in_use,
                limit,
            }) => assert_eq!(
                (resource, needed, in_use, limit),
                ("bytes of memory", 41, 60, 100)
            ),
            other => panic!("{other:?}"),
        }
        let full = Admission {
            in_flight: 2,
            ..open()
        };
        match full.check(7, 1) {
            Err(EngineError::AtCapacity {
                resource, limit, ..
            }) => assert_eq!((resource, limit), ("active requests", 2)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn admission_names_the_first_rule_that_refuses() {
        let everything = Admission {
            shutting_down: true,
            busy: Some(RequestKey {
                session: 7,
                epoch: 3,
            }),
            in_flight: 2,
            max_in_flight: 2,
            realtime_streams: Some(1),
            reserved: 100,
            budget: 100,
        };
        assert_eq!(refusal(everything, 1), ErrorKind::ShuttingDown);
        let busy = Admission {
            shutting_down: false,
            ..everything
        };
        assert_eq!(refusal(busy, 1), ErrorKind::SessionBusy);
        let crowded = Admission { busy: None, ..busy };
        match crowded.check(7, 1) {
            Err(EngineError::AtCapacity { resource, .. }) => {
                assert_eq!(resource, "active requests", "requests before memory")
            }
            other => panic!("{other:?}"),
        }
        match busy.check(7, 1) {
            Err(EngineError::SessionBusy { session, active }) => {
                assert_eq!((session, active.epoch), (7, 3))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn real_time_capacity_refuses_before_the_fixed_bound_and_after_it() {
        let measured = Admission {
            in_flight: 2,
            max_in_flight: 16,
            realtime_streams: Some(2),
            ..open()
        };
        match measured.check(7, 1) {
            Err(EngineError::AtCapacity {
                resource,
                in_use,
                limit,
                ..
            }) => {
                assert!(resource.starts_with("real-time streams"), "{resource}");
                assert_eq!((in_use, limit), (2, 2));
            }
            other => panic!("{other:?}"),
        }
        let room = Admission {
            in_flight: 1,
            ..measured
        };
        assert!(room.check(7, 1).is_ok());
        let unknown = Admission {
            realtime_streams: None,
            ..measured
        };
        assert!(
            unknown.check(7, 1).is_ok(),
            "unknown: the fixed bound decides"
        );
        let fixed_first = Admission {
            in_flight: 16,
            realtime_streams: Some(1),
            ..measured
        };
        match fixed_first.check(7, 1) {
            Err(EngineError::AtCapacity { resource, .. }) => {
                assert_eq!(resource, "active requests")
            }
            other => panic!("{other:?}"),
        }
    }
}
