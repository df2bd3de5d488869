//! `tts-rt gen-checkpoint`: a random-weight checkpoint in the Hugging Face
//! layout (test fixtures, benchmarks at the official sizes).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;

#[derive(Args)]
pub(crate) struct GenArgs {
    /// tiny, 0.6b or 1.7b (CustomVoice); tiny-base, 0.6b-base, 1.7b-base
    /// (Base: speaker encoder and speech-tokenizer encoder too) or
    /// 1.7b-voicedesign.
    #[arg(long)]
    preset: String,
    #[arg(long)]
    out: PathBuf,
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
}

pub(crate) fn gen_checkpoint(a: GenArgs) -> Result<()> {
    let preset = tts_checkpoint_gen::Preset::parse(&a.preset).map_err(anyhow::Error::msg)?;
    let t = Instant::now();
    if let Some(src) = &a.tokenizer_from {
        // Check the source before writing gigabytes.
        tts_models::tokenizer::TextTokenizer::load(src)
            .with_context(|| format!("--tokenizer-from {}", src.display()))?;
    }
    tts_checkpoint_gen::write_checkpoint(&a.out, preset, a.seed)
        .with_context(|| format!("writing checkpoint to {}", a.out.display()))?;
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
        "wrote {} checkpoint to {} in {:.1} s",
        a.preset,
        a.out.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
