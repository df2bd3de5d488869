//! Why a record is not a valid voice.

use super::limits::{FORMAT_VERSION, MAX_CODE_GROUPS, MAX_HIDDEN_SIZE, MAX_TEXT_BYTES};

/// Why a record is not a valid voice.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error(
        "the x-vector has {len} values; expected 1..={MAX_HIDDEN_SIZE} (the talker hidden size)"
    )]
    XVectorSize { len: usize },
    #[error("hidden_size is {hidden_size} but the x-vector has {x_vector} values")]
    HiddenSizeMismatch { hidden_size: usize, x_vector: usize },
    #[error("x-vector value {index} is {value}; every value must be finite")]
    NonFinite { index: usize, value: f32 },
    #[error("{len} reference codes do not make whole frames of {groups} groups")]
    CodesShape { len: usize, groups: usize },
    #[error("reference codes have {actual} groups per frame; the codec has {expected}")]
    GroupsMismatch { expected: usize, actual: usize },
    #[error("reference codes have {groups} groups per frame; a Qwen3-TTS codec keeps 1..={MAX_CODE_GROUPS}")]
    TooManyGroups { groups: usize },
    #[error("reference code {code} at frame {frame}, group {group} is outside the codebook (size {codebook_size})")]
    CodeOutOfRange {
        frame: usize,
        group: usize,
        code: u32,
        codebook_size: u32,
    },
    #[error("an ICL voice needs reference codes (at least one frame)")]
    IclNeedsCodes,
    #[error("an ICL voice needs a non-empty reference text (the transcript of the clip); make it x-vector-only otherwise")]
    IclNeedsRefText,
    #[error("an x-vector-only voice must not carry {0}")]
    XVectorOnlyHas(&'static str),
    #[error("{field} is {len} bytes; at most {MAX_TEXT_BYTES} are allowed")]
    TextTooLong { field: &'static str, len: usize },
    #[error("{field}: {problem}")]
    BadField {
        field: &'static str,
        problem: String,
    },
    #[error("format version {found} is not supported (this build reads version {FORMAT_VERSION})")]
    FormatVersion { found: u32 },
    #[error("voice {voice:?} was made for the {voice_size} talker (hidden size {voice_hidden}); this model is {model_size} (hidden size {model_hidden}); make the voice again with this model")]
    WrongTalker {
        voice: String,
        voice_size: String,
        voice_hidden: usize,
        model_size: String,
        model_hidden: usize,
    },
}
