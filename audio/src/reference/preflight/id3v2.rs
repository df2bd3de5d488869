//! ID3v2 tags, which symphonia's probe reads wherever it meets one ahead of
//! the audio (symphonia-metadata 0.5.5, `id3v2/`).
//!
//! The tag is read through a window of its stated size, but each frame's
//! body is read into a buffer of the frame's stated size first: 32 bits in
//! ID3v2.3 (up to 4 GiB). Where the frames lie cannot be told from the
//! bytes alone: under whole-tag unsynchronisation (2.2, 2.3) symphonia
//! steps over a frame it has a parser for by its decoded size and over any
//! other by its raw size. A reference clip's tags are never used, so the
//! tag is blanked instead of walked: its flags and body are zeroed, which
//! symphonia reads as a tag of padding of the same size, and the probe
//! resumes after it as before. The tag itself must fit in the file.

use super::{slice, u8_at, ReferenceAudioError};

/// The tag's container is not known yet: messages name "the file".
const FORMAT: &str = "file";

/// Checks and blanks the tag whose `ID3` marker is at `at`. Returns where
/// the probe resumes (after the tag), or None where symphonia's reader
/// refuses the header (and the probe fails with it).
pub(super) fn check(bytes: &mut [u8], at: usize) -> Result<Option<usize>, ReferenceAudioError> {
    let pos = at as u64;
    let (Some(major), Some(minor), Some(flags), Some(size)) = (
        u8_at(bytes, pos + 3),
        u8_at(bytes, pos + 4),
        u8_at(bytes, pos + 5),
        syncsafe(bytes, pos + 6),
    ) else {
        return Ok(None);
    };
    if major == 0xff || minor == 0xff || !(2..=4).contains(&major) {
        return Ok(None);
    }
    if major == 2 && flags & 0x40 != 0 {
        return Ok(None); // ID3v2.2 compression: unsupported
    }
    let body = pos + 10;
    let end = body + u64::from(size);
    if slice(bytes, body, end).is_none() {
        return Err(ReferenceAudioError::Truncated {
            format: FORMAT,
            part: "ID3v2 tag".into(),
            claimed: u64::from(size),
            available: (bytes.len() as u64).saturating_sub(body),
        });
    }
    // In range: checked just above.
    let (Ok(body), Ok(end)) = (usize::try_from(body), usize::try_from(end)) else {
        return Ok(None);
    };
    // No unsynchronisation, extended header or footer; frames all padding.
    bytes[at + 5] = 0;
    bytes[body..end].fill(0);
    Ok(Some(end))
}

/// A 28-bit syncsafe integer: four bytes of 7 bits each.
fn syncsafe(b: &[u8], at: u64) -> Option<u32> {
    let x = super::bytes_at::<4>(b, at)?;
    Some(
        x.iter()
            .fold(0u32, |acc, &c| (acc << 7) | u32::from(c & 0x7f)),
    )
}
