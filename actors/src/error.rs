//! The runtime's error type: what a caller or a stream's `Error` event sees.

use std::sync::Arc;

use tts_models::ModelError;

use crate::contract::{Generation, RequestKey, SessionId, StageKind};

/// Coarse class of an [`EngineError`], for callers that branch on it (and
/// for JSON records).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    InvalidRequest,
    AtCapacity,
    SessionBusy,
    StageFailed,
    StageStalled,
    SlowConsumer,
    NonFiniteAudio,
    ShuttingDown,
    Config,
    Internal,
}

#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The request does not fit the model. The model's own typed cause is
    /// kept (e.g. [`ModelError::UnknownSpeaker`] with the valid names), so
    /// the layer that renders it can name the field and the choices;
    /// `Arc` because engine errors are cloned to every waiter.
    #[error("invalid request: {0}")]
    InvalidRequest(Arc<ModelError>),
    #[error(
        "at capacity: the request needs {needed} {resource} but {in_use} of {limit} are in use; \
         retry when a request finishes, or raise the engine's limit"
    )]
    AtCapacity {
        resource: &'static str,
        needed: u64,
        in_use: u64,
        limit: u64,
    },
    #[error("session {session} already has request {active} in progress; cancel it or wait for it to finish")]
    SessionBusy {
        session: SessionId,
        active: RequestKey,
    },
    #[error("the {stage} stage crashed (generation {generation} restarted as {}): {message}", generation + 1)]
    StageFailed {
        stage: StageKind,
        generation: Generation,
        message: String,
    },
    #[error("the {stage} stage made no progress for {waited_ms} ms and was retired (generation {generation} replaced by {})", generation + 1)]
    StageStalled {
        stage: StageKind,
        generation: Generation,
        waited_ms: u64,
    },
    #[error(
        "consumer too slow: {unacked_s:.2} s of audio unacknowledged (limit {limit_s:.2} s) for {paused_ms} ms; \
         read and acknowledge chunks as they arrive"
    )]
    SlowConsumer {
        unacked_s: f64,
        limit_s: f64,
        paused_ms: u64,
    },
    /// The codec decoded a NaN or infinite sample: the checkpoint's
    /// code2wav weights are broken. Nothing of the chunk is delivered.
    #[error(
        "non-finite audio: the codec decoded {value} at sample {index} of chunk {seq}; \
         the checkpoint's speech-tokenizer (code2wav) weights are likely corrupt"
    )]
    NonFiniteAudio { seq: u64, index: usize, value: f32 },
    #[error("the engine is shutting down")]
    ShuttingDown,
    #[error("engine config `{key}`: {message}")]
    Config { key: &'static str, message: String },
    #[error("internal error: {0}")]
    Internal(String),
}

impl EngineError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::InvalidRequest(_) => ErrorKind::InvalidRequest,
            EngineError::AtCapacity { .. } => ErrorKind::AtCapacity,
            EngineError::SessionBusy { .. } => ErrorKind::SessionBusy,
            EngineError::StageFailed { .. } => ErrorKind::StageFailed,
            EngineError::StageStalled { .. } => ErrorKind::StageStalled,
            EngineError::SlowConsumer { .. } => ErrorKind::SlowConsumer,
            EngineError::NonFiniteAudio { .. } => ErrorKind::NonFiniteAudio,
            EngineError::ShuttingDown => ErrorKind::ShuttingDown,
            EngineError::Config { .. } => ErrorKind::Config,
            EngineError::Internal(_) => ErrorKind::Internal,
        }
    }
}

impl EngineError {
    /// The model's typed cause of an [`EngineError::InvalidRequest`].
    pub fn model_cause(&self) -> Option<&ModelError> {
        match self {
            EngineError::InvalidRequest(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ModelError> for EngineError {
    fn from(e: ModelError) -> Self {
        EngineError::InvalidRequest(Arc::new(e))
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_request_keeps_the_models_typed_cause_and_its_message() {
        let cause = ModelError::UnknownSpeaker {
            name: "nobody".into(),
            valid: vec!["aiden".into(), "ryan".into()],
        };
        let text = format!("invalid request: {cause}");
        let e = EngineError::from(cause);
        assert_eq!(e.kind(), ErrorKind::InvalidRequest);
        assert_eq!(e.to_string(), text);
        let Some(ModelError::UnknownSpeaker { name, valid }) = e.model_cause() else {
            panic!("cause lost: {e:?}");
        };
        assert_eq!((name.as_str(), valid.len()), ("nobody", 2));
        assert!(EngineError::ShuttingDown.model_cause().is_none());
    }
}
