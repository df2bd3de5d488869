//! Client → server text messages, and their parser (refuses with a
//! [`ProtocolError`] naming the problem; never panics).

use serde::{Deserialize, Serialize};

use super::errors::{ErrorCode, ProtocolError};
use super::limits::{MAX_TEXT_MESSAGE_BYTES, PROTOCOL_VERSION};
use super::session_settings::{AudioFormat, SessionUpdate};

/// Messages from the client (JSON text).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum ClientMessage {
    #[serde(rename = "session.update")]
    /// Boxed: the largest message by far, and the rarest.
    SessionUpdate { session: Box<SessionUpdate> },
    /// Text for a context (created by its first append): any fragment, e.g.
    /// one LLM token; the server segments it.
    #[serde(rename = "context.append")]
    ContextAppend { context_id: String, text: String },
    /// Synthesize the pending text now, boundary or not.
    #[serde(rename = "context.flush")]
    ContextFlush { context_id: String },
    /// No more text for this context: flush, and send `context.done` once
    /// its audio is out.
    #[serde(rename = "context.end")]
    ContextEnd { context_id: String },
    #[serde(rename = "context.cancel")]
    ContextCancel { context_id: String },
    /// Every audio frame of the context up to `seq` has been played.
    #[serde(rename = "audio.ack")]
    AudioAck { context_id: String, seq: u64 },
    /// Microphone audio, base64 (binary messages with a header also work).
    #[serde(rename = "input_audio.append")]
    InputAudioAppend {
        audio: String,
        sample_rate: u32,
        #[serde(default = "default_input_format")]
        format: AudioFormat,
    },
    #[serde(rename = "ping")]
    Ping {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
}

fn default_input_format() -> AudioFormat {
    AudioFormat::Pcm16
}

/// Every client `type`, in the order the docs list them.
pub const CLIENT_TYPES: [&str; 8] = [
    "session.update",
    "context.append",
    "context.flush",
    "context.end",
    "context.cancel",
    "audio.ack",
    "input_audio.append",
    "ping",
];

/// Parses one client text message.
pub fn parse_client_text(text: &str) -> Result<ClientMessage, ProtocolError> {
    if text.len() > MAX_TEXT_MESSAGE_BYTES {
        return Err(ProtocolError::new(
            ErrorCode::MessageTooLarge,
            format!(
                "text message of {} bytes exceeds the {MAX_TEXT_MESSAGE_BYTES}-byte limit; split the text over several context.append messages",
                text.len()
            ),
        ));
    }
    let mut value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        ProtocolError::new(ErrorCode::MalformedJson, format!("malformed JSON: {e}"))
    })?;
    let Some(obj) = value.as_object_mut() else {
        return Err(ProtocolError::new(
            ErrorCode::InvalidMessage,
            "a message must be a JSON object with a \"type\" field",
        ));
    };
    if let Some(v) = obj.remove("v") {
        if v.as_u64() != Some(PROTOCOL_VERSION as u64) {
            return Err(ProtocolError::new(
                ErrorCode::UnsupportedVersion,
                format!("protocol version {v} is not supported; this server speaks version {PROTOCOL_VERSION}"),
            ));
        }
    }
    let ty = match obj.get("type") {
        Some(serde_json::Value::String(t)) => t.clone(),
        Some(other) => {
            return Err(ProtocolError::new(
                ErrorCode::InvalidMessage,
                format!("\"type\" must be a string, got {other}"),
            ))
        }
        None => {
            return Err(ProtocolError::new(
                ErrorCode::InvalidMessage,
                "the message has no \"type\" field",
            ))
        }
    };
    if !CLIENT_TYPES.contains(&ty.as_str()) {
        let mut e = ProtocolError::new(
            ErrorCode::UnknownType,
            format!("unknown message type {ty:?}"),
        );
        e.valid = Some(CLIENT_TYPES.iter().map(|s| s.to_string()).collect());
        return Err(e);
    }
    // serde reads a tagged message through a buffer that forgets where in
    // it a value was: a refused `session.update` is read again, alone, to
    // name the setting.
    let settings = (ty == "session.update")
        .then(|| obj.get("session").cloned())
        .flatten();
    serde_json::from_value(value).map_err(|e| {
        let path = settings.and_then(|s| {
            serde_path_to_error::deserialize::<_, SessionUpdate>(s)
                .err()
                .map(|e| e.path().to_string())
                .filter(|p| p != ".")
        });
        let msg = match path {
            Some(path) => format!("invalid {ty}: session.{path}: {e}"),
            None => format!("invalid {ty}: {e}"),
        };
        let mut err = ProtocolError::new(ErrorCode::InvalidMessage, msg);
        // An unknown audio format: serde's message lists the variants; the
        // `valid` field lists them for programs too.
        if err.message.contains("unknown variant") && err.message.contains("`opus_packets`") {
            err.valid = Some(AudioFormat::ALL.iter().map(|f| f.name().into()).collect());
        }
        err
    })
}
