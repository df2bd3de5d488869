//! The server: configuration, startup (listen first, load the model in the
//! background), routes, and graceful shutdown. The state the routes share
//! (and the token check each route calls) is in `state.rs`; the route
//! bodies live in `openai.rs`, `realtime/` and `web.rs`.
//!
//! Connections come through `listener.rs` (the cap, read timeouts, one
//! hyper connection each), not `axum::serve`, which sets neither.
//!
//! Shutdown is a three-state broadcast ([`Drain`]): `Running` → `Draining`
//! (no new sessions or contexts, `/ready` says "draining", connections close
//! after their request; streams in flight go on) → `Force` at the drain
//! deadline or on a second signal (cancel what is left). A watch counter of
//! live sessions and HTTP streams, and the connection cap's semaphore, are
//! the completion guards the server waits on before it returns.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::sync::{oneshot, watch, Semaphore};
use tts_actors::{Engine, EngineConfig};
use tts_actors::{ModelKind, Qwen3Tts, VoiceLibrary};

use crate::error::TransportError;
use crate::prometheus::ServerMetrics;
use crate::speakers::Speakers;
use crate::state::{AppState, Drain, Loaded, TokenQuery};
use crate::{access_log, dialects, http_error, library, listener, openai, realtime, web};

/// Everything `tts-rt serve` can set, validated by [`ServeConfig::validate`]
/// before anything starts.
#[derive(Debug)]
pub struct ServeConfig {
    pub model_dir: PathBuf,
    /// Weight precision of the two LMs (see `tts_actors::LoadOptions`).
    pub precision: tts_actors::LoadOptions,
    /// Loopback by default: exposing the port is a decision, not a default.
    pub addr: SocketAddr,
    /// Bearer token required on every route but `/health` and `/ready`.
    pub token: Option<String>,
    /// The server sets `explicit_acks` itself (it acknowledges audio when
    /// written, or when the client says it was played).
    pub engine: EngineConfig,
    /// WebSocket sessions at once; more are refused with 503 (after the
    /// longest-idle session, if any, was closed to make room).
    pub max_sessions: usize,
    /// HTTP connections at once (upgraded WebSockets leave the count);
    /// more get a 503 and are closed.
    pub max_connections: usize,
    /// A request head must arrive within this (also how long a kept-alive
    /// connection may wait for its next request).
    pub header_read_timeout: Duration,
    /// A request body must arrive within this of its first read (408).
    pub body_read_timeout: Duration,
    /// Open contexts per session.
    pub max_contexts: usize,
    /// Appended-but-unsynthesized characters per context.
    pub max_pending_chars: usize,
    /// Cap on codec frames per synthesis request (default: the checkpoint's
    /// `max_new_tokens - 1`).
    pub max_frames: Option<usize>,
    /// How long in-flight streams may take to finish after SIGTERM.
    pub drain_timeout: Duration,
    /// The server pings every realtime session this often ...
    pub ping_interval: Duration,
    /// ... and closes one that sends nothing for this long after a ping.
    pub pong_timeout: Duration,
    /// A realtime session with no open context and no client message for
    /// this long is closed (1001). When every session slot is taken, the
    /// longest-idle session is closed to admit a new client.
    pub idle_timeout: Duration,
    /// Test hook: model loading waits for this (keeps `/ready` at 503).
    pub load_gate: Option<oneshot::Receiver<()>>,
    /// Where stored voices live (a Base checkpoint's library; created if
    /// absent). `None`: no stored voices (inline `ref_audio` still works).
    pub voices_dir: Option<PathBuf>,
    /// Most stored voices (`None`: the store's default).
    pub max_voices: Option<usize>,
    /// Largest reference clip an upload or inline `ref_audio` may carry
    /// (vllm-omni's 10 MB by default).
    pub max_upload_bytes: usize,
    /// OpenAI voice → checkpoint speaker, ahead of the built-in table
    /// (`--voice-map alloy=vivian,ash=ryan`). Names are checked here; the
    /// speakers against the checkpoint when it is loaded (a speaker it does
    /// not have fails the load, naming its speakers).
    pub voice_map: Vec<(String, String)>,
    /// Origins allowed to call the HTTP routes from a browser (`*`: any);
    /// empty (the default): no CORS headers at all.
    pub cors_origins: Vec<String>,
    /// The source revision the binary was built from (the `git` label of
    /// `tts_build_info`; "unknown" when not known).
    pub git_revision: Option<String>,
    /// The version the binary reports (`version` label of
    /// `tts_build_info`; this crate's version when not set).
    pub version: Option<String>,
    /// Request-body bytes held in memory at once, over every connection
    /// (`--max-body-memory-mb`): past it, requests with bodies get `503`
    /// with `Retry-After`.
    pub max_body_memory: usize,
    /// A realtime session whose open contexts wait this long for the
    /// client's text, with nothing being spoken, fails them with
    /// `text_timeout` (and, with no context left, is idle: evictable and
    /// subject to `idle_timeout`). A live utterance paused between an LLM's
    /// tokens holds no engine slot meanwhile; this bounds how long it holds
    /// its session slot and memory.
    pub text_wait_timeout: Duration,
    /// A second listener that answers only `GET /health` and `GET /ready`
    /// (no cap, no token, a short deadline per connection), for
    /// orchestrators' probes: a connection flood on the main port cannot
    /// make a live server look dead there. `None`: probes use the main port.
    pub health_addr: Option<SocketAddr>,
    /// Also speak Home Assistant's Wyoming TTS protocol on this address
    /// (`crate::wyoming`); `None`: off.
    pub wyoming_addr: Option<SocketAddr>,
    /// TCP_NODELAY on every accepted socket (the default). `false` leaves
    /// Nagle's algorithm on: a measurement switch, not a tuning knob
    /// (`tts-rt` sets it from `TTS_RT_NODELAY=off`; `listener.rs`).
    pub nodelay: bool,
    /// Serve the main port over TLS (`https://`, `wss://`) with this
    /// certificate chain and key (PEM; `crate::tls`). Read and checked by
    /// [`Server::start`]: a problem with either file fails the start,
    /// naming it. `None`: plain HTTP. The health listener stays plain.
    pub tls: Option<crate::tls::TlsFiles>,
    /// With admission by real-time capacity (`engine.realtime_load`): the
    /// most frames of each synthetic request of the calibration run after
    /// the load, before the server says it is ready
    /// (`tts_actors::Engine::calibrate`); 0 skips it (the first real
    /// streams measure the capacity; until then the fixed bound admits).
    pub calibrate_frames: usize,
}

/// The default upload limit: 10 MB, as vllm-omni.
pub const DEFAULT_MAX_UPLOAD_BYTES: usize = 10 * 1024 * 1024;

impl ServeConfig {
    pub fn new(model_dir: PathBuf) -> Self {
        ServeConfig {
            model_dir,
            precision: tts_actors::LoadOptions::default(),
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            token: None,
            engine: EngineConfig::default(),
            max_sessions: 64,
            max_connections: 1024,
            calibrate_frames: 1000,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(60),
            max_contexts: 8,
            max_pending_chars: 16 * 1024,
            max_frames: None,
            drain_timeout: Duration::from_secs(10),
            ping_interval: Duration::from_secs(20),
            pong_timeout: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(300),
            load_gate: None,
            voices_dir: None,
            max_voices: None,
            max_upload_bytes: DEFAULT_MAX_UPLOAD_BYTES,
            voice_map: Vec::new(),
            cors_origins: Vec::new(),
            git_revision: None,
            version: None,
            max_body_memory: crate::body_budget::DEFAULT_BODY_BUDGET,
            text_wait_timeout: Duration::from_secs(60),
            health_addr: None,
            wyoming_addr: None,
            nodelay: true,
            tls: None,
        }
    }

    pub fn validate(&self) -> Result<(), TransportError> {
        let bad = |key, message: String| Err(TransportError::Config { key, message });
        if self.max_sessions == 0 {
            return bad("max_sessions", "must be at least 1".into());
        }
        if self.max_contexts == 0 {
            return bad("max_contexts", "must be at least 1".into());
        }
        if self.max_pending_chars < 16 {
            return bad(
                "max_pending_chars",
                format!("must be at least 16, got {}", self.max_pending_chars),
            );
        }
        if self.max_upload_bytes < 1024 {
            return bad(
                "max_upload_bytes",
                format!("must be at least 1024, got {}", self.max_upload_bytes),
            );
        }
        for (voice, speaker) in &self.voice_map {
            crate::speakers::check_openai_voice(voice).map_err(|e| TransportError::Config {
                key: "voice_map",
                message: e.to_string(),
            })?;
            if speaker.trim().is_empty() {
                return bad("voice_map", format!("{voice} maps to no speaker"));
            }
        }
        for o in &self.cors_origins {
            crate::cors::check_origin(o).map_err(|message| TransportError::Config {
                key: "cors_origins",
                message,
            })?;
        }
        if self.max_voices == Some(0) {
            return bad("max_voices", "must be at least 1".into());
        }
        if self.max_frames == Some(0) {
            return bad("max_frames", "must be at least 1".into());
        }
        if self.max_body_memory < self.max_upload_bytes / 3 * 4 + (1 << 20) {
            return bad(
                "max_body_memory",
                format!(
                    "must hold at least one largest speech body ({} bytes for a {} byte clip limit), got {}",
                    self.max_upload_bytes / 3 * 4 + (1 << 20),
                    self.max_upload_bytes,
                    self.max_body_memory
                ),
            );
        }
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1".into());
        }
        for (key, d) in [
            ("header_read_timeout", self.header_read_timeout),
            ("body_read_timeout", self.body_read_timeout),
            ("ping_interval", self.ping_interval),
            ("pong_timeout", self.pong_timeout),
            ("idle_timeout", self.idle_timeout),
            ("text_wait_timeout", self.text_wait_timeout),
        ] {
            if d < Duration::from_millis(100) {
                return bad(key, format!("must be at least 0.1 s, got {d:?}"));
            }
        }
        if matches!(&self.token, Some(t) if t.is_empty()) {
            return bad(
                "token",
                "is empty; omit it to serve without authentication".into(),
            );
        }
        self.engine.validate()?;
        Ok(())
    }
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    health_addr: Option<SocketAddr>,
    wyoming_addr: Option<SocketAddr>,
    state: Arc<AppState>,
    task: tokio::task::JoinHandle<Result<(), TransportError>>,
}

impl Server {
    /// Validates `cfg`, binds, and starts serving; the model loads in the
    /// background (`/ready` answers 503 until it is up). Call inside a
    /// multi-threaded tokio runtime.
    pub async fn start(mut cfg: ServeConfig) -> Result<Server, TransportError> {
        cfg.validate()?;
        let nodelay = cfg.nodelay;
        if !nodelay {
            tracing::warn!(
                "TCP_NODELAY is not set on accepted sockets ({}=off: a measurement switch; audio may wait ~40 ms for ACKs)",
                listener::NODELAY_ENV
            );
        }
        // Before binding: a bad certificate or key fails the start.
        let tls = cfg.tls.as_ref().map(crate::tls::acceptor).transpose()?;
        let listener = tokio::net::TcpListener::bind(cfg.addr)
            .await
            .map_err(|source| TransportError::Bind {
                addr: cfg.addr,
                source,
            })?;
        let addr = listener.local_addr()?;
        let (drain, _) = watch::channel(Drain::Running);
        let (live, _) = watch::channel(0usize);
        let state = Arc::new(AppState {
            model_dir: cfg.model_dir.clone(),
            token: cfg.token.clone(),
            max_contexts: cfg.max_contexts,
            max_pending_chars: cfg.max_pending_chars,
            prebuffer_ms: cfg.engine.prebuffer_ms,
            ack_pause_s: cfg.engine.soft_unacked_audio_s,
            ack_fail_s: cfg.engine.hard_unacked_audio_s,
            loaded: OnceLock::new(),
            load_error: Mutex::new(None),
            metrics: ServerMetrics::default(),
            sessions: Arc::new(Semaphore::new(cfg.max_sessions)),
            registry: Default::default(),
            liveness: realtime::Timeouts {
                ping_every: cfg.ping_interval,
                pong_within: cfg.pong_timeout,
                idle_after: cfg.idle_timeout,
            },
            drain,
            live,
            started: Instant::now(),
            max_upload_bytes: cfg.max_upload_bytes,
            uploading: Mutex::new(Default::default()),
            bodies: crate::body_budget::BodyBudget::new(cfg.max_body_memory),
            text_wait: cfg.text_wait_timeout,
        });
        state.metrics.set_build_info(&[
            (
                "version",
                cfg.version.as_deref().unwrap_or(env!("CARGO_PKG_VERSION")),
            ),
            ("git", cfg.git_revision.as_deref().unwrap_or("unknown")),
            ("precision", &cfg.precision.name()),
            ("model", &model_id(&cfg.model_dir)),
        ]);
        let loader = spawn_loader(&mut cfg, state.clone());
        let cors = Arc::new(crate::cors::Cors::new(&cfg.cors_origins));
        let app = router(state.clone(), cfg.body_read_timeout, cors);
        let limits = listener::ConnLimits {
            header_read_timeout: cfg.header_read_timeout,
            nodelay,
        };
        let open = Arc::new(Semaphore::new(cfg.max_connections));
        let (stop, stop_rx) = watch::channel(false);
        let health_addr = match cfg.health_addr {
            Some(a) => {
                let l = tokio::net::TcpListener::bind(a)
                    .await
                    .map_err(|source| TransportError::Bind { addr: a, source })?;
                let bound = l.local_addr()?;
                tracing::info!("health probes (/health, /ready) also on http://{bound}");
                tokio::spawn(listener::probe_loop(
                    l,
                    probe_router(state.clone()),
                    stop_rx.clone(),
                ));
                Some(bound)
            }
            None => None,
        };
        let wyoming_addr = match cfg.wyoming_addr {
            Some(a) => {
                let l = tokio::net::TcpListener::bind(a)
                    .await
                    .map_err(|source| TransportError::Bind { addr: a, source })?;
                let bound = l.local_addr()?;
                tracing::info!("Wyoming TTS on tcp://{bound}");
                if cfg.token.is_some() {
                    tracing::warn!("the Wyoming port has no authentication: --token does not apply to it; bind it where only trusted clients reach it");
                }
                tokio::spawn(crate::wyoming::accept_loop(
                    l,
                    state.clone(),
                    cfg.max_connections,
                    nodelay,
                    stop_rx.clone(),
                ));
                Some(bound)
            }
            None => None,
        };
        let accept = tokio::spawn(listener::accept_loop(
            listener,
            app,
            limits,
            state.drain.subscribe(),
            open.clone(),
            tls,
            stop_rx,
        ));
        let st = state.clone();
        let drain_timeout = cfg.drain_timeout;
        let max_connections = cfg.max_connections;
        let task = tokio::spawn(async move {
            // Serve until a shutdown starts (or the model fails to load).
            let mut drain_rx = st.drain.subscribe();
            let _ = drain_rx.wait_for(|d| *d != Drain::Running).await;
            let deadline = tokio::time::Instant::now() + drain_timeout;
            // Draining: connections finish their request and close (new
            // ones are still answered, one request each, so `/ready` says
            // "draining"); sessions and streams finish, until the deadline.
            let mut live = st.live.subscribe();
            let finished = async {
                let _ = live.wait_for(|n| *n == 0).await;
                while open.available_permits() < max_connections {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            if tokio::time::timeout_at(deadline, finished).await.is_err() {
                st.drain.send_replace(Drain::Force);
                // Forced: sessions cancel and close within a frame or two.
                let mut live = st.live.subscribe();
                let _ =
                    tokio::time::timeout(Duration::from_secs(2), live.wait_for(|n| *n == 0)).await;
            }
            let _ = stop.send(true);
            let _ = accept.await;
            drop(loader);
            // Cloned, not taken: `Server::ready` must still see it (it
            // would otherwise wait forever once the server has stopped).
            if let Some(e) = st
                .load_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
            {
                return Err(TransportError::Model {
                    dir: st.model_dir.display().to_string(),
                    message: e,
                });
            }
            Ok(())
        });
        Ok(Server {
            addr,
            health_addr,
            wyoming_addr,
            state,
            task,
        })
    }

    /// Where the health listener (`health_addr`) is bound, if it was asked
    /// for.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_addr
    }

    /// Where the Wyoming listener (`wyoming_addr`) is bound, if it was
    /// asked for.
    pub fn wyoming_addr(&self) -> Option<SocketAddr> {
        self.wyoming_addr
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// Starts the drain (what SIGTERM does).
    pub fn shutdown(&self) {
        self.state.drain.send_if_modified(|d| {
            let was = *d == Drain::Running;
            if was {
                *d = Drain::Draining;
            }
            was
        });
    }

    /// Waits until the server has stopped.
    pub async fn wait(self) -> Result<(), TransportError> {
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(TransportError::Io(std::io::Error::other(e.to_string()))),
        }
    }

    /// Waits for the model (`Err` with the load error if it failed).
    pub async fn ready(&self) -> Result<(), TransportError> {
        let mut drain = self.state.drain.subscribe();
        loop {
            if self.state.loaded.get().is_some() {
                return Ok(());
            }
            if let Some(e) = self
                .state
                .load_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
            {
                return Err(TransportError::Model {
                    dir: self.state.model_dir.display().to_string(),
                    message: e,
                });
            }
            let _ = tokio::time::timeout(Duration::from_millis(20), drain.changed()).await;
        }
    }
}

fn spawn_loader(cfg: &mut ServeConfig, st: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    let gate = cfg.load_gate.take();
    let dir = cfg.model_dir.clone();
    let precision = cfg.precision;
    let mut engine_cfg = cfg.engine.clone();
    // The transport acknowledges every chunk itself (on write, or on the
    // client's audio.ack), so unacknowledged audio is what the client has
    // not taken yet.
    engine_cfg.explicit_acks = true;
    let max_frames = cfg.max_frames;
    let calibrate_frames = cfg.calibrate_frames;
    let voices_dir = cfg.voices_dir.clone();
    let max_voices = cfg.max_voices;
    let voice_map = cfg.voice_map.clone();
    tokio::spawn(async move {
        if let Some(g) = gate {
            let _ = g.await;
        }
        let t0 = Instant::now();
        let r = tokio::task::spawn_blocking(move || -> Result<Loaded, String> {
            let model = Arc::new(Qwen3Tts::load_with(&dir, precision).map_err(|e| e.to_string())?);
            let realtime = engine_cfg.realtime_load;
            let engine = Engine::start(model.clone(), engine_cfg).map_err(|e| e.to_string())?;
            if let (Some(target), true) = (realtime, calibrate_frames > 0) {
                calibrate(&engine, calibrate_frames, target);
            }
            let default_frames = model.default_options().max_frames.max(1);
            let (library, skipped_voices) = match &voices_dir {
                Some(d) if model.config.kind == ModelKind::Base => {
                    let (lib, skipped) = open_library(&model, d, max_voices)?;
                    (Some(Arc::new(lib)), skipped)
                }
                _ => (None, Vec::new()),
            };
            // The checkpoint's own dialect speakers (`spk_is_dialect`) are
            // never an OpenAI voice's target, beside the official ones.
            let dialects = model
                .config
                .talker
                .speakers
                .iter()
                .filter(|(_, s)| s.dialect.is_some())
                .map(|(n, _)| n.clone());
            let speakers = Speakers::new(model.speakers())
                .with_dialects(dialects)
                .with_overrides(&voice_map)
                .map_err(|e| e.to_string())?;
            Ok(Loaded {
                library,
                skipped_voices,
                speakers,
                languages: model.languages(),
                model_id: model_id(&dir),
                native_rate: model.code2wav.sample_rate(),
                samples_per_frame: model.code2wav.samples_per_frame(),
                max_frames: max_frames.unwrap_or(default_frames),
                engine,
                model,
            })
        })
        .await;
        match r {
            Ok(Ok(l)) => {
                tracing::info!(
                    model = %l.model_id,
                    load_s = t0.elapsed().as_secs_f64(),
                    sample_rate = l.native_rate,
                    speakers = %l.speakers.names().join(", "),
                    "model ready"
                );
                let _ = st.loaded.set(Arc::new(l));
            }
            Ok(Err(e)) => fail_load(&st, e),
            Err(e) => fail_load(&st, format!("the loader panicked: {e}")),
        }
    })
}

/// Seeds admission by real-time capacity before the server is ready, and
/// says what it found in one line. A failure is logged, not fatal: the
/// first streams then measure the capacity.
fn calibrate(engine: &Engine, frames: usize, target: f64) {
    let t0 = Instant::now();
    match engine.calibrate(frames) {
        Ok(found) => {
            let st = engine.stats();
            let took_s = t0.elapsed().as_secs_f64();
            match (found, st.one_stream_load) {
                (Some(streams), Some(one)) => tracing::info!(
                    streams,
                    one_stream_load = format_args!("{one:.2}"),
                    target,
                    took_s,
                    "real-time capacity: {streams} stream(s) stay continuous here; more are refused (429) until one ends"
                ),
                _ => tracing::info!(
                    took_s,
                    limit = st.admission_limit,
                    "real-time capacity not measured yet (the calibration was too quick to time); the first streams measure it, --max-requests admits until then"
                ),
            }
        }
        Err(e) => tracing::warn!(
            error = %e,
            "the real-time calibration failed; the first streams measure the capacity, --max-requests admits until then"
        ),
    }
}

/// Opens the voice directory, naming each corrupt voice file it skipped
/// (the others are served).
fn open_library(
    model: &Arc<Qwen3Tts>,
    dir: &std::path::Path,
    max_voices: Option<usize>,
) -> Result<(VoiceLibrary, Vec<tts_voices::SkippedVoice>), String> {
    let (lib, skipped) = VoiceLibrary::open(model.clone(), dir, max_voices)
        .map_err(|e| format!("voice library {}: {e}", dir.display()))?;
    for s in &skipped {
        tracing::warn!(path = %s.path.display(), reason = %s.reason, "skipping voice file");
    }
    tracing::info!(
        dir = %dir.display(),
        voices = lib.list().len(),
        skipped = skipped.len(),
        "voice library open"
    );
    Ok((lib, skipped))
}

fn fail_load(st: &AppState, e: String) {
    tracing::error!(error = %e, "model failed to load");
    *st.load_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
    // `send_replace`, not `send`: a load that fails before anything has
    // subscribed (the serving task, `run_blocking`) must still leave the
    // state at Draining; `send` drops the value when nobody is listening,
    // and the server would then serve 503s forever.
    st.drain.send_replace(Drain::Draining);
}

/// What `/v1/models` calls the checkpoint: its directory's name.
fn model_id(dir: &std::path::Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tts-rt".into())
}

fn router(state: Arc<AppState>, body_timeout: Duration, cors: Arc<crate::cors::Cors>) -> Router {
    let app = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/v1/realtime", get(realtime))
        .route(
            "/v1/audio/speech",
            post(openai::speech).layer(DefaultBodyLimit::disable()),
        )
        .route("/v1/models", get(openai::models))
        .route("/v1/models/{id}", get(openai::model))
        .route(
            "/v1/audio/voices",
            // Uploads count their own bytes against --max-upload-bytes
            // (answering 413 in the JSON error shape).
            get(openai::voices)
                .post(library::create)
                .layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/v1/audio/voices/{name}",
            get(library::show).delete(library::delete),
        )
        .merge(web::router())
        // ElevenLabs- and Cartesia-shaped sockets over the same sessions.
        .merge(dialects::router())
        .fallback(http_error::not_found)
        .method_not_allowed_fallback(http_error::method_not_allowed)
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                listener::timed_body(body_timeout, req, next)
            },
        ))
        .layer(axum::middleware::map_response(http_error::json_errors));
    // Outside the JSON errors, so refusals carry the CORS headers too (a
    // browser can then read why it was refused).
    let app = if cors.is_enabled() {
        app.layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                crate::cors::layer(cors.clone(), req, next)
            },
        ))
    } else {
        app
    };
    // Outermost: every answer, preflights included, has its request id.
    app.layer(axum::middleware::from_fn(access_log::layer))
        .with_state(state)
}

/// The health listener's routes: `/health` and `/ready`, nothing else.
fn probe_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .fallback(http_error::not_found)
        .with_state(state)
}

async fn health(State(st): State<Arc<AppState>>) -> Response {
    Json(serde_json::json!({
        "status": "ok",
        "uptime_s": st.started.elapsed().as_secs_f64(),
    }))
    .into_response()
}

async fn ready(State(st): State<Arc<AppState>>) -> Response {
    let draining = st.drain_state() != Drain::Running;
    match (st.loaded(), draining) {
        (Some(l), false) => Json(serde_json::json!({
            "status": "ready",
            "model": l.model_id,
            "sample_rate": l.native_rate,
        }))
        .into_response(),
        (_, true) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "draining"})),
        )
            .into_response(),
        (None, false) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "loading"})),
        )
            .into_response(),
    }
}

async fn metrics(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(r) = st.authorize(&headers) {
        return r.into_response();
    }
    let loaded = st.loaded();
    let stats = loaded.as_ref().map(|l| l.engine.stats());
    // OpenMetrics (with the request-id exemplars) when the scraper asks
    // for it, as Prometheus does; the classic text otherwise.
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    if openmetrics {
        return (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            st.metrics
                .render_openmetrics(loaded.is_some(), stats.as_ref()),
        )
            .into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        st.metrics.render(loaded.is_some(), stats.as_ref()),
    )
        .into_response()
}

async fn realtime(
    State(st): State<Arc<AppState>>,
    Query(q): Query<TokenQuery>,
    mut req: axum::extract::Request,
) -> Response {
    if let Err(r) = st.authorize_upgrade(req.headers(), q.token.as_deref()) {
        return r.into_response();
    }
    realtime::admit(st, &mut req, |st, m, socket, permit| {
        realtime::run(st, m, realtime::NativePort::new(socket), permit)
    })
    .await
}

/// Runs a server until SIGTERM or ctrl-c, then drains and returns. Builds
/// its own runtime (the CLI has none). `on_listening` gets the bound address.
pub fn run_blocking(
    cfg: ServeConfig,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), TransportError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        // Two workers: the async side only moves bytes; the engine's own
        // threads and the kernels' rayon pool do the compute.
        .worker_threads(2)
        .enable_all()
        .thread_name("tts-serve")
        .build()?;
    let r = rt.block_on(async move {
        // Registered before the address is announced: a signal sent the
        // moment the server is listening is not lost.
        let mut signals = ShutdownSignals::new();
        let server = Server::start(cfg).await?;
        on_listening(server.local_addr());
        let state = server.state().clone();
        let mut drain = state.drain.subscribe();
        tokio::select! {
            _ = signals.next() => {
                tracing::info!("shutting down: draining in-flight streams; signal again to stop now");
                server.shutdown();
            }
            // The model failed to load: the server drains by itself.
            _ = drain.wait_for(|d| *d != Drain::Running) => {}
        }
        tokio::select! {
            r = server.wait() => r,
            // A second signal during the drain: cut what is left, now.
            _ = signals.next() => {
                state.drain.send_replace(Drain::Force);
                Err(TransportError::Interrupted)
            }
        }
    });
    // Not `drop(rt)`: that waits for blocking tasks, and a model load stuck
    // on its file (a FIFO, a hung network mount) would then keep the
    // process alive after SIGTERM.
    rt.shutdown_background();
    r
}

/// SIGTERM and SIGINT, registered once for the server's whole life: a
/// second signal that arrives while the first is being handled is kept by
/// the same registration instead of falling between two of them.
struct ShutdownSignals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Self {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// The next SIGTERM or SIGINT (ctrl-c elsewhere).
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            async fn one(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                _ = one(&mut self.term) => {}
                _ = one(&mut self.int) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
