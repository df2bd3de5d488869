//! A dialect's socket as a realtime session's port: the session
//! (`realtime::run`, the same context queue, segmentation, cancel, send
//! bounds and engine session as `/v1/realtime`) runs on a [`DialectPort`],
//! which reads the vendor client's messages and hands the session typed
//! values, and turns the session's events and encoded audio into the
//! vendor's messages. What each vendor says is its [`Dialect`]'s; this
//! file is the part they share.
//!
//! A dialect answers its client itself where the session has nothing to
//! say (a malformed message, a context over the limit): those answers wait
//! in the port's outbox, sent before the session's next event and before
//! the session waits again, so the client sees them in order.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::protocol::{
    self, ClientMessage, ErrorCode, Limits, ServerMessage, SessionSettings, SessionUpdate,
    VadUpdate,
};
use crate::realtime::{
    self, close_and_drain, AudioOut, Closed, Incoming, Port, Res, Socket, SEND_TIMEOUT,
};
use crate::state::Loaded;

/// A refusal of settings a dialect asked for: its code and message (the
/// dialect renders it in its own shape).
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    pub code: ErrorCode,
    pub message: String,
}

/// What a dialect sends its session: typed client messages and checked
/// settings, queued in order and handed over one at a time by
/// [`Port::recv`]; and what it knows of the session (its settings and
/// limits).
pub struct Session {
    inbox: VecDeque<Incoming>,
    m: Arc<Loaded>,
    max_pending_chars: usize,
    /// The session's settings, as the dialect last set them.
    pub settings: SessionSettings,
    /// The session's limits (`session.created`).
    pub limits: Limits,
    /// The last character appended to each recent context (see `append`).
    last_chars: VecDeque<(String, char)>,
}

/// Contexts whose last character `Session::append` remembers.
const LAST_CHARS: usize = 64;

/// Whether text starting with `next` after text ending with `prev` needs
/// a space between them: a sentence or clause the client sent in pieces
/// without one (Pipecat sends each sentence of a reply bare:
/// "...with that." then "Tell me..."). Without it the words run together
/// in the timings ("that.Tell") and in what the model reads. A digit
/// after a period ("3." "14") is left alone.
fn needs_space(prev: char, next: char) -> bool {
    match prev {
        '.' | '!' | '?' | '…' => next.is_uppercase(),
        ',' | ';' | ':' => next.is_alphabetic(),
        _ => false,
    }
}

impl Session {
    fn new(m: Arc<Loaded>, max_pending_chars: usize) -> Self {
        // Until the session opens and says its own.
        let settings = crate::realtime::initial_settings(
            &m.speakers,
            m.native_rate,
            m.max_frames,
            protocol::DEFAULT_PREBUFFER_MS,
        );
        Session {
            inbox: VecDeque::new(),
            m,
            max_pending_chars,
            settings,
            last_chars: VecDeque::new(),
            limits: Limits {
                max_text_message_bytes: protocol::MAX_TEXT_MESSAGE_BYTES,
                max_binary_message_bytes: protocol::MAX_BINARY_MESSAGE_BYTES,
                max_contexts: 0,
                max_pending_chars,
                max_frames: 0,
            },
        }
    }

    /// Queues one native message.
    pub fn send(&mut self, m: ClientMessage) {
        self.inbox.push_back(Incoming::Client(m));
    }

    /// Appends `text` to native context `context_id`, with a space before
    /// it where a sentence or clause was sent in pieces without one
    /// (`needs_space`).
    pub fn append(&mut self, context_id: &str, text: &str) {
        let Some(last) = text.chars().last() else {
            self.send(ClientMessage::ContextAppend {
                context_id: context_id.to_string(),
                text: String::new(),
            });
            return;
        };
        let at = self.last_chars.iter().position(|(id, _)| id == context_id);
        let prev = at.and_then(|i| self.last_chars.remove(i)).map(|(_, c)| c);
        let spaced = match (prev, text.chars().next()) {
            (Some(p), Some(n)) if needs_space(p, n) => format!(" {text}"),
            _ => text.to_string(),
        };
        if self.last_chars.len() == LAST_CHARS {
            self.last_chars.pop_front();
        }
        self.last_chars.push_back((context_id.to_string(), last));
        self.send(ClientMessage::ContextAppend {
            context_id: context_id.to_string(),
            text: spaced,
        });
    }

    /// The client's message was heard (a keepalive): the session's idle
    /// clock moves, nothing else.
    pub fn heard(&mut self) {
        self.inbox.push_back(Incoming::Heard { message: true });
    }

    /// Applies `u` (all or nothing, by `session.update`'s own rules) now:
    /// the session takes the settings before whatever is queued after;
    /// refused, nothing changes and the refusal says why.
    pub fn update(&mut self, u: SessionUpdate) -> Result<(), Refused> {
        let b = realtime::Bounds::of(&self.m, self.max_pending_chars);
        match realtime::apply_settings(&self.settings, u, &b) {
            Ok(s) => {
                self.settings = s.clone();
                self.inbox.push_back(Incoming::Settings(Box::new(s)));
                Ok(())
            }
            Err(e) => {
                // The vendors' errors have no list field: name the
                // accepted values in the message.
                let message = match e.valid {
                    Some(v) if !v.is_empty() => {
                        format!("{}; use one of: {}", e.message, v.join(", "))
                    }
                    _ => e.message,
                };
                Err(Refused {
                    code: e.code,
                    message,
                })
            }
        }
    }

    /// Ends the connection with `code` and `reason`, once what is queued
    /// before it is done.
    pub fn close(&mut self, code: u16, reason: &str) {
        self.inbox
            .push_back(Incoming::Close(code, reason.to_string()));
    }
}

/// One dialect's translation of a connection's traffic (one type per
/// dialect, each in its own file, which [`DialectPort`] drives without
/// knowing which it is). Every method only queues: text for the client in
/// `out`, typed input for the session in `n`.
pub trait Dialect: Send + 'static {
    /// The session is open (before any client message); its settings are
    /// those every dialect connection starts from.
    fn on_open(&mut self, _n: &mut Session, _out: &mut Vec<String>) {}

    /// A text message from the client.
    fn on_text(&mut self, t: &str, n: &mut Session, out: &mut Vec<String>);

    /// An event of the session (audio comes through [`Dialect::on_audio`]).
    fn on_event(&mut self, m: &ServerMessage, n: &mut Session, out: &mut Vec<String>);

    /// An audio message of a context, its payload in the context's native
    /// format (the dialect's encoding).
    fn on_audio(&mut self, a: &AudioOut<'_>, out: &mut Vec<String>);

    /// A binary message from the client (no dialect takes one): refused in
    /// the dialect's error shape, `message` saying why.
    fn on_binary(&mut self, message: &str, out: &mut Vec<String>);
}

/// A vendor socket as a session's port.
pub struct DialectPort<D> {
    ws: Socket,
    d: D,
    n: Session,
    /// Text messages for the client, oldest first.
    out: Vec<String>,
}

impl<D: Dialect> DialectPort<D> {
    pub fn new(ws: Socket, d: D, m: Arc<Loaded>, max_pending_chars: usize) -> Self {
        DialectPort {
            ws,
            d,
            n: Session::new(m, max_pending_chars),
            out: Vec::new(),
        }
    }

    /// Sends the outbox to the client, each send bounded.
    async fn deliver(&mut self) -> Res {
        for t in self.out.drain(..) {
            let sent = tokio::time::timeout(SEND_TIMEOUT, self.ws.send(Message::Text(t.into())));
            if !matches!(sent.await, Ok(Ok(()))) {
                return Err(Closed);
            }
        }
        Ok(())
    }

    /// The session opened: every dialect connection's settings (no
    /// acknowledgements, no input-audio VAD), then the dialect's own.
    fn open(&mut self, created: &ServerMessage) {
        if let ServerMessage::SessionCreated {
            session, limits, ..
        } = created
        {
            self.n.settings = session.clone();
            self.n.limits = limits.clone();
        }
        let u = SessionUpdate {
            audio_acks: Some(false),
            vad: Some(VadUpdate {
                enabled: Some(false),
                ..VadUpdate::default()
            }),
            ..SessionUpdate::default()
        };
        if let Err(r) = self.n.update(u) {
            tracing::error!(target: "tts_transport::dialects", message = %r.message, "the dialect's session settings were refused");
            self.n.close(1011, "the session did not start");
            return;
        }
        self.d.on_open(&mut self.n, &mut self.out);
    }
}

impl<D: Dialect> Port for DialectPort<D> {
    async fn recv(&mut self) -> Incoming {
        if let Some(i) = self.n.inbox.pop_front() {
            return i;
        }
        let input = match self.ws.next().await {
            Some(Ok(Message::Text(t))) => {
                self.d.on_text(t.as_str(), &mut self.n, &mut self.out);
                Incoming::Heard { message: true }
            }
            Some(Ok(Message::Binary(_))) => {
                self.d.on_binary(
                    "binary messages are not part of this protocol; send JSON text",
                    &mut self.out,
                );
                Incoming::Heard { message: true }
            }
            Some(Ok(Message::Close(_))) | None => Incoming::Closed,
            // tungstenite answers pings itself.
            Some(Ok(_)) => Incoming::Heard { message: false },
            Some(Err(e)) => realtime::socket_error(e, "the hard limit"),
        };
        // What the message made for the session comes first (the session
        // hears the message through it); the rest on the next calls.
        match self.n.inbox.pop_front() {
            Some(i) if matches!(input, Incoming::Heard { .. }) => i,
            Some(i) => {
                self.n.inbox.push_front(i);
                input
            }
            None => input,
        }
    }

    async fn send(&mut self, m: &ServerMessage) -> Res {
        match m {
            ServerMessage::SessionCreated { .. } => self.open(m),
            // The answers to the dialect's own settings.
            ServerMessage::SessionUpdated { .. } => {}
            _ => self.d.on_event(m, &mut self.n, &mut self.out),
        }
        self.deliver().await
    }

    async fn send_audio(&mut self, a: AudioOut<'_>) -> Res {
        self.d.on_audio(&a, &mut self.out);
        self.deliver().await
    }

    async fn ping(&mut self, payload: Vec<u8>) -> Res {
        let ping = self.ws.send(Message::Ping(payload.into()));
        match tokio::time::timeout(SEND_TIMEOUT, ping).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(Closed),
        }
    }

    async fn flush(&mut self) -> Res {
        self.deliver().await
    }

    async fn close(&mut self, code: u16, reason: &str) {
        if self.deliver().await.is_ok() {
            close_and_drain(&mut self.ws, code, reason, SEND_TIMEOUT).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::needs_space;

    #[test]
    fn a_sentence_sent_bare_after_another_gets_its_space() {
        assert!(needs_space('.', 'T'));
        assert!(needs_space('?', 'W'));
        assert!(needs_space(',', 'a'));
        assert!(!needs_space('.', '1'), "3. then 14 stays 3.14");
        assert!(!needs_space('.', 't'), "e.g. then text in pieces");
        assert!(!needs_space('.', ' '));
        assert!(!needs_space('o', 'T'));
        assert!(!needs_space('。', '她'));
    }
}
