//! The request vocabulary: what a caller asks for ([`Request`] with its
//! [`GenOptions`]), the limits it is checked against, and why generation
//! ended ([`StopReason`]). Plain data, below every stage that reads it.

use crate::config::GenerationConfig;
use crate::error::{ModelError, Result};
use crate::sampling::SamplerConfig;

/// A request's `language` as the checkpoint names it: lower-cased, and
/// `"auto"` or one of `valid` (a checkpoint's `TalkerConfig::language_names`,
/// which include `"auto"`). ISO 639 codes and locale tags are accepted for
/// the languages they name (`en`, `en-US`, `zh-CN`, `zh_Hans`, `pt-BR`,
/// `eng`, ...; [`language_from_code`]). The one language check: the prompt
/// builder makes it, and a server refusing a setting before any request
/// (the realtime session's settings) makes the same call and renders its
/// [`ModelError::UnknownLanguage`].
pub fn language_name(valid: &[String], language: &str) -> Result<String> {
    let lang = language.trim().to_lowercase();
    if lang == "auto" || valid.contains(&lang) {
        return Ok(lang);
    }
    match language_from_code(&lang) {
        Some(name) if valid.iter().any(|v| v == name) => Ok(name.to_string()),
        _ => Err(ModelError::UnknownLanguage {
            name: language.to_string(),
            valid: valid.to_vec(),
        }),
    }
}

/// The checkpoint language name an ISO 639-1/-2/-3 code or a BCP 47 /
/// POSIX locale tag names (its primary subtag): `en`, `en-US`, `en_GB`,
/// `zh-Hans-CN`, `cmn` → "english", ..., "chinese". Regional Chinese
/// dialects have no code here: they are named by the checkpoint
/// (`beijing_dialect`) or follow their speaker.
pub fn language_from_code(code: &str) -> Option<&'static str> {
    let primary = code
        .trim()
        .split(['-', '_', '.', '@'])
        .next()?
        .to_ascii_lowercase();
    Some(match primary.as_str() {
        "zh" | "zho" | "chi" | "cmn" => "chinese",
        "en" | "eng" => "english",
        "de" | "deu" | "ger" => "german",
        "it" | "ita" => "italian",
        "pt" | "por" => "portuguese",
        "es" | "spa" => "spanish",
        "ja" | "jpn" => "japanese",
        "ko" | "kor" => "korean",
        "fr" | "fra" | "fre" => "french",
        "ru" | "rus" => "russian",
        _ => return None,
    })
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

/// A cloned voice as a Base checkpoint's prompt takes it (the official
/// `VoiceClonePromptItem`): the speaker encoder's x-vector and, for ICL,
/// the reference clip's codes and transcript. Made once per reference clip
/// (by the encoders, or read from a stored voice) and shared by every
/// request that speaks with it.
#[derive(Clone, Debug, PartialEq)]
pub struct VoiceClone {
    /// The x-vector, `[hidden_size]` of the talker it was made for.
    pub x_vector: Vec<f32>,
    /// ICL: the reference codes, `[frames, num_code_groups]` row-major, and
    /// the transcript of the reference clip. None: x-vector only.
    pub reference: Option<CloneReference>,
}

/// The in-context part of a cloned voice: what the reference clip says and
/// its codes.
#[derive(Clone, Debug, PartialEq)]
pub struct CloneReference {
    pub text: String,
    /// `[frames, groups]` row-major.
    pub codes: Vec<u32>,
    pub frames: usize,
}

impl VoiceClone {
    /// True for the in-context (ICL) mode: reference codes and text.
    pub fn is_icl(&self) -> bool {
        self.reference.is_some()
    }
}

/// One synthesis request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub text: String,
    /// A preset speaker: required for CustomVoice (case-insensitive);
    /// refused by Base and VoiceDesign.
    pub speaker: Option<String>,
    /// A `codec_language_id` key or "auto" (case-insensitive).
    pub language: String,
    /// CustomVoice: a style instruction (ignored for 0.6B checkpoints, like
    /// the official code). VoiceDesign: the description of the voice
    /// (required). Refused by Base.
    pub instruct: Option<String>,
    /// Base: the voice to clone (required); refused by the other families.
    pub voice_clone: Option<std::sync::Arc<VoiceClone>>,
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

    #[test]
    fn iso_codes_and_locale_tags_name_the_checkpoints_languages() {
        let valid = ["auto", "chinese", "english", "portuguese"]
            .map(String::from)
            .to_vec();
        for (code, want) in [
            ("en", "english"),
            ("en-US", "english"),
            ("EN_gb", "english"),
            ("eng", "english"),
            ("zh", "chinese"),
            ("zh-CN", "chinese"),
            ("zh-Hans-CN", "chinese"),
            ("cmn", "chinese"),
            ("pt-BR", "portuguese"),
            ("en_US.UTF-8", "english"),
        ] {
            assert_eq!(language_name(&valid, code).unwrap(), want, "{code}");
        }
        // A code for a language the checkpoint lacks, or no language at all.
        for bad in ["de", "xx-YY", "", "-"] {
            assert!(
                matches!(
                    language_name(&valid, bad),
                    Err(ModelError::UnknownLanguage { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
