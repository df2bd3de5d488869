//! Fault injection for tests (cargo feature `fault-injection`, off by
//! default): panic, stall or delay a named stage at a given step, once, or
//! slow every step of it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::{FaultAction, WEDGE_AFTER_RETIRE};
use crate::contract::{Generation, StageKind};
use crate::shared::Shared;

/// Called by every model step, inside the stage's panic boundary.
pub(crate) fn maybe_fire(
    shared: &Shared,
    stage: StageKind,
    step: u64,
    inputs: usize,
    generation: Generation,
) {
    let action = {
        let mut f = shared.fault.lock().unwrap_or_else(|e| e.into_inner());
        match f.as_ref() {
            Some(x) if x.stage == stage && step >= x.after_steps && inputs >= x.min_inputs => {
                match x.action {
                    FaultAction::SlowEvery(d) => Some(FaultAction::Delay(d)),
                    _ => f.take().map(|x| x.action),
                }
            }
            _ => None,
        }
    };
    match action {
        None => {}
        Some(FaultAction::Panic) => panic!("injected fault: {stage} panicked at step {step}"),
        Some(FaultAction::Delay(d) | FaultAction::SlowEvery(d)) => std::thread::sleep(d),
        Some(FaultAction::StallInRegion) => {
            // One task of a two-task region blocks; the region (and the
            // team running it) is held until well after the retirement.
            tts_kernels::parallel_for(2, |i| {
                if i == 1 {
                    let t = Instant::now();
                    let mut retired_at = None;
                    while t.elapsed() < Duration::from_secs(60) {
                        let gen = shared.health(stage).generation.load(Ordering::Acquire);
                        if gen != generation {
                            let at = *retired_at.get_or_insert_with(Instant::now);
                            if at.elapsed() > WEDGE_AFTER_RETIRE {
                                break;
                            }
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            });
        }
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
