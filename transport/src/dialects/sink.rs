//! The vendors' output encodings, and one streaming encoder per context.
//!
//! The native session always delivers f32 samples at the vendor's rate
//! (resampled by the native path's `StreamResampler`); a [`Sink`] turns
//! them into the bytes the vendor client asked for, with the audio crate's
//! encoders (PCM16, G.711 μ-law/A-law, MP3 through LAME) or as raw
//! little-endian f32.

use tts_audio::{EncodeError, Encoder, Format};

use crate::protocol::{self, AudioFormat};

/// Sample encoding of the audio a vendor client receives (mono).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// 16-bit little-endian PCM (ElevenLabs `pcm_*`, Cartesia `pcm_s16le`).
    Pcm16,
    /// 32-bit little-endian float (Cartesia `pcm_f32le`).
    F32,
    /// G.711 μ-law (ElevenLabs `ulaw_8000`, Cartesia `pcm_mulaw`), 8 kHz.
    Mulaw,
    /// G.711 A-law (ElevenLabs `alaw_8000`, Cartesia `pcm_alaw`), 8 kHz.
    Alaw,
    /// MPEG Layer III, constant bit rate (ElevenLabs `mp3_*`).
    Mp3,
}

/// An encoding at a rate: what one context's audio is sent as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputFormat {
    pub encoding: Encoding,
    pub sample_rate: u32,
}

impl OutputFormat {
    /// The encoder for this format, or why it cannot be made (a G.711 rate
    /// other than 8 kHz, an MP3 rate LAME does not take).
    pub fn sink(self) -> Result<Sink, EncodeError> {
        let format = match self.encoding {
            Encoding::F32 => return Ok(Sink { encoder: None }),
            Encoding::Pcm16 => Format::Pcm,
            Encoding::Mulaw => Format::Mulaw,
            Encoding::Alaw => Format::Alaw,
            Encoding::Mp3 => Format::Mp3,
        };
        Ok(Sink {
            encoder: Some(format.encoder(self.sample_rate)?),
        })
    }
}

/// One context's streaming encoder.
pub struct Sink {
    /// `None`: raw f32, written as it comes.
    encoder: Option<Box<dyn Encoder>>,
}

impl Sink {
    /// Encodes `samples`, appending the bytes that are ready to `out`.
    pub fn push(&mut self, samples: &[f32], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match &mut self.encoder {
            None => {
                protocol::encode_samples(samples, AudioFormat::F32, out);
                Ok(())
            }
            Some(e) => e.push(samples, out),
        }
    }

    /// Encodes what the codec held back (an MP3 frame's remainder).
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match &mut self.encoder {
            None => Ok(()),
            Some(e) => e.finish(out),
        }
    }
}

/// One native base64 f32 frame through `sink`: the bytes to send (the
/// codec's tail too when the frame is the context's last).
pub fn encode_frame(
    sink: &mut Sink,
    audio_b64: &str,
    terminal: bool,
) -> Result<Vec<u8>, EncodeError> {
    let raw = protocol::base64_decode(audio_b64).unwrap_or_default();
    let samples = protocol::decode_samples(&raw, AudioFormat::F32);
    let mut out = Vec::new();
    sink.push(&samples, &mut out)?;
    if terminal {
        sink.finish(&mut out)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(encoding: Encoding, rate: u32, samples: &[f32]) -> Vec<u8> {
        let mut s = OutputFormat {
            encoding,
            sample_rate: rate,
        }
        .sink()
        .expect("sink");
        let mut out = Vec::new();
        s.push(samples, &mut out).expect("push");
        s.finish(&mut out).expect("finish");
        out
    }

    #[test]
    fn pcm16_and_f32_carry_every_sample() {
        let x = [0.0, 0.5, -0.5, 1.0];
        assert_eq!(encode(Encoding::Pcm16, 16000, &x).len(), 8);
        let f = encode(Encoding::F32, 16000, &x);
        assert_eq!(f.len(), 16);
        assert_eq!(f32::from_le_bytes(f[4..8].try_into().unwrap()), 0.5);
    }

    #[test]
    fn g711_is_one_byte_per_sample_at_8khz() {
        let x = [0.25f32; 80];
        let u = encode(Encoding::Mulaw, 8000, &x);
        assert_eq!(u.len(), 80);
        let back = tts_audio::encode::ulaw_to_linear(u[0]) as f32 / 32768.0;
        assert!((back - 0.25).abs() < 0.01, "{back}");
        assert_eq!(encode(Encoding::Alaw, 8000, &x).len(), 80);
    }

    #[test]
    fn g711_at_another_rate_is_refused_naming_the_rate() {
        let e = OutputFormat {
            encoding: Encoding::Mulaw,
            sample_rate: 16000,
        }
        .sink()
        .err()
        .expect("refused");
        assert!(e.to_string().contains("16000"), "{e}");
    }
}
