//! The talker stage: the talker's per-request KV caches, stepped for every
//! ready request of a round in one batched decoder pass. The actor around
//! it is [`super::actor`]; stop rules in [`super`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tts_models::lm::BatchScratch;
use tts_models::Qwen3Tts;
use tts_models::{PredictorState, StopReason, TalkerOutput, TalkerState, TalkerWork};

use super::actor::{StageLogic, StepCx};
use super::wiring::Handoff;
use crate::contract::*;
use crate::flow::FlowGate;
use crate::flow::LiveFeed;

/// Input of the talker: a new request or a frame fed back.
pub enum TalkerInput {
    /// Boxed: once per request, and far larger than a feedback.
    Start(Box<StartRequest>),
    Feedback(FrameFeedback),
}

/// The router's start, as it arrives through [`super::wiring::Wiring::start`].
impl From<Box<StartRequest>> for TalkerInput {
    fn from(s: Box<StartRequest>) -> Self {
        TalkerInput::Start(s)
    }
}

/// The predictor's frame, as it arrives through
/// [`super::wiring::Wiring::feedback`].
impl From<FrameFeedback> for TalkerInput {
    fn from(f: FrameFeedback) -> Self {
        TalkerInput::Feedback(f)
    }
}

/// One request's talker state.
pub struct TalkerReq {
    session: TalkerState,
    gate: Arc<FlowGate>,
    max_frames: usize,
    /// Live text: where the rest of the text arrives.
    live: Option<Arc<LiveFeed>>,
}

/// The talker stage: owns every request's talker KV cache. Each step runs
/// every ready request (prefills of joining requests and fed-back frames)
/// through one batched decoder pass.
pub struct TalkerStage {
    model: Arc<Qwen3Tts>,
    reqs: HashMap<RequestKey, TalkerReq>,
    max_batch: usize,
    scratch: BatchScratch,
    /// Live-text requests waiting for text, with their next input: out of
    /// the stage's work queue (no timer, no step) until the feed's push
    /// wakes the stage ([`StageLogic::woken`]).
    parked: HashMap<RequestKey, FrameFeedback>,
}

/// One request's part in a talker step.
struct TalkerJob {
    key: RequestKey,
    /// Index of the frame the picked token is for.
    index: u64,
    times: StageTimes,
    open: Option<Box<PredictorState>>,
    /// `None`: the prefill; else the frame fed back.
    feedback: Option<Vec<u32>>,
}

impl TalkerStage {
    pub fn new(model: Arc<Qwen3Tts>, max_batch: usize) -> Self {
        TalkerStage {
            model,
            reqs: HashMap::new(),
            max_batch,
            scratch: BatchScratch::default(),
            parked: HashMap::new(),
        }
    }

    /// Emits the token `out` a step picked for `job`'s frame and forgets the
    /// request when no further talker step can follow.
    fn emit(&mut self, job: TalkerJob, out: TalkerOutput, cx: &mut StepCx<'_>) {
        let TalkerJob {
            key,
            index,
            times,
            open,
            ..
        } = job;
        let max_frames = self.reqs[&key].max_frames;
        let eos = self.model.config.talker.codec.eos;
        let (kind, last) = if out.c0 == eos {
            (TokenKind::End(StopReason::Eos), true)
        } else {
            (TokenKind::C0(out), index + 1 == max_frames as u64)
        };
        let ends = matches!(kind, TokenKind::End(_));
        if last {
            self.reqs.remove(&key);
        }
        cx.out.push(Handoff::Token(TalkerToken {
            stamp: Stamp::new(key, cx.generation),
            frame_index: index,
            kind,
            last: last && !ends,
            open,
            times,
        }));
    }

    /// Sorts one input into this step's jobs, or answers it at once.
    fn admit(
        &mut self,
        input: TalkerInput,
        jobs: &mut Vec<TalkerJob>,
        deferred: &mut Vec<TalkerInput>,
        cx: &mut StepCx<'_>,
    ) {
        match input {
            TalkerInput::Start(s) => {
                let s = *s;
                let key = s.stamp.key;
                let times = StageTimes {
                    handoff: s.stamp.sent_at.elapsed(),
                    ..StageTimes::default()
                };
                let open = Some(Box::new(s.predictor));
                if s.max_frames == 0 {
                    cx.out.push(Handoff::Token(TalkerToken {
                        stamp: Stamp::new(key, cx.generation),
                        frame_index: 0,
                        kind: TokenKind::End(StopReason::MaxFrames),
                        last: false,
                        open,
                        times,
                    }));
                    return;
                }
                self.reqs.insert(
                    key,
                    TalkerReq {
                        session: s.talker,
                        gate: s.gate,
                        max_frames: s.max_frames,
                        live: s.live,
                    },
                );
                jobs.push(TalkerJob {
                    key,
                    index: 0,
                    times,
                    open,
                    feedback: None,
                });
            }
            TalkerInput::Feedback(mut f) => {
                let key = f.stamp.key;
                let Some(req) = self.reqs.get_mut(&key) else {
                    cx.shared.stale_request();
                    return;
                };
                if let Some(feed) = &req.live {
                    feed.drain_into(&mut req.session);
                    if req.session.waiting_for_text() {
                        // Live text has not arrived: park this request
                        // (it leaves the batch, and nothing polls it) until
                        // the feed's next push wakes the stage. Time spent
                        // waiting is not hand-off time.
                        f.stamp.sent_at = Instant::now();
                        match cx.waker {
                            Some(w) if feed.park(f.frame_index + 1, w) => {
                                self.parked.insert(key, f);
                                return;
                            }
                            // Rows came in meanwhile: take them.
                            Some(_) => feed.drain_into(&mut req.session),
                            None => {}
                        }
                    }
                    if !req.session.waiting_for_text() {
                        feed.resumed();
                    }
                }
                if req.gate.should_pause() || req.session.waiting_for_text() {
                    // The consumer is behind (or, outside an actor, live
                    // text has not arrived): hold this request only (it
                    // leaves the batch until it resumes), rechecked on the
                    // stage's tick. Time spent paused is not hand-off time.
                    f.stamp.sent_at = Instant::now();
                    deferred.push(TalkerInput::Feedback(f));
                    return;
                }
                let mut times = f.times;
                times.handoff += f.stamp.sent_at.elapsed();
                jobs.push(TalkerJob {
                    key,
                    index: f.frame_index + 1,
                    times,
                    open: None,
                    feedback: Some(f.codes),
                });
            }
        }
    }
}

impl StageLogic for TalkerStage {
    const KIND: StageKind = StageKind::Talker;
    const PARTNER: Option<StageKind> = Some(StageKind::CodePredictor);
    type Input = TalkerInput;
    type State = TalkerReq;

    fn stamp(i: &TalkerInput) -> &Stamp {
        match i {
            TalkerInput::Start(s) => &s.stamp,
            TalkerInput::Feedback(f) => &f.stamp,
        }
    }

    fn sender(i: &TalkerInput) -> Option<StageKind> {
        match i {
            TalkerInput::Start(_) => None,
            TalkerInput::Feedback(_) => Some(StageKind::CodePredictor),
        }
    }

    fn max_batch(&self) -> usize {
        self.max_batch
    }

    fn process(&mut self, inputs: Vec<TalkerInput>, cx: &mut StepCx<'_>) -> Vec<TalkerInput> {
        let mut jobs = Vec::with_capacity(inputs.len());
        let mut deferred = Vec::new();
        for input in inputs {
            self.admit(input, &mut jobs, &mut deferred, cx);
        }
        if jobs.is_empty() {
            return deferred;
        }
        // The jobs' sessions, in job order (the stage runs distinct
        // requests per step, so each key appears once).
        let at: HashMap<RequestKey, usize> =
            jobs.iter().enumerate().map(|(i, j)| (j.key, i)).collect();
        let mut slots: Vec<Option<&mut TalkerState>> = jobs.iter().map(|_| None).collect();
        for (key, req) in self.reqs.iter_mut() {
            if let Some(&i) = at.get(key) {
                slots[i] = Some(&mut req.session);
            }
        }
        let mut batch: Vec<(&mut TalkerState, TalkerWork<'_>)> = slots
            .into_iter()
            .zip(&jobs)
            .map(|(s, j)| {
                let work = match &j.feedback {
                    None => TalkerWork::Prefill,
                    Some(codes) => TalkerWork::Feedback(codes),
                };
                (s.expect("every job's request is held"), work)
            })
            .collect();
        let (model, scratch) = (&self.model, &mut self.scratch);
        let (outs, d) = cx.batch_call(StageKind::Talker, batch.len(), || {
            TalkerState::step_batch(model, &mut batch, scratch)
        });
        drop(batch);
        for (mut job, out) in jobs.into_iter().zip(outs) {
            // The wall time of the step this request took part in.
            job.times.talker += d;
            self.emit(job, out, cx);
        }
        deferred
    }

    fn states(&self) -> &HashMap<RequestKey, TalkerReq> {
        &self.reqs
    }

    fn states_mut(&mut self) -> &mut HashMap<RequestKey, TalkerReq> {
        &mut self.reqs
    }

    fn drop_request(&mut self, key: RequestKey) -> bool {
        let parked = self.parked.remove(&key).is_some();
        self.reqs.remove(&key).is_some() || parked
    }

    fn clear(&mut self) {
        self.parked.clear();
        self.reqs.clear();
    }

    /// The parked requests whose text has come (or that are gone: their
    /// input then meets the stale-request path).
    fn woken(&mut self) -> Vec<TalkerInput> {
        let reqs = &self.reqs;
        let ready: Vec<RequestKey> = self
            .parked
            .keys()
            .filter(|k| {
                reqs.get(k)
                    .and_then(|r| r.live.as_ref())
                    .is_none_or(|feed| feed.has_pending())
            })
            .copied()
            .collect();
        ready
            .into_iter()
            .filter_map(|k| self.parked.remove(&k))
            .map(TalkerInput::Feedback)
            .collect()
    }

    fn parked(&self, key: &RequestKey) -> bool {
        self.parked.contains_key(key)
    }
}
