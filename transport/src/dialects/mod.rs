//! Vendor-compatible WebSockets: the ElevenLabs `stream-input` /
//! `multi-stream-input` shape and the Cartesia `/tts/websocket` shape, so
//! agent frameworks (Pipecat, LiveKit Agents) and the vendors' SDKs work
//! against tts-rt with only their base URL changed.
//!
//! Each dialect is a translator, not a second engine path: the connection
//! runs an ordinary realtime session (`realtime::run`, the same context
//! queue, segmentation, cancel, send bounds and engine session as
//! `/v1/realtime`) on a port ([`port::DialectPort`]) that turns the
//! vendor's messages into typed session input (`context.append`, `flush`,
//! `end`, `cancel`, checked settings) and the session's events into the
//! vendor's messages (final/done markers, errors). Audio is encoded by the
//! session in the vendor's encoding (the context's native `format`), and
//! the dialect only wraps each payload in base64 JSON. Backpressure carries
//! through: a vendor client that stops reading holds up the session's
//! sends, whose bound then ends the connection, as on `/v1/realtime`.
//!
//! Files, each depending only on those above it:
//! - `format`: the vendors' output encodings and the native format each
//!   one is spoken in.
//! - `port`: the dialect's side of the session ([`port::Session`]), the
//!   [`port::Dialect`] each dialect implements, and the port that drives
//!   it.
//! - `contexts`: a connection's vendor contexts, each lifecycle a native
//!   context of its own, so that one ends once and a reused id starts
//!   afresh.
//! - `elevenlabs`, `cartesia`: each vendor's messages (parse ↔ serialize)
//!   and translation.
//! - `http`: the vendors' one-shot HTTP routes (ElevenLabs
//!   `text-to-speech/{voice_id}[/stream]`, Cartesia `/tts/bytes`),
//!   translated into typed `POST /v1/audio/speech` requests.
//! - `elevenlabs_voices`: ElevenLabs' voice routes (`/v1/voices`,
//!   `/v2/voices`, `/v1/voices/{voice_id}`, default settings) over the
//!   preset speakers and the voice library; `elevenlabs_errors`: the layer
//!   that answers every ElevenLabs HTTP route's refusals in ElevenLabs'
//!   `{"detail": {"status", "message"}}` shape.

mod cartesia;
mod contexts;
mod elevenlabs;
mod elevenlabs_errors;
mod elevenlabs_voices;
mod format;
mod http;
mod port;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::realtime;
use crate::state::{AppState, Unauthorized};

pub use cartesia::{CartesiaIn, CartesiaOut, CartesiaVoice, OutputFormatSpec};
pub use elevenlabs::{ElevenLabsIn, ElevenLabsOut};
pub use format::{Encoding, OutputFormat};

/// A vendor message the adapter refused, naming the problem.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum VendorError {
    #[error("malformed JSON: {0}")]
    MalformedJson(String),
    #[error("invalid message: {0}")]
    Invalid(String),
    #[error("{0}")]
    Unsupported(String),
}

/// The vendor routes (merged into the server's router).
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/v1/text-to-speech/{voice_id}/stream-input",
            get(elevenlabs_single),
        )
        .route(
            "/v1/text-to-speech/{voice_id}/multi-stream-input",
            get(elevenlabs_multi),
        )
        .route("/tts/websocket", get(cartesia_socket))
        // The one-shot HTTP calls of the same vendors (`http`), ElevenLabs'
        // with its voice routes, refusing in its own error shape.
        .merge(elevenlabs_http())
        .route(
            "/tts/bytes",
            post(http::cartesia_bytes).layer(DefaultBodyLimit::disable()),
        )
}

/// ElevenLabs' HTTP routes: speech and voices, their refusals in
/// ElevenLabs' error shape (`elevenlabs_errors`).
fn elevenlabs_http() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/v1/text-to-speech/{voice_id}",
            post(http::elevenlabs_speech).layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/v1/text-to-speech/{voice_id}/stream",
            post(http::elevenlabs_speech).layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/v1/text-to-speech/{voice_id}/with-timestamps",
            post(http::elevenlabs_with_timestamps).layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/v1/text-to-speech/{voice_id}/stream/with-timestamps",
            post(http::elevenlabs_stream_with_timestamps).layer(DefaultBodyLimit::disable()),
        )
        .route("/v1/voices", get(elevenlabs_voices::list))
        .route("/v2/voices", get(elevenlabs_voices::search))
        .route(
            "/v1/voices/settings/default",
            get(elevenlabs_voices::settings_default),
        )
        .route("/v1/voices/{voice_id}", get(elevenlabs_voices::show))
        .route(
            "/v1/voices/{voice_id}/settings",
            get(elevenlabs_voices::settings),
        )
        .layer(axum::middleware::map_response(elevenlabs_errors::reshape))
}

/// The server's `--token`, accepted in the vendors' own places as well as
/// `Authorization: Bearer` and `?token=`: ElevenLabs' `xi-api-key` header,
/// Cartesia's `X-API-Key` header and `api_key` / `access_token` query
/// parameters. Whichever is given goes through the same constant-time check.
fn authorize(
    st: &AppState,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
) -> Result<(), Unauthorized> {
    let query_key = ["api_key", "access_token", "xi_api_key"]
        .iter()
        .find_map(|k| q.get(*k).map(String::as_str));
    st.authorize_upgrade(
        &vendor_key_as_bearer(headers, query_key),
        q.get("token").map(String::as_str),
    )
}

/// `headers` with the vendor's key (the `xi-api-key` or `X-API-Key`
/// header, else `query_key`) added as one more `Authorization: Bearer`
/// credential, for the server's one token check.
fn vendor_key_as_bearer(headers: &HeaderMap, query_key: Option<&str>) -> HeaderMap {
    let key = ["xi-api-key", "x-api-key"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .or(query_key)
        .map(str::trim)
        .filter(|k| !k.is_empty());
    let mut h = headers.clone();
    if let Some(v) = key.and_then(|k| HeaderValue::from_str(&format!("Bearer {k}")).ok()) {
        h.append(header::AUTHORIZATION, v);
    }
    h
}

/// The upgrade every vendor route shares: auth, handshake, readiness, a
/// session slot (the same as `/v1/realtime`'s), then `dialect` on the
/// accepted socket.
async fn upgrade<D: port::Dialect>(
    st: Arc<AppState>,
    q: HashMap<String, String>,
    mut req: axum::extract::Request,
    dialect: impl FnOnce(&HashMap<String, String>) -> D,
) -> Response {
    if let Err(r) = authorize(&st, req.headers(), &q) {
        return r.into_response();
    }
    let d = dialect(&q);
    // The connection's events (the adapter's and its native session's)
    // carry the upgrade request's id, as `/v1/realtime`'s do.
    realtime::admit(st, &mut req, move |st, loaded, socket, permit| {
        let port = port::DialectPort::new(socket, d, loaded.clone(), st.max_pending_chars);
        realtime::run(st, loaded, port, permit)
    })
    .await
}

async fn elevenlabs_single(
    State(st): State<Arc<AppState>>,
    Path(voice): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    req: axum::extract::Request,
) -> Response {
    upgrade(st, q, req, |q| elevenlabs::ElevenLabs::new(voice, false, q)).await
}

async fn elevenlabs_multi(
    State(st): State<Arc<AppState>>,
    Path(voice): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    req: axum::extract::Request,
) -> Response {
    upgrade(st, q, req, |q| elevenlabs::ElevenLabs::new(voice, true, q)).await
}

async fn cartesia_socket(
    State(st): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
    req: axum::extract::Request,
) -> Response {
    upgrade(st, q, req, |_| cartesia::Cartesia::default()).await
}
