//! Xiph structures shared by FLAC and Ogg: Vorbis comments, FLAC pictures,
//! and the Vorbis setup header's codebooks.
//!
//! What symphonia 0.5.5 trusts in them:
//! - a Vorbis comment (`symphonia-metadata/src/vorbis.rs`): each comment is
//!   read into a buffer of its stated 32-bit length; a comment named
//!   METADATA_BLOCK_PICTURE is base64 that decodes to a FLAC picture;
//! - a FLAC picture (`flac.rs` there): its MIME type, description and
//!   image are read into buffers of their stated 32-bit lengths;
//! - a Vorbis codebook (`symphonia-codec-vorbis/src/codebook.rs`): up to
//!   2^24 entries described in a few bits (all one length), each costing
//!   the decoder ~10 bytes plus lookup-table blocks, and a lookup table of
//!   entries × dimensions floats (type 1 reads no data per value); 256 of
//!   them ask for tens of GiB from a 4 KB file.

use super::ReferenceAudioError;

/// Checks a Vorbis comment block (vendor string, comment count, comments,
/// each a 32-bit little-endian length then that many bytes) in `data`, as
/// symphonia reads it. Returns whether symphonia's read succeeds (Ogg Opus
/// takes its comment header only once it does); Err for a length past the
/// end of `data`.
pub(super) fn check_comments(
    data: &[u8],
    format: &'static str,
    part: &str,
) -> Result<bool, ReferenceAudioError> {
    let mut r = Reader { data, pos: 0 };
    let Some(vendor) = r.le_u32() else {
        return Ok(false);
    };
    // The vendor string is skipped, not read: past the end is an error.
    if !r.skip(u64::from(vendor)) {
        return Ok(false);
    }
    let Some(count) = r.le_u32() else {
        return Ok(false);
    };
    for i in 0..count {
        let Some(len) = r.le_u32() else {
            return Ok(false);
        };
        let Some(comment) = r.take(u64::from(len)) else {
            return Err(ReferenceAudioError::SizeOverrun {
                format,
                part: format!("comment {i}"),
                claimed: u64::from(len),
                within: format!("its {part}"),
                available: r.left(),
            });
        };
        picture_comment(comment, format)?;
    }
    Ok(true)
}

/// A comment `METADATA_BLOCK_PICTURE=<base64>` is decoded and read as a
/// picture; symphonia only warns when that fails, but it has reserved the
/// buffers by then.
fn picture_comment(comment: &[u8], format: &'static str) -> Result<(), ReferenceAudioError> {
    // symphonia matches the lossily decoded key, lower-cased, exactly.
    let text = String::from_utf8_lossy(comment);
    let Some((key, value)) = text.split_once('=') else {
        return Ok(());
    };
    if key.to_lowercase() != "metadata_block_picture" {
        return Ok(());
    }
    if let Some(picture) = base64_decode(value.as_bytes()) {
        check_picture(&picture, format, "METADATA_BLOCK_PICTURE comment")?;
    }
    Ok(())
}

/// Checks a FLAC picture block's three lengths against `data`.
pub(super) fn check_picture(
    data: &[u8],
    format: &'static str,
    part: &str,
) -> Result<(), ReferenceAudioError> {
    let mut r = Reader { data, pos: 0 };
    // Picture type, then the MIME type and the description by length, then
    // width, height, depth and palette size, then the image by length.
    let fields: [(&str, u64); 3] = [("MIME type", 0), ("description", 0), ("image", 16)];
    if !r.skip(4) {
        return Ok(());
    }
    for (name, skip_before) in fields {
        if !r.skip(skip_before) {
            return Ok(());
        }
        let Some(len) = r.be_u32() else {
            return Ok(());
        };
        if r.take(u64::from(len)).is_none() {
            return Err(ReferenceAudioError::SizeOverrun {
                format,
                part: format!("{part}'s {name}"),
                claimed: u64::from(len),
                within: format!("its {part}"),
                available: r.left(),
            });
        }
    }
    Ok(())
}

/// symphonia's base64 decoder (RFC 4648, trailing `=` trimmed, a final
/// group of 2 or 3 symbols decoded, any other symbol refused), so the
/// bytes checked are the bytes it reads.
fn base64_decode(encoded: &[u8]) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u8> {
        match c {
            b'A'..=b'Z' => Some(c - b'A'),
            b'a'..=b'z' => Some(c - b'a' + 26),
            b'0'..=b'9' => Some(c - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let trimmed = encoded.len() - encoded.iter().rev().take_while(|&&c| c == b'=').count();
    let encoded = &encoded[..trimmed];
    let mut out = Vec::with_capacity(encoded.len() / 4 * 3 + 2);
    let mut chunks = encoded.chunks_exact(4);
    for c in &mut chunks {
        let v = [value(c[0])?, value(c[1])?, value(c[2])?, value(c[3])?];
        out.push((v[0] << 2) | (v[1] >> 4));
        out.push((v[1] << 4) | (v[2] >> 2));
        out.push((v[2] << 6) | v[3]);
    }
    match *chunks.remainder() {
        [] => {}
        [_] => return None,
        [a, b] => out.push((value(a)? << 2) | (value(b)? >> 4)),
        [a, b, c, ..] => {
            let (a, b, c) = (value(a)?, value(b)?, value(c)?);
            out.push((a << 2) | (b >> 4));
            out.push((b << 4) | (c >> 2));
        }
    }
    Some(out)
}

/// Most codebook entries a Vorbis setup header may declare in all. The
/// decoder keeps ~10 bytes per entry plus 2 KB lookup blocks that grow with
/// them; libvorbis's largest setups use a few tens of thousands (its 8-
/// dimensional residue books have 3^8 = 6,561 entries each), so 2^18 leaves
/// room and bounds the decoder at a few hundred MB in the worst tree shape.
pub(super) const MAX_VORBIS_CODEBOOK_ENTRIES: u64 = 1 << 18;

/// Most vector-quantisation values (entries × dimensions, 4 bytes each in
/// the decoder) the codebooks may declare in all: 2^21 (8 MiB), where the
/// 6,561-entry 8-dimensional books take 52,488 each.
pub(super) const MAX_VORBIS_VQ_VALUES: u64 = 1 << 21;

/// Checks the codebooks of a Vorbis decoder's extra data (the 30-byte
/// identification header, then the setup header), before the decoder is
/// made from it. Err for a setup whose codebooks exceed the budgets above;
/// anything the decoder refuses by itself is let through to it.
pub(in crate::reference) fn check_vorbis_setup(extra: &[u8]) -> Result<(), ReferenceAudioError> {
    let Some(setup) = extra.get(30..) else {
        return Ok(());
    };
    if setup.get(..7) != Some(b"\x05vorbis") {
        return Ok(());
    }
    let mut bits = Bits {
        data: &setup[7..],
        pos: 0,
    };
    let Some(count) = bits.read(8) else {
        return Ok(());
    };
    let mut totals = Totals::default();
    for _ in 0..=count {
        if codebook(&mut bits, &mut totals)?.is_none() {
            return Ok(()); // the decoder refuses it
        }
    }
    Ok(())
}

/// Running totals over a setup's codebooks, checked as each count is read:
/// the decoder reserves for a codebook's entries before reading their
/// lengths, and for its lookup table right after reading its values.
#[derive(Default)]
struct Totals {
    entries: u64,
    vq_values: u64,
}

impl Totals {
    fn add_entries(&mut self, n: u64) -> Result<(), ReferenceAudioError> {
        self.entries += n;
        if self.entries > MAX_VORBIS_CODEBOOK_ENTRIES {
            return Err(budget(
                "Vorbis codebook entries",
                self.entries,
                MAX_VORBIS_CODEBOOK_ENTRIES,
            ));
        }
        Ok(())
    }

    fn add_vq_values(&mut self, n: u64) -> Result<(), ReferenceAudioError> {
        self.vq_values += n;
        if self.vq_values > MAX_VORBIS_VQ_VALUES {
            return Err(budget(
                "Vorbis codebook lookup values",
                self.vq_values,
                MAX_VORBIS_VQ_VALUES,
            ));
        }
        Ok(())
    }
}

fn budget(field: &str, value: u64, max: u64) -> ReferenceAudioError {
    ReferenceAudioError::BadField {
        format: "OGG",
        field: format!("setup header's count of {field} so far"),
        value,
        expected: format!("past the {max} this decoder allows (real encoders use a few thousand)"),
    }
}

/// One codebook, read as symphonia's `VorbisCodebook::read` reads it, up to
/// the end of its lookup table, adding to `totals`. Ok(None) where that
/// read fails.
fn codebook(bits: &mut Bits<'_>, totals: &mut Totals) -> Result<Option<()>, ReferenceAudioError> {
    let Some(header) = (|| Some((bits.read(24)?, bits.read(16)?, bits.read(24)?)))() else {
        return Ok(None);
    };
    let (sync, dimensions, entries) = header;
    if sync != 0x56_4342 {
        return Ok(None);
    }
    totals.add_entries(u64::from(entries))?;
    if code_lengths(bits, entries).is_none() {
        return Ok(None);
    }
    let Some(kind) = bits.read(4) else {
        return Ok(None);
    };
    match kind {
        0 => Ok(Some(())),
        1 | 2 => {
            totals.add_vq_values(u64::from(entries) * u64::from(dimensions))?;
            // Minimum and delta (32-bit floats), value width, sequence flag,
            // then the values.
            let mut lookup = || {
                bits.skip(64)?;
                let value_bits = bits.read(4)? + 1;
                bits.skip(1)?;
                let values = if kind == 1 {
                    lookup1_values(entries, dimensions)?
                } else {
                    u64::from(entries) * u64::from(dimensions)
                };
                bits.skip(values * u64::from(value_bits))
            };
            Ok(lookup())
        }
        _ => Ok(None),
    }
}

/// Steps over a codebook's codeword lengths.
fn code_lengths(bits: &mut Bits<'_>, entries: u32) -> Option<()> {
    if bits.read(1)? == 0 {
        // Not length-ordered: sparse (a used flag, then 5 bits, per entry)
        // or dense (5 bits per entry).
        if bits.read(1)? == 1 {
            for _ in 0..entries {
                if bits.read(1)? == 1 {
                    bits.skip(5)?;
                }
            }
            Some(())
        } else {
            bits.skip(u64::from(entries) * 5)
        }
    } else {
        // Length-ordered: a starting length, then runs of entries per
        // length, each count in ilog(entries left) bits.
        bits.skip(5)?;
        let mut done = 0u32;
        while done < entries {
            let run = bits.read(ilog(entries - done))?;
            done = done.checked_add(run)?;
        }
        (done == entries).then_some(())
    }
}

/// The largest v with v^dimensions <= entries (Vorbis I, 9.2.3); None
/// where symphonia's floating-point version trips its own asserts.
fn lookup1_values(entries: u32, dimensions: u32) -> Option<u64> {
    if dimensions == 0 {
        return None;
    }
    let fits = |v: u64| {
        (0..dimensions)
            .try_fold(1u64, |acc, _| {
                acc.checked_mul(v).filter(|&p| p <= u64::from(entries))
            })
            .is_some()
    };
    // v^d grows with v and 0^d = 0 always fits: binary search for the
    // largest fit in 0..=entries (24 steps at most).
    let (mut lo, mut hi) = (0u64, u64::from(entries));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

/// Vorbis I's ilog: the position of the highest set bit (0 for 0).
fn ilog(x: u32) -> u32 {
    32 - x.leading_zeros()
}

/// Reads least-significant bit first, as Vorbis packs its headers.
struct Bits<'a> {
    data: &'a [u8],
    pos: u64,
}

impl Bits<'_> {
    fn read(&mut self, n: u32) -> Option<u32> {
        if self.pos + u64::from(n) > self.data.len() as u64 * 8 {
            return None;
        }
        let mut out = 0u32;
        for i in 0..n {
            let p = self.pos + u64::from(i);
            let byte = self.data[(p / 8) as usize];
            out |= u32::from((byte >> (p % 8)) & 1) << i;
        }
        self.pos += u64::from(n);
        Some(out)
    }

    fn skip(&mut self, n: u64) -> Option<()> {
        if self.pos.checked_add(n)? > self.data.len() as u64 * 8 {
            return None;
        }
        self.pos += n;
        Some(())
    }
}

/// Byte reads within one structure.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> u64 {
        (self.data.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        if n > self.left() {
            return None;
        }
        let start = self.pos;
        self.pos += n as usize;
        Some(&self.data[start..self.pos])
    }

    fn skip(&mut self, n: u64) -> bool {
        self.take(n).is_some()
    }

    fn le_u32(&mut self) -> Option<u32> {
        self.take(4)?.try_into().ok().map(u32::from_le_bytes)
    }

    fn be_u32(&mut self) -> Option<u32> {
        self.take(4)?.try_into().ok().map(u32::from_be_bytes)
    }
}
