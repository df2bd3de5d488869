//! What a realtime session talks to: a [`Port`]. The session (the loop in
//! `connection`, the contexts' lives in `lifecycle`) never sees a socket;
//! it receives typed client input from its port and hands it typed events
//! and each context's encoded audio. The native WebSocket of `/v1/realtime`
//! is one port (`native`); the ElevenLabs and Cartesia sockets are ports
//! that translate between their clients' messages and these typed values
//! (`crate::dialects`); a session under test runs on a port of channels.
//!
//! A port does not encode audio: the session encodes each context in the
//! context's `format` (`encode`) and the port only frames the payload
//! (the native header or base64 event, a dialect's JSON chunk).

use std::future::Future;

use crate::protocol::{ClientMessage, InputAudio, ProtocolError, ServerMessage, SessionSettings};

use super::settings::CtxSettings;

/// Why the session's loop stopped (its port is closed or gone).
pub struct Closed;

pub type Res<T = ()> = Result<T, Closed>;

/// What a port hands its session, one item at a time.
#[derive(Debug)]
pub enum Incoming {
    /// A client message of the native protocol's vocabulary.
    Client(ClientMessage),
    /// Input audio (the caller's microphone, for barge-in).
    InputAudio(InputAudio),
    /// Session settings the port has checked itself against the same
    /// rules as `session.update` (`settings::apply`): the session installs
    /// them as they are and answers `session.updated`. A dialect that must
    /// know whether its settings hold before it goes on (a voice named in
    /// the request that opens a context) checks them on its side, so its
    /// client's refusal is its own, in its order.
    Settings(Box<SessionSettings>),
    /// A message the port could not read: refused with this error, the
    /// session going on.
    Refused(ProtocolError),
    /// Something arrived that the port dealt with itself (a WebSocket
    /// ping, a dialect message it answered on its own); `message`: it was
    /// a client message (the idle clock's activity), not a control frame.
    Heard { message: bool },
    /// The connection ends with this close code and reason: the transport
    /// refused what the client sent (1009 too big, 1007 not UTF-8, 1002 a
    /// protocol violation), or a dialect's client ended it.
    Close(u16, String),
    /// The client is gone (or closed): the session ends.
    Closed,
}

impl Incoming {
    /// Whether this counts as a client message for the idle clock.
    pub fn is_message(&self) -> bool {
        match self {
            Incoming::Client(_)
            | Incoming::InputAudio(_)
            | Incoming::Settings(_)
            | Incoming::Refused(_) => true,
            Incoming::Heard { message } => *message,
            Incoming::Close(..) | Incoming::Closed => false,
        }
    }
}

/// One audio message of a context, its payload already in the context's
/// format.
pub struct AudioOut<'a> {
    pub context_id: &'a str,
    /// `None` before `context.started` (a flush with nothing spoken).
    pub stream_id: Option<u32>,
    /// The context's frame number.
    pub seq: u64,
    /// The context's settings (rate, format, transport).
    pub settings: &'a CtxSettings,
    pub payload: &'a [u8],
    /// The context's last audio message.
    pub terminal: bool,
}

/// The session's side of a client connection (see the module docs).
///
/// Every send is bounded in time by the port (a client that stops reading
/// ends its own connection); an `Err` ends the session.
pub trait Port: Send {
    /// The next input from the client. Cancel-safe: the session waits on
    /// it beside its engine and timers, and an input is handed over only
    /// when this returns.
    fn recv(&mut self) -> impl Future<Output = Incoming> + Send;

    /// A session event.
    fn send(&mut self, m: &ServerMessage) -> impl Future<Output = Res> + Send;

    /// An audio message of a context.
    fn send_audio(&mut self, a: AudioOut<'_>) -> impl Future<Output = Res> + Send;

    /// A liveness ping (answered by the peer's pong, which arrives as
    /// [`Incoming::Heard`]).
    fn ping(&mut self, payload: Vec<u8>) -> impl Future<Output = Res> + Send;

    /// Sends what the port queued for its client on its own while reading
    /// (a dialect's answers); called before the session waits again.
    fn flush(&mut self) -> impl Future<Output = Res> + Send {
        async { Ok(()) }
    }

    /// Closes the connection with `code` and `reason` (what the port still
    /// has for its client first), letting the client's last bytes in.
    fn close(&mut self, code: u16, reason: &str) -> impl Future<Output = ()> + Send;
}

/// Closes `port` with `code` and `reason` (best effort, letting the
/// client's last bytes in) and stops the session's loop.
pub async fn close(port: &mut impl Port, code: u16, reason: &str) -> Res {
    port.close(code, reason).await;
    Err(Closed)
}
