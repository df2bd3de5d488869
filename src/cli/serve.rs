//! `tts-rt serve`: the realtime WebSocket + OpenAI-compatible HTTP server
//! (the `transport/` crate); this file only turns flags into a ServeConfig.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use tts_actors::{EngineConfig, StageThreads};
use tts_transport::ServeConfig;

use crate::model_path;

#[derive(Args)]
pub struct ServeArgs {
    /// Checkpoint directory (default: $TTS_RT_MODEL, else the Hugging Face
    /// cache entry of Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Weight precision: a preset (`reference`, `balanced`, `fast`),
    /// TALKER[,CODE_PREDICTOR[,CODE2WAV]] (f32, int8 or q4 for the LMs; f32
    /// or bf16 for code2wav), or per-class items
    /// (`talker.attn=int8,cp.mlp_down=bf16`); see `tts-rt speak --help`.
    #[arg(long, default_value = "f32", value_parser = super::parse_precision)]
    precision: tts_models::LoadOptions,
    /// Cache int8/q4-converted LM weights in DIR (written once, then
    /// memory-mapped; see `tts-rt speak --help`). Off by default.
    #[arg(long, value_name = "DIR", env = "TTS_RT_WEIGHTS_CACHE")]
    weights_cache: Option<PathBuf>,
    /// Address to listen on: an IP address or `localhost` (127.0.0.1);
    /// loopback unless you mean to expose it (0.0.0.0 or ::).
    #[arg(long, default_value = "127.0.0.1", value_parser = parse_host)]
    host: IpAddr,
    /// Port (0: any free port; the bound one is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer TOKEN` on every route except the open
    /// ones: /health, /ready, and the browser page (/, /app.js,
    /// /worklet.js, /style.css). The WebSocket /v1/realtime also takes
    /// `?token=TOKEN` (browsers cannot set its headers); no other route does.
    #[arg(long, env = "TTS_RT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// WebSocket sessions at once (more get 503, once the longest-idle
    /// session, if any, was closed to make room).
    #[arg(long, default_value_t = 64)]
    max_sessions: usize,
    /// HTTP connections at once (WebSockets leave the count once upgraded);
    /// more get 503 and are closed (GET /health is still answered).
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Seconds a request's headers may take to arrive (and a kept-alive
    /// connection may wait for its next request).
    #[arg(long, default_value_t = 10.0)]
    header_timeout_s: f64,
    /// Seconds a request body may take to arrive (408 past it).
    #[arg(long, default_value_t = 60.0)]
    body_timeout_s: f64,
    /// Synthesis requests running at once in the engine (all sessions).
    #[arg(long, default_value_t = 16)]
    max_requests: usize,
    /// Cap on codec frames per request (12.5 per second of audio).
    #[arg(long)]
    max_frames: Option<usize>,
    /// Place the stages on their own kernel pools: LM,VOCODER threads (see
    /// docs/performance.md). Default: all stages share the global pool.
    #[arg(long)]
    stage_threads: Option<StageThreads>,
    /// Seconds in-flight streams get to finish after SIGTERM / ctrl-c.
    #[arg(long, default_value_t = 10.0)]
    drain_timeout_s: f64,
    /// Close a WebSocket session with no open context and no message for
    /// this many seconds. When every --max-sessions slot is taken, the
    /// longest-idle session is closed to admit a new client.
    #[arg(long, default_value_t = 300.0)]
    idle_timeout_s: f64,
    /// Ping each WebSocket session this often (seconds) ...
    #[arg(long, default_value_t = 20.0)]
    ping_interval_s: f64,
    /// ... and close one that sends nothing for this long after a ping.
    #[arg(long, default_value_t = 20.0)]
    pong_timeout_s: f64,
    /// Stored voices (Base checkpoints: `POST /v1/audio/voices`, `voice`
    /// naming one); other checkpoints do not open it.
    #[command(flatten)]
    voices: super::VoicesDirArg,
    /// Most stored voices (uploads past it are refused).
    #[arg(long)]
    max_voices: Option<usize>,
    /// Largest reference clip an upload or inline `ref_audio` may carry, in
    /// MiB (10 by default, as vllm-omni).
    #[arg(long, default_value_t = 10.0)]
    max_upload_mb: f64,
}

/// `--host`: an IP address (IPv6 with or without brackets) or `localhost`.
/// Other host names are refused rather than resolved: which of a name's
/// addresses a server binds should be the user's explicit choice.
fn parse_host(s: &str) -> std::result::Result<IpAddr, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    }
    let bare = t
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(t);
    bare.parse().map_err(|_| {
        format!("{s:?} is not an IP address; give one (127.0.0.1, ::1, 0.0.0.0) or localhost")
    })
}

pub fn serve(a: ServeArgs) -> Result<()> {
    // Resolved (and downloaded if need be) before listening, so a missing
    // model fails here with its instructions rather than as a 503 forever.
    let dir = model_path::resolve(a.model.as_deref())?;
    let mut cfg = ServeConfig::new(dir);
    cfg.precision = a.precision.with_weights_cache(a.weights_cache.as_deref());
    cfg.addr = SocketAddr::new(a.host, a.port);
    cfg.token = a.token;
    cfg.max_sessions = a.max_sessions;
    cfg.max_frames = a.max_frames;
    cfg.engine = EngineConfig {
        max_active_requests: a.max_requests,
        stage_threads: a.stage_threads,
        ..EngineConfig::default()
    };
    anyhow::ensure!(
        a.drain_timeout_s.is_finite() && a.drain_timeout_s >= 0.0,
        "--drain-timeout-s must be a number of seconds >= 0"
    );
    cfg.drain_timeout = Duration::from_secs_f64(a.drain_timeout_s);
    for (flag, v) in [
        ("--header-timeout-s", a.header_timeout_s),
        ("--body-timeout-s", a.body_timeout_s),
        ("--idle-timeout-s", a.idle_timeout_s),
        ("--ping-interval-s", a.ping_interval_s),
        ("--pong-timeout-s", a.pong_timeout_s),
    ] {
        anyhow::ensure!(
            v.is_finite() && (0.1..=86_400.0).contains(&v),
            "{flag} must be a number of seconds from 0.1 to 86400, got {v}"
        );
    }
    cfg.max_connections = a.max_connections;
    cfg.header_read_timeout = Duration::from_secs_f64(a.header_timeout_s);
    cfg.body_read_timeout = Duration::from_secs_f64(a.body_timeout_s);
    cfg.idle_timeout = Duration::from_secs_f64(a.idle_timeout_s);
    cfg.ping_interval = Duration::from_secs_f64(a.ping_interval_s);
    cfg.pong_timeout = Duration::from_secs_f64(a.pong_timeout_s);
    anyhow::ensure!(
        a.max_upload_mb.is_finite() && a.max_upload_mb > 0.0,
        "--max-upload-mb must be a positive number of megabytes"
    );
    cfg.max_upload_bytes = (a.max_upload_mb * 1024.0 * 1024.0) as usize;
    cfg.max_voices = a.max_voices;
    // Without a voice directory (no flag and no home directory) the server
    // still serves everything but stored voices.
    cfg.voices_dir = match a.voices.resolve() {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("tts-rt serve: no stored voices: {e:#}");
            None
        }
    };
    tts_transport::run_blocking(cfg, |addr| {
        println!("listening on http://{addr} (WebSocket: ws://{addr}/v1/realtime)");
    })
    .context("tts-rt serve")
}

#[cfg(test)]
mod tests {
    use super::parse_host;

    #[test]
    fn host_localhost_is_accepted_as_loopback() {
        assert_eq!(parse_host("localhost").unwrap().to_string(), "127.0.0.1");
        assert_eq!(parse_host("LocalHost").unwrap().to_string(), "127.0.0.1");
        assert_eq!(parse_host("[::1]").unwrap().to_string(), "::1");
        assert_eq!(parse_host("0.0.0.0").unwrap().to_string(), "0.0.0.0");
        let e = parse_host("example.com").unwrap_err();
        assert!(e.contains("localhost"), "{e}");
    }
}
