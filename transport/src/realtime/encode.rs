//! A realtime context's audio encoder: turns the resampled samples of each
//! engine chunk into the payloads of its audio messages, in the context's
//! `format`.
//!
//! - `pcm16`, `f32`: the samples themselves, one message per chunk.
//! - `mp3`, `opus` (Ogg pages), `flac`, `aac` (ADTS), `mulaw`, `alaw`: one
//!   [`tts_audio::Encoder`] per context, fed chunk by chunk; each message
//!   carries the bytes that chunk completed (none: no message), the
//!   terminal one the encoder's flush, so the concatenated payloads of a
//!   context are one file of the format.
//! - `opus_packets`: one raw 20 ms Opus packet per message
//!   ([`tts_audio::encode::OpusPacketEncoder`]), the terminal message the
//!   last packet (empty when the flush had none left).
//!
//! Encoding runs on the session's own task (a chunk of 80 ms costs a
//! fraction of a millisecond in LAME, FDK or libopus), never on the
//! engine's synthesis threads: a slow codec holds up only its own session.

use tts_audio::encode::OpusPacketEncoder;
use tts_audio::{EncodeError, Encoder, Format};

use crate::protocol::{self, AudioFormat};

/// The codec of an encoded realtime format (`opus_packets` is Opus too).
pub fn codec(format: AudioFormat) -> Option<Format> {
    Some(match format {
        AudioFormat::Pcm16 | AudioFormat::F32 => return None,
        AudioFormat::Mp3 => Format::Mp3,
        AudioFormat::Opus | AudioFormat::OpusPackets => Format::Opus,
        AudioFormat::Flac => Format::Flac,
        AudioFormat::Aac => Format::Aac,
        AudioFormat::Mulaw => Format::Mulaw,
        AudioFormat::Alaw => Format::Alaw,
    })
}

/// One context's encoder (see the module docs).
pub enum FrameEncoder {
    Samples(AudioFormat),
    Stream(Box<dyn Encoder>),
    Packets(OpusPacketEncoder),
}

impl FrameEncoder {
    /// An encoder for `format` at `rate` (validated with the session
    /// settings, so a refusal here is a codec failure).
    pub fn new(format: AudioFormat, rate: u32) -> Result<Self, EncodeError> {
        Ok(match (format, codec(format)) {
            (AudioFormat::OpusPackets, _) => FrameEncoder::Packets(OpusPacketEncoder::new(rate)?),
            (_, Some(c)) => FrameEncoder::Stream(c.encoder(rate)?),
            (_, None) => FrameEncoder::Samples(format),
        })
    }

    /// Appends the payloads of the messages `samples` make (possibly none).
    pub fn push(&mut self, samples: &[f32], out: &mut Vec<Vec<u8>>) -> Result<(), EncodeError> {
        match self {
            FrameEncoder::Samples(f) => {
                if !samples.is_empty() {
                    let mut bytes = Vec::new();
                    protocol::encode_samples(samples, *f, &mut bytes);
                    out.push(bytes);
                }
            }
            FrameEncoder::Stream(e) => {
                let mut bytes = Vec::new();
                e.push(samples, &mut bytes)?;
                if !bytes.is_empty() {
                    out.push(bytes);
                }
            }
            FrameEncoder::Packets(e) => e.push(samples, out)?,
        }
        Ok(())
    }

    /// The last samples and the end of the stream: the payloads of the
    /// context's last messages, at least one (the terminal frame's, which
    /// may be empty).
    pub fn finish(&mut self, tail: &[f32], out: &mut Vec<Vec<u8>>) -> Result<(), EncodeError> {
        match self {
            FrameEncoder::Samples(f) => {
                let mut bytes = Vec::new();
                protocol::encode_samples(tail, *f, &mut bytes);
                out.push(bytes);
            }
            FrameEncoder::Stream(e) => {
                let mut bytes = Vec::new();
                e.push(tail, &mut bytes)?;
                e.finish(&mut bytes)?;
                out.push(bytes);
            }
            FrameEncoder::Packets(e) => {
                let n = out.len();
                e.push(tail, out)?;
                e.finish(out)?;
                if out.len() == n {
                    out.push(Vec::new());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcm_is_one_payload_per_chunk_and_the_terminal_one_may_be_empty() {
        let mut e = FrameEncoder::new(AudioFormat::Pcm16, 24000).unwrap();
        let mut out = Vec::new();
        e.push(&[], &mut out).unwrap();
        assert!(out.is_empty());
        e.push(&[0.5; 10], &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len(), 20);
        e.finish(&[], &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert!(out[1].is_empty());
    }

    #[test]
    fn a_stream_format_concatenates_to_one_file() {
        let mut e = FrameEncoder::new(AudioFormat::Mulaw, 8000).unwrap();
        let mut out = Vec::new();
        e.push(&[0.1; 160], &mut out).unwrap();
        e.finish(&[0.1; 40], &mut out).unwrap();
        assert_eq!(out.concat().len(), 200, "one byte per sample");
    }

    #[test]
    fn opus_packets_are_one_per_message() {
        let mut e = FrameEncoder::new(AudioFormat::OpusPackets, 24000).unwrap();
        let mut out = Vec::new();
        e.push(&[0.1; 1920], &mut out).unwrap();
        assert_eq!(out.len(), 4, "80 ms: four 20 ms packets");
        e.finish(&[], &mut out).unwrap();
        assert!(out.len() > 4 && out.iter().all(|p| !p.is_empty()));
    }

    #[test]
    fn a_codec_rate_is_refused_by_the_encoder_too() {
        assert!(FrameEncoder::new(AudioFormat::Opus, 44100).is_err());
        assert!(FrameEncoder::new(AudioFormat::Mulaw, 16000).is_err());
    }
}
