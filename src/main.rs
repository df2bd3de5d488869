//! `tts-rt`: the command-line front end. Thin on purpose: parsing, model
//! location, progress and output; everything else lives in the crates.
//!
//! # Layout
//! - `cli`: the flags and one module per subcommand (its own `# Layout`).
//! - `model_path`: which checkpoint directory `--model` / `$TTS_RT_MODEL` /
//!   the Hugging Face cache names; `download`: fetching the default
//!   checkpoint from the hub when it is not cached.
//! - `main` (this file): maps the error chain to the exit code.
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
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(1)
        }
    }
}
