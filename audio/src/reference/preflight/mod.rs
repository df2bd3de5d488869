//! Container checks that run before the decoder sees a byte.
//!
//! symphonia trusts the counts and lengths in a file's headers: it reserves
//! `entry_count × entry_size` for an MP4 sample table, `comment_length`
//! bytes for a Vorbis comment, a frame's stated size for an ID3v2 frame,
//! before reading any of it, and divides by a WAV's or an MP4 track's
//! stated rate. A crafted upload could therefore ask for 64 GiB (an `stsc`
//! count near 2^32: the allocation fails and the process aborts, taking
//! every session with it) or trip a panic. These checks walk the same
//! structures symphonia will read, from the same offsets, and refuse any
//! count or length that does not fit in the bytes that hold it, so every
//! allocation the decoder makes from a header field is bounded by the
//! file's size (itself bounded by
//! [`MAX_REFERENCE_FILE_BYTES`](super::MAX_REFERENCE_FILE_BYTES)).
//!
//! Each module mirrors one symphonia reader (0.5.5), citing what it trusts:
//! - `mp4.rs`: the box tree (`moov/trak/mdia/minf/stbl`, `udta/meta/ilst`,
//!   `mvex`, `moof/traf`), every sample table, the `esds` descriptors;
//! - `riff.rs`: WAV chunks and the `fmt ` fields;
//! - `flac.rs`: FLAC metadata blocks;
//! - `ogg.rs`: the Ogg pages and packets the demuxer maps, as it maps them;
//! - `id3v2.rs`: ID3v2 tags, which the probe reads ahead of any format:
//!   the one structure not walked but blanked (its frames cannot be located
//!   without symphonia's parser table, and a clip's tags are never used);
//! - `xiph.rs`: Vorbis comments and FLAC pictures (FLAC, Ogg), and the
//!   Vorbis setup header's codebooks (checked on the codec parameters,
//!   before the decoder is made).
//!
//! The checks are strict only where symphonia would allocate or panic;
//! anything it refuses cleanly by itself is left to it.

mod flac;
mod id3v2;
mod mp4;
mod ogg;
mod riff;
mod xiph;

pub(super) use xiph::check_vorbis_setup;

use super::ReferenceAudioError;

/// The container symphonia's probe will pick for a file, named the way the
/// refusals name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Container {
    Wav,
    Flac,
    Mp4,
    Ogg,
    Mpeg,
    Adts,
    /// WebM/Matroska: never found by the marker search; `webm_opus.rs`
    /// reads it instead of symphonia.
    Matroska,
    /// No marker the probe knows within its search window: symphonia will
    /// refuse the file itself.
    Unknown,
}

impl Container {
    pub(super) fn name(self) -> &'static str {
        match self {
            Container::Wav => "WAV",
            Container::Flac => "FLAC",
            Container::Mp4 => "M4A",
            Container::Ogg => "OGG",
            Container::Mpeg => "MP3",
            Container::Adts => "AAC",
            Container::Matroska => "WebM",
            Container::Unknown => "file",
        }
    }
}

/// The probe scans at most 1 MiB for a marker (symphonia-core's
/// `Probe::PROBE_SEARCH_LIMIT`), counting from where it starts (the file's
/// start, or the end of an ID3v2 tag).
const PROBE_SEARCH_LIMIT: usize = 1 << 20;

/// At a candidate marker the probe reads 16 bytes of context; closer than
/// that to the end of the file the read fails and the probe gives up.
const PROBE_CONTEXT: usize = 16;

/// Checks `bytes` the way symphonia will read it: finds the container the
/// probe picks (after any ID3v2 tags, which are blanked in place: see
/// `id3v2.rs`) and walks its headers. Returns the container, for naming it
/// in later errors.
pub(super) fn check(bytes: &mut [u8]) -> Result<Container, ReferenceAudioError> {
    let mut from = 0;
    loop {
        let Some((at, marker)) = find_marker(bytes, from) else {
            return Ok(Container::Unknown);
        };
        let container = match marker {
            Marker::Id3v2 => match id3v2::check(bytes, at)? {
                // The probe goes on looking after the tag.
                Some(end) => {
                    from = end;
                    continue;
                }
                // symphonia's tag reader fails, and the probe with it.
                None => return Ok(Container::Unknown),
            },
            Marker::Container(c) => c,
        };
        match container {
            Container::Wav => riff::check(bytes, at)?,
            Container::Flac => flac::check(bytes, at)?,
            // The marker is `ftyp`, 4 bytes into the first box; the reader
            // steps back to the box's size field (no further than the
            // start of the file).
            Container::Mp4 => mp4::check(bytes, at.saturating_sub(4))?,
            Container::Ogg => ogg::check(bytes, at)?,
            // MPEG audio and ADTS frames carry 11- and 13-bit sizes: every
            // allocation their readers make is bounded by the format.
            Container::Mpeg | Container::Adts | Container::Matroska | Container::Unknown => {}
        }
        return Ok(container);
    }
}

enum Marker {
    Container(Container),
    Id3v2,
}

/// The first position at or after `from` where the probe recognises a
/// marker, as it scans: byte by byte, within its search limit, only where
/// 16 bytes of context remain. The registered markers (symphonia 0.5.5
/// with this crate's features) cannot overlap, so the order the readers
/// were registered in does not matter.
fn find_marker(bytes: &[u8], from: usize) -> Option<(usize, Marker)> {
    // The probe checks position p once it has read p + 2 bytes from
    // `from`, and stops after reading PROBE_SEARCH_LIMIT bytes.
    let last = from
        .checked_add(PROBE_SEARCH_LIMIT - 2)?
        .min(bytes.len().checked_sub(PROBE_CONTEXT)?);
    (from..=last).find_map(|p| marker_at(bytes, p).map(|m| (p, m)))
}

/// The second bytes of the MPEG audio sync words the probe registers:
/// layers 1, 2 and 3, versions 1, 2 and 2.5, with and without CRC.
const MPEG_SYNC: [u8; 18] = [
    0xfe, 0xff, 0xf6, 0xf7, 0xe6, 0xe7, // layer 1
    0xfc, 0xfd, 0xf4, 0xf5, 0xe4, 0xe5, // layer 2
    0xfa, 0xfb, 0xf2, 0xf3, 0xe2, 0xe3, // layer 3
];

fn marker_at(bytes: &[u8], p: usize) -> Option<Marker> {
    let b = bytes.get(p..p + 4)?;
    let container = match b {
        [0xff, 0xf1, ..] => Container::Adts,
        [0xff, x, ..] if MPEG_SYNC.contains(x) => Container::Mpeg,
        b"fLaC" => Container::Flac,
        b"ftyp" => Container::Mp4,
        b"RIFF" => Container::Wav,
        b"OggS" => Container::Ogg,
        [b'I', b'D', b'3', _] => return Some(Marker::Id3v2),
        _ => return None,
    };
    Some(Marker::Container(container))
}

// ---- bounds-checked reads: None past the end, never a panic ---------------

fn bytes_at<const N: usize>(b: &[u8], at: u64) -> Option<[u8; N]> {
    let at = usize::try_from(at).ok()?;
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn u8_at(b: &[u8], at: u64) -> Option<u8> {
    bytes_at::<1>(b, at).map(|x| x[0])
}

fn be_u16(b: &[u8], at: u64) -> Option<u16> {
    bytes_at(b, at).map(u16::from_be_bytes)
}

fn be_u24(b: &[u8], at: u64) -> Option<u32> {
    bytes_at::<3>(b, at).map(|x| u32::from_be_bytes([0, x[0], x[1], x[2]]))
}

fn be_u32(b: &[u8], at: u64) -> Option<u32> {
    bytes_at(b, at).map(u32::from_be_bytes)
}

fn be_u64(b: &[u8], at: u64) -> Option<u64> {
    bytes_at(b, at).map(u64::from_be_bytes)
}

fn le_u16(b: &[u8], at: u64) -> Option<u16> {
    bytes_at(b, at).map(u16::from_le_bytes)
}

fn le_u32(b: &[u8], at: u64) -> Option<u32> {
    bytes_at(b, at).map(u32::from_le_bytes)
}

/// `b[start..end]` for u64 bounds, None if they do not lie in `b`.
fn slice(b: &[u8], start: u64, end: u64) -> Option<&[u8]> {
    let start = usize::try_from(start).ok()?;
    let end = usize::try_from(end).ok()?;
    b.get(start..end)
}

/// A four-character code for messages (`stsc`, `LIST`), with anything
/// unprintable shown as `?`.
fn fourcc(code: &[u8]) -> String {
    code.iter()
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                char::from(c)
            } else {
                '?'
            }
        })
        .collect::<String>()
        .trim_end()
        .to_string()
}
