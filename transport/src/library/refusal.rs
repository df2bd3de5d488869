//! A voice-library refusal ([`VoiceError`]) as an HTTP status and message:
//! the store's and the encoders' typed causes pick the status, so the same
//! cause answers the same way on every route.

use axum::http::StatusCode;
use tts_actors::{ModelError, VoiceError};
use tts_voices::StoreError;

use crate::http_error::Refusal;

/// `audio_param`: the request field the clip came in (`audio_sample`,
/// `audio`, `ref_audio`).
pub fn voice_refusal(e: &VoiceError, audio_param: &'static str) -> Refusal {
    let (status, param) = match e {
        VoiceError::Audio(_) | VoiceError::Model(ModelError::ReferenceTooShort { .. }) => {
            (StatusCode::BAD_REQUEST, Some(audio_param))
        }
        VoiceError::Model(ModelError::InvalidVoice(m)) if m.contains("ref_text") => {
            (StatusCode::BAD_REQUEST, Some("ref_text"))
        }
        VoiceError::Model(_) | VoiceError::Record(_) | VoiceError::WrongTalker { .. } => {
            (StatusCode::BAD_REQUEST, None)
        }
        VoiceError::Store(s) => match s {
            StoreError::Name(_) => (StatusCode::BAD_REQUEST, Some("name")),
            StoreError::AlreadyExists { .. } | StoreError::Busy { .. } => {
                (StatusCode::CONFLICT, Some("name"))
            }
            // The library is full: the store has no room (WebDAV's 507).
            StoreError::Full { .. } => (StatusCode::INSUFFICIENT_STORAGE, None),
            StoreError::NotFound { .. } => (StatusCode::NOT_FOUND, Some("name")),
            StoreError::Record(_) => (StatusCode::BAD_REQUEST, None),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, None),
        },
        VoiceError::NotFound { .. } => (StatusCode::NOT_FOUND, Some("voice")),
        _ if e.is_client_error() => (StatusCode::BAD_REQUEST, None),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, None),
    };
    let message = match e {
        VoiceError::Store(StoreError::AlreadyExists { .. }) => {
            format!("{e} (send replace=true to overwrite it)")
        }
        _ => e.to_string(),
    };
    Refusal::new(status, message, param)
}
