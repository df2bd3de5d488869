//! Fault injection for tests (cargo feature `fault-injection`, off by
//! default): panic, stall or delay a named stage at a given step, once.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::FaultAction;
use crate::contract::{Generation, StageKind};
use crate::shared::Shared;

/// Called by every model step, inside the stage's panic boundary.
pub(crate) fn maybe_fire(shared: &Shared, stage: StageKind, step: u64, generation: Generation) {
    let action = {
        let mut f = shared.fault.lock().unwrap_or_else(|e| e.into_inner());
        match f.as_ref() {
            Some(x) if x.stage == stage && x.after_steps == step => f.take().map(|x| x.action),
            _ => None,
        }
    };
    match action {
        None => {}
        Some(FaultAction::Panic) => panic!("injected fault: {stage} panicked at step {step}"),
        Some(FaultAction::Delay(d)) => std::thread::sleep(d),
        Some(FaultAction::Stall) => {
            // Stuck until the watchdog retires this generation (bounded so a
            // broken watchdog fails the test instead of hanging it).
            let t = Instant::now();
            while shared.health(stage).generation.load(Ordering::Acquire) == generation
                && t.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}
