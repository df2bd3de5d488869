//! Figures every part of the engine shares: each stage's health (read by
//! the router's watchdog and the engine's stats), the stale-message
//! counters, the admission ledger's totals and the kernel teams (or pools). Atomics
//! only on the hot paths, so any thread reads them without locks.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::capacity::{BusyClock, CapacityModel, LendPolicy, Placement, MAX_GROUPS};
use crate::contract::{Generation, StageKind};
use crate::slack::SlackBoard;

/// Live figures of one stage, shared with the router (watchdog) and the
/// engine (stats). Atomics only: read without locks from any thread.
#[derive(Debug, Default)]
pub struct StageHealth {
    pub generation: AtomicU64,
    /// Microseconds since the engine's base instant when the current step
    /// started; 0 when idle.
    pub busy_since_us: AtomicU64,
    pub restarts: AtomicU64,
    /// Requests holding state in the stage.
    pub held: AtomicUsize,
    /// Model calls run (all requests, all generations); a batched call
    /// counts once.
    pub steps: AtomicU64,
    /// Inputs those calls served (the sum of their batch sizes).
    pub batched_inputs: AtomicU64,
    /// Largest batch one call served.
    pub max_batch: AtomicUsize,
    /// Times the stage woke to look at its work (a round, or a wake from a
    /// parked input's feed), with or without a step to run. A stage with
    /// nothing to do does not wake: this stays put while the engine idles
    /// or a live request waits for text.
    pub wakeups: AtomicU64,
    /// Data messages other stages have handed to this one that it has not
    /// received yet. A sender counts all of a step's outputs before it
    /// sends the first, so a stage gathering for its partner
    /// (`StageActor::should_gather`) sees a batch's remaining messages on
    /// their way and waits for them instead of stepping the first alone.
    /// Reset when the stage is replaced (its old mailbox's messages are
    /// never received).
    pub inbound: AtomicU64,
    /// When the watchdog last restarted this stage's deadline clock
    /// (microseconds, as `busy_since_us`): a step that queued behind
    /// another stage's stuck kernel region is timed from the moment that
    /// team was replaced, not from its own start.
    pub clock_reset_us: AtomicU64,
    /// Inputs this stage held back for a stream closer to underrun
    /// (`crate::slack`): each time an input was put aside for a round.
    pub held_for_slack: AtomicU64,
}

/// Engine-wide shared figures.
#[derive(Debug)]
pub struct Shared {
    pub base: Instant,
    pub health: [StageHealth; 3],
    pub stale_epoch: AtomicU64,
    pub stale_generation: AtomicU64,
    pub reserved_bytes: AtomicU64,
    pub active_requests: AtomicUsize,
    /// Admitted requests whose first audio chunk has not reached the router
    /// yet (a lent core is not lent while any waits: see
    /// [`crate::EngineConfig::lend_core`]).
    pub awaiting_first_packet: AtomicUsize,
    /// Housekeeping ticks the router has run (it ticks only while there is
    /// something to keep: `Router::ensure_ticking`).
    pub router_ticks: AtomicU64,
    #[cfg(feature = "fault-injection")]
    pub fault: std::sync::Mutex<Option<crate::config::Fault>>,
    /// Kernel pools `[lm, vocoder]` when the config places stages
    /// (`EngineConfig::stage_threads`); `None`: the global rayon pool.
    pub pools: Option<[Arc<rayon::ThreadPool>; 2]>,
    /// The kernel teams the stages' steps run on (see [`Teams`]); `None`
    /// with `TTS_RT_TEAMS=off` (`tts_kernels::teams_enabled`; the pools
    /// above instead).
    pub teams: Option<Teams>,
    /// Whether the holding stages are lent a core: never, always
    /// ([`crate::EngineConfig::lends_core`]: `lend_core`, or `team_hold`
    /// `lend`), or where measured cheaper (`lend_measured`;
    /// [`crate::EngineConfig::lend_policy`]).
    pub lend: LendPolicy,
    /// With [`LendPolicy::Measured`]: whether the holding stages lend now
    /// (the router sets it each tick from the capacity model's
    /// [`CapacityModel::placement`] for the streams computing).
    pub lend_now: std::sync::atomic::AtomicBool,
    /// The holding stages' steps so far per [`Placement`] (index), for the
    /// capacity's windows of one placement.
    pub placement_steps: [AtomicU64; 2],
    /// [`crate::EngineConfig::team_hold`].
    pub team_hold: Option<crate::TeamHold>,
    /// Each kernel group's busy time ([`Shared::group`]): a stage's step
    /// enters it and leaves it, once per step.
    pub busy: std::sync::Mutex<[BusyClock; MAX_GROUPS]>,
    /// Requests computing (admitted, less live ones parked for text), as
    /// the router last counted them (each tick).
    pub computing: AtomicUsize,
    /// Offline requests waiting in line for real-time capacity (the
    /// router's count, updated as the line changes).
    pub offline_waiting: AtomicUsize,
    /// `Engine::calibrate` is running: its rounds measure batch sizes the
    /// capacity learned so far may not admit yet.
    pub calibrating: std::sync::atomic::AtomicBool,
    /// Codec frames the code predictor has made (all requests).
    pub frames_made: AtomicU64,
    /// The real-time capacity learned from the figures above (the router
    /// feeds it; admission and the engine's stats read it).
    pub capacity: std::sync::Mutex<CapacityModel>,
    /// Every admitted stream's buffer slack, for the stages' scheduling
    /// (the router registers and forgets them).
    pub slack: SlackBoard,
    /// [`crate::EngineConfig::slack_order`].
    pub slack_order: bool,
}

/// The kernel teams of an engine ([`tts_kernels::Team`]): one that every
/// stage shares (the default: its regions take turns on the cores), or
/// `[lm, vocoder]` when the config places stages. A team is swapped for a
/// fresh one when the watchdog retires a stage that used it, since a stuck
/// step may be holding it ([`Shared::replace_team`]).
#[derive(Debug)]
pub struct Teams {
    teams: std::sync::Mutex<Vec<Arc<tts_kernels::Team>>>,
    sizes: Vec<usize>,
}

impl Teams {
    /// One team of `sizes[0]` threads for every stage, or (two sizes) an LM
    /// team and a vocoder team.
    pub fn start(sizes: Vec<usize>) -> std::io::Result<Teams> {
        let teams = (0..sizes.len())
            .map(|i| Self::make(&sizes, i))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Teams {
            teams: std::sync::Mutex::new(teams),
            sizes,
        })
    }

    fn make(sizes: &[usize], i: usize) -> std::io::Result<Arc<tts_kernels::Team>> {
        let name = match (sizes.len(), i) {
            (1, _) => "tts-kernel",
            (_, 0) => "tts-lm",
            _ => "tts-vocoder",
        };
        tts_kernels::Team::new(sizes[i], name).map(Arc::new)
    }

    fn index(&self, k: StageKind) -> usize {
        match k {
            StageKind::Code2Wav if self.sizes.len() > 1 => 1,
            _ => 0,
        }
    }
}

impl Shared {
    pub fn new(#[cfg(feature = "fault-injection")] fault: Option<crate::config::Fault>) -> Self {
        Shared {
            base: Instant::now(),
            health: Default::default(),
            stale_epoch: AtomicU64::new(0),
            stale_generation: AtomicU64::new(0),
            reserved_bytes: AtomicU64::new(0),
            active_requests: AtomicUsize::new(0),
            awaiting_first_packet: AtomicUsize::new(0),
            router_ticks: AtomicU64::new(0),
            #[cfg(feature = "fault-injection")]
            fault: std::sync::Mutex::new(fault),
            pools: None,
            teams: None,
            lend: LendPolicy::Never,
            lend_now: std::sync::atomic::AtomicBool::new(false),
            placement_steps: [AtomicU64::new(0), AtomicU64::new(0)],
            team_hold: None,
            busy: Default::default(),
            computing: AtomicUsize::new(0),
            offline_waiting: AtomicUsize::new(0),
            calibrating: std::sync::atomic::AtomicBool::new(false),
            frames_made: AtomicU64::new(0),
            capacity: std::sync::Mutex::new(CapacityModel::new(1, 12.5, 1.0, 1)),
            slack: SlackBoard::default(),
            slack_order: true,
        }
    }

    /// Kernel groups: stages in different groups compute on different
    /// cores (an LM and a vocoder team or pool), stages in one take turns.
    pub fn groups(&self) -> usize {
        match (&self.teams, &self.pools) {
            (Some(t), _) => t.sizes.len().clamp(1, MAX_GROUPS),
            (None, Some(_)) => 2,
            (None, None) => 1,
        }
    }

    /// The kernel group stage `k` computes in.
    pub fn group(&self, k: StageKind) -> usize {
        match (&self.teams, &self.pools, k) {
            (Some(t), _, _) => t.index(k).min(MAX_GROUPS - 1),
            (None, Some(_), StageKind::Code2Wav) => 1,
            _ => 0,
        }
    }

    /// Stage `k` starts (`true`) or ends a step: its group's busy clock.
    pub fn stepping(&self, k: StageKind, starts: bool) {
        let g = self.group(k);
        let now = Instant::now();
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        if starts {
            busy[g].enter(now);
        } else {
            busy[g].exit(now);
        }
    }

    /// Each group's busy time up to `now`.
    pub fn busy_totals(&self, now: Instant) -> [std::time::Duration; MAX_GROUPS] {
        let busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        [busy[0].total(now), busy[1].total(now)]
    }

    /// Whether a holding stage's step starting now is lent a core (before
    /// the first-packet rule).
    pub fn lends_now(&self) -> bool {
        match self.lend {
            LendPolicy::Never => false,
            LendPolicy::Always => true,
            LendPolicy::Measured => self.lend_now.load(Ordering::Relaxed),
        }
    }

    /// A holding stage stepped at placement `p`.
    pub fn stepped_at(&self, p: Placement) {
        self.placement_steps[p.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// The holding stages' steps so far per placement.
    pub fn placement_steps(&self) -> [u64; 2] {
        [
            self.placement_steps[0].load(Ordering::Relaxed),
            self.placement_steps[1].load(Ordering::Relaxed),
        ]
    }

    pub fn capacity(&self) -> std::sync::MutexGuard<'_, CapacityModel> {
        self.capacity.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether stage `k`'s step is queued behind another stage's kernel
    /// region on their shared team (so a step that looks overdue is not
    /// the one stuck).
    pub fn waiting_on_team(&self, k: StageKind) -> bool {
        self.team(k).is_some_and(|t| t.is_waiting(k.index() as u32))
    }

    /// Whether stages `a` and `b` run on the same team.
    pub fn share_team(&self, a: StageKind, b: StageKind) -> bool {
        self.teams
            .as_ref()
            .is_some_and(|t| t.index(a) == t.index(b))
    }

    /// The team a stage's step runs on (`None`: the pools).
    pub fn team(&self, k: StageKind) -> Option<Arc<tts_kernels::Team>> {
        let t = self.teams.as_ref()?;
        let teams = t.teams.lock().unwrap_or_else(|e| e.into_inner());
        Some(teams[t.index(k)].clone())
    }

    /// Retires the team stage `k` runs on and puts a fresh one in its
    /// place: the watchdog's step when it replaces a stuck stage, whose
    /// step may hold the team inside a region that never ends. Stages
    /// waiting for that team run their current region on their own thread
    /// and take the fresh team at their next step. Returns false when no
    /// fresh team could be started (the stages then run on their own
    /// threads, slower but correct).
    pub fn replace_team(&self, k: StageKind) -> bool {
        let Some(t) = self.teams.as_ref() else {
            return true;
        };
        let i = t.index(k);
        let fresh = Teams::make(&t.sizes, i);
        let mut teams = t.teams.lock().unwrap_or_else(|e| e.into_inner());
        teams[i].retire();
        match fresh {
            Ok(fresh) => {
                teams[i] = fresh;
                true
            }
            Err(_) => false,
        }
    }

    /// The pool a stage's kernels run on (`None`: the global one).
    pub fn pool(&self, k: StageKind) -> Option<&rayon::ThreadPool> {
        let pools = self.pools.as_ref()?;
        Some(match k {
            StageKind::Talker | StageKind::CodePredictor => &pools[0],
            StageKind::Code2Wav => &pools[1],
        })
    }

    pub fn health(&self, k: StageKind) -> &StageHealth {
        &self.health[k.index()]
    }

    pub fn now_us(&self) -> u64 {
        // +1 so that 0 can mean "idle".
        self.base.elapsed().as_micros() as u64 + 1
    }

    /// A data message from `from` stamped with generation `g` is current.
    pub fn sender_current(&self, from: StageKind, g: Generation) -> bool {
        if self.health(from).generation.load(Ordering::Acquire) == g {
            true
        } else {
            self.stale_generation.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Counts a data message for a request this stage holds no state for.
    pub fn stale_request(&self) {
        self.stale_epoch.fetch_add(1, Ordering::Relaxed);
    }
}
