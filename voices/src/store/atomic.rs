//! Crash-safe file writes: write a temp file beside the target, fsync it,
//! publish it under the target's name, fsync the directory.
//!
//! Publishing is `rename` over the target ([`write_atomic`], which
//! replaces) or a hard link to the target's name ([`write_new`], which
//! fails if the name exists: `link` never overwrites, so of two processes
//! publishing one new name at once exactly one succeeds, whatever else
//! they do). Both are atomic on POSIX file systems: the target's name holds
//! its old bytes or the new ones, whole, never a torn mix, for a reader at
//! any moment and after a crash; the directory fsync makes the change
//! itself durable. A crash before publishing leaves only a temp file,
//! which the store ignores by its name (and removes once it is older than
//! [`super::StoreOptions::stale_after`]).

use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Prefix of every temp file (a leading dot: no voice name starts with one).
pub(crate) const TEMP_PREFIX: &str = ".tmp-";

/// Distinguishes temp files of concurrent writers in one process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Atomically makes `target` hold `bytes`, replacing what it held.
pub(crate) fn write_atomic(dir: &Path, target: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(dir, target, bytes).map(drop)
}

/// [`write_atomic`], answering the new file's metadata (the file that
/// `target` names now, unless another writer replaced it since).
pub(crate) fn replace(dir: &Path, target: &Path, bytes: &[u8]) -> io::Result<Metadata> {
    let tmp = temp_path(dir, target);
    let result = write_temp(&tmp, bytes).and_then(|m| fs::rename(&tmp, target).map(|()| m));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    let meta = result?;
    sync_dir(dir)?;
    Ok(meta)
}

/// Atomically makes `target` hold `bytes` if no file has that name:
/// [`io::ErrorKind::AlreadyExists`] otherwise, and nothing is changed.
/// Answers the new file's metadata, as [`replace`].
///
/// Where the file system has no hard links (some network and FUSE file
/// systems), the name is checked, then the temp file renamed onto it:
/// still whole, but no-clobber only against writers holding the name's
/// lock, as every store writer does.
pub(crate) fn write_new(dir: &Path, target: &Path, bytes: &[u8]) -> io::Result<Metadata> {
    let tmp = temp_path(dir, target);
    let result = write_temp(&tmp, bytes).and_then(|m| match fs::hard_link(&tmp, target) {
        Ok(()) => Ok(m),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(e),
        Err(_) => {
            if fs::symlink_metadata(target).is_ok() {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            fs::rename(&tmp, target).map(|()| m)
        }
    });
    // After a link the temp name is a second name of the voice: dropped.
    let _ = fs::remove_file(&tmp);
    let meta = result?;
    sync_dir(dir)?;
    Ok(meta)
}

/// A fresh temp path beside `target`.
fn temp_path(dir: &Path, target: &Path) -> PathBuf {
    let stem = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.join(format!(
        "{TEMP_PREFIX}{stem}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Writes and fsyncs a new file; answers its metadata.
fn write_temp(tmp: &Path, bytes: &[u8]) -> io::Result<Metadata> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    f.metadata()
}

/// Makes renames and removals in `dir` durable: POSIX persists a
/// directory's entries by fsyncing the directory itself.
#[cfg(unix)]
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Other platforms cannot open a directory as a file; their file systems
/// journal renames, so there is nothing more to do.
#[cfg(not(unix))]
pub(crate) fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `write_new` never overwrites, whatever locks its callers take: the
    /// existing file keeps its bytes, and no temp file is left.
    #[test]
    fn a_new_file_never_overwrites_an_existing_one() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("alice.safetensors");
        let first = write_new(tmp.path(), &target, b"first").unwrap();
        assert_eq!(first.len(), 5);
        let err = write_new(tmp.path(), &target, b"second").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&target).unwrap(), b"first");
        let meta = replace(tmp.path(), &target, b"third!").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"third!");
        // The metadata answered is the published file's.
        let now = fs::metadata(&target).unwrap();
        assert_eq!(
            (meta.len(), meta.modified().ok()),
            (now.len(), now.modified().ok())
        );
        let left: Vec<_> = fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(left.len(), 1);
    }
}
