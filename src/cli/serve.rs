//! `tts-rt serve`: the realtime WebSocket + OpenAI-compatible HTTP server
//! (the `transport/` crate); this file only turns flags (and the
//! `--config` file, `serve_config.rs`) into a ServeConfig.
//!
//! Every flag is optional here so that a flag left out can be taken from
//! the config file; the defaults named in each flag's help apply when
//! neither gives a value.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use tts_actors::{EngineConfig, StageThreads};
use tts_transport::{protocol, ServeConfig};

use super::logging::{self, LogFormat};
use super::realtime::{self, Use};
use super::serve_config::{LendCore, ServeFile};
use super::switches::Switches;
use crate::model_path;

#[derive(Args)]
pub struct ServeArgs {
    /// Read settings from a TOML file (examples/serve.toml shows every
    /// key: each flag's name with `_` for `-`). Flags given here override
    /// the file; unknown keys are refused.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Checkpoint directory, or a Hugging Face repo id such as
    /// Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice (found in the hub cache, else
    /// downloaded there). Default: $TTS_RT_MODEL, else
    /// Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Weight precision: TALKER[,CODE_PREDICTOR[,CODE2WAV]] (f32, int8,
    /// q6, iq4 or q4 for the LMs; f32, bf16 or int8 for code2wav), a preset
    /// (`reference`, `balanced`, `fast`) or per-class items
    /// (`talker.attn=int8,cp.mlp_down=bf16`);
    /// see `tts-rt speak --help`. Default `fast` (int8 LMs, bf16 talker KV
    /// cache, int8/bf16 vocoder: real time on 2 AVX-512 cores at 0.6B);
    /// `f32` for the reference numerics.
    #[arg(long, value_parser = super::parse_precision)]
    precision: Option<tts_models::LoadOptions>,
    /// Cache int8/q4-converted LM weights in DIR (written once, then
    /// memory-mapped; see `tts-rt speak --help`). Off by default.
    #[arg(long, value_name = "DIR", env = "TTS_RT_WEIGHTS_CACHE")]
    weights_cache: Option<PathBuf>,
    /// Address to listen on: an IP address or `localhost` (127.0.0.1);
    /// loopback unless you mean to expose it (0.0.0.0 or ::). Default
    /// 127.0.0.1.
    #[arg(long, value_parser = parse_host)]
    host: Option<IpAddr>,
    /// Port (0: any free port; the bound one is printed). Default 8080.
    #[arg(long)]
    port: Option<u16>,
    /// Serve HTTPS and WSS on the port (every route) with this certificate
    /// chain (PEM, leaf first). Needs --tls-key. Off by default (plain
    /// HTTP; put a TLS proxy in front, or use this, to expose the port).
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert's certificate (PEM: PKCS#8, PKCS#1
    /// RSA or SEC1 EC). Needs --tls-cert.
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Also answer GET /health and GET /ready on this port (same host; no
    /// token, no connection cap shared with the main port): point
    /// orchestrators' probes here, and a connection flood on the main port
    /// cannot make a live server look dead. Off by default.
    #[arg(long)]
    health_port: Option<u16>,
    /// Also speak Home Assistant's Wyoming TTS protocol on this TCP port
    /// (same host; Wyoming's usual port is 10200): describe, synthesize,
    /// and streamed synthesize-start/chunk/stop. No authentication (the
    /// token does not apply): bind it where only trusted clients reach
    /// it. Off by default.
    #[arg(long)]
    wyoming_port: Option<u16>,
    /// Require `Authorization: Bearer TOKEN` on every route except the open
    /// ones: /health, /ready, and the browser page (/, /app.js,
    /// /worklet.js, /style.css). The WebSocket /v1/realtime also takes
    /// `?token=TOKEN` (browsers cannot set its headers); no other route does.
    #[arg(long, env = "TTS_RT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// WebSocket sessions at once (more get 503, once the longest-idle
    /// session, if any, was closed to make room). Default 64.
    #[arg(long)]
    max_sessions: Option<usize>,
    /// HTTP connections at once (WebSockets leave the count once upgraded);
    /// more get 503 and are closed (GET /health is still answered).
    /// Default 1024.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Seconds a request's headers may take to arrive (and a kept-alive
    /// connection may wait for its next request). Default 10.
    #[arg(long)]
    header_timeout_s: Option<f64>,
    /// Seconds a request body may take to arrive (408 past it). Default 60.
    #[arg(long)]
    body_timeout_s: Option<f64>,
    /// Request bodies held in memory at once, over all connections, in MiB
    /// (past it: 503 with Retry-After). Default 256.
    #[arg(long)]
    max_body_memory_mb: Option<f64>,
    /// Seconds a WebSocket session's open contexts may wait for the
    /// client's text with nothing to speak before they fail with
    /// `text_timeout`. Default 60.
    #[arg(long)]
    text_wait_timeout_s: Option<f64>,
    /// Synthesis requests running at once in the engine (all sessions).
    /// Default 16.
    #[arg(long)]
    max_requests: Option<usize>,
    /// Admission by real-time capacity: a stream is admitted only while
    /// the streams computing, with it, need at most this share of the
    /// cores' time, as this process measures it (0.9 by default: a tenth
    /// held back for jitter); the rest get a fast 429 / `at_capacity`. 0
    /// turns it off (only --max-requests bounds them). docs/limits.md.
    #[arg(long)]
    realtime_load: Option<f64>,
    /// The prebuffer (ms) your listeners hold before they play. Request
    /// records and /metrics report continuity at it, and a chunk leaves
    /// ahead of its schedule when waiting for one more frame would reach
    /// such a listener after its buffer ran dry. Default 200; 0 to 10000.
    /// A realtime session may declare its own (`session.update`
    /// `prebuffer_ms`).
    #[arg(long)]
    prebuffer_ms: Option<f64>,
    /// The short calibration that seeds the real-time capacity before the
    /// server is ready: rounds of 1, 2 and 4 synthetic requests, each
    /// ending once measured (a second or so at 0.6B); this caps their
    /// frames. Default 1000 (a fast model needs that many to be timed); 0
    /// skips it (the first streams measure the capacity, --max-requests
    /// admits until then).
    #[arg(long)]
    calibrate_frames: Option<usize>,
    /// Cap on codec frames per request (12.5 per second of audio).
    #[arg(long)]
    max_frames: Option<usize>,
    /// Place the stages on their own kernel pools: LM,VOCODER threads (see
    /// docs/performance.md). Default: all stages share the global pool.
    #[arg(long)]
    stage_threads: Option<StageThreads>,
    /// code2wav decodes on one core beside the LM stages while they step,
    /// instead of taking every core for its step (not while a request
    /// waits for its first packet): `on` (the bare flag) always, `auto`
    /// where this process measures it cheaper for the streams computing
    /// (each number of streams is timed both ways once, then keeps the
    /// cheaper), `off` never (the default). Pays where one core nearly
    /// saturates the memory bus; compare with `tts-rt bench --lend-core` on
    /// your host (docs/performance.md). Refused beside a TTS_RT_TEAM_HOLD
    /// that never lends (anything but `lend`).
    #[arg(long, value_name = "WHEN", num_args = 0..=1, default_missing_value = "on")]
    lend_core: Option<LendCore>,
    /// Seconds in-flight streams get to finish after SIGTERM / ctrl-c.
    /// Default 10.
    #[arg(long)]
    drain_timeout_s: Option<f64>,
    /// Close a WebSocket session with no open context and no message for
    /// this many seconds. When every --max-sessions slot is taken, the
    /// longest-idle session is closed to admit a new client. Default 300.
    #[arg(long)]
    idle_timeout_s: Option<f64>,
    /// Ping each WebSocket session this often (seconds; default 20) ...
    #[arg(long)]
    ping_interval_s: Option<f64>,
    /// ... and close one that sends nothing for this long after a ping
    /// (default 20).
    #[arg(long)]
    pong_timeout_s: Option<f64>,
    /// Stored voices (Base checkpoints: `POST /v1/audio/voices`, `voice`
    /// naming one); other checkpoints do not open it.
    #[command(flatten)]
    voices: super::VoicesDirArg,
    /// Most stored voices (uploads past it are refused).
    #[arg(long)]
    max_voices: Option<usize>,
    /// Largest reference clip an upload or inline `ref_audio` may carry, in
    /// MiB (10 by default, as vllm-omni).
    #[arg(long)]
    max_upload_mb: Option<f64>,
    /// Map OpenAI voice names onto the checkpoint's speakers, ahead of the
    /// built-in table: `alloy=vivian,ash=ryan` (repeatable; shown in
    /// GET /v1/audio/voices).
    #[arg(long, value_name = "VOICE=SPEAKER,...", value_parser = parse_voice_map)]
    voice_map: Vec<VoiceMapArg>,
    /// Let browser pages from ORIGIN call the HTTP routes (CORS; repeatable;
    /// `*` for any origin). None by default.
    #[arg(long, value_name = "ORIGIN")]
    cors_origin: Vec<String>,
    /// Log lines as `text` (default) or `json` (one object per line), on
    /// stderr; `RUST_LOG` filters them (default `info`).
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
}

/// One `--voice-map` value: its `VOICE=SPEAKER` pairs.
#[derive(Clone, Debug)]
struct VoiceMapArg(Vec<(String, String)>);

fn parse_voice_map(s: &str) -> std::result::Result<VoiceMapArg, String> {
    tts_transport::speakers::parse_voice_map(s).map(VoiceMapArg)
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

/// `--tls-cert` and `--tls-key` (from the flags or the file): both, or
/// neither; one alone is refused naming the other.
fn tls_files(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<tts_transport::TlsFiles>> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(tts_transport::TlsFiles { cert, key })),
        (None, None) => Ok(None),
        (Some(_), None) => anyhow::bail!(
            "--tls-cert needs --tls-key (tls_key in a config file): the certificate's private key, PEM"
        ),
        (None, Some(_)) => anyhow::bail!(
            "--tls-key needs --tls-cert (tls_cert in a config file): the certificate chain, PEM"
        ),
    }
}

/// The source revision the build was made from, when the build said
/// (`TTS_RT_GIT_REVISION` at compile time, as a packaging script sets it).
const GIT_REVISION: Option<&str> = option_env!("TTS_RT_GIT_REVISION");

/// `switches`: the environment switches read at start (the engine's
/// `TTS_RT_TEAM_HOLD`, the listener's `TTS_RT_NODELAY`).
pub fn serve(a: ServeArgs, switches: &Switches) -> Result<()> {
    let file = match &a.config {
        Some(p) => ServeFile::load(p)?,
        None => ServeFile::default(),
    };
    logging::init(
        a.log_format.or(file.log_format).unwrap_or_default(),
        file.log_level.as_deref().unwrap_or("info"),
        true,
    )?;
    let (cfg, precision_line) = config(a, file, switches)?;
    // One line: the precision the server runs and what it costs.
    tracing::info!("{precision_line}");
    let (http, ws) = if cfg.tls.is_some() {
        ("https", "wss")
    } else {
        ("http", "ws")
    };
    tts_transport::run_blocking(cfg, |addr| {
        println!("listening on {http}://{addr} (WebSocket: {ws}://{addr}/v1/realtime)");
    })
    .context("tts-rt serve")
}

/// The flags over the file over the defaults; the environment switches
/// read at start for the engine (`TTS_RT_TEAM_HOLD`) and the listener
/// (`TTS_RT_NODELAY`). Also the startup line naming the precision
/// (`realtime.rs`; "the default for live audio" when neither the flag nor
/// the file chose it).
fn config(a: ServeArgs, f: ServeFile, switches: &Switches) -> Result<(ServeConfig, String)> {
    let stage_threads = match (a.stage_threads, &f.stage_threads) {
        (Some(t), _) => Some(t),
        (None, Some(s)) => Some(
            s.parse::<StageThreads>()
                .map_err(|e| anyhow::anyhow!("config file: stage_threads: {e}"))?,
        ),
        (None, None) => None,
    };
    let realtime_load = a.realtime_load.or(f.realtime_load).unwrap_or(0.9);
    anyhow::ensure!(
        realtime_load.is_finite() && (0.0..=1.0).contains(&realtime_load),
        "--realtime-load must be a share of the cores' time from 0 (off) to 1, got {realtime_load}"
    );
    let prebuffer_ms = a
        .prebuffer_ms
        .or(f.prebuffer_ms)
        .unwrap_or(protocol::DEFAULT_PREBUFFER_MS);
    anyhow::ensure!(
        prebuffer_ms.is_finite() && (0.0..=protocol::MAX_PREBUFFER_MS).contains(&prebuffer_ms),
        "--prebuffer-ms must be from 0 to {} ms, got {prebuffer_ms}",
        protocol::MAX_PREBUFFER_MS
    );
    let engine = EngineConfig {
        max_active_requests: a.max_requests.or(f.max_requests).unwrap_or(16),
        realtime_load: (realtime_load > 0.0).then_some(realtime_load),
        prebuffer_ms,
        stage_threads,
        lend_core: a.lend_core.or(f.lend_core.map(LendCore::from)) == Some(LendCore::On),
        lend_measured: a.lend_core.or(f.lend_core.map(LendCore::from)) == Some(LendCore::Auto),
        team_hold: switches.team_hold,
        ..EngineConfig::default()
    };
    // Checked before the model is looked for (or downloaded): e.g.
    // `--lend-core` beside a `TTS_RT_TEAM_HOLD` that never lends.
    engine.validate()?;
    let tls = tls_files(a.tls_cert.or(f.tls_cert), a.tls_key.or(f.tls_key))?;
    if let Some(files) = &tls {
        // The files read and checked here too, so a bad one fails before
        // the model is looked for (or downloaded); the server reads them
        // again when it starts.
        tts_transport::tls::load(files)?;
    }
    // Resolved (and downloaded if need be) before listening, so a missing
    // model fails here with its instructions rather than as a 503 forever.
    let dir = model_path::resolve(a.model.as_deref().or(f.model.as_deref()))?;
    let mut cfg = ServeConfig::new(dir);
    cfg.engine = engine;
    cfg.nodelay = switches.nodelay;
    cfg.tls = tls;
    let given = match (a.precision, &f.precision) {
        (Some(p), _) => Some(p),
        (None, Some(s)) => Some(
            super::parse_precision(s)
                .map_err(|e| anyhow::anyhow!("config file: precision: {e}"))?,
        ),
        (None, None) => None,
    };
    let (precision, defaulted) = realtime::resolve(given, Use::Live);
    let precision_line = realtime::startup_line(&precision.plan(), defaulted.then_some(Use::Live));
    let weights_cache = a.weights_cache.or(f.weights_cache);
    cfg.precision = precision.with_weights_cache(weights_cache.as_deref());
    let host = match (a.host, &f.host) {
        (Some(h), _) => h,
        (None, Some(s)) => parse_host(s).map_err(|e| anyhow::anyhow!("config file: host: {e}"))?,
        (None, None) => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
    };
    cfg.addr = SocketAddr::new(host, a.port.or(f.port).unwrap_or(8080));
    cfg.token = a.token.or(f.token);
    cfg.max_sessions = a.max_sessions.or(f.max_sessions).unwrap_or(64);
    cfg.max_frames = a.max_frames.or(f.max_frames);
    cfg.calibrate_frames = a.calibrate_frames.or(f.calibrate_frames).unwrap_or(1000);
    anyhow::ensure!(
        cfg.calibrate_frames <= 10_000,
        "--calibrate-frames must be 0 (skip) to 10000, got {}",
        cfg.calibrate_frames
    );
    let drain_timeout_s = a.drain_timeout_s.or(f.drain_timeout_s).unwrap_or(10.0);
    anyhow::ensure!(
        drain_timeout_s.is_finite() && drain_timeout_s >= 0.0,
        "--drain-timeout-s must be a number of seconds >= 0"
    );
    cfg.drain_timeout = Duration::from_secs_f64(drain_timeout_s);
    let header_timeout_s = a.header_timeout_s.or(f.header_timeout_s).unwrap_or(10.0);
    let body_timeout_s = a.body_timeout_s.or(f.body_timeout_s).unwrap_or(60.0);
    let idle_timeout_s = a.idle_timeout_s.or(f.idle_timeout_s).unwrap_or(300.0);
    let ping_interval_s = a.ping_interval_s.or(f.ping_interval_s).unwrap_or(20.0);
    let pong_timeout_s = a.pong_timeout_s.or(f.pong_timeout_s).unwrap_or(20.0);
    let text_wait_timeout_s = a
        .text_wait_timeout_s
        .or(f.text_wait_timeout_s)
        .unwrap_or(60.0);
    for (flag, v) in [
        ("--text-wait-timeout-s", text_wait_timeout_s),
        ("--header-timeout-s", header_timeout_s),
        ("--body-timeout-s", body_timeout_s),
        ("--idle-timeout-s", idle_timeout_s),
        ("--ping-interval-s", ping_interval_s),
        ("--pong-timeout-s", pong_timeout_s),
    ] {
        anyhow::ensure!(
            v.is_finite() && (0.1..=86_400.0).contains(&v),
            "{flag} must be a number of seconds from 0.1 to 86400, got {v}"
        );
    }
    cfg.max_connections = a.max_connections.or(f.max_connections).unwrap_or(1024);
    cfg.header_read_timeout = Duration::from_secs_f64(header_timeout_s);
    cfg.body_read_timeout = Duration::from_secs_f64(body_timeout_s);
    cfg.idle_timeout = Duration::from_secs_f64(idle_timeout_s);
    cfg.ping_interval = Duration::from_secs_f64(ping_interval_s);
    cfg.pong_timeout = Duration::from_secs_f64(pong_timeout_s);
    cfg.text_wait_timeout = Duration::from_secs_f64(text_wait_timeout_s);
    if let Some(p) = a.health_port.or(f.health_port) {
        anyhow::ensure!(
            p != cfg.addr.port() || p == 0,
            "--health-port {p} is the main --port; give the probes a port of their own"
        );
        cfg.health_addr = Some(SocketAddr::new(cfg.addr.ip(), p));
    }
    if let Some(p) = a.wyoming_port.or(f.wyoming_port) {
        anyhow::ensure!(
            p == 0 || (p != cfg.addr.port() && Some(p) != cfg.health_addr.map(|h| h.port())),
            "--wyoming-port {p} is already the main --port or --health-port; give Wyoming a port of its own"
        );
        cfg.wyoming_addr = Some(SocketAddr::new(cfg.addr.ip(), p));
    }
    let max_body_memory_mb = a
        .max_body_memory_mb
        .or(f.max_body_memory_mb)
        .unwrap_or(256.0);
    anyhow::ensure!(
        max_body_memory_mb.is_finite() && (1.0..=1_048_576.0).contains(&max_body_memory_mb),
        "--max-body-memory-mb must be a number of MiB from 1 to 1048576, got {max_body_memory_mb}"
    );
    cfg.max_body_memory = (max_body_memory_mb * 1024.0 * 1024.0) as usize;
    let max_upload_mb = a.max_upload_mb.or(f.max_upload_mb).unwrap_or(10.0);
    anyhow::ensure!(
        max_upload_mb.is_finite() && max_upload_mb > 0.0,
        "--max-upload-mb must be a positive number of megabytes"
    );
    cfg.max_upload_bytes = (max_upload_mb * 1024.0 * 1024.0) as usize;
    cfg.max_voices = a.max_voices.or(f.max_voices);
    // The file's map first, then the flag's entries (the later wins).
    let mut voice_map = Vec::new();
    for (v, s) in f.voice_map.unwrap_or_default() {
        let checked = tts_transport::speakers::parse_voice_map(&format!("{v}={s}"))
            .map_err(|e| anyhow::anyhow!("config file: voice_map: {e}"))?;
        voice_map.extend(checked);
    }
    voice_map.extend(a.voice_map.into_iter().flat_map(|m| m.0));
    cfg.voice_map = voice_map;
    cfg.cors_origins = if a.cors_origin.is_empty() {
        f.cors_origins.unwrap_or_default()
    } else {
        a.cors_origin
    };
    cfg.git_revision = GIT_REVISION.map(str::to_string);
    cfg.version = Some(env!("CARGO_PKG_VERSION").to_string());
    // Without a voice directory (no flag and no home directory) the server
    // still serves everything but stored voices.
    let voices = super::VoicesDirArg {
        voices_dir: a.voices.voices_dir.or(f.voices_dir),
    };
    cfg.voices_dir = match voices.resolve() {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!("no stored voices: {e:#}");
            None
        }
    };
    Ok((cfg, precision_line))
}

#[cfg(test)]
mod tests {
    use super::{parse_host, tls_files};

    #[test]
    fn tls_files_come_in_pairs() {
        assert!(tls_files(None, None).unwrap().is_none());
        let both = tls_files(Some("c.pem".into()), Some("k.pem".into())).unwrap();
        assert_eq!(both.unwrap().key, std::path::PathBuf::from("k.pem"));
        let e = tls_files(Some("c.pem".into()), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--tls-key"), "{e}");
        let e = tls_files(None, Some("k.pem".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--tls-cert"), "{e}");
    }

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
