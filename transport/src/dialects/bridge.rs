//! The native session a vendor socket drives, and the loop between them.
//!
//! [`run`] starts an ordinary native realtime session (`realtime::run`)
//! on the server end of an in-process pipe and keeps the client end as a
//! [`Native`]; then it waits on both sockets at once, handing vendor
//! messages and native events to the vendor's [`Dialect`], and sending
//! what that produces ([`Out`]) to the vendor client, each send bounded by
//! the native path's send timeout. Either side closing ends both: a native
//! close (idle timeout, drain, a dead client) is passed on with its code.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use tokio::sync::OwnedSemaphorePermit;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::protocol::{
    self, AudioFormat, AudioTransport, ClientMessage, ErrorCode, Limits, ServerMessage,
    SessionSettings, SessionUpdate, VadUpdate,
};
use crate::realtime::{self, close_and_drain, PipeClient, Socket, SEND_TIMEOUT};
use crate::state::{AppState, Loaded};

/// The native session ended (its socket closed); the connection ends too.
#[derive(Debug)]
pub struct Gone;

/// A native refusal: its code and message (the vendor renders it).
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    pub code: ErrorCode,
    pub message: String,
}

/// What the adapter sends its vendor client.
#[derive(Clone, Debug, PartialEq)]
pub enum Out {
    Text(String),
    /// A close frame (code, reason); the connection ends after it.
    Close(u16, String),
}

/// The client end of the native session.
pub struct Native {
    ws: PipeClient,
    /// Events read while waiting for a `session.update` answer.
    backlog: VecDeque<ServerMessage>,
    /// The native close frame, when the session closed.
    closed: Option<(u16, String)>,
    /// The session's effective settings (after the last update).
    pub settings: SessionSettings,
    /// The session's limits (`session.created`).
    pub limits: Limits,
}

/// Characters of text per native `context.append`: JSON escapes a character
/// into at most 6 bytes, so an append of this many, with its context id,
/// is always under the native text message limit.
const APPEND_CHARS: usize = (protocol::MAX_TEXT_MESSAGE_BYTES - 4096) / 6;

impl Native {
    /// Reads `session.created`, then sets what every vendor connection
    /// uses: base64 audio in JSON, f32 samples (the adapter encodes them in
    /// the vendor's format), no acks, no input-audio VAD.
    async fn open(mut ws: PipeClient) -> Result<Native, Gone> {
        let mut closed = None;
        let (settings, limits) = match read(&mut ws, &mut closed).await {
            Some(ServerMessage::SessionCreated {
                session, limits, ..
            }) => (session, limits),
            _ => return Err(Gone),
        };
        let mut n = Native {
            ws,
            backlog: VecDeque::new(),
            closed,
            settings,
            limits,
        };
        let u = SessionUpdate {
            audio_transport: Some(AudioTransport::Base64),
            format: Some(AudioFormat::F32),
            audio_acks: Some(false),
            vad: Some(VadUpdate {
                enabled: Some(false),
                ..VadUpdate::default()
            }),
            ..SessionUpdate::default()
        };
        match n.update(u).await? {
            Ok(()) => Ok(n),
            Err(_) => Err(Gone),
        }
    }

    /// Sends one native message.
    pub async fn send(&mut self, m: ClientMessage) -> Result<(), Gone> {
        let json = serde_json::to_string(&m).map_err(|_| Gone)?;
        match tokio::time::timeout(SEND_TIMEOUT, self.ws.send(Message::Text(json.into()))).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(Gone),
        }
    }

    /// Appends `text` to native context `context_id`, in as many
    /// `context.append` messages as the native message limit needs (one,
    /// unless the server allows more pending text than a message holds).
    pub async fn append(&mut self, context_id: &str, text: &str) -> Result<(), Gone> {
        let mut rest = text;
        while !rest.is_empty() {
            let cut = rest
                .char_indices()
                .nth(APPEND_CHARS)
                .map_or(rest.len(), |(i, _)| i);
            let (piece, more) = rest.split_at(cut);
            self.send(ClientMessage::ContextAppend {
                context_id: context_id.to_string(),
                text: piece.to_string(),
            })
            .await?;
            rest = more;
        }
        Ok(())
    }

    /// Applies `u` (all or nothing, as `session.update` does) and waits for
    /// the answer; events that arrive meanwhile are kept for [`recv`](Self::recv).
    pub async fn update(&mut self, u: SessionUpdate) -> Result<Result<(), Refused>, Gone> {
        self.send(ClientMessage::SessionUpdate { session: u })
            .await?;
        loop {
            match self.read().await.ok_or(Gone)? {
                ServerMessage::SessionUpdated { session } => {
                    self.settings = session;
                    return Ok(Ok(()));
                }
                ServerMessage::Error {
                    code,
                    message,
                    context_id: None,
                    valid,
                } => {
                    // The vendors' errors have no list field: name the
                    // accepted values in the message.
                    let message = match valid {
                        Some(v) if !v.is_empty() => {
                            format!("{message}; use one of: {}", v.join(", "))
                        }
                        _ => message,
                    };
                    return Ok(Err(Refused { code, message }));
                }
                other => self.backlog.push_back(other),
            }
        }
    }

    /// The next native event (kept ones first); `None` once it closed.
    /// Cancel-safe: a kept event is popped only when returned.
    pub async fn recv(&mut self) -> Option<ServerMessage> {
        if let Some(m) = self.backlog.pop_front() {
            return Some(m);
        }
        self.read().await
    }

    async fn read(&mut self) -> Option<ServerMessage> {
        read(&mut self.ws, &mut self.closed).await
    }
}

/// The next native message; `None` once the socket closed (its close
/// frame kept in `closed`).
async fn read(ws: &mut PipeClient, closed: &mut Option<(u16, String)>) -> Option<ServerMessage> {
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => match protocol::parse_server_text(t.as_str()) {
                Ok(m) => return Some(m),
                // The native side only writes its own messages.
                Err(_) => continue,
            },
            Some(Ok(Message::Close(f))) => {
                *closed = f.map(|f| (u16::from(f.code), f.reason.to_string()));
                return None;
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

/// One dialect's translation of a connection's traffic (one type per
/// dialect, each in its own file, which the connection loop below drives
/// without knowing which it is).
pub trait Dialect: Send + 'static {
    /// The native session is open (before any client message).
    fn on_open(
        &mut self,
        _n: &mut Native,
        _out: &mut Vec<Out>,
    ) -> impl std::future::Future<Output = Result<(), Gone>> + Send {
        async { Ok(()) }
    }

    /// A text message from the client.
    fn on_text(
        &mut self,
        t: &str,
        n: &mut Native,
        out: &mut Vec<Out>,
    ) -> impl std::future::Future<Output = Result<(), Gone>> + Send;

    /// An event of the native session.
    fn on_native(
        &mut self,
        m: ServerMessage,
        n: &mut Native,
        out: &mut Vec<Out>,
    ) -> impl std::future::Future<Output = Result<(), Gone>> + Send;

    /// A binary message from the client (no dialect takes one): refused in
    /// the dialect's error shape, `message` saying why.
    fn on_binary(&mut self, message: &str, out: &mut Vec<Out>);
}

/// Runs one vendor connection to its end.
pub async fn run(
    st: Arc<AppState>,
    m: Arc<Loaded>,
    mut client: Socket,
    permit: OwnedSemaphorePermit,
    mut d: impl Dialect,
) {
    let (server_end, native_ws) = realtime::pipe().await;
    // In this connection's span (the request id): its context lines too.
    let session = tokio::spawn(tracing::Instrument::in_current_span(realtime::run(
        st, m, server_end, permit,
    )));
    let mut out = Vec::new();
    let mut n = match Native::open(native_ws).await {
        Ok(n) => n,
        Err(Gone) => {
            close_and_drain(&mut client, 1011, "the session did not start", SEND_TIMEOUT).await;
            let _ = session.await;
            return;
        }
    };
    let mut go = d.on_open(&mut n, &mut out).await.is_ok();
    while go && deliver(&mut client, &mut out).await {
        let r = tokio::select! {
            msg = client.next() => match msg {
                Some(Ok(Message::Text(t))) => d.on_text(t.as_str(), &mut n, &mut out).await,
                Some(Ok(Message::Binary(_))) => {
                    d.on_binary(
                        "binary messages are not part of this protocol; send JSON text",
                        &mut out,
                    );
                    Ok(())
                }
                Some(Ok(Message::Close(_))) | None => break,
                // tungstenite answers pings itself.
                Some(Ok(_)) => Ok(()),
                Some(Err(e)) => {
                    out.push(socket_error(e));
                    Ok(())
                }
            },
            ev = n.recv() => match ev {
                Some(ev) => d.on_native(ev, &mut n, &mut out).await,
                None => Err(Gone),
            },
        };
        if r.is_err() {
            let (code, reason) = n
                .closed
                .take()
                .unwrap_or((1011, "the session ended".to_string()));
            out.push(Out::Close(code, reason));
            go = false;
            deliver(&mut client, &mut out).await;
        }
    }
    // Dropping the pipe ends the native session (it cancels what is left).
    drop(n);
    let _ = session.await;
}

/// Sends what is queued for the client; `false` once the connection is
/// over (a close went out, or a send failed or timed out).
async fn deliver(client: &mut Socket, out: &mut Vec<Out>) -> bool {
    for o in out.drain(..) {
        match o {
            Out::Text(t) => {
                let sent = tokio::time::timeout(SEND_TIMEOUT, client.send(Message::Text(t.into())));
                if !matches!(sent.await, Ok(Ok(()))) {
                    return false;
                }
            }
            Out::Close(code, reason) => {
                close_and_drain(client, code, &reason, SEND_TIMEOUT).await;
                return false;
            }
        }
    }
    true
}

/// A frame the WebSocket layer refused: the close RFC 6455 names for it.
fn socket_error(e: tungstenite::Error) -> Out {
    use tungstenite::Error as E;
    match e {
        E::Capacity(_) => Out::Close(
            1009,
            format!(
                "message over {} MiB (the hard limit)",
                protocol::HARD_MESSAGE_BYTES >> 20
            ),
        ),
        E::Utf8(_) => Out::Close(1007, "text message is not valid UTF-8".into()),
        E::Protocol(p) => Out::Close(1002, format!("WebSocket protocol error: {p}")),
        _ => Out::Close(1011, "the connection failed".into()),
    }
}
