#![forbid(unsafe_code)]
//! Audio for tts-rt: output (WAV, resampling, playback) and reference audio in.
//!
//! # Layout
//! - [`WavSink`], [`wav_bytes`]: WAV encoding (16-bit PCM or 32-bit float).
//! - [`resample`]: [`StreamResampler`], streaming conversion from the model's
//!   native rate to any output rate from 8 to 48 kHz; chunked output equals
//!   one-shot output. `resample/offline.rs`: whole clips, longer filter,
//!   exact time alignment.
//! - [`ring`]: a preallocated lock-free single-producer single-consumer sample
//!   ring, the only thing shared with a device callback.
//! - [`playback`]: [`Player`], live playback through cpal, one file per
//!   concern: `playback/mod.rs` the player (resampling, backpressure, stall
//!   detection, underrun accounting); `format.rs` the options and device
//!   sample formats; `callback.rs` the realtime callback that never locks,
//!   allocates, logs or blocks; `devices.rs` device listing and selection;
//!   `negotiate.rs` format negotiation.
//! - [`reference`](mod@reference): [`ReferenceAudio`], reference audio in
//!   for voice cloning: any WAV, FLAC, MP3, OGG/Vorbis, OGG/Opus, WebM/Opus or M4A/AAC file (or
//!   samples) at any rate from 8 to 192 kHz, mono or more channels, to
//!   24 kHz mono with typed refusals ([`ReferenceAudioError`]) for
//!   unreadable, damaged, silent, too short and too long clips. `reference/mod.rs` the checks and
//!   conversion, `decode.rs` the symphonia decoding (strict: a decoder error
//!   or a truncated file is an error; a decoder panic is caught),
//!   `preflight/` the container checks that run before symphonia sees the
//!   file (every count and length it would allocate from), `error.rs` the
//!   refusals. Resampling
//!   is [`resample::resample_offline`].
//! - [`encode`]: encoded audio out, one module per codec behind the
//!   streaming [`Encoder`] (push samples, get the bytes that are ready,
//!   `finish` flushes): `wav.rs`, `pcm.rs`, `g711.rs` (μ-law, A-law, written
//!   here), `flac.rs` (flacenc), `mp3.rs` (LAME), `opus.rs` (libopus in Ogg
//!   pages); [`Format`] names them and their rates, [`EncodeError`] the
//!   refusals.
//! - [`stretch`]: [`Stretch`], OpenAI's `speed` (0.25-4.0): streaming,
//!   pitch-preserving tempo change by WSOLA (the `wsola` crate); chunked
//!   output equals one-shot output.
//! - [`timing`]: [`timing::Aligner`], word and character timings of speech
//!   as it streams, from the waveform (speech, pauses, syllable nuclei) and
//!   the text (syllables, punctuation): `text.rs` the text's weights,
//!   `voicing.rs` the 10 ms speech/silence frames and the nuclei,
//!   `words.rs` words from characters, `mod.rs` the progress, snapping and
//!   settling.
//! - [`continuity`]: the METRICS.md playout simulation (underruns and stall
//!   time at a prebuffer, the smallest prebuffer without underrun) as pure
//!   functions of chunk arrival times and durations.

use std::io::{Seek, Write};

pub mod continuity;
pub mod encode;
pub mod playback;
pub mod reference;
pub mod resample;
pub mod ring;
pub mod stretch;
pub mod timing;

pub use encode::{encode_all, EncodeError, Encoder, Format};
pub use playback::{list_output_devices, DeviceInfo, PlaybackOptions, PlaybackStats, Player};
pub use reference::{
    ReferenceAudio, ReferenceAudioError, MAX_REFERENCE_SECONDS, MIN_REFERENCE_SECONDS,
    REFERENCE_RATE,
};
pub use resample::StreamResampler;
pub use stretch::{Stretch, StretchError};

/// Sample encoding of a WAV file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WavFormat {
    /// 16-bit integer PCM (what players expect; default).
    Pcm16,
    /// 32-bit IEEE float (lossless copy of the model output; comparisons).
    F32,
}

impl std::str::FromStr for WavFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pcm16" => Ok(WavFormat::Pcm16),
            "f32" => Ok(WavFormat::F32),
            other => Err(format!("unknown WAV format {other:?}; use pcm16 or f32")),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AudioError {
    #[error("writing WAV: {0}")]
    Wav(#[from] hound::Error),
    #[error("writing audio: {0}")]
    Io(#[from] std::io::Error),
    #[error("{which} sample rate {rate} Hz is out of range; use {min}..={max} Hz")]
    InvalidSampleRate {
        which: &'static str,
        rate: u32,
        min: u32,
        max: u32,
    },
    #[error("creating the resampler: {0}")]
    Resampler(String),
    #[error("no audio output device{}; {hint}", match .wanted { Some(w) => format!(" named {w:?}"), None => String::new() })]
    NoDevice {
        wanted: Option<String>,
        hint: String,
    },
    #[error("listing audio devices: {0}")]
    Devices(String),
    #[error(
        "audio device {device:?} supports no usable output format ({detail}); try another --device"
    )]
    UnsupportedDevice { device: String, detail: String },
    #[error("opening an output stream on {device:?}: {reason}; check that the device exists and is free (tts-rt devices lists them), or write a file with --out")]
    StreamOpen { device: String, reason: String },
    #[error("audio device {device:?} failed during playback: {reason}")]
    StreamFailed { device: String, reason: String },
    #[error("playback stalled: the device consumed nothing for {waited_ms} ms ({written} of {requested} samples queued)")]
    Stalled {
        waited_ms: u64,
        written: usize,
        requested: usize,
    },
    #[error("playback was already finished; open a new player for a new stream")]
    Finished,
}

/// Incremental mono WAV writer: samples are appended as they are produced and
/// the header is finalised on [`WavSink::finish`].
pub struct WavSink<W: Write + Seek> {
    writer: hound::WavWriter<W>,
    format: WavFormat,
    samples: u64,
}

impl<W: Write + Seek> WavSink<W> {
    pub fn new(out: W, sample_rate: u32, format: WavFormat) -> Result<Self, AudioError> {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate,
            bits_per_sample: match format {
                WavFormat::Pcm16 => 16,
                WavFormat::F32 => 32,
            },
            sample_format: match format {
                WavFormat::Pcm16 => hound::SampleFormat::Int,
                WavFormat::F32 => hound::SampleFormat::Float,
            },
        };
        Ok(WavSink {
            writer: hound::WavWriter::new(out, spec)?,
            format,
            samples: 0,
        })
    }

    pub fn write(&mut self, samples: &[f32]) -> Result<(), AudioError> {
        match self.format {
            WavFormat::F32 => {
                for &s in samples {
                    self.writer.write_sample(s)?;
                }
            }
            WavFormat::Pcm16 => {
                for &s in samples {
                    self.writer.write_sample(f32_to_i16(s))?;
                }
            }
        }
        self.samples += samples.len() as u64;
        Ok(())
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    pub fn finish(self) -> Result<(), AudioError> {
        self.writer.finalize()?;
        Ok(())
    }
}

/// Float sample in [-1, 1] to 16-bit PCM, rounding to nearest and clamping.
pub fn f32_to_i16(s: f32) -> i16 {
    let s = if s.is_nan() { 0.0 } else { s.clamp(-1.0, 1.0) };
    (s * 32767.0).round() as i16
}

/// Encodes a whole utterance to WAV bytes.
pub fn wav_bytes(
    samples: &[f32],
    sample_rate: u32,
    format: WavFormat,
) -> Result<Vec<u8>, AudioError> {
    let mut buf = std::io::Cursor::new(Vec::with_capacity(samples.len() * 4 + 64));
    let mut sink = WavSink::new(&mut buf, sample_rate, format)?;
    sink.write(samples)?;
    sink.finish()?;
    Ok(buf.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wav_round_trips_in_both_formats() {
        let x: Vec<f32> = (0..1000).map(|i| ((i as f32) * 0.01).sin() * 0.9).collect();
        for fmt in [WavFormat::Pcm16, WavFormat::F32] {
            let bytes = wav_bytes(&x, 24000, fmt).unwrap();
            let mut r = hound::WavReader::new(std::io::Cursor::new(bytes)).unwrap();
            assert_eq!(r.spec().sample_rate, 24000);
            let back: Vec<f32> = match fmt {
                WavFormat::F32 => r.samples::<f32>().map(|s| s.unwrap()).collect(),
                WavFormat::Pcm16 => r
                    .samples::<i16>()
                    .map(|s| s.unwrap() as f32 / 32767.0)
                    .collect(),
            };
            assert_eq!(back.len(), x.len());
            let tol = if fmt == WavFormat::F32 {
                0.0
            } else {
                1.0 / 32767.0
            };
            for (a, b) in x.iter().zip(&back) {
                assert!((a - b).abs() <= tol, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn pcm16_clamps_and_maps_nan_to_silence() {
        assert_eq!(f32_to_i16(2.0), 32767);
        assert_eq!(f32_to_i16(-2.0), -32767);
        assert_eq!(f32_to_i16(f32::NAN), 0);
    }
}
