//! `tts-rt voices`: the speakers and languages a checkpoint offers.
//!
//! Reads the checkpoint's config.json and generation_config.json only (no
//! weights: a listing should not cost a model load), so the flags that
//! shape a load (`--precision`, `--weights-cache`, `--threads`) are not
//! accepted here.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use tts_models::config::{GenerationConfig, ModelKind, TtsConfig};

use crate::model_path;

#[derive(Args)]
pub(crate) struct SpeakersArgs {
    /// Checkpoint directory, or a Hugging Face repo id such as
    /// Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice (found in the hub cache, else
    /// downloaded there). Default: $TTS_RT_MODEL, else
    /// Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice.
    #[arg(long)]
    model: Option<PathBuf>,
}

pub(crate) fn list(a: SpeakersArgs) -> Result<()> {
    let dir = model_path::resolve(a.model.as_deref())?;
    let loading = || format!("loading checkpoint {}", dir.display());
    let config = TtsConfig::load(&dir.join("config.json")).with_context(loading)?;
    // Checked as a load would check it: a listing of a checkpoint that
    // cannot speak would mislead.
    GenerationConfig::load(&dir.join("generation_config.json")).with_context(loading)?;
    let mut out = std::io::stdout().lock();
    let speakers = &config.talker.speakers;
    if speakers.is_empty() {
        let how = match config.kind {
            ModelKind::Base => {
                "clone a voice: speak --ref-audio, or a stored voice (tts-rt voice list)"
            }
            ModelKind::VoiceDesign => "describe the voice with speak --instruct",
            ModelKind::CustomVoice => "none",
        };
        writeln!(out, "speakers: none ({} checkpoint; {how})", config.kind)?;
    } else {
        writeln!(out, "speakers (* = default when --speaker is not given):")?;
    }
    // The default is the first in this (sorted) order, as `speak` picks it.
    for (i, (name, s)) in speakers.iter().enumerate() {
        let mark = if i == 0 { "*" } else { " " };
        match &s.dialect {
            Some(d) => writeln!(
                out,
                "{mark} {name} (speaks {d} when the language is chinese or auto)"
            )?,
            None => writeln!(out, "{mark} {name}")?,
        }
    }
    writeln!(out, "languages:")?;
    for l in config.talker.language_names() {
        writeln!(out, "  {l}")?;
    }
    writeln!(
        out,
        "instruct: {}",
        if config.supports_instruct() {
            "supported"
        } else {
            "ignored by this model size"
        }
    )?;
    Ok(())
}
