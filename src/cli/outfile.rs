//! Output files that replace their target only when the run succeeds.
//!
//! Every file a subcommand writes (`--out`, `--codes-out`) is first written
//! under a temporary name beside its target (same directory, so the final
//! `rename` is atomic on one filesystem) and renamed over the target only
//! once it is complete. A run that fails (a bad flag, an unknown speaker,
//! bad codes, an unreachable server, a disk error) drops its [`Staged`]
//! file, which removes the temporary: an existing good file at the target
//! is never truncated or half-written.
//!
//! Interruption: a SIGINT/SIGTERM handler (a small thread waiting on
//! `tokio::signal`), installed by [`catch_interrupts`] when a command that
//! writes files starts — before its model load, so a signal during the load
//! ends the run instead of being lost — and by the first staged file at the
//! latest. On a signal it removes every temporary still pending, says which
//! targets were left as they were, and exits with 130 (SIGINT) or 143
//! (SIGTERM). It takes the signals whatever their inherited disposition: a
//! script's background job starts with SIGINT ignored, and would otherwise
//! load through a Ctrl-C and then replace its output. Renames take the same
//! lock as the handler, so a target is either the previous file or the new,
//! finalized one — never empty, never a WAV whose sizes are 0. SIGKILL
//! cannot be caught: it leaves at most a `.NAME.tts-rt-PID.tmp` file beside
//! the target, never a damaged target.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Temporaries not yet renamed: `(temporary, target)`. The signal handler
/// removes them; a commit or a drop takes its own entry out.
static PENDING: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());

fn pending() -> MutexGuard<'static, Vec<(PathBuf, PathBuf)>> {
    // A panic elsewhere while holding the lock leaves a usable list.
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Refuses a target that can never be written, before any work: a
/// directory, a read-only file, or a path whose directory does not exist.
/// Creates nothing.
pub(crate) fn check_target(target: &Path, flag: &str) -> Result<()> {
    if let Ok(m) = std::fs::metadata(target) {
        if m.is_dir() {
            bail!(
                "{flag} {}: is a directory; give a file name",
                target.display()
            );
        }
        if m.permissions().readonly() {
            bail!("{flag} {}: the file is read-only", target.display());
        }
    }
    let dir = parent_dir(target);
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => bail!(
            "{flag} {}: {} is not a directory",
            target.display(),
            dir.display()
        ),
        Err(e) => Err(e).with_context(|| {
            format!(
                "{flag} {}: cannot use directory {}",
                target.display(),
                dir.display()
            )
        }),
    }
}

fn parent_dir(target: &Path) -> PathBuf {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A file being written under a temporary name; [`commit`](Self::commit)
/// renames it over the target, dropping it uncommitted removes it.
#[derive(Debug)]
pub(crate) struct Staged {
    target: PathBuf,
    tmp: PathBuf,
    done: bool,
}

impl Staged {
    /// Creates the temporary beside `target` (the target itself is not
    /// touched) and returns it with its open file.
    pub(crate) fn create(target: &Path) -> Result<(Staged, File)> {
        catch_interrupts();
        let name = target
            .file_name()
            .with_context(|| format!("{}: not a file name", target.display()))?;
        let dir = parent_dir(target);
        let pid = std::process::id();
        let mut n = 0u32;
        loop {
            let mut tmp_name = std::ffi::OsString::from(".");
            tmp_name.push(name);
            tmp_name.push(format!(".tts-rt-{pid}-{n}.tmp"));
            let tmp = dir.join(tmp_name);
            // Registered before the file exists, so a signal between the two
            // cannot leave it behind.
            pending().push((tmp.clone(), target.to_path_buf()));
            match File::options().write(true).create_new(true).open(&tmp) {
                Ok(f) => {
                    let staged = Staged {
                        target: target.to_path_buf(),
                        tmp,
                        done: false,
                    };
                    return Ok((staged, f));
                }
                Err(e) => {
                    pending().retain(|(t, _)| t != &tmp);
                    if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 {
                        n += 1;
                        continue;
                    }
                    return Err(e).with_context(|| {
                        format!(
                            "cannot write output {} (creating {})",
                            target.display(),
                            tmp.display()
                        )
                    });
                }
            }
        }
    }

    pub(crate) fn target(&self) -> &Path {
        &self.target
    }

    /// Renames the finished temporary over the target.
    pub(crate) fn commit(mut self) -> Result<()> {
        let mut list = pending();
        std::fs::rename(&self.tmp, &self.target).with_context(|| {
            format!(
                "moving the finished output {} over {}",
                self.tmp.display(),
                self.target.display()
            )
        })?;
        list.retain(|(t, _)| t != &self.tmp);
        self.done = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut list = pending();
        let _ = std::fs::remove_file(&self.tmp);
        list.retain(|(t, _)| t != &self.tmp);
    }
}

/// Writes `bytes` to `target` through a staged temporary.
pub(crate) fn write_atomic(target: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let (staged, mut f) = Staged::create(target)?;
    f.write_all(bytes)
        .and_then(|()| f.flush())
        .with_context(|| format!("writing {}", target.display()))?;
    drop(f);
    staged.commit()
}

static INSTALL: Once = Once::new();

/// Installs the SIGINT/SIGTERM handler once per process and waits (up to
/// 2 s) until it is registered, so a signal from here on is caught. The
/// commands that write files call it first thing, before any slow work
/// (a model load); a signal then exits 130 / 143 with no target touched.
pub(crate) fn catch_interrupts() {
    INSTALL.call_once(|| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("interrupt".into())
            .spawn(move || {
                let Some(code) = wait_for_signal(ready_tx) else {
                    return;
                };
                let list = pending();
                for (tmp, target) in list.iter() {
                    let _ = std::fs::remove_file(tmp);
                    eprintln!("\ninterrupted: {} left as it was", target.display());
                }
                if list.is_empty() {
                    eprintln!("\ninterrupted");
                }
                // Holding the lock: no rename can start after this point.
                std::process::exit(code);
            });
        if spawned.is_ok() {
            let _ = ready_rx.recv_timeout(Duration::from_secs(2));
        }
    });
}

/// Blocks until SIGINT (→ 130) or SIGTERM (→ 143); None when the handler
/// cannot be installed (the default action then applies: no cleanup, but
/// the target is still untouched, only a temporary may remain).
fn wait_for_signal(ready: std::sync::mpsc::Sender<()>) -> Option<i32> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let mut int = signal(SignalKind::interrupt()).ok()?;
            let mut term = signal(SignalKind::terminate()).ok()?;
            let _ = ready.send(());
            tokio::select! {
                _ = int.recv() => Some(130),
                _ = term.recv() => Some(143),
            }
        }
        #[cfg(not(unix))]
        {
            let ctrl_c = tokio::signal::ctrl_c();
            let _ = ready.send(());
            ctrl_c.await.ok().map(|()| 130)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_staged_file_leaves_the_target_and_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("out.wav");
        std::fs::write(&target, b"good").unwrap();
        let (staged, f) = Staged::create(&target).unwrap();
        drop(f);
        drop(staged);
        assert_eq!(std::fs::read(&target).unwrap(), b"good");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_committed_file_replaces_the_target() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("codes.json");
        std::fs::write(&target, b"old").unwrap();
        write_atomic(&target, b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        assert!(pending().iter().all(|(_, t)| t != &target));
    }

    #[test]
    fn unusable_targets_are_refused_before_anything_is_created() {
        let d = tempfile::tempdir().unwrap();
        let e = check_target(d.path(), "--out").unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let e = check_target(&d.path().join("no/such/dir/x.wav"), "--out")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot use directory"), "{e}");
        check_target(&d.path().join("x.wav"), "--out").unwrap();
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }
}
