//! The cache file format (layout and validity rules in the [`super`]
//! module docs): the key a file must match, reading and validating a file,
//! and writing one.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tts_kernels::Mat;

use crate::checkpoint::TensorStore;
use crate::mmap::{i8_bytes, MappedFile};
use crate::quant::Precision;
use crate::weight::Weight;

/// First 8 bytes of a cache file.
pub const MAGIC: [u8; 8] = *b"TTSRTWC\0";
/// Version of the file layout described in the module docs.
pub const FORMAT_VERSION: u32 = 1;
/// Version of the int8 / group-wise conversion output; part of every
/// file's key. (Adding the iq4 and q6 precisions did not change the int8
/// or q4 output, so their existing files stay valid.)
pub const QUANTIZER_VERSION: u32 = 1;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 64;
/// Alignment of every data part in the file (a cache line; the kernels
/// need 4 bytes for the f32 scales and load everything else unaligned).
pub const ALIGN: usize = 64;

/// The identity a cache file must match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Key {
    format: u32,
    quantizer: u32,
    precision: String,
    stage: String,
    sources: Vec<Source>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Source {
    path: PathBuf,
    size: u64,
    mtime_ns: u64,
    /// Inode and status-change time (Unix; 0 elsewhere): a file replaced
    /// or rewritten with its size, header and mtime kept (`rsync -t`, `cp
    /// -p` of same-shaped weights) still changes these.
    inode: u64,
    ctime_ns: u64,
    header_hash: String,
}

impl Key {
    pub(super) fn of(
        store: &TensorStore,
        stage: &str,
        precision: Precision,
    ) -> std::io::Result<Key> {
        let mut sources = Vec::new();
        for (path, header) in store.source_headers() {
            let path = std::fs::canonicalize(path)?;
            let meta = std::fs::metadata(&path)?;
            let mtime_ns = meta
                .modified()?
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            #[cfg(unix)]
            let (inode, ctime_ns) = {
                use std::os::unix::fs::MetadataExt;
                let ns = (meta.ctime() as u64)
                    .wrapping_mul(1_000_000_000)
                    .wrapping_add(meta.ctime_nsec() as u64);
                (meta.ino(), ns)
            };
            #[cfg(not(unix))]
            let (inode, ctime_ns) = (0, 0);
            sources.push(Source {
                path,
                size: meta.len(),
                mtime_ns,
                inode,
                ctime_ns,
                header_hash: hex(hash64(header)),
            });
        }
        Ok(Key {
            format: FORMAT_VERSION,
            quantizer: QUANTIZER_VERSION,
            precision: precision.name().to_string(),
            stage: stage.to_string(),
            sources,
        })
    }

    /// `<checkpoint dir name>-<hash of the source paths>.<stage>.<precision>.wcache`:
    /// one file per (checkpoint, stage, precision), replaced when stale.
    pub(super) fn file_name(&self) -> String {
        let mut ids = Vec::new();
        for s in &self.sources {
            ids.extend_from_slice(s.path.to_string_lossy().as_bytes());
            ids.push(0);
        }
        let name: String = self
            .sources
            .first()
            .and_then(|s| s.path.parent())
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "checkpoint".into())
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        let stage: String = self
            .stage
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!(
            "{name}-{:016x}.{stage}.{}.wcache",
            hash64(&ids),
            self.precision
        )
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Index {
    key: Key,
    tensors: Vec<IndexTensor>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct IndexTensor {
    name: String,
    pub(super) rows: usize,
    pub(super) cols: usize,
    parts: Vec<Part>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Part {
    offset: u64,
    len: u64,
    checksum: String,
}

impl IndexTensor {
    /// Expected byte length of each part for `precision`.
    fn part_lens(precision: Precision, rows: usize, cols: usize) -> Option<Vec<usize>> {
        Some(match precision {
            Precision::F32 => return None,
            Precision::Int8 => vec![rows.checked_mul(cols)?, rows.checked_mul(4)?],
            Precision::Q4 | Precision::Iq4 | Precision::Q6 => {
                let f = precision.group_format()?;
                vec![
                    rows.checked_mul(f.row_bytes(cols))?,
                    rows.checked_mul(f.row_groups(cols))?,
                    rows.checked_mul(4)?,
                ]
            }
        })
    }

    pub(super) fn view(&self, file: Arc<MappedFile>, precision: Precision) -> Option<Weight> {
        let o: Vec<usize> = self.parts.iter().map(|p| p.offset as usize).collect();
        match precision {
            Precision::Int8 => Weight::mapped_q8(file, self.rows, self.cols, o[0], o[1]),
            Precision::Q4 | Precision::Iq4 | Precision::Q6 => Weight::mapped_group(
                precision.group_format()?,
                file,
                self.rows,
                self.cols,
                [o[0], o[1], o[2]],
            ),
            Precision::F32 => None,
        }
    }
}

pub(super) enum Invalid {
    /// No file: silent, the first load creates it.
    Missing,
    /// Unusable (the named reason).
    Bad(String),
}

fn precision_code(p: Precision) -> u32 {
    match p {
        Precision::F32 => 0,
        Precision::Int8 => 1,
        Precision::Q4 => 2,
        Precision::Iq4 => 3,
        Precision::Q6 => 4,
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Maps `path` and checks it against `key` (see the module docs).
pub(super) fn read_valid(
    path: &Path,
    key: &Key,
) -> std::result::Result<(Arc<MappedFile>, HashMap<String, IndexTensor>), Invalid> {
    let file = match MappedFile::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Invalid::Missing),
        Err(e) => return Err(Invalid::Bad(format!("cannot read: {e}"))),
    };
    let bad = |m: String| Err(Invalid::Bad(m));
    let b = file.bytes();
    if b.len() < HEADER_LEN {
        return bad(format!(
            "truncated: {} bytes, shorter than the {HEADER_LEN}-byte header",
            b.len()
        ));
    }
    if b[..8] != MAGIC {
        return bad("not a tts-rt weights cache file (bad magic)".into());
    }
    let version = le_u32(b, 8);
    if version != FORMAT_VERSION {
        return bad(format!(
            "stale: format version {version}, this build reads {FORMAT_VERSION}"
        ));
    }
    let (index_off, index_len, file_len) = (le_u64(b, 16), le_u64(b, 24), le_u64(b, 32));
    if file_len != b.len() as u64 {
        return bad(format!(
            "truncated or corrupt: the header says {file_len} bytes, the file has {}",
            b.len()
        ));
    }
    let index_end = index_off.checked_add(index_len);
    if index_off < HEADER_LEN as u64 || index_end != Some(file_len) {
        return bad(format!(
            "corrupt header: index at {index_off}+{index_len} in a {file_len}-byte file"
        ));
    }
    let index_bytes = &b[index_off as usize..];
    let mut h = b[..40].to_vec();
    h.extend_from_slice(index_bytes);
    if hash64(&h) != le_u64(b, 40) {
        return bad("corrupt: header checksum mismatch".into());
    }
    let index: Index = serde_json::from_slice(index_bytes)
        .map_err(|e| Invalid::Bad(format!("corrupt index: {e}")))?;
    let want_precision = Precision::from_name(&key.precision).unwrap_or_default();
    if le_u32(b, 12) != precision_code(want_precision) {
        return bad(format!(
            "stale: precision code {} in the header, the index says {}",
            le_u32(b, 12),
            index.key.precision
        ));
    }
    if let Some(why) = key_difference(&index.key, key) {
        return bad(format!("stale: {why}"));
    }
    let mut tensors = HashMap::new();
    for t in &index.tensors {
        let lens = IndexTensor::part_lens(want_precision, t.rows, t.cols)
            .ok_or_else(|| Invalid::Bad(format!("corrupt index: tensor `{}` size", t.name)))?;
        if t.parts.len() != lens.len() {
            return bad(format!(
                "corrupt index: tensor `{}` has {} parts, {} expected",
                t.name,
                t.parts.len(),
                lens.len()
            ));
        }
        for (p, &len) in t.parts.iter().zip(&lens) {
            let end = p.offset.checked_add(p.len);
            if p.len != len as u64
                || p.offset < HEADER_LEN as u64
                || !p.offset.is_multiple_of(ALIGN as u64)
                || end.is_none_or(|e| e > index_off)
            {
                return bad(format!(
                    "corrupt index: tensor `{}` part at {}+{} (expected {len} bytes, 64-aligned, before the index at {index_off})",
                    t.name, p.offset, p.len
                ));
            }
        }
        if tensors.insert(t.name.clone(), t.clone()).is_some() {
            return bad(format!("corrupt index: tensor `{}` listed twice", t.name));
        }
    }
    // Data checksums, tensors in parallel: catches corruption inside the
    // data region (and brings the pages into the page cache, where the
    // first forward would fault them in anyway).
    if let Some(t) = index.tensors.par_iter().find_any(|t| {
        t.parts.iter().any(|p| {
            let s = &b[p.offset as usize..(p.offset + p.len) as usize];
            hex(hash64(s)) != p.checksum
        })
    }) {
        return bad(format!(
            "corrupt: tensor `{}` data checksum mismatch",
            t.name
        ));
    }
    Ok((Arc::new(file), tensors))
}

/// The first difference between a file's key and the wanted one.
fn key_difference(have: &Key, want: &Key) -> Option<String> {
    if have.quantizer != want.quantizer {
        return Some(format!(
            "quantizer version {}, this build's is {}",
            have.quantizer, want.quantizer
        ));
    }
    if have.precision != want.precision || have.stage != want.stage {
        return Some(format!(
            "holds {} at {}, wanted {} at {}",
            have.stage, have.precision, want.stage, want.precision
        ));
    }
    if have.format != want.format {
        return Some(format!("index format {}", have.format));
    }
    if have.sources.len() != want.sources.len() {
        return Some(format!(
            "made from {} checkpoint file(s), the checkpoint has {}",
            have.sources.len(),
            want.sources.len()
        ));
    }
    for (h, w) in have.sources.iter().zip(&want.sources) {
        let what = if h.path != w.path {
            "path"
        } else if h.size != w.size {
            "size"
        } else if h.mtime_ns != w.mtime_ns {
            "modification time"
        } else if h.inode != w.inode || h.ctime_ns != w.ctime_ns {
            "inode or status-change time: replaced or rewritten"
        } else if h.header_hash != w.header_hash {
            "safetensors header"
        } else {
            continue;
        };
        return Some(format!(
            "{} changed ({what}) since the cache was written",
            w.path.display()
        ));
    }
    None
}

/// A cache file being written: a temporary file beside the final path,
/// renamed over it by [`Self::commit`] and removed if dropped uncommitted.
pub(super) struct Writer {
    pub(super) path: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
    pos: u64,
    pub(super) key: Key,
    tensors: Vec<IndexTensor>,
}

impl Writer {
    pub(super) fn create(path: &Path, key: Key) -> std::io::Result<Writer> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!(
            "wcache.tmp{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        // Readable too: written tensors are mapped back from it.
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut w = Writer {
            path: path.to_path_buf(),
            tmp,
            out: None,
            pos: 0,
            key,
            tensors: Vec::new(),
        };
        out.write_all(&[0u8; HEADER_LEN])?;
        w.out = Some(out);
        w.pos = HEADER_LEN as u64;
        Ok(w)
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let out = self.out.as_mut().ok_or_else(closed)?;
        out.write_all(bytes)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> std::io::Result<()> {
        let n = (ALIGN as u64 - self.pos % ALIGN as u64) % ALIGN as u64;
        self.write(&[0u8; ALIGN][..n as usize])
    }

    /// Appends `w` and returns a view of the written bytes (mapped from
    /// the file being written).
    pub(super) fn append(
        &mut self,
        name: &str,
        w: &Weight,
        precision: Precision,
    ) -> std::io::Result<Weight> {
        let scales_bytes = |s: &[f32]| s.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
        let parts: Vec<std::borrow::Cow<[u8]>> = match w.mat() {
            Mat::Q8 { data, scales, .. } => {
                vec![i8_bytes(data).into(), scales_bytes(scales).into()]
            }
            m @ (Mat::Q4 { .. } | Mat::Iq4 { .. } | Mat::Q6 { .. }) => {
                let (f, data, group_scales, scales) = m.group_parts().expect("group-wise");
                if Some(f) != precision.group_format() {
                    return Err(std::io::Error::other(format!(
                        "tensor `{name}` is {f}, the cache file holds {precision}"
                    )));
                }
                vec![
                    data.into(),
                    group_scales.into(),
                    scales_bytes(scales).into(),
                ]
            }
            _ => {
                return Err(std::io::Error::other(format!(
                    "tensor `{name}` is not int8 or group-wise (q4, iq4, q6)"
                )))
            }
        };
        let mut index = Vec::new();
        for p in parts {
            self.pad()?;
            index.push(Part {
                offset: self.pos,
                len: p.len() as u64,
                checksum: hex(hash64(&p)),
            });
            self.write(&p)?;
        }
        let t = IndexTensor {
            name: name.to_string(),
            rows: w.rows(),
            cols: w.cols(),
            parts: index,
        };
        let out = self.out.as_mut().ok_or_else(closed)?;
        out.flush()?;
        // Map from the tensor's first part (64-aligned: the view keeps the
        // alignment of the file offsets) to its end.
        let start = t.parts[0].offset;
        let map = Arc::new(MappedFile::map_range(
            out.get_ref(),
            start,
            (self.pos - start) as usize,
        )?);
        let mut local = t.clone();
        for p in &mut local.parts {
            p.offset -= start;
        }
        let view = local
            .view(map, precision)
            .ok_or_else(|| std::io::Error::other(format!("cannot view tensor `{name}`")))?;
        self.tensors.push(t);
        Ok(view)
    }

    /// Writes the index and the header, then renames into place.
    pub(super) fn commit(mut self, key: &Key) -> std::io::Result<()> {
        self.pad()?;
        let index = serde_json::to_vec(&Index {
            key: key.clone(),
            tensors: std::mem::take(&mut self.tensors),
        })
        .map_err(std::io::Error::other)?;
        let index_off = self.pos;
        self.write(&index)?;
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(&MAGIC);
        header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        let precision = Precision::from_name(&key.precision).unwrap_or_default();
        header[12..16].copy_from_slice(&precision_code(precision).to_le_bytes());
        header[16..24].copy_from_slice(&index_off.to_le_bytes());
        header[24..32].copy_from_slice(&(index.len() as u64).to_le_bytes());
        header[32..40].copy_from_slice(&self.pos.to_le_bytes());
        let mut h = header[..40].to_vec();
        h.extend_from_slice(&index);
        header[40..48].copy_from_slice(&hash64(&h).to_le_bytes());
        let mut out = self.out.take().ok_or_else(closed)?;
        out.flush()?;
        let mut file = out.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&header)?;
        file.flush()?;
        drop(file);
        std::fs::rename(&self.tmp, &self.path)
    }
}

fn closed() -> std::io::Error {
    std::io::Error::other("cache file already closed")
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Committed files were renamed away; anything left is partial.
        let _ = std::fs::remove_file(&self.tmp);
    }
}

fn hex(v: u64) -> String {
    format!("{v:016x}")
}

/// A fast 64-bit non-cryptographic hash (4 independent multiply-rotate
/// lanes over 32-byte blocks, then a splitmix64 finish): detects
/// corruption and stale headers, not tampering. Every step of a lane is a
/// bijection of its state, so changing one 8-byte word always changes that
/// lane's final state.
pub fn hash64(bytes: &[u8]) -> u64 {
    const P1: u64 = 0x9e37_79b1_85eb_ca87;
    const P2: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let mut acc = [P1, P2, P1 ^ P2, P1.rotate_left(32)];
    let mut blocks = bytes.chunks_exact(32);
    for b in &mut blocks {
        for (i, a) in acc.iter_mut().enumerate() {
            let w = u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
            *a = (*a ^ w).wrapping_mul(P1).rotate_left(31);
        }
    }
    let mut tail = [0u8; 32];
    let rest = blocks.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    let mut h = bytes.len() as u64;
    for (i, a) in acc.iter().enumerate() {
        let w = u64::from_le_bytes(tail[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        h = (h ^ a.wrapping_mul(P2) ^ w)
            .wrapping_mul(P1)
            .rotate_left(27);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}
