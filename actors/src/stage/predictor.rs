//! The code predictor stage: every request's predictor RNG stream, its
//! ready frames run as one batched code-predictor frame per step. The actor
//! around it is [`super::actor`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tts_models::code_predictor::PredictScratch;
use tts_models::Qwen3Tts;
use tts_models::{PredictorState, StopReason, TalkerOutput};

use super::actor::{StageLogic, StepCx};
use super::wiring::Handoff;
use crate::contract::*;

/// The code predictor stage: owns every request's predictor RNG stream.
/// Each step runs the frame of every ready request as one batched
/// code-predictor frame (its G-1 sequential steps shared by the batch).
pub struct PredictorStage {
    model: Arc<Qwen3Tts>,
    reqs: HashMap<RequestKey, PredictorState>,
    max_batch: usize,
    scratch: PredictScratch,
}

impl PredictorStage {
    pub fn new(model: Arc<Qwen3Tts>, max_batch: usize) -> Self {
        PredictorStage {
            model,
            reqs: HashMap::new(),
            max_batch,
            scratch: PredictScratch::default(),
        }
    }
}

/// One request's part in a predictor step.
struct PredictJob {
    key: RequestKey,
    frame_index: u64,
    last: bool,
    out: TalkerOutput,
    times: StageTimes,
}

impl StageLogic for PredictorStage {
    const KIND: StageKind = StageKind::CodePredictor;
    const PARTNER: Option<StageKind> = Some(StageKind::Talker);
    type Input = TalkerToken;
    type State = PredictorState;

    fn stamp(i: &TalkerToken) -> &Stamp {
        &i.stamp
    }

    fn sender(_: &TalkerToken) -> Option<StageKind> {
        Some(StageKind::Talker)
    }

    fn max_batch(&self) -> usize {
        self.max_batch
    }

    fn process(&mut self, inputs: Vec<TalkerToken>, cx: &mut StepCx<'_>) -> Vec<TalkerToken> {
        let mut jobs = Vec::with_capacity(inputs.len());
        for mut t in inputs {
            let key = t.stamp.key;
            if let Some(open) = t.open.take() {
                self.reqs.insert(key, *open);
            }
            if !self.reqs.contains_key(&key) {
                cx.shared.stale_request();
                continue;
            }
            let mut times = t.times;
            times.handoff += t.stamp.sent_at.elapsed();
            match t.kind {
                TokenKind::End(stop) => {
                    let decoder_start = self
                        .reqs
                        .remove(&key)
                        .and_then(|mut s| s.take_decoder_start());
                    cx.out.push(Handoff::Frame(FrameForDecode {
                        stamp: Stamp::new(key, cx.generation),
                        frame_index: t.frame_index,
                        codes: None,
                        first: t.frame_index == 0,
                        decoder_start,
                        stop: Some(stop),
                        produced_at: Instant::now(),
                        times,
                    }));
                }
                TokenKind::C0(out) => jobs.push(PredictJob {
                    key,
                    frame_index: t.frame_index,
                    last: t.last,
                    out,
                    times,
                }),
            }
        }
        if jobs.is_empty() {
            return Vec::new();
        }
        let at: HashMap<RequestKey, usize> =
            jobs.iter().enumerate().map(|(i, j)| (j.key, i)).collect();
        let mut slots: Vec<Option<&mut PredictorState>> = jobs.iter().map(|_| None).collect();
        for (key, session) in self.reqs.iter_mut() {
            if let Some(&i) = at.get(key) {
                slots[i] = Some(session);
            }
        }
        let mut batch: Vec<(&mut PredictorState, &TalkerOutput)> = slots
            .into_iter()
            .zip(&jobs)
            .map(|(s, j)| (s.expect("every job's request is held"), &j.out))
            .collect();
        let (model, scratch) = (&self.model, &mut self.scratch);
        let (frames, d) = cx.batch_call(StageKind::CodePredictor, batch.len(), || {
            PredictorState::predict_batch(model, &mut batch, scratch)
        });
        drop(batch);
        cx.shared
            .frames_made
            .fetch_add(frames.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let produced_at = Instant::now();
        let mut decode = Vec::with_capacity(jobs.len());
        for (job, frame) in jobs.into_iter().zip(frames) {
            let first = job.frame_index == 0;
            let decoder_start = if first {
                self.reqs
                    .get_mut(&job.key)
                    .and_then(|s| s.take_decoder_start())
            } else {
                None
            };
            let mut times = job.times;
            times.code_predictor += d;
            let stamp = Stamp::new(job.key, cx.generation);
            if job.last {
                self.reqs.remove(&job.key);
            } else {
                // Feed back first (all of the step's frames before any goes
                // to code2wav): the talker is the critical path.
                cx.out.push(Handoff::Feedback(FrameFeedback {
                    stamp,
                    frame_index: job.frame_index,
                    codes: frame.clone(),
                    times,
                }));
            }
            decode.push(Handoff::Frame(FrameForDecode {
                stamp,
                frame_index: job.frame_index,
                codes: Some(frame),
                first,
                decoder_start,
                stop: job.last.then_some(StopReason::MaxFrames),
                produced_at,
                times,
            }));
        }
        cx.out.extend(decode);
        Vec::new()
    }

    fn states(&self) -> &HashMap<RequestKey, PredictorState> {
        &self.reqs
    }

    fn states_mut(&mut self) -> &mut HashMap<RequestKey, PredictorState> {
        &mut self.reqs
    }
}
