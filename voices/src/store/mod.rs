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
//! stays valid after the voice is replaced or removed. (A read may wait for
//! another thread's rescan of a changed directory: a listing, and the
//! reading of the files that changed.)
//!
//! # Several processes on one directory
//!
//! Any number of processes (servers, `tts-rt voice ...`) may read and write
//! one directory at once:
//!
//! - A new voice is published with a hard link, which never overwrites: of
//!   two processes adding one name at once, one stores its voice and the
//!   other gets [`StoreError::AlreadyExists`] (or [`StoreError::Busy`] while
//!   the first holds the name's lock). A replacement is a rename over the
//!   old file. Either way a reader sees the old voice or the new one, whole.
//! - Names are locked across processes by an advisory lock on `<key>.lock`,
//!   which the kernel drops when its holder dies: a killed writer leaves no
//!   name busy, and its temp file is never read as a voice.
//! - Every read ([`VoiceStore::get`], [`VoiceStore::list`], ...) first looks
//!   at the directory's modification time (one `stat`); when it changed, the
//!   directory is listed again and only the files whose identity (inode,
//!   size, modification time) changed are read again. So a voice another
//!   process added, replaced or removed is seen by the next read here, with
//!   no restart and no reading of unchanged files. A directory time too
//!   recent to be told apart from a later change (file systems keep times
//!   in ticks, down to 2 s on some) is not trusted: until it is
//!   [`SETTLE`] old, each read lists the directory again.
//! - [`StoreOptions::max_voices`] is checked against what the directory
//!   holds when the name's lock is taken; two processes adding different
//!   names at the bound at once can both succeed, and then the voices past
//!   the bound (in name order) are skipped, and named, on load.

pub(crate) mod atomic;
mod lock;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, Metadata};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, SystemTime};

use crate::format::{self, VOICE_EXT};
use crate::name::{NameError, VoiceName};
use crate::record::{CodecShape, RecordError, VoiceRecord};
use atomic::{sync_dir, write_new, TEMP_PREFIX};
use lock::{LockFailure, LockFile, LOCK_EXT};

/// Default cap on stored voices (vllm-omni's `SPEAKER_MAX_UPLOADED`).
pub const DEFAULT_MAX_VOICES: usize = 1000;
/// Default age after which a temp file or an unheld lock file is taken to
/// be left by a killed writer and removed (a voice write takes
/// milliseconds; ten minutes is safe).
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(600);
/// How old the directory's modification time must be for a read to trust
/// that an unchanged time means an unchanged directory: the coarsest tick
/// of a common file system's times (FAT's 2 s; ext4, XFS and btrfs tick in
/// milliseconds or less).
pub const SETTLE: Duration = Duration::from_secs(2);

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
    /// Age at which a temp file, or a lock file no writer holds, is removed.
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

/// Names being written by this process, and those of them that are new
/// (reserved against `max_voices` before their file exists; one counts
/// once, whether a rescan has already found its file or not).
#[derive(Default)]
struct Writers {
    names: HashSet<String>,
    new_reserved: HashSet<String>,
}

/// What one voice file gave when it was read: the voice, or why not.
type Loaded = Result<Arc<VoiceRecord>, String>;

/// What the directory held at the last look, as readers see it.
#[derive(Default)]
struct State {
    voices: BTreeMap<String, Arc<VoiceRecord>>,
    /// Each voice file as last read, by its name without the extension:
    /// its identity then, and what it gave (so an unchanged file, good or
    /// corrupt, is not read again).
    files: HashMap<String, (Stamp, Loaded)>,
    skipped: Vec<SkippedVoice>,
    /// Keys this process wrote since the running rescan began: the rescan
    /// keeps what those writes left rather than what it read before them.
    touched: HashSet<String>,
}

/// A directory of voices, shared by every session of a server.
pub struct VoiceStore {
    dir: PathBuf,
    opts: StoreOptions,
    state: RwLock<State>,
    /// Held while the directory is rescanned (one rescan at a time); the
    /// directory's identity at the last rescan, when it can be trusted to
    /// change with the directory ([`SETTLE`]).
    seen: Mutex<Option<Stamp>>,
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
            state: RwLock::new(State::default()),
            seen: Mutex::new(None),
            writers: Mutex::new(Writers::default()),
            watchers: Mutex::new(Vec::new()),
        };
        let skipped = store.reload()?;
        Ok((store, skipped))
    }

    /// Lists the directory again whatever its time says (reading only the
    /// files that changed), returning the files skipped. Voices that
    /// changed are reported to watchers.
    pub fn reload(&self) -> Result<Vec<SkippedVoice>, StoreError> {
        self.rescan(true)?;
        Ok(self.skipped())
    }

    /// Picks up other processes' writes if the directory changed since the
    /// last look (one `stat` when it did not). Every read does this first.
    pub fn refresh(&self) -> Result<(), StoreError> {
        self.rescan(false)
    }

    /// The voice files that did not load at the last look, and why.
    pub fn skipped(&self) -> Vec<SkippedVoice> {
        self.read_state().skipped.clone()
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
        self.fresh().voices.values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.fresh().voices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fresh().voices.is_empty()
    }

    /// The voice called `name` (any case); `None` also for invalid names.
    pub fn get(&self, name: &str) -> Option<Arc<VoiceRecord>> {
        let key = VoiceName::new(name).ok()?;
        self.fresh().voices.get(key.key()).cloned()
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
    /// case, written by any process) is replaced only when `replace`;
    /// otherwise [`StoreError::AlreadyExists`]. A concurrent write of the
    /// same name, here or in another process, gives [`StoreError::Busy`]; a
    /// new voice past `max_voices`, [`StoreError::Full`].
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
        let io_err = |error| StoreError::Io {
            path: path.clone(),
            error,
        };
        let exists = || StoreError::AlreadyExists {
            name: name.to_string(),
        };
        // What other processes wrote counts: against the bound, and as an
        // existing voice (they cannot write this name while we hold it).
        let _ = self.refresh();
        let on_disk = match fs::symlink_metadata(&path) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(io_err(e)),
        };
        if on_disk && !replace {
            return Err(exists());
        }
        let _reserved = if on_disk {
            None
        } else {
            Some(self.reserve_new(name.key())?)
        };
        let written = if replace {
            atomic::replace(&self.dir, &path, &bytes)
        } else {
            write_new(&self.dir, &path, &bytes)
        };
        let meta = match written {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(exists()),
            Err(e) => return Err(io_err(e)),
        };
        let record = Arc::new(record);
        {
            let mut st = self.write_state();
            let key = name.key().to_owned();
            st.voices.insert(key.clone(), Arc::clone(&record));
            st.files
                .insert(key.clone(), (Stamp::of(&meta), Ok(Arc::clone(&record))));
            st.skipped.retain(|s| s.path != path);
            st.touched.insert(key);
        }
        drop(guard);
        self.notify(name.key());
        Ok(record)
    }

    /// Deletes the voice called `name` (any case) and returns what it was.
    /// A voice file that did not load (unreadable, truncated, not a voice,
    /// a version this build does not read) is removed by its name all the
    /// same, as [`Removed::Corrupt`] with the reason: it is listed as
    /// skipped, and this is how it goes away. A name with no file (none
    /// ever, or removed by another process first) is
    /// [`StoreError::NotFound`].
    pub fn remove(&self, name: &str) -> Result<Removed, StoreError> {
        let name = VoiceName::new(name)?;
        let guard = self.begin_write(&name)?;
        let path = self.path_of(&name);
        let io_err = |error| StoreError::Io {
            path: path.clone(),
            error,
        };
        let not_found = || StoreError::NotFound {
            name: name.to_string(),
        };
        // Whatever another process did to this name before we locked it.
        let _ = self.refresh();
        let held = self.read_state().voices.get(name.key()).cloned();
        let removed = match held {
            Some(record) => Removed::Voice(record),
            None => {
                // Not loaded: a file that did not load, or one another
                // process wrote since the last look. Either is the file
                // this name stands for.
                match fs::symlink_metadata(&path) {
                    Ok(m) if !m.is_dir() => {}
                    Ok(_) => return Err(not_found()),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(not_found()),
                    Err(e) => return Err(io_err(e)),
                }
                match format::read_file(&path, self.opts.codec.as_ref()) {
                    Ok(r) if r.name.key() == name.key() => Removed::Voice(Arc::new(r)),
                    Ok(r) => Removed::Corrupt {
                        name: name.clone(),
                        path: path.clone(),
                        reason: format!(
                            "it holds the voice {:?}, which belongs in {}.{VOICE_EXT}",
                            r.name.as_str(),
                            r.name.key()
                        ),
                    },
                    Err(e) => Removed::Corrupt {
                        name: name.clone(),
                        path: path.clone(),
                        reason: e.problem.to_string(),
                    },
                }
            }
        };
        let gone = match fs::remove_file(&path) {
            Ok(()) => {
                sync_dir(&self.dir).map_err(io_err)?;
                false
            }
            // Removed meanwhile by something that takes no lock.
            Err(e) if e.kind() == io::ErrorKind::NotFound => true,
            Err(e) => return Err(io_err(e)),
        };
        let key = name.key().to_owned();
        {
            let mut st = self.write_state();
            st.voices.remove(&key);
            st.files.remove(&key);
            st.skipped.retain(|s| s.path != path);
            st.touched.insert(key.clone());
        }
        drop(guard);
        self.notify(&key);
        if gone {
            return Err(not_found());
        }
        Ok(removed)
    }

    /// The state after a look at the directory (errors leave the last one:
    /// a directory that cannot be read now still serves what it held).
    fn fresh(&self) -> std::sync::RwLockReadGuard<'_, State> {
        let _ = self.rescan(false);
        self.read_state()
    }

    fn read_state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists the directory when `force`, or when its identity changed
    /// since the last trusted look; reads the voice files that changed and
    /// swaps the result in, telling watchers of each voice that changed.
    fn rescan(&self, force: bool) -> Result<(), StoreError> {
        let io_err = |error| StoreError::Io {
            path: self.dir.clone(),
            error,
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        // Taken before the directory is looked at: a change after the look
        // then gets a later time than the one seen, unless that time is
        // within a tick of now (not settled).
        let now = SystemTime::now();
        let dir = Stamp::of(&fs::metadata(&self.dir).map_err(io_err)?);
        if !force && *seen == Some(dir) {
            return Ok(());
        }
        let cached = {
            let mut st = self.write_state();
            st.touched.clear();
            st.files.clone()
        };
        let scan = scan(&self.dir, &self.opts, &cached)?;
        let changed: Vec<String> = {
            let mut st = self.write_state();
            let Scan {
                mut voices,
                mut files,
                mut skipped,
            } = scan;
            for key in std::mem::take(&mut st.touched) {
                match st.voices.get(&key) {
                    Some(r) => voices.insert(key.clone(), Arc::clone(r)),
                    None => voices.remove(&key),
                };
                match st.files.get(&key) {
                    Some(f) => files.insert(key.clone(), f.clone()),
                    None => files.remove(&key),
                };
                let path = self.dir.join(format!("{key}.{VOICE_EXT}"));
                skipped.retain(|s| s.path != path);
            }
            let mut changed: Vec<String> = st
                .voices
                .iter()
                .filter(|(k, v)| !voices.get(*k).is_some_and(|n| Arc::ptr_eq(n, v)))
                .map(|(k, _)| k.clone())
                .collect();
            changed.extend(
                voices
                    .keys()
                    .filter(|k| !st.voices.contains_key(*k))
                    .cloned(),
            );
            st.voices = voices;
            st.files = files;
            st.skipped = skipped;
            changed
        };
        let settled = dir
            .mtime
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age >= SETTLE);
        *seen = settled.then_some(dir);
        drop(seen);
        for key in changed {
            self.notify(&key);
        }
        Ok(())
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
        match LockFile::acquire(&self.dir, name.key()) {
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

    /// Counts the new voice `key` against `max_voices` until the guard
    /// drops.
    fn reserve_new(&self, key: &str) -> Result<Reservation<'_>, StoreError> {
        let mut w = self.writers.lock().unwrap_or_else(PoisonError::into_inner);
        let st = self.read_state();
        let pending = w
            .new_reserved
            .iter()
            .filter(|k| !st.voices.contains_key(*k))
            .count();
        if st.voices.len() + pending >= self.opts.max_voices {
            return Err(StoreError::Full {
                max: self.opts.max_voices,
            });
        }
        drop(st);
        w.new_reserved.insert(key.to_owned());
        Ok(Reservation {
            store: self,
            key: key.to_owned(),
        })
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
            .field("voices", &self.read_state().voices.len())
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
    key: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut w = self
            .store
            .writers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        w.new_reserved.remove(&self.key);
    }
}

/// A file's identity as far as the store is concerned. Every store write
/// makes a new file (a new inode), so a voice replaced by any process has
/// another stamp; a file changed in place keeps its inode but (normally)
/// not its size and time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
}

impl Stamp {
    fn of(m: &Metadata) -> Stamp {
        #[cfg(unix)]
        let (dev, ino) = {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        };
        #[cfg(not(unix))]
        let (dev, ino) = (0, 0);
        Stamp {
            dev,
            ino,
            len: m.len(),
            mtime: m.modified().ok(),
        }
    }
}

/// One listing of the directory.
struct Scan {
    voices: BTreeMap<String, Arc<VoiceRecord>>,
    files: HashMap<String, (Stamp, Loaded)>,
    skipped: Vec<SkippedVoice>,
}

/// Loads every `*.safetensors` in `dir`, reading again only the files whose
/// stamp is not the one in `cached`. Lock files and temp files (removed
/// once stale and unheld), directories and other files are not voices and
/// are passed over silently; a voice file that does not load is skipped
/// with a reason.
fn scan(
    dir: &Path,
    opts: &StoreOptions,
    cached: &HashMap<String, (Stamp, Loaded)>,
) -> Result<Scan, StoreError> {
    let io_err = |error| StoreError::Io {
        path: dir.to_owned(),
        error,
    };
    let mut found: Vec<(String, PathBuf)> = Vec::new();
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
            if is_stale(&path, opts.stale_after) {
                let _ = fs::remove_file(&path);
            }
            continue;
        }
        if file_name.ends_with(&format!(".{LOCK_EXT}")) && !file_name.starts_with('.') {
            if is_stale(&path, opts.stale_after) {
                lock::remove_if_free(&path);
            }
            continue;
        }
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        let Some(stem) = file_name.strip_suffix(&format!(".{VOICE_EXT}")) else {
            continue;
        };
        if !is_file || file_name.starts_with('.') {
            continue;
        }
        found.push((stem.to_owned(), path));
    }
    found.sort();
    let mut voices = BTreeMap::new();
    let mut files = HashMap::new();
    for (stem, path) in found {
        let skip = |reason: String| SkippedVoice {
            path: path.clone(),
            reason,
        };
        let stamp = match fs::metadata(&path) {
            Ok(m) => Stamp::of(&m),
            // Removed since the listing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                skipped.push(skip(e.to_string()));
                continue;
            }
        };
        let loaded = match cached.get(&stem) {
            Some((s, loaded)) if *s == stamp => loaded.clone(),
            _ => match load(&stem, &path, opts) {
                // Removed (or replaced) while being read: the next look
                // sees what is there now.
                Err(_) if !path.exists() => continue,
                loaded => loaded,
            },
        };
        files.insert(stem.clone(), (stamp, loaded.clone()));
        match loaded {
            Err(reason) => skipped.push(skip(reason)),
            Ok(_) if voices.len() >= opts.max_voices => skipped.push(skip(format!(
                "the library already holds its maximum of {} voices",
                opts.max_voices
            ))),
            Ok(r) => {
                voices.insert(stem, r);
            }
        }
    }
    Ok(Scan {
        voices,
        files,
        skipped,
    })
}

/// Reads the voice file `<stem>.safetensors`.
fn load(stem: &str, path: &Path, opts: &StoreOptions) -> Loaded {
    let record = match VoiceName::new(stem) {
        Err(e) => Err(format!("the file name is not a voice name: {e}")),
        Ok(n) if n.key() != stem => Err(format!(
            "voice files are named by the lower-case name; rename it to {}.{VOICE_EXT}",
            n.key()
        )),
        Ok(_) => format::read_file(path, opts.codec.as_ref()).map_err(|e| e.problem.to_string()),
    };
    match record {
        Ok(r) if r.name.key() != stem => Err(format!(
            "it holds the voice {:?}, which belongs in {}.{VOICE_EXT}",
            r.name.as_str(),
            r.name.key()
        )),
        Ok(r) => Ok(Arc::new(r)),
        Err(e) => Err(e),
    }
}

/// Older than `stale_after` by its modification time.
fn is_stale(path: &Path, stale_after: Duration) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age >= stale_after)
}
