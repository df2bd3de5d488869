//! `tts-rt devices`: the audio output devices `--play --device` can use.

use std::io::Write;

use anyhow::{Context, Result};

/// `tts-rt devices`: the output devices of the default audio host.
pub(crate) fn devices() -> Result<()> {
    let list = tts_audio::list_output_devices().context("listing audio output devices")?;
    let mut out = std::io::stdout().lock();
    if list.is_empty() {
        writeln!(
            out,
            "no audio output devices found (the audio host lists none); write audio to a file with --out instead"
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "output devices (* = default; --device takes the id or a unique part of the name):"
    )?;
    for d in &list {
        let mark = if d.is_default { "*" } else { " " };
        if d.name == d.id {
            writeln!(out, "{mark} {}", d.id)?;
        } else {
            writeln!(out, "{mark} {}  ({})", d.id, d.name)?;
        }
        match &d.default_config {
            Some(c) => writeln!(out, "    default: {c}")?,
            None => writeln!(
                out,
                "    default: unknown (could not query the device; busy or absent)"
            )?,
        }
        if !d.supported.is_empty() {
            writeln!(out, "    supports: {}", d.supported.join("; "))?;
        }
    }
    Ok(())
}
