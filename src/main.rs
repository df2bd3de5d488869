//! `tts-rt`: the command-line front end. Thin on purpose: parsing, model
//! location, progress and output; everything else lives in the crates.
//!
//! # Layout
//! - `cli`: the flags and one module per subcommand (its own `# Layout`).
//! - `model_path`: which checkpoint directory `--model` / `$TTS_RT_MODEL` /
//!   the Hugging Face cache names; `download`: fetching the default
//!   checkpoint from the hub when it is not cached.
//! - `main` (this file): maps the error chain to the exit code and prints
//!   it, one cause per line.
//!
//! The CLI reaches the kernels only through tts-models (for example
//! `Code2Wav::decode_on_pool`), except `tts_kernels::isa()` and
//! `tts_kernels::bf16_conv_path()` for the instruction set and convolution
//! path it reports in `--timings` and `bench` provenance, the offline
//! paths' kernel `Team`, and `tts_kernels::KernelSettings`, which it reads
//! from the environment and installs once at start (`cli/switches.rs`).

mod cli;
mod download;
mod model_path;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A closed pipe (e.g. `tts-rt speak ... --out - | head -c 100`)
            // is the reader's choice, not an error.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            for line in error_lines(&e) {
                eprintln!("{line}");
            }
            ExitCode::from(1)
        }
    }
}

/// `error: ...` and a `caused by: ...` line per cause. A cause whose text
/// the line above already holds is left out: a library error that says its
/// cause in its own message and also returns it as its source would
/// otherwise print it twice (the libraries are fixed not to; this keeps a
/// new one from bringing it back).
fn error_lines(e: &anyhow::Error) -> Vec<String> {
    let mut lines = vec![format!("error: {e}")];
    let mut above = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !above.contains(&text) {
            lines.push(format!("  caused by: {text}"));
        }
        above = text;
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::error_lines;

    #[derive(Debug)]
    struct Twice(std::io::Error);
    impl std::fmt::Display for Twice {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "voice directory /v: {}", self.0)
        }
    }
    impl std::error::Error for Twice {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// Issue 31, item 4: one cause per error line, even where an error says
    /// its source in its own message.
    #[test]
    fn one_cause_per_error_line_when_a_message_repeats_its_source() {
        let e = anyhow::Error::new(Twice(std::io::Error::other("disk full")))
            .context("adding voice alice");
        assert_eq!(
            error_lines(&e),
            [
                "error: adding voice alice",
                "  caused by: voice directory /v: disk full",
            ]
        );
        let plain = anyhow::anyhow!("no such file").context("reading x");
        assert_eq!(
            error_lines(&plain),
            ["error: reading x", "  caused by: no such file"]
        );
    }
}
