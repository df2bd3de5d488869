//! A Wyoming connection as a realtime session's port: Wyoming events in
//! (`framing`), typed session input out (checked settings,
//! `context.append`, `context.end`), and the session's events and PCM16
//! audio back as Wyoming events.
//!
//! - `describe` → `info`, answered by the port (`info`).
//! - `synthesize {text, voice?}` → one context: the voice (and language)
//!   as checked settings, the text, `context.end`; its audio as
//!   `audio-start`, `audio-chunk`s, `audio-stop`.
//! - `synthesize-start {voice?}`, `synthesize-chunk {text}`*,
//!   `synthesize-stop` → one live-text context (`chunking.mode: live`,
//!   `text_mode: streaming`: one utterance fed as the text arrives; a
//!   stored voice cloned in context, which live text cannot take, is
//!   segmented at sentence ends instead), its audio, then
//!   `synthesize-stopped`. The `synthesize` a client sends
//!   inside a stream (for servers without streaming) is ignored.
//! - `ping` → `pong`; `select-program` is accepted (one program);
//!   anything else, and refusals of the session, are `error {text, code}`.
//!
//! Wyoming has no pings of its own: the session's liveness pings are
//! answered at once by the port, so only the idle timeout and the send
//! bound end a silent connection.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::protocol::{
    AudioFormat, ChunkingMode, ChunkingUpdate, ClientMessage, ErrorCode, ServerMessage,
    SessionSettings, SessionUpdate, TextMode, VadUpdate,
};
use crate::realtime::{self, AudioOut, Closed, Incoming, Port, Res, SEND_TIMEOUT};
use crate::state::Loaded;

use super::framing::{encode, ReadError, Reader};
use super::info::{self, info};

/// The event types a client may send.
const ACCEPTED: &str = "describe, synthesize, synthesize-start, synthesize-chunk, synthesize-stop, ping, select-program";

/// A context this connection opened.
struct Ctx {
    id: String,
    /// A streamed request (`synthesize-start`): `synthesize-stopped` ends it.
    streaming: bool,
    /// `audio-start` was sent.
    started: bool,
}

/// The streamed request being received.
enum Stream {
    None,
    /// Open, on this context; `appended`: text has gone to the session.
    Open {
        id: String,
        appended: bool,
    },
    /// Refused at `synthesize-start` (its error sent): its chunks are
    /// dropped and its stop answered `synthesize-stopped`.
    Refused,
}

/// A Wyoming connection as a session's port.
pub struct WyomingPort<R, W> {
    reader: Reader<R>,
    w: W,
    m: Arc<Loaded>,
    max_pending_chars: usize,
    /// The session's settings as the port last set them.
    settings: SessionSettings,
    /// The session's starting chunking mode and text mode (one-shot
    /// requests), restored after a stream.
    defaults: (ChunkingMode, TextMode),
    /// The session's starting voice (a request without one speaks it).
    default_voice: String,
    inbox: VecDeque<Incoming>,
    out: Vec<u8>,
    ctxs: Vec<Ctx>,
    stream: Stream,
    next_id: u64,
    /// The close's `error` event was already queued.
    said_close: bool,
}

impl<R, W> WyomingPort<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    pub fn new(r: R, w: W, m: Arc<Loaded>, max_pending_chars: usize) -> Self {
        // Until the session opens and says its own.
        let settings = realtime::initial_settings(
            &m.speakers,
            m.native_rate,
            m.max_frames,
            crate::protocol::DEFAULT_PREBUFFER_MS,
        );
        WyomingPort {
            reader: Reader::new(r),
            w,
            defaults: (settings.chunking.mode, settings.text_mode),
            default_voice: settings.voice.clone(),
            settings,
            m,
            max_pending_chars,
            inbox: VecDeque::new(),
            out: Vec::new(),
            ctxs: Vec::new(),
            stream: Stream::None,
            next_id: 0,
            said_close: false,
        }
    }

    fn event(&mut self, ty: &str, data: Value) {
        self.out.extend(encode(ty, Some(&data), &[]));
    }

    fn error(&mut self, code: &str, text: &str) {
        self.event("error", json!({"text": text, "code": code}));
    }

    async fn deliver(&mut self) -> Res {
        if self.out.is_empty() {
            return Ok(());
        }
        let out = std::mem::take(&mut self.out);
        let sent = async {
            self.w.write_all(&out).await?;
            self.w.flush().await
        };
        match tokio::time::timeout(SEND_TIMEOUT, sent).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(Closed),
        }
    }

    /// Checks `u` against the session's rules; installs it (queued before
    /// what follows) if it changes anything. `Err`: the refusal, sent.
    fn update(&mut self, u: SessionUpdate) -> Result<(), ()> {
        let b = realtime::Bounds::of(&self.m, self.max_pending_chars);
        match realtime::apply_settings(&self.settings, u, &b) {
            Ok(s) => {
                if s != self.settings {
                    self.settings = s.clone();
                    self.inbox.push_back(Incoming::Settings(Box::new(s)));
                }
                Ok(())
            }
            Err(e) => {
                let text = match e.valid {
                    Some(v) if !v.is_empty() => {
                        format!("{}; use one of: {}", e.message, v.join(", "))
                    }
                    _ => e.message,
                };
                self.error(&e.code.wire_name(), &text);
                Err(())
            }
        }
    }

    /// The settings of one request: its voice (or the default), its
    /// language (or `auto`), and one-shot or live text.
    fn request_settings(&mut self, data: &Map<String, Value>, live: bool) -> Result<(), ()> {
        let voice = data.get("voice").and_then(Value::as_object);
        let field = |k: &str| {
            voice
                .and_then(|v| v.get(k))
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let voice_name = field("name")
            .filter(|n| !(n == info::DEFAULT_VOICE && info::only_default(&self.m)))
            .unwrap_or_else(|| self.default_voice.clone());
        // Live text cannot take an in-context clone (its prompt needs the
        // text beside the reference codes): its stream is segmented.
        let live = live && !self.is_in_context_clone(&voice_name);
        let (mode, text_mode) = if live {
            (ChunkingMode::Live, TextMode::Streaming)
        } else {
            self.defaults
        };
        let u = SessionUpdate {
            voice: Some(voice_name).filter(|v| !v.is_empty()),
            language: Some(field("language").unwrap_or_else(|| "auto".into())),
            chunking: Some(ChunkingUpdate {
                mode: Some(mode),
                ..ChunkingUpdate::default()
            }),
            text_mode: Some(text_mode),
            ..SessionUpdate::default()
        };
        self.update(u)
    }

    /// Whether `voice` is a stored voice cloned in context (reference
    /// codes and text).
    fn is_in_context_clone(&self, voice: &str) -> bool {
        self.m.library.as_ref().is_some_and(|l| {
            l.list()
                .iter()
                .any(|r| r.name.as_str().eq_ignore_ascii_case(voice) && r.ref_codes.is_some())
        })
    }

    fn new_ctx(&mut self, streaming: bool) -> String {
        self.next_id += 1;
        let id = format!("wyoming-{}", self.next_id);
        self.ctxs.push(Ctx {
            id: id.clone(),
            streaming,
            started: false,
        });
        id
    }

    fn text_of(&mut self, ty: &str, data: &Map<String, Value>) -> Option<String> {
        match data.get("text") {
            Some(Value::String(t)) => Some(t.clone()),
            _ => {
                self.error(
                    &ErrorCode::InvalidMessage.wire_name(),
                    &format!("{ty} needs data.text, a string"),
                );
                None
            }
        }
    }

    /// One client event: queues the session's input and the client's
    /// answers.
    fn on_event(&mut self, ty: &str, data: Map<String, Value>) {
        let in_stream = !matches!(self.stream, Stream::None);
        match ty {
            "describe" => {
                let i = info(&self.m);
                self.event("info", i);
            }
            "ping" => {
                let mut d = json!({});
                if let Some(t) = data.get("text") {
                    d["text"] = t.clone();
                }
                self.event("pong", d);
            }
            "select-program" => {}
            // Sent inside a stream for servers that cannot stream: the
            // stream's chunks already carry the text.
            "synthesize" if in_stream => {}
            "synthesize" => {
                let Some(text) = self.text_of(ty, &data) else {
                    return;
                };
                if self.request_settings(&data, false).is_err() {
                    return;
                }
                let id = self.new_ctx(false);
                self.inbox
                    .push_back(Incoming::Client(ClientMessage::ContextAppend {
                        context_id: id.clone(),
                        text,
                    }));
                self.inbox
                    .push_back(Incoming::Client(ClientMessage::ContextEnd {
                        context_id: id,
                    }));
            }
            "synthesize-start" if in_stream => self.error(
                &ErrorCode::InvalidMessage.wire_name(),
                "synthesize-start inside a stream; send synthesize-stop first",
            ),
            "synthesize-start" => {
                self.stream = match self.request_settings(&data, true) {
                    Ok(()) => Stream::Open {
                        id: self.new_ctx(true),
                        appended: false,
                    },
                    Err(()) => Stream::Refused,
                };
            }
            "synthesize-chunk" => {
                let Some(text) = self.text_of(ty, &data) else {
                    return;
                };
                match &mut self.stream {
                    Stream::Open { id, appended } => {
                        *appended = true;
                        let context_id = id.clone();
                        self.inbox
                            .push_back(Incoming::Client(ClientMessage::ContextAppend {
                                context_id,
                                text,
                            }));
                    }
                    Stream::Refused => {}
                    Stream::None => self.error(
                        &ErrorCode::InvalidMessage.wire_name(),
                        "synthesize-chunk outside a stream; send synthesize-start first",
                    ),
                }
            }
            "synthesize-stop" => match std::mem::replace(&mut self.stream, Stream::None) {
                Stream::Open { id, appended: true } => {
                    self.inbox
                        .push_back(Incoming::Client(ClientMessage::ContextEnd {
                            context_id: id,
                        }));
                }
                Stream::Open {
                    id,
                    appended: false,
                } => {
                    self.ctxs.retain(|c| c.id != id);
                    self.event("synthesize-stopped", json!({}));
                }
                Stream::Refused => self.event("synthesize-stopped", json!({})),
                Stream::None => self.error(
                    &ErrorCode::InvalidMessage.wire_name(),
                    "synthesize-stop outside a stream; send synthesize-start first",
                ),
            },
            _ => self.error(
                &ErrorCode::UnknownType.wire_name(),
                &format!("unknown event type {ty:?}; this server takes: {ACCEPTED}"),
            ),
        }
    }

    /// `audio-start` for context `i`, once.
    fn start(&mut self, i: usize, rate: u32) {
        if !self.ctxs[i].started {
            self.ctxs[i].started = true;
            self.event(
                "audio-start",
                json!({"rate": rate, "width": 2, "channels": 1}),
            );
        }
    }

    /// Context `id` ended: its audio's end (and the stream's), or its
    /// failure.
    fn finish(&mut self, id: &str, failed: Option<(String, String)>) {
        let Some(i) = self.ctxs.iter().position(|c| c.id == id) else {
            return;
        };
        match failed {
            None => {
                self.start(i, self.settings.sample_rate);
                self.event("audio-stop", json!({}));
            }
            Some((code, text)) => self.error(&code, &text),
        }
        let c = self.ctxs.remove(i);
        if c.streaming {
            // A stream refused after its start: its chunks are dropped.
            if matches!(&self.stream, Stream::Open { id, .. } if *id == c.id) {
                self.stream = Stream::Refused;
            } else {
                self.event("synthesize-stopped", json!({}));
            }
        }
    }

    fn on_session(&mut self, m: &ServerMessage) {
        match m {
            ServerMessage::SessionCreated { session, .. } => {
                self.settings = session.clone();
                self.defaults = (session.chunking.mode, session.text_mode);
                self.default_voice = session.voice.clone();
                let u = SessionUpdate {
                    format: Some(AudioFormat::Pcm16),
                    audio_acks: Some(false),
                    vad: Some(VadUpdate {
                        enabled: Some(false),
                        ..VadUpdate::default()
                    }),
                    ..SessionUpdate::default()
                };
                if self.update(u).is_err() {
                    self.said_close = true;
                    self.inbox
                        .push_back(Incoming::Close(1011, "the session did not start".into()));
                }
            }
            ServerMessage::ContextStarted {
                context_id,
                sample_rate,
                ..
            } => {
                if let Some(i) = self.ctxs.iter().position(|c| c.id == *context_id) {
                    self.start(i, *sample_rate);
                }
            }
            ServerMessage::ContextDone { context_id, .. }
            | ServerMessage::ContextCancelled { context_id, .. } => self.finish(context_id, None),
            ServerMessage::ContextFailed {
                context_id,
                code,
                message,
                ..
            } => self.finish(context_id, Some((code.wire_name(), message.clone()))),
            ServerMessage::Error {
                code,
                message,
                context_id,
                valid,
            } => {
                let text = match valid {
                    Some(v) if !v.is_empty() => format!("{message}; use one of: {}", v.join(", ")),
                    _ => message.clone(),
                };
                match context_id {
                    // A refusal of one of this connection's requests ends
                    // it (the client waits for nothing more of it).
                    Some(id) if self.ctxs.iter().any(|c| c.id == *id) => {
                        let id = id.clone();
                        self.finish(&id, Some((code.wire_name(), text)));
                    }
                    // About a request already ended (answered once).
                    Some(_) => {}
                    None => self.error(&code.wire_name(), &text),
                }
            }
            _ => {}
        }
    }
}

impl<R, W> Port for WyomingPort<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    async fn recv(&mut self) -> Incoming {
        if let Some(i) = self.inbox.pop_front() {
            return i;
        }
        let input = match self.reader.next().await {
            Ok(e) => {
                self.on_event(&e.ty, e.data);
                Incoming::Heard { message: true }
            }
            Err(ReadError::Bad(text)) => {
                self.error(&ErrorCode::MalformedJson.wire_name(), &text);
                Incoming::Heard { message: true }
            }
            Err(ReadError::Fatal(code, text)) => {
                self.error(&code.wire_name(), &text);
                self.said_close = true;
                Incoming::Close(1009, text)
            }
            Err(ReadError::Closed) => Incoming::Closed,
        };
        // What the event made for the session comes first (the session
        // hears the event through it); the rest on the next calls.
        match self.inbox.pop_front() {
            Some(i) if matches!(input, Incoming::Heard { .. }) => i,
            Some(i) => {
                self.inbox.push_front(i);
                input
            }
            None => input,
        }
    }

    async fn send(&mut self, m: &ServerMessage) -> Res {
        self.on_session(m);
        self.deliver().await
    }

    async fn send_audio(&mut self, a: AudioOut<'_>) -> Res {
        if !a.payload.is_empty() {
            if let Some(i) = self.ctxs.iter().position(|c| c.id == a.context_id) {
                let rate = a.settings.rate;
                self.start(i, rate);
                let d = json!({"rate": rate, "width": 2, "channels": 1});
                self.out.extend(encode("audio-chunk", Some(&d), a.payload));
            }
        }
        self.deliver().await
    }

    /// Wyoming has no pings: answered at once (see the module docs).
    async fn ping(&mut self, _payload: Vec<u8>) -> Res {
        self.inbox.push_back(Incoming::Heard { message: false });
        Ok(())
    }

    async fn flush(&mut self) -> Res {
        self.deliver().await
    }

    async fn close(&mut self, code: u16, reason: &str) {
        if code != 1000 && !self.said_close && !reason.is_empty() {
            self.said_close = true;
            self.error("closed", reason);
        }
        if self.deliver().await.is_err() {
            return;
        }
        let _ = tokio::time::timeout(SEND_TIMEOUT, self.w.shutdown()).await;
        // Let the client's last bytes in, so the close is a FIN.
        realtime::drain_reads(self.reader.get_mut()).await;
    }
}
