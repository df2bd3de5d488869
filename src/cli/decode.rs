//! `tts-rt decode`: codes (a JSON array of frames) to a WAV file with
//! code2wav only.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use super::io::{check_out, out_container, Destination};
use super::outfile::catch_interrupts;
use super::{load, ModelArg, OutArgs};

#[derive(Args)]
pub(crate) struct DecodeArgs {
    #[command(flatten)]
    model: ModelArg,
    /// JSON array of frames, each an array of num_code_groups integers
    /// (as `speak --codes-out` writes); `-` reads stdin.
    #[arg(long)]
    codes: PathBuf,
    #[command(flatten)]
    out: OutArgs,
}

pub(crate) fn decode(a: DecodeArgs) -> Result<()> {
    let out_path = a
        .out
        .out
        .as_deref()
        .context("decode needs --out FILE (or - for stdout)")?;
    let container = out_container(out_path, a.out.wav_format, "--out")?;
    check_out(out_path, "--out")?;
    // A signal during the load below ends the run, --out as it was.
    catch_interrupts();
    let text = if a.codes == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading codes from stdin (--codes -)")?;
        s
    } else {
        std::fs::read_to_string(&a.codes)
            .with_context(|| format!("reading {}", a.codes.display()))?
    };
    let frames: Vec<Vec<i64>> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: expected a JSON array of frames (arrays of integers)",
            a.codes.display()
        )
    })?;
    let model = load(&a.model, super::realtime::Use::File, false)?;
    container.check_rate(model.code2wav.sample_rate())?;
    let groups = model.code2wav.num_quantizers();
    let book = model.code2wav.codebook_size() as i64;
    let mut codes = Vec::with_capacity(frames.len() * groups);
    for (i, f) in frames.iter().enumerate() {
        if f.len() != groups {
            bail!(
                "{}: frame {i} has {} codes; this checkpoint needs {groups} per frame",
                a.codes.display(),
                f.len()
            );
        }
        for (q, &c) in f.iter().enumerate() {
            if !(0..book).contains(&c) {
                bail!(
                    "{}: frame {i}, codebook {q}: code {c} is outside 0..{book}",
                    a.codes.display()
                );
            }
            codes.push(c as u32);
        }
    }
    if frames.is_empty() {
        bail!("{}: no frames to decode", a.codes.display());
    }
    // Opened only once the codes are known good: a bad file leaves an
    // existing --out as it was.
    let out = Destination::open(out_path)?;
    let wav = model
        .code2wav
        .decode_on_pool(&codes, frames.len(), a.out.stream)?;
    out.write(&wav, model.code2wav.sample_rate(), container)
}
