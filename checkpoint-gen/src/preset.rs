//! The presets: a size (the CustomVoice preset's dimensions) and a family.

use crate::encoders::{EncoderDims, SpeakerDims};

/// A checkpoint's size and family. The first three are CustomVoice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    Tiny,
    Qwen06b,
    Qwen17b,
    /// `tiny` sizes as a Base checkpoint, with small encoders (tests).
    TinyBase,
    Qwen06bBase,
    Qwen17bBase,
    Qwen17bVoiceDesign,
}

/// The model family a preset writes (`tts_model_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    CustomVoice,
    Base,
    VoiceDesign,
}

/// The accepted `--preset` names.
pub const PRESET_NAMES: &str =
    "tiny, 0.6b, 1.7b, tiny-base, 0.6b-base, 1.7b-base or 1.7b-voicedesign";

impl Preset {
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "tiny" => Ok(Preset::Tiny),
            "0.6b" | "0b6" | "0.6" => Ok(Preset::Qwen06b),
            "1.7b" | "1b7" | "1.7" => Ok(Preset::Qwen17b),
            "tiny-base" => Ok(Preset::TinyBase),
            "0.6b-base" | "0b6-base" => Ok(Preset::Qwen06bBase),
            "1.7b-base" | "1b7-base" => Ok(Preset::Qwen17bBase),
            "1.7b-voicedesign" | "1b7-voicedesign" | "1.7b-voice-design" => {
                Ok(Preset::Qwen17bVoiceDesign)
            }
            _ => Err(format!("unknown preset {s:?}; use {PRESET_NAMES}")),
        }
    }

    pub fn family(self) -> Family {
        match self {
            Preset::Tiny | Preset::Qwen06b | Preset::Qwen17b => Family::CustomVoice,
            Preset::TinyBase | Preset::Qwen06bBase | Preset::Qwen17bBase => Family::Base,
            Preset::Qwen17bVoiceDesign => Family::VoiceDesign,
        }
    }

    /// The CustomVoice preset of the same sizes.
    pub(crate) fn size(self) -> Preset {
        match self {
            Preset::Tiny | Preset::TinyBase => Preset::Tiny,
            Preset::Qwen06b | Preset::Qwen06bBase => Preset::Qwen06b,
            Preset::Qwen17b | Preset::Qwen17bBase | Preset::Qwen17bVoiceDesign => Preset::Qwen17b,
        }
    }

    /// Base: the speaker encoder's sizes (the hub's at the full sizes).
    pub(crate) fn speaker_encoder(self, talker_hidden: usize) -> Option<SpeakerDims> {
        match self {
            Preset::TinyBase => Some(SpeakerDims {
                enc_dim: talker_hidden,
                channels: [32, 32, 32, 32, 96],
                attention: 16,
                se: 16,
            }),
            Preset::Qwen06bBase | Preset::Qwen17bBase => Some(SpeakerDims::hub(talker_hidden)),
            _ => None,
        }
    }

    /// The speech tokenizer's encoder (every family but the CustomVoice
    /// presets, which predate it and stay as they were).
    pub(crate) fn codec_encoder(self) -> Option<EncoderDims> {
        match self {
            Preset::Tiny | Preset::Qwen06b | Preset::Qwen17b => None,
            Preset::TinyBase => Some(EncoderDims {
                num_filters: 8,
                hidden: 32,
                layers: 2,
                heads: 2,
                head_dim: 16,
                inter: 64,
                codebook_dim: 8,
                quantizers: 32,
            }),
            Preset::Qwen06bBase | Preset::Qwen17bBase | Preset::Qwen17bVoiceDesign => {
                Some(EncoderDims::hub())
            }
        }
    }
}
