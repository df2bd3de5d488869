//! FLAC: the metadata blocks symphonia-bundle-flac 0.5.5 reads before the
//! first frame.
//!
//! Each block is read through a window of its stated 24-bit length, but a
//! buffer is reserved before the window is consulted: a PICTURE's MIME
//! type, description and image, and each Vorbis comment, are read into
//! buffers of their stated 32-bit lengths (up to 4 GiB apiece). So each
//! block must fit in the file, and every length inside a comment or
//! picture block in the block (`xiph.rs`). STREAMINFO's rate is refused by
//! name when out of range, ahead of the decoder.

use super::{be_u24, slice, u8_at, xiph, ReferenceAudioError};
use crate::reference::check_rate;

const FORMAT: &str = "FLAC";

/// STREAMINFO's fixed length.
const STREAMINFO_LEN: u64 = 34;

/// Walks the metadata blocks after the `fLaC` marker at `at`.
pub(super) fn check(bytes: &[u8], at: usize) -> Result<(), ReferenceAudioError> {
    let len = bytes.len() as u64;
    let mut pos = at as u64 + 4;
    loop {
        let (Some(head), Some(block_len)) = (u8_at(bytes, pos), be_u24(bytes, pos + 1)) else {
            return Ok(()); // the header is cut off: a read error
        };
        let block_len = u64::from(block_len);
        let body = pos + 4;
        let name = block_name(head & 0x7f);
        let Some(block) = slice(bytes, body, body + block_len) else {
            return Err(ReferenceAudioError::Truncated {
                format: FORMAT,
                part: format!("{name} block"),
                claimed: block_len,
                available: len.saturating_sub(body),
            });
        };
        match head & 0x7f {
            0 if block_len == STREAMINFO_LEN => {
                // Bytes 10-12 start with the 20-bit sample rate.
                let rate = be_u24(block, 10).unwrap_or(0) >> 4;
                check_rate(rate)?;
            }
            4 => {
                xiph::check_comments(block, FORMAT, "VORBIS_COMMENT block")?;
            }
            6 => {
                xiph::check_picture(block, FORMAT, "PICTURE block")?;
            }
            _ => {}
        }
        if head & 0x80 != 0 {
            return Ok(()); // the last block: frames follow
        }
        pos = body + block_len;
    }
}

fn block_name(kind: u8) -> String {
    match kind {
        0 => "STREAMINFO".into(),
        1 => "PADDING".into(),
        2 => "APPLICATION".into(),
        3 => "SEEKTABLE".into(),
        4 => "VORBIS_COMMENT".into(),
        5 => "CUESHEET".into(),
        6 => "PICTURE".into(),
        k => format!("type-{k} metadata"),
    }
}
