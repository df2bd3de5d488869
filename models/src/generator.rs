//! The offline generator: both LM stages of one request on the calling
//! thread, one frame of `num_code_groups` codes per
//! [`FrameGenerator::next_frame`] call. The streaming runtime runs the two
//! stage states ([`TalkerState`], [`PredictorState`]) apart instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::code_predictor::PredictorState;
use crate::error::Result;
use crate::model::Qwen3Tts;
use crate::request::{GenOptions, Request, StopReason};
use crate::sampling::LogitsObserver;
use crate::talker::{Prompt, TalkerOutput, TalkerState};

/// Defined here, not beside the handle, so the model handle does not
/// depend on the offline generator.
impl Qwen3Tts {
    /// Starts generating a request.
    pub fn start(self: &Arc<Self>, req: &Request) -> Result<FrameGenerator> {
        let prompt = self.build_prompt(req)?;
        Ok(FrameGenerator::new(self.clone(), prompt, &req.options))
    }
}

/// Time spent in each LM stage of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GenStats {
    /// Talker prefill over the prompt (including the first codebook-0 pick).
    pub prefill: Duration,
    /// Talker decode steps (one per frame after the first).
    pub talker: Duration,
    /// Code predictor (G-1 steps per frame).
    pub code_predictor: Duration,
}

/// Both stages of one request on the calling thread: one frame per
/// [`FrameGenerator::next_frame`].
pub struct FrameGenerator {
    model: Arc<Qwen3Tts>,
    talker: TalkerState,
    predictor: PredictorState,
    max_frames: usize,
    eos: u32,
    /// The talker output awaiting the code predictor.
    pending: Option<TalkerOutput>,
    started: bool,
    frames: usize,
    finished: Option<StopReason>,
    /// Wall time spent per stage so far.
    pub stats: GenStats,
    /// Raw logits observer (tests): talker step logits and predictor logits.
    pub observer: LogitsObserver,
}

impl FrameGenerator {
    fn new(model: Arc<Qwen3Tts>, prompt: Prompt, options: &GenOptions) -> Self {
        FrameGenerator {
            talker: TalkerState::new(&model.talker, &model.config.talker, prompt, options),
            predictor: PredictorState::new(&model.code_predictor, options),
            max_frames: options.max_frames,
            eos: model.config.talker.codec.eos,
            model,
            pending: None,
            started: false,
            frames: 0,
            finished: None,
            stats: GenStats::default(),
            observer: None,
        }
    }

    pub fn prompt(&self) -> &Prompt {
        self.talker.prompt()
    }

    pub fn frames(&self) -> usize {
        self.frames
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        self.finished
    }

    pub fn num_code_groups(&self) -> usize {
        self.model.config.talker.num_code_groups
    }

    /// Talker KV positions held.
    pub fn positions(&self) -> usize {
        self.talker.positions()
    }

    /// Produces the next frame (`num_code_groups` codes), or `None` once the
    /// talker emitted EOS or `max_frames` is reached.
    /// The step runs on a thread of the current rayon pool
    /// ([`tts_kernels::on_pool`]).
    pub fn next_frame(&mut self) -> Option<Vec<u32>> {
        tts_kernels::on_pool(|| self.next_frame_here())
    }

    fn next_frame_here(&mut self) -> Option<Vec<u32>> {
        if self.finished.is_some() {
            return None;
        }
        if self.frames >= self.max_frames {
            self.finished = Some(StopReason::MaxFrames);
            return None;
        }
        let model = self.model.clone();
        if !self.started {
            self.started = true;
            let t = Instant::now();
            self.pending = Some(self.talker.prefill_observed(&model, &mut self.observer));
            self.stats.prefill += t.elapsed();
        }
        let out = self.pending.take().expect("a pending codebook-0 token");
        if out.c0 == self.eos {
            self.finished = Some(StopReason::Eos);
            return None;
        }
        let t = Instant::now();
        let frame = self
            .predictor
            .predict_observed(&model, &out, &mut self.observer);
        self.stats.code_predictor += t.elapsed();
        self.frames += 1;
        // The official loop samples one more codebook-0 token after the last
        // frame it keeps; skip that talker step when the cap is reached.
        if self.frames < self.max_frames {
            let t = Instant::now();
            self.pending = Some(
                self.talker
                    .step_observed(&model, &frame, &mut self.observer),
            );
            self.stats.talker += t.elapsed();
        }
        Some(frame)
    }

    /// Runs to the end, returning all frames flattened `[frames, groups]`.
    pub fn run_to_end(&mut self) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some(f) = self.next_frame() {
            out.extend(f);
        }
        out
    }
}
