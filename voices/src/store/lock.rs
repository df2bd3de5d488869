//! Per-name write guards: one in-process, one across processes.
//!
//! In-process, a set of names being written (under a mutex held only to test
//! and insert) makes a second writer of the same name fail fast with `Busy`
//! instead of queueing behind file I/O. Across processes (two servers or a
//! server and `tts-rt voice add` on one directory), `<key>.lock` created with
//! O_EXCL (`create_new`) plays the same part. A lock file left by a crashed
//! process is taken over once it is older than the stale age.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Extension of lock files (`alice.lock`).
pub(crate) const LOCK_EXT: &str = "lock";

/// Why a lock could not be taken.
pub(crate) enum LockFailure {
    /// Someone else holds it.
    Busy,
    Io(io::Error),
}

/// A held `<key>.lock`; removed on drop.
pub(crate) struct LockFile {
    path: PathBuf,
}

impl LockFile {
    /// Creates `<dir>/<key>.lock`, taking over one older than `stale_after`.
    pub(crate) fn acquire(
        dir: &Path,
        key: &str,
        stale_after: Duration,
    ) -> Result<Self, LockFailure> {
        let path = dir.join(format!("{key}.{LOCK_EXT}"));
        match create(&path) {
            Ok(()) => return Ok(LockFile { path }),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(LockFailure::Io(e)),
        }
        if !is_stale(&path, stale_after) {
            return Err(LockFailure::Busy);
        }
        // Move the stale lock aside under a unique name, so that of two
        // processes taking it over at once only one succeeds in removing
        // it; then compete for a fresh one with O_EXCL as usual.
        let aside = dir.join(format!(".stale-{key}-{}", std::process::id()));
        if fs::rename(&path, &aside).is_ok() {
            let _ = fs::remove_file(&aside);
        }
        match create(&path) {
            Ok(()) => Ok(LockFile { path }),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(LockFailure::Busy),
            Err(e) => Err(LockFailure::Io(e)),
        }
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

fn create(path: &Path) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(path)?;
    // Who holds it, for a person looking at a stuck directory.
    let _ = writeln!(f, "pid {}", std::process::id());
    Ok(())
}

/// Older than `stale_after` by its modification time (a lock that vanished
/// meanwhile counts as stale: the retry decides).
fn is_stale(path: &Path, stale_after: Duration) -> bool {
    match fs::metadata(path).and_then(|m| m.modified()) {
        Ok(modified) => SystemTime::now()
            .duration_since(modified)
            .is_ok_and(|age| age >= stale_after),
        Err(_) => true,
    }
}
