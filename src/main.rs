//! `tts-rt`: the command-line front end. Thin on purpose: parsing, model
//! location, progress and output; everything else lives in the crates.

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
