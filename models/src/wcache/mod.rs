//! On-disk cache of converted (int8 / q4 / iq4 / q6) LM weights.
//!
//! Converting a 0.6B checkpoint's decoder linears to int8 or q4 reads every
//! stored weight and costs seconds of CPU at each load, and the converted
//! copy lives in anonymous memory in every process. With a cache directory
//! ([`crate::LoadOptions::weights_cache`], `tts-rt --weights-cache DIR`)
//! the first load of a (checkpoint, stage, precision) writes the converted
//! tensors to one file; later loads validate that file and **memory-map
//! it**: the `Mat::Q8` / `Mat::Q4` / `Mat::Iq4` / `Mat::Q6` views point
//! into the map (zero copy), so
//! the weights are file-backed page cache shared by every process, not
//! RssAnon, and no conversion runs. The load that writes the file maps
//! each tensor back from it as soon as it is written and drops its
//! in-memory copy, so it ends up file-backed too.
//!
//! # File layout (format version 1, little-endian)
//! ```text
//! 0   8  magic b"TTSRTWC\0"
//! 8   4  u32 format version (FORMAT_VERSION)
//! 12  4  u32 precision: 1 = int8, 2 = q4, 3 = iq4, 4 = q6
//! 16  8  u64 index offset (bytes from the start of the file)
//! 24  8  u64 index length
//! 32  8  u64 file length
//! 40  8  u64 header checksum: hash64 of bytes 0..40 followed by the index
//! 48 16  zero
//! 64  .. tensor data: each part starts at a multiple of 64 bytes
//!        int8: [rows * cols] i8, then [rows] f32 scales
//!        q4:   [rows * q4_row_bytes(cols)] nibbles (tts_kernels::q4
//!              layout), [rows * q4_row_groups(cols)] u8 group scales,
//!              [rows] f32 row scales
//!        iq4:  as q4 (tts_kernels::iq4: nibbles index the level table;
//!              the group scales are i8 bit patterns)
//!        q6:   [rows * q6_row_bytes(cols)] 6-bit values (tts_kernels::q6
//!              layout), then group and row scales as q4
//! index offset .. end: the index, UTF-8 JSON:
//!   {"key": {"format", "quantizer", "precision", "stage",
//!            "sources": [{"path", "size", "mtime_ns", "inode", "ctime_ns",
//!                         "header_hash"}]},
//!    "tensors": [{"name", "rows", "cols",
//!                 "parts": [{"offset", "len", "checksum"}]}]}
//! ```
//! `key.sources` identifies the checkpoint: for every safetensors file its
//! canonical path, size, modification time (ns), inode and status-change
//! time (Unix) and a hash of its JSON header (cheap: no full-file hash; a
//! content change that keeps all of these, e.g. bytes patched in place and
//! the mtime reset on a filesystem without ctime, is not seen). Hashes are [`hash64`], written as 16
//! hex digits. `quantizer` is [`QUANTIZER_VERSION`]: bump it when the int8
//! or group-wise conversion changes its output, and every cache file goes
//! stale. The precision is part of the file name and the key, so a new
//! precision (iq4 and q6 were added in format version 1) gets files of its
//! own and leaves the existing ones valid; a build that does not know a
//! precision never asks for its file.
//!
//! # Validity
//! A file is used only if the magic, version, lengths, header checksum,
//! key (stage, precision, quantizer, sources) and every part's data
//! checksum match and every part lies inside the data region at its
//! alignment; otherwise a warning names the reason (missing files are
//! silent) and the stage is converted and the file rewritten. Writes go to
//! a temporary file in the same directory that is renamed over the old one,
//! so a process that still maps the old file keeps valid weights and a
//! crash never leaves a half-written file under the final name. A cache
//! directory that cannot be written warns once per process and the load
//! goes on without the cache. Like checkpoints, cache files must not be
//! truncated in place while a process maps them.

mod file;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::checkpoint::TensorStore;
use crate::error::Result;
use crate::mmap::MappedFile;
use crate::quant::{convert, Precision, StagePlan, TensorClass};
use crate::weight::Weight;

pub use file::{hash64, ALIGN, FORMAT_VERSION, HEADER_LEN, MAGIC, QUANTIZER_VERSION};
use file::{read_valid, IndexTensor, Invalid, Key, Writer};

/// What the cache did for one converted LM stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightsCacheEvent {
    /// The stage's tensor prefix (`talker.model`, `talker.code_predictor.model`).
    pub stage: String,
    pub precision: Precision,
    /// The stage's cache file.
    pub path: PathBuf,
    pub status: WeightsCacheStatus,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WeightsCacheStatus {
    /// A valid file was mapped; nothing was converted.
    Hit,
    /// There was no file: the stage was converted and the file written.
    Created,
    /// The file was unusable (the reason): converted and rewritten.
    Rebuilt(String),
    /// Converted, but the file could not be used or written (the reason).
    Failed(String),
}

/// The converted-weights cache of one checkpoint load: its directory and
/// what it did for each converted stage. The loader owns it beside the
/// [`TensorStore`] and hands it to every LM it loads
/// ([`crate::lm::Qwen3Lm::load_with`]); the default is no cache.
#[derive(Debug, Default)]
pub struct WeightsCache {
    /// Directory of the cache files, if any.
    dir: Option<PathBuf>,
    /// What the cache did per converted stage, in load order.
    events: Mutex<Vec<WeightsCacheEvent>>,
}

impl WeightsCache {
    /// Keep converted (int8/q4) stages in `dir`; `None` converts at every load.
    pub fn new(dir: Option<&Path>) -> Self {
        WeightsCache {
            dir: dir.map(Path::to_path_buf),
            events: Mutex::new(Vec::new()),
        }
    }

    fn record(&self, e: WeightsCacheEvent) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e);
    }

    /// What the weights cache did for each converted stage so far.
    pub fn take_events(&self) -> Vec<WeightsCacheEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Where a stage's converted weights come from while its LM loads: the
/// cache file (hit), a conversion that is also written to the cache, or a
/// plain conversion. `Qwen3Lm::load_with` takes every linear through
/// [`Self::weight`] and calls [`Self::finish`] at the end.
pub struct StageConverter<'a> {
    store: &'a TensorStore,
    cache: &'a WeightsCache,
    stage: String,
    precision: Precision,
    state: Mutex<State>,
}

enum State {
    Direct,
    Hit {
        path: PathBuf,
        file: Arc<MappedFile>,
        tensors: HashMap<String, IndexTensor>,
        /// A tensor the file lacked (the reason), converted instead.
        missing: Option<String>,
    },
    Write {
        writer: Writer,
        /// Why an existing file was replaced (None: there was none).
        rebuild: Option<String>,
    },
    /// Writing failed mid-way: converting only, reported at finish.
    Failed {
        path: PathBuf,
        reason: String,
    },
}

impl<'a> StageConverter<'a> {
    /// Opens the cache for `stage` (a tensor prefix) at `precision`: F32
    /// and a cache without a directory convert directly.
    pub fn open(
        store: &'a TensorStore,
        cache: &'a WeightsCache,
        stage: &str,
        precision: Precision,
    ) -> Self {
        let state = match cache.dir.as_deref() {
            Some(dir) if precision != Precision::F32 => open_state(store, dir, stage, precision),
            _ => State::Direct,
        };
        StageConverter {
            store,
            cache,
            stage: stage.to_string(),
            precision,
            state: Mutex::new(state),
        }
    }

    /// Tensor `name` of `shape` at the stage's precision.
    pub fn weight(&self, name: &str, shape: &[usize]) -> Result<Weight> {
        let w = self.store.weight(name, shape)?;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *state {
            State::Direct | State::Failed { .. } => Ok(convert(w, self.precision)),
            State::Hit {
                path,
                file,
                tensors,
                missing,
            } => {
                if let Some(v) = tensors
                    .get(name)
                    .filter(|t| t.rows == w.rows() && t.cols == w.cols())
                    .and_then(|t| t.view(file.clone(), self.precision))
                {
                    return Ok(v);
                }
                if missing.is_none() {
                    let reason = format!(
                        "has no {}x{} tensor `{name}` (written by another build?)",
                        w.rows(),
                        w.cols()
                    );
                    warn(
                        path,
                        &format!("{reason}; converting, the file will be rebuilt"),
                    );
                    *missing = Some(reason);
                }
                Ok(convert(w, self.precision))
            }
            State::Write { writer, .. } => {
                let c = convert(w, self.precision);
                match writer.append(name, &c, self.precision) {
                    // The written copy replaces the in-memory one: even the
                    // load that fills the cache ends up file-backed.
                    Ok(mapped) => Ok(mapped),
                    Err(e) => {
                        let path = writer.path.clone();
                        let reason = format!("cannot write: {e}");
                        warn_write_failure(&path, &reason);
                        // Drops the writer, which removes its temporary file
                        // (views already handed out keep their pages).
                        *state = State::Failed { path, reason };
                        Ok(c)
                    }
                }
            }
        }
    }

    /// Completes the stage: commits a written file, drops one that lacked
    /// tensors, and records what happened in the cache's event list.
    pub fn finish(self) {
        let state = self.state.into_inner().unwrap_or_else(|p| p.into_inner());
        let (path, status) = match state {
            State::Direct => return,
            State::Hit {
                path,
                missing: None,
                ..
            } => (path, WeightsCacheStatus::Hit),
            State::Hit {
                path,
                missing: Some(reason),
                ..
            } => {
                // The next load converts everything and writes a full file.
                let _ = std::fs::remove_file(&path);
                (path, WeightsCacheStatus::Failed(reason))
            }
            State::Failed { path, reason } => (path, WeightsCacheStatus::Failed(reason)),
            State::Write { writer, rebuild } => {
                let path = writer.path.clone();
                let key = writer.key.clone();
                match writer.commit(&key) {
                    Ok(()) => (
                        path,
                        match rebuild {
                            None => WeightsCacheStatus::Created,
                            Some(r) => WeightsCacheStatus::Rebuilt(r),
                        },
                    ),
                    Err(e) => {
                        let reason = format!("cannot write: {e}");
                        warn_write_failure(&path, &reason);
                        (path, WeightsCacheStatus::Failed(reason))
                    }
                }
            }
        };
        self.cache.record(WeightsCacheEvent {
            stage: self.stage,
            precision: self.precision,
            path,
            status,
        });
    }
}

/// The converters of one LM stage under a [`StagePlan`]: one
/// [`StageConverter`] per converted precision, each with its own cache file
/// whose key names the classes it holds, so two plans never share (or
/// fight over) a file. A file that holds exactly the decoder linears (the
/// uniform plans, what a per-stage precision always converted) keeps the
/// stage prefix alone as its key: those files stay valid.
pub struct PlanConverter<'a> {
    store: &'a TensorStore,
    plan: StagePlan,
    converters: Vec<(Precision, StageConverter<'a>)>,
}

/// The cache key's stage of the `classes` of `stage` held at one precision.
pub fn cache_stage(stage: &str, classes: &[TensorClass]) -> String {
    if classes
        == [
            TensorClass::Attn,
            TensorClass::MlpUpGate,
            TensorClass::MlpDown,
        ]
    {
        return stage.to_string();
    }
    let names: Vec<&str> = classes.iter().map(|c| c.name()).collect();
    format!("{stage}[{}]", names.join("+"))
}

impl<'a> PlanConverter<'a> {
    /// Opens a converter (and its cache file) per converted precision of
    /// `plan`; stored classes are read from `store` as they are.
    pub fn open(
        store: &'a TensorStore,
        cache: &'a WeightsCache,
        stage: &str,
        plan: StagePlan,
    ) -> Self {
        let converters = plan
            .converted()
            .into_iter()
            .map(|(p, classes)| {
                let label = cache_stage(stage, &classes);
                (p, StageConverter::open(store, cache, &label, p))
            })
            .collect();
        PlanConverter {
            store,
            plan,
            converters,
        }
    }

    /// The plan the stage loads under.
    pub fn plan(&self) -> StagePlan {
        self.plan
    }

    /// Tensor `name` of `shape`, of tensor class `class`, at the plan's
    /// precision for that class.
    pub fn weight(&self, class: TensorClass, name: &str, shape: &[usize]) -> Result<Weight> {
        let p = self.plan.get(class);
        match self.converters.iter().find(|(q, _)| *q == p) {
            Some((_, c)) => c.weight(name, shape),
            None => self.store.weight(name, shape),
        }
    }

    /// Completes every converter ([`StageConverter::finish`]).
    pub fn finish(self) {
        self.converters.into_iter().for_each(|(_, c)| c.finish());
    }
}

fn open_state(store: &TensorStore, dir: &Path, stage: &str, precision: Precision) -> State {
    let key = match Key::of(store, stage, precision) {
        Ok(k) => k,
        Err(e) => {
            let path = dir.join(format!("{stage}.{precision}.wcache"));
            let reason = format!("cannot read the checkpoint's file metadata: {e}");
            warn(&path, &reason);
            return State::Failed { path, reason };
        }
    };
    let path = dir.join(key.file_name());
    let rebuild = match read_valid(&path, &key) {
        Ok((file, tensors)) => {
            return State::Hit {
                path,
                file,
                tensors,
                missing: None,
            }
        }
        Err(Invalid::Missing) => None,
        Err(Invalid::Bad(reason)) => {
            warn(&path, &format!("{reason}; converting and rebuilding it"));
            Some(reason)
        }
    };
    match Writer::create(&path, key) {
        Ok(writer) => State::Write { writer, rebuild },
        Err(e) => {
            let reason = format!("cannot write: {e}");
            warn_write_failure(&path, &reason);
            State::Failed { path, reason }
        }
    }
}

fn warn(path: &Path, message: &str) {
    tracing::warn!("weights cache {}: {message}", path.display());
}

/// Unwritable cache directories warn once per process (every stage would
/// repeat the same complaint).
fn warn_write_failure(path: &Path, reason: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        warn(
            path,
            &format!("{reason}; loading without the cache (converted in memory)"),
        );
    }
}

#[cfg(test)]
mod tests {
    use tts_kernels::Mat;

    use super::*;

    /// A one-tensor f32 safetensors file `w` of `[rows, cols]`.
    fn write_checkpoint(path: &Path, rows: usize, cols: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 1013) as f32 / 500.0 - 1.0)
            .collect();
        let mut header = format!(
            r#"{{"w":{{"dtype":"F32","shape":[{rows},{cols}],"data_offsets":[0,{}]}}}}"#,
            v.len() * 4
        )
        .into_bytes();
        while header.len() % 8 != 0 {
            header.push(b' ');
        }
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(&header);
        b.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        std::fs::write(path, b).unwrap();
        v
    }

    /// Converted through the cache twice: both loads are zero-copy views of
    /// the file, with the bytes the in-memory conversion gives.
    #[test]
    fn a_hit_maps_the_file_and_matches_the_conversion() {
        let tmp = std::env::temp_dir().join(format!("tts-rt-wcache-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let ckpt = tmp.join("model.safetensors");
        let (rows, cols) = (70, 96);
        let v = write_checkpoint(&ckpt, rows, cols);
        for p in [
            Precision::Int8,
            Precision::Q4,
            Precision::Iq4,
            Precision::Q6,
        ] {
            let want = convert(Weight::from_f32(rows, cols, v.clone()), p);
            let mut statuses = Vec::new();
            for _ in 0..2 {
                let store = TensorStore::open_files(std::slice::from_ref(&ckpt)).unwrap();
                let cache = WeightsCache::new(Some(&tmp.join("cache")));
                let conv = StageConverter::open(&store, &cache, "s", p);
                let w = conv.weight("w", &[rows, cols]).unwrap();
                conv.finish();
                statuses.push(cache.take_events()[0].status.clone());
                match (w.mat(), want.mat()) {
                    (
                        Mat::Q8 { data, scales, .. },
                        Mat::Q8 {
                            data: d2,
                            scales: s2,
                            ..
                        },
                    ) => {
                        assert_eq!(data, d2);
                        assert_eq!(scales, s2);
                    }
                    (a, b) if a.group_parts().is_some() => {
                        assert_eq!(a.group_parts(), b.group_parts(), "{p}");
                    }
                    _ => panic!("{p}: wrong kind"),
                }
                // Created: mapped back from the file just written; Hit:
                // mapped from the existing file.
                assert!(w.is_file_backed(), "{p}");
            }
            assert_eq!(
                statuses,
                vec![WeightsCacheStatus::Created, WeightsCacheStatus::Hit]
            );
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// A plan's converted classes go to one file per precision, keyed by
    /// the classes it holds: a mixed plan never reads (or overwrites) the
    /// uniform plan's file, and a second load of each is a hit.
    #[test]
    fn plan_files_are_keyed_by_their_classes() {
        let tmp = std::env::temp_dir().join(format!("tts-rt-wcache-plan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let ckpt = tmp.join("model.safetensors");
        let (rows, cols) = (8, 64);
        write_checkpoint(&ckpt, rows, cols);
        let uniform = StagePlan::uniform(Precision::Int8);
        let mixed = StagePlan {
            mlp_down: Precision::Q4,
            head: Precision::Int8,
            ..uniform
        };
        assert_eq!(
            cache_stage(
                "s",
                &[
                    TensorClass::Attn,
                    TensorClass::MlpUpGate,
                    TensorClass::MlpDown
                ]
            ),
            "s"
        );
        for round in 0..2 {
            for plan in [uniform, mixed] {
                let store = TensorStore::open_files(std::slice::from_ref(&ckpt)).unwrap();
                let cache = WeightsCache::new(Some(&tmp.join("cache")));
                let conv = PlanConverter::open(&store, &cache, "s", plan);
                // One tensor per file (the checkpoint holds one): the first
                // class of each converted precision.
                for c in plan.converted().into_iter().map(|(_, cs)| cs[0]) {
                    let w = conv.weight(c, "w", &[rows, cols]).unwrap();
                    let want = convert(store.weight("w", &[rows, cols]).unwrap(), plan.get(c));
                    assert_eq!(w.bytes(), want.bytes(), "{c:?}");
                }
                conv.finish();
                let events = cache.take_events();
                let got: Vec<(String, Precision)> = events
                    .iter()
                    .map(|e| (e.stage.clone(), e.precision))
                    .collect();
                let want: Vec<(String, Precision)> = if plan == uniform {
                    vec![("s".into(), Precision::Int8)]
                } else {
                    vec![
                        ("s[attn+mlp_up_gate+head]".into(), Precision::Int8),
                        ("s[mlp_down]".into(), Precision::Q4),
                    ]
                };
                assert_eq!(got, want);
                let status = if round == 0 {
                    WeightsCacheStatus::Created
                } else {
                    WeightsCacheStatus::Hit
                };
                assert!(events.iter().all(|e| e.status == status), "{events:?}");
            }
        }
        let files = std::fs::read_dir(tmp.join("cache")).unwrap().count();
        assert_eq!(files, 3);
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn hash_changes_with_any_word_length_and_tail() {
        let base: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        let h = hash64(&base);
        assert_eq!(h, hash64(&base.clone()));
        for at in [0, 7, 8, 31, 32, 500, 991, 999] {
            let mut v = base.clone();
            v[at] ^= 1;
            assert_ne!(hash64(&v), h, "flip at {at}");
        }
        assert_ne!(hash64(&base[..999]), h);
        let mut longer = base.clone();
        longer.push(0);
        assert_ne!(hash64(&longer), h, "a zero byte appended");
        assert_ne!(hash64(&[]), hash64(&[0]));
    }
}
