//! The files and streams the subcommands read and write: the text to speak
//! (argument or stdin), audio out (a WAV file or stdout, whole or chunk by
//! chunk) and the codes JSON. Shared by `speak`, `decode` and `client`.
//! Files go through [`super::outfile`]: a failed or interrupted run leaves
//! an existing target as it was.

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use tts_audio::{WavFormat, WavSink};

use super::outfile::{check_target, write_atomic, Staged};

/// Where audio goes: a file, written under a temporary name and renamed
/// over the target only when complete ([`Staged`]), or stdout (buffered:
/// WAV needs a seekable header).
pub(crate) enum Output {
    File(Staged, File),
    Stdout,
}

impl Output {
    /// `-` is stdout; anything else a staged file beside `path` (the file at
    /// `path` itself stays as it is until [`write`](Self::write) or
    /// [`AudioWriter::finish`] succeeds). Open it after the arguments are
    /// checked; [`check_target`] refuses an unusable path before that.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        if path == Path::new("-") {
            return Ok(Output::Stdout);
        }
        let (staged, f) = Staged::create(path)?;
        Ok(Output::File(staged, f))
    }

    pub(crate) fn write(self, samples: &[f32], rate: u32, format: WavFormat) -> Result<()> {
        match self {
            Output::File(staged, f) => {
                let mut sink = WavSink::new(std::io::BufWriter::new(f), rate, format)?;
                sink.write(samples)?;
                sink.finish()
                    .with_context(|| format!("writing {}", staged.target().display()))?;
                staged.commit()?;
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

/// `--out PATH` checked before any work: `-`, or a file that can be
/// created beside (see [`check_target`]).
pub(crate) fn check_out(path: &Path, flag: &str) -> Result<()> {
    if path == Path::new("-") {
        return Ok(());
    }
    check_target(path, flag)
}

/// An output being written chunk by chunk: the staged file grows as audio
/// arrives and replaces the target on [`finish`](Self::finish); stdout is
/// collected (WAV needs its header's length up front).
pub(crate) enum AudioWriter {
    File(Staged, WavSink<std::io::BufWriter<File>>),
    Stdout(Vec<f32>, u32, WavFormat),
}

impl AudioWriter {
    pub(crate) fn open(out: Output, rate: u32, format: WavFormat) -> Result<Self> {
        Ok(match out {
            Output::File(staged, f) => AudioWriter::File(
                staged,
                WavSink::new(std::io::BufWriter::new(f), rate, format)?,
            ),
            Output::Stdout => AudioWriter::Stdout(Vec::new(), rate, format),
        })
    }

    pub(crate) fn write(&mut self, samples: &[f32]) -> Result<()> {
        match self {
            AudioWriter::File(staged, sink) => sink
                .write(samples)
                .with_context(|| format!("writing {}", staged.target().display()))?,
            AudioWriter::Stdout(buf, ..) => buf.extend_from_slice(samples),
        }
        Ok(())
    }

    pub(crate) fn finish(self) -> Result<()> {
        match self {
            AudioWriter::File(staged, sink) => {
                sink.finish()
                    .with_context(|| format!("writing {}", staged.target().display()))?;
                staged.commit()?;
            }
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
    write_atomic(path, (json + "\n").as_bytes())
        .with_context(|| format!("writing codes to {}", path.display()))
}
