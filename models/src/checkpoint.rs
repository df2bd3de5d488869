//! Safetensors checkpoints: memory-mapped, possibly sharded, validated.
//!
//! A [`TensorStore`] maps every file of one checkpoint and indexes its
//! tensors. Model constructors take tensors by name with the shape their
//! config implies ([`TensorStore::weight`], [`TensorStore::vector`]); each
//! take is recorded so that [`TensorStore::finish`] can report tensors the
//! config does not describe. Nothing here panics on a malformed file: a bad
//! header, a truncated file or a wrong shape is a [`ModelError`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tts_kernels::{bf16_to_f32, Mat};

use crate::error::{ModelError, Result};
use crate::mmap::MappedFile;
use crate::weight::{Weight, WeightData};

/// Storage dtype of a tensor in a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F32,
    F16,
    BF16,
}

struct Entry {
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    /// Byte range inside the mapped file.
    start: usize,
    end: usize,
}

/// All tensors of one checkpoint (one file or a sharded set).
pub struct TensorStore {
    files: Vec<Arc<MappedFile>>,
    /// The path of each of `files` (weights cache keys).
    paths: Vec<PathBuf>,
    entries: HashMap<String, Entry>,
    taken: Mutex<HashSet<String>>,
}

impl TensorStore {
    /// Opens `dir/model.safetensors`, or the shards listed by
    /// `dir/model.safetensors.index.json` when that exists.
    pub fn open_dir(dir: &Path, stem: &str) -> Result<Self> {
        let index = dir.join(format!("{stem}.safetensors.index.json"));
        let single = dir.join(format!("{stem}.safetensors"));
        if index.exists() {
            let text = read_text(&index)?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|source| ModelError::Json {
                    path: index.clone(),
                    source,
                })?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| ModelError::Config {
                    path: index.clone(),
                    message: "missing object `weight_map`".into(),
                })?;
            let mut shards: Vec<String> = Vec::new();
            for (tensor, file) in map {
                let file = file.as_str().ok_or_else(|| ModelError::Config {
                    path: index.clone(),
                    message: format!("weight_map[{tensor:?}] is not a file name"),
                })?;
                if file.contains('/') || file.contains("..") {
                    return Err(ModelError::Config {
                        path: index.clone(),
                        message: format!("weight_map[{tensor:?}] = {file:?} is not a file in the checkpoint directory"),
                    });
                }
                if !shards.iter().any(|s| s == file) {
                    shards.push(file.to_string());
                }
            }
            shards.sort();
            let paths: Vec<PathBuf> = shards.iter().map(|s| dir.join(s)).collect();
            let store = Self::open_files(&paths)?;
            // The index must agree with the shards' own headers.
            for (tensor, file) in map {
                match store.entries.get(tensor) {
                    None => {
                        return Err(ModelError::Config {
                            path: index.clone(),
                            message: format!(
                            "lists tensor `{tensor}` in {file}, but that shard does not contain it"
                        ),
                        })
                    }
                    Some(e)
                        if paths[e.file].file_name().and_then(|n| n.to_str()) != file.as_str() =>
                    {
                        return Err(ModelError::Config {
                            path: index.clone(),
                            message: format!(
                                "lists tensor `{tensor}` in {file}, but it is in another shard"
                            ),
                        })
                    }
                    _ => {}
                }
            }
            Ok(store)
        } else if single.exists() || std::fs::symlink_metadata(&single).is_ok() {
            // A link that leads nowhere is not "no such file": opening it
            // says what it is (a loop) or what is missing (its target).
            Self::open_files(&[single])
        } else {
            Err(ModelError::Io {
                path: single,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such file (nor a sharded index)",
                ),
            })
        }
    }

    /// Maps and indexes the given safetensors files.
    pub fn open_files(paths: &[PathBuf]) -> Result<Self> {
        let mut files = Vec::new();
        let mut entries = HashMap::new();
        for (fi, path) in paths.iter().enumerate() {
            check_is_file(path)?;
            let file = MappedFile::open(path).map_err(|source| ModelError::Io {
                path: path.clone(),
                source,
            })?;
            let bytes = file.bytes();
            let bad = |message: String| ModelError::Safetensors {
                path: path.clone(),
                message,
            };
            let (header_len, meta) = safetensors::SafeTensors::read_metadata(bytes)
                .map_err(|e| bad(describe_st_error(e, bytes.len())))?;
            let data_start = 8 + header_len;
            for (name, info) in meta.tensors() {
                let dtype = match info.dtype {
                    safetensors::Dtype::F32 => DType::F32,
                    safetensors::Dtype::F16 => DType::F16,
                    safetensors::Dtype::BF16 => DType::BF16,
                    other => {
                        return Err(ModelError::UnsupportedDtype {
                            tensor: name,
                            dtype: format!("{other:?}"),
                        });
                    }
                };
                let (s, e) = info.data_offsets;
                if entries.contains_key(&name) {
                    return Err(ModelError::DuplicateTensor { tensor: name });
                }
                entries.insert(
                    name,
                    Entry {
                        file: fi,
                        dtype,
                        shape: info.shape.clone(),
                        start: data_start + s,
                        end: data_start + e,
                    },
                );
            }
            files.push(Arc::new(file));
        }
        Ok(TensorStore {
            files,
            paths: paths.to_vec(),
            entries,
            taken: Mutex::new(HashSet::new()),
        })
    }

    /// Each source file's path and its safetensors JSON header bytes
    /// (weights cache keys: cheap to hash, they name every tensor's dtype,
    /// shape and offsets).
    pub(crate) fn source_headers(&self) -> Vec<(&Path, &[u8])> {
        self.paths
            .iter()
            .zip(&self.files)
            .map(|(p, f)| {
                let b = f.bytes();
                // Validated at open: 8-byte length, then that many bytes.
                let n = b
                    .get(..8)
                    .map(|l| u64::from_le_bytes(l.try_into().expect("8 bytes")) as usize)
                    .unwrap_or(0);
                (p.as_path(), b.get(8..8 + n).unwrap_or(&[]))
            })
            .collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Names and shapes of all tensors (sorted), for diagnostics.
    pub fn shapes(&self) -> BTreeMap<&str, &[usize]> {
        self.entries
            .iter()
            .map(|(k, e)| (k.as_str(), e.shape.as_slice()))
            .collect()
    }

    fn entry(&self, name: &str, shape: &[usize]) -> Result<&Entry> {
        let e = self
            .entries
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor {
                tensor: name.to_string(),
                expected: shape.to_vec(),
            })?;
        if e.shape != shape {
            return Err(ModelError::ShapeMismatch {
                tensor: name.to_string(),
                expected: shape.to_vec(),
                actual: e.shape.clone(),
            });
        }
        self.taken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string());
        Ok(e)
    }

    /// A matrix; `shape` may have more than two dims (conv kernels): the
    /// first is rows, the rest are flattened into columns.
    pub fn weight(&self, name: &str, shape: &[usize]) -> Result<Weight> {
        let e = self.entry(name, shape)?;
        let rows = shape.first().copied().unwrap_or(1);
        let cols: usize = shape.iter().skip(1).product();
        let n = rows * cols;
        let file = &self.files[e.file];
        let data = match e.dtype {
            DType::F32 if file.f32_aligned(e.start) => WeightData::MappedF32(file.clone(), e.start),
            DType::BF16 if file.u16_aligned(e.start) => {
                WeightData::MappedBf16(file.clone(), e.start)
            }
            DType::F32 => {
                WeightData::OwnedF32(decode_f32(&file.bytes()[e.start..e.end], DType::F32))
            }
            DType::BF16 => WeightData::OwnedBf16(
                file.bytes()[e.start..e.end]
                    .chunks_exact(2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
                    .collect(),
            ),
            DType::F16 => {
                WeightData::OwnedF32(decode_f32(&file.bytes()[e.start..e.end], DType::F16))
            }
        };
        debug_assert_eq!(
            e.end - e.start,
            n * if e.dtype == DType::F32 { 4 } else { 2 }
        );
        Ok(Weight { rows, cols, data })
    }

    /// Any tensor widened to an owned f32 vector (norms, biases, conv kernels).
    pub fn vector(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let e = self.entry(name, shape)?;
        Ok(decode_f32(
            &self.files[e.file].bytes()[e.start..e.end],
            e.dtype,
        ))
    }

    /// Like [`Self::vector`] for a tensor that may be absent.
    pub fn optional_vector(&self, name: &str, shape: &[usize]) -> Result<Option<Vec<f32>>> {
        if self.contains(name) {
            self.vector(name, shape).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Marks tensors under `prefix` as known but unused (e.g. the speech
    /// tokenizer's encoder, which CustomVoice synthesis never runs).
    pub fn ignore_prefix(&self, prefix: &str) {
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        for k in self.entries.keys().filter(|k| k.starts_with(prefix)) {
            taken.insert(k.clone());
        }
    }

    /// Fails if the checkpoint holds tensors nobody took: a checkpoint of
    /// another architecture or size must not load silently.
    pub fn finish(&self) -> Result<()> {
        let taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        let mut extra: Vec<&String> = self
            .entries
            .keys()
            .filter(|k| !taken.contains(*k))
            .collect();
        if extra.is_empty() {
            return Ok(());
        }
        extra.sort();
        Err(ModelError::UnexpectedTensors {
            count: extra.len(),
            first: extra[0].clone(),
        })
    }
}

fn decode_f32(bytes: &[u8], dtype: DType) -> Vec<f32> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|b| bf16_to_f32(u16::from_le_bytes([b[0], b[1]])))
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
    }
}

fn describe_st_error(e: safetensors::SafeTensorError, len: usize) -> String {
    use safetensors::SafeTensorError as E;
    match e {
        E::HeaderTooSmall => {
            format!("file is {len} bytes, too short for a safetensors header (truncated?)")
        }
        E::MetadataIncompleteBuffer => {
            "data section is shorter or longer than the header declares (truncated or corrupt file)"
                .into()
        }
        E::InvalidHeaderLength => {
            "header length field is larger than the file (truncated or not safetensors)".into()
        }
        other => format!("{other}"),
    }
}

/// Symbolic links followed before a chain counts as a loop (Linux's own
/// limit: past it, opening fails with "too many levels of symbolic links").
const MAX_LINKS: usize = 40;

/// Refuses a weights path that is not a file, saying what is there
/// instead: a directory, or a symbolic link loop (which would otherwise
/// read as "no such device" from the map, or as a missing file). Other
/// paths are left to opening, whose error names the problem (a FIFO is
/// opened as given).
fn check_is_file(path: &Path) -> Result<()> {
    let what = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => "is a directory, not a file",
        Ok(_) => return Ok(()),
        Err(_) if is_link_loop(path) => "is a symbolic link loop",
        Err(_) => return Ok(()),
    };
    Err(ModelError::NotAFile {
        path: path.to_path_buf(),
        what,
    })
}

/// True when following the symbolic links from `path` comes back to one of
/// them, or goes on past [`MAX_LINKS`].
fn is_link_loop(path: &Path) -> bool {
    let mut seen = HashSet::new();
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let Ok(target) = std::fs::read_link(&p) else {
            return false;
        };
        let next = match p.parent() {
            Some(dir) => dir.join(target),
            None => target,
        };
        if !seen.insert(p) {
            return true;
        }
        p = next;
    }
    true
}

pub(crate) fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// An f32 tensor borrowed from the memory map when the checkpoint stores f32
/// (the real speech tokenizer does; its decoder and encoder both read their
/// conv weights this way), else widened once at load. Conv kernels take
/// plain `&[f32]`.
pub(crate) struct F32Tensor(Weight);

impl F32Tensor {
    pub(crate) fn load(store: &TensorStore, name: &str, shape: &[usize]) -> Result<Self> {
        let w = store.weight(name, shape)?;
        if matches!(w.mat(), Mat::F32 { .. }) {
            return Ok(F32Tensor(w));
        }
        let (rows, cols) = (w.rows(), w.cols());
        Ok(F32Tensor(Weight::from_f32(
            rows,
            cols,
            store.vector(name, shape)?,
        )))
    }

    pub(crate) fn data(&self) -> &[f32] {
        match self.0.mat() {
            Mat::F32 { data, .. } => data,
            // `load` only ever builds F32 storage.
            Mat::Bf16 { .. }
            | Mat::Q8 { .. }
            | Mat::Q4 { .. }
            | Mat::Iq4 { .. }
            | Mat::Q6 { .. } => {
                unreachable!("F32Tensor holds f32 data by construction")
            }
        }
    }

    pub(crate) fn mat(&self) -> Mat<'_> {
        self.0.mat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 28: a directory read as "no such device", a link loop as a
    /// missing file; each weights path now says what it is.
    #[cfg(unix)]
    #[test]
    fn a_directory_or_a_symlink_loop_as_the_weights_file_is_named_as_such() {
        let dir =
            std::env::temp_dir().join(format!("tts-models-not-a-file-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let message = |d: &Path| match TensorStore::open_dir(d, "model") {
            Ok(_) => panic!("{} opened", d.display()),
            Err(e) => e.to_string(),
        };
        let a = dir.join("a");
        std::fs::create_dir_all(a.join("model.safetensors")).unwrap();
        let e = message(&a);
        assert!(
            e.ends_with("model.safetensors is a directory, not a file"),
            "{e}"
        );
        let b = dir.join("b");
        std::fs::create_dir_all(&b).unwrap();
        std::os::unix::fs::symlink("model.safetensors", b.join("model.safetensors")).unwrap();
        let e = message(&b);
        assert!(
            e.ends_with("model.safetensors is a symbolic link loop"),
            "{e}"
        );
        let c = dir.join("c");
        std::fs::create_dir_all(&c).unwrap();
        std::os::unix::fs::symlink("x.safetensors", c.join("model.safetensors")).unwrap();
        std::os::unix::fs::symlink("model.safetensors", c.join("x.safetensors")).unwrap();
        let e = message(&c);
        assert!(
            e.ends_with("model.safetensors is a symbolic link loop"),
            "{e}"
        );
        // A link to nothing is not a loop: opening it names the missing file.
        let d = dir.join("d");
        std::fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::symlink("gone.safetensors", d.join("model.safetensors")).unwrap();
        let e = message(&d);
        assert!(!e.contains("loop") && e.contains("No such file"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
