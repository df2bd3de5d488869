//! `bench --scoreboard`: how many streams this machine keeps continuous,
//! with the admission policy `serve` runs.
//!
//! The engine is started and calibrated as `serve` starts (admission by
//! measured real-time capacity at `--realtime-load`), then offered 1, 2, …
//! streams at once, each a whole utterance of `--frames` frames. A level
//! runs its rounds (warm-ups first); every stream of a round is either
//! refused (how fast) or admitted, and an admitted one is continuous at the
//! prebuffer or not. The climb ends at `--max-streams`, or at the first
//! level where admission refused in every measured round (more offered
//! streams only add refusals).
//!
//! The headline is the most streams admitted at once with every admitted
//! stream continuous in every measured round of its level.

use std::sync::Barrier;
use std::time::Instant;

use anyhow::{bail, Result};
use serde_json::{json, Value};
use tts_actors::{Engine, EngineError, ErrorKind, RequestMetrics, Summary};

use super::Workload;

/// One offered stream's outcome.
#[derive(Clone, Debug)]
pub(super) enum Outcome {
    /// Refused by admission after `ms` (from the call to its refusal).
    Refused {
        ms: f64,
    },
    Admitted(Box<RequestMetrics>),
}

/// One round of a level: the outcomes, and its wall time.
#[derive(Clone, Debug)]
pub(super) struct Round {
    pub outcomes: Vec<Outcome>,
    pub wall_s: f64,
}

impl Round {
    fn admitted(&self) -> impl Iterator<Item = &RequestMetrics> {
        self.outcomes.iter().filter_map(|o| match o {
            Outcome::Admitted(m) => Some(&**m),
            Outcome::Refused { .. } => None,
        })
    }

    fn refused_ms(&self) -> impl Iterator<Item = f64> + '_ {
        self.outcomes.iter().filter_map(|o| match o {
            Outcome::Refused { ms } => Some(*ms),
            Outcome::Admitted(_) => None,
        })
    }

    /// Admitted streams continuous at the prebuffer (a missing figure
    /// counts as not continuous).
    fn continuous(&self) -> usize {
        self.admitted()
            .filter(|m| m.continuity_ok_at_prebuffer == Some(true))
            .count()
    }

    /// Every admitted stream continuous (and at least one admitted).
    fn all_continuous(&self) -> bool {
        let n = self.admitted().count();
        n > 0 && self.continuous() == n
    }
}

/// The measured rounds of one offered level.
#[derive(Clone, Debug)]
pub(super) struct Level {
    pub offered: usize,
    pub rounds: Vec<Round>,
}

impl Level {
    /// Every measured round refused someone: the admission limit is below
    /// this level.
    fn saturated(&self) -> bool {
        !self.rounds.is_empty() && self.rounds.iter().all(|r| r.refused_ms().count() > 0)
    }

    /// The level holds: every measured round's admitted streams were all
    /// continuous. `Some(fewest admitted in a round)` then.
    fn held(&self) -> Option<usize> {
        if self.rounds.is_empty() || !self.rounds.iter().all(Round::all_continuous) {
            return None;
        }
        self.rounds.iter().map(|r| r.admitted().count()).min()
    }
}

/// The headline: the most streams admitted at once, all continuous, in
/// every measured round of a level (0: not even one); `None` when no level
/// was measured.
pub(super) fn continuous_streams(levels: &[Level]) -> Option<usize> {
    if levels.iter().all(|l| l.rounds.is_empty()) {
        return None;
    }
    Some(levels.iter().filter_map(Level::held).max().unwrap_or(0))
}

/// The engine refused the stream for capacity.
fn refused(e: &anyhow::Error) -> bool {
    e.downcast_ref::<EngineError>()
        .is_some_and(|e| e.kind() == ErrorKind::AtCapacity)
}

/// Runs one round: `n` streams offered at once (released together by a
/// barrier), each to its terminal event on its own thread.
fn run_round(
    engine: &Engine,
    workload: &Workload,
    text: &str,
    seed: u64,
    n: usize,
) -> Result<Round> {
    let barrier = Barrier::new(n);
    let t0 = Instant::now();
    let outcomes: Vec<Result<Outcome>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let session = engine.open_session();
                let req = workload.request(text, seed.wrapping_add(i as u64));
                let barrier = &barrier;
                s.spawn(move || -> Result<Outcome> {
                    barrier.wait();
                    let t = Instant::now();
                    match super::run_one(&session, req, false) {
                        Ok(m) => Ok(Outcome::Admitted(Box::new(m))),
                        // Admission answers before the stream exists.
                        Err(e) if refused(&e) => Ok(Outcome::Refused {
                            ms: t.elapsed().as_secs_f64() * 1e3,
                        }),
                        Err(e) => Err(e),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| bail!("a stream's thread panicked"))
            })
            .collect()
    });
    Ok(Round {
        outcomes: outcomes.into_iter().collect::<Result<_>>()?,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

/// What the climb needs from the bench's flags.
pub(super) struct Plan<'a> {
    pub max_streams: usize,
    pub warmup: usize,
    pub repeats: usize,
    pub seed: u64,
    pub text: &'a str,
    /// Progress lines on stderr.
    pub show: bool,
}

/// The climb: levels 1, 2, … until `max_streams` or the first saturated
/// level.
pub(super) fn climb(engine: &Engine, workload: &Workload, plan: &Plan<'_>) -> Result<Vec<Level>> {
    let mut levels = Vec::new();
    for offered in 1..=plan.max_streams {
        let mut rounds = Vec::new();
        for round in 0..plan.warmup + plan.repeats {
            let seed = plan.seed.wrapping_add((round * 1000) as u64);
            let r = run_round(engine, workload, plan.text, seed, offered)?;
            if plan.show {
                eprintln!(
                    "  {offered} offered, round {round}{}: {} admitted, {} continuous, {} refused",
                    if round < plan.warmup {
                        " (warm-up)"
                    } else {
                        ""
                    },
                    r.admitted().count(),
                    r.continuous(),
                    r.refused_ms().count()
                );
            }
            if round >= plan.warmup {
                rounds.push(r);
            }
        }
        let level = Level { offered, rounds };
        let saturated = level.saturated();
        levels.push(level);
        if saturated {
            break;
        }
    }
    Ok(levels)
}

fn summary(values: impl Iterator<Item = f64>) -> Summary {
    let v: Vec<(String, Option<f64>)> = values.map(|x| (String::new(), Some(x))).collect();
    Summary::of(&v)
}

/// One level as JSON: counts per round, and the admitted streams' and the
/// refusals' figures over the measured rounds.
pub(super) fn level_json(l: &Level, frame_rate_hz: f64) -> Value {
    let per_round =
        |f: &dyn Fn(&Round) -> usize| -> Vec<usize> { l.rounds.iter().map(f).collect() };
    let admitted: Vec<&RequestMetrics> = l.rounds.iter().flat_map(Round::admitted).collect();
    let frames_per_s: Vec<f64> = l
        .rounds
        .iter()
        .map(|r| {
            let frames: f64 = r.admitted().filter_map(|m| m.frames).sum::<u64>() as f64;
            frames / r.wall_s.max(1e-9)
        })
        .collect();
    json!({
        "offered": l.offered,
        "admitted": per_round(&|r| r.admitted().count()),
        "continuous": per_round(&|r| r.continuous()),
        "refused": per_round(&|r| r.refused_ms().count()),
        "held": l.held(),
        "refusal_ms": summary(l.rounds.iter().flat_map(Round::refused_ms)),
        "rtf": summary(admitted.iter().filter_map(|m| m.rtf)),
        "ttfp_ms": summary(admitted.iter().filter_map(|m| m.ttfp_ms)),
        "required_prebuffer_ms": summary(admitted.iter().filter_map(|m| m.required_prebuffer_ms)),
        "frames_per_s": summary(frames_per_s.iter().copied()),
        "real_time_frames_per_s": frame_rate_hz,
    })
}

/// The table: one line per level, then the headline.
pub(super) fn print(doc: &Value) {
    let sb = &doc["scoreboard"];
    println!(
        "\nscoreboard: {} | {} | {} | prebuffer {} ms | {} frames per stream | admission {}",
        doc["provenance"]["cpu_model"].as_str().unwrap_or("?"),
        doc["provenance"]["isa"].as_str().unwrap_or("?"),
        doc["provenance"]["precision_spec"].as_str().unwrap_or("?"),
        sb["prebuffer_ms"],
        sb["frames"],
        sb["admission"].as_str().unwrap_or("?"),
    );
    if !doc["provenance"]["host"].is_null() {
        println!(
            "{}",
            super::machine::describe_host(&doc["provenance"]["host"])
        );
    }
    println!(
        "{:>8} {:>12} {:>12} {:>10} {:>11} {:>11} {:>11} {:>12}",
        "offered",
        "admitted",
        "continuous",
        "refused",
        "refusal p50",
        "rtf p50",
        "ttfp p50",
        "frames/s"
    );
    let list = |v: &Value| -> String {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    };
    let num = |v: &Value, unit: &str| -> String {
        v.as_f64().map_or("-".into(), |x| format!("{x:.2}{unit}"))
    };
    for l in sb["levels"].as_array().into_iter().flatten() {
        println!(
            "{:>8} {:>12} {:>12} {:>10} {:>11} {:>11} {:>11} {:>12}",
            l["offered"],
            list(&l["admitted"]),
            list(&l["continuous"]),
            list(&l["refused"]),
            num(&l["refusal_ms"]["p50"], " ms"),
            num(&l["rtf"]["p50"], ""),
            num(&l["ttfp_ms"]["p50"], " ms"),
            num(&l["frames_per_s"]["p50"], ""),
        );
    }
    println!(
        "continuous streams held: {} (every admitted stream continuous at {} ms in every measured round of its level; counts are per round)",
        sb["continuous_streams"], sb["prebuffer_ms"]
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    use tts_actors::metrics::{EngineSide, MetricsInput, Outcome as Ended};

    /// Two one-second chunks; the second on time, or two seconds late.
    fn admitted(continuous: bool) -> Outcome {
        let second = if continuous { 500.0 } else { 3000.0 };
        let m = RequestMetrics::compute(&MetricsInput {
            chunk_ms: &[10.0, second],
            chunk_samples: &[24_000, 24_000],
            terminal_ms: second,
            sample_rate: 24_000,
            samples_per_frame: 1920,
            outcome: Ended::Done,
            finite: true,
            prebuffer_ms: 200.0,
            engine: EngineSide::default(),
            cancel_ack_ms: None,
            late_audio_samples: None,
        });
        assert_eq!(m.continuity_ok_at_prebuffer, Some(continuous));
        Outcome::Admitted(Box::new(m))
    }

    fn round(outcomes: Vec<Outcome>) -> Round {
        Round {
            outcomes,
            wall_s: 1.0,
        }
    }

    #[test]
    fn the_headline_is_the_most_streams_all_continuous_in_every_round() {
        let refused = || Outcome::Refused { ms: 1.0 };
        let levels = vec![
            Level {
                offered: 1,
                rounds: vec![round(vec![admitted(true)]), round(vec![admitted(true)])],
            },
            Level {
                offered: 2,
                rounds: vec![
                    round(vec![admitted(true), admitted(true)]),
                    round(vec![admitted(true), admitted(true)]),
                ],
            },
            // One round broke a stream: the level does not hold.
            Level {
                offered: 3,
                rounds: vec![
                    round(vec![admitted(true), admitted(true), admitted(true)]),
                    round(vec![admitted(true), admitted(false), admitted(true)]),
                ],
            },
        ];
        assert_eq!(continuous_streams(&levels), Some(2));
        assert!(!levels[2].saturated());
        // Admission refused one in every round and kept the rest whole:
        // the level holds what it admitted.
        let full = Level {
            offered: 4,
            rounds: vec![
                round(vec![
                    admitted(true),
                    admitted(true),
                    admitted(true),
                    refused(),
                ]),
                round(vec![
                    admitted(true),
                    admitted(true),
                    admitted(true),
                    refused(),
                ]),
            ],
        };
        assert!(full.saturated());
        assert_eq!(full.held(), Some(3));
        let mut all = levels;
        all.push(full);
        assert_eq!(continuous_streams(&all), Some(3));
    }

    #[test]
    fn nothing_held_is_zero_and_nothing_measured_is_missing() {
        let broken = Level {
            offered: 1,
            rounds: vec![round(vec![admitted(false)])],
        };
        assert_eq!(continuous_streams(&[broken]), Some(0));
        assert_eq!(continuous_streams(&[]), None);
    }
}
