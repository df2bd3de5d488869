//! Reference audio in: a voice-cloning clip in any common format and rate,
//! decoded and converted to what the speaker encoder and the codec encoder
//! take, 24 kHz mono `f32`.
//!
//! # What the official code does, and what this does
//! The official `create_voice_clone_prompt` loads a path with
//! `librosa.load(path, sr=None, mono=True)` (the mean over channels, no
//! normalisation, no trimming, no length cap) and resamples to 24 kHz with
//! `librosa.resample` (soxr HQ). Here:
//! - decoding is symphonia (`decode.rs`): WAV (8/16/24/32-bit
//!   integer and float PCM), FLAC, MP3, OGG/Vorbis and M4A/AAC; integer PCM
//!   maps to floats as `s / 2^(bits-1)`, like libsndfile; OGG/Opus, which
//!   symphonia does not decode, is demuxed here and decoded with libopus at
//!   48 kHz (`ogg_opus.rs`), and so is Opus in WebM/Matroska, browsers'
//!   MediaRecorder default (`webm_opus.rs`; `opus.rs` decodes the packets
//!   of both);
//! - mono is the mean over channels, as `mono=True` (`decoded.rs`, what
//!   both decoders hand on);
//! - resampling is [`resample_offline`]:
//!   the crate's sinc resampler with a 256-tap filter per output sample (flat to ~0.95 of
//!   Nyquist) and exact time alignment, not soxr: close to the official
//!   signal but not bit-exact (a 24 kHz clip passes through unchanged, which
//!   is what the goldens use);
//! - no normalisation, no trimming; but a clip must be finite, at least
//!   [`MIN_REFERENCE_SECONDS`], at most [`MAX_REFERENCE_SECONDS`], and not
//!   silent ([`SILENCE_PEAK_DBFS`]), each refused with its own
//!   [`ReferenceAudioError`].
//!
//! # Untrusted files
//! A clip arrives from any client, so no header field is trusted: the file
//! is at most [`MAX_REFERENCE_FILE_BYTES`]; its container's counts and
//! lengths are checked against the bytes that hold them before the decoder
//! sees it (`preflight/`: a sample table that cannot fit its box, a chunk
//! past the end of the file, a zero rate are refused by name); decoding
//! stops before the clip passes [`MAX_REFERENCE_SECONDS`]; and a panic left
//! in a decoder comes back as
//! [`DecoderFault`](ReferenceAudioError::DecoderFault). One bad upload is
//! one refused request, never a crash of the server.
//!
//! # Known limits
//! - M4A/AAC: symphonia does not apply the MP4 edit list, so the AAC
//!   encoder's priming samples (1,024 for ffmpeg's encoder, about 21 ms at
//!   48 kHz) stay at the start of the clip, and the clip is that much longer
//!   than the encoded audio. Harmless for a voice prompt.
//! - A truncated file is detected when its header declares a length: WAV,
//!   FLAC, MP3 with a Xing/Info header (LAME and ffmpeg write one), OGG (its
//!   last page; a file cut inside a page has none). M4A is refused whether
//!   its index is at the end (ffmpeg's default: cut off with the tail) or
//!   at the front (the audio atom's size then runs past the end). A raw
//!   `.aac` (ADTS) stream has no declared length (symphonia estimates one
//!   from its first frames), so it decodes to the end like an MP3 without
//!   a Xing header, keeping the encoder's delay at its start. An MP3
//!   without a Xing/Info header, or an OGG/Vorbis file cut exactly at a
//!   page boundary, looks complete and decodes to the audio that is there;
//!   an OGG/Opus file must end with its end-of-stream page, so one cut at a
//!   page boundary is refused as truncated (a recording still being
//!   written, without that page, is refused too).
//! - OGG/Opus and WebM/Opus: mono and stereo (channel mapping family 0)
//!   only; other codecs in WebM/Matroska are refused by name. A WebM
//!   recording states no length, so one cut at an element boundary decodes
//!   to the audio that is there (cut inside an element: truncated).
//! - An MP3 without a LAME tag keeps the encoder's delay and padding (about
//!   50 ms at the start and up to one frame at the end).
//! - Untrusted files are bounded in memory (see above), not in time: the
//!   decode runs until the clip passes [`MAX_REFERENCE_SECONDS`] or the
//!   file ends, and a crafted file can make that slow (symphonia looks up
//!   each MP4 packet's time by walking the `stts` table from its start; an
//!   Ogg file dense with false page headers is checksummed at each one).
//!   No wall-clock limit is applied here.
//! - ID3v2 tags are blanked before decoding (their frames are never used);
//!   the caller's bytes are not changed.
//! - A WAV written to a pipe carries 0xFFFF_FFFF as its data size; that is
//!   read as "length unknown" (decoded to the end, no truncation check), and
//!   symphonia drops the last partial packet of such a stream (under 0.1 s).

mod decode;
mod decoded;
mod error;
mod ogg_opus;
mod opus;
mod preflight;
mod synthetic;
mod webm_opus;

use std::path::Path;

pub use error::ReferenceAudioError;
pub use synthetic::synthetic_speech;

use crate::resample::resample_offline;

/// The rate every reference clip is converted to: the speaker encoder's
/// mel front end and the codec encoder both run at 24 kHz.
pub const REFERENCE_RATE: u32 = 24_000;

/// Shortest accepted clip, in seconds. The hard floor is the speaker
/// encoder's: its largest reflect pad needs 5 mel frames, 1,280 samples
/// (53 ms) at 24 kHz, and vllm-omni refuses under 1,024 samples. Half a
/// second (12,000 samples, 46 mel frames, 7 codec frames at 12.5 Hz) is far
/// above that and still below any clip that carries a usable voice: the
/// official README advertises a 3-second clone, so anything under 0.5 s is
/// almost certainly a mistake (a click, a cut-off recording), and refusing
/// it says so instead of producing a meaningless x-vector.
pub const MIN_REFERENCE_SECONDS: f64 = 0.5;

/// Longest accepted clip, in seconds. The official code has no cap, but in
/// ICL mode the whole reference becomes talker prompt (12.5 codec rows per
/// second, 750 rows for 60 s, on top of the reference text), which every
/// request then attends over; and users report that references past ~10-15 s
/// make ICL output stop early or degenerate. 60 s leaves room for long
/// x-vector-only references while bounding prompt size, memory (60 s at
/// 192 kHz is 11.5 M samples) and decode time; decoding stops as soon as a
/// clip passes it.
pub const MAX_REFERENCE_SECONDS: f64 = 60.0;

/// Largest file accepted, in bytes: 128 MiB. The longest clip, 60 s, takes
/// 92 MB as uncompressed 192 kHz stereo 32-bit PCM, the largest form a
/// recorder writes; every container check and the decoder hold the file in
/// memory, so this is also what one clip can cost before decoding starts.
/// (The server's upload limit is lower; this bounds the CLI.)
pub const MAX_REFERENCE_FILE_BYTES: u64 = 128 << 20;

/// A clip whose loudest sample is below this is refused as silent. -60 dBFS
/// (a peak of 0.001) is below any real recording's speech but above
/// dither and the noise floor of 16-bit silence.
pub const SILENCE_PEAK_DBFS: f64 = -60.0;

/// Source sample rates accepted: telephony (8 kHz) to high-resolution
/// recorders (192 kHz). Anything outside is a damaged or mislabelled file.
pub const MIN_SOURCE_RATE: u32 = 8_000;
pub const MAX_SOURCE_RATE: u32 = 192_000;

/// Most channels accepted (symphonia's own channel limit).
pub const MAX_CHANNELS: u16 = 32;

/// A reference clip ready for the encoders: 24 kHz mono, plus what it was.
/// (`Debug` summarises the samples instead of printing them.)
#[derive(Clone, PartialEq)]
pub struct ReferenceAudio {
    /// The signal at [`REFERENCE_RATE`], mono, unnormalised.
    pub samples: Vec<f32>,
    /// The rate it was recorded at.
    pub source_rate: u32,
    /// How many channels were averaged into `samples`.
    pub source_channels: u16,
    /// The format it was decoded from: "WAV/PCM", "FLAC", "MP3",
    /// "OGG/Vorbis", "OGG/Opus", "M4A/AAC", or "samples" for
    /// [`Self::from_samples`].
    pub source_format: &'static str,
    /// Duration of the decoded audio (source frames / source rate).
    pub duration_secs: f64,
}

impl std::fmt::Debug for ReferenceAudio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceAudio")
            .field(
                "samples",
                &format_args!("[{} samples at 24 kHz]", self.samples.len()),
            )
            .field("source_rate", &self.source_rate)
            .field("source_channels", &self.source_channels)
            .field("source_format", &self.source_format)
            .field("duration_secs", &self.duration_secs)
            .finish()
    }
}

impl ReferenceAudio {
    /// Reads and decodes a file. The format is recognised from the content;
    /// the extension only appears in error messages.
    pub fn from_path(path: &Path) -> Result<Self, ReferenceAudioError> {
        let io = |error| ReferenceAudioError::Io {
            path: path.to_path_buf(),
            error,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(ReferenceAudioError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        if meta.len() == 0 {
            return Err(ReferenceAudioError::Empty);
        }
        check_size(meta.len())?;
        let bytes = std::fs::read(path).map_err(io)?;
        // The file may have grown since it was measured.
        check_size(bytes.len() as u64)?;
        let ext = path.extension().and_then(|e| e.to_str());
        let decoded = decode::decode_file(bytes, ext, MAX_REFERENCE_SECONDS)?;
        Self::finish(decoded.mono, decoded.rate, decoded.channels, decoded.format)
    }

    /// Decodes an in-memory file (an upload, base64 audio). `name_hint` is
    /// the file name or extension, if known, for error messages.
    pub fn from_bytes(bytes: &[u8], name_hint: Option<&str>) -> Result<Self, ReferenceAudioError> {
        if bytes.is_empty() {
            return Err(ReferenceAudioError::Empty);
        }
        check_size(bytes.len() as u64)?;
        let ext = name_hint.map(|n| n.rsplit('.').next().unwrap_or(n));
        let decoded = decode::decode_file(bytes.to_vec(), ext, MAX_REFERENCE_SECONDS)?;
        Self::finish(decoded.mono, decoded.rate, decoded.channels, decoded.format)
    }

    /// Takes already decoded samples, interleaved when `channels > 1`
    /// (frame-major: `[l0, r0, l1, r1, ...]`), at `rate`. The same checks and
    /// conversion as a file.
    pub fn from_samples(
        samples: Vec<f32>,
        rate: u32,
        channels: u16,
    ) -> Result<Self, ReferenceAudioError> {
        check_rate(rate)?;
        check_channels(channels)?;
        let c = channels as usize;
        if !samples.len().is_multiple_of(c) {
            return Err(ReferenceAudioError::Corrupt {
                detail: format!(
                    "{} interleaved samples are not a whole number of {channels}-channel frames",
                    samples.len()
                ),
            });
        }
        let secs = (samples.len() / c) as f64 / rate as f64;
        if secs > MAX_REFERENCE_SECONDS {
            return Err(ReferenceAudioError::TooLong {
                secs,
                max: MAX_REFERENCE_SECONDS,
            });
        }
        if let Some(i) = samples.iter().position(|s| !s.is_finite()) {
            return Err(ReferenceAudioError::Corrupt {
                detail: format!(
                    "sample frame {} holds {}, not a finite number",
                    i / c,
                    samples[i]
                ),
            });
        }
        let mono = if c == 1 {
            samples
        } else {
            samples.chunks_exact(c).map(decoded::mean).collect()
        };
        Self::finish(mono, rate, channels, "samples")
    }

    /// The checks every source shares, then the conversion to 24 kHz.
    fn finish(
        mono: Vec<f32>,
        rate: u32,
        channels: u16,
        format: &'static str,
    ) -> Result<Self, ReferenceAudioError> {
        let duration_secs = mono.len() as f64 / rate as f64;
        if duration_secs > MAX_REFERENCE_SECONDS {
            return Err(ReferenceAudioError::TooLong {
                secs: duration_secs,
                max: MAX_REFERENCE_SECONDS,
            });
        }
        if duration_secs < MIN_REFERENCE_SECONDS {
            return Err(ReferenceAudioError::TooShort {
                secs: duration_secs,
                min: MIN_REFERENCE_SECONDS,
            });
        }
        let peak = mono.iter().fold(0.0f32, |m, s| m.max(s.abs()));
        let peak_dbfs = 20.0 * (peak as f64).log10();
        if peak == 0.0 || peak_dbfs < SILENCE_PEAK_DBFS {
            return Err(ReferenceAudioError::Silent {
                peak_dbfs,
                threshold: SILENCE_PEAK_DBFS,
            });
        }
        let samples = to_reference_rate(mono, rate)?;
        Ok(ReferenceAudio {
            samples,
            source_rate: rate,
            source_channels: channels,
            source_format: format,
            duration_secs,
        })
    }
}

/// Converts a whole mono clip from `rate` to [`REFERENCE_RATE`] in one pass
/// (a clip at 24 kHz is returned unchanged). The output has as many
/// samples as `librosa.resample` gives
/// ([`offline_len`](crate::resample::offline_len)), sample `j` at time
/// `j / 24000` s.
pub fn to_reference_rate(mono: Vec<f32>, rate: u32) -> Result<Vec<f32>, ReferenceAudioError> {
    check_rate(rate)?;
    if rate == REFERENCE_RATE {
        return Ok(mono);
    }
    Ok(resample_offline(&mono, rate, REFERENCE_RATE)?)
}

fn check_size(bytes: u64) -> Result<(), ReferenceAudioError> {
    if bytes <= MAX_REFERENCE_FILE_BYTES {
        Ok(())
    } else {
        Err(ReferenceAudioError::TooLarge {
            bytes,
            max: MAX_REFERENCE_FILE_BYTES,
        })
    }
}

fn check_rate(rate: u32) -> Result<(), ReferenceAudioError> {
    if (MIN_SOURCE_RATE..=MAX_SOURCE_RATE).contains(&rate) {
        Ok(())
    } else {
        Err(ReferenceAudioError::BadRate {
            rate,
            min: MIN_SOURCE_RATE,
            max: MAX_SOURCE_RATE,
        })
    }
}

fn check_channels(channels: u16) -> Result<(), ReferenceAudioError> {
    if (1..=MAX_CHANNELS).contains(&channels) {
        Ok(())
    } else {
        Err(ReferenceAudioError::BadChannels {
            channels,
            max: MAX_CHANNELS,
        })
    }
}
