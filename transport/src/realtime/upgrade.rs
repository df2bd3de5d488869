//! The WebSocket handshake of `/v1/realtime`, done here rather than by
//! axum's `WebSocketUpgrade`, and the close that follows a refused frame.
//!
//! Why by hand: when a client sends a message over the hard limit
//! ([`HARD_MESSAGE_BYTES`]), tungstenite reports it from the frame header,
//! with the payload still on the wire. Closing the TCP socket then, with
//! unread bytes in its receive queue, makes the kernel answer with a reset
//! (the client sees "connection reset", not the close code), and reading on
//! through tungstenite would buffer the whole oversized payload. Owning the
//! upgraded stream lets [`close_and_drain`] send the close frame (1009,
//! 1007, ...) and then discard the rest of what the client sends, bounded in
//! bytes and time, so the socket closes cleanly.

use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::SinkExt;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{handshake::derive_accept_key, Message};
use tokio_tungstenite::WebSocketStream;

use crate::http_error::error_response;
use crate::protocol::HARD_MESSAGE_BYTES;

/// What a WebSocket runs over: the upgraded HTTP connection (boxed, so
/// tests may run one over an in-memory stream).
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// An accepted WebSocket.
pub type Socket = WebSocketStream<Box<dyn Io>>;

fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(HARD_MESSAGE_BYTES))
        .max_frame_size(Some(HARD_MESSAGE_BYTES))
}

/// After a close frame, how long the server keeps discarding what the
/// client still sends (the rest of an oversized message, its close reply)
/// before it drops the socket.
pub const DRAIN_TIME: Duration = Duration::from_secs(2);
/// ... and how many bytes at most: a 4 MiB message's remainder many times
/// over, while a client announcing a terabyte frame is cut off.
pub const DRAIN_BYTES: usize = 64 << 20;
/// The client has gone quiet (it sent its close reply): drop the socket.
pub const DRAIN_IDLE: Duration = Duration::from_millis(150);

/// A checked upgrade request: what the 101 answer needs, and the hook that
/// yields the upgraded connection once the answer went out.
pub struct Handshake {
    accept: String,
    on_upgrade: OnUpgrade,
}

/// Checks that `req` is a WebSocket upgrade (RFC 6455 §4.2.1); otherwise
/// the 400/426 to answer, in the OpenAI error shape.
pub fn handshake(req: &mut Request) -> Result<Handshake, Box<Response>> {
    let bad = |status, message: &str| {
        Box::new(error_response(
            status,
            message,
            "invalid_request_error",
            None,
        ))
    };
    let h = req.headers();
    if req.method() != Method::GET {
        return Err(bad(
            StatusCode::METHOD_NOT_ALLOWED,
            "/v1/realtime takes a GET WebSocket upgrade",
        ));
    }
    if !has_token(h, header::CONNECTION, "upgrade") || !has_token(h, header::UPGRADE, "websocket") {
        return Err(bad(
            StatusCode::UPGRADE_REQUIRED,
            "/v1/realtime is a WebSocket: send `Connection: Upgrade` and `Upgrade: websocket`",
        ));
    }
    if h.get(header::SEC_WEBSOCKET_VERSION)
        .map(HeaderValue::as_bytes)
        != Some(b"13")
    {
        return Err(bad(
            StatusCode::BAD_REQUEST,
            "unsupported or missing Sec-WebSocket-Version (13 is spoken here)",
        ));
    }
    let Some(key) = h.get(header::SEC_WEBSOCKET_KEY) else {
        return Err(bad(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key"));
    };
    let accept = derive_accept_key(key.as_bytes());
    let Some(on_upgrade) = req.extensions_mut().remove::<OnUpgrade>() else {
        return Err(bad(
            StatusCode::UPGRADE_REQUIRED,
            "this connection cannot be upgraded",
        ));
    };
    Ok(Handshake { accept, on_upgrade })
}

/// Whether a comma-separated header carries `token` (case-insensitive).
fn has_token(h: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    h.get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

impl Handshake {
    /// Answers 101 and runs `session` on the socket once upgraded (on its
    /// own task: the HTTP connection hands the stream over after the 101).
    pub fn accept<F, Fut>(self, session: F) -> Response
    where
        F: FnOnce(Socket) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let on_upgrade = self.on_upgrade;
        tokio::spawn(async move {
            let Ok(upgraded) = on_upgrade.await else {
                return;
            };
            let io: Box<dyn Io> = Box::new(TokioIo::new(upgraded));
            let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(config())).await;
            session(ws).await;
        });
        (
            StatusCode::SWITCHING_PROTOCOLS,
            [
                (header::CONNECTION, HeaderValue::from_static("upgrade")),
                (header::UPGRADE, HeaderValue::from_static("websocket")),
                (
                    header::SEC_WEBSOCKET_ACCEPT,
                    HeaderValue::from_str(&self.accept).expect("base64 is a header value"),
                ),
            ],
        )
            .into_response()
    }
}

/// The most of `reason` a close frame holds: 123 bytes (RFC 6455 §5.5.1),
/// cut at a character boundary.
pub fn fit_close_reason(reason: &str) -> &str {
    const MAX: usize = 123;
    let mut end = reason.len().min(MAX);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// Sends a close frame with `code` and `reason` (cut to what a close frame
/// holds: [`fit_close_reason`]; bounded by `send_timeout`), then discards
/// what the client still sends until it goes quiet, closes, or the drain
/// bounds are reached, so dropping the socket sends a FIN rather than a
/// reset.
pub async fn close_and_drain(ws: &mut Socket, code: u16, reason: &str, send_timeout: Duration) {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: fit_close_reason(reason).into(),
    };
    let _ = tokio::time::timeout(send_timeout, ws.send(Message::Close(Some(frame)))).await;
    drain_reads(ws.get_mut()).await;
}

/// Discards what a peer still sends until it goes quiet ([`DRAIN_IDLE`]),
/// closes, or [`DRAIN_TIME`] / [`DRAIN_BYTES`] are reached, so dropping the
/// connection sends a FIN rather than a reset. Shared by every listener.
pub async fn drain_reads(raw: &mut (impl AsyncRead + Unpin)) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0usize;
    let deadline = tokio::time::Instant::now() + DRAIN_TIME;
    while total < DRAIN_BYTES {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        match tokio::time::timeout(left.min(DRAIN_IDLE), raw.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => total += n,
            // EOF, an error, or quiet for DRAIN_IDLE.
            _ => break,
        }
    }
}

/// What every WebSocket route does once its client is authorised: the
/// handshake, readiness, a session slot (`/v1/realtime` and the dialects'
/// sockets share them; the longest-idle session may be evicted for it),
/// then `session` on the accepted socket, in a `session` span that carries
/// the upgrade request's id (so its context lines name the request).
pub(crate) async fn admit<F, Fut>(
    st: std::sync::Arc<crate::state::AppState>,
    req: &mut Request,
    session: F,
) -> Response
where
    F: FnOnce(
            std::sync::Arc<crate::state::AppState>,
            std::sync::Arc<crate::state::Loaded>,
            Socket,
            tokio::sync::OwnedSemaphorePermit,
        ) -> Fut
        + Send
        + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let hs = match handshake(req) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let loaded =
        match st.ready_for_work("the server is shutting down; reconnect to another instance") {
            Ok(m) => m,
            Err(r) => return *r,
        };
    if let Err(r) = st.refuse_socket_when_full(&loaded) {
        return *r;
    }
    let permit = match st.session_permit().await {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let span = tracing::info_span!(
        "session",
        request_id = %crate::access_log::current().unwrap_or_default()
    );
    hs.accept(move |socket| {
        tracing::Instrument::instrument(session(st, loaded, socket, permit), span)
    })
}
