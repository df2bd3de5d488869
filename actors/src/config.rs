//! Engine configuration, validated in one pass before anything starts.

use std::time::Duration;

use crate::error::{EngineError, Result};

/// Frames per audio chunk: chunk `i` holds `frames[min(i, len - 1)]` frames
/// (fewer for the last). A small first chunk keeps TTFP low; larger later
/// chunks amortise the decoder's per-call cost. The decoder is stateful, so
/// the schedule changes when the audio arrives, not the audio (below f32
/// not a bit of it; at f32 within 1e-5).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ChunkSchedule {
    pub frames: Vec<usize>,
}

impl ChunkSchedule {
    pub fn new(frames: Vec<usize>) -> Result<Self> {
        if frames.is_empty() || frames.contains(&0) {
            return Err(EngineError::Config {
                key: "chunk_frames",
                message: format!("need one or more positive frame counts, got {frames:?}"),
            });
        }
        Ok(ChunkSchedule { frames })
    }

    /// Frames in chunk `i`.
    pub fn size(&self, i: u64) -> usize {
        let last = self.frames.len() - 1;
        self.frames[(i as usize).min(last)]
    }
}

impl Default for ChunkSchedule {
    /// 1 frame (80 ms at 12.5 Hz) first, then 2, 3, 4, 5, 6, then 8 at a
    /// time: [`DEFAULT_CHUNK_FRAMES`].
    fn default() -> Self {
        ChunkSchedule {
            frames: DEFAULT_CHUNK_FRAMES.to_vec(),
        }
    }
}

/// The default chunk schedule (chunks leave earlier where the listener
/// needs them: [`EngineConfig::pace_chunks`]). The first audio leaves
/// after one frame; then chunks grow by about a frame at a time, no faster than a
/// listener's buffer does while synthesis runs at 0.7-0.8 of real time, so
/// a 200 ms prebuffer does not run dry on the way to 8-frame chunks. (With
/// 1, 4, 8 the third chunk, due 12 frames after the first, arrived ~350 ms
/// after the listener had played everything before it at 60 ms per frame:
/// chunk `i` arrives `(F_i - 1) * tpot` after the first, when only
/// `80 ms * F_(i-1)` has been delivered.) Measured in docs/benchmarks.md,
/// "Chunk schedule".
pub const DEFAULT_CHUNK_FRAMES: [usize; 7] = [1, 2, 3, 4, 5, 6, 8];

/// A fault to inject (tests only).
#[cfg(feature = "fault-injection")]
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    pub stage: crate::contract::StageKind,
    /// Fire on the stage's first step numbered `after_steps` or later
    /// (0-based, counted over all requests since the engine started) that
    /// serves at least `min_inputs` inputs. Fires once.
    pub after_steps: u64,
    /// 1 fires at step `after_steps` itself; 2 or more waits for a batched
    /// step (how many inputs a step gathers depends on timing).
    pub min_inputs: usize,
    pub action: FaultAction,
}

/// How long [`FaultAction::StallInRegion`] keeps its region after the
/// watchdog retired its stage.
#[cfg(feature = "fault-injection")]
pub const WEDGE_AFTER_RETIRE: Duration = Duration::from_secs(20);

#[cfg(feature = "fault-injection")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Panic inside the stage's model call.
    Panic,
    /// Block the stage until the watchdog retires it (at most 60 s).
    Stall,
    /// Block the stage inside a kernel parallel region, holding its kernel
    /// team, until the watchdog retires it and for
    /// [`WEDGE_AFTER_RETIRE`] beyond: a kernel that does not
    /// return, as the other stages sharing the team see it.
    StallInRegion,
    /// Hold the step this long (below the deadline: a slow step, not a
    /// stall), so the inputs that arrive meanwhile form one batch.
    Delay(Duration),
    /// Hold every step from `after_steps` on this long, for good: a slower
    /// machine (the fault stays armed).
    SlowEvery(Duration),
}

/// Longest prebuffer a chunk is paced for or a listener may declare: past
/// an hour it never matters.
pub const MAX_PREBUFFER: Duration = Duration::from_secs(3600);

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub chunks: ChunkSchedule,
    /// Playback prebuffer the continuity metrics are also reported at, and
    /// the one a chunk leaves early for when `pace_chunks` is on.
    pub prebuffer_ms: f64,
    /// A chunk leaves short of its schedule size when waiting for one
    /// more frame would bring it to a listener (playing from the first
    /// chunk plus `prebuffer_ms`) after its buffer ran dry
    /// (`crate::stage::pace`). The schedule still caps every chunk. Only a
    /// vocoder below f32 is paced, whose samples are the same bits however
    /// a stream is cut, so the audio never depends on the timing. On by
    /// default; off cuts by the schedule alone (a measurement switch).
    pub pace_chunks: bool,
    /// Requests in flight at once (all sessions). Also sizes the stage
    /// mailboxes, which is what makes the talker↔predictor cycle
    /// deadlock-free: at most one token per request circulates.
    pub max_active_requests: usize,
    /// Memory budget for per-request state (KV caches and audio buffers).
    pub memory_budget_bytes: u64,
    /// Cap on the talker KV positions reserved per request (default: prompt
    /// rows + max_frames, at most the model's position table).
    pub kv_positions_cap: Option<usize>,
    /// Unacknowledged audio (seconds) at which a request's generation pauses.
    pub soft_unacked_audio_s: f64,
    /// Unacknowledged audio (seconds) past which the request fails.
    pub hard_unacked_audio_s: f64,
    /// A request paused for a slow consumer longer than this fails.
    pub max_pause: Duration,
    /// A stage busy on one step longer than this is retired by the watchdog.
    pub stage_deadline: Duration,
    /// Events buffered per request between the engine and the consumer.
    pub stream_capacity: usize,
    /// Router housekeeping period (watchdog, flushing held events, pause
    /// checks) while something needs watching; also the talker's re-check
    /// period for requests paused on flow control (a live request waiting
    /// for text is woken by its text instead). While requests only wait the
    /// router ticks every [`EngineConfig::idle_tick`]; with none, not at
    /// all.
    pub tick: Duration,
    /// Consumers acknowledge chunks explicitly with `ack(seq)`; when false,
    /// receiving a chunk acknowledges it.
    pub explicit_acks: bool,
    /// Most requests the talker and the code predictor step together in one
    /// batched forward (each stage batches every ready request of a round,
    /// up to this many), and the most chunks code2wav decodes in one
    /// batched call. 1 steps requests one at a time.
    pub max_batch: usize,
    /// The stages take work by buffer slack (`crate::slack`): the stream
    /// closest to underrun first, a stream far ahead held while another is
    /// close. False: arrival order (an A/B switch for measurements).
    pub slack_order: bool,
    /// Longest the talker or the code predictor waits, before a step, for
    /// requests whose inputs the other one is producing right now, so they
    /// share the step (0: never wait). The wait ends as soon as they
    /// arrive or the other stage goes idle; this only bounds it.
    pub batch_gather: Duration,
    /// Thread placement: `None` runs every stage's kernels on the process's
    /// global rayon pool (stages then take turns on all cores). `Some` gives
    /// the two LM stages (talker, code predictor: bandwidth-bound, one step
    /// at a time between them) one pool and code2wav (compute-bound) its
    /// own, so the vocoder runs beside the LMs instead of between their
    /// steps. The pools are sized exactly; nothing else spawns kernel
    /// threads, so `lm + vocoder` threads is the whole engine's compute.
    pub stage_threads: Option<StageThreads>,
    /// code2wav lends a core: a vocoder step that starts while an LM stage
    /// is stepping runs on its own thread beside it, and the LM stages keep
    /// to one core until it ends, instead of the step taking the whole
    /// kernel team for its duration. While any request waits for its first
    /// audio chunk nothing is lent (its prefill, frames and first chunk
    /// get every core). Pays on hosts where
    /// one core nearly saturates the memory bus, and loses where one core
    /// reads about half of what two do (docs/performance.md, "A Zen 5
    /// host: the vocoder beside the LMs"); off by default. Only with the
    /// shared team (`stage_threads` unset). [`EngineConfig::team_hold`]
    /// `Lend` asks for the same; any other explicit `team_hold` contradicts
    /// it and is refused by [`EngineConfig::validate`].
    pub lend_core: bool,
    /// code2wav lends a core where this process measured it cheaper
    /// ([`crate::capacity::LendPolicy::Measured`]): per number of streams
    /// computing, its steps run held for one window of the real-time
    /// capacity's sampling, then lent for one, then at whichever made
    /// frames at the lower load (lent only when lower by more than
    /// [`crate::capacity::LEND_MARGIN`]). `lend_core` (always lent) wins
    /// over it; the first-packet rule above holds for both. Only with the
    /// shared team; refused beside a [`EngineConfig::team_hold`] that never
    /// lends, as `lend_core` is.
    pub lend_measured: bool,
    /// How the stages' steps take the kernel team, when set explicitly (a
    /// measurement switch; `tts-rt` reads it from `TTS_RT_TEAM_HOLD`).
    /// `None`, the default: each stage by its own `HOLDS_TEAM` (code2wav
    /// holds the team for its step, the LMs take a turn per region), lent a
    /// core where `lend_core` says so. See [`TeamHold`] for each value.
    ///
    /// Precedence: neither overrides the other. `Some(Lend)` is
    /// `lend_core: true` spelled the other way (either or both lend);
    /// `Some(C2w)`, `Some(Off)` and `Some(All)` never lend, so with
    /// `lend_core: true` they are refused, naming both.
    pub team_hold: Option<TeamHold>,
    /// Admission by real-time capacity ([`crate::capacity`]): a request is
    /// admitted only while the streams computing, with it, need at most
    /// this share of their cores' time, as this process measured it (0.9:
    /// a tenth held back for jitter). `None`: only the fixed
    /// `max_active_requests` bounds them (which also bounds this rule).
    /// `tts-rt serve` sets it; tests and `speak` leave it off.
    pub realtime_load: Option<f64>,
    #[cfg(feature = "fault-injection")]
    pub fault: Option<Fault>,
}

/// An explicit choice of how the stages' steps take the kernel team
/// ([`EngineConfig::team_hold`]; the values of `TTS_RT_TEAM_HOLD`). A
/// measurement switch: each value is one arm of an A/B run
/// (docs/performance.md, "code2wav holds the team for its step").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TeamHold {
    /// `off`: every stage takes a turn per kernel region (no stage holds
    /// the team for a whole step).
    Off,
    /// `all`: every stage holds the team for its whole step.
    All,
    /// `c2w`: each stage by its own `HOLDS_TEAM` (code2wav holds, the LMs
    /// take turns), never lending a core: the default without `lend_core`.
    C2w,
    /// `lend`: as `c2w`, but the holding stage (code2wav) runs beside the
    /// others on one core while they step: the same as `lend_core`.
    Lend,
}

impl TeamHold {
    /// Every value, in the order the accepted spellings are listed.
    pub const ALL: [TeamHold; 4] = [TeamHold::C2w, TeamHold::Lend, TeamHold::Off, TeamHold::All];
    /// The accepted spellings, for messages.
    pub const NAMES: &'static str = "c2w (the default), lend, off, all";

    pub fn name(self) -> &'static str {
        match self {
            TeamHold::Off => "off",
            TeamHold::All => "all",
            TeamHold::C2w => "c2w",
            TeamHold::Lend => "lend",
        }
    }

    /// Parses a [`TeamHold::name`] spelling (case-insensitive, surrounding
    /// blanks ignored); anything else is `None`.
    pub fn from_name(s: &str) -> Option<TeamHold> {
        let s = s.trim().to_ascii_lowercase();
        TeamHold::ALL.into_iter().find(|h| h.name() == s)
    }

    /// Whether the holding stages are lent a core.
    pub fn lends(self) -> bool {
        self == TeamHold::Lend
    }
}

impl std::fmt::Display for TeamHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Kernel threads per stage group (see [`EngineConfig::stage_threads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StageThreads {
    /// Talker + code predictor.
    pub lm: usize,
    /// code2wav.
    pub vocoder: usize,
}

impl std::str::FromStr for StageThreads {
    type Err = String;

    /// `LM,VOCODER`, e.g. `1,1`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("stage threads must be LM,VOCODER (two counts >= 1, e.g. 1,1), got '{s}'");
        let (a, b) = s.split_once(',').ok_or_else(bad)?;
        let lm: usize = a.trim().parse().map_err(|_| bad())?;
        let vocoder: usize = b.trim().parse().map_err(|_| bad())?;
        if lm == 0 || vocoder == 0 || lm > 1024 || vocoder > 1024 {
            return Err(bad());
        }
        Ok(StageThreads { lm, vocoder })
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            chunks: ChunkSchedule::default(),
            prebuffer_ms: 200.0,
            pace_chunks: true,
            max_active_requests: 16,
            memory_budget_bytes: 8 << 30,
            kv_positions_cap: None,
            soft_unacked_audio_s: 4.0,
            hard_unacked_audio_s: 16.0,
            max_pause: Duration::from_secs(30),
            stage_deadline: Duration::from_secs(10),
            stream_capacity: 32,
            tick: Duration::from_millis(5),
            explicit_acks: false,
            max_batch: 16,
            batch_gather: Duration::from_millis(200),
            slack_order: true,
            stage_threads: None,
            lend_core: false,
            lend_measured: false,
            team_hold: None,
            realtime_load: None,
            #[cfg(feature = "fault-injection")]
            fault: None,
        }
    }
}

impl EngineConfig {
    /// `prebuffer_ms` (capped at [`MAX_PREBUFFER`]).
    pub fn prebuffer(&self) -> Duration {
        let s = (self.prebuffer_ms / 1e3).min(MAX_PREBUFFER.as_secs_f64());
        Duration::try_from_secs_f64(s).unwrap_or_default()
    }

    /// The prebuffer a chunk leaves early for, when `pace_chunks` is on.
    pub fn paced_prebuffer(&self) -> Option<Duration> {
        self.pace_chunks.then(|| self.prebuffer())
    }

    /// The router's housekeeping period while every held request only
    /// waits (e.g. a live request for its next text): 20 ticks (100 ms by
    /// default), at most a quarter of the stage deadline so the watchdog
    /// keeps its resolution.
    pub fn idle_tick(&self) -> Duration {
        (self.tick * 20).min(self.stage_deadline / 4).max(self.tick)
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |key: &'static str, message: String| Err(EngineError::Config { key, message });
        ChunkSchedule::new(self.chunks.frames.clone())?;
        if !(self.prebuffer_ms.is_finite() && self.prebuffer_ms >= 0.0) {
            return bad(
                "prebuffer_ms",
                format!("must be >= 0, got {}", self.prebuffer_ms),
            );
        }
        if self.max_active_requests == 0 {
            return bad("max_active_requests", "must be at least 1".into());
        }
        if let Some(l) = self.realtime_load {
            if !(l.is_finite() && l > 0.0 && l <= 1.0) {
                return bad(
                    "realtime_load",
                    format!("must be a share of the cores' time in (0, 1], got {l}"),
                );
            }
        }
        if let Some(t) = self.stage_threads {
            if t.lm == 0 || t.vocoder == 0 {
                return bad(
                    "stage_threads",
                    format!(
                        "each pool needs at least 1 thread, got lm {} vocoder {}",
                        t.lm, t.vocoder
                    ),
                );
            }
        }
        if !(self.soft_unacked_audio_s.is_finite() && self.soft_unacked_audio_s > 0.0) {
            return bad(
                "soft_unacked_audio_s",
                format!("must be > 0, got {}", self.soft_unacked_audio_s),
            );
        }
        if !(self.hard_unacked_audio_s.is_finite()
            && self.hard_unacked_audio_s >= self.soft_unacked_audio_s)
        {
            return bad(
                "hard_unacked_audio_s",
                format!(
                    "must be >= soft_unacked_audio_s ({}), got {}",
                    self.soft_unacked_audio_s, self.hard_unacked_audio_s
                ),
            );
        }
        if self.stream_capacity < 2 {
            return bad("stream_capacity", "must be at least 2".into());
        }
        if self.tick.is_zero() || self.stage_deadline <= self.tick {
            return bad(
                "stage_deadline",
                format!(
                    "must exceed tick ({:?}), got {:?}",
                    self.tick, self.stage_deadline
                ),
            );
        }
        if self.max_batch == 0 {
            return bad("max_batch", "must be at least 1".into());
        }
        if self.kv_positions_cap == Some(0) {
            return bad("kv_positions_cap", "must be at least 1".into());
        }
        let asks = (self.lend_core || self.lend_measured).then_some(if self.lend_core {
            "lend_core (--lend-core)"
        } else {
            "lend_measured (--lend-core auto)"
        });
        if let (Some(h), Some(asks)) = (self.team_hold.filter(|h| !h.lends()), asks) {
            return bad(
                "team_hold",
                format!(
                    "`{h}` (TTS_RT_TEAM_HOLD) never lends a core, but {asks} asks for one; \
                     drop one of them, or use `lend`"
                ),
            );
        }
        Ok(())
    }

    /// How code2wav's steps take the shared team: always lent
    /// ([`Self::lends_core`]), lent where measured cheaper
    /// (`lend_measured`), or never.
    pub fn lend_policy(&self) -> crate::capacity::LendPolicy {
        use crate::capacity::LendPolicy;
        if self.lends_core() {
            LendPolicy::Always
        } else if self.lend_measured {
            LendPolicy::Measured
        } else {
            LendPolicy::Never
        }
    }

    /// Whether the holding stages are lent a core: `lend_core`, or an
    /// explicit [`TeamHold::Lend`] (a validated config has no other
    /// explicit choice beside `lend_core`).
    pub fn lends_core(&self) -> bool {
        self.lend_core || self.team_hold.is_some_and(TeamHold::lends)
    }

    /// Stage mailbox capacity: one circulating message per active request,
    /// plus a drop and a start per request, plus headroom for control.
    pub(crate) fn mailbox_capacity(&self) -> usize {
        3 * self.max_active_requests + 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_repeats_its_last_size() {
        let s = ChunkSchedule::new(vec![1, 4, 8]).unwrap();
        assert_eq!(
            (0..5).map(|i| s.size(i)).collect::<Vec<_>>(),
            [1, 4, 8, 8, 8]
        );
        assert!(ChunkSchedule::new(vec![]).is_err());
        assert!(ChunkSchedule::new(vec![2, 0]).is_err());
    }

    #[test]
    fn validation_names_the_key() {
        let c = EngineConfig {
            hard_unacked_audio_s: 1.0,
            ..EngineConfig::default()
        };
        match c.validate() {
            Err(EngineError::Config { key, .. }) => assert_eq!(key, "hard_unacked_audio_s"),
            other => panic!("{other:?}"),
        }
        assert!(EngineConfig::default().validate().is_ok());
    }

    #[test]
    fn team_hold_names_round_trip_and_typos_are_not_names() {
        for h in TeamHold::ALL {
            assert_eq!(TeamHold::from_name(h.name()), Some(h));
            assert!(TeamHold::NAMES.contains(h.name()));
        }
        assert_eq!(TeamHold::from_name(" LEND "), Some(TeamHold::Lend));
        for bad in ["lnd", "", "on", "c2w,lend", "default"] {
            assert_eq!(TeamHold::from_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_team_hold_that_never_lends_is_refused_beside_lend_core_naming_both() {
        for h in [TeamHold::Off, TeamHold::All, TeamHold::C2w] {
            let c = EngineConfig {
                lend_core: true,
                team_hold: Some(h),
                ..EngineConfig::default()
            };
            match c.validate() {
                Err(EngineError::Config { key, message }) => {
                    assert_eq!(key, "team_hold");
                    assert!(message.contains("lend_core"), "{message}");
                    assert!(message.contains(&format!("`{h}`")), "{message}");
                }
                other => panic!("{h}: {other:?}"),
            }
            // Without lend_core the same choice is fine, and lends nothing.
            let alone = EngineConfig {
                team_hold: Some(h),
                ..EngineConfig::default()
            };
            alone.validate().unwrap();
            assert!(!alone.lends_core());
        }
        // `lend` agrees with lend_core, and asks for the same without it.
        for lend_core in [false, true] {
            let c = EngineConfig {
                lend_core,
                team_hold: Some(TeamHold::Lend),
                ..EngineConfig::default()
            };
            c.validate().unwrap();
            assert!(c.lends_core());
        }
        assert!(!EngineConfig::default().lends_core());
    }
}
