//! Per-name write guards: one in-process, one across processes.
//!
//! In-process, a set of names being written (under a mutex held only to test
//! and insert) makes a second writer of the same name fail fast with `Busy`
//! instead of queueing behind file I/O. Across processes (two servers, or a
//! server and `tts-rt voice add`, on one directory), `<key>.lock` plays the
//! same part: the writer holds an exclusive advisory lock on it (`flock`,
//! through [`File::try_lock`]), which the kernel releases when the writer's
//! process ends however it ends. So a writer that was killed leaves no name
//! busy: its lock file, if still there, is free to the next writer, and is
//! removed by it (or by a rescan once it is old).
//!
//! The holder removes the lock file before it lets the lock go. A writer
//! that opened the file just before that removal may then lock an inode no
//! longer in the directory; it checks that the path still names the inode
//! it locked, and starts over when it does not, so two writers never both
//! hold one name.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};

/// Extension of lock files (`alice.lock`).
pub(crate) const LOCK_EXT: &str = "lock";

/// Why a lock could not be taken.
pub(crate) enum LockFailure {
    /// Another writer (this process or another) holds it.
    Busy,
    Io(io::Error),
}

/// A held `<key>.lock`: removed, then released, on drop.
pub(crate) struct LockFile {
    path: PathBuf,
    /// Holds the lock while open.
    _file: File,
}

/// Attempts when the lock file is replaced under us: each retry follows a
/// holder's release, so more than a few means something else is going on.
const ATTEMPTS: usize = 16;

impl LockFile {
    /// Takes `<dir>/<key>.lock` without waiting: [`LockFailure::Busy`] when
    /// another writer holds it.
    pub(crate) fn acquire(dir: &Path, key: &str) -> Result<Self, LockFailure> {
        let path = dir.join(format!("{key}.{LOCK_EXT}"));
        for _ in 0..ATTEMPTS {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(LockFailure::Io)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Err(LockFailure::Busy),
                // A file system without advisory locks (some FUSE and SMB
                // mounts): no writer there can lock, so none is kept out.
                // Writes stay whole and a new voice never overwrites one
                // (`atomic.rs`); only "busy" is not told across processes.
                Err(TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => {
                    return Ok(LockFile { path, _file: file })
                }
                Err(TryLockError::Error(e)) => return Err(LockFailure::Io(e)),
            }
            match same_file(&file, &path) {
                Ok(true) => {
                    // Who holds it, for a person looking at a stuck directory
                    // (this also renews its modification time).
                    let _ = file.set_len(0);
                    let _ = file.rewind();
                    let _ = writeln!(file, "pid {}", std::process::id());
                    return Ok(LockFile { path, _file: file });
                }
                // Removed by the holder we waited on: open the new one.
                Ok(false) => continue,
                Err(e) => return Err(LockFailure::Io(e)),
            }
        }
        Err(LockFailure::Busy)
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Removed while still locked (see the module comment); the lock
        // goes with the file handle, after this.
        #[cfg(unix)]
        let _ = fs::remove_file(&self.path);
    }
}

/// Removes a lock file no writer holds (one left by a killed process). A
/// held one is left alone. Best effort.
pub(crate) fn remove_if_free(path: &Path) {
    let Ok(file) = OpenOptions::new().read(true).write(true).open(path) else {
        return;
    };
    if file.try_lock().is_ok() && same_file(&file, path).unwrap_or(false) {
        #[cfg(unix)]
        let _ = fs::remove_file(path);
    }
}

/// Whether `path` still names the file `file` has open (`Ok(false)` when
/// it names another file or none).
#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata()?;
    match fs::metadata(path) {
        Ok(now) => Ok(now.dev() == held.dev() && now.ino() == held.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Elsewhere lock files are never removed (an open file cannot be removed
/// on Windows), so the path always names the file locked.
#[cfg(not(unix))]
fn same_file(_file: &File, _path: &Path) -> io::Result<bool> {
    Ok(true)
}
