//! METRICS.md figures for one context, which may span several engine
//! requests (segments), measured where the server hands frames to the
//! socket.

use tokio::time::Instant;

use tts_actors::metrics::{ChunkLog, EngineSide, MetricsInput, Outcome};
use tts_actors::RequestMetrics;

use crate::protocol::ContextMetrics;

#[derive(Debug)]
pub struct Recorder {
    first_text: Instant,
    /// The context's model chunks, timed from its first submit (the
    /// engine's own per-request log, kept across segments).
    log: ChunkLog,
    frames: Option<u64>,
    stage_ms: [Option<f64>; 4],
    segments: usize,
    output_samples: u64,
}

impl Recorder {
    /// `first_text`: when the context's first text arrived.
    pub fn new(first_text: Instant) -> Self {
        Recorder {
            first_text,
            log: ChunkLog::new(),
            frames: Some(0),
            stage_ms: [None; 4],
            segments: 0,
            output_samples: 0,
        }
    }

    /// A segment went to the engine; the first one is `t_req`.
    pub fn submitted(&mut self, now: Instant) {
        self.log.start(now.into_std());
        self.segments += 1;
    }

    /// A frame with `native` model-rate samples (`output` at the session
    /// rate) was handed to the socket at `now`.
    pub fn chunk(&mut self, now: Instant, native: &[f32], output: usize) {
        self.output_samples += output as u64;
        self.log.record(now.into_std(), native);
    }

    /// Output samples that are not a model chunk (the resampler's tail).
    pub fn tail(&mut self, output: usize) {
        self.output_samples += output as u64;
    }

    /// A segment finished: add its frames and stage times.
    pub fn segment_done(&mut self, m: &RequestMetrics) {
        self.frames = match (self.frames, m.frames) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        let add = |acc: Option<f64>, v: Option<f64>| match (acc, v) {
            (a, Some(v)) => Some(a.unwrap_or(0.0) + v),
            (a, None) => a,
        };
        let s = [
            m.talker_ms,
            m.code_predictor_ms,
            m.code2wav_ms,
            m.handoff_ms,
        ];
        for (acc, v) in self.stage_ms.iter_mut().zip(s) {
            *acc = add(*acc, v);
        }
    }

    pub fn finish(
        &self,
        outcome: Outcome,
        sample_rate: u32,
        samples_per_frame: usize,
        output_sample_rate: u32,
        prebuffer_ms: f64,
    ) -> ContextMetrics {
        let now = Instant::now();
        let frames = if self.segments == 0 {
            None
        } else {
            self.frames
        };
        let t_req = self.log.t_req();
        let r = RequestMetrics::compute(&MetricsInput {
            chunk_ms: self.log.chunk_ms(),
            chunk_samples: self.log.chunk_samples(),
            terminal_ms: self.log.ms_since_start(now.into_std()).unwrap_or(0.0),
            sample_rate,
            samples_per_frame,
            outcome,
            finite: self.log.finite(),
            prebuffer_ms,
            engine: EngineSide {
                frames,
                ..EngineSide::default()
            },
            cancel_ack_ms: None,
            late_audio_samples: None,
        });
        ContextMetrics {
            ttfp_ms: r.ttfp_ms,
            e2el_ms: t_req.map(|_| r.e2el_ms),
            audio_s: r.audio_s,
            rtf: r.rtf,
            stream_rtf: r.stream_rtf,
            required_prebuffer_ms: r.required_prebuffer_ms,
            underruns: r.underruns,
            stall_ms: r.stall_ms,
            continuity_ok: r.continuity_ok,
            prebuffer_ms,
            underruns_at_prebuffer: r.underruns_at_prebuffer,
            continuity_ok_at_prebuffer: r.continuity_ok_at_prebuffer,
            chunks: r.chunks,
            frames: r.frames,
            samples: r.samples,
            samples_per_frame,
            complete: r.complete,
            finite: r.finite,
            output_samples: self.output_samples,
            output_sample_rate,
            segments: self.segments,
            text_wait_ms: t_req.map(|t| {
                t.saturating_duration_since(self.first_text.into_std())
                    .as_secs_f64()
                    * 1e3
            }),
            talker_ms: self.stage_ms[0],
            code_predictor_ms: self.stage_ms[1],
            code2wav_ms: self.stage_ms[2],
            handoff_ms: self.stage_ms[3],
            ttfp_from_text_ms: t_req.zip(r.ttfp_ms).map(|(t, ttfp)| {
                t.saturating_duration_since(self.first_text.into_std())
                    .as_secs_f64()
                    * 1e3
                    + ttfp
            }),
            pauses: None,
            utterances: None,
        }
    }
}
