//! Shared by the server test binaries: the tiny-a fixture served on
//! loopback (127.0.0.1:0), started and stopped with a hang turned into a
//! failure.
#![allow(dead_code)] // each test binary uses a different subset

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use tts_transport::{ServeConfig, Server};

pub const WAIT: Duration = Duration::from_secs(60);

pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a")
}

/// tiny-a on a free loopback port, at most 400 frames a request, draining
/// for at most `drain`.
pub fn config(drain: Duration) -> ServeConfig {
    let mut c = ServeConfig::new(fixture());
    c.addr = SocketAddr::from(([127, 0, 0, 1], 0));
    c.max_frames = Some(400);
    c.drain_timeout = drain;
    c
}

/// Starts `cfg` and waits until the model is loaded.
pub async fn start(cfg: ServeConfig) -> Result<Server> {
    let s = Server::start(cfg).await?;
    tokio::time::timeout(WAIT, s.ready()).await??;
    Ok(s)
}

/// Shuts `s` down and waits for it to finish.
pub async fn stop(s: Server) -> Result<()> {
    s.shutdown();
    tokio::time::timeout(WAIT, s.wait()).await??;
    Ok(())
}
