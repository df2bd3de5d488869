//! Per-request metrics exactly as `shared/METRICS.md` defines them, the
//! chunk log they are computed from, and the summaries over many requests.
//!
//! Everything here is a pure function of arrival times and sample counts, so
//! the formulas are unit-tested without an engine. Missing figures are
//! `None` (serialized as `null`), never 0. The playout continuity
//! simulation is [`tts_audio::continuity`]'s, re-exported here.

use std::time::{Duration, Instant};

pub use tts_audio::continuity::{continuity, required_prebuffer_ms, Continuity};

use crate::contract::StageTimes;

/// The audio chunks a consumer received, timed from `t_req`: what the
/// METRICS.md figures of [`RequestMetrics::compute`] (TTFP, RTF,
/// continuity, finiteness) are measured on.
///
/// One [`crate::Stream`] keeps one per request, started when
/// `synthesize` was called. A measurement spanning several engine requests
/// (a realtime context of several segments) keeps one across all of them:
/// [`ChunkLog::start`] at its first submit, or its first chunk if that
/// comes first.
#[derive(Clone, Debug)]
pub struct ChunkLog {
    t_req: Option<Instant>,
    chunk_ms: Vec<f64>,
    chunk_samples: Vec<usize>,
    finite: bool,
}

impl Default for ChunkLog {
    fn default() -> Self {
        ChunkLog::new()
    }
}

impl ChunkLog {
    /// A log not started yet (`t_req` unknown).
    pub fn new() -> Self {
        ChunkLog {
            t_req: None,
            chunk_ms: Vec::new(),
            chunk_samples: Vec::new(),
            finite: true,
        }
    }

    /// A log whose `t_req` is `t_req`.
    pub fn starting_at(t_req: Instant) -> Self {
        ChunkLog {
            t_req: Some(t_req),
            ..ChunkLog::new()
        }
    }

    /// Sets `t_req` to `now` unless it is set; returns it.
    pub fn start(&mut self, now: Instant) -> Instant {
        *self.t_req.get_or_insert(now)
    }

    /// A chunk of `samples` was received at `now`. Empty chunks (a bare
    /// terminal marker) carry no audio: they are not counted and do not
    /// start the log.
    pub fn record(&mut self, now: Instant, samples: &[f32]) {
        if samples.is_empty() {
            return;
        }
        let t_req = self.start(now);
        self.chunk_ms
            .push(now.saturating_duration_since(t_req).as_secs_f64() * 1e3);
        self.chunk_samples.push(samples.len());
        self.finite &= samples.iter().all(|s| s.is_finite());
    }

    pub fn t_req(&self) -> Option<Instant> {
        self.t_req
    }

    /// Milliseconds from `t_req` to `t` (0 if `t` is earlier); `None`
    /// before the log started.
    pub fn ms_since_start(&self, t: Instant) -> Option<f64> {
        self.t_req
            .map(|t_req| t.saturating_duration_since(t_req).as_secs_f64() * 1e3)
    }

    /// Arrival of each counted chunk, ms after `t_req`.
    pub fn chunk_ms(&self) -> &[f64] {
        &self.chunk_ms
    }

    /// Samples of each counted chunk.
    pub fn chunk_samples(&self) -> &[usize] {
        &self.chunk_samples
    }

    /// Every sample received so far is finite.
    pub fn finite(&self) -> bool {
        self.finite
    }
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
pub struct MetricsInput<'a> {
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
    pub fn compute(o: &MetricsInput<'_>) -> RequestMetrics {
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

/// Says once per process (per server, or per `speak --play`) that a request
/// ran slower than real time, with its rtf: the first such request is
/// logged at WARN, later ones only reach the per-request log lines and the
/// `tts_rtf` histogram (a busy server would otherwise warn on every
/// request). Pure over the rtf it is given, so tests set the threshold
/// instead of timing anything.
#[derive(Debug)]
pub struct SlowRequestWarning {
    /// An rtf above this is slower than real time (1.0 in use).
    threshold: f64,
    warned: std::sync::atomic::AtomicBool,
}

impl Default for SlowRequestWarning {
    fn default() -> Self {
        SlowRequestWarning::new(SlowRequestWarning::REAL_TIME)
    }
}

impl SlowRequestWarning {
    /// rtf 1.0: audio made exactly as fast as it plays.
    pub const REAL_TIME: f64 = 1.0;

    pub fn new(threshold: f64) -> Self {
        SlowRequestWarning {
            threshold,
            warned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether this request's `rtf` is the first above the threshold (the
    /// one to warn about); false for every later one, and for a request
    /// with no rtf (no audio).
    pub fn first_slow(&self, rtf: Option<f64>) -> bool {
        match rtf {
            Some(r) if r.is_finite() && r > self.threshold => {
                !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed)
            }
            _ => false,
        }
    }

    /// [`Self::first_slow`], and if so the WARN line: the rtf, the
    /// precision the process runs (`precision`, its `--precision`
    /// spelling) and what to change.
    pub fn observe(&self, rtf: Option<f64>, precision: &str) -> bool {
        let first = self.first_slow(rtf);
        if first {
            let rtf = rtf.unwrap_or(f64::NAN);
            tracing::warn!(
                rtf,
                precision,
                "a request ran slower than real time (rtf {rtf:.2}: a listener hears gaps unless it buffers); {} (said once per process)",
                slow_advice(precision)
            );
        }
        first
    }
}

/// What to change when requests run slower than real time, by the
/// precision running.
fn slow_advice(precision: &str) -> &'static str {
    // `fast` (and `fast` with its former bf16 vocoder) or lower.
    if precision.starts_with("int8,int8,")
        || precision.starts_with("q4")
        || precision.starts_with("iq4")
    {
        "fewer requests at once, fewer --threads fighting other work, or a host with more memory bandwidth (and AVX-512, for the vocoder) help (docs/performance.md)"
    } else {
        "--precision fast streams in real time on 2 cores at 0.6B (docs/performance.md, \"Precision by tensor\"); fewer requests at once also help"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed<'a>(
        chunk_ms: &'a [f64],
        chunk_samples: &'a [usize],
        outcome: Outcome,
        frames: Option<u64>,
    ) -> MetricsInput<'a> {
        MetricsInput {
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
    fn chunk_log_skips_empty_chunks_and_starts_at_the_first_submit_or_chunk() {
        use std::time::{Duration, Instant};
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        // Not started: an empty (terminal) chunk neither counts nor starts it.
        let mut log = ChunkLog::new();
        log.record(at(5), &[]);
        assert_eq!((log.t_req(), log.chunk_ms().len()), (None, 0));
        assert_eq!(log.ms_since_start(at(5)), None);
        // The first audio starts it (its arrival is 0 ms).
        log.record(at(10), &[0.1, 0.2]);
        log.record(at(30), &[0.3, f32::NAN, 0.0]);
        assert_eq!(log.t_req(), Some(at(10)));
        assert_eq!(log.chunk_ms(), [0.0, 20.0]);
        assert_eq!(log.chunk_samples(), [2, 3]);
        assert!(!log.finite(), "one NaN sample");
        // A later start does not move t_req; times before it clamp to 0.
        assert_eq!(log.start(at(50)), at(10));
        assert_eq!(log.ms_since_start(at(0)), Some(0.0));
        // Started up front (a stream, or a context's first submit).
        let mut log = ChunkLog::starting_at(at(0));
        log.record(at(40), &[0.5]);
        assert_eq!((log.chunk_ms(), log.finite()), (&[40.0][..], true));
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
    /// Issue 31, item 1: a request slower than real time is warned about
    /// once per process, not per request; the threshold is a parameter, so
    /// no clock is involved.
    #[test]
    fn real_time_by_default_a_slow_request_warns_once_per_process() {
        let w = SlowRequestWarning::new(1.0);
        assert!(!w.first_slow(Some(0.5)), "faster than real time");
        assert!(!w.first_slow(None), "no audio, no rtf");
        assert!(!w.first_slow(Some(f64::NAN)));
        assert!(!w.first_slow(Some(1.0)), "exactly real time is not slower");
        assert!(w.first_slow(Some(1.3)), "the first slow request");
        assert!(!w.first_slow(Some(2.0)), "later ones are not warned about");
        assert!(!w.first_slow(Some(1.3)));
        let strict = SlowRequestWarning::new(0.25);
        assert!(strict.first_slow(Some(0.5)), "a lower threshold");
        assert!(!strict.first_slow(Some(0.9)));
    }

    #[test]
    fn the_slow_request_advice_names_fast_unless_it_runs() {
        assert!(slow_advice("f32,f32,f32").contains("--precision fast"));
        assert!(!slow_advice("int8,int8,int8").contains("--precision fast"));
        assert!(!slow_advice("int8,int8,bf16").contains("--precision fast"));
    }
}
