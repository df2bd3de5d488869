//! The runtime's error type: what a caller or a stream's `Error` event sees.

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
    ShuttingDown,
    Config,
    Internal,
}

#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("invalid request: {0}")]
    InvalidRequest(String),
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
            EngineError::ShuttingDown => ErrorKind::ShuttingDown,
            EngineError::Config { .. } => ErrorKind::Config,
            EngineError::Internal(_) => ErrorKind::Internal,
        }
    }
}

impl From<tts_models::ModelError> for EngineError {
    fn from(e: tts_models::ModelError) -> Self {
        EngineError::InvalidRequest(e.to_string())
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
