//! Where the model comes from: `--model`, else `$TTS_RT_MODEL`, else the
//! Hugging Face cache entry of the default checkpoint.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

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
/// enough to hold a config.
fn cached_snapshot(repo: &str) -> Option<PathBuf> {
    let base = hub_cache()?.join(format!("models--{}", repo.replace('/', "--")));
    let rev = std::fs::read_to_string(base.join("refs/main")).ok();
    let snaps = base.join("snapshots");
    if let Some(rev) = rev {
        let p = snaps.join(rev.trim());
        if p.join("config.json").exists() {
            return Some(p);
        }
    }
    // No refs/main (e.g. an offline copy): any snapshot with a config.
    std::fs::read_dir(&snaps).ok()?.flatten().map(|e| e.path()).find(|p| p.join("config.json").exists())
}

pub fn resolve(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return check(p, "--model");
    }
    if let Some(p) = std::env::var_os("TTS_RT_MODEL") {
        return check(Path::new(&p), "$TTS_RT_MODEL");
    }
    if let Some(p) = cached_snapshot(DEFAULT_REPO) {
        return Ok(p);
    }
    let cache = hub_cache().map(|p| p.display().to_string()).unwrap_or_else(|| "~/.cache/huggingface/hub".into());
    bail!(
        "no model given and {DEFAULT_REPO} is not in the Hugging Face cache ({cache}).\n\
         Get it with:\n    pip install -U huggingface_hub && hf download {DEFAULT_REPO}\n\
         (or `huggingface-cli download {DEFAULT_REPO}`), then rerun; or point --model / TTS_RT_MODEL at a \
         checkpoint directory (config.json, model.safetensors, vocab.json, merges.txt, speech_tokenizer/).\n\
         For a random-weight checkpoint to try things out: tts-rt gen-checkpoint --preset tiny --out DIR"
    )
}

fn check(p: &Path, source: &str) -> Result<PathBuf> {
    if !p.is_dir() {
        bail!("{source} = {}: not a directory", p.display());
    }
    if !p.join("config.json").exists() {
        bail!("{source} = {}: no config.json there; expected a checkpoint in the Hugging Face layout", p.display());
    }
    Ok(p.to_path_buf())
}
