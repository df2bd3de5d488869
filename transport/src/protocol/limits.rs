//! Protocol version, message size limits and output rates: the numbers a
//! client learns from `session.created` (docs/protocol.md, "Limits").

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

/// Whether `rate` is one the resampler serves: the one range check behind
/// both the output rate (`session.update`, `/v1/audio/speech`) and the
/// microphone input rate.
pub fn sample_rate_in_range(rate: u32) -> bool {
    (MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate)
}
