//! Crash-safe file replacement: write a temp file beside the target, fsync
//! it, rename it over the target, fsync the directory.
//!
//! `rename` within one directory is atomic on POSIX file systems, so after a
//! crash the target holds either its old bytes or the new ones, never a torn
//! mix; the directory fsync makes the rename itself durable. A crash before
//! the rename leaves only a temp file, which [`super::VoiceStore::open`]
//! ignores (and removes once it is older than the stale-lock age).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Prefix of every temp file (a leading dot: no voice name starts with one).
pub(crate) const TEMP_PREFIX: &str = ".tmp-";

/// Distinguishes temp files of concurrent writers in one process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Atomically makes `target` hold `bytes`.
pub(crate) fn write_atomic(dir: &Path, target: &Path, bytes: &[u8]) -> io::Result<()> {
    let stem = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        "{TEMP_PREFIX}{stem}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = write_then_rename(&tmp, target, bytes);
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    sync_dir(dir)
}

fn write_then_rename(tmp: &PathBuf, target: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(tmp, target)
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
