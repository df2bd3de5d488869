//! The state every route and session shares: the server's lifecycle
//! ([`Drain`]), the loaded model ([`Loaded`]), limits, counters, and the
//! token check. Apart from `server.rs` (which builds it and wires the
//! routes) so the route modules (`openai`, `realtime`) import the state, not
//! the server that mounts them.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::{watch, Semaphore};
use tts_actors::Engine;
use tts_actors::{ModelKind, Qwen3Tts, VoiceLibrary};

use crate::http_error::error_response;

/// What a route that needs the model answers before it is loaded.
pub const NOT_READY: &str = "the model is still loading; retry when GET /ready answers 200";
use crate::prometheus::ServerMetrics;
use crate::speakers::Speakers;

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
    pub speakers: Speakers,
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
    /// `audio_acks` sessions: seconds of a context's unacknowledged audio
    /// (over all its segments) at which its generation pauses ...
    pub ack_pause_s: f64,
    /// ... and how old its oldest unacknowledged frame may get before the
    /// context fails with `slow_consumer`.
    pub ack_fail_s: f64,
    pub loaded: OnceLock<Arc<Loaded>>,
    pub(crate) load_error: Mutex<Option<String>>,
    pub metrics: ServerMetrics,
    pub(crate) sessions: Arc<Semaphore>,
    /// The realtime sessions' idle clocks, to evict the longest-idle one
    /// when the session slots are full.
    pub(crate) registry: Registry,
    /// Server pings, the pong deadline and the idle timeout of a session.
    pub(crate) liveness: crate::realtime::Timeouts,
    pub drain: watch::Sender<Drain>,
    /// Live sessions and HTTP streams (the completion guard).
    pub(crate) live: watch::Sender<usize>,
    pub started: Instant,
    /// Largest reference clip an upload or inline `ref_audio` may carry.
    pub max_upload_bytes: usize,
    /// Voice names (keys) being made right now: a second upload of one is
    /// refused at once rather than after seconds of encoding.
    pub(crate) uploading: Mutex<HashSet<String>>,
    /// Request bodies in memory, in all (`--max-body-memory-mb`).
    pub bodies: crate::body_budget::BodyBudget,
    /// How long a realtime session's open contexts may wait for the
    /// client's text, with nothing being spoken, before they fail with
    /// `text_timeout` (`--text-wait-timeout-s`).
    pub text_wait: std::time::Duration,
}

/// Every realtime session's idle clock and eviction signal. Locked only
/// when a session opens or closes and when a full server looks for an idle
/// session to evict; the clocks themselves are atomics.
#[derive(Default)]
pub struct Registry {
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    next: AtomicU64,
    started: OnceLock<Instant>,
}

/// One session's entry.
pub struct Slot {
    /// Microseconds (since the registry's epoch, plus one) since which the
    /// session has been idle; 0 while it is in use or once it was evicted.
    idle_since_us: AtomicU64,
    evict: tokio::sync::Notify,
}

impl Slot {
    /// Publishes the session's idle clock (`None`: in use).
    pub fn set_idle(&self, since: Option<Instant>, epoch: Instant) {
        let us = since.map_or(0, |t| {
            t.saturating_duration_since(epoch).as_micros() as u64 + 1
        });
        self.idle_since_us.store(us, Ordering::Relaxed);
    }

    /// Resolves when the server evicts this session.
    pub async fn evicted(&self) {
        self.evict.notified().await
    }
}

/// Unregisters its session when dropped.
pub struct SlotGuard<'a> {
    registry: &'a Registry,
    id: u64,
    pub slot: Arc<Slot>,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.registry
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl Registry {
    /// The instant idle clocks count from.
    pub fn epoch(&self) -> Instant {
        *self.started.get_or_init(Instant::now)
    }

    /// Adds a session (idle from now until it says otherwise).
    pub fn register(&self) -> SlotGuard<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            idle_since_us: AtomicU64::new(0),
            evict: tokio::sync::Notify::new(),
        });
        slot.set_idle(Some(Instant::now()), self.epoch());
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, slot.clone());
        SlotGuard {
            registry: self,
            id,
            slot,
        }
    }

    /// Tells the longest-idle session to close; `false` when every session
    /// is in use.
    pub fn evict_oldest_idle(&self) -> bool {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = slots
            .values()
            .filter(|s| s.idle_since_us.load(Ordering::Relaxed) != 0)
            .min_by_key(|s| s.idle_since_us.load(Ordering::Relaxed));
        match oldest {
            Some(s) => {
                s.idle_since_us.store(0, Ordering::Relaxed);
                s.evict.notify_one();
                true
            }
            None => false,
        }
    }

    /// Sessions registered now.
    pub fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How long a client refused for want of a slot waits for an evicted idle
/// session to give its slot back.
pub const EVICTION_WAIT: Duration = Duration::from_secs(2);

/// Held by a session or HTTP stream while it runs.
pub struct LiveGuard(watch::Sender<usize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl AppState {
    /// A WebSocket session slot (`/v1/realtime` and the ElevenLabs and
    /// Cartesia sockets share them), or the 503 to answer.
    pub(crate) async fn session_permit(
        &self,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, Box<Response>> {
        let st = self;
        let permit = match st.sessions.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            // Full: idle sessions must not hold every slot, so the longest-idle
            // one is closed and its slot goes to this client.
            Err(_) if st.registry.evict_oldest_idle() => {
                tokio::time::timeout(EVICTION_WAIT, st.sessions.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            Err(_) => None,
        };
        permit.ok_or_else(|| {
            st.metrics.refused("too_many_sessions");
            Box::new(error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many sessions, all in use; retry later or raise --max-sessions",
                "server_error",
                None,
            ))
        })
    }

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

    /// The model, for a route that starts new work: a 503 in OpenAI's error
    /// shape (and a counted refusal) while the server drains — saying
    /// `draining` — or while the model is still loading.
    pub fn ready_for_work(&self, draining: &str) -> Result<Arc<Loaded>, Box<Response>> {
        if self.drain_state() != Drain::Running {
            self.metrics.refused("shutting_down");
            return Err(Box::new(error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                draining,
                "server_error",
                None,
            )));
        }
        self.loaded().ok_or_else(|| {
            self.metrics.refused("not_ready");
            Box::new(error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                NOT_READY,
                "server_error",
                None,
            ))
        })
    }

    /// A replica at its measured real-time capacity refuses a new socket
    /// before the upgrade (429, `Retry-After: 1`, at_capacity), so a
    /// balancer or the client tries another replica: a socket admitted now
    /// could not speak until a stream ends. Only with admission by
    /// real-time capacity (`--realtime-load`) and once it is measured; a
    /// fixed `--max-requests` alone keeps refusing per request.
    pub(crate) fn refuse_socket_when_full(&self, loaded: &Loaded) -> Result<(), Box<Response>> {
        if loaded.engine.config().realtime_load.is_none() {
            return Ok(());
        }
        let stats = loaded.engine.stats();
        match stats.capacity_streams {
            Some(_) if stats.computing >= stats.admission_limit => {
                self.metrics.refused("at_capacity");
                let mut r = error_response(
                    StatusCode::TOO_MANY_REQUESTS,
                    &format!(
                        "at capacity: {} of {} real-time streams in use (what this machine keeps continuous); retry later or on another replica",
                        stats.computing, stats.admission_limit
                    ),
                    "rate_limit_error",
                    None,
                );
                r.headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, 1u32.into());
                Err(Box::new(r))
            }
            _ => Ok(()),
        }
    }

    /// `Ok` when no token is configured, or the request carries it in an
    /// `Authorization: Bearer` header (the scheme is case-insensitive, RFC
    /// 9110 §11.1). HTTP routes take the token only there: a token in a URL
    /// ends up in logs and browser history.
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), Unauthorized> {
        self.check(headers, None)
    }

    /// The WebSocket upgrade's check: the bearer header, or `?token=` in the
    /// URL (browsers cannot set headers on a WebSocket).
    pub fn authorize_upgrade(
        &self,
        headers: &HeaderMap,
        query_token: Option<&str>,
    ) -> Result<(), Unauthorized> {
        self.check(headers, query_token)
    }

    fn check(&self, headers: &HeaderMap, query_token: Option<&str>) -> Result<(), Unauthorized> {
        let Some(want) = &self.token else {
            return Ok(());
        };
        let ok = headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(bearer_token)
            .chain(query_token)
            .any(|got| constant_time_eq(got.as_bytes(), want.as_bytes()));
        if ok {
            Ok(())
        } else {
            self.metrics.refused("unauthorized");
            Err(Unauthorized)
        }
    }
}

/// The credentials of an `Authorization: Bearer <token>` value, the scheme
/// compared case-insensitively.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// A request without the right token (401 in OpenAI's error shape).
pub struct Unauthorized;

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        let mut r = error_response(
            StatusCode::UNAUTHORIZED,
            "missing or wrong token: send `Authorization: Bearer <token>` (or `?token=` on the WebSocket URL)",
            "authentication_error",
            None,
        );
        // RFC 6750 §3: a 401 names the scheme it wants.
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"tts-rt\""),
        );
        r
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
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer s3cret"), Some("s3cret"));
        assert_eq!(bearer_token("bearer s3cret"), Some("s3cret"));
        assert_eq!(bearer_token("BEARER  s3cret "), Some("s3cret"));
        assert_eq!(bearer_token("Basic s3cret"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }

    #[test]
    fn token_compare_needs_equal_length_and_bytes() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3cre"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(constant_time_eq(b"", b""));
    }
}
