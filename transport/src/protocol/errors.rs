//! Why a client message was refused: the error codes of `error` and
//! `context.failed`, and [`ProtocolError`], what a parser or the session
//! returns to be sent as an `error` event.

use serde::{Deserialize, Serialize};

/// Error codes of `error` and `context.failed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    MalformedJson,
    UnknownType,
    InvalidMessage,
    MessageTooLarge,
    UnsupportedVersion,
    OutOfOrder,
    UnknownContext,
    InvalidVoice,
    InvalidLanguage,
    InvalidSetting,
    InvalidAudio,
    TooManyContexts,
    TextTooLong,
    AtCapacity,
    SlowConsumer,
    /// The session's open contexts waited `--text-wait-timeout-s` for the
    /// client's text with nothing to speak.
    TextTimeout,
    ShuttingDown,
    SynthesisFailed,
    Internal,
}

impl ErrorCode {
    /// The code's wire name (`too_many_contexts`, ...), as the dialects
    /// carry it inside their own error shapes.
    pub fn wire_name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "error".into())
    }
}

/// A refused message: what to put in the `error` event.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ProtocolError {
    pub code: ErrorCode,
    pub message: String,
    pub valid: Option<Vec<String>>,
}

impl ProtocolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ProtocolError {
            code,
            message: message.into(),
            valid: None,
        }
    }
}
