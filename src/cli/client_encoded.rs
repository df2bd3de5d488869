//! `tts-rt client --format` for encoded formats: which formats the client
//! takes and what each allows, and the writer that puts a context's
//! encoded frames into `--out` as one file of that format.
//!
//! The server's frames of an encoded context concatenate to a complete
//! file (`mp3`, Ogg `opus`, `flac`, ADTS `aac`, headerless G.711 `mulaw` /
//! `alaw`), so the writer appends each payload as it arrives: a file is
//! staged beside the target and renamed over it once the context is done
//! (a failed run leaves an existing file as it was); stdout gets the bytes
//! at once. `opus_packets` (raw 20 ms packets, what an RTP bridge carries)
//! has no container a file could hold, so `--out` refuses it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use tts_audio::Format;
use tts_transport::protocol::AudioFormat;

use super::io::{out_container, Container, Destination};
use super::outfile::Staged;

/// `--format`: any realtime format name.
pub(crate) fn parse_format(s: &str) -> std::result::Result<AudioFormat, String> {
    AudioFormat::ALL
        .into_iter()
        .find(|f| f.name() == s)
        .ok_or_else(|| {
            let names: Vec<&str> = AudioFormat::ALL.iter().map(|f| f.name()).collect();
            format!("unknown format {s:?}; use one of {}", names.join(", "))
        })
}

/// The wire format for `--format` and `--out`'s extension
/// ([`out_container`]), and whether `--out` takes the frames' bytes as they
/// are (a `.pcm` file of pcm16 samples) rather than a WAV of the samples.
/// `--format` must agree with the extension; without it the extension
/// names the format (a `.wav`, stdout or a name without an extension:
/// pcm16).
pub(crate) fn out_format(
    format: Option<AudioFormat>,
    out: Option<&Path>,
) -> Result<(AudioFormat, bool)> {
    let Some(path) = out.filter(|p| *p != Path::new("-") && p.extension().is_some()) else {
        return Ok((format.unwrap_or(AudioFormat::Pcm16), false));
    };
    if format == Some(AudioFormat::OpusPackets) {
        // No file holds it: `check_format` says so, and what to use.
        return Ok((AudioFormat::OpusPackets, false));
    }
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let (wants, raw) = match out_container(path, None, "--out")? {
        Container::Wav(_) => match format {
            None | Some(AudioFormat::Pcm16) => return Ok((AudioFormat::Pcm16, false)),
            Some(AudioFormat::F32) => return Ok((AudioFormat::F32, false)),
            Some(f) => bail!(
                "--format {f} sends {f} bytes, but --out {} is a .{ext} (a WAV of pcm16 or f32 samples); \
                 name the file .{} or leave --format out",
                path.display(),
                ext_of(f)
            ),
        },
        Container::Encoded(Format::Pcm) => (AudioFormat::Pcm16, true),
        Container::Encoded(f) => (
            AudioFormat::ALL
                .into_iter()
                .find(|a| a.name() == f.name())
                .context("every encoder's format is a wire format")?,
            false,
        ),
    };
    match format {
        None => Ok((wants, raw)),
        Some(f) if f == wants => Ok((wants, raw)),
        Some(f) => bail!(
            "--format {f} does not write a .{ext} file (--out {} is {wants}); name the file .{} \
             or leave --format out",
            path.display(),
            ext_of(f)
        ),
    }
}

/// The extension a file of `format` gets.
fn ext_of(format: AudioFormat) -> &'static str {
    match format {
        AudioFormat::Pcm16 | AudioFormat::F32 => "wav",
        AudioFormat::Mp3 => "mp3",
        AudioFormat::Opus | AudioFormat::OpusPackets => "opus",
        AudioFormat::Flac => "flac",
        AudioFormat::Aac => "aac",
        AudioFormat::Mulaw => "ulaw",
        AudioFormat::Alaw => "alaw",
    }
}

/// Refuses flag combinations an encoded format cannot serve, before any
/// network work.
pub(crate) fn check_format(format: AudioFormat, play: bool, out: bool) -> Result<()> {
    if format.is_encoded() && play {
        bail!(
            "--play needs --format pcm16 or f32 (the player takes samples, not {format} bytes); \
             write {format} to a file with --out, or play pcm16"
        );
    }
    if format == AudioFormat::OpusPackets && out {
        bail!(
            "--format opus_packets sends raw Opus packets with no container, which a file cannot \
             hold as they are; use --format opus for an Ogg Opus file"
        );
    }
    Ok(())
}

/// `--out` for an encoded format: the payloads, appended as they arrive.
pub(crate) enum BytesWriter {
    File(Staged, BufWriter<File>),
    Stdout,
}

impl BytesWriter {
    pub(crate) fn open(out: Destination) -> Self {
        match out {
            Destination::File(staged, f) => BytesWriter::File(staged, BufWriter::new(f)),
            Destination::Stdout => BytesWriter::Stdout,
        }
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        match self {
            BytesWriter::File(staged, f) => f
                .write_all(bytes)
                .with_context(|| format!("writing {}", staged.target().display())),
            BytesWriter::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes)?;
                out.flush()?;
                Ok(())
            }
        }
    }

    /// The context is done: the file replaces the target.
    pub(crate) fn finish(self) -> Result<()> {
        if let BytesWriter::File(staged, mut f) = self {
            f.flush()
                .with_context(|| format!("writing {}", staged.target().display()))?;
            drop(f);
            staged.commit()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_realtime_format_parses_and_an_unknown_one_lists_them() {
        for f in AudioFormat::ALL {
            assert_eq!(parse_format(f.name()), Ok(f));
        }
        let e = parse_format("ogg").unwrap_err();
        assert!(e.contains("opus_packets") && e.contains("aac"), "{e}");
    }

    #[test]
    fn encoded_formats_refuse_play_and_opus_packets_refuse_out() {
        assert!(check_format(AudioFormat::Pcm16, true, true).is_ok());
        assert!(check_format(AudioFormat::Mp3, false, true).is_ok());
        let e = check_format(AudioFormat::Aac, true, false).unwrap_err();
        assert!(e.to_string().contains("--play needs"), "{e}");
        let e = check_format(AudioFormat::OpusPackets, false, true).unwrap_err();
        assert!(e.to_string().contains("--format opus"), "{e}");
    }

    #[test]
    fn out_file_holds_the_concatenated_payloads_only_once_finished() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.mp3");
        std::fs::write(&path, b"old").unwrap();
        let mut w = BytesWriter::open(Destination::open(&path).unwrap());
        w.write(&[1, 2]).unwrap();
        w.write(&[3]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"old", "staged until done");
        w.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), [1, 2, 3]);
    }
}
