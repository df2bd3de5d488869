//! Opus in WebM/Matroska, what Chrome's and Firefox's MediaRecorder write
//! by default (`audio/webm;codecs=opus`): the EBML elements are walked
//! here, over the bytes in memory, and each Opus packet decoded with
//! libopus (`opus.rs`, shared with Ogg Opus).
//!
//! Why not symphonia's Matroska reader (symphonia-format-mkv 0.5.5): it
//! reserves every element's and lace's stated size before reading it
//! (`read_boxed_slice_exact`), so a crafted upload stating 2^56 bytes would
//! abort the process, and bounding that from outside means mirroring its
//! parser. Here nothing is allocated from a header: elements and frames are
//! slices of the file, each size checked against the bytes that hold it.
//!
//! - The walk is linear: the masters it needs (Segment, Cluster, Tracks,
//!   TrackEntry, BlockGroup) are entered, every other element is skipped by
//!   its size. A recorder writes Segment and Cluster with an unknown size
//!   (it streams): entering them needs none. Any other element with an
//!   unknown size, or a size past the end of the file, is refused.
//! - The first TrackEntry with `CodecID` `A_OPUS` is the clip; its
//!   `CodecPrivate` is the `OpusHead` (pre-skip, channels, gain). A file
//!   with audio in another codec is refused naming it.
//! - Blocks (`SimpleBlock`, or `Block` in a `BlockGroup`) of that track are
//!   its packets, in file order, laced or not (Xiph, fixed, EBML lacing);
//!   the first `pre-skip` samples are dropped and a `DiscardPadding` (ns)
//!   trims the end, as the Matroska Opus mapping says.
//! - A Segment or Cluster whose stated size runs past the end of the file,
//!   or any element cut off, is refused as truncated. Known limit: a
//!   recording states no sizes for them, so one cut at an element boundary
//!   decodes to the audio that is there (as an MP3 without a Xing header).

use super::decoded::Decoded;
use super::opus::{damaged, parse_head, Packets, OPUS_RATE};
use super::ReferenceAudioError;

const FORMAT: &str = "WebM/Opus";

/// The EBML magic every Matroska and WebM file starts with.
const EBML: u32 = 0x1A45_DFA3;
const SEGMENT: u32 = 0x1853_8067;
const CLUSTER: u32 = 0x1F43_B675;
const TRACKS: u32 = 0x1654_AE6B;
const TRACK_ENTRY: u32 = 0xAE;
const TRACK_NUMBER: u32 = 0xD7;
const CODEC_ID: u32 = 0x86;
const CODEC_PRIVATE: u32 = 0x63A2;
const SIMPLE_BLOCK: u32 = 0xA3;
const BLOCK_GROUP: u32 = 0xA0;
const BLOCK: u32 = 0xA1;
const DISCARD_PADDING: u32 = 0x75A2;

/// Whether `bytes` starts as an EBML document (Matroska, WebM).
pub(super) fn is_ebml(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) == EBML
}

/// An element header: its id, where its data starts, and its size (None:
/// unknown, all ones).
struct Header {
    id: u32,
    data: usize,
    size: Option<u64>,
}

/// A variable-length integer at `at`: (its value with the length marker
/// removed, its length), or None where the bytes cannot hold one.
fn vint(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    let first = *bytes.get(at)?;
    let len = first.leading_zeros() as usize + 1;
    if len > 8 {
        return None;
    }
    let raw = bytes.get(at..at + len)?;
    let mut v = u64::from(first) & (0xFF >> len);
    for b in &raw[1..] {
        v = (v << 8) | u64::from(*b);
    }
    Some((v, len))
}

fn header(bytes: &[u8], at: usize) -> Result<Header, ReferenceAudioError> {
    let cut = || ReferenceAudioError::Truncated {
        format: FORMAT,
        part: format!("element header at byte {at}"),
        claimed: 12,
        available: bytes.len().saturating_sub(at) as u64,
    };
    // An id keeps its length marker: 1 to 4 bytes.
    let first = *bytes.get(at).ok_or_else(cut)?;
    let id_len = first.leading_zeros() as usize + 1;
    if id_len > 4 {
        return Err(damaged(format!(
            "byte {at} does not start an EBML element id"
        )));
    }
    let id_bytes = bytes.get(at..at + id_len).ok_or_else(cut)?;
    let id = id_bytes.iter().fold(0u32, |v, b| (v << 8) | u32::from(*b));
    if bytes.get(at + id_len) == Some(&0) {
        return Err(damaged(format!(
            "the element at byte {at} has an invalid size"
        )));
    }
    let (size, size_len) = vint(bytes, at + id_len).ok_or_else(cut)?;
    let unknown = size == (1u64 << (7 * size_len)) - 1;
    Ok(Header {
        id,
        data: at + id_len + size_len,
        size: (!unknown).then_some(size),
    })
}

/// An element's data, checked against the end of the file.
fn body<'a>(bytes: &'a [u8], h: &Header) -> Result<&'a [u8], ReferenceAudioError> {
    let Some(size) = h.size else {
        return Err(damaged(format!(
            "element 0x{:X} at byte {} has no stated size",
            h.id, h.data
        )));
    };
    let available = bytes.len().saturating_sub(h.data) as u64;
    if size > available {
        return Err(ReferenceAudioError::Truncated {
            format: FORMAT,
            part: format!("element 0x{:X}", h.id),
            claimed: size,
            available,
        });
    }
    Ok(&bytes[h.data..h.data + size as usize])
}

/// An unsigned integer element (at most 8 bytes).
fn uint(data: &[u8]) -> Option<u64> {
    (data.len() <= 8).then(|| data.iter().fold(0u64, |v, b| (v << 8) | u64::from(*b)))
}

/// The track being read from its `TrackEntry`.
#[derive(Default)]
struct Track {
    number: Option<u64>,
    codec: Option<String>,
    private: Option<(usize, usize)>,
}

/// The frames of one block's data (after its track number, timecode and
/// flags), as ranges of `data`.
fn frames(data: &[u8], lacing: u8) -> Result<Vec<(usize, usize)>, String> {
    if lacing == 0 {
        return Ok(vec![(0, data.len())]);
    }
    let count = usize::from(*data.first().ok_or("a laced block with no frame count")?) + 1;
    let mut at = 1;
    let mut sizes = Vec::with_capacity(count);
    match lacing {
        // Xiph: each size but the last as a run of 255s and a final byte.
        1 => {
            for _ in 0..count - 1 {
                let mut size = 0usize;
                loop {
                    let b = *data.get(at).ok_or("Xiph lacing runs past the block")?;
                    at += 1;
                    size += usize::from(b);
                    if b != 255 {
                        break;
                    }
                }
                sizes.push(size);
            }
        }
        // EBML: the first size, then signed differences.
        3 => {
            let (first, n) = vint(data, at).ok_or("EBML lacing runs past the block")?;
            at += n;
            let mut size = i128::from(first);
            sizes.push(first as usize);
            for _ in 1..count - 1 {
                let (raw, n) = vint(data, at).ok_or("EBML lacing runs past the block")?;
                at += n;
                let bias = (1i128 << (7 * n - 1)) - 1;
                size += i128::from(raw) - bias;
                if size < 0 || size > data.len() as i128 {
                    return Err(format!("an EBML-laced frame of {size} bytes"));
                }
                sizes.push(size as usize);
            }
        }
        // Fixed: equal sizes.
        _ => {
            let rest = data.len() - at;
            if !rest.is_multiple_of(count) {
                return Err(format!(
                    "{rest} bytes do not split into {count} equal frames"
                ));
            }
            sizes = vec![rest / count; count - 1];
        }
    }
    let mut out = Vec::with_capacity(count);
    for s in sizes {
        let end = at.checked_add(s).filter(|&e| e <= data.len());
        let end = end.ok_or_else(|| format!("a laced frame of {s} bytes runs past the block"))?;
        out.push((at, end));
        at = end;
    }
    out.push((at, data.len()));
    Ok(out)
}

/// Decodes a WebM/Matroska file's first Opus track, mixing to mono at
/// 48 kHz. Stops with [`TooLong`](ReferenceAudioError::TooLong) before
/// passing `max_secs`.
pub(super) fn decode(bytes: &[u8], max_secs: f64) -> Result<Decoded, ReferenceAudioError> {
    let mut at = 0usize;
    let mut track: Option<Track> = None;
    let mut entry: Option<Track> = None;
    let mut other_codec: Option<String> = None;
    let mut packets: Option<(u64, Packets, u8)> = None;
    let mut index = 0u64;
    let mut discard_ns: i64 = 0;
    while at < bytes.len() {
        let h = header(bytes, at)?;
        match h.id {
            // Entered: their children follow. One with a stated size must
            // fit in the file (a recording states none: it streams).
            SEGMENT | CLUSTER | TRACKS => {
                if h.size.is_some() {
                    body(bytes, &h)?;
                }
                at = h.data;
                continue;
            }
            // A group's DiscardPadding may come before or after its block.
            BLOCK_GROUP => {
                discard_ns = 0;
                at = h.data;
                continue;
            }
            TRACK_ENTRY => {
                body(bytes, &h)?;
                if let Some(done) = entry.take() {
                    settle(done, &mut track, &mut other_codec);
                }
                entry = Some(Track::default());
                at = h.data;
                continue;
            }
            _ => {}
        }
        let data = body(bytes, &h)?;
        let next = h.data + data.len();
        match h.id {
            TRACK_NUMBER => {
                if let Some(e) = &mut entry {
                    e.number = uint(data);
                }
            }
            CODEC_ID => {
                if let Some(e) = &mut entry {
                    e.codec = Some(String::from_utf8_lossy(data).trim_end_matches('\0').into());
                }
            }
            CODEC_PRIVATE => {
                if let Some(e) = &mut entry {
                    e.private = Some((h.data, next));
                }
            }
            // Signed, big-endian, in nanoseconds.
            DISCARD_PADDING if (1..=8).contains(&data.len()) => {
                let shift = 64 - 8 * data.len() as u32;
                discard_ns = ((uint(data).unwrap_or(0) << shift) as i64) >> shift;
            }
            SIMPLE_BLOCK | BLOCK => {
                if let Some(done) = entry.take() {
                    settle(done, &mut track, &mut other_codec);
                }
                let Some(t) = &track else {
                    return Err(match &other_codec {
                        Some(c) => unsupported(c),
                        None => damaged("a block comes before any Opus track".into()),
                    });
                };
                if packets.is_none() {
                    let (from, to) = t.private.ok_or_else(|| {
                        damaged("its Opus track has no CodecPrivate (OpusHead)".into())
                    })?;
                    let head = parse_head(&bytes[from..to], FORMAT)?;
                    let channels = head.channels;
                    let p = Packets::new(&head, max_secs, FORMAT)?;
                    packets = Some((t.number.unwrap_or(1), p, channels));
                }
                let (number, p, _) = packets.as_mut().expect("made above");
                let (track_no, n) = vint(data, 0)
                    .ok_or_else(|| damaged("a block without a track number".into()))?;
                if track_no == *number {
                    let flags = *data
                        .get(n + 2)
                        .ok_or_else(|| damaged("a block shorter than its header".into()))?;
                    let payload = &data[n + 3..];
                    let laced = frames(payload, (flags >> 1) & 3)
                        .map_err(|e| damaged(format!("block at byte {at}: {e}")))?;
                    for (from, to) in laced {
                        index += 1;
                        p.push(&payload[from..to], index)?;
                    }
                    // A DiscardPadding belongs to its group's block; only
                    // the last block's trims the clip.
                    if h.id == SIMPLE_BLOCK {
                        discard_ns = 0;
                    }
                }
            }
            _ => {}
        }
        at = next;
    }
    if let Some(done) = entry.take() {
        settle(done, &mut track, &mut other_codec);
    }
    let Some((_, p, channels)) = packets else {
        return Err(match (&track, &other_codec) {
            (None, Some(c)) => unsupported(c),
            (None, None) => ReferenceAudioError::NoAudioTrack,
            (Some(_), _) => damaged("its Opus track holds no audio".into()),
        });
    };
    let mut mono = p.mono;
    if discard_ns > 0 {
        let drop = (discard_ns as u128 * u128::from(OPUS_RATE) / 1_000_000_000) as usize;
        mono.truncate(mono.len().saturating_sub(drop));
    }
    Ok(Decoded {
        mono,
        rate: OPUS_RATE,
        channels: u16::from(channels),
        format: FORMAT,
    })
}

/// A finished `TrackEntry`: the first Opus one is the clip; another
/// codec is remembered for the refusal.
fn settle(t: Track, track: &mut Option<Track>, other: &mut Option<String>) {
    match t.codec.as_deref() {
        Some("A_OPUS") if track.is_none() => *track = Some(t),
        Some(c) if c.starts_with("A_") && other.is_none() => *other = Some(c.to_string()),
        _ => {}
    }
}

fn unsupported(codec: &str) -> ReferenceAudioError {
    ReferenceAudioError::Unsupported {
        what: format!("WebM/Matroska audio in {codec} (only Opus is read from WebM)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vints_and_unknown_sizes() {
        assert_eq!(vint(&[0x81], 0), Some((1, 1)));
        assert_eq!(vint(&[0x40, 0x02], 0), Some((2, 2)));
        assert_eq!(vint(&[0x00], 0), None);
        let h = header(
            &[
                0x18, 0x53, 0x80, 0x67, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            ],
            0,
        )
        .unwrap();
        assert_eq!((h.id, h.data, h.size), (SEGMENT, 12, None));
    }

    #[test]
    fn laced_frames_stay_inside_their_block() {
        // Xiph: 3 frames of 2, 1 and the rest.
        let data = [2u8, 2, 1, 9, 9, 8, 7, 7, 7];
        assert_eq!(frames(&data, 1).unwrap(), [(3, 5), (5, 6), (6, 9)]);
        // Fixed: 2 equal frames.
        assert_eq!(frames(&[1u8, 5, 5, 6, 6], 2).unwrap(), [(1, 3), (3, 5)]);
        assert!(frames(&[1u8, 5, 5, 6], 2).is_err());
        // A Xiph size past the block is refused, not sliced.
        assert!(frames(&[1u8, 255, 255, 3, 1], 1).is_err());
        // EBML: a first size of 2^56 - 2 is refused.
        let big = [1u8, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE, 0];
        assert!(frames(&big, 3).is_err());
    }
}
