//! Shared by the server tests: the tiny-a fixture served on
//! loopback (127.0.0.1:0), started and stopped with a hang turned into a
//! failure.

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
/// A copy of tiny-a in its own temporary directory, patched; removed on drop.
pub struct PatchedFixture(pub PathBuf);

impl PatchedFixture {
    /// Copies tiny-a and lets `patch` rewrite one tensor's bytes in the
    /// safetensors file `file` (relative to the checkpoint).
    fn new(
        what: &str,
        file: &str,
        tensor: &str,
        dtype: &str,
        patch: impl FnOnce(&mut [u8]),
    ) -> Result<Self> {
        // One directory per copy: tests of one binary run in parallel.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tts-rt-{what}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        copy_dir(&fixture(), &dir)?;
        let st = dir.join(file);
        let mut bytes = std::fs::read(&st)?;
        let n = u64::from_le_bytes(bytes[..8].try_into()?) as usize;
        let header: Value = serde_json::from_slice(&bytes[8..8 + n])?;
        let t = &header[tensor];
        ensure!(t["dtype"] == dtype, "fixture layout changed: {tensor} {t}");
        let (a, b) = (
            t["data_offsets"][0].as_u64().context("offset")? as usize,
            t["data_offsets"][1].as_u64().context("offset")? as usize,
        );
        patch(&mut bytes[8 + n + a..8 + n + b]);
        std::fs::write(&st, bytes)?;
        Ok(PatchedFixture(dir))
    }
}

impl Drop for PatchedFixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// tiny-a's golden `en_ryan` case (greedy "Hello world.", ryan, English)
/// first holds code 1021 in codebook 0 at frame 14: with that code's
/// codebook row NaN ([`BrokenCodec::at_code`]), the chunks that end before
/// frame 14 decode finite and the one holding it does not.
pub const LATE_CODE: usize = 1021;
pub const LATE_FRAME: usize = 14;

/// The chunks of the engine's default schedule that end before `frame`, and
/// their samples (`spf` per frame).
pub fn finite_prefix(frame: usize, spf: usize) -> (usize, usize) {
    let schedule = tts_actors::ChunkSchedule::default();
    let (mut chunks, mut frames) = (0, 0);
    while frames + schedule.size(chunks as u64) <= frame {
        frames += schedule.size(chunks as u64);
        chunks += 1;
    }
    (chunks, frames * spf)
}

/// tiny-a with a codec that decodes NaN (its last convolution's bias).
pub struct BrokenCodec(pub PatchedFixture);

impl BrokenCodec {
    pub fn new() -> Result<Self> {
        PatchedFixture::new(
            "nan-codec",
            "speech_tokenizer/model.safetensors",
            "decoder.decoder.6.conv.bias",
            "F32",
            |data| {
                for v in data.chunks_exact_mut(4) {
                    v.copy_from_slice(&f32::NAN.to_le_bytes());
                }
            },
        )
        .map(BrokenCodec)
    }

    /// tiny-a whose codec decodes NaN only where codebook 0 holds `code`
    /// (its first quantizer's row for it is NaN): the audio before the
    /// first frame with that code is finite, as the decoder is causal.
    pub fn at_code(code: usize) -> Result<Self> {
        const DIM: usize = 4; // tiny-a's rvq_first codebook dimension
        PatchedFixture::new(
            "nan-code",
            "speech_tokenizer/model.safetensors",
            "decoder.quantizer.rvq_first.vq.layers.0._codebook.embedding_sum",
            "F32",
            |data| {
                for v in data[code * DIM * 4..(code + 1) * DIM * 4].chunks_exact_mut(4) {
                    v.copy_from_slice(&f32::NAN.to_le_bytes());
                }
            },
        )
        .map(BrokenCodec)
    }

    pub fn dir(&self) -> PathBuf {
        self.0 .0.clone()
    }
}

/// tiny-a whose talker never ends an utterance: the end-of-speech row of
/// its codec head is zero (logit 0) and every code's row is scaled ×256
/// (an exponent step, exact in bf16), so some code's logit always dwarfs
/// it. Each request runs to its frame cap: a long generation on demand.
pub struct EndlessTalker(pub PatchedFixture);

impl EndlessTalker {
    pub fn new() -> Result<Self> {
        const EOS: usize = 2150; // tiny-a's codec_eos_token_id
        const CODES: usize = 2048; // its codebook size
        const HIDDEN: usize = 32;
        PatchedFixture::new(
            "endless-talker",
            "model.safetensors",
            "talker.codec_head.weight",
            "BF16",
            |data| {
                for (row, r) in data.chunks_exact_mut(2 * HIDDEN).enumerate() {
                    for v in r.chunks_exact_mut(2) {
                        let x = half_bf16(u16::from_le_bytes([v[0], v[1]]));
                        let y = match row {
                            EOS => 0.0,
                            r if r < CODES => x * 256.0,
                            _ => x,
                        };
                        v.copy_from_slice(&bf16_bits(y).to_le_bytes());
                    }
                }
            },
        )
        .map(EndlessTalker)
    }

    pub fn dir(&self) -> PathBuf {
        self.0 .0.clone()
    }
}

fn half_bf16(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// Truncates: only exact values (zero, power-of-two multiples) go through.
fn bf16_bits(x: f32) -> u16 {
    (x.to_bits() >> 16) as u16
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
