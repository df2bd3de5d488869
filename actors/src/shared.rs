//! Figures every part of the engine shares: each stage's health (read by
//! the router's watchdog and the engine's stats), the stale-message
//! counters, the admission ledger's totals and the kernel pools. Atomics
//! only on the hot paths, so any thread reads them without locks.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::contract::{Generation, StageKind};

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
    #[cfg(feature = "fault-injection")]
    pub fault: std::sync::Mutex<Option<crate::config::Fault>>,
    /// Kernel pools `[lm, vocoder]` when the config places stages
    /// (`EngineConfig::stage_threads`); `None`: the global rayon pool.
    pub pools: Option<[Arc<rayon::ThreadPool>; 2]>,
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
            #[cfg(feature = "fault-injection")]
            fault: std::sync::Mutex::new(fault),
            pools: None,
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
