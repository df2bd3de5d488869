//! The router's per-request rules, apart from the actor that applies them:
//! a request's [`Lifecycle`] and the admission ledger ([`Admission`],
//! [`request_cost`]). Pure, so their tables are unit-tested here.

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

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
