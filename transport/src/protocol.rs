//! The realtime WebSocket protocol, message by message. `docs/protocol.md`
//! is the prose version of this module: change both together.
//!
//! Text messages are JSON objects with a `type` tag; audio travels in binary
//! messages with a fixed 16-byte header ([`AudioHeader`]) or, when the
//! session asks for it, base64 inside JSON ([`ServerMessage::Audio`]).
//! Parsing never panics on any input (a proptest feeds it arbitrary bytes)
//! and every failure is a [`ProtocolError`] whose code and message name the
//! problem, so the server can answer with an `error` event and keep going.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// Version of this protocol. Sent in `session.created`; a client message may
/// carry `"v": 1` and any other value is refused (`unsupported_version`).
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest text (JSON) message accepted. A context append is a few LLM tokens;
/// 256 KiB leaves room for a whole document in one append while keeping one
/// message's parse cost (~1 ms) far below a frame (80 ms).
pub const MAX_TEXT_MESSAGE_BYTES: usize = 256 * 1024;
/// Largest binary message accepted: 1 MiB is 5.4 s of 48 kHz f32 microphone
/// audio, far more than any client sends between two 20–100 ms capture
/// callbacks.
pub const MAX_BINARY_MESSAGE_BYTES: usize = 1 << 20;
/// Messages above this are refused by the WebSocket layer itself (the
/// connection closes with 1009); between the limits above and this one the
/// server answers `message_too_large` and the connection survives.
pub const HARD_MESSAGE_BYTES: usize = 4 << 20;

/// Output rates a session may ask for (telephony to studio).
pub const MIN_SAMPLE_RATE: u32 = tts_audio::resample::MIN_OUTPUT_RATE;
pub const MAX_SAMPLE_RATE: u32 = tts_audio::resample::MAX_OUTPUT_RATE;

/// Binary audio frame header length in bytes.
pub const AUDIO_HEADER_LEN: usize = 16;
/// Header layout version (byte 0).
pub const AUDIO_HEADER_VERSION: u8 = 1;
/// Flag bit: last frame of the context.
pub const FLAG_TERMINAL: u8 = 0b01;
/// Flag bit: payload is f32 little-endian (else i16 little-endian).
pub const FLAG_F32: u8 = 0b10;

/// Sample encoding on the wire (always mono, little-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AudioFormat {
    Pcm16,
    F32,
}

impl AudioFormat {
    pub fn bytes_per_sample(self) -> usize {
        match self {
            AudioFormat::Pcm16 => 2,
            AudioFormat::F32 => 4,
        }
    }
}

/// How the server sends audio to this client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AudioTransport {
    /// Binary WebSocket messages with an [`AudioHeader`] (default).
    Binary,
    /// `audio` JSON messages with base64 payloads (clients that cannot read
    /// binary messages).
    Base64,
}

/// How a segment's text reaches the talker (the official
/// `non_streaming_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextMode {
    /// All of the segment's text in the prompt before the first frame (the
    /// official custom-voice default, `non_streaming_mode=True`).
    #[default]
    Prefill,
    /// Only the first text token in the prompt; the rest is fed one token
    /// per frame alongside the codes (`non_streaming_mode=False`): a prompt
    /// of ~10 rows whatever the text length, so an earlier first packet.
    Streaming,
}

/// Where the server cuts appended text into synthesis segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChunkingMode {
    /// Sentence ends, and clause ends (`,;:` …) once `min_chars` are pending.
    Clause,
    /// Sentence ends only.
    Sentence,
    /// Only `context.flush` / `context.end` (and `max_chars`) cut.
    Manual,
}

/// Text segmentation settings (all optional in `session.update`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkingUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ChunkingMode>,
    /// Pending text older than this is synthesized up to its last word
    /// boundary when the synthesizer is idle, boundary or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<u64>,
    /// Clause mode: fewest pending characters for a clause cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_chars: Option<usize>,
    /// Longest segment; longer pending text is cut at its last space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_chars: Option<usize>,
}

/// Effective text segmentation settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chunking {
    pub mode: ChunkingMode,
    pub max_delay_ms: u64,
    pub min_chars: usize,
    pub max_chars: usize,
}

impl Default for Chunking {
    /// Clause cuts from 24 characters (a short clause is ~1.5 s of speech,
    /// enough for natural prosody); a 400 ms deadline (an LLM at 30 tokens/s
    /// has produced ~12 tokens by then); 300-character segments at most.
    fn default() -> Self {
        Chunking {
            mode: ChunkingMode::Clause,
            max_delay_ms: 400,
            min_chars: 24,
            max_chars: 300,
        }
    }
}

/// Voice-activity detection on `input_audio.append` (all optional).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VadUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Speech cancels the context being spoken (barge-in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barge_in: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_db: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_speech_ms: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_silence_ms: Option<u32>,
}

/// Effective VAD settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Vad {
    pub enabled: bool,
    pub barge_in: bool,
    pub threshold_db: f32,
    pub min_speech_ms: u32,
    pub min_silence_ms: u32,
}

impl Default for Vad {
    /// −40 dBFS: a close-talking microphone's speech sits at −30…−15 dBFS
    /// and a quiet room at −60…−50. 60 ms of voiced windows before speech
    /// starts (rejects clicks), 500 ms of silence before it stops.
    fn default() -> Self {
        Vad {
            enabled: true,
            barge_in: true,
            threshold_db: -40.0,
            min_speech_ms: 60,
            min_silence_ms: 500,
        }
    }
}

/// `session.update` settings: absent fields keep their value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionUpdate {
    /// A checkpoint speaker or an OpenAI voice name (`speaker` is accepted
    /// as an alias).
    #[serde(default, alias = "speaker", skip_serializing_if = "Option::is_none")]
    pub voice: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// Style instruction; `""` clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruct: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_rate: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<AudioFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_transport: Option<AudioTransport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunking: Option<ChunkingUpdate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vad: Option<VadUpdate>,
    /// The client sends `audio.ack` as it plays; unacknowledged audio then
    /// bounds what the server buffers (else: written to the socket = acked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_acks: Option<bool>,
    /// Greedy decoding for both LMs (reproducible; parity tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub greedy: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Codec frames per segment at most (capped by the server's limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_frames: Option<usize>,
    /// `prefill` (default) or `streaming`: see [`TextMode`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_mode: Option<TextMode>,
}

/// The session's effective settings, echoed in `session.updated`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionSettings {
    /// Checkpoint speaker the voice resolved to.
    pub voice: String,
    pub language: String,
    pub instruct: Option<String>,
    /// The real output rate of audio frames.
    pub sample_rate: u32,
    /// The model's own rate (audio is resampled when they differ).
    pub native_sample_rate: u32,
    pub format: AudioFormat,
    pub audio_transport: AudioTransport,
    pub chunking: Chunking,
    pub vad: Vad,
    pub audio_acks: bool,
    pub greedy: bool,
    pub seed: u64,
    pub max_frames: usize,
    pub text_mode: TextMode,
}

/// Server limits announced in `session.created`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub max_text_message_bytes: usize,
    pub max_binary_message_bytes: usize,
    /// Contexts open (not yet done or cancelled) at once per session.
    pub max_contexts: usize,
    /// Characters appended but not yet synthesized, per context.
    pub max_pending_chars: usize,
    pub max_frames: usize,
}

/// Messages from the client (JSON text).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum ClientMessage {
    #[serde(rename = "session.update")]
    SessionUpdate { session: SessionUpdate },
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
}

/// Error codes of `error` and `context.failed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    MalformedJson,
    UnknownType,
    InvalidMessage,
    MessageTooLarge,
    UnsupportedVersion,
    OutOfOrder,
    UnknownContext,
    InvalidVoice,
    InvalidLanguage,
    InvalidSetting,
    InvalidAudio,
    TooManyContexts,
    TextTooLong,
    AtCapacity,
    SlowConsumer,
    ShuttingDown,
    SynthesisFailed,
    Internal,
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

/// A refused message: what to put in the `error` event.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ProtocolError {
    pub code: ErrorCode,
    pub message: String,
    pub valid: Option<Vec<String>>,
}

impl ProtocolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ProtocolError {
            code,
            message: message.into(),
            valid: None,
        }
    }

    pub fn to_message(&self, context_id: Option<String>) -> ServerMessage {
        ServerMessage::Error {
            code: self.code,
            message: self.message.clone(),
            context_id,
            valid: self.valid.clone(),
        }
    }
}

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
    serde_json::from_value(value)
        .map_err(|e| ProtocolError::new(ErrorCode::InvalidMessage, format!("invalid {ty}: {e}")))
}

/// Parses a server text message (clients, tests).
pub fn parse_server_text(text: &str) -> Result<ServerMessage, ProtocolError> {
    serde_json::from_str(text)
        .map_err(|e| ProtocolError::new(ErrorCode::InvalidMessage, format!("{e}")))
}

/// Header of a binary audio message (both directions), little-endian:
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 1 | layout version (1) |
/// | 1 | 1 | flags: bit 0 terminal, bit 1 f32 payload (else pcm16) |
/// | 2 | 2 | header length in bytes (16; skip this many to reach samples) |
/// | 4 | 4 | stream id (`context.started`); 0 from the client |
/// | 8 | 4 | sequence number within the context, from 0 |
/// | 12 | 4 | sample rate in Hz |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AudioHeader {
    pub stream_id: u32,
    pub seq: u32,
    pub sample_rate: u32,
    pub format: AudioFormat,
    pub terminal: bool,
}

impl AudioHeader {
    pub fn write(&self, out: &mut Vec<u8>) {
        let mut flags = 0;
        if self.terminal {
            flags |= FLAG_TERMINAL;
        }
        if self.format == AudioFormat::F32 {
            flags |= FLAG_F32;
        }
        out.push(AUDIO_HEADER_VERSION);
        out.push(flags);
        out.extend_from_slice(&(AUDIO_HEADER_LEN as u16).to_le_bytes());
        out.extend_from_slice(&self.stream_id.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.sample_rate.to_le_bytes());
    }

    /// Splits a binary message into its header and sample bytes.
    pub fn parse(bytes: &[u8]) -> Result<(AudioHeader, &[u8]), ProtocolError> {
        let bad = |m: String| ProtocolError::new(ErrorCode::InvalidAudio, m);
        if bytes.len() < AUDIO_HEADER_LEN {
            return Err(bad(format!(
                "binary message of {} bytes is shorter than the {AUDIO_HEADER_LEN}-byte audio header",
                bytes.len()
            )));
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        if bytes[0] != AUDIO_HEADER_VERSION {
            return Err(bad(format!(
                "audio header version {} is not supported; use {AUDIO_HEADER_VERSION}",
                bytes[0]
            )));
        }
        let flags = bytes[1];
        if flags & !(FLAG_TERMINAL | FLAG_F32) != 0 {
            return Err(bad(format!("unknown audio header flags {flags:#04x}")));
        }
        let hlen = u16::from_le_bytes([bytes[2], bytes[3]]) as usize;
        if hlen < AUDIO_HEADER_LEN || hlen > bytes.len() {
            return Err(bad(format!(
                "audio header length {hlen} must be at least {AUDIO_HEADER_LEN} and within the {}-byte message",
                bytes.len()
            )));
        }
        let format = if flags & FLAG_F32 != 0 {
            AudioFormat::F32
        } else {
            AudioFormat::Pcm16
        };
        let payload = &bytes[hlen..];
        if !payload.len().is_multiple_of(format.bytes_per_sample()) {
            return Err(bad(format!(
                "{} payload bytes is not a whole number of {:?} samples",
                payload.len(),
                format
            )));
        }
        Ok((
            AudioHeader {
                stream_id: u32_at(4),
                seq: u32_at(8),
                sample_rate: u32_at(12),
                format,
                terminal: flags & FLAG_TERMINAL != 0,
            },
            payload,
        ))
    }
}

/// Encodes samples in `format` (pcm16: rounded, clamped; NaN → 0).
pub fn encode_samples(samples: &[f32], format: AudioFormat, out: &mut Vec<u8>) {
    out.reserve(samples.len() * format.bytes_per_sample());
    match format {
        AudioFormat::Pcm16 => {
            for &s in samples {
                out.extend_from_slice(&tts_audio::f32_to_i16(s).to_le_bytes());
            }
        }
        AudioFormat::F32 => {
            for &s in samples {
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
    }
}

/// Decodes sample bytes (length already a whole number of samples).
pub fn decode_samples(bytes: &[u8], format: AudioFormat) -> Vec<f32> {
    match format {
        AudioFormat::Pcm16 => bytes
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 / 32768.0)
            .collect(),
        AudioFormat::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    }
}

/// A binary audio message: header + samples.
pub fn audio_frame(header: &AudioHeader, samples: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(AUDIO_HEADER_LEN + samples.len() * 4);
    header.write(&mut out);
    encode_samples(samples, header.format, &mut out);
    out
}

/// Microphone audio from the client, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct InputAudio {
    pub sample_rate: u32,
    pub samples: Vec<f32>,
}

fn check_input_rate(rate: u32) -> Result<(), ProtocolError> {
    if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
        return Err(ProtocolError::new(
            ErrorCode::InvalidAudio,
            format!("input sample rate {rate} Hz is out of range; use {MIN_SAMPLE_RATE}..={MAX_SAMPLE_RATE}"),
        ));
    }
    Ok(())
}

/// Parses a client binary message (input audio with an [`AudioHeader`]).
pub fn parse_client_binary(bytes: &[u8]) -> Result<InputAudio, ProtocolError> {
    if bytes.len() > MAX_BINARY_MESSAGE_BYTES {
        return Err(ProtocolError::new(
            ErrorCode::MessageTooLarge,
            format!(
                "binary message of {} bytes exceeds the {MAX_BINARY_MESSAGE_BYTES}-byte limit; send audio in pieces of at most a few hundred ms",
                bytes.len()
            ),
        ));
    }
    let (h, payload) = AudioHeader::parse(bytes)?;
    check_input_rate(h.sample_rate)?;
    Ok(InputAudio {
        sample_rate: h.sample_rate,
        samples: decode_samples(payload, h.format),
    })
}

/// Decodes the base64 payload of `input_audio.append`.
pub fn decode_input_audio(
    audio: &str,
    sample_rate: u32,
    format: AudioFormat,
) -> Result<InputAudio, ProtocolError> {
    check_input_rate(sample_rate)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(audio)
        .map_err(|e| {
            ProtocolError::new(
                ErrorCode::InvalidAudio,
                format!("audio is not valid base64: {e}"),
            )
        })?;
    if bytes.len() % format.bytes_per_sample() != 0 {
        return Err(ProtocolError::new(
            ErrorCode::InvalidAudio,
            format!(
                "{} audio bytes is not a whole number of {format:?} samples",
                bytes.len()
            ),
        ));
    }
    Ok(InputAudio {
        sample_rate,
        samples: decode_samples(&bytes, format),
    })
}

pub fn base64_encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SessionSettings {
        SessionSettings {
            voice: "ryan".into(),
            language: "auto".into(),
            instruct: Some("calm".into()),
            sample_rate: 16000,
            native_sample_rate: 24000,
            format: AudioFormat::F32,
            audio_transport: AudioTransport::Base64,
            chunking: Chunking::default(),
            vad: Vad::default(),
            audio_acks: true,
            greedy: false,
            seed: 7,
            max_frames: 100,
            text_mode: TextMode::Streaming,
        }
    }

    fn metrics() -> ContextMetrics {
        ContextMetrics {
            ttfp_ms: Some(81.25),
            e2el_ms: Some(900.5),
            audio_s: 1.6,
            rtf: Some(0.42),
            stream_rtf: None,
            required_prebuffer_ms: Some(0.0),
            underruns: Some(0),
            continuity_ok: Some(true),
            chunks: 3,
            frames: Some(20),
            samples: 38400,
            samples_per_frame: 1920,
            complete: Some(true),
            finite: true,
            segments: 2,
            ..ContextMetrics::default()
        }
    }

    /// One value of every client message type.
    pub(crate) fn client_samples() -> Vec<ClientMessage> {
        vec![
            ClientMessage::SessionUpdate {
                session: SessionUpdate {
                    voice: Some("alloy".into()),
                    sample_rate: Some(8000),
                    format: Some(AudioFormat::Pcm16),
                    audio_transport: Some(AudioTransport::Binary),
                    chunking: Some(ChunkingUpdate {
                        mode: Some(ChunkingMode::Sentence),
                        max_delay_ms: Some(250),
                        ..Default::default()
                    }),
                    vad: Some(VadUpdate {
                        threshold_db: Some(-35.0),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            },
            ClientMessage::ContextAppend {
                context_id: "c1".into(),
                text: "Hello, wor".into(),
            },
            ClientMessage::ContextFlush {
                context_id: "c1".into(),
            },
            ClientMessage::ContextEnd {
                context_id: "c1".into(),
            },
            ClientMessage::ContextCancel {
                context_id: "c1".into(),
            },
            ClientMessage::AudioAck {
                context_id: "c1".into(),
                seq: 4,
            },
            ClientMessage::InputAudioAppend {
                audio: base64_encode(&[0, 1, 2, 3]),
                sample_rate: 16000,
                format: AudioFormat::Pcm16,
            },
            ClientMessage::Ping {
                id: Some("p".into()),
            },
        ]
    }

    fn server_samples() -> Vec<ServerMessage> {
        vec![
            ServerMessage::SessionCreated {
                protocol_version: PROTOCOL_VERSION,
                session_id: 3,
                model: "tiny-a".into(),
                voices: vec!["ryan".into()],
                openai_voices: vec!["alloy".into()],
                languages: vec!["auto".into()],
                limits: Limits {
                    max_text_message_bytes: MAX_TEXT_MESSAGE_BYTES,
                    max_binary_message_bytes: MAX_BINARY_MESSAGE_BYTES,
                    max_contexts: 8,
                    max_pending_chars: 4096,
                    max_frames: 1000,
                },
                session: settings(),
            },
            ServerMessage::SessionUpdated {
                session: settings(),
            },
            ServerMessage::ContextStarted {
                context_id: "c1".into(),
                stream_id: 1,
                sample_rate: 24000,
                format: AudioFormat::Pcm16,
            },
            ServerMessage::Audio {
                context_id: "c1".into(),
                stream_id: 1,
                seq: 0,
                terminal: false,
                sample_rate: 24000,
                format: AudioFormat::F32,
                audio: base64_encode(&[1, 2, 3, 4]),
            },
            ServerMessage::ContextDone {
                context_id: "c1".into(),
                stream_id: Some(1),
                metrics: metrics(),
            },
            ServerMessage::ContextCancelled {
                context_id: "c1".into(),
                stream_id: None,
                reason: CancelReason::BargeIn,
                cancel_ack_ms: 3.5,
                late_audio_samples: 0,
                interruption_ms: Some(12.0),
                metrics: metrics(),
            },
            ServerMessage::ContextFailed {
                context_id: "c1".into(),
                stream_id: Some(1),
                code: ErrorCode::AtCapacity,
                message: "full".into(),
                metrics: ContextMetrics::default(),
            },
            ServerMessage::SpeechStarted {
                audio_start_ms: 120.0,
                detection_ms: 60.0,
            },
            ServerMessage::SpeechStopped {
                audio_end_ms: 900.0,
            },
            ServerMessage::Error {
                code: ErrorCode::InvalidVoice,
                message: "unknown voice".into(),
                context_id: None,
                valid: Some(vec!["ryan".into()]),
            },
            ServerMessage::Pong { id: None },
        ]
    }

    #[test]
    fn every_client_message_round_trips() {
        let samples = client_samples();
        let mut seen = std::collections::BTreeSet::new();
        for m in samples {
            let json = serde_json::to_string(&m).unwrap();
            let ty = serde_json::from_str::<serde_json::Value>(&json).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string();
            seen.insert(ty);
            assert_eq!(parse_client_text(&json).unwrap(), m, "{json}");
        }
        assert_eq!(
            seen.len(),
            CLIENT_TYPES.len(),
            "a client type lacks a sample"
        );
    }

    #[test]
    fn every_server_message_round_trips() {
        for m in server_samples() {
            let json = m.to_json();
            assert_eq!(parse_server_text(&json).unwrap(), m, "{json}");
        }
        assert_eq!(server_samples().len(), 11);
    }

    #[test]
    fn binary_audio_frames_round_trip() {
        for format in [AudioFormat::Pcm16, AudioFormat::F32] {
            let h = AudioHeader {
                stream_id: 7,
                seq: 300,
                sample_rate: 44100,
                format,
                terminal: true,
            };
            let x = [0.0f32, 0.5, -0.25, 1.0];
            let frame = audio_frame(&h, &x);
            assert_eq!(
                frame.len(),
                AUDIO_HEADER_LEN + x.len() * format.bytes_per_sample()
            );
            let (back, payload) = AudioHeader::parse(&frame).unwrap();
            assert_eq!(back, h);
            let y = decode_samples(payload, format);
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() <= 1.0 / 32767.0, "{a} vs {b}");
            }
        }
        // The documented byte layout, literally.
        let h = AudioHeader {
            stream_id: 0x0403_0201,
            seq: 5,
            sample_rate: 24000,
            format: AudioFormat::Pcm16,
            terminal: true,
        };
        let mut b = Vec::new();
        h.write(&mut b);
        assert_eq!(b, [1, 1, 16, 0, 1, 2, 3, 4, 5, 0, 0, 0, 0xc0, 0x5d, 0, 0]);
    }

    #[test]
    fn errors_name_the_problem() {
        let code = |s: &str| parse_client_text(s).unwrap_err().code;
        assert_eq!(code("{nope"), ErrorCode::MalformedJson);
        assert_eq!(code("[1]"), ErrorCode::InvalidMessage);
        assert_eq!(code(r#"{"text":"x"}"#), ErrorCode::InvalidMessage);
        let e = parse_client_text(r#"{"type":"context.apend"}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::UnknownType);
        assert!(e.message.contains("context.apend"));
        assert!(e.valid.unwrap().contains(&"context.append".to_string()));
        let e = parse_client_text(r#"{"type":"context.append","context_id":"a"}"#).unwrap_err();
        assert!(e.message.contains("text"), "{}", e.message);
        let e = parse_client_text(r#"{"type":"session.update","session":{"sample_rte":8000}}"#)
            .unwrap_err();
        assert!(e.message.contains("sample_rte"), "{}", e.message);
        assert_eq!(
            code(r#"{"type":"ping","v":2}"#),
            ErrorCode::UnsupportedVersion
        );
        assert!(parse_client_text(r#"{"type":"ping","v":1}"#).is_ok());
        let big = format!(
            r#"{{"type":"context.append","context_id":"a","text":"{}"}}"#,
            "x".repeat(MAX_TEXT_MESSAGE_BYTES)
        );
        assert_eq!(code(&big), ErrorCode::MessageTooLarge);
        // `speaker` is an alias of `voice`.
        match parse_client_text(r#"{"type":"session.update","session":{"speaker":"ryan"}}"#) {
            Ok(ClientMessage::SessionUpdate { session }) => {
                assert_eq!(session.voice.as_deref(), Some("ryan"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn binary_input_is_checked() {
        let h = AudioHeader {
            stream_id: 0,
            seq: 0,
            sample_rate: 16000,
            format: AudioFormat::Pcm16,
            terminal: false,
        };
        let ok = audio_frame(&h, &[0.1, 0.2]);
        assert_eq!(parse_client_binary(&ok).unwrap().samples.len(), 2);
        assert_eq!(
            parse_client_binary(&ok[..5]).unwrap_err().code,
            ErrorCode::InvalidAudio
        );
        let mut odd = ok.clone();
        odd.push(0);
        assert_eq!(
            parse_client_binary(&odd).unwrap_err().code,
            ErrorCode::InvalidAudio
        );
        let slow = audio_frame(
            &AudioHeader {
                sample_rate: 100,
                ..h
            },
            &[0.0],
        );
        assert!(parse_client_binary(&slow)
            .unwrap_err()
            .message
            .contains("100 Hz"));
        let big = vec![0u8; MAX_BINARY_MESSAGE_BYTES + 2];
        assert_eq!(
            parse_client_binary(&big).unwrap_err().code,
            ErrorCode::MessageTooLarge
        );
        assert!(decode_input_audio("!!", 16000, AudioFormat::Pcm16).is_err());
        assert_eq!(
            decode_input_audio(&base64_encode(&[0, 0, 0, 0]), 16000, AudioFormat::F32)
                .unwrap()
                .samples,
            [0.0]
        );
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        fn json_leaf() -> impl Strategy<Value = serde_json::Value> {
            prop_oneof![
                Just(serde_json::Value::Null),
                any::<bool>().prop_map(serde_json::Value::from),
                any::<i64>().prop_map(serde_json::Value::from),
                any::<f64>().prop_map(serde_json::Value::from),
                ".{0,12}".prop_map(serde_json::Value::from),
            ]
        }

        fn json_value() -> impl Strategy<Value = serde_json::Value> {
            json_leaf().prop_recursive(3, 24, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                    prop::collection::btree_map(
                        prop_oneof![
                            Just("type".to_string()),
                            Just("context_id".to_string()),
                            Just("text".to_string()),
                            Just("session".to_string()),
                            Just("sample_rate".to_string()),
                            Just("voice".to_string()),
                            "[a-z_]{1,8}"
                        ],
                        inner,
                        0..5
                    )
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
                ]
            })
        }

        /// Objects that look like real messages: a known type plus random
        /// fields, so the typed deserializer (not just the JSON parser) runs.
        fn message_like() -> impl Strategy<Value = String> {
            (
                prop::sample::select(CLIENT_TYPES.to_vec()),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("context_id".to_string()),
                        Just("text".to_string()),
                        Just("session".to_string()),
                        Just("seq".to_string()),
                        Just("audio".to_string()),
                        Just("sample_rate".to_string()),
                        Just("format".to_string()),
                        Just("v".to_string()),
                        "[a-z_]{1,8}"
                    ],
                    json_value(),
                    0..5,
                ),
            )
                .prop_map(|(t, mut m)| {
                    m.insert("type".into(), t.into());
                    serde_json::Value::Object(m.into_iter().collect()).to_string()
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

            #[test]
            fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
                let _ = parse_client_text(&String::from_utf8_lossy(&bytes));
                let _ = parse_client_binary(&bytes);
                let _ = AudioHeader::parse(&bytes);
                let _ = parse_server_text(&String::from_utf8_lossy(&bytes));
            }

            #[test]
            fn arbitrary_json_never_panics(v in json_value()) {
                let _ = parse_client_text(&v.to_string());
            }

            #[test]
            fn message_like_json_never_panics(s in message_like()) {
                if let Ok(ClientMessage::InputAudioAppend { audio, sample_rate, format }) = parse_client_text(&s) {
                    let _ = decode_input_audio(&audio, sample_rate, format);
                }
            }

            #[test]
            fn headers_with_any_fields_round_trip(stream_id in any::<u32>(), seq in any::<u32>(),
                    sample_rate in any::<u32>(), f32_payload in any::<bool>(), terminal in any::<bool>(),
                    n in 0usize..8) {
                let h = AudioHeader { stream_id, seq, sample_rate, terminal,
                    format: if f32_payload { AudioFormat::F32 } else { AudioFormat::Pcm16 } };
                let frame = audio_frame(&h, &vec![0.25; n]);
                let (back, payload) = AudioHeader::parse(&frame).unwrap();
                prop_assert_eq!(back, h);
                prop_assert_eq!(payload.len(), n * h.format.bytes_per_sample());
            }
        }
    }
}
