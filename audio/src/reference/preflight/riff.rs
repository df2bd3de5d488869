//! WAV: the chunks before `data`, walked as symphonia-format-riff 0.5.5's
//! `ChunksReader` walks them, and the `fmt ` fields it trusts.
//!
//! What it trusts:
//! - a chunk's length against its RIFF parent's stated length only, which a
//!   WAV written to a pipe sets to 0xFFFF_FFFF ("unknown"): an INFO tag is
//!   then read into a buffer of up to 4 GiB. Every chunk before `data` must
//!   fit in the file (`data` itself may be cut short: the decoder reports
//!   that as a truncated file, and reads it in bounded packets);
//! - the sample rate, which becomes a time base denominator (0 panics);
//! - the channel count and `block_align`, the frame size: a packet is 1,152
//!   frames of `block_align` bytes, so 65,535 would mean 75 MB per packet;
//!   and the ADPCM frame counts subtract from `block_align` (a panic when it
//!   is small). Only the encodings this crate decodes are let through.

use super::{le_u16, le_u32, ReferenceAudioError};
use crate::reference::{check_channels, check_rate};

const FORMAT: &str = "WAV";

/// Walks the chunks of the RIFF file whose marker is at `at`.
pub(super) fn check(bytes: &[u8], at: usize) -> Result<(), ReferenceAudioError> {
    let at = at as u64;
    let len = bytes.len() as u64;
    let Some(riff_len) = le_u32(bytes, at + 4) else {
        return Ok(());
    };
    if super::bytes_at::<4>(bytes, at + 8) != Some(*b"WAVE") {
        return Ok(()); // symphonia refuses other RIFF forms
    }
    let riff_len = u64::from(riff_len);
    // symphonia counts from after the form type against the RIFF length.
    let mut consumed = 0u64;
    let mut pos = at + 12;
    loop {
        if consumed & 1 == 1 {
            consumed += 1; // chunks are 2-byte aligned
            pos += 1;
        }
        if consumed + 8 > riff_len {
            return Ok(()); // no data chunk: symphonia refuses the file
        }
        let (Some(tag), Some(chunk_len)) =
            (super::bytes_at::<4>(bytes, pos), le_u32(bytes, pos + 4))
        else {
            return Ok(()); // the header is cut off: a read error
        };
        consumed += 8;
        pos += 8;
        let chunk_len = u64::from(chunk_len);
        let piped = riff_len == chunk_len && chunk_len == u64::from(u32::MAX);
        if riff_len - consumed < chunk_len && !piped {
            return Ok(()); // symphonia refuses a chunk past its parent
        }
        if &tag == b"data" {
            return Ok(());
        }
        if chunk_len > len.saturating_sub(pos) {
            return Err(ReferenceAudioError::Truncated {
                format: FORMAT,
                part: format!("'{}' chunk", super::fourcc(&tag)),
                claimed: chunk_len,
                available: len.saturating_sub(pos),
            });
        }
        if &tag == b"fmt " {
            fmt(bytes, pos, chunk_len)?;
        }
        consumed = consumed.saturating_add(chunk_len);
        pos += chunk_len;
    }
}

/// The encodings symphonia's WAV reader and this crate's decoders both
/// read: integer PCM, IEEE float, A-law, µ-law, and the extensible header
/// over them. ADPCM (2, 0x11) has no decoder built here.
const PCM: u16 = 0x0001;
const FLOAT: u16 = 0x0003;
const ALAW: u16 = 0x0006;
const MULAW: u16 = 0x0007;
const EXTENSIBLE: u16 = 0xfffe;

fn fmt(bytes: &[u8], body: u64, chunk_len: u64) -> Result<(), ReferenceAudioError> {
    if chunk_len < 16 {
        return Ok(()); // symphonia refuses a short fmt chunk
    }
    let field = |at: u64| le_u16(bytes, body + at).unwrap_or(0);
    let encoding = field(0);
    let channels = field(2);
    let rate = le_u32(bytes, body + 4).unwrap_or(0);
    let block_align = field(12);
    let bits = field(14);
    // The stored width of one sample: A-law and µ-law are 8-bit codes.
    let width = match encoding {
        PCM | FLOAT | EXTENSIBLE => bits,
        ALAW | MULAW => 8,
        other => {
            let name = match other {
                0x0002 => " (Microsoft ADPCM)",
                0x0011 => " (IMA ADPCM)",
                0x0055 => " (MP3 in WAV)",
                _ => "",
            };
            return Err(ReferenceAudioError::Unsupported {
                what: format!("WAV encoding {other:#06x}{name}"),
            });
        }
    };
    check_channels(channels)?;
    check_rate(rate)?;
    // Widths that are not whole bytes are refused by symphonia itself.
    if width > 0 && width % 8 == 0 {
        let frame = u32::from(channels) * u32::from(width / 8);
        if u32::from(block_align) != frame {
            return Err(ReferenceAudioError::BadField {
                format: FORMAT,
                field: "fmt block_align".into(),
                value: u64::from(block_align),
                expected: format!(
                    "{channels} channel(s) of {width}-bit samples take {frame} bytes per frame"
                ),
            });
        }
    }
    Ok(())
}
