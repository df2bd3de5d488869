//! `tts-rt gen-checkpoint`: a random-weight checkpoint in the Hugging Face
//! layout (test fixtures, benchmarks at the official sizes).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

#[derive(Args)]
pub(crate) struct GenArgs {
    /// tiny, 0.6b or 1.7b (CustomVoice); tiny-base, 0.6b-base, 1.7b-base
    /// (Base: speaker encoder and speech-tokenizer encoder too) or
    /// 1.7b-voicedesign.
    #[arg(long)]
    preset: String,
    /// Directory to write (created if missing). One that already holds
    /// files is refused unless --force.
    #[arg(long)]
    out: PathBuf,
    /// Write into a non-empty --out directory, replacing the checkpoint
    /// files of the same names.
    #[arg(long)]
    force: bool,
    /// Seed of the random weights (the same seed gives the same files).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Copy the text tokenizer (vocab.json, merges.txt, tokenizer_config.json)
    /// from this checkpoint directory instead of writing the small synthetic
    /// one, e.g. `tests/fixtures/tiny-b`, which carries the real Qwen
    /// vocabulary: the synthetic one spends about one token per character,
    /// so prompts (and prefill times) come out ~2x longer than a real
    /// checkpoint's.
    #[arg(long)]
    tokenizer_from: Option<PathBuf>,
    /// How the LM weights are drawn: `random` (uniform, the fixtures) or
    /// `trained` (trained-like: Student-t weights with per-row and
    /// per-column scales, a few hidden channels with 50x activations into
    /// 1/50 weight columns, the code predictor's FFN spike of 100x at the
    /// down projection's inputs, sharper heads), for comparing precisions
    /// without the trained checkpoint (docs/performance.md).
    #[arg(long, default_value = "random")]
    proxy: String,
}

pub(crate) fn gen_checkpoint(a: GenArgs) -> Result<()> {
    let preset = tts_checkpoint_gen::Preset::parse(&a.preset).map_err(anyhow::Error::msg)?;
    let proxy =
        tts_checkpoint_gen::Proxy::parse(&a.proxy).map_err(|e| anyhow::anyhow!("--proxy: {e}"))?;
    let t = Instant::now();
    if let Some(src) = &a.tokenizer_from {
        // Check the source before writing gigabytes.
        tts_models::tokenizer::TextTokenizer::load(src)
            .with_context(|| format!("--tokenizer-from {}", src.display()))?;
    }
    check_out_dir(&a.out, a.force)?;
    eprintln!(
        "writing a {}-weight {} checkpoint (seed {}) to {}",
        proxy.name(),
        a.preset,
        a.seed,
        a.out.display()
    );
    let written = with_progress(&a.out, || {
        tts_checkpoint_gen::write_checkpoint_with(&a.out, preset, a.seed, proxy)
    });
    written.with_context(|| format!("writing checkpoint to {}", a.out.display()))?;
    if let Some(src) = &a.tokenizer_from {
        for f in ["vocab.json", "merges.txt", "tokenizer_config.json"] {
            let from = src.join(f);
            std::fs::copy(&from, a.out.join(f)).with_context(|| {
                format!("--tokenizer-from: copying {} (vocab.json, merges.txt and tokenizer_config.json are needed)", from.display())
            })?;
        }
        tts_models::tokenizer::TextTokenizer::load(&a.out)
            .with_context(|| format!("the copied tokenizer in {}", a.out.display()))?;
    }
    eprintln!(
        "wrote {} checkpoint to {} ({:.1} MB) in {:.1} s",
        a.preset,
        a.out.display(),
        dir_bytes(&a.out) as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `--out` must be a new or empty directory unless `--force`: writing into
/// a directory that holds other files (another checkpoint, a home
/// directory mistyped) would overwrite them silently.
fn check_out_dir(out: &Path, force: bool) -> Result<()> {
    match std::fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() && !force {
                bail!(
                    "--out {} is not empty; give an empty or new directory, or --force to overwrite the checkpoint files in it",
                    out.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if out.is_file() => {
            Err(e).with_context(|| format!("--out {} is a file; give a directory", out.display()))
        }
        Err(e) => Err(e).with_context(|| format!("--out {}", out.display())),
    }
}

/// Runs `work` while a thread reports, once a second on a terminal, how
/// much has been written under `dir` (the large presets take minutes).
fn with_progress<T>(dir: &Path, work: impl FnOnce() -> T) -> T {
    if !std::io::stderr().is_terminal() {
        return work();
    }
    let done = AtomicBool::new(false);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut shown = false;
            let mut next = Duration::from_secs(1);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if t0.elapsed() >= next {
                    eprint!(
                        "\rwriting: {:.1} MB in {:.0} s",
                        dir_bytes(dir) as f64 / 1e6,
                        t0.elapsed().as_secs_f64()
                    );
                    shown = true;
                    next += Duration::from_secs(1);
                }
            }
            if shown {
                eprintln!();
            }
        });
        let r = work();
        done.store(true, Ordering::Relaxed);
        r
    })
}

/// Bytes in the files under `dir` (recursively; 0 where unreadable).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}
