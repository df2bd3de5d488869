//! The voice store: a directory of voice files, held in memory for readers.
//!
//! One file per voice, `<key>.safetensors` (see [`crate::format`]), where the
//! key is the lower-case name. [`VoiceStore::open`] loads every voice and names
//! each file it had to skip; it never fails because of one bad file. Writes
//! are atomic (`atomic.rs`) and guarded per name (`lock.rs`), so two writers of
//! one name cannot interleave: one wins, the other gets [`StoreError::Busy`].
//!
//! Readers get `Arc<VoiceRecord>`s from an in-memory map. The map's lock is
//! held only to look up or swap an `Arc`, never across file I/O, so a reader
//! never waits for a write to reach the disk, and a record a session holds
//! stays valid after the voice is replaced or removed.
//!
//! Other processes' writes to the same directory are seen after
//! [`VoiceStore::reload`] (or a reopen); names they are writing at this
//! moment are `Busy` here too, through the lock file.

pub(crate) mod atomic;
mod lock;

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, SystemTime};

use crate::format::{self, VOICE_EXT};
use crate::name::{NameError, VoiceName};
use crate::record::{CodecShape, RecordError, VoiceRecord};
use atomic::{sync_dir, write_atomic, TEMP_PREFIX};
use lock::{LockFailure, LockFile};

/// Default cap on stored voices (vllm-omni's `SPEAKER_MAX_UPLOADED`).
pub const DEFAULT_MAX_VOICES: usize = 1000;
/// Default age after which a lock or temp file is taken to be left by a
/// crashed writer (a voice write takes milliseconds; ten minutes is safe).
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(600);

/// How a store is bounded and checked.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Inserting a new voice past this many gives [`StoreError::Full`].
    pub max_voices: usize,
    /// The codec records' codes are checked against: the model's that will
    /// speak them (its code groups and codebook exactly), or `None` (the
    /// default) where no model is loaded, each record against its own shape
    /// within what a Qwen3-TTS codec makes ([`VoiceRecord::validate`]). A
    /// checkpoint's encoder may keep fewer than the released 16 groups, so
    /// without a model the shape a file has is the one it was made with.
    pub codec: Option<CodecShape>,
    /// Age at which a lock file is taken over and a temp file removed.
    pub stale_after: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_voices: DEFAULT_MAX_VOICES,
            codec: None,
            stale_after: DEFAULT_STALE_AFTER,
        }
    }
}

/// A file in the store directory that was not loaded, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedVoice {
    pub path: PathBuf,
    pub reason: String,
}

/// Something that holds per-voice state and must drop it when the voice
/// changes (for example a cache of state derived from voices).
pub trait VoiceWatcher: Send + Sync {
    /// The voice with this key was replaced or removed.
    fn voice_changed(&self, key: &str);
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// (`error` is in the message, not the error's source: one cause per
    /// line where a chain is printed.)
    #[error("voice directory {}: {error}", path.display())]
    Io { path: PathBuf, error: io::Error },
    #[error(transparent)]
    Name(#[from] NameError),
    /// (The record's refusal is in the message, not the error's source.)
    #[error("invalid voice: {0}")]
    Record(RecordError),
    #[error("a voice named {name:?} already exists; remove it first or replace it")]
    AlreadyExists { name: String },
    #[error("voice {name:?} is being written by another request; try again")]
    Busy { name: String },
    #[error("the voice library is full ({max} voices); remove one first")]
    Full { max: usize },
    #[error("no voice named {name:?}")]
    NotFound { name: String },
}

impl From<RecordError> for StoreError {
    fn from(e: RecordError) -> Self {
        StoreError::Record(e)
    }
}

/// What [`VoiceStore::remove`] deleted.
#[derive(Clone, Debug)]
pub enum Removed {
    /// A stored voice (readers holding it keep their copy).
    Voice(Arc<VoiceRecord>),
    /// A voice file that did not load, and why: removed by its name.
    Corrupt {
        name: VoiceName,
        path: PathBuf,
        reason: String,
    },
}

impl Removed {
    /// The voice's name as stored, or as asked for when its file was corrupt.
    pub fn name(&self) -> &str {
        match self {
            Removed::Voice(r) => r.name.as_str(),
            Removed::Corrupt { name, .. } => name.as_str(),
        }
    }

    /// The name's lower-case key.
    pub fn key(&self) -> &str {
        match self {
            Removed::Voice(r) => r.name.key(),
            Removed::Corrupt { name, .. } => name.key(),
        }
    }

    /// The removed voice, when its file loaded.
    pub fn record(&self) -> Option<&Arc<VoiceRecord>> {
        match self {
            Removed::Voice(r) => Some(r),
            Removed::Corrupt { .. } => None,
        }
    }

    /// Why the removed file did not load, when it did not.
    pub fn corrupt_reason(&self) -> Option<&str> {
        match self {
            Removed::Voice(_) => None,
            Removed::Corrupt { reason, .. } => Some(reason),
        }
    }
}

/// Names being written by this process, and how many of them are new
/// (reserved against `max_voices` before their file exists).
#[derive(Default)]
struct Writers {
    names: HashSet<String>,
    new_reserved: usize,
}

/// A directory of voices, shared by every session of a server.
pub struct VoiceStore {
    dir: PathBuf,
    opts: StoreOptions,
    voices: RwLock<BTreeMap<String, Arc<VoiceRecord>>>,
    writers: Mutex<Writers>,
    watchers: Mutex<Vec<Weak<dyn VoiceWatcher>>>,
}

impl VoiceStore {
    /// Opens (creating if absent) `dir` with default options.
    pub fn open(dir: impl AsRef<Path>) -> Result<(VoiceStore, Vec<SkippedVoice>), StoreError> {
        VoiceStore::open_with(dir, StoreOptions::default())
    }

    /// Opens `dir`, loading every valid voice; the files it could not load
    /// are returned, each with the reason, and are left untouched on disk.
    pub fn open_with(
        dir: impl AsRef<Path>,
        opts: StoreOptions,
    ) -> Result<(VoiceStore, Vec<SkippedVoice>), StoreError> {
        let dir = dir.as_ref().to_owned();
        fs::create_dir_all(&dir).map_err(|error| StoreError::Io {
            path: dir.clone(),
            error,
        })?;
        let store = VoiceStore {
            dir,
            opts,
            voices: RwLock::new(BTreeMap::new()),
            writers: Mutex::new(Writers::default()),
            watchers: Mutex::new(Vec::new()),
        };
        let skipped = store.reload()?;
        Ok((store, skipped))
    }

    /// Rescans the directory (picking up other processes' writes), returning
    /// the files skipped. Voices whose file changed are reported to watchers.
    pub fn reload(&self) -> Result<Vec<SkippedVoice>, StoreError> {
        let (loaded, skipped) = scan(&self.dir, &self.opts)?;
        let changed: Vec<String> = {
            let mut voices = self.voices.write().unwrap_or_else(PoisonError::into_inner);
            let changed = voices
                .iter()
                .filter(|(k, v)| loaded.get(*k) != Some(*v))
                .map(|(k, _)| k.clone())
                .collect();
            *voices = loaded;
            changed
        };
        for key in changed {
            self.notify(&key);
        }
        Ok(skipped)
    }

    /// The directory this store keeps its files in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The options it was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.opts
    }

    /// Every voice, ordered by key.
    pub fn list(&self) -> Vec<Arc<VoiceRecord>> {
        self.read_map().values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.read_map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read_map().is_empty()
    }

    /// The voice called `name` (any case); `None` also for invalid names.
    pub fn get(&self, name: &str) -> Option<Arc<VoiceRecord>> {
        let key = VoiceName::new(name).ok()?;
        self.read_map().get(key.key()).cloned()
    }

    /// Where the voice with this key lives on disk.
    pub fn path_of(&self, name: &VoiceName) -> PathBuf {
        self.dir.join(format!("{}.{VOICE_EXT}", name.key()))
    }

    /// Registers `watcher` to hear of replaced and removed voices (held
    /// weakly: dropping the watcher unregisters it).
    pub fn watch<W: VoiceWatcher + 'static>(&self, watcher: &Arc<W>) {
        let weak: Weak<dyn VoiceWatcher> = Arc::downgrade(watcher) as Weak<dyn VoiceWatcher>;
        let mut w = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
        w.retain(|x| x.strong_count() > 0);
        w.push(weak);
    }

    /// Stores `record`, atomically. An existing voice of that name (any
    /// case) is replaced only when `replace`; otherwise
    /// [`StoreError::AlreadyExists`]. A concurrent write of the same name
    /// gives [`StoreError::Busy`]; a new voice past `max_voices`,
    /// [`StoreError::Full`].
    pub fn insert(
        &self,
        record: VoiceRecord,
        replace: bool,
    ) -> Result<Arc<VoiceRecord>, StoreError> {
        record.validate(self.opts.codec.as_ref())?;
        let bytes = format::to_bytes(&record)?;
        let name = record.name.clone();
        let guard = self.begin_write(&name)?;
        let path = self.path_of(&name);
        let held = self.read_map().contains_key(name.key());
        // A file another process wrote since our last scan counts as existing.
        if (held || path.exists()) && !replace {
            return Err(StoreError::AlreadyExists {
                name: name.to_string(),
            });
        }
        let _reserved = if held {
            None
        } else {
            Some(self.reserve_new()?)
        };
        write_atomic(&self.dir, &path, &bytes).map_err(|error| StoreError::Io {
            path: path.clone(),
            error,
        })?;
        let record = Arc::new(record);
        self.voices
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.key().to_owned(), Arc::clone(&record));
        drop(guard);
        self.notify(name.key());
        Ok(record)
    }

    /// Deletes the voice called `name` (any case) and returns what it was.
    /// A voice file that did not load (unreadable, truncated, not a voice,
    /// a version this build does not read) is removed by its name all the
    /// same, as [`Removed::Corrupt`] with the reason: it is listed as
    /// skipped, and this is how it goes away. A name with no file is
    /// [`StoreError::NotFound`].
    pub fn remove(&self, name: &str) -> Result<Removed, StoreError> {
        let name = VoiceName::new(name)?;
        let guard = self.begin_write(&name)?;
        let path = self.path_of(&name);
        let io_err = |error| StoreError::Io {
            path: path.clone(),
            error,
        };
        let held = self.read_map().get(name.key()).cloned();
        let removed = match held {
            Some(record) => Removed::Voice(record),
            None => {
                // Not loaded: a file that did not load at the last scan, or
                // one another process wrote since. Either is the file this
                // name stands for.
                match fs::symlink_metadata(&path) {
                    Ok(m) if !m.is_dir() => {}
                    Ok(_) => {
                        return Err(StoreError::NotFound {
                            name: name.to_string(),
                        })
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        return Err(StoreError::NotFound {
                            name: name.to_string(),
                        })
                    }
                    Err(e) => return Err(io_err(e)),
                }
                match format::read_file(&path, self.opts.codec.as_ref()) {
                    Ok(r) if r.name.key() == name.key() => Removed::Voice(Arc::new(r)),
                    Ok(r) => Removed::Corrupt {
                        name,
                        path: path.clone(),
                        reason: format!(
                            "it holds the voice {:?}, which belongs in {}.{VOICE_EXT}",
                            r.name.as_str(),
                            r.name.key()
                        ),
                    },
                    Err(e) => Removed::Corrupt {
                        name,
                        path: path.clone(),
                        reason: e.problem.to_string(),
                    },
                }
            }
        };
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.dir).map_err(io_err)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(e)),
        }
        let key = removed.key().to_owned();
        self.voices
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key);
        drop(guard);
        self.notify(&key);
        Ok(removed)
    }

    fn read_map(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<VoiceRecord>>> {
        self.voices.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the in-process guard, then the lock file, for `name`.
    fn begin_write(&self, name: &VoiceName) -> Result<WriteGuard<'_>, StoreError> {
        let busy = || StoreError::Busy {
            name: name.to_string(),
        };
        {
            let mut w = self.writers.lock().unwrap_or_else(PoisonError::into_inner);
            if !w.names.insert(name.key().to_owned()) {
                return Err(busy());
            }
        }
        let mut guard = WriteGuard {
            store: self,
            key: name.key().to_owned(),
            lock: None,
        };
        match LockFile::acquire(&self.dir, name.key(), self.opts.stale_after) {
            Ok(lock) => guard.lock = Some(lock),
            Err(LockFailure::Busy) => return Err(busy()),
            Err(LockFailure::Io(error)) => {
                return Err(StoreError::Io {
                    path: self.dir.clone(),
                    error,
                })
            }
        }
        Ok(guard)
    }

    /// Counts one more voice against `max_voices` until the guard drops.
    fn reserve_new(&self) -> Result<Reservation<'_>, StoreError> {
        let mut w = self.writers.lock().unwrap_or_else(PoisonError::into_inner);
        if self.read_map().len() + w.new_reserved >= self.opts.max_voices {
            return Err(StoreError::Full {
                max: self.opts.max_voices,
            });
        }
        w.new_reserved += 1;
        Ok(Reservation { store: self })
    }

    fn notify(&self, key: &str) {
        let live: Vec<Arc<dyn VoiceWatcher>> = {
            let mut w = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
            w.retain(|x| x.strong_count() > 0);
            w.iter().filter_map(Weak::upgrade).collect()
        };
        for watcher in live {
            watcher.voice_changed(key);
        }
    }
}

impl std::fmt::Debug for VoiceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VoiceStore")
            .field("dir", &self.dir)
            .field("voices", &self.len())
            .finish_non_exhaustive()
    }
}

/// Holds a name's in-process slot and its lock file; releases both on drop.
struct WriteGuard<'a> {
    store: &'a VoiceStore,
    key: String,
    lock: Option<LockFile>,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        drop(self.lock.take());
        let mut w = self
            .store
            .writers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        w.names.remove(&self.key);
    }
}

/// One slot of `max_voices` held for a new voice being written.
struct Reservation<'a> {
    store: &'a VoiceStore,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut w = self
            .store
            .writers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        w.new_reserved -= 1;
    }
}

type Scan = (BTreeMap<String, Arc<VoiceRecord>>, Vec<SkippedVoice>);

/// Loads every `*.safetensors` in `dir`. Lock files, temp files (removed
/// once stale), directories and other files are not voices and are passed
/// over silently; a voice file that does not load is skipped with a reason.
fn scan(dir: &Path, opts: &StoreOptions) -> Result<Scan, StoreError> {
    let io_err = |error| StoreError::Io {
        path: dir.to_owned(),
        error,
    };
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    let mut skipped = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        let path = entry.path();
        let Some(file_name) = entry.file_name().to_str().map(str::to_owned) else {
            skipped.push(SkippedVoice {
                path,
                reason: "the file name is not UTF-8".into(),
            });
            continue;
        };
        if file_name.starts_with(TEMP_PREFIX) {
            remove_if_stale(&path, opts.stale_after);
            continue;
        }
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        let Some(stem) = file_name.strip_suffix(&format!(".{VOICE_EXT}")) else {
            continue;
        };
        if !is_file || file_name.starts_with('.') {
            continue;
        }
        files.push((stem.to_owned(), path));
    }
    files.sort();
    let mut voices = BTreeMap::new();
    for (stem, path) in files {
        let skip = |reason: String| SkippedVoice {
            path: path.clone(),
            reason,
        };
        let record = match VoiceName::new(&stem) {
            Err(e) => Err(format!("the file name is not a voice name: {e}")),
            Ok(n) if n.key() != stem => Err(format!(
                "voice files are named by the lower-case name; rename it to {}.{VOICE_EXT}",
                n.key()
            )),
            Ok(_) => {
                format::read_file(&path, opts.codec.as_ref()).map_err(|e| e.problem.to_string())
            }
        };
        let record = match record {
            Ok(r) if r.name.key() != stem => Err(format!(
                "it holds the voice {:?}, which belongs in {}.{VOICE_EXT}",
                r.name.as_str(),
                r.name.key()
            )),
            other => other,
        };
        match record {
            Err(reason) => skipped.push(skip(reason)),
            Ok(_) if voices.len() >= opts.max_voices => skipped.push(skip(format!(
                "the library already holds its maximum of {} voices",
                opts.max_voices
            ))),
            Ok(r) => {
                voices.insert(stem, Arc::new(r));
            }
        }
    }
    Ok((voices, skipped))
}

fn remove_if_stale(path: &Path, stale_after: Duration) {
    let old = fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age >= stale_after);
    if old {
        let _ = fs::remove_file(path);
    }
}
