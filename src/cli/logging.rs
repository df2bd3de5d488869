//! The process's `tracing` subscriber: events (the server's request lines,
//! the engine's stage restarts and stalls, warnings) go to stderr, filtered
//! by `RUST_LOG` (e.g. `RUST_LOG=debug`, `RUST_LOG=tts_transport=debug`),
//! as text lines or one JSON object per line (`--log-format json`). User
//! facing output (what `speak` prints, `serve`'s "listening on" line) is
//! not logging and stays on stdout/stderr as it was.

use anyhow::{Context, Result};
use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    /// `2026-12-01T16:50:00Z  INFO tts_transport::http: request route=...`
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`,
    /// and the `session` span with its `request_id` on realtime events).
    Json,
}

/// Installs the subscriber. `RUST_LOG` wins over `default` (the level or
/// filter the command or its config file asks for).
pub(crate) fn init(format: LogFormat, default: &str, timestamps: bool) -> Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => {
            EnvFilter::try_new(&v).with_context(|| format!("RUST_LOG={v:?} is not a log filter"))?
        }
        _ => EnvFilter::try_new(default).with_context(|| {
            format!(
                "log level {default:?} is not a log filter (e.g. info, debug, tts_transport=debug)"
            )
        })?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let r = match (format, timestamps) {
        (LogFormat::Json, _) => builder.json().try_init(),
        (LogFormat::Text, true) => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        (LogFormat::Text, false) => builder
            .without_time()
            .with_target(false)
            .with_ansi(false)
            .try_init(),
    };
    // A second install (tests calling twice) keeps the first.
    let _ = r;
    Ok(())
}
