//! The one place in this crate that needs `unsafe`: mapping checkpoint files
//! and viewing their bytes as the little-endian numbers they hold.
#![allow(unsafe_code)]

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

/// A read-only memory-mapped file (or, for empty files, an empty buffer:
/// mapping zero bytes is an error on Linux).
pub struct MappedFile {
    map: Option<Mmap>,
}

impl MappedFile {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(MappedFile { map: None });
        }
        // SAFETY: the map is read-only and private to this process. If another
        // process truncates the file while it is mapped, reads may fault;
        // checkpoints are treated as immutable inputs (as every mmap-based
        // loader does), and the file's size was checked against its header.
        let map = unsafe { Mmap::map(&file)? };
        Ok(MappedFile { map: Some(map) })
    }

    /// Maps `len` bytes of `file` from byte `offset` (a tensor just written
    /// to a weights cache file: its view replaces the in-memory copy). The
    /// file must be open for reading and hold those bytes.
    pub fn map_range(file: &File, offset: u64, len: usize) -> std::io::Result<Self> {
        if len == 0 {
            return Ok(MappedFile { map: None });
        }
        // SAFETY: as in `open`: read-only, and the weights cache only ever
        // appends to the file it is writing (then renames it), so the mapped
        // range is never truncated or rewritten.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(offset)
                .len(len)
                .map(file)?
        };
        Ok(MappedFile { map: Some(map) })
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    pub fn f32_aligned(&self, offset: usize) -> bool {
        cfg!(target_endian = "little")
            && (self.bytes().as_ptr() as usize + offset).is_multiple_of(4)
    }

    pub fn u16_aligned(&self, offset: usize) -> bool {
        cfg!(target_endian = "little")
            && (self.bytes().as_ptr() as usize + offset).is_multiple_of(2)
    }

    /// `n` f32 values starting at byte `offset`.
    ///
    /// Panics if out of range or misaligned (callers check [`Self::f32_aligned`]).
    pub fn f32s(&self, offset: usize, n: usize) -> &[f32] {
        let b = &self.bytes()[offset..offset + n * 4];
        assert!(self.f32_aligned(offset));
        // SAFETY: `b` is in bounds (sliced above), 4-byte aligned (asserted),
        // every bit pattern is a valid f32, the host is little-endian like
        // safetensors data (asserted through f32_aligned), and the returned
        // slice borrows `self`, which owns the map.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<f32>(), n) }
    }

    /// `n` i8 values starting at byte `offset` (int8 weights of a weights
    /// cache file). Panics if out of range.
    pub fn i8s(&self, offset: usize, n: usize) -> &[i8] {
        let b = &self.bytes()[offset..offset + n];
        // SAFETY: `b` is in bounds (sliced above), i8 has the size and
        // alignment of u8 and every bit pattern is valid; the slice borrows
        // `self`, which owns the map.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<i8>(), n) }
    }

    /// `n` u16 values starting at byte `offset`.
    pub fn u16s(&self, offset: usize, n: usize) -> &[u16] {
        let b = &self.bytes()[offset..offset + n * 2];
        assert!(self.u16_aligned(offset));
        // SAFETY: as for `f32s`, with 2-byte alignment and u16 values.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u16>(), n) }
    }
}

/// The bytes of an i8 slice (writing int8 weights to a weights cache file).
pub fn i8_bytes(v: &[i8]) -> &[u8] {
    // SAFETY: u8 has the size and alignment of i8 and every bit pattern is
    // valid; the result borrows `v`.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len()) }
}
