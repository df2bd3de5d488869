//! The state every route and session shares: the server's lifecycle
//! ([`Drain`]), the loaded model ([`Loaded`]), limits, counters, and the
//! token check. Apart from `server.rs` (which builds it and wires the
//! routes) so the route modules (`openai`, `realtime`) import the state, not
//! the server that mounts them.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::{watch, Semaphore};
use tts_actors::Engine;
use tts_actors::{ModelKind, Qwen3Tts, VoiceLibrary};

use crate::http_error::error_response;
use crate::prometheus::ServerMetrics;
use crate::voices::Voices;

/// Server lifecycle, broadcast to every session and HTTP stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drain {
    Running,
    /// No new connections or contexts; in-flight streams finish.
    Draining,
    /// The drain deadline passed: cancel and close.
    Force,
}

/// The loaded model and its engine.
pub struct Loaded {
    pub engine: Engine,
    pub model: Arc<Qwen3Tts>,
    pub voices: Voices,
    pub languages: Vec<String>,
    /// Checkpoint directory name (what `/v1/models` lists).
    pub model_id: String,
    pub native_rate: u32,
    pub samples_per_frame: usize,
    pub max_frames: usize,
    /// Stored voices (Base checkpoints served with a voices directory).
    pub library: Option<Arc<VoiceLibrary>>,
    /// Voice files the library could not read at startup (each named in
    /// the log too); the others are served.
    pub skipped_voices: Vec<tts_voices::SkippedVoice>,
}

impl Loaded {
    /// The checkpoint's family: what requests it takes.
    pub fn kind(&self) -> ModelKind {
        self.model.config.kind
    }
}

pub struct AppState {
    pub model_dir: PathBuf,
    pub token: Option<String>,
    pub max_contexts: usize,
    pub max_pending_chars: usize,
    pub prebuffer_ms: f64,
    pub loaded: OnceLock<Arc<Loaded>>,
    pub(crate) load_error: Mutex<Option<String>>,
    pub metrics: ServerMetrics,
    pub(crate) sessions: Arc<Semaphore>,
    pub drain: watch::Sender<Drain>,
    /// Live sessions and HTTP streams (the completion guard).
    pub(crate) live: watch::Sender<usize>,
    pub started: Instant,
    /// Largest reference clip an upload or inline `ref_audio` may carry.
    pub max_upload_bytes: usize,
    /// Voice names (keys) being made right now: a second upload of one is
    /// refused at once rather than after seconds of encoding.
    pub(crate) uploading: Mutex<HashSet<String>>,
}

/// Held by a session or HTTP stream while it runs.
pub struct LiveGuard(watch::Sender<usize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl AppState {
    pub fn track(&self) -> LiveGuard {
        self.live.send_modify(|n| *n += 1);
        LiveGuard(self.live.clone())
    }

    pub fn drain_state(&self) -> Drain {
        *self.drain.borrow()
    }

    pub fn loaded(&self) -> Option<Arc<Loaded>> {
        self.loaded.get().cloned()
    }

    /// `Ok` when no token is configured, or the request carries it as a
    /// bearer header or a `token` query parameter.
    pub fn authorize(
        &self,
        headers: &HeaderMap,
        query_token: Option<&str>,
    ) -> Result<(), Unauthorized> {
        let Some(want) = &self.token else {
            return Ok(());
        };
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let ok = [bearer, query_token]
            .into_iter()
            .flatten()
            .any(|got| constant_time_eq(got.as_bytes(), want.as_bytes()));
        if ok {
            Ok(())
        } else {
            self.metrics.refused("unauthorized");
            Err(Unauthorized)
        }
    }
}

/// A request without the right token (401 in OpenAI's error shape).
pub struct Unauthorized;

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        error_response(
            StatusCode::UNAUTHORIZED,
            "missing or wrong token: send `Authorization: Bearer <token>` (or `?token=` on WebSocket URLs)",
            "authentication_error",
            None,
        )
    }
}

/// Compares without an early exit, so response time does not reveal how
/// much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(serde::Deserialize)]
pub struct TokenQuery {
    pub token: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_compare_needs_equal_length_and_bytes() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3cre"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(constant_time_eq(b"", b""));
    }
}
