//! The serving layer's error type: what `Server::start` and `run_blocking`
//! can fail with. Per-message and per-request problems are protocol events
//! (`protocol::ErrorCode`) or HTTP error bodies, never this type.

use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    #[error("cannot listen on {addr}: {source}; pick another --port or stop what is using it")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("serve config `{key}`: {message}")]
    Config { key: &'static str, message: String },
    /// A `--tls-cert` / `--tls-key` file that cannot serve TLS.
    #[error("{flag} {}: {message}", path.display())]
    Tls {
        flag: &'static str,
        path: std::path::PathBuf,
        message: String,
    },
    #[error("loading the model from {dir}: {message}")]
    Model { dir: String, message: String },
    #[error("starting the engine: {0}")]
    Engine(#[from] tts_actors::EngineError),
    #[error("stopped by a second signal during the drain; streams in flight were cut")]
    Interrupted,
    #[error("server I/O: {0}")]
    Io(#[from] std::io::Error),
}
