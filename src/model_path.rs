//! Where the model comes from: `--model`, else `$TTS_RT_MODEL`, else the
//! Hugging Face cache entry of the default checkpoint, downloaded there
//! (src/download.rs) when it is missing and `HF_HUB_OFFLINE` is not set.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::download;

pub const DEFAULT_REPO: &str = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice";

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

pub fn resolve(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return check(p, "--model");
    }
    if let Some(p) = std::env::var_os("TTS_RT_MODEL") {
        return check(Path::new(&p), "$TTS_RT_MODEL");
    }
    let Some(cache) = hub_cache() else {
        bail!(
            "no model given, and no Hugging Face cache directory: none of HF_HUB_CACHE, HF_HOME, \
             XDG_CACHE_HOME, HOME is set.\n{}",
            how_to_get(
                "set HF_HOME to a writable directory and rerun to let tts-rt download it there"
            )
        );
    };
    if let Some(p) = cached_snapshot(&cache, DEFAULT_REPO) {
        return Ok(p);
    }
    if download::offline() {
        bail!(
            "no model given and {DEFAULT_REPO} is not in the Hugging Face cache ({}); HF_HUB_OFFLINE is \
             set, so tts-rt did not download it.\n{}",
            cache.display(),
            how_to_get("unset HF_HUB_OFFLINE and rerun to let tts-rt download it")
        );
    }
    let hub = download::Hub::from_env();
    download::snapshot(&hub, DEFAULT_REPO, &cache).with_context(|| {
        format!(
            "no model given and {DEFAULT_REPO} is not in the Hugging Face cache ({}); downloading it from {} \
             failed (the cause is below).\n{}",
            cache.display(),
            hub.endpoint(),
            how_to_get("rerun once the cause below is fixed (a partial download resumes)")
        )
    })
}

/// The ways to get a checkpoint, `first` being the one that fits the case.
fn how_to_get(first: &str) -> String {
    format!(
        "To get it: {first}; or download it with\n    \
         pip install -U huggingface_hub && hf download {DEFAULT_REPO}\n\
         (or `huggingface-cli download {DEFAULT_REPO}`); or point --model / TTS_RT_MODEL at a checkpoint \
         directory (config.json, model.safetensors, vocab.json, merges.txt, speech_tokenizer/).\n\
         For a random-weight checkpoint to try things out: tts-rt gen-checkpoint --preset tiny --out DIR"
    )
}

fn check(p: &Path, source: &str) -> Result<PathBuf> {
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
