//! Why a reference clip was refused: one variant per cause, each message
//! naming the problem and what to do about it.
//!
//! Every message is whole: a variant that wraps another error (a read
//! failure, the resampler's) says that error's text in its own message and
//! has no [`source`](std::error::Error::source), so a renderer that walks
//! the chain (the CLI's "caused by" lines) says each cause once.

use std::path::PathBuf;

/// A reference clip that cannot be used for voice cloning.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceAudioError {
    /// The file could not be opened or read.
    /// (`error` is in the message, not the error's source.)
    #[error("reading reference audio {}: {error}", .path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The path exists but is a directory (or another non-file).
    #[error("reference audio {} is not a file", .path.display())]
    NotAFile { path: PathBuf },
    /// Zero bytes.
    #[error("the reference audio is empty (0 bytes)")]
    Empty,
    /// Not a recognised container or codec. `what` names what was tried.
    #[error("the reference audio is not in a supported format ({what}); use WAV, FLAC, MP3, OGG/Vorbis, OGG/Opus, WebM/Opus or M4A/AAC")]
    Unsupported { what: String },
    /// The container was recognised but the stream is damaged: a decoder
    /// error, a file shorter than its header says (truncated), or samples
    /// that are not finite numbers.
    #[error("the reference audio is damaged: {detail}")]
    Corrupt { detail: String },
    /// The container holds no decodable audio track.
    #[error("the reference file contains no audio track")]
    NoAudioTrack,
    /// The sample rate is missing, zero or outside what a recording uses.
    #[error("reference audio sample rate {rate} Hz is out of range; use {min}..={max} Hz")]
    BadRate { rate: u32, min: u32, max: u32 },
    /// No channels, or more than a recording plausibly has.
    #[error("reference audio has {channels} channels; use 1..={max}")]
    BadChannels { channels: u16, max: u16 },
    /// Shorter than [`MIN_REFERENCE_SECONDS`](super::MIN_REFERENCE_SECONDS).
    #[error("the reference audio is {secs:.3} s long, under the {min} s minimum; use a clip of a few seconds of speech")]
    TooShort { secs: f64, min: f64 },
    /// Longer than [`MAX_REFERENCE_SECONDS`](super::MAX_REFERENCE_SECONDS).
    /// Decoding stops as soon as the limit is passed, so `secs` is the
    /// length declared by the container when it has one, otherwise how far
    /// decoding got (the clip is at least that long).
    #[error("the reference audio is at least {secs:.1} s long, past the {max} s maximum; trim it (3 to 15 s of speech clone best)")]
    TooLong { secs: f64, max: f64 },
    /// All zero, or the loudest sample is below
    /// [`SILENCE_PEAK_DBFS`](super::SILENCE_PEAK_DBFS).
    #[error("the reference audio is silent (peak {peak_dbfs:.1} dBFS, under {threshold} dBFS); record some speech")]
    Silent { peak_dbfs: f64, threshold: f64 },
    /// The file is larger than any clip within the length limit needs
    /// ([`MAX_REFERENCE_FILE_BYTES`](super::MAX_REFERENCE_FILE_BYTES)).
    #[error("the reference file is {bytes} bytes, past the {max}-byte limit for a clip of at most a minute; trim it or send it compressed (FLAC, MP3, M4A)")]
    TooLarge { bytes: u64, max: u64 },
    /// A part the container needs (a box, chunk, page or tag) runs past the
    /// end of the file: it was cut off.
    #[error("the reference {format} is truncated: its {part} needs {claimed} bytes but the file ends {available} bytes after it starts; send the whole file")]
    Truncated {
        format: &'static str,
        part: String,
        claimed: u64,
        available: u64,
    },
    /// A part of the file (a box, chunk, block, tag or field) claims more
    /// bytes than what contains it has left: checked before the decoder
    /// allocates for it.
    #[error("the reference {format} is damaged: its {part} claims {claimed} bytes but {within} has {available} left; export the clip again")]
    SizeOverrun {
        format: &'static str,
        part: String,
        claimed: u64,
        within: String,
        available: u64,
    },
    /// A count-prefixed table whose entries cannot fit in its box: the
    /// decoder would reserve `entries` × `entry_bytes` before reading one.
    #[error("the reference {format} is damaged: its {table} claims {entries} entries of {entry_bytes} bytes but holds {available} bytes; export the clip again")]
    TableOverrun {
        format: &'static str,
        table: &'static str,
        entries: u64,
        entry_bytes: u64,
        available: u64,
    },
    /// A header field holds a value no real recording has (a zero time
    /// base, a frame size that does not match the sample format, a codebook
    /// larger than any encoder writes).
    #[error("the reference {format} is damaged: its {field} is {value}, {expected}; export the clip again")]
    BadField {
        format: &'static str,
        field: String,
        value: u64,
        expected: String,
    },
    /// The decoder stopped on an internal consistency check (a panic,
    /// caught): the file is damaged in a way the container checks do not
    /// look for. `detail` is the decoder's own message, for logs; the
    /// client is told only what it can act on.
    #[error("the reference {format} could not be decoded: the decoder found it inconsistent (damaged, or using a feature it does not read); re-encode the clip as WAV or FLAC")]
    DecoderFault {
        format: &'static str,
        detail: String,
    },
    /// The resampler to 24 kHz could not be built (a bug, not the input's
    /// fault: rates are checked before). (The error is in the message, not
    /// the error's source.)
    #[error("resampling the reference audio: {0}")]
    Resample(crate::AudioError),
}

impl From<crate::AudioError> for ReferenceAudioError {
    fn from(e: crate::AudioError) -> Self {
        ReferenceAudioError::Resample(e)
    }
}
