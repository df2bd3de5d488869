//! Where the model comes from: `--model` (a directory or a hub repo id),
//! else `$TTS_RT_MODEL`, else the default checkpoint; a repo id is found in
//! the Hugging Face cache, or downloaded there (src/download.rs) when it is
//! missing and `HF_HUB_OFFLINE` is not set.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::download;

pub const DEFAULT_REPO: &str = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice";
/// The default where a command needs a Base checkpoint (`voice add`: only
/// Base checkpoints make voices).
pub const DEFAULT_BASE_REPO: &str = "Qwen/Qwen3-TTS-12Hz-0.6B-Base";

/// The Hugging Face hub cache directory (`$HF_HUB_CACHE`, `$HF_HOME/hub`,
/// `~/.cache/huggingface/hub`).
fn hub_cache() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE") {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("HF_HOME") {
        return Some(PathBuf::from(p).join("hub"));
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(p).join("huggingface/hub"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub"))
}

/// The snapshot directory of `repo` in the hub cache, if one is complete
/// enough to hold a config (the downloader fetches config.json last, so a
/// snapshot it left half-done has none).
fn cached_snapshot(cache: &Path, repo: &str) -> Option<PathBuf> {
    let base = cache.join(format!("models--{}", repo.replace('/', "--")));
    let rev = std::fs::read_to_string(base.join("refs/main")).ok();
    let snaps = base.join("snapshots");
    if let Some(rev) = rev {
        let p = snaps.join(rev.trim());
        if p.join("config.json").exists() {
            return Some(p);
        }
    }
    // No refs/main (e.g. an offline copy): any snapshot with a config.
    std::fs::read_dir(&snaps)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("config.json").exists())
}

/// The checkpoint directory: `--model` (a directory, or a hub repo id such
/// as `Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice`), else `$TTS_RT_MODEL` (the
/// same), else [`DEFAULT_REPO`]. A repo id is looked up in the hub cache and
/// downloaded there when it is missing.
pub fn resolve(explicit: Option<&Path>) -> Result<PathBuf> {
    resolve_or(explicit, DEFAULT_REPO)
}

/// [`resolve`] with `default_repo` in place of [`DEFAULT_REPO`].
pub fn resolve_or(explicit: Option<&Path>, default_repo: &str) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return directory_or_repo(p, "--model");
    }
    if let Some(p) = std::env::var_os("TTS_RT_MODEL") {
        return directory_or_repo(Path::new(&p), "$TTS_RT_MODEL");
    }
    from_hub(default_repo, "no model given and")
}

/// Where `--model` / `$TTS_RT_MODEL` came from, for messages: the flag, the
/// variable, or neither (the default repo).
pub fn model_source(explicit: Option<&Path>) -> Option<(&'static str, PathBuf)> {
    match explicit {
        Some(p) => Some(("--model", p.to_path_buf())),
        None => std::env::var_os("TTS_RT_MODEL").map(|p| ("$TTS_RT_MODEL", PathBuf::from(p))),
    }
}

/// `p` as a directory when one exists there; else, when it reads as a hub
/// repo id (`owner/name`, no leading `.` or `/`), that repo from the cache or
/// the hub.
fn directory_or_repo(p: &Path, source: &str) -> Result<PathBuf> {
    if !p.exists() {
        if let Some(repo) = p.to_str().filter(|s| is_repo_id(s)) {
            return from_hub(repo, &format!("{source} = {repo}:"));
        }
    }
    check(p, source)
}

/// `owner/name` with the characters the hub allows (letters, digits, `-`,
/// `_`, `.`), neither part starting with `.` or `-`.
pub fn is_repo_id(s: &str) -> bool {
    let Some((owner, name)) = s.split_once('/') else {
        return false;
    };
    let part = |x: &str| {
        !x.is_empty()
            && x.len() <= 96
            && !x.starts_with(['.', '-'])
            && x.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    part(owner) && part(name)
}

/// `repo`'s snapshot in the hub cache, downloaded there when missing.
/// `what` starts the error messages ("no model given and", "--model = X:").
fn from_hub(repo: &str, what: &str) -> Result<PathBuf> {
    let Some(cache) = hub_cache() else {
        bail!(
            "{what} no Hugging Face cache directory to find {repo} in: none of HF_HUB_CACHE, \
             HF_HOME, XDG_CACHE_HOME, HOME is set.\n{}",
            how_to_get(
                repo,
                "set HF_HOME to a writable directory and rerun to let tts-rt download it there"
            )
        );
    };
    if let Some(p) = cached_snapshot(&cache, repo) {
        return Ok(p);
    }
    if download::offline() {
        bail!(
            "{what} {repo} is not in the Hugging Face cache ({}); HF_HUB_OFFLINE is \
             set, so tts-rt did not download it.\n{}",
            cache.display(),
            how_to_get(
                repo,
                "unset HF_HUB_OFFLINE and rerun to let tts-rt download it"
            )
        );
    }
    let hub = download::Hub::from_env();
    download::snapshot(&hub, repo, &cache).with_context(|| {
        format!(
            "{what} {repo} is not in the Hugging Face cache ({}); downloading it from {} \
             failed (the cause is below).\n{}",
            cache.display(),
            hub.endpoint(),
            how_to_get(
                repo,
                "rerun once the cause below is fixed (a partial download resumes)"
            )
        )
    })
}

/// The ways to get `repo`, `first` being the one that fits the case.
fn how_to_get(repo: &str, first: &str) -> String {
    format!(
        "To get it: {first}; or download it with\n    \
         pip install -U huggingface_hub && hf download {repo}\n\
         (or `huggingface-cli download {repo}`); or point --model / TTS_RT_MODEL at a checkpoint \
         directory (config.json, model.safetensors, vocab.json, merges.txt, speech_tokenizer/) \
         or a hub repo id such as Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice.\n\
         For a random-weight checkpoint to try things out: tts-rt gen-checkpoint --preset tiny --out DIR"
    )
}

fn check(p: &Path, source: &str) -> Result<PathBuf> {
    if !p.exists() {
        bail!(
            "{source} = {}: no such directory (a hub repo id reads owner/name, e.g. {DEFAULT_REPO})",
            p.display()
        );
    }
    if !p.is_dir() {
        bail!("{source} = {}: not a directory", p.display());
    }
    if !p.join("config.json").exists() {
        bail!(
            "{source} = {}: no config.json there; expected a checkpoint in the Hugging Face layout",
            p.display()
        );
    }
    Ok(p.to_path_buf())
}
