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
//! context (its audio stops at once, `isFinal` follows).
//!
//! Server messages: `{"audio": <base64>, "isFinal", "normalizedAlignment":
//! null, "alignment": null, "contextId"?}`, `{"isFinal": true, "contextId"?}`
//! and `{"message", "error", "code", "contextId"?}`. Alignment is always
//! `null` (the schema allows it; Pipecat and the SDK accept it).

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::protocol::{self, ClientMessage, ErrorCode, ServerMessage, SessionUpdate};

use super::bridge::{Gone, Native, Out};
use super::sink::{self, Encoding, OutputFormat, Sink};
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

struct Ctx {
    sink: Sink,
    /// Text reached the native context (it exists there).
    appended: bool,
    /// No text since the last flush.
    flushed: bool,
    /// `context.end` went out (a second close is a no-op).
    closing: bool,
}

/// One ElevenLabs connection.
pub struct ElevenLabs {
    voice: String,
    multi: bool,
    format: Result<OutputFormat, VendorError>,
    contexts: HashMap<String, Ctx>,
    /// Contexts cancelled after an error: their native answers are not
    /// passed on.
    silenced: HashSet<String>,
}

impl ElevenLabs {
    pub fn new(voice: String, multi: bool, q: &HashMap<String, String>) -> Self {
        let format = output_format(q.get("output_format").map_or(DEFAULT_FORMAT, |s| s));
        ElevenLabs {
            voice,
            multi,
            format,
            contexts: HashMap::new(),
            silenced: HashSet::new(),
        }
    }

    fn ctx_field(&self, id: &str) -> Option<String> {
        self.multi.then(|| id.to_string())
    }

    pub fn refuse(&self, id: Option<&str>, error: &str, message: &str, out: &mut Vec<Out>) {
        out.push(Out::Text(
            ElevenLabsOut::Error {
                message: message.to_string(),
                error: error.to_string(),
                code: 1008,
                context_id: id.and_then(|i| self.ctx_field(i)),
            }
            .to_json(),
        ));
    }

    fn is_final(&self, id: &str, out: &mut Vec<Out>) {
        out.push(Out::Text(
            ElevenLabsOut::Final {
                is_final: true,
                context_id: self.ctx_field(id),
            }
            .to_json(),
        ));
        if !self.multi {
            // stream-input: one utterance per connection.
            out.push(Out::Close(1000, String::new()));
        }
    }

    /// The voice (URL path) and format (query) of the whole connection.
    pub async fn on_open(&mut self, n: &mut Native, out: &mut Vec<Out>) -> Result<(), Gone> {
        let f = match &self.format {
            Ok(f) => *f,
            Err(e) => {
                let m = e.to_string();
                self.refuse(None, "invalid_output_format", &m, out);
                out.push(Out::Close(1008, "invalid output_format".into()));
                return Ok(());
            }
        };
        if let Err(e) = f.sink() {
            self.refuse(None, "invalid_output_format", &e.to_string(), out);
            out.push(Out::Close(1008, "invalid output_format".into()));
            return Ok(());
        }
        let u = SessionUpdate {
            voice: Some(self.voice.clone()),
            sample_rate: Some(f.sample_rate),
            ..SessionUpdate::default()
        };
        if let Err(r) = n.update(u).await? {
            let error = match r.code {
                ErrorCode::InvalidVoice => "voice_not_found",
                _ => "invalid_request",
            };
            self.refuse(None, error, &r.message, out);
            out.push(Out::Close(1008, error.into()));
        }
        Ok(())
    }

    pub async fn on_text(
        &mut self,
        t: &str,
        n: &mut Native,
        out: &mut Vec<Out>,
    ) -> Result<(), Gone> {
        let m = match ElevenLabsIn::parse(t) {
            Ok(m) => m,
            Err(e) => {
                self.refuse(None, "invalid_message", &e.to_string(), out);
                return Ok(());
            }
        };
        if m.close_socket {
            for id in self.contexts.drain().map(|(id, _)| id) {
                n.send(ClientMessage::ContextCancel { context_id: id })
                    .await?;
            }
            out.push(Out::Close(1000, String::new()));
            return Ok(());
        }
        let id = match (self.multi, &m.context_id) {
            (false, _) => SINGLE.to_string(),
            (true, Some(id)) => id.clone(),
            (true, None) => DEFAULT_CONTEXT.to_string(),
        };
        if let Some(text) = &m.text {
            let eos = !self.multi && text.is_empty();
            if !text.is_empty() && !self.contexts.contains_key(&id) {
                let Ok(f) = self.format else { return Ok(()) };
                let sink = match f.sink() {
                    Ok(s) => s,
                    Err(e) => {
                        self.refuse(Some(&id), "invalid_output_format", &e.to_string(), out);
                        return Ok(());
                    }
                };
                let c = Ctx {
                    sink,
                    appended: false,
                    flushed: true,
                    closing: false,
                };
                self.contexts.insert(id.clone(), c);
            }
            if eos {
                return self.close(&id, true, n, out).await;
            }
            if text.is_empty() {
                // A keepalive: the native session's idle clock hears it.
                n.send(ClientMessage::Ping { id: None }).await?;
            }
            if let Some(c) = self.contexts.get_mut(&id) {
                if !text.trim().is_empty() {
                    c.appended = true;
                    c.flushed = false;
                    let msg = ClientMessage::ContextAppend {
                        context_id: id.clone(),
                        text: text.clone(),
                    };
                    n.send(msg).await?;
                }
            }
        }
        if m.flush {
            if let Some(c) = self.contexts.get_mut(&id) {
                c.flushed = true;
                if c.appended {
                    n.send(ClientMessage::ContextFlush {
                        context_id: id.clone(),
                    })
                    .await?;
                }
            }
        }
        if m.close_context && self.multi {
            self.close(&id, false, n, out).await?;
        }
        Ok(())
    }

    /// EOS or `close_context`: end a flushed context, cancel one with text
    /// since its last flush (an interruption); EOS always ends.
    async fn close(
        &mut self,
        id: &str,
        eos: bool,
        n: &mut Native,
        out: &mut Vec<Out>,
    ) -> Result<(), Gone> {
        let Some(c) = self.contexts.get(id) else {
            if eos {
                self.is_final(id, out);
            }
            return Ok(());
        };
        if c.closing {
            return Ok(());
        }
        if !c.appended {
            self.contexts.remove(id);
            self.is_final(id, out);
            return Ok(());
        }
        let context_id = id.to_string();
        if eos || c.flushed {
            if let Some(c) = self.contexts.get_mut(id) {
                c.closing = true;
            }
            n.send(ClientMessage::ContextEnd { context_id }).await
        } else {
            // Interrupted: nothing more of it goes out (`isFinal` follows
            // the native `context.cancelled`).
            self.contexts.remove(id);
            n.send(ClientMessage::ContextCancel { context_id }).await
        }
    }

    pub async fn on_native(
        &mut self,
        m: ServerMessage,
        n: &mut Native,
        out: &mut Vec<Out>,
    ) -> Result<(), Gone> {
        match m {
            ServerMessage::Audio {
                context_id,
                audio,
                terminal,
                ..
            } => {
                let Some(c) = self.contexts.get_mut(&context_id) else {
                    return Ok(());
                };
                match sink::encode_frame(&mut c.sink, &audio, terminal) {
                    Ok(bytes) if bytes.is_empty() => {}
                    Ok(bytes) => out.push(Out::Text(
                        ElevenLabsOut::Audio {
                            audio: protocol::base64_encode(&bytes),
                            is_final: self.multi.then_some(false),
                            normalized_alignment: None,
                            alignment: None,
                            context_id: self.ctx_field(&context_id),
                        }
                        .to_json(),
                    )),
                    Err(e) => {
                        self.refuse(Some(&context_id), "encoding_failed", &e.to_string(), out)
                    }
                }
            }
            ServerMessage::ContextDone { context_id, .. } => {
                let open = self.contexts.remove(&context_id).is_some();
                if open {
                    self.is_final(&context_id, out);
                }
            }
            ServerMessage::ContextCancelled { context_id, .. } => {
                self.contexts.remove(&context_id);
                if !self.silenced.remove(&context_id) {
                    self.is_final(&context_id, out);
                }
            }
            ServerMessage::ContextFailed {
                context_id,
                code,
                message,
                ..
            } => {
                let open = self.contexts.remove(&context_id).is_some();
                if open {
                    self.refuse(Some(&context_id), &code_name(code), &message, out);
                    self.is_final(&context_id, out);
                }
            }
            ServerMessage::Error {
                code,
                message,
                context_id: Some(id),
                ..
            } => {
                if self.silenced.remove(&id) {
                    return Ok(());
                }
                self.refuse(Some(&id), &code_name(code), &message, out);
                if self.contexts.remove(&id).is_some() {
                    // The context cannot go on: stop whatever of it the
                    // native session holds, and end it for the client.
                    self.silenced.insert(id.clone());
                    n.send(ClientMessage::ContextCancel {
                        context_id: id.clone(),
                    })
                    .await?;
                    self.is_final(&id, out);
                }
            }
            ServerMessage::Error { code, message, .. } => {
                self.refuse(None, &code_name(code), &message, out)
            }
            _ => {}
        }
        Ok(())
    }
}

/// A native error code's wire name (`too_many_contexts`, ...).
pub fn code_name(code: ErrorCode) -> String {
    serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "error".into())
}
