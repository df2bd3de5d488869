//! Session settings as they travel: `session.update` (every field
//! optional) and the effective `SessionSettings` echoed back, with the
//! audio format, text mode, chunking and VAD settings inside them, and the
//! limits announced in `session.created`.

use serde::{Deserialize, Serialize};

/// Audio encoding on the wire (always mono): raw samples (`pcm16`, `f32`,
/// little-endian; the only input formats) or, for output, an encoded
/// stream whose frames concatenate to a file of that format (`mp3`, `opus`
/// in Ogg pages, `flac`, `aac` in ADTS, G.711 `mulaw`/`alaw` at 8 kHz), or
/// `opus_packets`: one raw 20 ms Opus packet per audio message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AudioFormat {
    Pcm16,
    F32,
    Mp3,
    Opus,
    OpusPackets,
    Flac,
    Aac,
    Mulaw,
    Alaw,
}

impl AudioFormat {
    /// Every format, in the order the docs list them.
    pub const ALL: [AudioFormat; 9] = [
        AudioFormat::Pcm16,
        AudioFormat::F32,
        AudioFormat::Mp3,
        AudioFormat::Opus,
        AudioFormat::OpusPackets,
        AudioFormat::Flac,
        AudioFormat::Aac,
        AudioFormat::Mulaw,
        AudioFormat::Alaw,
    ];

    /// The name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            AudioFormat::Pcm16 => "pcm16",
            AudioFormat::F32 => "f32",
            AudioFormat::Mp3 => "mp3",
            AudioFormat::Opus => "opus",
            AudioFormat::OpusPackets => "opus_packets",
            AudioFormat::Flac => "flac",
            AudioFormat::Aac => "aac",
            AudioFormat::Mulaw => "mulaw",
            AudioFormat::Alaw => "alaw",
        }
    }

    /// Bytes per sample of a raw sample format; `None` for an encoded one.
    pub fn bytes_per_sample(self) -> Option<usize> {
        match self {
            AudioFormat::Pcm16 => Some(2),
            AudioFormat::F32 => Some(4),
            _ => None,
        }
    }

    /// An encoded format (frames carry codec bytes, not samples).
    pub fn is_encoded(self) -> bool {
        self.bytes_per_sample().is_none()
    }

    /// The encoding byte of a binary frame's extended header (see
    /// [`AudioHeader`](super::audio_frames::AudioHeader)); 0 for raw
    /// samples, which keep the 16-byte header.
    pub fn wire_code(self) -> u8 {
        match self {
            AudioFormat::Pcm16 | AudioFormat::F32 => 0,
            AudioFormat::Mp3 => 1,
            AudioFormat::Opus => 2,
            AudioFormat::OpusPackets => 3,
            AudioFormat::Flac => 4,
            AudioFormat::Aac => 5,
            AudioFormat::Mulaw => 6,
            AudioFormat::Alaw => 7,
        }
    }

    /// The encoded format of an encoding byte.
    pub fn from_wire_code(code: u8) -> Option<AudioFormat> {
        AudioFormat::ALL
            .into_iter()
            .find(|f| f.is_encoded() && f.wire_code() == code)
    }
}

impl std::fmt::Display for AudioFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How the server sends audio to this client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AudioTransport {
    /// Binary WebSocket messages with an [`AudioHeader`](super::audio_frames::AudioHeader) (default).
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
    /// No segmentation: the context is one utterance whose text is fed to
    /// the talker as it arrives (live text, the `streaming` text mode only).
    /// `context.flush` / `context.end` end the utterance's text; a long
    /// context is cut at the first sentence end past `live_max_tokens`
    /// text tokens or `live_max_audio_s` of audio.
    Live,
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
    /// Live mode: text tokens one utterance takes before it is cut at the
    /// next sentence end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_max_tokens: Option<usize>,
    /// Live mode: seconds of audio one utterance speaks before it is cut at
    /// the next sentence end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_max_audio_s: Option<f64>,
}

/// Effective text segmentation settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chunking {
    pub mode: ChunkingMode,
    pub max_delay_ms: u64,
    pub min_chars: usize,
    pub max_chars: usize,
    /// Absent in messages from servers before live text: the default.
    #[serde(default = "default_live_max_tokens")]
    pub live_max_tokens: usize,
    #[serde(default = "default_live_max_audio_s")]
    pub live_max_audio_s: f64,
}

/// 200 text tokens: about a minute of English speech (~3.3 tokens/s), a
/// few paragraphs of an LLM's answer; attention over the text and codes of
/// one utterance stays within ~1000 rows.
fn default_live_max_tokens() -> usize {
    200
}

/// 60 s of audio (750 frames at 12.5 Hz): the other bound, for text that
/// speaks slowly (numbers, spelled-out words).
fn default_live_max_audio_s() -> f64 {
    60.0
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
            live_max_tokens: default_live_max_tokens(),
            live_max_audio_s: default_live_max_audio_s(),
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
    /// as an alias); on a Base checkpoint, a stored voice's name.
    #[serde(default, alias = "speaker", skip_serializing_if = "Option::is_none")]
    pub voice: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// Style instruction (CustomVoice), or the voice's description
    /// (VoiceDesign; without one it speaks an undescribed voice, as the
    /// official code); `instructions` (OpenAI's name)
    /// is accepted as an alias; `""` clears it.
    #[serde(
        default,
        alias = "instructions",
        skip_serializing_if = "Option::is_none"
    )]
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
    /// Word and character timings of each context's audio (`timings`
    /// events), and the played text when a context is cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<bool>,
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
    /// Milliseconds of audio the client buffers before it starts to play
    /// (its jitter buffer): the server's `--prebuffer-ms` by default. A
    /// context's continuity figures are counted at it, and its chunks leave
    /// early enough for it (0..=10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prebuffer_ms: Option<f64>,
}

/// The session's effective settings, echoed in `session.updated`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionSettings {
    /// Checkpoint speaker the voice resolved to (Base: the stored voice's
    /// name; `""`: none chosen yet).
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
    /// Echoed only when on (a client that never asks sees no new field).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timings: bool,
    pub greedy: bool,
    pub seed: u64,
    pub max_frames: usize,
    pub text_mode: TextMode,
    /// The listener's prebuffer (absent from servers before it: theirs,
    /// [`DEFAULT_PREBUFFER_MS`] unless set otherwise).
    #[serde(default = "default_prebuffer_ms")]
    pub prebuffer_ms: f64,
    /// The client set `prebuffer_ms` itself (server state, never on the
    /// wire): the scheduler then models its player as holding it before it
    /// plays; otherwise as playing from the first chunk.
    #[serde(skip)]
    pub prebuffer_declared: bool,
}

/// `serve --prebuffer-ms`'s default.
pub const DEFAULT_PREBUFFER_MS: f64 = 200.0;

/// Largest prebuffer a server is set to or a client declares: a listener
/// that holds more than 10 s before it plays is not listening live.
pub const MAX_PREBUFFER_MS: f64 = 10_000.0;

fn default_prebuffer_ms() -> f64 {
    DEFAULT_PREBUFFER_MS
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
