use std::path::PathBuf;

use crate::kind::ModelKind;

/// Errors of the models layer. Construction (loading, validation) errors name
/// the file, key or tensor at fault; runtime errors name the request field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("{path}: unsupported model_type {found:?} (expected {expected:?})")]
    UnknownModelType {
        path: PathBuf,
        found: String,
        expected: &'static str,
    },
    #[error("{path}: not a valid safetensors file: {message}")]
    Safetensors { path: PathBuf, message: String },
    /// A weights path that is no file: `what` says what it is instead ("is
    /// a directory, not a file", "is a symbolic link loop").
    #[error("{path} {what}")]
    NotAFile { path: PathBuf, what: &'static str },
    #[error("checkpoint is missing tensor `{tensor}` (expected shape {expected:?}); is the checkpoint complete and of the configured size?")]
    MissingTensor {
        tensor: String,
        expected: Vec<usize>,
    },
    #[error("tensor `{tensor}` has shape {actual:?}, but the config implies {expected:?}")]
    ShapeMismatch {
        tensor: String,
        expected: Vec<usize>,
        actual: Vec<usize>,
    },
    #[error("tensor `{tensor}` has dtype {dtype}; only F32, F16 and BF16 are supported")]
    UnsupportedDtype { tensor: String, dtype: String },
    #[error("checkpoint has {count} unexpected tensor(s), e.g. `{first}`; the config does not describe them")]
    UnexpectedTensors { count: usize, first: String },
    #[error("tensor `{tensor}` appears in more than one shard")]
    DuplicateTensor { tensor: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("unknown speaker {name:?}; this checkpoint offers: {}", .valid.join(", "))]
    UnknownSpeaker { name: String, valid: Vec<String> },
    #[error("unknown language {name:?}; this checkpoint offers: {}", .valid.join(", "))]
    UnknownLanguage { name: String, valid: Vec<String> },
    #[error("invalid request: text is empty")]
    EmptyText,
    #[error("invalid request: text is {tokens} tokens; at most {max} are accepted per request (split it)")]
    TextTooLong { tokens: usize, max: usize },
    /// A request this checkpoint's family cannot serve (a clone on
    /// CustomVoice, a preset speaker on Base, no voice description on
    /// VoiceDesign, ...): says what was asked and what the checkpoint does.
    #[error("invalid request: {problem}, but this is a {family} checkpoint, which {}", .family.capability())]
    WrongFamily { family: ModelKind, problem: String },
    /// A cloned voice that does not fit this checkpoint (the message says
    /// how).
    #[error("invalid voice: {0}")]
    InvalidVoice(String),
    /// Reference audio for the speaker encoder shorter than its input
    /// minimum (the mel frames every reflect pad needs).
    #[error(
        "reference audio is {samples} samples; the speaker encoder needs at least {min} (24 kHz)"
    )]
    ReferenceTooShort { samples: usize, min: usize },
    /// Reference audio with no samples (the codec encoder's refusal).
    #[error("reference audio is empty; give a clip of speech at {sample_rate} Hz")]
    EmptyAudio { sample_rate: u32 },
    /// Reference audio with a NaN or infinite sample (both encoders).
    #[error("reference audio sample {index} is {value}; every sample must be a finite number")]
    NonFiniteAudio { index: usize, value: f32 },
    /// A generation option out of its range (the message names it).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;
