//! Shared by the server test binaries: the tiny-a fixture served on
//! loopback (127.0.0.1:0), started and stopped with a hang turned into a
//! failure.
#![allow(dead_code)] // each test binary uses a different subset

pub mod audio;
pub mod http;
pub mod ws;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use serde_json::Value;
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

/// A copy of tiny-a whose codec's last convolution has a NaN bias, so every
/// decoded sample is NaN (the codec emits non-finite audio from the first
/// chunk). Removed when dropped.
pub struct BrokenCodec(pub PathBuf);

impl BrokenCodec {
    pub fn new() -> Result<Self> {
        // One directory per copy: tests of one binary run in parallel.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tts-rt-nan-codec-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        copy_dir(&fixture(), &dir)?;
        let st = dir.join("speech_tokenizer/model.safetensors");
        let mut bytes = std::fs::read(&st)?;
        let n = u64::from_le_bytes(bytes[..8].try_into()?) as usize;
        let header: Value = serde_json::from_slice(&bytes[8..8 + n])?;
        let t = &header["decoder.decoder.6.conv.bias"];
        ensure!(t["dtype"] == "F32", "fixture layout changed: {t}");
        let (a, b) = (
            t["data_offsets"][0].as_u64().context("offset")? as usize,
            t["data_offsets"][1].as_u64().context("offset")? as usize,
        );
        for at in (8 + n + a..8 + n + b).step_by(4) {
            bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        }
        std::fs::write(&st, bytes)?;
        Ok(BrokenCodec(dir))
    }
}

impl Drop for BrokenCodec {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), dest)?;
        }
    }
    Ok(())
}
