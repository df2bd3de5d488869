//! Audio on the wire: the 16-byte binary header (both directions), sample
//! encoding, microphone input (binary or base64 in JSON), and base64.

use base64::Engine as _;

use super::errors::{ErrorCode, ProtocolError};
use super::limits::{
    sample_rate_in_range, MAX_BINARY_MESSAGE_BYTES, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE,
};
use super::session_settings::AudioFormat;

/// Binary audio frame header length in bytes.
pub const AUDIO_HEADER_LEN: usize = 16;
/// Header layout version (byte 0).
pub const AUDIO_HEADER_VERSION: u8 = 1;
/// Flag bit: last frame of the context.
pub const FLAG_TERMINAL: u8 = 0b01;
/// Flag bit: payload is f32 little-endian (else i16 little-endian).
pub const FLAG_F32: u8 = 0b10;
/// Flag bit: payload is encoded audio (the encoding in byte 16 of the
/// extended header), not samples.
pub const FLAG_ENCODED: u8 = 0b100;
/// Header length of an encoded frame: the 16 bytes, the encoding byte and
/// three reserved (zero) bytes.
pub const ENCODED_HEADER_LEN: usize = 20;

/// Header of a binary audio message (both directions), little-endian:
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 1 | layout version (1) |
/// | 1 | 1 | flags: bit 0 terminal, bit 1 f32 payload (else pcm16), bit 2 encoded payload |
/// | 2 | 2 | header length in bytes (16, or 20 when encoded; skip this many to reach the payload) |
/// | 4 | 4 | stream id (`context.started`); 0 from the client |
/// | 8 | 4 | sequence number within the context, from 0 |
/// | 12 | 4 | sample rate in Hz |
/// | 16 | 1 | encoded frames only: the encoding ([`AudioFormat::wire_code`]: 1 mp3, 2 opus (Ogg), 3 opus_packets, 4 flac, 5 aac, 6 mulaw, 7 alaw) |
/// | 17 | 3 | encoded frames only: reserved, 0 |
///
/// PCM frames are exactly as before encoded formats existed (16 bytes,
/// bits 0-1), so a version-1 PCM reader reads them unchanged; an encoded
/// frame sets bit 2, which such a reader refuses as an unknown flag rather
/// than playing codec bytes as samples.
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
        let encoded = self.format.is_encoded();
        if encoded {
            flags |= FLAG_ENCODED;
        }
        let len = if encoded {
            ENCODED_HEADER_LEN
        } else {
            AUDIO_HEADER_LEN
        };
        out.push(AUDIO_HEADER_VERSION);
        out.push(flags);
        out.extend_from_slice(&(len as u16).to_le_bytes());
        out.extend_from_slice(&self.stream_id.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.sample_rate.to_le_bytes());
        if encoded {
            out.extend_from_slice(&[self.format.wire_code(), 0, 0, 0]);
        }
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
        if flags & !(FLAG_TERMINAL | FLAG_F32 | FLAG_ENCODED) != 0 {
            return Err(bad(format!("unknown audio header flags {flags:#04x}")));
        }
        if flags & FLAG_F32 != 0 && flags & FLAG_ENCODED != 0 {
            return Err(bad(format!(
                "audio header flags {flags:#04x} set both f32 and encoded"
            )));
        }
        let hlen = u16::from_le_bytes([bytes[2], bytes[3]]) as usize;
        if hlen < AUDIO_HEADER_LEN || hlen > bytes.len() {
            return Err(bad(format!(
                "audio header length {hlen} must be at least {AUDIO_HEADER_LEN} and within the {}-byte message",
                bytes.len()
            )));
        }
        let format = if flags & FLAG_ENCODED != 0 {
            if hlen < ENCODED_HEADER_LEN {
                return Err(bad(format!(
                    "an encoded frame's header is {ENCODED_HEADER_LEN} bytes, not {hlen}"
                )));
            }
            AudioFormat::from_wire_code(bytes[16])
                .ok_or_else(|| bad(format!("unknown audio encoding {}", bytes[16])))?
        } else if flags & FLAG_F32 != 0 {
            AudioFormat::F32
        } else {
            AudioFormat::Pcm16
        };
        let payload = &bytes[hlen..];
        if let Some(width) = format.bytes_per_sample() {
            if !payload.len().is_multiple_of(width) {
                return Err(bad(format!(
                    "{} payload bytes is not a whole number of {format} samples",
                    payload.len(),
                )));
            }
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

/// Encodes samples in `format` (pcm16: rounded, clamped; NaN → 0). Raw
/// sample formats only: an encoded format's bytes come from its codec
/// (`realtime/encode.rs`), so given one this writes pcm16.
pub fn encode_samples(samples: &[f32], format: AudioFormat, out: &mut Vec<u8>) {
    if format == AudioFormat::F32 {
        out.reserve(samples.len() * 4);
        for &s in samples {
            out.extend_from_slice(&s.to_le_bytes());
        }
    } else {
        out.reserve(samples.len() * 2);
        for &s in samples {
            out.extend_from_slice(&tts_audio::f32_to_i16(s).to_le_bytes());
        }
    }
}

/// Decodes sample bytes (length already a whole number of samples). Raw
/// sample formats only: callers refuse encoded input first, so given an
/// encoded format this returns no samples.
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
        _ => Vec::new(),
    }
}

/// Microphone input is raw samples: an encoded format is refused.
fn check_input_format(format: AudioFormat) -> Result<(), ProtocolError> {
    if format.is_encoded() {
        return Err(ProtocolError::new(
            ErrorCode::InvalidAudio,
            format!("input audio must be pcm16 or f32, not {format}"),
        ));
    }
    Ok(())
}

/// A binary audio message: header + samples.
pub fn audio_frame(header: &AudioHeader, samples: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(AUDIO_HEADER_LEN + samples.len() * 4);
    header.write(&mut out);
    encode_samples(samples, header.format, &mut out);
    out
}

/// A binary audio message: header + an already encoded payload (samples
/// in the header's raw format, or codec bytes).
pub fn audio_frame_bytes(header: &AudioHeader, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENCODED_HEADER_LEN + payload.len());
    header.write(&mut out);
    out.extend_from_slice(payload);
    out
}

/// Microphone audio from the client, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct InputAudio {
    pub sample_rate: u32,
    pub samples: Vec<f32>,
}

fn check_input_rate(rate: u32) -> Result<(), ProtocolError> {
    if !sample_rate_in_range(rate) {
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
    check_input_format(h.format)?;
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
    check_input_format(format)?;
    check_input_rate(sample_rate)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(audio)
        .map_err(|e| {
            ProtocolError::new(
                ErrorCode::InvalidAudio,
                format!("audio is not valid base64: {e}"),
            )
        })?;
    if bytes.len() % format.bytes_per_sample().unwrap_or(1) != 0 {
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
