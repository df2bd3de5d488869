//! Encoded audio out: one module per codec behind one streaming
//! [`Encoder`] contract, so a caller (the HTTP body, the realtime socket)
//! pushes mono f32 samples as synthesis produces them and sends whatever
//! bytes are ready, without knowing the codec.
//!
//! The contract is the runtime's streaming one: [`Encoder::push`] consumes
//! what it is given and appends the bytes that are complete (a codec with
//! fixed frames keeps the remainder), [`Encoder::finish`] encodes the tail
//! and ends the stream. The concatenation of everything appended is a valid
//! file or stream of [`Format`]; a caller that holds the whole output can
//! replace its start with [`Encoder::exact_header`] so the header states the
//! true length (WAV sizes, FLAC's total samples and MD5).
//!
//! What each codec links, and why (docs/architecture.md has the same table):
//! - `wav`, `pcm`, `mulaw`, `alaw`: written here (a header, or a 256-entry
//!   table's worth of arithmetic; nothing to link).
//! - `flac`: the pure-Rust `flacenc` crate.
//! - `mp3`: LAME through `mp3lame-encoder`, built from the source its
//!   `-sys` crate bundles (the reference MP3 encoder; no pure-Rust one).
//! - `opus`: the system libopus through the `opus` crate (the reference
//!   encoder, the only production-grade one), in Ogg pages written by the
//!   pure-Rust `ogg` crate; or as raw 20 ms packets
//!   ([`OpusPacketEncoder`], for RTP/WebRTC and telephony bridges).
//! - `aac`: Fraunhofer FDK AAC through the `fdk-aac` crate, built from the
//!   C++ source its `-sys` crate bundles (no pure-Rust AAC encoder exists;
//!   FDK is the encoder Android ships and ffmpeg's best), AAC-LC in ADTS.
//!
//! Encoders are plain values with no threads of their own: they run where
//! the caller runs them (the HTTP task, never the engine's synthesis
//! threads), and one session's encoder never waits on another's.

use std::fmt;

mod aac;
mod flac;
mod g711;
mod mp3;
mod opus;
mod pcm;
mod wav;

pub use g711::{alaw_to_linear, linear_to_alaw, linear_to_ulaw, ulaw_to_linear};
pub use opus::OpusPacketEncoder;
pub use wav::wav_header;

/// An output audio format (OpenAI's `response_format` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// RIFF WAVE, 16-bit PCM.
    Wav,
    /// Raw 16-bit little-endian PCM, no header.
    Pcm,
    /// G.711 μ-law, 8 kHz, one byte per sample, no header (telephony).
    Mulaw,
    /// G.711 A-law, 8 kHz, one byte per sample, no header (telephony).
    Alaw,
    /// FLAC, 16-bit, lossless.
    Flac,
    /// MPEG-1/2 Layer III, constant bit rate.
    Mp3,
    /// Opus in Ogg, 20 ms frames.
    Opus,
    /// AAC-LC in ADTS frames (1024 samples each), constant bit rate.
    Aac,
}

/// G.711's only rate.
pub const G711_RATE: u32 = 8000;
/// Rates LAME encodes without resampling (MPEG-1, 2 and 2.5).
pub const MP3_RATES: [u32; 9] = [8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000];
/// Rates libopus accepts as input.
pub const OPUS_RATES: [u32; 5] = [8000, 12000, 16000, 24000, 48000];
/// Rates AAC-LC has in ADTS (ISO/IEC 14496-3 sampling frequency indices;
/// 7350 Hz, the one index FDK does not encode, left out).
pub const AAC_RATES: [u32; 12] = [
    8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000,
];

impl Format {
    /// Every format, in the order the docs list them.
    pub const ALL: [Format; 8] = [
        Format::Wav,
        Format::Pcm,
        Format::Mulaw,
        Format::Alaw,
        Format::Flac,
        Format::Mp3,
        Format::Opus,
        Format::Aac,
    ];

    /// The name clients send (`response_format`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Wav => "wav",
            Format::Pcm => "pcm",
            Format::Mulaw => "mulaw",
            Format::Alaw => "alaw",
            Format::Flac => "flac",
            Format::Mp3 => "mp3",
            Format::Opus => "opus",
            Format::Aac => "aac",
        }
    }

    /// The HTTP `Content-Type` of a body in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Wav => "audio/wav",
            Format::Pcm => "audio/pcm",
            // RFC 2046's 8 kHz μ-law type; A-law has no registered one.
            Format::Mulaw => "audio/basic",
            Format::Alaw => "audio/x-alaw-basic",
            Format::Flac => "audio/flac",
            Format::Mp3 => "audio/mpeg",
            Format::Opus => "audio/ogg; codecs=opus",
            Format::Aac => "audio/aac",
        }
    }

    /// The sample rate a stream in this format has when the client asked
    /// for `requested` (`None`: it did not ask, so `default` — the model's
    /// rate — where the codec takes it). G.711 is always 8 kHz; MP3, Opus
    /// and AAC take only their codec's rates.
    pub fn output_rate(self, requested: Option<u32>, default: u32) -> Result<u32, EncodeError> {
        let rate = match (self, requested) {
            (Format::Mulaw | Format::Alaw, None) => G711_RATE,
            (_, Some(r)) => r,
            (_, None) => default,
        };
        self.check_rate(rate)?;
        Ok(rate)
    }

    fn check_rate(self, rate: u32) -> Result<(), EncodeError> {
        let ok = match self {
            Format::Mulaw | Format::Alaw => rate == G711_RATE,
            Format::Mp3 => MP3_RATES.contains(&rate),
            Format::Opus => OPUS_RATES.contains(&rate),
            Format::Aac => AAC_RATES.contains(&rate),
            Format::Wav | Format::Pcm | Format::Flac => (1..=655_350).contains(&rate),
        };
        if ok {
            return Ok(());
        }
        let supported = match self {
            Format::Mulaw | Format::Alaw => "8000",
            Format::Mp3 => "8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100 or 48000",
            Format::Opus => "8000, 12000, 16000, 24000 or 48000",
            Format::Aac => {
                "8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200 or 96000"
            }
            Format::Wav | Format::Pcm | Format::Flac => "1..=655350",
        };
        Err(EncodeError::UnsupportedRate {
            format: self,
            rate,
            supported,
        })
    }

    /// A streaming encoder for mono samples at `rate` Hz.
    pub fn encoder(self, rate: u32) -> Result<Box<dyn Encoder>, EncodeError> {
        self.check_rate(rate)?;
        Ok(match self {
            Format::Wav => Box::new(wav::WavEncoder::new(rate)),
            Format::Pcm => Box::new(pcm::PcmEncoder::new(rate)),
            Format::Mulaw => Box::new(g711::G711Encoder::new(g711::Law::Mu)),
            Format::Alaw => Box::new(g711::G711Encoder::new(g711::Law::A)),
            Format::Flac => Box::new(flac::FlacEncoder::new(rate)?),
            Format::Mp3 => Box::new(mp3::Mp3Encoder::new(rate)?),
            Format::Opus => Box::new(opus::OpusEncoder::new(rate)?),
            Format::Aac => Box::new(aac::AacEncoder::new(rate)?),
        })
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Format {
    type Err = EncodeError;
    fn from_str(s: &str) -> Result<Self, EncodeError> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| EncodeError::UnknownFormat { name: s.to_owned() })
    }
}

/// Why an encoder could not be made or could not encode.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    #[error(
        "unknown audio format {name:?}; use one of: wav, pcm, mulaw, alaw, flac, mp3, opus, aac"
    )]
    UnknownFormat { name: String },
    #[error("{format} cannot be encoded at {rate} Hz; use {supported}")]
    UnsupportedRate {
        format: Format,
        rate: u32,
        supported: &'static str,
    },
    #[error("the {format} encoder failed: {detail}")]
    Codec { format: Format, detail: String },
    #[error("the {format} stream was already finished")]
    Finished { format: Format },
    /// `speed` could not be applied (out of range, or an unusable rate).
    #[error(transparent)]
    Stretch(#[from] crate::stretch::StretchError),
}

impl EncodeError {
    fn codec(format: Format, detail: impl fmt::Display) -> Self {
        EncodeError::Codec {
            format,
            detail: detail.to_string(),
        }
    }
}

/// A streaming encoder for one mono stream (see the module docs).
pub trait Encoder: Send {
    fn format(&self) -> Format;
    /// The rate of the samples pushed, which is the stream's rate.
    fn sample_rate(&self) -> u32;
    /// Encodes `samples` (mono, nominally in [-1, 1]; clamped, NaN → 0) and
    /// appends the bytes that are ready to `out` (possibly none).
    fn push(&mut self, samples: &[f32], out: &mut Vec<u8>) -> Result<(), EncodeError>;
    /// Encodes what is held back and ends the stream; pushing after this is
    /// an error ([`EncodeError::Finished`]).
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError>;
    /// After [`finish`](Self::finish): bytes to write over the start of the
    /// complete output so its header states the exact length, for formats
    /// whose header has one (WAV, FLAC); `None` for the others.
    fn exact_header(&self) -> Option<Vec<u8>> {
        None
    }
}

/// Encodes a whole clip: every byte, with the exact header in place.
pub fn encode_all(format: Format, rate: u32, samples: &[f32]) -> Result<Vec<u8>, EncodeError> {
    let mut enc = format.encoder(rate)?;
    let mut out = Vec::new();
    enc.push(samples, &mut out)?;
    enc.finish(&mut out)?;
    if let Some(h) = enc.exact_header() {
        out[..h.len()].copy_from_slice(&h);
    }
    Ok(out)
}

/// Float samples to 16-bit PCM (the rounding and clamping of
/// [`crate::f32_to_i16`]), appended to `out`.
fn to_i16(samples: &[f32], out: &mut Vec<i16>) {
    out.extend(samples.iter().map(|&s| crate::f32_to_i16(s)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for f in Format::ALL {
            assert_eq!(f.name().parse::<Format>().unwrap(), f);
        }
        let e = "ogg".parse::<Format>().unwrap_err();
        assert!(e.to_string().contains("\"ogg\""), "{e}");
        assert!(e.to_string().contains("aac"), "{e}");
    }

    #[test]
    fn rates_follow_the_codec() {
        assert_eq!(Format::Mulaw.output_rate(None, 24000).unwrap(), 8000);
        assert_eq!(Format::Wav.output_rate(None, 24000).unwrap(), 24000);
        assert_eq!(Format::Mp3.output_rate(Some(44100), 24000).unwrap(), 44100);
        let e = Format::Alaw.output_rate(Some(16000), 24000).unwrap_err();
        assert!(e.to_string().contains("use 8000"), "{e}");
        assert!(Format::Opus.output_rate(Some(44100), 24000).is_err());
        assert!(Format::Mp3.encoder(9000).is_err());
        let e = Format::Aac.output_rate(Some(20000), 24000).unwrap_err();
        assert!(e.to_string().contains("96000"), "{e}");
        assert_eq!(Format::Aac.output_rate(None, 24000).unwrap(), 24000);
    }

    #[test]
    fn pushing_after_finish_is_an_error_for_every_format() {
        for f in Format::ALL {
            let rate = f.output_rate(None, 24000).unwrap();
            let mut e = f.encoder(rate).unwrap();
            let mut out = Vec::new();
            e.push(&[0.1; 100], &mut out).unwrap();
            e.finish(&mut out).unwrap();
            assert!(
                matches!(e.push(&[0.0], &mut out), Err(EncodeError::Finished { .. })),
                "{f}"
            );
            assert!(!out.is_empty(), "{f}");
        }
    }
}
