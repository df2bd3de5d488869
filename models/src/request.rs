//! The request vocabulary: what a caller asks for ([`Request`] with its
//! [`GenOptions`]), the limits it is checked against, and why generation
//! ended ([`StopReason`]). Plain data, below every stage that reads it.

use crate::config::GenerationConfig;
use crate::error::{ModelError, Result};
use crate::sampling::SamplerConfig;

/// A request's `language` as the checkpoint names it: lower-cased, and
/// `"auto"` or one of `valid` (a checkpoint's `TalkerConfig::language_names`,
/// which include `"auto"`). The one language check: the prompt builder
/// makes it, and a server refusing a setting before any request (the
/// realtime session's settings) makes the same call and renders its
/// [`ModelError::UnknownLanguage`].
pub fn language_name(valid: &[String], language: &str) -> Result<String> {
    let lang = language.to_lowercase();
    if lang == "auto" || valid.contains(&lang) {
        Ok(lang)
    } else {
        Err(ModelError::UnknownLanguage {
            name: language.to_string(),
            valid: valid.to_vec(),
        })
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_name_is_auto_or_a_checkpoint_language_lower_cased() {
        let valid = ["auto", "chinese", "english"].map(String::from).to_vec();
        assert_eq!(language_name(&valid, "English").unwrap(), "english");
        assert_eq!(language_name(&valid, "AUTO").unwrap(), "auto");
        match language_name(&valid, "Klingon") {
            Err(ModelError::UnknownLanguage { name, valid: v }) => {
                assert_eq!((name.as_str(), v), ("Klingon", valid));
            }
            other => panic!("{other:?}"),
        }
    }
}
