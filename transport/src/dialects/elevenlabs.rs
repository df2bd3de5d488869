//! ElevenLabs' text-to-speech WebSockets: `stream-input` (one utterance per
//! connection) and `multi-stream-input` (contexts), translated onto a native
//! session.
//!
//! Client messages (JSON, unknown fields ignored as ElevenLabs' own
//! clients send ones this server has no use for, e.g. `voice_settings`):
//! - `{"text": " "}`: the first message (opens the utterance / context).
//! - `{"text": "Hello ", "context_id"?, "flush"?, "try_trigger_generation"?}`:
//!   text → `context.append` (then `context.flush` with `flush: true`).
//! - `{"text": ""}`: on `stream-input` the end of the text (EOS →
//!   `context.end`); on `multi-stream-input` a keepalive.
//! - `{"context_id", "flush": true}`, `{"context_id", "close_context": true}`,
//!   `{"close_socket": true}` (multi).
//!
//! `close_context` ends a context whose text was all flushed (Pipecat's end
//! of turn: flush, then close; the rest is spoken, then `isFinal`); with
//! text sent since the last flush it is an interruption and cancels the
//! context (its audio stops at once, its `isFinal` goes out then). A closed
//! context still being spoken when another context's first text arrives
//! is cancelled then (its `isFinal` at once): Pipecat closes a flushed
//! reply the same way when the user interrupts it, and the next turn must
//! not wait behind it.
//!
//! Every lifecycle of a context ends with exactly one `isFinal`, and
//! nothing of it follows (`contexts`): a context id used again after its
//! close (Pipecat does, after an interruption) is a new context. A context
//! the server ends on its own (a refusal, a failure) gets its error, then
//! `isFinal` (on stream-input then a close 1008 naming the error: a spoken
//! utterance's is 1000); what the client sent for it meanwhile is dropped,
//! until it closes the context or opens it again (blank text).
//!
//! Text: a context holds at most `max_pending_chars` characters not yet
//! spoken (the native session's bound, 16384 by default); a message over
//! it, or one that would take its context over it, is refused here with
//! `max_character_limit_exceeded`, and the context ends.
//!
//! Server messages: `{"audio": <base64>, "isFinal", "normalizedAlignment",
//! "alignment", "contextId"?}`, `{"isFinal": true, "contextId"?}` and
//! `{"message", "error", "code", "contextId"?}`.
//!
//! Alignment: each audio message carries the timings of the characters its
//! audio completes (`{"chars", "charStartTimesMs", "charDurationsMs"}`,
//! the native session's `timings`, `realtime/timings.rs`), `alignment` and
//! `normalizedAlignment` alike (the text is not normalized). Times are
//! relative to the end of the context's previous alignment (where the last
//! timed character ended: within a character of the chunk's start), which
//! is how Pipecat accumulates them; with `sync_alignment=true` in the URL
//! (LiveKit's plugin) they count from the start of the context's audio.
//! Characters timed after a context's last audio message come in one more
//! message with empty `audio`, before `isFinal`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::protocol::{self, ClientMessage, ErrorCode, ServerMessage, SessionUpdate};
use crate::realtime::AudioOut;

use super::contexts::Contexts;
use super::format::{Encoding, OutputFormat};
use super::port::{Dialect, Session};
use super::VendorError;

/// The context id of `stream-input`'s one utterance.
const SINGLE: &str = "stream";
/// A `multi-stream-input` message without `context_id` speaks for this one.
const DEFAULT_CONTEXT: &str = "default";
/// ElevenLabs' default `output_format`.
pub(super) const DEFAULT_FORMAT: &str = "mp3_44100_128";

/// A client message, as sent (every field optional).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ElevenLabsIn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flush: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close_context: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close_socket: bool,
    /// Accepted and ignored (segmentation is the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub try_trigger_generation: Option<bool>,
    /// Accepted and ignored (no ElevenLabs voice model here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice_settings: Option<serde_json::Value>,
    /// Accepted and ignored (`chunk_length_schedule`: the server segments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_config: Option<serde_json::Value>,
}

impl ElevenLabsIn {
    /// Parses one client text message (never panics).
    pub fn parse(text: &str) -> Result<Self, VendorError> {
        if text.len() > protocol::MAX_TEXT_MESSAGE_BYTES {
            return Err(VendorError::Invalid(format!(
                "message of {} bytes exceeds the {}-byte limit; send the text in several messages",
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
#[serde(untagged)]
pub enum ElevenLabsOut {
    Audio {
        audio: String,
        #[serde(rename = "isFinal")]
        is_final: Option<bool>,
        #[serde(rename = "normalizedAlignment")]
        normalized_alignment: Option<serde_json::Value>,
        alignment: Option<serde_json::Value>,
        #[serde(rename = "contextId", default, skip_serializing_if = "Option::is_none")]
        context_id: Option<String>,
    },
    Error {
        message: String,
        error: String,
        code: u16,
        #[serde(rename = "contextId", default, skip_serializing_if = "Option::is_none")]
        context_id: Option<String>,
    },
    Final {
        #[serde(rename = "isFinal")]
        is_final: bool,
        #[serde(rename = "contextId", default, skip_serializing_if = "Option::is_none")]
        context_id: Option<String>,
    },
}

impl ElevenLabsOut {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("string keys and JSON values serialize")
    }
}

/// `output_format` (`pcm_16000`, `ulaw_8000`, `alaw_8000`, `mp3_44100_128`,
/// ...): the encoding and rate, or why it is refused.
pub fn output_format(name: &str) -> Result<OutputFormat, VendorError> {
    let bad = || {
        VendorError::Unsupported(format!(
            "output_format {name:?} is not supported here; use pcm_<rate> (8000..48000), \
             ulaw_8000, alaw_8000 or mp3_<rate>_<kbps>"
        ))
    };
    let mut parts = name.split('_');
    let kind = parts.next().unwrap_or_default();
    let rate: u32 = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
    let encoding = match kind {
        "pcm" => Encoding::Pcm16,
        "ulaw" => Encoding::Mulaw,
        "alaw" => Encoding::Alaw,
        // The bit rate is the encoder's own (constant); the rate is honoured.
        "mp3" => Encoding::Mp3,
        _ => return Err(bad()),
    };
    if parts.next().is_some() != (encoding == Encoding::Mp3) || parts.next().is_some() {
        return Err(bad());
    }
    Ok(OutputFormat {
        encoding,
        sample_rate: rate,
    })
}

/// One lifecycle of a context.
struct Ctx {
    /// Text reached the native context (it exists there).
    appended: bool,
    /// No text since the last flush.
    flushed: bool,
    /// The client ended it (`close_context` after a flush, or EOS): it is
    /// spoken out, then `isFinal`.
    closing: bool,
    /// Characters timed and not yet sent: (char, start ms, end ms) from
    /// the start of the context's audio.
    timed: Vec<(String, f64, f64)>,
    /// Where the last alignment sent ended (ms).
    aligned_to: f64,
}

/// The error ElevenLabs' clients get for text over the limit.
const TOO_MUCH_TEXT: &str = "max_character_limit_exceeded";

/// One ElevenLabs connection.
pub struct ElevenLabs {
    voice: String,
    multi: bool,
    format: Result<OutputFormat, VendorError>,
    contexts: Contexts<Ctx>,
    /// `sync_alignment=true`: alignment times from the context's start.
    absolute: bool,
}

impl Dialect for ElevenLabs {
    fn on_open(&mut self, n: &mut Session, out: &mut Vec<String>) {
        ElevenLabs::on_open(self, n, out)
    }

    fn on_text(&mut self, t: &str, n: &mut Session, out: &mut Vec<String>) {
        ElevenLabs::on_text(self, t, n, out)
    }

    fn on_event(&mut self, m: &ServerMessage, n: &mut Session, out: &mut Vec<String>) {
        ElevenLabs::on_event(self, m, n, out)
    }

    fn on_audio(&mut self, a: &AudioOut<'_>, out: &mut Vec<String>) {
        let Some(life) = self.contexts.get_mut(a.context_id) else {
            return;
        };
        if a.payload.is_empty() {
            return;
        }
        let vendor_id = life.vendor_id.clone();
        let alignment = alignment(&mut life.ctx, self.absolute);
        out.push(
            ElevenLabsOut::Audio {
                audio: protocol::base64_encode(a.payload),
                is_final: self.multi.then_some(false),
                normalized_alignment: alignment.clone(),
                alignment,
                context_id: self.ctx_field(&vendor_id),
            }
            .to_json(),
        )
    }

    fn on_binary(&mut self, message: &str, out: &mut Vec<String>) {
        self.refuse(None, "invalid_message", message, out);
    }
}

impl ElevenLabs {
    pub fn new(voice: String, multi: bool, q: &HashMap<String, String>) -> Self {
        let format = output_format(q.get("output_format").map_or(DEFAULT_FORMAT, |s| s));
        ElevenLabs {
            voice,
            multi,
            format,
            contexts: Contexts::default(),
            absolute: q.get("sync_alignment").is_some_and(|v| v == "true"),
        }
    }

    fn ctx_field(&self, id: &str) -> Option<String> {
        self.multi.then(|| id.to_string())
    }

    pub fn refuse(&self, id: Option<&str>, error: &str, message: &str, out: &mut Vec<String>) {
        out.push(
            ElevenLabsOut::Error {
                message: message.to_string(),
                error: error.to_string(),
                code: 1008,
                context_id: id.and_then(|i| self.ctx_field(i)),
            }
            .to_json(),
        );
    }

    /// The end marker of vendor context `id`'s lifecycle.
    fn is_final(&self, id: &str, n: &mut Session, out: &mut Vec<String>) {
        self.final_marker(id, out);
        if !self.multi {
            // stream-input: one utterance per connection.
            n.close(1000, "");
        }
    }

    fn final_marker(&self, id: &str, out: &mut Vec<String>) {
        out.push(
            ElevenLabsOut::Final {
                is_final: true,
                context_id: self.ctx_field(id),
            }
            .to_json(),
        );
    }

    /// The server ends lifecycle `native` on its own: `error` and then its
    /// `isFinal` (stream-input: then the close, 1008), the native context
    /// cancelled (nothing of it follows).
    /// Unless the client had closed it, what it still sends for the vendor
    /// id is stale (dropped until it opens or closes the context again).
    fn fail(
        &mut self,
        native: &str,
        error: &str,
        message: &str,
        n: &mut Session,
        out: &mut Vec<String>,
    ) {
        let Some(life) = self.contexts.end(native) else {
            return;
        };
        self.refuse(Some(&life.vendor_id), error, message, out);
        self.final_marker(&life.vendor_id, out);
        if !self.multi {
            // stream-input: the connection's one utterance failed, and its
            // close says so (1008, ElevenLabs' code for a refusal, the
            // error as its reason), not 1000: ElevenLabs' SDK
            // (`convert_realtime`) raises `ApiError` on a close other than
            // 1000 and took a 1000 after `isFinal` for a spoken utterance,
            // so a refused one came back as no audio and no error.
            n.close(1008, &close_reason(error, message));
        }
        if !life.ctx.closing {
            self.contexts.refuse(&life.vendor_id);
        }
        if life.ctx.appended {
            n.send(ClientMessage::ContextCancel {
                context_id: native.to_string(),
            });
        }
    }

    /// The voice (URL path) and format (query) of the whole connection.
    pub fn on_open(&mut self, n: &mut Session, out: &mut Vec<String>) {
        let f = match &self.format {
            Ok(f) => *f,
            Err(e) => {
                let m = e.to_string();
                self.refuse(None, "invalid_output_format", &m, out);
                n.close(1008, "invalid output_format");
                return;
            }
        };
        if let Err(e) = f.check() {
            self.refuse(None, "invalid_output_format", &e.to_string(), out);
            n.close(1008, "invalid output_format");
            return;
        }
        let u = SessionUpdate {
            voice: Some(self.voice.clone()),
            sample_rate: Some(f.sample_rate),
            format: Some(f.native()),
            timings: Some(true),
            ..SessionUpdate::default()
        };
        if let Err(r) = n.update(u) {
            let error = match r.code {
                ErrorCode::InvalidVoice => "voice_not_found",
                _ => "invalid_request",
            };
            self.refuse(None, error, &r.message, out);
            n.close(1008, error);
        }
    }

    pub fn on_text(&mut self, t: &str, n: &mut Session, out: &mut Vec<String>) {
        let m = match ElevenLabsIn::parse(t) {
            Ok(m) => m,
            Err(e) => {
                self.refuse(None, "invalid_message", &e.to_string(), out);
                return;
            }
        };
        if m.close_socket {
            for id in self.contexts.end_all() {
                n.send(ClientMessage::ContextCancel { context_id: id });
            }
            n.close(1000, "");
            return;
        }
        let id = match (self.multi, &m.context_id) {
            (false, _) => SINGLE.to_string(),
            (true, Some(id)) => id.clone(),
            (true, None) => DEFAULT_CONTEXT.to_string(),
        };
        let text = m.text.as_deref();
        if self.contexts.is_refused(&id) {
            // The server ended this context on its own: what the client
            // sent for it before it knew is dropped. Its close, or a new
            // context-opening message (blank text), says it knows.
            match text {
                Some(t) if !t.is_empty() && t.trim().is_empty() => self.contexts.forgive(&id),
                _ => {
                    if m.close_context {
                        self.contexts.forgive(&id);
                    }
                    if text == Some("") && self.multi {
                        n.heard();
                    }
                    return;
                }
            }
        }
        if let Some(text) = text {
            if !self.multi && text.is_empty() {
                // stream-input's end of text (EOS).
                return self.close(&id, true, n, out);
            }
            if text.is_empty() {
                // A keepalive: the session's idle clock hears it.
                n.heard();
            } else if self.contexts.current(&id).is_none() {
                // If refused there is no lifecycle: the rest of the
                // message goes nowhere.
                self.open(&id, n, out);
            }
            if !text.trim().is_empty() {
                self.append(&id, text, n, out);
            }
        }
        if m.flush {
            if let Some((native, c)) = self.contexts.current_mut(&id) {
                c.flushed = true;
                if c.appended {
                    n.send(ClientMessage::ContextFlush { context_id: native });
                }
            }
        }
        if m.close_context && self.multi {
            if self.contexts.is_refused(&id) {
                // Refused by this very message: its close is the client's.
                self.contexts.forgive(&id);
            } else {
                self.close(&id, false, n, out);
            }
        }
    }

    /// A new lifecycle for vendor context `id`, unless refused (the refusal
    /// and its `isFinal` go to `out`).
    fn open(&mut self, id: &str, n: &mut Session, out: &mut Vec<String>) {
        let Ok(f) = self.format else { return };
        let max = n.limits.max_contexts;
        let refusal = if self.contexts.len() >= max {
            Some((
                "too_many_contexts".to_string(),
                format!("{max} contexts are open (the limit); close one first"),
            ))
        } else {
            match f.check() {
                Ok(()) => {
                    let c = Ctx {
                        appended: false,
                        flushed: true,
                        closing: false,
                        timed: Vec::new(),
                        aligned_to: 0.0,
                    };
                    self.contexts.open(id, c);
                    None
                }
                Err(e) => Some(("invalid_output_format".to_string(), e.to_string())),
            }
        };
        if let Some((error, message)) = refusal {
            self.refuse(Some(id), &error, &message, out);
            self.is_final(id, n, out);
            self.contexts.refuse(id);
        }
    }

    /// Text for vendor context `id`'s lifecycle, within the dialect's limit
    /// (the characters a context may have waiting, as the native session
    /// counts them): over it, the lifecycle ends with the refusal.
    fn append(&mut self, id: &str, text: &str, n: &mut Session, out: &mut Vec<String>) {
        let Some((native, c)) = self.contexts.current_mut(id) else {
            return;
        };
        let chars = text.chars().count();
        let limit = n.limits.max_pending_chars;
        if chars > limit {
            let m = too_much_text(id, Some(chars), limit);
            return self.fail(&native, TOO_MUCH_TEXT, &m, n, out);
        }
        let first = !c.appended;
        c.appended = true;
        c.flushed = false;
        if first {
            self.yield_closed(n, out);
        }
        n.append(&native, text)
    }

    /// A context's first text arrived: contexts the client closed and the
    /// server is still speaking give way. Contexts are spoken one after
    /// another here, and a client that closes one and starts the next has
    /// left it (Pipecat closes a context at an interruption as at the end
    /// of a turn, and drops its audio either way): the rest of it would
    /// only hold the new turn back.
    fn yield_closed(&mut self, n: &mut Session, out: &mut Vec<String>) {
        for native in self.contexts.detached() {
            if let Some(life) = self.contexts.end(&native) {
                self.is_final(&life.vendor_id, n, out);
                n.send(ClientMessage::ContextCancel { context_id: native });
            }
        }
    }

    /// EOS or `close_context`: end a flushed context, cancel one with text
    /// since its last flush (an interruption: its `isFinal` now, nothing of
    /// it after); EOS always ends. The vendor id is free from then on.
    fn close(&mut self, id: &str, eos: bool, n: &mut Session, out: &mut Vec<String>) {
        let Some((native, c)) = self.contexts.current_mut(id) else {
            // Closed already (a second close is a no-op), or never opened.
            if eos {
                self.is_final(id, n, out);
            }
            return;
        };
        if !c.appended {
            self.contexts.end(&native);
            self.is_final(id, n, out);
        } else if eos || c.flushed {
            c.closing = true;
            self.contexts.detach(id);
            n.send(ClientMessage::ContextEnd { context_id: native });
        } else {
            self.contexts.end(&native);
            self.is_final(id, n, out);
            n.send(ClientMessage::ContextCancel { context_id: native });
        }
    }

    pub fn on_event(&mut self, m: &ServerMessage, n: &mut Session, out: &mut Vec<String>) {
        match m {
            ServerMessage::Timings {
                context_id, chars, ..
            } => {
                if let Some(life) = self.contexts.get_mut(context_id) {
                    let c = &mut life.ctx;
                    for k in 0..chars.chars.len() {
                        c.timed
                            .push((chars.chars[k].clone(), chars.start_ms[k], chars.end_ms[k]));
                    }
                }
            }
            ServerMessage::ContextDone { context_id, .. } => {
                if let Some(mut life) = self.contexts.end(context_id) {
                    if let Some(alignment) = alignment(&mut life.ctx, self.absolute) {
                        out.push(
                            ElevenLabsOut::Audio {
                                audio: String::new(),
                                is_final: self.multi.then_some(false),
                                normalized_alignment: Some(alignment.clone()),
                                alignment: Some(alignment),
                                context_id: self.ctx_field(&life.vendor_id),
                            }
                            .to_json(),
                        );
                    }
                    self.is_final(&life.vendor_id, n, out);
                }
            }
            ServerMessage::ContextCancelled { context_id, .. } => {
                // Cancelled by the server (its drain deadline): the client
                // cancels only by closing, which ends the lifecycle first.
                if let Some(life) = self.contexts.end(context_id) {
                    self.is_final(&life.vendor_id, n, out);
                    if !life.ctx.closing {
                        self.contexts.refuse(&life.vendor_id);
                    }
                }
            }
            ServerMessage::ContextFailed {
                context_id,
                code,
                message,
                ..
            } => self.fail(context_id, &code.wire_name(), message, n, out),
            ServerMessage::Error {
                code,
                message,
                context_id: Some(native),
                ..
            } => {
                let Some(life) = self.contexts.get_mut(native) else {
                    // About a lifecycle that has ended: stale.
                    return;
                };
                let (error, message) = if *code == ErrorCode::TextTooLong {
                    let m = too_much_text(&life.vendor_id, None, n.limits.max_pending_chars);
                    (TOO_MUCH_TEXT.to_string(), m)
                } else {
                    (code.wire_name(), message.clone())
                };
                self.fail(native, &error, &message, n, out)
            }
            ServerMessage::Error { code, message, .. } => {
                self.refuse(None, &code.wire_name(), message, out)
            }
            _ => {}
        }
    }
}

/// A WebSocket close reason for a failed stream-input utterance: the
/// error, then as much of its message as a close frame holds
/// ([`crate::realtime::fit_close_reason`], which every close
/// applies).
pub(super) fn close_reason(error: &str, message: &str) -> String {
    crate::realtime::fit_close_reason(&format!("{error}: {message}")).to_string()
}

/// The alignment of the characters `c` has timed since its last one (None
/// when there are none), in ElevenLabs' shape: integer milliseconds,
/// relative to where the last alignment ended, or (`absolute`) to the
/// context's start.
fn alignment(c: &mut Ctx, absolute: bool) -> Option<serde_json::Value> {
    if c.timed.is_empty() {
        return None;
    }
    let base = if absolute { 0.0 } else { c.aligned_to };
    let mut chars = Vec::with_capacity(c.timed.len());
    let mut starts = Vec::with_capacity(c.timed.len());
    let mut durations = Vec::with_capacity(c.timed.len());
    for (ch, start, end) in c.timed.drain(..) {
        let s = (start - base).max(0.0).round() as i64;
        let e = (end - base).max(0.0).round() as i64;
        chars.push(ch);
        starts.push(s);
        durations.push((e - s).max(0));
        c.aligned_to = c.aligned_to.max(end);
    }
    if !absolute {
        // The client's clock moves by this message's span: keep ours on it.
        let span = starts
            .last()
            .zip(durations.last())
            .map_or(0, |(s, d)| s + d);
        c.aligned_to = base + span as f64;
    }
    Some(serde_json::json!({
        "chars": chars,
        "charStartTimesMs": starts,
        "charDurationsMs": durations,
    }))
}

/// The refusal of text over the limit: `chars` in one message, or (`None`)
/// added to what the context already has waiting.
fn too_much_text(id: &str, chars: Option<usize>, limit: usize) -> String {
    let what = match chars {
        Some(c) => format!("a text of {c} characters"),
        None => "this text with what it already has waiting to be spoken".to_string(),
    };
    format!(
        "context {id:?} cannot take {what}: a context holds at most {limit} characters not yet \
         spoken; send long text in several messages as its audio arrives"
    )
}
