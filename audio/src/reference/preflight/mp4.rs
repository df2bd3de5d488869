//! MP4/M4A: the boxes symphonia's isomp4 reader parses, walked the way its
//! `AtomIterator` walks them.
//!
//! What it trusts (symphonia-format-isomp4 0.5.5), and so what is checked:
//! - every box's size, against its parent and the file (a child may not run
//!   past its parent; a header cut by its parent's end would be read from
//!   the next box's bytes);
//! - sample tables, each `Vec::with_capacity(count)` before one entry is
//!   read: `stts` (8-byte entries), `stsc` (12, kept as 16: the abort of
//!   issue 28), `stsz` (4), `stco` (4), `co64` (8); and, though it skips
//!   them today, `ctts`, `stss`, `stz2`; `elst` (12 or 20), `sidx` (12),
//!   `trun` (per-sample fields from its flags);
//! - sample sizes (`stsz`, `trun`, `tfhd` and `trex` defaults): each packet
//!   is read with a buffer of its stated size, so none may exceed the file;
//! - payloads it subtracts a fixed length from (`hdlr` 24, `meta` 4, `data`
//!   8, `name`/`mean` 4, `esds` 4, an audio sample entry 28/44/64), where a
//!   short box would wrap to a ~2^64-byte read;
//! - `esds` descriptor lengths: the decoder config's payload is read into a
//!   buffer of its stated length (up to 256 MiB);
//! - `mdhd`'s timescale, the track's time base denominator (0 panics).

use super::{be_u16, be_u32, be_u64, fourcc, u8_at, ReferenceAudioError};

const FORMAT: &str = "M4A";

/// One box: its type, where its header starts, where its payload starts,
/// and its end (exclusive), all as file offsets.
struct Mp4Box {
    kind: [u8; 4],
    start: u64,
    body: u64,
    end: u64,
}

impl Mp4Box {
    fn name(&self) -> String {
        format!("{} box", fourcc(&self.kind))
    }

    fn payload(&self) -> u64 {
        self.end - self.body
    }
}

/// Top-level boxes symphonia parses; a size of 0 ("to the end of the
/// file") is for a final `mdat` only, and would give these an empty
/// payload that symphonia then reads past.
const PARSED_TOP_LEVEL: [&[u8; 4]; 5] = [b"ftyp", b"moov", b"meta", b"sidx", b"moof"];

/// Audio sample entries symphonia reads the fields of (`stsd.rs`).
const AUDIO_ENTRIES: [&[u8; 4]; 16] = [
    b"mp4a", b"alac", b"fLaC", b"Opus", b".mp3", b"lpcm", b"wave", b"alaw", b"ulaw", b"raw ",
    b"sowt", b"twos", b"in24", b"in32", b"fl32", b"fl64",
];

/// `ilst` children symphonia reads as tags (`ilst.rs`): their `data`,
/// `name` and `mean` children are read into buffers of their stated size.
const PARSED_TAGS: [&[u8; 4]; 42] = [
    b"rtng", b"aART", b"\xa9alb", b"\xa9ART", b"catg", b"\xa9cmt", b"cpil", b"\xa9wrt", b"cprt",
    b"covr", b"\xa9gen", b"\xa9day", b"desc", b"disk", b"\xa9enc", b"\xa9too", b"gnre", b"\xa9grp",
    b"egid", b"keyw", b"ldes", b"\xa9lyr", b"stik", b"ownr", b"pcst", b"purd", b"rate", b"soaa",
    b"soal", b"soar", b"soco", b"sonm", b"tmpo", b"trkn", b"\xa9nam", b"tven", b"tves", b"tvnn",
    b"tvsn", b"tvsh", b"purl", b"----",
];

/// Walks the file from `start` (the first box) to its end.
pub(super) fn check(bytes: &[u8], start: usize) -> Result<(), ReferenceAudioError> {
    let cx = Walk {
        bytes,
        len: bytes.len() as u64,
    };
    for b in cx.children(start as u64, cx.len, None)? {
        match &b.kind {
            b"moov" => cx.moov(&b)?,
            b"meta" => cx.meta(&b)?,
            b"moof" => cx.moof(&b)?,
            b"sidx" => cx.sidx(&b)?,
            _ => {}
        }
    }
    // symphonia then looks for the first mdat or moof from the start of the
    // file, not from the first box, and reads any moof it meets from there.
    if start > 0 {
        for b in cx.children(0, cx.len, None)? {
            if &b.kind == b"moof" {
                cx.moof(&b)?;
            }
        }
    }
    Ok(())
}

struct Walk<'a> {
    bytes: &'a [u8],
    len: u64,
}

impl Walk<'_> {
    /// The boxes in `[start, end)`, read as symphonia's `AtomIterator`
    /// reads them: a header, then a jump by the stated size. `parent` is
    /// None at the top level, where the bound is the file.
    fn children(
        &self,
        start: u64,
        end: u64,
        parent: Option<&Mp4Box>,
    ) -> Result<Vec<Mp4Box>, ReferenceAudioError> {
        let mut out = Vec::new();
        let mut pos = start;
        while pos < end {
            let b = self.box_at(pos, end, parent)?;
            pos = b.end;
            out.push(b);
        }
        Ok(out)
    }

    /// The box whose header starts at `pos`, which must lie (header and
    /// all) in `[pos, end)`.
    fn box_at(
        &self,
        pos: u64,
        end: u64,
        parent: Option<&Mp4Box>,
    ) -> Result<Mp4Box, ReferenceAudioError> {
        let left = end - pos;
        let (Some(size32), Some(kind)) = (
            be_u32(self.bytes, pos),
            super::bytes_at(self.bytes, pos + 4),
        ) else {
            return Err(self.overrun("box header".into(), 8, left, parent));
        };
        if left < 8 {
            return Err(self.overrun("box header".into(), 8, left, parent));
        }
        let name = format!("{} box", fourcc(&kind));
        let (size, header) = match size32 {
            0 => {
                if parent.is_some() || PARSED_TOP_LEVEL.contains(&&kind) {
                    return Err(ReferenceAudioError::BadField {
                        format: FORMAT,
                        field: format!("{name} size"),
                        value: 0,
                        expected: "only a final top-level mdat box may leave its size open".into(),
                    });
                }
                (left, 8)
            }
            1 => {
                let Some(large) = be_u64(self.bytes, pos + 8).filter(|_| left >= 16) else {
                    return Err(self.overrun(format!("{name}'s 64-bit size"), 16, left, parent));
                };
                if large < 16 {
                    return Err(ReferenceAudioError::BadField {
                        format: FORMAT,
                        field: format!("{name} 64-bit size"),
                        value: large,
                        expected: "a box with a 64-bit size is at least 16 bytes".into(),
                    });
                }
                (large, 16)
            }
            s if s < 8 => {
                return Err(ReferenceAudioError::BadField {
                    format: FORMAT,
                    field: format!("{name} size"),
                    value: u64::from(s),
                    expected: "a box is at least its 8-byte header".into(),
                })
            }
            s => (u64::from(s), 8),
        };
        if size > left {
            return Err(self.overrun(name, size, left, parent));
        }
        Ok(Mp4Box {
            kind,
            start: pos,
            body: pos + header,
            end: pos + size,
        })
    }

    /// A part that needs `claimed` bytes where `available` remain: cut off
    /// by the end of the file at the top level, damaged inside a box.
    fn overrun(
        &self,
        part: String,
        claimed: u64,
        available: u64,
        parent: Option<&Mp4Box>,
    ) -> ReferenceAudioError {
        match parent {
            None => ReferenceAudioError::Truncated {
                format: FORMAT,
                part,
                claimed,
                available,
            },
            Some(p) => ReferenceAudioError::SizeOverrun {
                format: FORMAT,
                part,
                claimed,
                within: format!("its {}", p.name()),
                available,
            },
        }
    }

    /// A payload shorter than the fixed fields symphonia reads and then
    /// subtracts from its length.
    fn at_least(&self, b: &Mp4Box, payload: u64, what: &str) -> Result<(), ReferenceAudioError> {
        if b.payload() >= payload {
            return Ok(());
        }
        Err(ReferenceAudioError::BadField {
            format: FORMAT,
            field: format!("{} size", b.name()),
            value: b.end - b.start,
            expected: format!("it needs {} bytes for {what}", payload + (b.body - b.start)),
        })
    }

    fn moov(&self, moov: &Mp4Box) -> Result<(), ReferenceAudioError> {
        for b in self.children(moov.body, moov.end, Some(moov))? {
            match &b.kind {
                b"trak" => self.trak(&b)?,
                b"mvex" => self.mvex(&b)?,
                b"udta" => {
                    for m in self.children(b.body, b.end, Some(&b))? {
                        if &m.kind == b"meta" {
                            self.meta(&m)?;
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn trak(&self, trak: &Mp4Box) -> Result<(), ReferenceAudioError> {
        for b in self.children(trak.body, trak.end, Some(trak))? {
            match &b.kind {
                b"edts" => {
                    for e in self.children(b.body, b.end, Some(&b))? {
                        if &e.kind == b"elst" {
                            self.elst(&e)?;
                        }
                    }
                }
                b"mdia" => self.mdia(&b)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn mdia(&self, mdia: &Mp4Box) -> Result<(), ReferenceAudioError> {
        for b in self.children(mdia.body, mdia.end, Some(mdia))? {
            match &b.kind {
                b"mdhd" => self.mdhd(&b)?,
                // Version/flags, predefined, handler type, 12 reserved: then
                // a name of the payload's length less those 24 bytes.
                b"hdlr" => self.at_least(&b, 24, "its handler fields")?,
                b"minf" => {
                    for s in self.children(b.body, b.end, Some(&b))? {
                        if &s.kind == b"stbl" {
                            self.stbl(&s)?;
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn mdhd(&self, b: &Mp4Box) -> Result<(), ReferenceAudioError> {
        // After version/flags: creation and modification times (4 or 8
        // bytes each by version), then the 32-bit timescale.
        let at = match u8_at(self.bytes, b.body) {
            Some(0) => 12,
            Some(1) => 20,
            _ => return Ok(()), // symphonia refuses other versions
        };
        if b.payload() < at + 4 {
            return Ok(()); // read past the box: symphonia's "overread atom"
        }
        if be_u32(self.bytes, b.body + at) == Some(0) {
            return Err(ReferenceAudioError::BadField {
                format: FORMAT,
                field: "mdhd timescale".into(),
                value: 0,
                expected: "it must count at least 1 tick per second".into(),
            });
        }
        Ok(())
    }

    fn stbl(&self, stbl: &Mp4Box) -> Result<(), ReferenceAudioError> {
        for b in self.children(stbl.body, stbl.end, Some(stbl))? {
            match &b.kind {
                b"stsd" => self.stsd(&b)?,
                // Full boxes: version/flags (4), a 32-bit count (4), entries.
                b"stts" => {
                    self.table(&b, "stts box", 4, 8, 8)?;
                }
                b"stsc" => self.stsc(&b)?,
                b"stco" => {
                    self.table(&b, "stco box", 4, 8, 4)?;
                }
                b"co64" => {
                    self.table(&b, "co64 box", 4, 8, 8)?;
                }
                b"ctts" => {
                    self.table(&b, "ctts box", 4, 8, 8)?;
                }
                b"stss" => {
                    self.table(&b, "stss box", 4, 8, 4)?;
                }
                b"stsz" => self.stsz(&b)?,
                b"stz2" => self.stz2(&b)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// A count at `count_at` bytes into the payload, then `count` entries
    /// of `entry` bytes from `entries_at`: they must fit in the payload.
    fn table(
        &self,
        b: &Mp4Box,
        table: &'static str,
        count_at: u64,
        entries_at: u64,
        entry: u64,
    ) -> Result<u32, ReferenceAudioError> {
        self.at_least(b, entries_at, "its version, flags and entry count")?;
        let count = be_u32(self.bytes, b.body + count_at).unwrap_or(0);
        let available = b.payload() - entries_at;
        if u64::from(count) * entry > available {
            return Err(ReferenceAudioError::TableOverrun {
                format: FORMAT,
                table,
                entries: u64::from(count),
                entry_bytes: entry,
                available,
            });
        }
        Ok(count)
    }

    fn stsc(&self, b: &Mp4Box) -> Result<(), ReferenceAudioError> {
        // Entries: first chunk, samples per chunk, description index.
        // Chunks count from 1; symphonia subtracts 1 from the first.
        let count = self.table(b, "stsc box", 4, 8, 12)?;
        for i in 0..u64::from(count) {
            if be_u32(self.bytes, b.body + 8 + 12 * i) == Some(0) {
                return Err(ReferenceAudioError::BadField {
                    format: FORMAT,
                    field: format!("stsc entry {i} first chunk"),
                    value: 0,
                    expected: "chunks are numbered from 1".into(),
                });
            }
        }
        Ok(())
    }

    fn stsz(&self, b: &Mp4Box) -> Result<(), ReferenceAudioError> {
        // Version/flags, a constant sample size (0: a table follows), the
        // sample count, then the table.
        self.at_least(b, 12, "its version, flags, sample size and count")?;
        let constant = be_u32(self.bytes, b.body + 4).unwrap_or(0);
        if constant != 0 {
            return self.sample_size("stsz sample size".into(), constant);
        }
        let count = self.table(b, "stsz box", 8, 12, 4)?;
        for i in 0..u64::from(count) {
            let size = be_u32(self.bytes, b.body + 12 + 4 * i).unwrap_or(0);
            self.sample_size(format!("stsz entry {i}"), size)?;
        }
        Ok(())
    }

    /// A packet is read into a buffer of its stated size before a byte of
    /// it is read: no sample can be larger than the whole file.
    fn sample_size(&self, field: String, size: u32) -> Result<(), ReferenceAudioError> {
        if u64::from(size) <= self.len {
            return Ok(());
        }
        Err(ReferenceAudioError::BadField {
            format: FORMAT,
            field,
            value: u64::from(size),
            expected: format!("a sample larger than the whole {}-byte file", self.len),
        })
    }

    fn stz2(&self, b: &Mp4Box) -> Result<(), ReferenceAudioError> {
        // Version/flags, 3 reserved bytes and the field size in bits (4, 8
        // or 16), the count, then the packed table.
        self.at_least(b, 12, "its version, flags, field size and count")?;
        let bits = u64::from(u8_at(self.bytes, b.body + 7).unwrap_or(0));
        let count = u64::from(be_u32(self.bytes, b.body + 8).unwrap_or(0));
        let claimed = (count * bits).div_ceil(8);
        let available = b.payload() - 12;
        if claimed > available {
            return Err(ReferenceAudioError::SizeOverrun {
                format: FORMAT,
                part: format!("stz2 table of {count} {bits}-bit sizes"),
                claimed,
                within: "its stz2 box".into(),
                available,
            });
        }
        Ok(())
    }

    fn elst(&self, b: &Mp4Box) -> Result<(), ReferenceAudioError> {
        // Version 0: 32-bit duration and media time; 1: 64-bit; then a
        // 16.16 rate. Other versions fail at the first entry.
        match u8_at(self.bytes, b.body) {
            Some(0) => self.table(b, "elst box", 4, 8, 12).map(drop),
            Some(1) => self.table(b, "elst box", 4, 8, 20).map(drop),
            _ => Ok(()),
        }
    }

    fn stsd(&self, stsd: &Mp4Box) -> Result<(), ReferenceAudioError> {
        // Version/flags, entry count, then the (one) sample entry, read
        // with a bare header read: it must fit in the stsd box.
        self.at_least(stsd, 8, "its version, flags and entry count")?;
        if be_u32(self.bytes, stsd.body + 4) != Some(1) {
            return Ok(()); // symphonia refuses 0 or several entries
        }
        if stsd.body + 8 >= stsd.end {
            return Err(self.overrun("sample entry".into(), 8, 0, Some(stsd)));
        }
        let entry = self.box_at(stsd.body + 8, stsd.end, Some(stsd))?;
        if !AUDIO_ENTRIES.contains(&&entry.kind) {
            return Ok(());
        }
        // Reserved (6), data reference (2), version (2), revision and
        // vendor (6), channels, sample size, compression id, packet size
        // (2 each), 16.16 rate (4): 28 bytes; version 1 adds 16, version 2
        // adds 36.
        let fixed = match be_u16(self.bytes, entry.body + 8) {
            Some(0) => 28,
            Some(1) => 44,
            Some(2) => 64,
            _ => return Ok(()), // unknown versions are refused
        };
        self.at_least(&entry, fixed, "its audio sample entry fields")?;
        for c in self.children(entry.body + fixed, entry.end, Some(&entry))? {
            match &c.kind {
                b"esds" => self.esds(&c)?,
                b"wave" => {
                    for w in self.children(c.body, c.end, Some(&c))? {
                        if &w.kind == b"esds" {
                            self.esds(&w)?;
                        }
                    }
                }
                // alac (24 or 48), dfLa (34) and dOps (11..=268) lengths
                // are checked by symphonia before it reads them.
                _ => {}
            }
        }
        Ok(())
    }

    /// The MPEG-4 descriptors in an `esds` box, read as symphonia reads
    /// them: a 1-byte tag, a length of up to four 7-bit groups, then the
    /// body; ES (3) holds a decoder config (4) and an SL config (6); the
    /// decoder config holds the decoder-specific info (5), whose body is
    /// read into a buffer of its stated length.
    fn esds(&self, b: &Mp4Box) -> Result<(), ReferenceAudioError> {
        self.at_least(b, 4, "its version and flags")?;
        let end = b.end;
        let mut pos = b.body + 4;
        let mut es = 0;
        // symphonia reads descriptors while more than 2 bytes remain.
        while end.saturating_sub(pos) > 2 {
            let Some((tag, len, body)) = self.descriptor(pos, end, b)? else {
                return Ok(());
            };
            pos = if tag == 3 {
                es += 1;
                match self.es_descriptor(len, body, end, b)? {
                    Some(next) => next,
                    None => return Ok(()),
                }
            } else {
                body + len
            };
        }
        // symphonia unwraps the ES descriptor it expects to have found.
        if es == 0 {
            return Err(ReferenceAudioError::BadField {
                format: FORMAT,
                field: "esds box's count of ES descriptors".into(),
                value: 0,
                expected: "an MPEG-4 audio track describes its stream in one".into(),
            });
        }
        Ok(())
    }

    /// A descriptor header at `pos`, whose body must fit before `limit`.
    /// None where symphonia's read fails first (header cut by the limit).
    fn descriptor(
        &self,
        pos: u64,
        limit: u64,
        esds: &Mp4Box,
    ) -> Result<Option<(u8, u64, u64)>, ReferenceAudioError> {
        let Some(tag) = u8_at(self.bytes, pos).filter(|_| pos < limit) else {
            return Ok(None);
        };
        let mut len = 0u64;
        let mut at = pos + 1;
        for _ in 0..4 {
            let Some(byte) = u8_at(self.bytes, at).filter(|_| at < limit) else {
                return Ok(None);
            };
            at += 1;
            len = (len << 7) | u64::from(byte & 0x7f);
            if byte & 0x80 == 0 {
                break;
            }
        }
        if len > limit - at {
            return Err(ReferenceAudioError::SizeOverrun {
                format: FORMAT,
                part: format!("{} descriptor", descriptor_name(tag)),
                claimed: len,
                within: format!("its {}", esds.name()),
                available: limit - at,
            });
        }
        Ok(Some((tag, len, at)))
    }

    /// The ES descriptor: ES id (2), flags (1), optional fields, then
    /// sub-descriptors in a window of `len - 3` bytes that symphonia opens
    /// after the optional fields (so it may reach past the descriptor; the
    /// box still bounds it). Returns where symphonia resumes, None where its
    /// reads fail first.
    fn es_descriptor(
        &self,
        len: u64,
        body: u64,
        end: u64,
        esds: &Mp4Box,
    ) -> Result<Option<u64>, ReferenceAudioError> {
        if len < 3 {
            return Err(ReferenceAudioError::BadField {
                format: FORMAT,
                field: "esds ES descriptor length".into(),
                value: len,
                expected: "it needs 3 bytes for its id and flags".into(),
            });
        }
        let Some(flags) = u8_at(self.bytes, body + 2) else {
            return Ok(None);
        };
        let mut at = body + 3;
        if flags & 0x80 != 0 {
            at += 2; // depends-on ES id
        }
        if flags & 0x40 != 0 {
            let Some(url_len) = u8_at(self.bytes, at) else {
                return Ok(None);
            };
            at += 1 + u64::from(url_len);
        }
        if flags & 0x20 != 0 {
            at += 2; // OCR ES id
        }
        if at > end {
            return Ok(None);
        }
        let window = (at + len - 3).min(end);
        let mut pos = at;
        while window.saturating_sub(pos) > 2 {
            let Some((tag, sub_len, sub_body)) = self.descriptor(pos, window, esds)? else {
                return Ok(None);
            };
            pos = match tag {
                4 => {
                    self.decoder_config(sub_len, sub_body, esds)?;
                    sub_body + sub_len
                }
                // symphonia reads the SL config's one "predefined" byte and
                // goes on from there, whatever its stated length.
                6 if sub_body < window => sub_body + 1,
                6 => return Ok(None),
                _ => sub_body + sub_len,
            };
        }
        // symphonia then skips to the end of its window, which may lie
        // past the box: that read fails.
        let next = at + len - 3;
        Ok((next <= end).then_some(next))
    }

    /// The decoder config: 13 fixed bytes, then sub-descriptors, of which
    /// the decoder-specific info (5) is read whole (its fit is checked by
    /// `descriptor`).
    fn decoder_config(
        &self,
        len: u64,
        body: u64,
        esds: &Mp4Box,
    ) -> Result<(), ReferenceAudioError> {
        if len < 13 {
            return Err(ReferenceAudioError::BadField {
                format: FORMAT,
                field: "esds decoder config descriptor length".into(),
                value: len,
                expected: "it needs 13 bytes for its object type, buffer size and bit rates".into(),
            });
        }
        let end = body + len;
        let mut pos = body + 13;
        while end.saturating_sub(pos) > 2 {
            let Some((_, sub_len, sub_body)) = self.descriptor(pos, end, esds)? else {
                return Ok(());
            };
            pos = sub_body + sub_len;
        }
        Ok(())
    }

    fn meta(&self, meta: &Mp4Box) -> Result<(), ReferenceAudioError> {
        // A full box: its children start after version/flags.
        self.at_least(meta, 4, "its version and flags")?;
        for ilst in self.children(meta.body + 4, meta.end, Some(meta))? {
            if &ilst.kind != b"ilst" {
                continue;
            }
            for tag in self.children(ilst.body, ilst.end, Some(&ilst))? {
                if !PARSED_TAGS.contains(&&tag.kind) {
                    continue;
                }
                for v in self.children(tag.body, tag.end, Some(&tag))? {
                    match &v.kind {
                        // Version/flags, country and language: the value is
                        // the rest.
                        b"data" => self.at_least(&v, 8, "its type and locale")?,
                        b"name" | b"mean" => self.at_least(&v, 4, "its version and flags")?,
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    fn mvex(&self, mvex: &Mp4Box) -> Result<(), ReferenceAudioError> {
        for b in self.children(mvex.body, mvex.end, Some(mvex))? {
            if &b.kind == b"trex" {
                // Version/flags, track id, sample description, duration,
                // then the default sample size.
                if let Some(size) = be_u32(self.bytes, b.body + 16).filter(|_| b.payload() >= 20) {
                    self.sample_size("trex default sample size".into(), size)?;
                }
            }
        }
        Ok(())
    }

    fn moof(&self, moof: &Mp4Box) -> Result<(), ReferenceAudioError> {
        for traf in self.children(moof.body, moof.end, Some(moof))? {
            if &traf.kind != b"traf" {
                continue;
            }
            for b in self.children(traf.body, traf.end, Some(&traf))? {
                match &b.kind {
                    b"tfhd" => self.tfhd(&b)?,
                    b"trun" => self.trun(&b)?,
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn tfhd(&self, b: &Mp4Box) -> Result<(), ReferenceAudioError> {
        // Flags pick the optional fields after the track id: base data
        // offset (8), sample description (4), duration (4), size (4).
        let flags = be_u32(self.bytes, b.body).unwrap_or(0) & 0xff_ffff;
        let mut at = 8;
        for (flag, len) in [(0x1, 8), (0x2, 4), (0x8, 4)] {
            if flags & flag != 0 {
                at += len;
            }
        }
        if flags & 0x10 != 0 && b.payload() >= at + 4 {
            if let Some(size) = be_u32(self.bytes, b.body + at) {
                self.sample_size("tfhd default sample size".into(), size)?;
            }
        }
        Ok(())
    }

    fn trun(&self, b: &Mp4Box) -> Result<(), ReferenceAudioError> {
        // Version/flags, sample count, an optional data offset and first
        // sample flags, then per sample: duration, size, flags and
        // composition offset, each present by flag.
        self.at_least(b, 8, "its version, flags and sample count")?;
        let flags = be_u32(self.bytes, b.body).unwrap_or(0) & 0xff_ffff;
        let count = u64::from(be_u32(self.bytes, b.body + 4).unwrap_or(0));
        let mut at = 8;
        for flag in [0x1, 0x4] {
            if flags & flag != 0 {
                at += 4;
            }
        }
        let fields = [0x100, 0x200, 0x400, 0x800].map(|f| flags & f != 0);
        let per_sample = 4 * fields.iter().filter(|&&f| f).count() as u64;
        if per_sample == 0 {
            return Ok(()); // every sample takes the defaults
        }
        self.at_least(b, at, "its optional fields")?;
        let available = b.payload() - at;
        if count * per_sample > available {
            return Err(ReferenceAudioError::TableOverrun {
                format: FORMAT,
                table: "trun box",
                entries: count,
                entry_bytes: per_sample,
                available,
            });
        }
        if fields[1] {
            // The size follows the duration when both are present.
            let offset = if fields[0] { 4 } else { 0 };
            for i in 0..count {
                let size = be_u32(self.bytes, b.body + at + i * per_sample + offset).unwrap_or(0);
                self.sample_size(format!("trun sample {i} size"), size)?;
            }
        }
        Ok(())
    }

    fn sidx(&self, b: &Mp4Box) -> Result<(), ReferenceAudioError> {
        // Version 0: 32-bit earliest time and offset, 1: 64-bit; then 2
        // reserved bytes and a 16-bit reference count; 12 bytes each.
        match u8_at(self.bytes, b.body) {
            Some(0) => self.sidx_table(b, 22),
            Some(1) => self.sidx_table(b, 30),
            _ => Ok(()),
        }
    }

    fn sidx_table(&self, b: &Mp4Box, count_at: u64) -> Result<(), ReferenceAudioError> {
        self.at_least(b, count_at + 2, "its header fields")?;
        let count = u64::from(be_u16(self.bytes, b.body + count_at).unwrap_or(0));
        let available = b.payload() - (count_at + 2);
        if count * 12 > available {
            return Err(ReferenceAudioError::TableOverrun {
                format: FORMAT,
                table: "sidx box",
                entries: count,
                entry_bytes: 12,
                available,
            });
        }
        Ok(())
    }
}

fn descriptor_name(tag: u8) -> String {
    match tag {
        3 => "esds ES".into(),
        4 => "esds decoder config".into(),
        5 => "esds decoder-specific info".into(),
        6 => "esds SL config".into(),
        t => format!("esds tag-{t}"),
    }
}
