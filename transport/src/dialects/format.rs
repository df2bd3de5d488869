//! The vendors' output encodings, and the native per-context format each
//! one is spoken in: the session encodes a dialect's audio as it encodes
//! `/v1/realtime`'s (`realtime::encode`), so a dialect only wraps the
//! payload in its JSON.

use tts_audio::{EncodeError, Format};

use crate::protocol::AudioFormat;

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
    /// The native format the session encodes this in.
    pub fn native(self) -> AudioFormat {
        match self.encoding {
            Encoding::Pcm16 => AudioFormat::Pcm16,
            Encoding::F32 => AudioFormat::F32,
            Encoding::Mulaw => AudioFormat::Mulaw,
            Encoding::Alaw => AudioFormat::Alaw,
            Encoding::Mp3 => AudioFormat::Mp3,
        }
    }

    /// Whether the codec takes this rate, or why not (a G.711 rate other
    /// than 8 kHz, an MP3 rate LAME does not take).
    pub fn check(self) -> Result<(), EncodeError> {
        let codec = match self.encoding {
            Encoding::F32 => return Ok(()),
            Encoding::Pcm16 => Format::Pcm,
            Encoding::Mulaw => Format::Mulaw,
            Encoding::Alaw => Format::Alaw,
            Encoding::Mp3 => Format::Mp3,
        };
        codec
            .output_rate(Some(self.sample_rate), self.sample_rate)
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realtime::FrameEncoder;

    fn encode(encoding: Encoding, rate: u32, samples: &[f32]) -> Vec<u8> {
        let f = OutputFormat {
            encoding,
            sample_rate: rate,
        };
        f.check().expect("a rate the codec takes");
        let mut e = FrameEncoder::new(f.native(), rate).expect("encoder");
        let mut out = Vec::new();
        e.push(samples, &mut out).expect("push");
        e.finish(&[], &mut out).expect("finish");
        out.concat()
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
        .check()
        .expect_err("refused");
        assert!(e.to_string().contains("16000"), "{e}");
    }
}
