//! Server → client text messages (audio may be binary instead, see
//! `audio_frames`), the per-context figures they carry, and a parser for
//! clients and tests.

use serde::{Deserialize, Serialize};

use super::errors::{ErrorCode, ProtocolError};
use super::session_settings::{AudioFormat, Limits, SessionSettings};

/// Why a context was cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// `context.cancel`.
    Client,
    /// Speech detected on the input audio.
    BargeIn,
    /// The server is shutting down and the drain deadline passed.
    Shutdown,
}

/// METRICS.md figures for one context (all of its segments), server side:
/// `t_req` is when the context's first segment was submitted to the engine,
/// chunk times are when frames were handed to the socket. Sample counts are
/// at the model's native rate (`output_samples` at the session's rate).
/// Missing figures are `null`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextMetrics {
    pub ttfp_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
    pub audio_s: f64,
    pub rtf: Option<f64>,
    pub stream_rtf: Option<f64>,
    pub required_prebuffer_ms: Option<f64>,
    pub underruns: Option<u32>,
    pub stall_ms: Option<f64>,
    pub continuity_ok: Option<bool>,
    pub prebuffer_ms: f64,
    pub underruns_at_prebuffer: Option<u32>,
    pub continuity_ok_at_prebuffer: Option<bool>,
    pub chunks: usize,
    pub frames: Option<u64>,
    pub samples: u64,
    pub samples_per_frame: usize,
    pub complete: Option<bool>,
    pub finite: bool,
    pub output_samples: u64,
    pub output_sample_rate: u32,
    /// Synthesis requests the context's text was cut into.
    pub segments: usize,
    /// First append received → first segment submitted (segmentation wait).
    pub text_wait_ms: Option<f64>,
    pub talker_ms: Option<f64>,
    pub code_predictor_ms: Option<f64>,
    pub code2wav_ms: Option<f64>,
    pub handoff_ms: Option<f64>,
    /// First text byte of the context → first audio frame handed to the
    /// socket (`text_wait_ms` + `ttfp_ms`); absent before any audio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfp_from_text_ms: Option<f64>,
    /// Live contexts only: where generation waited for text while the
    /// context was open (the talker had spoken every token it had).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pauses: Option<Vec<TextPause>>,
    /// Live contexts only: utterances the context was cut into (1 + the
    /// cuts at sentence ends past the length bound, + one per flush).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utterances: Option<usize>,
}

/// One wait for text in a live context: the codec frame (counted over the
/// whole context, from 0) whose generation waited, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextPause {
    pub frame: u64,
    pub ms: f64,
}

/// Messages from the server (JSON text; audio may be binary instead).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum ServerMessage {
    /// First message of every connection.
    #[serde(rename = "session.created")]
    SessionCreated {
        protocol_version: u32,
        session_id: u64,
        model: String,
        voices: Vec<String>,
        openai_voices: Vec<String>,
        languages: Vec<String>,
        limits: Limits,
        session: SessionSettings,
    },
    #[serde(rename = "session.updated")]
    SessionUpdated { session: SessionSettings },
    /// The context's first segment went to the engine; its binary frames
    /// carry `stream_id`.
    #[serde(rename = "context.started")]
    ContextStarted {
        context_id: String,
        stream_id: u32,
        sample_rate: u32,
        format: AudioFormat,
    },
    /// Audio as JSON (`audio_transport: base64`).
    #[serde(rename = "audio")]
    Audio {
        context_id: String,
        stream_id: u32,
        seq: u64,
        terminal: bool,
        sample_rate: u32,
        format: AudioFormat,
        audio: String,
    },
    /// Word and character timings of a context's audio (`timings: true`),
    /// sent before the audio message `seq` that ends them (or, for the
    /// last words of an utterance, right after its last audio message).
    #[serde(rename = "timings")]
    Timings {
        context_id: String,
        stream_id: Option<u32>,
        /// The context's next audio frame number when these were settled.
        seq: u64,
        words: Vec<WordTimingMsg>,
        chars: CharTimings,
    },
    #[serde(rename = "context.done")]
    ContextDone {
        context_id: String,
        stream_id: Option<u32>,
        metrics: ContextMetrics,
    },
    #[serde(rename = "context.cancelled")]
    ContextCancelled {
        context_id: String,
        stream_id: Option<u32>,
        reason: CancelReason,
        /// Cancel received (or speech detected) → this message sent.
        cancel_ack_ms: f64,
        /// Audio of this context sent after this message (always 0).
        late_audio_samples: u64,
        /// Barge-in: speech start → the last audio frame of the context
        /// sent (0 when nothing went out after speech started).
        interruption_ms: Option<f64>,
        /// With `timings`: the context's text up to the last word whose
        /// audio had been played (acknowledged with `audio_acks`, else
        /// sent), and that audio's length.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        played_text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        played_ms: Option<f64>,
        metrics: ContextMetrics,
    },
    /// The context ended with an error (no `context.done` follows).
    #[serde(rename = "context.failed")]
    ContextFailed {
        context_id: String,
        stream_id: Option<u32>,
        code: ErrorCode,
        message: String,
        metrics: ContextMetrics,
    },
    #[serde(rename = "speech.started")]
    SpeechStarted {
        /// Position of the speech onset in the input audio stream.
        audio_start_ms: f64,
        /// Onset → detection (the detector's confirmation delay).
        detection_ms: f64,
    },
    #[serde(rename = "speech.stopped")]
    SpeechStopped { audio_end_ms: f64 },
    /// A message was refused; the connection and other contexts go on.
    #[serde(rename = "error")]
    Error {
        code: ErrorCode,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context_id: Option<String>,
        /// Accepted values, when the problem is a value outside a set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        valid: Option<Vec<String>>,
    },
    #[serde(rename = "pong")]
    Pong {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
}

impl ServerMessage {
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        ServerMessage::Error {
            code,
            message: message.into(),
            context_id: None,
            valid: None,
        }
    }

    pub fn to_json(&self) -> String {
        // Serializing these types cannot fail: string keys, finite or null
        // numbers (serde_json writes non-finite f64 as null).
        serde_json::to_string(self).expect("server messages serialize")
    }
}

impl ProtocolError {
    pub fn to_message(&self, context_id: Option<String>) -> ServerMessage {
        ServerMessage::Error {
            code: self.code,
            message: self.message.clone(),
            context_id,
            valid: self.valid.clone(),
        }
    }
}

/// Parses a server text message (clients, tests).
pub fn parse_server_text(text: &str) -> Result<ServerMessage, ProtocolError> {
    serde_json::from_str(text)
        .map_err(|e| ProtocolError::new(ErrorCode::InvalidMessage, format!("{e}")))
}

/// One word's timing (`timings` events): `char_start..char_end` index the
/// context's text as sent (Unicode scalar values), times in ms from the
/// start of the context's audio.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WordTimingMsg {
    pub text: String,
    pub char_start: usize,
    pub char_end: usize,
    pub start_ms: f64,
    pub end_ms: f64,
}

/// Consecutive characters' timings: `chars[k]` is character `index + k`
/// of the context's text.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CharTimings {
    pub index: usize,
    pub chars: Vec<String>,
    pub start_ms: Vec<f64>,
    pub end_ms: Vec<f64>,
}
