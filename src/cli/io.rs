//! The files and streams the subcommands read and write: the text to speak
//! (argument or stdin), audio out (a WAV file or stdout, whole or chunk by
//! chunk) and the codes JSON. Shared by `speak`, `decode` and `client`.

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use tts_audio::{WavFormat, WavSink};

/// Where audio goes: a file (opened before the model loads, so an unwritable
/// path fails fast) or stdout (buffered: WAV needs a seekable header).
pub(crate) enum Output {
    File(PathBuf, File),
    Stdout,
}

impl Output {
    pub(crate) fn open(path: &Path) -> Result<Self> {
        if path == Path::new("-") {
            return Ok(Output::Stdout);
        }
        let f = File::create(path)
            .with_context(|| format!("cannot write output {}", path.display()))?;
        Ok(Output::File(path.to_path_buf(), f))
    }

    pub(crate) fn write(self, samples: &[f32], rate: u32, format: WavFormat) -> Result<()> {
        match self {
            Output::File(path, f) => {
                let mut sink = WavSink::new(std::io::BufWriter::new(f), rate, format)?;
                sink.write(samples)?;
                sink.finish()
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Output::Stdout => {
                let bytes = tts_audio::wav_bytes(samples, rate, format)?;
                let mut out = std::io::stdout().lock();
                out.write_all(&bytes)?;
                out.flush()?;
            }
        }
        Ok(())
    }
}

/// An output being written chunk by chunk: a file grows as audio arrives;
/// stdout is collected (WAV needs its header's length up front).
pub(crate) enum AudioWriter {
    File(PathBuf, WavSink<std::io::BufWriter<File>>),
    Stdout(Vec<f32>, u32, WavFormat),
}

impl AudioWriter {
    pub(crate) fn open(out: Output, rate: u32, format: WavFormat) -> Result<Self> {
        Ok(match out {
            Output::File(path, f) => AudioWriter::File(
                path,
                WavSink::new(std::io::BufWriter::new(f), rate, format)?,
            ),
            Output::Stdout => AudioWriter::Stdout(Vec::new(), rate, format),
        })
    }

    pub(crate) fn write(&mut self, samples: &[f32]) -> Result<()> {
        match self {
            AudioWriter::File(path, sink) => sink
                .write(samples)
                .with_context(|| format!("writing {}", path.display()))?,
            AudioWriter::Stdout(buf, ..) => buf.extend_from_slice(samples),
        }
        Ok(())
    }

    pub(crate) fn finish(self) -> Result<()> {
        match self {
            AudioWriter::File(path, sink) => sink
                .finish()
                .with_context(|| format!("writing {}", path.display()))?,
            AudioWriter::Stdout(buf, rate, format) => Output::Stdout.write(&buf, rate, format)?,
        }
        Ok(())
    }
}

/// The text to speak: `arg`, or stdin when it is omitted or `-`; trimmed,
/// never empty.
pub(crate) fn read_text(arg: Option<String>) -> Result<String> {
    let text = match arg.as_deref() {
        None | Some("-") => {
            if std::io::stdin().is_terminal() {
                bail!("no text given: pass TEXT or pipe it on stdin");
            }
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading text from stdin")?;
            s
        }
        Some(t) => t.to_string(),
    };
    let text = text.trim().to_string();
    if text.is_empty() {
        bail!("text is empty: nothing to say");
    }
    Ok(text)
}

/// `codes` (`groups` per frame) as a JSON array of frames, one line.
pub(crate) fn write_codes(path: &Path, codes: &[u32], groups: usize) -> Result<()> {
    let frames: Vec<&[u32]> = codes.chunks(groups).collect();
    let json = serde_json::to_string(&frames)?;
    std::fs::write(path, json + "\n")
        .with_context(|| format!("writing codes to {}", path.display()))
}
