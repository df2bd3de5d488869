//! Cartesia's `/tts/websocket`, translated onto a native session.
//!
//! Client messages (JSON; unknown fields ignored, as Cartesia's clients
//! send many this server has no use for):
//! - a generation request `{"context_id", "transcript", "continue",
//!   "flush"?, "voice": {"mode": "id", "id"}, "output_format": {"container":
//!   "raw", "encoding", "sample_rate"}, "model_id", "language", ...}`: the
//!   first for a `context_id` opens the context with its voice and format
//!   (later ones continue it, their voice and format ignored, as Cartesia
//!   requires them equal): they are bound to the context, which is spoken
//!   in them whatever other contexts open meanwhile; `transcript` →
//!   `context.append`; `flush: true` → `context.flush` and a `flush_done`;
//!   `continue: false` → `context.end` (`done` once the audio is out).
//! - `{"context_id", "cancel": true}` → `context.cancel`; nothing is sent
//!   back (the SDK and Pipecat drop the context on their side).
//!
//! Every lifecycle of a context ends with exactly one `done` or `error`,
//! and nothing of it follows (`contexts`). A transcript after `continue:
//! false` is refused with an error that ends the context (its audio
//! stops); once a context is done or cancelled its id may open a new one.
//! A context the server ends with an error takes nothing more: what the
//! client sent for it meanwhile is dropped, until its `continue: false` or
//! `cancel`.
//!
//! Server messages: `chunk` (base64 `data`), `flush_done`, `done`, `error`;
//! every one carries `context_id` (Pipecat reads it from each message).
//! With `add_timestamps: true` on a context's first request, its words'
//! times (the native session's `timings`, `realtime/timings.rs`) come in
//! `timestamps` messages, `{"word_timestamps": {"words", "start", "end"}}`
//! in seconds from the start of the context's audio, each sent before the
//! chunk whose audio ends its words.

use serde::{Deserialize, Serialize};

use crate::protocol::{self, AudioFormat, ClientMessage, ErrorCode, ServerMessage, SessionUpdate};
use crate::realtime::AudioOut;

use super::contexts::Contexts;
use super::format::{Encoding, OutputFormat};
use super::port::{Dialect, Refused, Session};
use super::VendorError;

/// `voice`: `{"mode": "id", "id": "<voice>"}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CartesiaVoice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl CartesiaVoice {
    /// The voice name of a `/tts/bytes` request: `{"mode": "id", "id"}`
    /// (`mode` may be left out), or why it is refused.
    pub fn id_for_http(&self) -> Result<String, VendorError> {
        match (self.mode.as_deref().unwrap_or("id"), self.id.as_deref()) {
            ("id", Some(id)) if !id.trim().is_empty() => Ok(id.to_string()),
            ("id", _) => Err(VendorError::Invalid(
                "voice.id is required: a checkpoint speaker or a stored voice's name".into(),
            )),
            (mode, _) => Err(VendorError::Unsupported(format!(
                "voice mode {mode:?} is not supported; use {{\"mode\": \"id\", \"id\": \"<voice>\"}} \
                 (embeddings are not supported)"
            ))),
        }
    }
}

/// `output_format`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputFormatSpec {
    pub container: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    pub sample_rate: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bit_rate: Option<u32>,
}

impl OutputFormatSpec {
    /// The encoding and rate, or why they are refused.
    pub fn resolve(&self) -> Result<OutputFormat, VendorError> {
        let encoding = match (self.container.as_str(), self.encoding.as_deref()) {
            ("raw", Some("pcm_s16le")) => Encoding::Pcm16,
            ("raw", Some("pcm_f32le")) => Encoding::F32,
            ("raw", Some("pcm_mulaw")) => Encoding::Mulaw,
            ("raw", Some("pcm_alaw")) => Encoding::Alaw,
            ("mp3", _) => Encoding::Mp3,
            ("raw", e) => {
                return Err(VendorError::Unsupported(format!(
                    "output_format.encoding {e:?} is not supported; use pcm_s16le, pcm_f32le, \
                     pcm_mulaw or pcm_alaw"
                )))
            }
            (c, _) => {
                return Err(VendorError::Unsupported(format!(
                    "output_format.container {c:?} is not supported; use raw or mp3"
                )))
            }
        };
        Ok(OutputFormat {
            encoding,
            sample_rate: self.sample_rate,
        })
    }
}

/// A client message, as sent: a generation request or a cancel.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CartesiaIn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<String>,
    #[serde(
        rename = "continue",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub continues: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flush: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice: Option<CartesiaVoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_format: Option<OutputFormatSpec>,
    /// Accepted; the checkpoint detects the language.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// `true` on a context's first request: its words' times come in
    /// `timestamps` messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_timestamps: Option<bool>,
}

impl CartesiaIn {
    /// Parses one client text message (never panics).
    pub fn parse(text: &str) -> Result<Self, VendorError> {
        if text.len() > protocol::MAX_TEXT_MESSAGE_BYTES {
            return Err(VendorError::Invalid(format!(
                "message of {} bytes exceeds the {}-byte limit; send the transcript in several \
                 messages with continue: true",
                text.len(),
                protocol::MAX_TEXT_MESSAGE_BYTES
            )));
        }
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| VendorError::MalformedJson(e.to_string()))?;
        if !v.is_object() {
            return Err(VendorError::Invalid(
                "a message must be a JSON object".into(),
            ));
        }
        serde_json::from_value(v).map_err(|e| VendorError::Invalid(e.to_string()))
    }
}

/// A server message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CartesiaOut {
    Chunk {
        context_id: String,
        data: String,
        done: bool,
        status_code: u16,
        step_time: f64,
    },
    FlushDone {
        context_id: String,
        done: bool,
        flush_done: bool,
        flush_id: u32,
        status_code: u16,
    },
    Done {
        context_id: String,
        done: bool,
        status_code: u16,
    },
    Timestamps {
        context_id: String,
        done: bool,
        status_code: u16,
        word_timestamps: WordTimestamps,
    },
    Error {
        /// `null` when the error is not about one context.
        context_id: Option<String>,
        done: bool,
        status_code: u16,
        title: String,
        message: String,
        /// The older SDKs' field.
        error: String,
        error_code: String,
    },
}

impl CartesiaOut {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("string keys and JSON values serialize")
    }
}

/// Words and their times in seconds from the context's start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WordTimestamps {
    pub words: Vec<String>,
    pub start: Vec<f64>,
    pub end: Vec<f64>,
}

/// What a context is spoken with, fixed by its first request: Cartesia
/// requires a context's later requests to repeat it, and the native
/// session takes its settings when a context's first text arrives, so the
/// session is set to these just before (whatever another context set since).
#[derive(Clone, Debug, PartialEq)]
struct Bound {
    voice: String,
    sample_rate: u32,
    format: AudioFormat,
    /// `add_timestamps`.
    timings: bool,
}

/// One lifecycle of a context.
struct Ctx {
    bound: Bound,
    /// Text reached the native context (it exists there).
    appended: bool,
    /// The client ended it (`continue: false`): it is spoken out, then
    /// `done`.
    ended: bool,
    flushes: u32,
}

/// One Cartesia connection.
#[derive(Default)]
pub struct Cartesia {
    contexts: Contexts<Ctx>,
    /// The voice, rate and format the session is set to.
    session: Option<Bound>,
    /// For requests without a `context_id`.
    next_anonymous: u64,
}

/// The HTTP-like status Cartesia puts on an error.
fn status_of(code: ErrorCode) -> u16 {
    match code {
        ErrorCode::AtCapacity | ErrorCode::TooManyContexts => 429,
        ErrorCode::ShuttingDown => 503,
        ErrorCode::SynthesisFailed | ErrorCode::Internal | ErrorCode::SlowConsumer => 500,
        _ => 400,
    }
}

impl Dialect for Cartesia {
    fn on_text(&mut self, t: &str, n: &mut Session, out: &mut Vec<String>) {
        Cartesia::on_text(self, t, n, out)
    }

    fn on_event(&mut self, m: &ServerMessage, n: &mut Session, out: &mut Vec<String>) {
        Cartesia::on_event(self, m, n, out)
    }

    fn on_audio(&mut self, a: &AudioOut<'_>, out: &mut Vec<String>) {
        let Some(life) = self.contexts.get_mut(a.context_id) else {
            return;
        };
        if a.payload.is_empty() {
            return;
        }
        out.push(
            CartesiaOut::Chunk {
                context_id: life.vendor_id.clone(),
                data: protocol::base64_encode(a.payload),
                done: false,
                status_code: 206,
                step_time: 0.0,
            }
            .to_json(),
        );
    }

    fn on_binary(&mut self, message: &str, out: &mut Vec<String>) {
        self.refuse(None, ErrorCode::InvalidMessage, message, out);
    }
}

impl Cartesia {
    pub fn refuse(&self, id: Option<&str>, code: ErrorCode, message: &str, out: &mut Vec<String>) {
        let error_code = code.wire_name();
        out.push(
            CartesiaOut::Error {
                context_id: id.map(str::to_string),
                done: true,
                status_code: status_of(code),
                title: error_code.replace('_', " "),
                message: message.to_string(),
                error: message.to_string(),
                error_code,
            }
            .to_json(),
        );
    }

    fn done(id: &str, out: &mut Vec<String>) {
        out.push(
            CartesiaOut::Done {
                context_id: id.to_string(),
                done: true,
                status_code: 200,
            }
            .to_json(),
        );
    }

    /// The server ends lifecycle `native` with an error (its one end: the
    /// native context is cancelled, nothing of it follows). With
    /// `stale_follows` (the client had not ended it), what the client still
    /// sends for the context is dropped until its `continue: false` or
    /// `cancel`.
    fn fail(
        &mut self,
        native: &str,
        code: ErrorCode,
        message: &str,
        stale_follows: bool,
        n: &mut Session,
        out: &mut Vec<String>,
    ) {
        let Some(life) = self.contexts.end(native) else {
            return;
        };
        self.refuse(Some(&life.vendor_id), code, message, out);
        if stale_follows {
            self.contexts.refuse(&life.vendor_id);
        }
        if life.ctx.appended {
            n.send(ClientMessage::ContextCancel {
                context_id: native.to_string(),
            });
        }
    }

    pub fn on_text(&mut self, t: &str, n: &mut Session, out: &mut Vec<String>) {
        let m = match CartesiaIn::parse(t) {
            Ok(m) => m,
            Err(e) => {
                self.refuse(None, ErrorCode::InvalidMessage, &e.to_string(), out);
                return;
            }
        };
        if m.cancel {
            let Some(id) = m.context_id else {
                let e = "cancel needs the context_id to cancel";
                self.refuse(None, ErrorCode::InvalidMessage, e, out);
                return;
            };
            self.contexts.forgive(&id);
            if let Some((native, c)) = self.contexts.current_mut(&id) {
                let appended = c.appended;
                self.contexts.end(&native);
                if appended {
                    n.send(ClientMessage::ContextCancel { context_id: native });
                }
            }
            return;
        }
        let id = match m.context_id.clone() {
            Some(id) => id,
            None => {
                self.next_anonymous += 1;
                format!("request-{}", self.next_anonymous)
            }
        };
        if self.contexts.is_refused(&id) {
            // Its context ended in an error the client had not seen yet:
            // this is the rest of it, dropped; its end frees the id.
            if !m.continues {
                self.contexts.forgive(&id);
            }
            return;
        }
        if self.contexts.current(&id).is_none() && !self.open(&id, &m, n, out) {
            return;
        }
        let (native, c) = self.contexts.current_mut(&id).expect("opened");
        let text = m.transcript.filter(|t| !t.is_empty());
        if c.ended {
            if text.is_some() {
                let e = format!(
                    "context {id:?} was ended (continue: false) before this transcript; send \
                     further text in a new context"
                );
                let stale = m.continues;
                return self.fail(&native, ErrorCode::OutOfOrder, &e, stale, n, out);
            }
        } else if let Some(text) = text {
            if !c.appended {
                // The native context opens now, with the session's
                // settings: make them this context's.
                let bound = c.bound.clone();
                if let Err(r) = self.bind(bound, n) {
                    let stale = m.continues;
                    return self.fail(&native, r.code, &r.message, stale, n, out);
                }
            }
            let (_, c) = self.contexts.current_mut(&id).expect("open");
            c.appended = true;
            n.append(&native, &text);
        }
        let (_, c) = self.contexts.current_mut(&id).expect("open");
        if m.flush {
            c.flushes += 1;
            if c.appended && !c.ended {
                n.send(ClientMessage::ContextFlush {
                    context_id: native.clone(),
                });
            }
            out.push(
                CartesiaOut::FlushDone {
                    context_id: id.clone(),
                    done: false,
                    flush_done: true,
                    flush_id: c.flushes,
                    status_code: 206,
                }
                .to_json(),
            );
        }
        if !m.continues && !c.ended {
            c.ended = true;
            if c.appended {
                n.send(ClientMessage::ContextEnd { context_id: native });
            } else {
                self.contexts.end(&native);
                Self::done(&id, out);
            }
        }
    }

    /// Sets the session to `bound` (voice, rate, format) unless it is.
    fn bind(&mut self, bound: Bound, n: &mut Session) -> Result<(), Refused> {
        if self.session.as_ref() == Some(&bound) {
            return Ok(());
        }
        let u = SessionUpdate {
            voice: Some(bound.voice.clone()),
            sample_rate: Some(bound.sample_rate),
            format: Some(bound.format),
            timings: Some(bound.timings),
            ..SessionUpdate::default()
        };
        let r = n.update(u);
        if r.is_ok() {
            self.session = Some(bound);
        }
        r
    }

    /// A new lifecycle of context `id`: its voice and output format
    /// (required) are checked and bound to it. `false`: refused (the error
    /// is in `out`).
    fn open(&mut self, id: &str, m: &CartesiaIn, n: &mut Session, out: &mut Vec<String>) -> bool {
        match self.check(m, n) {
            Ok(bound) => {
                let c = Ctx {
                    bound,
                    appended: false,
                    ended: false,
                    flushes: 0,
                };
                self.contexts.open(id, c);
                true
            }
            Err((code, e)) => {
                self.refuse(Some(id), code, &e, out);
                if m.continues {
                    // The rest of this context is on its way: dropped.
                    self.contexts.refuse(id);
                }
                false
            }
        }
    }

    /// A first request's voice and format, checked (the voice by the native
    /// session, which is set to it), or the refusal.
    fn check(&mut self, m: &CartesiaIn, n: &mut Session) -> Result<Bound, (ErrorCode, String)> {
        let max = n.limits.max_contexts;
        if self.contexts.len() >= max {
            let e = format!("{max} contexts are open (the limit); end or cancel one first");
            return Err((ErrorCode::TooManyContexts, e));
        }
        let voice = m
            .voice
            .as_ref()
            .filter(|v| v.mode.as_deref().unwrap_or("id") == "id")
            .and_then(|v| v.id.clone());
        let Some(voice) = voice else {
            let e = "voice must be {\"mode\": \"id\", \"id\": \"<voice>\"}: a checkpoint \
                     speaker or a stored voice's name (embeddings are not supported)";
            return Err((ErrorCode::InvalidVoice, e.into()));
        };
        let Some(spec) = &m.output_format else {
            let e = "output_format is required on a context's first request";
            return Err((ErrorCode::InvalidSetting, e.into()));
        };
        let checked = match spec.resolve() {
            Ok(f) => f.check().map(|()| f).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let f = match checked {
            Ok(f) => f,
            Err(e) => return Err((ErrorCode::InvalidSetting, e)),
        };
        let bound = Bound {
            voice,
            sample_rate: f.sample_rate,
            format: f.native(),
            timings: m.add_timestamps.unwrap_or(false),
        };
        // Set now, so a bad voice is refused on the request that names it.
        match self.bind(bound.clone(), n) {
            Ok(()) => Ok(bound),
            Err(r) => Err((r.code, r.message)),
        }
    }

    pub fn on_event(&mut self, m: &ServerMessage, n: &mut Session, out: &mut Vec<String>) {
        match m {
            ServerMessage::Timings {
                context_id, words, ..
            } => {
                if let Some(life) = self.contexts.get_mut(context_id) {
                    if life.ctx.bound.timings && !words.is_empty() {
                        out.push(
                            CartesiaOut::Timestamps {
                                context_id: life.vendor_id.clone(),
                                done: false,
                                status_code: 206,
                                word_timestamps: WordTimestamps {
                                    words: words.iter().map(|w| w.text.clone()).collect(),
                                    start: words.iter().map(|w| w.start_ms / 1000.0).collect(),
                                    end: words.iter().map(|w| w.end_ms / 1000.0).collect(),
                                },
                            }
                            .to_json(),
                        );
                    }
                }
            }
            ServerMessage::ContextDone { context_id, .. } => {
                if let Some(life) = self.contexts.end(context_id) {
                    Self::done(&life.vendor_id, out);
                }
            }
            ServerMessage::ContextCancelled {
                context_id, reason, ..
            } => {
                // Cancelled by the server (its drain deadline): a client's
                // cancel ends the lifecycle first.
                if let Some(life) = self.contexts.get_mut(context_id) {
                    let stale = !life.ctx.ended;
                    let m = format!("the context was cancelled ({reason:?})");
                    self.fail(context_id, ErrorCode::ShuttingDown, &m, stale, n, out)
                }
            }
            ServerMessage::ContextFailed {
                context_id,
                code,
                message,
                ..
            }
            | ServerMessage::Error {
                code,
                message,
                context_id: Some(context_id),
                ..
            } => {
                if let Some(life) = self.contexts.get_mut(context_id) {
                    let stale = !life.ctx.ended;
                    self.fail(context_id, *code, message, stale, n, out)
                }
            }
            ServerMessage::Error { code, message, .. } => self.refuse(None, *code, message, out),
            _ => {}
        }
    }
}
