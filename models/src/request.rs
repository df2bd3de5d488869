//! The request vocabulary: what a caller asks for ([`Request`] with its
//! [`GenOptions`]), the limits it is checked against, and why generation
//! ended ([`StopReason`]). Plain data, below every stage that reads it.

use crate::config::GenerationConfig;
use crate::sampling::SamplerConfig;

/// Generation options (the official `generate` keyword arguments).
#[derive(Clone, Debug, PartialEq)]
pub struct GenOptions {
    pub talker: SamplerConfig,
    pub code_predictor: SamplerConfig,
    pub repetition_penalty: f32,
    /// Frames at most (the official `max_new_tokens` minus one).
    pub max_frames: usize,
    pub seed: u64,
    /// Never stop at the codec EOS token: generate exactly `max_frames`
    /// frames. Default off; benchmarks on random checkpoints use it for
    /// fixed-length utterances (`tts-rt bench --frames N`).
    pub ignore_eos: bool,
}

impl GenOptions {
    /// The checkpoint's `generation_config.json` defaults.
    pub fn from_config(g: &GenerationConfig) -> Self {
        GenOptions {
            talker: SamplerConfig {
                do_sample: g.do_sample,
                temperature: g.temperature,
                top_k: g.top_k,
                top_p: g.top_p,
            },
            code_predictor: SamplerConfig {
                do_sample: g.subtalker_do_sample,
                temperature: g.subtalker_temperature,
                top_k: g.subtalker_top_k,
                top_p: g.subtalker_top_p,
            },
            repetition_penalty: g.repetition_penalty,
            max_frames: g.max_new_tokens.saturating_sub(1),
            seed: 0,
            ignore_eos: false,
        }
    }

    /// Greedy for both LMs (parity tests).
    pub fn greedy(mut self) -> Self {
        self.talker.do_sample = false;
        self.code_predictor.do_sample = false;
        self
    }
}

/// One synthesis request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub text: String,
    /// Required for CustomVoice (case-insensitive).
    pub speaker: Option<String>,
    /// A `codec_language_id` key or "auto" (case-insensitive).
    pub language: String,
    /// Style instruction; ignored for 0.6B checkpoints, like the official code.
    pub instruct: Option<String>,
    /// Feed the text alongside the frames (official `non_streaming_mode=False`)
    /// instead of all up front (the `generate_custom_voice` default).
    pub text_streaming: bool,
    pub options: GenOptions,
}

/// Largest request the runtime accepts: frames and text tokens. Beyond the
/// talker's position table the model is outside what it was trained on.
pub const MAX_TEXT_TOKENS: usize = 8192;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The talker produced the codec EOS token.
    Eos,
    /// `max_frames` frames were produced.
    MaxFrames,
}
