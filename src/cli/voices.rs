//! `tts-rt voices`: the speakers and languages a checkpoint offers.

use std::io::Write;

use anyhow::Result;

use super::{load, ModelArg};

pub(crate) fn voices(a: ModelArg) -> Result<()> {
    let model = load(&a)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "speakers:")?;
    for (name, s) in &model.config.talker.speakers {
        match &s.dialect {
            Some(d) => writeln!(
                out,
                "  {name} (speaks {d} when the language is chinese or auto)"
            )?,
            None => writeln!(out, "  {name}")?,
        }
    }
    writeln!(out, "languages:")?;
    for l in model.languages() {
        writeln!(out, "  {l}")?;
    }
    writeln!(
        out,
        "instruct: {}",
        if model.config.supports_instruct() {
            "supported"
        } else {
            "ignored by this model size"
        }
    )?;
    Ok(())
}
