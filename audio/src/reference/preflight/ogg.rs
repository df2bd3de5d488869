//! Ogg: the packets symphonia-format-ogg 0.5.5 hands its codec mappers,
//! found the way it finds them, so each comment or picture header it parses
//! can be checked (`xiph.rs`) before it reserves buffers from their lengths.
//!
//! A packet may span pages, pages may be damaged, and which packets reach a
//! mapper depends on page order, sequence numbers and continuation flags; so
//! this follows symphonia's reader step by step:
//! - `PageReader::try_next_page`: find `OggS`, read the 27-byte header
//!   (version 0, no unknown flags), the segment table and the body, check
//!   the CRC; a bad header resumes after it, a bad CRC right after the
//!   capture pattern; running out of bytes ends the stream;
//! - `OggReader::start_new_physical_stream`: the identification packets of
//!   the first pages pick a mapper per serial (Vorbis, FLAC, Opus or none);
//!   then header pages until a stream has an audio packet, a bad page there
//!   ending the whole read; then data pages, skipping bad ones, a new first
//!   page starting a new physical stream;
//! - `LogicalStream::read_page`: sequence gaps and unexpected continuation
//!   pages drop partial packets; a partial packet past 16 MiB is an error.
//!
//! The end-of-stream probe symphonia also runs reads pages only for their
//! timestamps, never through a mapper.

use std::collections::BTreeMap;

use symphonia::core::checksum::Crc32;
use symphonia::core::io::Monitor;

use super::{xiph, ReferenceAudioError};

const FORMAT: &str = "OGG";

/// symphonia's limit on a packet assembled across pages.
const MAX_PACKET_LEN: usize = 16 * 1024 * 1024;

struct Page<'a> {
    serial: u32,
    sequence: u32,
    first: bool,
    continuation: bool,
    /// Lengths of the packets that end on this page.
    packets: Vec<usize>,
    body: &'a [u8],
}

impl<'a> Page<'a> {
    /// The packets that end on this page, and the start of a packet that
    /// continues on a later page (empty if none).
    fn split(&self) -> (Vec<&'a [u8]>, &'a [u8]) {
        let mut out = Vec::with_capacity(self.packets.len());
        let mut rest = self.body;
        for &len in &self.packets {
            let (p, r) = rest.split_at(len);
            out.push(p);
            rest = r;
        }
        (out, rest)
    }
}

enum Read<'a> {
    Page(Page<'a>, usize),
    /// A damaged page: where symphonia resumes looking.
    Damaged(usize),
    /// Out of bytes: symphonia's read fails and the stream ends.
    End,
}

/// symphonia's `PageReader::try_next_page` from `pos`.
fn next_page(bytes: &[u8], pos: usize) -> Read<'_> {
    let Some(found) = bytes
        .get(pos..)
        .and_then(|rest| rest.windows(4).position(|w| w == b"OggS"))
    else {
        return Read::End;
    };
    let at = pos + found;
    let Some(header) = bytes.get(at..at + 27) else {
        return Read::End;
    };
    // Version 0, and only the three defined flags.
    if header[4] != 0 || header[5] & 0xf8 != 0 {
        return Read::Damaged(at + 27);
    }
    let flags = header[5];
    let le32 =
        |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
    let (serial, sequence, crc) = (le32(14), le32(18), le32(22));
    let segments = usize::from(header[26]);
    let Some(table) = bytes.get(at + 27..at + 27 + segments) else {
        return Read::End;
    };
    let body_len: usize = table.iter().map(|&s| usize::from(s)).sum();
    let body_start = at + 27 + segments;
    let Some(body) = bytes.get(body_start..body_start + body_len) else {
        return Read::End;
    };
    // The CRC covers the page with its own field zeroed.
    let mut zeroed = [0u8; 27];
    zeroed.copy_from_slice(header);
    zeroed[22..26].fill(0);
    let mut check = Crc32::new(0);
    check.process_buf_bytes(&zeroed);
    check.process_buf_bytes(table);
    check.process_buf_bytes(body);
    if check.crc() != crc {
        return Read::Damaged(at + 4);
    }
    // A segment under 255 bytes ends a packet.
    let mut packets = Vec::new();
    let mut len = 0;
    for &s in table {
        len += usize::from(s);
        if s < 255 {
            packets.push(len);
            len = 0;
        }
    }
    Read::Page(
        Page {
            serial,
            sequence,
            first: flags & 0x02 != 0,
            continuation: flags & 0x01 != 0,
            packets,
            body,
        },
        body_start + body_len,
    )
}

#[derive(Clone, Copy)]
enum Mapper {
    Vorbis,
    Flac,
    Opus { need_comment: bool },
    Null,
}

struct Stream {
    mapper: Mapper,
    partial: Vec<u8>,
    last_sequence: Option<u32>,
    has_packets: bool,
}

/// Follows the Ogg reader from the `OggS` at `at`; Err for a comment or
/// picture header whose lengths run past its packet.
pub(super) fn check(bytes: &[u8], at: usize) -> Result<(), ReferenceAudioError> {
    // The first page must read cleanly and be marked first.
    let Read::Page(mut page, mut next) = next_page(bytes, at) else {
        return Ok(());
    };
    if !page.first {
        return Ok(());
    }
    let mut streams = BTreeMap::<u32, Stream>::new();
    'physical: loop {
        // Identification packets: one mapper per serial.
        streams.clear();
        while page.first {
            if let Some(&len) = page.packets.first() {
                let mapper = detect(&page.body[..len]);
                streams.insert(
                    page.serial,
                    Stream {
                        mapper,
                        partial: Vec::new(),
                        last_sequence: None,
                        has_packets: false,
                    },
                );
            }
            match next_page(bytes, next) {
                Read::Page(p, n) => (page, next) = (p, n),
                _ => return Ok(()), // symphonia's read fails here
            }
        }
        // Header pages, until some stream queues an audio packet.
        loop {
            if let Some(s) = streams.get_mut(&page.serial) {
                if !read_page(s, &page)? {
                    return Ok(());
                }
                if s.has_packets {
                    break;
                }
            }
            match next_page(bytes, next) {
                Read::Page(p, n) => (page, next) = (p, n),
                _ => return Ok(()),
            }
        }
        // Data pages, damaged ones skipped.
        loop {
            match next_page(bytes, next) {
                Read::Page(p, n) => (page, next) = (p, n),
                Read::Damaged(resume) => {
                    next = resume;
                    continue;
                }
                Read::End => return Ok(()),
            }
            if page.first {
                continue 'physical;
            }
            if let Some(s) = streams.get_mut(&page.serial) {
                if !read_page(s, &page)? {
                    return Ok(());
                }
            }
        }
    }
}

/// `mappings::detect`: the mapper for a logical stream's identification
/// packet.
fn detect(p: &[u8]) -> Mapper {
    if p.len() == 51
        && p.starts_with(b"\x7fFLAC\x01")
        && &p[9..13] == b"fLaC"
        && p[13] & 0x7f == 0
        && p[14..17] == [0, 0, 34]
    {
        return Mapper::Flac;
    }
    if p.len() == 30 && vorbis_ident(p) {
        return Mapper::Vorbis;
    }
    if p.len() >= 19 && p.starts_with(b"OpusHead") && p[8] <= 0x0f && opus_channels(p[9], p[18]) {
        return Mapper::Opus { need_comment: true };
    }
    Mapper::Null
}

/// A Vorbis identification header symphonia accepts: type 1, "vorbis",
/// version 0, channels and rate nonzero, block sizes 2^6..=2^13 in order,
/// framing bit set.
fn vorbis_ident(p: &[u8]) -> bool {
    let (bs0, bs1) = (p[28] & 0x0f, p[28] >> 4);
    p.starts_with(b"\x01vorbis")
        && p[7..11] == [0, 0, 0, 0]
        && p[11] != 0
        && p[12..16] != [0, 0, 0, 0]
        && (6..=13).contains(&bs0)
        && (6..=13).contains(&bs1)
        && bs0 <= bs1
        && p[29] == 1
}

/// The Opus channel counts and mapping families symphonia maps.
fn opus_channels(count: u8, family: u8) -> bool {
    match family {
        0 => count == 1 || count == 2,
        1 => (1..=8).contains(&count),
        _ => false,
    }
}

/// `LogicalStream::read_page`: hands each packet completed on `page` to the
/// stream's mapper. Ok(false) where symphonia's read fails (a packet past
/// its size limit).
fn read_page(s: &mut Stream, page: &Page<'_>) -> Result<bool, ReferenceAudioError> {
    if let Some(last) = s.last_sequence {
        if page.sequence < last || page.sequence - last > 1 {
            s.partial.clear();
        }
    }
    s.last_sequence = Some(page.sequence);
    let (packets, tail) = page.split();
    let mut packets = packets.into_iter();
    if !page.continuation {
        s.partial.clear();
    } else if s.partial.is_empty() {
        // A continuation with nothing to continue: its first packet is
        // incomplete and dropped, or the page ignored if none ends on it.
        if packets.next().is_none() {
            return Ok(true);
        }
    }
    for p in packets {
        if s.partial.is_empty() {
            map(s, p)?;
        } else {
            let mut whole = std::mem::take(&mut s.partial);
            whole.extend_from_slice(p);
            map(s, &whole)?;
        }
    }
    if !tail.is_empty() {
        if s.partial.len() + tail.len() > MAX_PACKET_LEN {
            return Ok(false);
        }
        s.partial.extend_from_slice(tail);
    }
    Ok(true)
}

/// A mapper's `map_packet`, as far as it reads comments and pictures.
fn map(s: &mut Stream, p: &[u8]) -> Result<(), ReferenceAudioError> {
    match s.mapper {
        Mapper::Vorbis => match p.first() {
            Some(t) if t & 1 == 0 => s.has_packets = true,
            Some(3) if p.get(1..7) == Some(b"vorbis") => {
                xiph::check_comments(&p[7..], FORMAT, "Vorbis comment header")?;
            }
            _ => {}
        },
        Mapper::Flac => match p.first() {
            Some(0xff) => s.has_packets = true,
            Some(0x00 | 0x80) | None => {}
            // A metadata block: its 4-byte header, then the block (the
            // comment and picture readers ignore the stated length).
            Some(t) if p.len() >= 4 => match t & 0x7f {
                4 => {
                    xiph::check_comments(&p[4..], FORMAT, "FLAC comment block")?;
                }
                6 => xiph::check_picture(&p[4..], FORMAT, "FLAC picture block")?,
                _ => {}
            },
            Some(_) => {}
        },
        Mapper::Opus { need_comment } => {
            if !need_comment {
                s.has_packets = true;
            } else if p.starts_with(b"OpusTags")
                && xiph::check_comments(&p[8..], FORMAT, "Opus comment header")?
            {
                s.mapper = Mapper::Opus {
                    need_comment: false,
                };
            }
        }
        Mapper::Null => {}
    }
    Ok(())
}
