//! The files and streams the subcommands read and write: the text to speak
//! (argument or stdin), audio out (a file in the format its extension
//! names, or WAV on stdout; whole or chunk by chunk) and the codes JSON.
//! Shared by `speak`, `decode` and `client`. Files go through
//! [`super::outfile`]: a failed or interrupted run leaves an existing target
//! as it was.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Read, Seek, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use tts_audio::{Encoder, Format, StreamResampler, WavFormat, WavSink};

use super::outfile::{check_target, write_atomic, Staged};

/// What an audio output holds: a WAV of 16-bit or float samples, or the
/// stream of one of the server's encoders (`tts_audio::encode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Container {
    Wav(WavFormat),
    Encoded(Format),
}

/// The extensions `--out` writes, and the format of each. A name without
/// an extension is a WAV, as before extensions were read.
const EXTENSIONS: [(&str, Format); 13] = [
    ("wav", Format::Wav),
    ("wave", Format::Wav),
    ("mp3", Format::Mp3),
    ("opus", Format::Opus),
    ("ogg", Format::Opus),
    ("oga", Format::Opus),
    ("flac", Format::Flac),
    ("aac", Format::Aac),
    ("pcm", Format::Pcm),
    ("raw", Format::Pcm),
    ("ulaw", Format::Mulaw),
    ("mulaw", Format::Mulaw),
    ("alaw", Format::Alaw),
];

/// The container `--out PATH` asks for, from its extension (any case):
/// stdout (`-`) and a name without an extension are WAV. `wav_format`
/// (`--wav-format`, when given) describes a WAV only. An extension no
/// encoder writes is refused naming the ones that work, before any work.
pub(crate) fn out_container(
    path: &Path,
    wav_format: Option<WavFormat>,
    flag: &str,
) -> Result<Container> {
    let ext = match path.extension() {
        Some(e) if path != Path::new("-") => e.to_string_lossy().to_ascii_lowercase(),
        _ => return Ok(Container::Wav(wav_format.unwrap_or(WavFormat::Pcm16))),
    };
    let Some(&(_, format)) = EXTENSIONS.iter().find(|(e, _)| *e == ext) else {
        let names: Vec<String> = EXTENSIONS.iter().map(|(e, _)| format!(".{e}")).collect();
        let hint = match ext.as_str() {
            "m4a" | "mp4" => " (AAC is written as raw ADTS frames: use .aac)",
            _ => "",
        };
        bail!(
            "{flag} {}: cannot write a .{ext} file{hint}; the extension picks the format: {}",
            path.display(),
            names.join(", ")
        );
    };
    match (format, wav_format) {
        (Format::Wav, w) => Ok(Container::Wav(w.unwrap_or(WavFormat::Pcm16))),
        (_, None | Some(WavFormat::Pcm16)) => Ok(Container::Encoded(format)),
        (_, Some(WavFormat::F32)) => bail!(
            "--wav-format f32 describes a WAV file, but {flag} {} is a .{ext} ({format}); \
             write a .wav for float samples, or leave --wav-format out",
            path.display()
        ),
    }
}

impl Container {
    /// Refuses, before any synthesis, a container that cannot hold audio at
    /// the model's `rate` (every encoder takes 12 and 24 kHz; G.711 is
    /// resampled to 8 kHz).
    pub(crate) fn check_rate(self, rate: u32) -> Result<()> {
        if let Container::Encoded(f) = self {
            let out = f.output_rate(None, rate)?;
            f.encoder(out)?;
            if out != rate {
                StreamResampler::new(rate, out)?;
            }
        }
        Ok(())
    }
}

/// Where audio goes: a file, written under a temporary name and renamed
/// over the target only when complete ([`Staged`]), or stdout (buffered:
/// WAV needs a seekable header).
pub(crate) enum Destination {
    File(Staged, File),
    Stdout,
}

impl Destination {
    /// `-` is stdout; anything else a staged file beside `path` (the file at
    /// `path` itself stays as it is until [`write`](Self::write) or
    /// [`AudioWriter::finish`] succeeds). Open it after the arguments are
    /// checked; [`check_target`] refuses an unusable path before that.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        if path == Path::new("-") {
            return Ok(Destination::Stdout);
        }
        let (staged, f) = Staged::create(path)?;
        Ok(Destination::File(staged, f))
    }

    /// The whole of the audio, in `container`.
    pub(crate) fn write(self, samples: &[f32], rate: u32, container: Container) -> Result<()> {
        let mut w = AudioWriter::open(self, rate, container)?;
        w.write(samples)?;
        w.finish()
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
    File(Staged, WavSink<BufWriter<File>>),
    Stdout(Vec<f32>, u32, WavFormat),
    /// An encoded file: samples (resampled when the codec needs another
    /// rate) through the encoder, its bytes appended as they are ready.
    Encoded(Box<EncodedFile>),
}

pub(crate) struct EncodedFile {
    staged: Staged,
    file: BufWriter<File>,
    encoder: Box<dyn Encoder>,
    resampler: Option<StreamResampler>,
    samples: Vec<f32>,
    bytes: Vec<u8>,
}

impl EncodedFile {
    fn open(staged: Staged, f: File, rate: u32, format: Format) -> Result<Self> {
        let out = format.output_rate(None, rate)?;
        let resampler = (out != rate)
            .then(|| StreamResampler::new(rate, out))
            .transpose()?;
        Ok(EncodedFile {
            staged,
            file: BufWriter::new(f),
            encoder: format.encoder(out)?,
            resampler,
            samples: Vec::new(),
            bytes: Vec::new(),
        })
    }

    fn write(&mut self, samples: &[f32]) -> Result<()> {
        self.bytes.clear();
        match &mut self.resampler {
            Some(r) => {
                self.samples.clear();
                r.step(samples, &mut self.samples);
                self.encoder.push(&self.samples, &mut self.bytes)?;
            }
            None => self.encoder.push(samples, &mut self.bytes)?,
        }
        self.flush_bytes()
    }

    fn flush_bytes(&mut self) -> Result<()> {
        self.file
            .write_all(&self.bytes)
            .with_context(|| format!("writing {}", self.staged.target().display()))
    }

    fn finish(mut self) -> Result<()> {
        self.bytes.clear();
        if let Some(r) = &mut self.resampler {
            self.samples.clear();
            r.flush(&mut self.samples);
            self.encoder.push(&self.samples, &mut self.bytes)?;
        }
        self.encoder.finish(&mut self.bytes)?;
        self.flush_bytes()?;
        let target = self.staged.target().display().to_string();
        let mut f = self
            .file
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("writing {target}"))?;
        // The header with the true length (FLAC's sample count and MD5).
        if let Some(h) = self.encoder.exact_header() {
            f.rewind()
                .and_then(|()| f.write_all(&h))
                .with_context(|| format!("writing {target}"))?;
        }
        f.flush().with_context(|| format!("writing {target}"))?;
        drop(f);
        self.staged.commit()
    }
}

impl AudioWriter {
    pub(crate) fn open(out: Destination, rate: u32, container: Container) -> Result<Self> {
        Ok(match (out, container) {
            (Destination::File(staged, f), Container::Wav(format)) => {
                AudioWriter::File(staged, WavSink::new(BufWriter::new(f), rate, format)?)
            }
            (Destination::File(staged, f), Container::Encoded(format)) => {
                AudioWriter::Encoded(Box::new(EncodedFile::open(staged, f, rate, format)?))
            }
            (Destination::Stdout, Container::Wav(format)) => {
                AudioWriter::Stdout(Vec::new(), rate, format)
            }
            (Destination::Stdout, Container::Encoded(format)) => {
                bail!("stdout takes WAV only, not {format}")
            }
        })
    }

    pub(crate) fn write(&mut self, samples: &[f32]) -> Result<()> {
        match self {
            AudioWriter::File(staged, sink) => sink
                .write(samples)
                .with_context(|| format!("writing {}", staged.target().display()))?,
            AudioWriter::Stdout(buf, ..) => buf.extend_from_slice(samples),
            AudioWriter::Encoded(e) => e.write(samples)?,
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
            AudioWriter::Stdout(buf, rate, format) => {
                let bytes = tts_audio::wav_bytes(&buf, rate, format)?;
                let mut out = std::io::stdout().lock();
                out.write_all(&bytes)?;
                out.flush()?;
            }
            AudioWriter::Encoded(e) => e.finish()?,
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
