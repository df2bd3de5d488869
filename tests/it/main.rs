//! tts-rt's integration tests (the CLI end to end, golden parity, error
//! paths): one test binary, one module per area (docs/architecture.md,
//! "Tests"); `common`: the fixtures and helpers they share.

mod common;

#[cfg(target_os = "linux")]
mod alsa_quiet;
mod bench;
mod bench_clone;
mod cli;
#[cfg(unix)]
mod cli_checkpoint;
mod cli_flags;
#[cfg(unix)]
mod cli_outfile;
#[cfg(target_os = "linux")]
mod cli_play_auto;
mod client_cli;
#[cfg(unix)]
mod corrupt_checkpoint;
mod download;
mod errors;
mod fidelity_cli;
mod golden;
mod golden_clone;
mod memory;
#[cfg(target_os = "linux")]
mod play_cli;
mod precision;
mod precision_codec;
mod progress_cli;
mod serve_cli;
mod serve_config_cli;
#[cfg(unix)]
mod serve_signals;
mod speak_ignore_eos;
mod timings_cli;
mod voice_cli;
mod weights_cache;
