//! Per-request metrics exactly as `shared/METRICS.md` defines them, and the
//! summaries over many requests.
//!
//! Everything here is a pure function of arrival times and sample counts, so
//! the formulas are unit-tested without an engine. Missing figures are
//! `None` (serialized as `null`), never 0.

use std::time::Duration;

use crate::contract::StageTimes;

/// Playback simulation result at one prebuffer.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Continuity {
    pub prebuffer_ms: f64,
    pub underruns: u32,
    pub stall_ms: f64,
    pub continuity_ok: bool,
}

/// Simulates playback starting `prebuffer_ms` after the first chunk and
/// playing in real time. `arrivals_ms[i]` is chunk i's arrival time (any
/// origin; only differences from chunk 0 matter) and `durations_ms[i]` its
/// audio length. Whenever the player reaches the end of received audio
/// before the stream is over it stalls until the next chunk: each stall is
/// one underrun. The stream is over after the last chunk, so running out
/// there is the end, not an underrun. `None` without chunks.
pub fn continuity(
    arrivals_ms: &[f64],
    durations_ms: &[f64],
    prebuffer_ms: f64,
) -> Option<Continuity> {
    assert_eq!(arrivals_ms.len(), durations_ms.len());
    let t0 = *arrivals_ms.first()?;
    let mut play_end = prebuffer_ms + durations_ms[0];
    let (mut underruns, mut stall_ms) = (0u32, 0f64);
    for (&a, &d) in arrivals_ms.iter().zip(durations_ms).skip(1) {
        let a = a - t0;
        if a > play_end {
            underruns += 1;
            stall_ms += a - play_end;
            play_end = a;
        }
        play_end += d;
    }
    Some(Continuity {
        prebuffer_ms,
        underruns,
        stall_ms,
        continuity_ok: underruns == 0,
    })
}

/// `max_i (t_i - t_0 - A_i)` floored at 0, where `A_i` is the audio received
/// before chunk i: the smallest prebuffer with no underrun.
pub fn required_prebuffer_ms(arrivals_ms: &[f64], durations_ms: &[f64]) -> Option<f64> {
    let t0 = *arrivals_ms.first()?;
    let mut before = 0.0;
    let mut worst = 0f64;
    for (&a, &d) in arrivals_ms.iter().zip(durations_ms) {
        worst = worst.max(a - t0 - before);
        before += d;
    }
    Some(worst)
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Done,
    Cancelled,
    Error,
}

/// What the engine reports about a finished request (stage side).
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineSide {
    pub frames: Option<u64>,
    pub times: Option<StageTimes>,
    /// First / last codec frame completion, ms after `t_req`.
    pub first_frame_ms: Option<f64>,
    pub last_frame_ms: Option<f64>,
}

/// Inputs of [`RequestMetrics::compute`], times in ms after `t_req` (the
/// moment `synthesize` was called, client side).
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    pub chunk_ms: &'a [f64],
    pub chunk_samples: &'a [usize],
    pub terminal_ms: f64,
    pub sample_rate: u32,
    pub samples_per_frame: usize,
    pub outcome: Outcome,
    pub finite: bool,
    pub prebuffer_ms: f64,
    pub engine: EngineSide,
    pub cancel_ack_ms: Option<f64>,
    pub late_audio_samples: Option<u64>,
}

/// One request's figures (METRICS.md names). `t_req` is client side: when
/// `Session::synthesize` was called.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RequestMetrics {
    pub outcome: Outcome,
    pub ttfp_ms: Option<f64>,
    pub e2el_ms: f64,
    pub audio_s: f64,
    pub rtf: Option<f64>,
    pub stream_rtf: Option<f64>,
    pub required_prebuffer_ms: Option<f64>,
    /// Continuity at P = 0.
    pub underruns: Option<u32>,
    pub stall_ms: Option<f64>,
    pub continuity_ok: Option<bool>,
    /// Continuity at the configured prebuffer.
    pub prebuffer_ms: f64,
    pub underruns_at_prebuffer: Option<u32>,
    pub stall_ms_at_prebuffer: Option<f64>,
    pub continuity_ok_at_prebuffer: Option<bool>,
    pub chunks: usize,
    pub frames: Option<u64>,
    pub samples: u64,
    pub samples_per_frame: usize,
    /// `samples == frames * samples_per_frame`; null when cancelled or the
    /// frame count is unknown (failed requests).
    pub complete: Option<bool>,
    pub finite: bool,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub talker_ms: Option<f64>,
    pub code_predictor_ms: Option<f64>,
    pub code2wav_ms: Option<f64>,
    pub handoff_ms: Option<f64>,
    pub cancel_ack_ms: Option<f64>,
    pub late_audio_samples: Option<u64>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl RequestMetrics {
    pub fn compute(o: &Observed<'_>) -> RequestMetrics {
        let sr = o.sample_rate as f64;
        let durations: Vec<f64> = o
            .chunk_samples
            .iter()
            .map(|&n| n as f64 * 1e3 / sr)
            .collect();
        let samples: u64 = o.chunk_samples.iter().map(|&n| n as u64).sum();
        let audio_s = samples as f64 / sr;
        let n = o.chunk_ms.len();
        let t0 = o.chunk_ms.first().copied();
        let t_last = o.chunk_ms.last().copied();
        let rtf = match t_last {
            Some(t) if audio_s > 0.0 => Some(t / 1e3 / audio_s),
            _ => None,
        };
        let stream_rtf = if n >= 2 {
            let rest = audio_s - o.chunk_samples[0] as f64 / sr;
            Some((t_last.unwrap() - t0.unwrap()) / 1e3 / rest)
        } else {
            None
        };
        let p0 = continuity(o.chunk_ms, &durations, 0.0);
        let pb = continuity(o.chunk_ms, &durations, o.prebuffer_ms);
        let e = &o.engine;
        let complete = match (o.outcome, e.frames) {
            (Outcome::Cancelled, _) | (_, None) => None,
            (_, Some(f)) => Some(samples == f * o.samples_per_frame as u64),
        };
        let tpot_ms = match (e.frames, e.first_frame_ms, e.last_frame_ms) {
            (Some(f), Some(a), Some(b)) if f >= 2 => Some((b - a) / (f - 1) as f64),
            _ => None,
        };
        RequestMetrics {
            outcome: o.outcome,
            ttfp_ms: t0,
            e2el_ms: o.terminal_ms,
            audio_s,
            rtf,
            stream_rtf,
            required_prebuffer_ms: required_prebuffer_ms(o.chunk_ms, &durations),
            underruns: p0.map(|c| c.underruns),
            stall_ms: p0.map(|c| c.stall_ms),
            continuity_ok: p0.map(|c| c.continuity_ok),
            prebuffer_ms: o.prebuffer_ms,
            underruns_at_prebuffer: pb.map(|c| c.underruns),
            stall_ms_at_prebuffer: pb.map(|c| c.stall_ms),
            continuity_ok_at_prebuffer: pb.map(|c| c.continuity_ok),
            chunks: n,
            frames: e.frames,
            samples,
            samples_per_frame: o.samples_per_frame,
            complete,
            finite: o.finite,
            ttft_ms: e.first_frame_ms,
            tpot_ms,
            talker_ms: e.times.map(|t| ms(t.talker)),
            code_predictor_ms: e.times.map(|t| ms(t.code_predictor)),
            code2wav_ms: e.times.map(|t| ms(t.code2wav)),
            handoff_ms: e.times.map(|t| ms(t.handoff)),
            cancel_ack_ms: o.cancel_ack_ms,
            late_audio_samples: o.late_audio_samples,
        }
    }
}

/// Nearest-rank percentile of sorted values: `v[ceil(n*f) - 1]`.
pub fn nearest_rank(sorted: &[f64], f: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let rank = ((n as f64 * f).ceil() as usize).clamp(1, n);
    Some(sorted[rank - 1])
}

/// p50 / p95 / max over the measured (non-null) values, with `n` and the
/// label of the max.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    pub n: usize,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub max: Option<f64>,
    pub argmax: Option<String>,
}

impl Summary {
    /// `values` are `(label, value)`; `None` values (missing) are left out
    /// and do not count in `n`.
    pub fn of(values: &[(String, Option<f64>)]) -> Summary {
        let mut v: Vec<(f64, &str)> = values
            .iter()
            .filter_map(|(l, x)| x.map(|x| (x, l.as_str())))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let sorted: Vec<f64> = v.iter().map(|x| x.0).collect();
        Summary {
            n: v.len(),
            p50: nearest_rank(&sorted, 0.5),
            p95: nearest_rank(&sorted, 0.95),
            max: sorted.last().copied(),
            argmax: v.last().map(|x| x.1.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuity_counts_stalls_after_the_prebuffer() {
        // Three 80 ms chunks arriving at 0, 100, 300 ms.
        let (a, d) = ([0.0, 100.0, 300.0], [80.0, 80.0, 80.0]);
        // P = 0: plays 0-80, waits to 100 (stall 20), plays to 180, waits to 300 (stall 120).
        let c = continuity(&a, &d, 0.0).unwrap();
        assert_eq!(
            (c.underruns, c.stall_ms, c.continuity_ok),
            (2, 140.0, false)
        );
        // P = 50: plays 50-130, chunk 1 arrived at 100: 130-210, waits to 300 (stall 90).
        let c = continuity(&a, &d, 50.0).unwrap();
        assert_eq!((c.underruns, c.stall_ms), (1, 90.0));
        // The required prebuffer is max(0, 100-80, 300-160) = 140, and it suffices.
        let req = required_prebuffer_ms(&a, &d).unwrap();
        assert_eq!(req, 140.0);
        assert_eq!(continuity(&a, &d, req).unwrap().underruns, 0);
        assert_eq!(continuity(&a, &d, req - 1.0).unwrap().underruns, 1);
    }

    #[test]
    fn continuity_is_relative_to_the_first_chunk_and_ends_with_the_stream() {
        // Faster than real time after a late first chunk: no underrun at P = 0.
        let (a, d) = ([500.0, 520.0, 560.0], [80.0, 320.0, 640.0]);
        let c = continuity(&a, &d, 0.0).unwrap();
        assert_eq!(c.underruns, 0);
        assert_eq!(required_prebuffer_ms(&a, &d), Some(0.0));
        // A single chunk never underruns; no chunks: missing.
        assert_eq!(continuity(&[10.0], &[80.0], 0.0).unwrap().underruns, 0);
        assert_eq!(continuity(&[], &[], 0.0), None);
        assert_eq!(required_prebuffer_ms(&[], &[]), None);
    }

    fn observed<'a>(
        chunk_ms: &'a [f64],
        chunk_samples: &'a [usize],
        outcome: Outcome,
        frames: Option<u64>,
    ) -> Observed<'a> {
        Observed {
            chunk_ms,
            chunk_samples,
            terminal_ms: chunk_ms.last().copied().unwrap_or(5.0) + 1.0,
            sample_rate: 1000,
            samples_per_frame: 80,
            outcome,
            finite: true,
            prebuffer_ms: 100.0,
            engine: EngineSide {
                frames,
                times: None,
                first_frame_ms: Some(10.0),
                last_frame_ms: Some(70.0),
            },
            cancel_ack_ms: None,
            late_audio_samples: None,
        }
    }

    #[test]
    fn request_metrics_follow_the_definitions() {
        // sr 1000: 80 samples = 80 ms. Chunks at 50, 150, 200 ms after t_req.
        let m = RequestMetrics::compute(&observed(
            &[50.0, 150.0, 200.0],
            &[80, 160, 80],
            Outcome::Done,
            Some(4),
        ));
        assert_eq!(m.ttfp_ms, Some(50.0));
        assert_eq!(m.e2el_ms, 201.0);
        assert!((m.audio_s - 0.32).abs() < 1e-12);
        assert!((m.rtf.unwrap() - 0.2 / 0.32).abs() < 1e-12);
        assert!((m.stream_rtf.unwrap() - 0.15 / 0.24).abs() < 1e-12);
        assert_eq!(m.required_prebuffer_ms, Some(20.0));
        assert_eq!((m.underruns, m.continuity_ok), (Some(1), Some(false)));
        assert_eq!(
            (m.underruns_at_prebuffer, m.continuity_ok_at_prebuffer),
            (Some(0), Some(true))
        );
        assert_eq!(
            (m.frames, m.samples, m.complete),
            (Some(4), 320, Some(true))
        );
        assert_eq!(m.ttft_ms, Some(10.0));
        assert_eq!(m.tpot_ms, Some(20.0));
        assert_eq!(m.talker_ms, None, "missing stage times are null, not 0");
    }

    #[test]
    fn single_chunk_and_empty_streams_report_missing_not_zero() {
        let one = RequestMetrics::compute(&observed(&[40.0], &[80], Outcome::Done, Some(1)));
        assert_eq!(one.stream_rtf, None);
        assert_eq!(one.tpot_ms, None);
        let none = RequestMetrics::compute(&observed(&[], &[], Outcome::Error, None));
        assert_eq!(
            (
                none.ttfp_ms,
                none.rtf,
                none.required_prebuffer_ms,
                none.continuity_ok
            ),
            (None, None, None, None)
        );
        assert_eq!(none.complete, None);
        let cancelled =
            RequestMetrics::compute(&observed(&[40.0], &[80], Outcome::Cancelled, Some(3)));
        assert_eq!(cancelled.complete, None);
        let short = RequestMetrics::compute(&observed(&[40.0], &[80], Outcome::Done, Some(3)));
        assert_eq!(short.complete, Some(false));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=10).map(|x| x as f64).collect();
        assert_eq!(nearest_rank(&v, 0.5), Some(5.0));
        assert_eq!(nearest_rank(&v, 0.95), Some(10.0));
        assert_eq!(nearest_rank(&[3.0], 0.95), Some(3.0));
        assert_eq!(nearest_rank(&[], 0.5), None);
        let s = Summary::of(&[
            ("a".into(), Some(2.0)),
            ("b".into(), None),
            ("c".into(), Some(9.0)),
            ("d".into(), Some(1.0)),
        ]);
        assert_eq!(
            (s.n, s.p50, s.max, s.argmax.as_deref()),
            (3, Some(2.0), Some(9.0), Some("c"))
        );
    }
}
