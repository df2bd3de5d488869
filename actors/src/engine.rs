//! The public face of the runtime: [`Engine`], [`Session`], [`Stream`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::{mpsc, oneshot};
use tts_models::config::ModelKind;
use tts_models::StopReason;
use tts_models::{PredictorState, Qwen3Tts, Request, TalkerState, VoiceClone};

use crate::config::EngineConfig;
use crate::contract::{AudioChunk, Generation, RequestKey, SessionId, StageKind};
use crate::error::{EngineError, ErrorKind, Result};
use crate::flow::FlowGate;
use crate::flow::LiveFeed;
use crate::metrics::{ChunkLog, EngineSide, MetricsInput, Outcome, RequestMetrics};
use crate::router::{
    Cancel, CancelAck, Probe, ProbeBlocking, Router, Shutdown, Submit, Unprobe, Wire,
};
use crate::shared::{Shared, Teams};

/// What a [`Stream`] yields. Exactly one terminal event (`Done`,
/// `Cancelled` or `Error`) ends every stream.
#[derive(Clone, Debug)]
pub enum Event {
    Started {
        request: RequestKey,
        sample_rate: u32,
        samples_per_frame: usize,
        generations: [Generation; 3],
    },
    Audio(AudioChunk),
    Done {
        request: RequestKey,
        stop: StopReason,
        metrics: Box<RequestMetrics>,
    },
    Cancelled {
        request: RequestKey,
        metrics: Box<RequestMetrics>,
    },
    Error {
        request: RequestKey,
        kind: ErrorKind,
        error: EngineError,
        metrics: Box<RequestMetrics>,
    },
}

impl Event {
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Event::Done { .. } | Event::Cancelled { .. } | Event::Error { .. }
        )
    }
}

/// A snapshot of the engine's counters.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EngineStats {
    /// Worker generation per stage (talker, code predictor, code2wav).
    pub generations: [Generation; 3],
    pub restarts: [u64; 3],
    /// Requests holding state in each stage.
    pub held_states: [usize; 3],
    /// Model calls per stage; a batched call (several requests stepped in
    /// one forward) counts once.
    pub steps: [u64; 3],
    /// Inputs served by those calls (the sum of their batch sizes):
    /// `batched_inputs / steps` is the mean batch size.
    pub batched_inputs: [u64; 3],
    /// Largest batch one call served.
    pub max_batch: [usize; 3],
    /// Times each stage woke to look at its work, with or without a step
    /// to run; constant while nothing is to be done (no polling).
    pub wakeups: [u64; 3],
    /// Inputs each stage held back for a stream closer to underrun
    /// (`crate::slack`), counted each round one was put aside.
    pub held_for_slack: [u64; 3],
    /// Data messages dropped because their request was no longer live.
    pub stale_epoch_dropped: u64,
    /// Data messages dropped because their sender's generation was retired.
    pub stale_generation_dropped: u64,
    /// Bytes reserved in the admission ledger.
    pub reserved_bytes: u64,
    pub active_requests: usize,
    /// Admitted requests whose first audio chunk has not been sent yet
    /// (while any waits, code2wav does not lend a core: `lend_core`).
    pub awaiting_first_packet: usize,
    /// code2wav's steps so far held and lent (`[held, lent]`,
    /// [`crate::capacity::Placement`]): where the lending policy put them.
    pub placement_steps: [u64; 2],
    /// Housekeeping ticks the router has run: they stop while the engine
    /// is idle (no request held, no stage in a step).
    pub router_ticks: u64,
    /// The talker's shared prompt prefixes (`tts_models::PrefixCache`):
    /// prefills that reused one, prefills that could not, and what is held.
    pub prefix_cache_hits: u64,
    pub prefix_cache_misses: u64,
    pub prefix_cache_entries: usize,
    pub prefix_cache_bytes: usize,
    /// Real-time streams this process keeps continuous, as measured
    /// ([`crate::capacity`]); `None` until anything was measured.
    pub capacity_streams: Option<usize>,
    /// Requests admission lets compute at once now: the measured capacity
    /// when admission is by real-time capacity and it is known, else the
    /// fixed `max_active_requests`.
    pub admission_limit: usize,
    /// Requests computing (admitted, less live ones parked waiting for
    /// text), as the router last counted them.
    pub computing: usize,
    /// `computing / admission_limit`: 0..1 while admission holds (above 1
    /// only when the measured capacity fell under streams already
    /// admitted). What an autoscaler should scale on (`tts_load`).
    pub load: f64,
    /// Offline requests (whole files) waiting in line for real-time
    /// capacity.
    pub offline_waiting: usize,
    /// The stream counts the capacity has measured figures for (the rest
    /// are interpolated or held).
    pub measured_streams: Vec<usize>,
    /// Share of the cores' time one real-time stream needs; `None` while
    /// unmeasured.
    pub one_stream_load: Option<f64>,
}

impl EngineStats {
    pub fn generation(&self, k: StageKind) -> Generation {
        self.generations[k.index()]
    }
}

pub(crate) struct Inner {
    pub(crate) model: Arc<Qwen3Tts>,
    config: EngineConfig,
    shared: Arc<Shared>,
    router: Addr<Router>,
    next_session: AtomicU64,
}

/// Longest one round of [`Engine::calibrate`] runs.
pub const CALIBRATION_ROUND: std::time::Duration = std::time::Duration::from_secs(4);

/// The streaming runtime: a router plus one supervised actor per stage,
/// each on its own thread. Cheap to share (`Clone`).
pub struct Engine {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Validates `config` and starts the actors.
    pub fn start(model: Arc<Qwen3Tts>, config: EngineConfig) -> Result<Engine> {
        config.validate()?;
        let mut shared = Shared::new(
            #[cfg(feature = "fault-injection")]
            config.fault.clone(),
        );
        if tts_kernels::teams_enabled() {
            let sizes = match config.stage_threads {
                Some(t) => vec![t.lm, t.vocoder],
                None => vec![rayon::current_num_threads().max(1)],
            };
            shared.teams = Some(Teams::start(sizes).map_err(|e| {
                EngineError::Internal(format!("cannot start the kernel threads: {e}"))
            })?);
        } else if let Some(t) = config.stage_threads {
            let pool = |n: usize, name: &'static str| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .thread_name(move |i| format!("tts-{name}-{i}"))
                    .build()
                    .map(Arc::new)
                    .map_err(|e| {
                        EngineError::Internal(format!("cannot start the {name} thread pool: {e}"))
                    })
            };
            shared.pools = Some([pool(t.lm, "lm")?, pool(t.vocoder, "vocoder")?]);
        }
        shared.lend = config.lend_policy();
        shared.team_hold = config.team_hold;
        shared.slack_order = config.slack_order;
        shared.capacity = std::sync::Mutex::new(
            crate::capacity::CapacityModel::new(
                shared.groups(),
                model.code2wav.sample_rate() as f64 / model.code2wav.samples_per_frame() as f64,
                config.realtime_load.unwrap_or(1.0),
                config.max_active_requests,
            )
            .with_lending(config.lend_policy()),
        );
        let shared = Arc::new(shared);
        let dir = Arc::new(RwLock::new(None));
        let (tx, rx) = std::sync::mpsc::channel();
        let (m, c, s) = (model.clone(), config.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("tts-engine".into())
            .spawn(move || {
                let sys = System::new();
                sys.block_on(async move {
                    let _ = tx.send(Router::launch(m, c, s, dir));
                });
                let _ = sys.run();
            })
            .map_err(|e| EngineError::Internal(format!("cannot start the engine thread: {e}")))?;
        let router = rx
            .recv()
            .map_err(|_| EngineError::Internal("the engine thread died while starting".into()))?;
        Ok(Engine {
            inner: Arc::new(Inner {
                model,
                config,
                shared,
                router,
                next_session: AtomicU64::new(1),
            }),
            thread: Some(thread),
        })
    }

    pub fn model(&self) -> &Arc<Qwen3Tts> {
        &self.inner.model
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// Bytes the admission ledger reserves for `req` (builds its prompt).
    pub fn request_cost(&self, req: &Request) -> Result<u64> {
        let prompt = self.inner.model.build_prompt(req)?;
        Ok(crate::admission::request_cost(
            &self.inner.model,
            &self.inner.config,
            prompt.prefill_rows(),
            req.options.max_frames,
        ))
    }

    /// Seeds the real-time capacity ([`crate::capacity`]) before serving:
    /// rounds of 1, 2 and 4 synthetic requests at once (up to the fixed
    /// bound and the batch size), whose figures the router learns from as
    /// from any request. A round ends as soon as its concurrency is
    /// measured, when its requests reach `max_frames` frames (whatever the
    /// model samples), or after [`CALIBRATION_ROUND`]. Returns the capacity
    /// found: `None` when nothing could be measured (then the first real
    /// streams measure it, and the fixed bound admits until they have).
    ///
    /// Blocks the calling thread for the rounds (a few seconds at full
    /// size): call it from a blocking context.
    pub fn calibrate(&self, max_frames: usize) -> Result<Option<usize>> {
        let model = &self.inner.model;
        let mut req = Request {
            text: "The quick brown fox jumps over the lazy dog, again and again.".into(),
            speaker: None,
            language: "auto".into(),
            instruct: None,
            voice_clone: None,
            text_streaming: false,
            options: model.default_options(),
        };
        match model.config.kind {
            ModelKind::CustomVoice => req.speaker = model.speakers().into_iter().next(),
            ModelKind::VoiceDesign => req.instruct = Some("A calm, clear voice.".into()),
            ModelKind::Base => {
                req.voice_clone = Some(Arc::new(VoiceClone {
                    x_vector: vec![0.0; model.config.talker.lm.hidden_size],
                    reference: None,
                }))
            }
        }
        req.options.max_frames = max_frames.max(1);
        req.options.ignore_eos = true;
        let most = self
            .inner
            .config
            .max_active_requests
            .min(self.inner.config.max_batch)
            .min(4);
        let shared = &self.inner.shared;
        shared.calibrating.store(true, Ordering::Release);
        let rounds = (0..)
            .map(|i| 1usize << i)
            .take_while(|&n| n <= most)
            .try_for_each(|n| self.calibration_round(&req, n));
        shared.calibrating.store(false, Ordering::Release);
        rounds?;
        Ok(shared.capacity().streams())
    }

    /// `n` requests at once until their concurrency is measured (or they
    /// end, or the round's time is up); then they are cancelled.
    fn calibration_round(&self, req: &Request, n: usize) -> Result<()> {
        let mut runs = Vec::with_capacity(n);
        for i in 0..n {
            let mut req = req.clone();
            req.options.seed = i as u64;
            let session = self.open_session();
            let stream = session.synthesize_blocking(req)?;
            runs.push((session, stream));
        }
        std::thread::scope(|scope| {
            let runs: Vec<_> = runs
                .into_iter()
                .map(|(session, mut stream)| {
                    let key = stream.request();
                    let drain = scope.spawn(move || -> Result<()> {
                        while let Some(ev) = stream.next_blocking() {
                            match ev {
                                // Taken as it comes (with explicit acks the
                                // flow gate would pause it at 4 s of audio,
                                // before it is timed).
                                Event::Audio(chunk) => stream.ack(chunk.seq),
                                Event::Error { error, .. } => return Err(error),
                                _ => {}
                            }
                        }
                        Ok(())
                    });
                    (session, key, drain)
                })
                .collect();
            let t0 = Instant::now();
            // Placement by measurement times each batch size twice.
            let round = match self.inner.shared.lend {
                crate::capacity::LendPolicy::Measured => 2 * CALIBRATION_ROUND,
                _ => CALIBRATION_ROUND,
            };
            while !self.inner.shared.capacity().measured(n)
                && !runs.iter().all(|(_, _, d)| d.is_finished())
                && t0.elapsed() < round
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            for (session, key, _) in &runs {
                let _ = session.cancel(*key).wait();
            }
            runs.into_iter().try_for_each(|(_, _, drain)| {
                drain.join().unwrap_or_else(|_| {
                    Err(EngineError::Internal("a calibration run panicked".into()))
                })
            })
        })
    }

    pub fn open_session(&self) -> Session {
        Session {
            id: self.inner.next_session.fetch_add(1, Ordering::Relaxed),
            inner: self.inner.clone(),
            prebuffer: None,
        }
    }

    pub fn stats(&self) -> EngineStats {
        let s = &self.inner.shared;
        let prefix = self.inner.model.prefix_cache.stats();
        let (capacity_streams, one_stream_load, measured_streams) = {
            let cap = s.capacity();
            (cap.streams(), cap.utilization(1), cap.measured_streams())
        };
        let computing = s.computing.load(Ordering::Relaxed);
        let config = &self.inner.config;
        let admission_limit = match (config.realtime_load, capacity_streams) {
            (Some(_), Some(c)) => c.min(config.max_active_requests),
            _ => config.max_active_requests,
        }
        .max(1);
        EngineStats {
            generations: StageKind::ALL.map(|k| s.health(k).generation.load(Ordering::Acquire)),
            restarts: StageKind::ALL.map(|k| s.health(k).restarts.load(Ordering::Acquire)),
            held_states: StageKind::ALL.map(|k| s.health(k).held.load(Ordering::Acquire)),
            steps: StageKind::ALL.map(|k| s.health(k).steps.load(Ordering::Acquire)),
            batched_inputs: StageKind::ALL
                .map(|k| s.health(k).batched_inputs.load(Ordering::Acquire)),
            max_batch: StageKind::ALL.map(|k| s.health(k).max_batch.load(Ordering::Acquire)),
            wakeups: StageKind::ALL.map(|k| s.health(k).wakeups.load(Ordering::Acquire)),
            held_for_slack: StageKind::ALL
                .map(|k| s.health(k).held_for_slack.load(Ordering::Acquire)),
            stale_epoch_dropped: s.stale_epoch.load(Ordering::Acquire),
            stale_generation_dropped: s.stale_generation.load(Ordering::Acquire),
            reserved_bytes: s.reserved_bytes.load(Ordering::Acquire),
            active_requests: s.active_requests.load(Ordering::Acquire),
            awaiting_first_packet: s.awaiting_first_packet.load(Ordering::Acquire),
            placement_steps: s.placement_steps(),
            router_ticks: s.router_ticks.load(Ordering::Acquire),
            prefix_cache_hits: prefix.hits,
            prefix_cache_misses: prefix.misses,
            prefix_cache_entries: prefix.entries,
            prefix_cache_bytes: prefix.bytes,
            capacity_streams,
            admission_limit,
            computing,
            load: computing as f64 / admission_limit as f64,
            offline_waiting: s.offline_waiting.load(Ordering::Relaxed),
            measured_streams,
            one_stream_load,
        }
    }

    /// Fails every request in flight with `ShuttingDown`, returns every
    /// reservation and stops the threads. Returns the final counters.
    pub fn shutdown(mut self) -> EngineStats {
        self.stop();
        self.stats()
    }

    fn stop(&mut self) {
        if let Some(t) = self.thread.take() {
            // Control message on a bounded mailbox: retry until accepted or
            // the system is gone.
            let mut msg = Shutdown;
            loop {
                match self.inner.router.try_send(msg) {
                    Ok(()) => break,
                    Err(actix::dev::SendError::Full(m)) => {
                        msg = m;
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    Err(actix::dev::SendError::Closed(_)) => break,
                }
            }
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One client conversation: at most one request in progress at a time.
#[derive(Clone)]
pub struct Session {
    pub(crate) id: SessionId,
    pub(crate) inner: Arc<Inner>,
    /// The prebuffer this session's listener declared
    /// ([`Session::with_prebuffer`]); `None`: the engine's.
    prebuffer: Option<Duration>,
}

/// A message the router's mailbox did not take: full is a refusal, closed
/// a shutdown.
fn router_send_error<M>(e: &actix::dev::SendError<M>) -> EngineError {
    match e {
        actix::dev::SendError::Full(_) => EngineError::AtCapacity {
            resource: "router mailbox slots",
            needed: 1,
            in_use: 0,
            limit: 0,
        },
        actix::dev::SendError::Closed(_) => EngineError::ShuttingDown,
    }
}

/// A passed probe's place, given back ([`Unprobe`]) if the request it was
/// for is never submitted; forgotten once the submit is on its way.
struct ProbeHold<'a> {
    router: &'a Addr<Router>,
    session: SessionId,
}

impl ProbeHold<'_> {
    /// The submit takes the place over (the router releases it there).
    fn submitted(self) {
        std::mem::forget(self);
    }
}

impl Drop for ProbeHold<'_> {
    fn drop(&mut self) {
        self.router.do_send(Unprobe {
            session: self.session,
        });
    }
}

impl Session {
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The same session, for requests whose listener holds `prebuffer` of
    /// audio before it starts to play (a client's jitter buffer) instead of
    /// the engine's `prebuffer_ms`: their continuity figures
    /// (`underruns_at_prebuffer`, `continuity_ok_at_prebuffer`) are counted
    /// at it, their chunks leave early for it where the engine paces
    /// chunks (`stage::pace`), and the stages' scheduler models their
    /// player as holding it before it plays (`FlowGate::
    /// with_listener_prebuffer`; without playback acks). Admission is
    /// unchanged: a stream is admitted only while every stream keeps up in
    /// real time, whatever it buffers.
    pub fn with_prebuffer(&self, prebuffer: Duration) -> Session {
        Session {
            prebuffer: Some(prebuffer.min(crate::config::MAX_PREBUFFER)),
            ..self.clone()
        }
    }

    /// The prebuffer this session's requests are paced and measured at.
    pub fn prebuffer(&self) -> Duration {
        self.prebuffer
            .unwrap_or_else(|| self.inner.config.prebuffer())
    }

    /// Builds the request's prompt on the caller's thread (validation,
    /// tokenization, text projection), then asks the engine to admit it.
    fn prepare(
        &self,
        req: &Request,
    ) -> Result<(Submit, oneshot::Receiver<Result<RequestKey>>, Stream)> {
        let t_req = Instant::now();
        let (talker, predictor) = self.inner.model.sessions(req)?;
        Ok(self.prepare_states(talker, predictor, req.options.max_frames, t_req, None))
    }

    /// The submit and stream of a request whose stage states are built;
    /// its metrics are timed from `t_req`. `live`: the request's text is
    /// still arriving through this feed.
    pub(crate) fn prepare_states(
        &self,
        talker: TalkerState,
        predictor: PredictorState,
        max_frames: usize,
        t_req: Instant,
        live: Option<Arc<LiveFeed>>,
    ) -> (Submit, oneshot::Receiver<Result<RequestKey>>, Stream) {
        let model = &self.inner.model;
        let cfg = &self.inner.config;
        let sr = model.code2wav.sample_rate();
        let gate = FlowGate::new((cfg.soft_unacked_audio_s * sr as f64).ceil() as u64, sr);
        // A listener that declared its prebuffer is modelled as holding it
        // (its slack, crate::slack); one that did not, as playing from the
        // first chunk.
        let gate = Arc::new(match self.prebuffer {
            Some(p) => gate.with_listener_prebuffer(p),
            None => gate,
        });
        let (tx, rx) = mpsc::channel(cfg.stream_capacity);
        let (reply, reply_rx) = oneshot::channel();
        let submit = Submit {
            session: self.id,
            talker,
            predictor,
            max_frames,
            tx,
            gate: gate.clone(),
            reply,
            live,
            offline: false,
            prebuffer: self.prebuffer,
        };
        let stream = Stream {
            key: RequestKey {
                session: self.id,
                epoch: 0,
            },
            rx,
            gate,
            explicit_acks: cfg.explicit_acks,
            log: ChunkLog::starting_at(t_req),
            sample_rate: sr,
            samples_per_frame: model.code2wav.samples_per_frame(),
            prebuffer_ms: self.prebuffer().as_secs_f64() * 1e3,
            ended: false,
            router: self.inner.router.clone(),
        };
        (submit, reply_rx, stream)
    }

    /// Starts a request; its events arrive on the returned [`Stream`].
    /// Errors here are refusals (invalid request, at capacity, busy).
    pub async fn synthesize(&self, req: Request) -> Result<Stream> {
        // A full engine refuses before the request is built.
        self.inner
            .router
            .send(Probe { session: self.id })
            .await
            .map_err(|_| EngineError::ShuttingDown)??;
        // The probe holds a place until the submit; building can fail, and
        // the caller can go away meanwhile: then the hold gives it back.
        let hold = ProbeHold {
            router: &self.inner.router,
            session: self.id,
        };
        self.prime(&req).await;
        let (submit, reply, stream) = self.prepare(&req)?;
        hold.submitted();
        self.submit(submit, reply, stream).await
    }

    /// [`Self::synthesize`] for offline work (a body sent whole, a file):
    /// with admission by real-time capacity, a request the capacity
    /// refuses waits in line until a stream ends (in arrival order, at
    /// most [`crate::router::OFFLINE_WAIT`]) instead of being refused, so
    /// it never takes a realtime stream's place. The wait is part of this
    /// call; the stream's metrics count it (`t_req` is the call).
    pub async fn synthesize_offline(&self, req: Request) -> Result<Stream> {
        self.prime(&req).await;
        let (mut submit, reply, stream) = self.prepare(&req)?;
        submit.offline = true;
        self.submit(submit, reply, stream).await
    }

    /// An ICL clone whose decoder is not primed yet (a new inline clip, or
    /// a stored voice's first request since start) decodes its reference
    /// first: seconds of CPU at full size, so on a blocking thread, never
    /// on the async workers that carry other sessions. A failure shows
    /// again, with its cause, in `prepare`.
    async fn prime(&self, req: &Request) {
        if let Some(voice) = req.voice_clone.clone() {
            let model = self.inner.model.clone();
            if !model.is_primed(&voice) {
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    let _ = rt.spawn_blocking(move || model.prime_decoder(&voice)).await;
                }
            }
        }
    }

    /// Sends a prepared request to the router and waits for its admission.
    pub(crate) async fn submit(
        &self,
        submit: Submit,
        reply: oneshot::Receiver<Result<RequestKey>>,
        mut stream: Stream,
    ) -> Result<Stream> {
        self.inner
            .router
            .send(submit)
            .await
            .map_err(|_| EngineError::ShuttingDown)?;
        stream.key = reply.await.map_err(|_| EngineError::ShuttingDown)??;
        Ok(stream)
    }

    /// [`Self::synthesize`] for callers outside an async runtime.
    pub fn synthesize_blocking(&self, req: Request) -> Result<Stream> {
        // As `synthesize`: a full engine refuses before the request is built.
        let (tx, rx) = oneshot::channel();
        self.inner
            .router
            .try_send(ProbeBlocking {
                session: self.id,
                reply: tx,
            })
            .map_err(|e| router_send_error(&e))?;
        rx.blocking_recv()
            .map_err(|_| EngineError::ShuttingDown)??;
        let hold = ProbeHold {
            router: &self.inner.router,
            session: self.id,
        };
        let (submit, reply, stream) = self.prepare(&req)?;
        hold.submitted();
        self.submit_blocking(submit, reply, stream)
    }

    /// [`Self::submit`] for callers outside an async runtime.
    pub(crate) fn submit_blocking(
        &self,
        submit: Submit,
        reply: oneshot::Receiver<Result<RequestKey>>,
        mut stream: Stream,
    ) -> Result<Stream> {
        self.inner
            .router
            .try_send(submit)
            .map_err(|e| router_send_error(&e))?;
        stream.key = reply
            .blocking_recv()
            .map_err(|_| EngineError::ShuttingDown)??;
        Ok(stream)
    }

    /// Cancels `request`; the handle resolves once every stage dropped it.
    pub fn cancel(&self, request: RequestKey) -> CancelHandle {
        cancel(&self.inner.router, request)
    }
}

fn cancel(router: &Addr<Router>, key: RequestKey) -> CancelHandle {
    let (reply, rx) = oneshot::channel();
    let sent = router.try_send(Cancel { key, reply });
    CancelHandle {
        rx: sent.is_ok().then_some(rx),
        key,
    }
}

/// A pending cancel acknowledgement.
pub struct CancelHandle {
    rx: Option<oneshot::Receiver<CancelAck>>,
    key: RequestKey,
}

impl CancelHandle {
    fn closed(&self) -> EngineError {
        let _ = self.key;
        EngineError::ShuttingDown
    }

    pub async fn ack(self) -> Result<CancelAck> {
        let err = self.closed();
        match self.rx {
            Some(rx) => rx.await.map_err(|_| err),
            None => Err(err),
        }
    }

    pub fn wait(self) -> Result<CancelAck> {
        let err = self.closed();
        match self.rx {
            Some(rx) => rx.blocking_recv().map_err(|_| err),
            None => Err(err),
        }
    }
}

/// The events of one request, over a bounded channel. Dropping the stream
/// cancels the request.
pub struct Stream {
    key: RequestKey,
    rx: mpsc::Receiver<Wire>,
    gate: Arc<FlowGate>,
    explicit_acks: bool,
    /// The chunks received, timed from `t_req` (when `synthesize` was
    /// called), for the request's METRICS.md figures.
    log: ChunkLog,
    sample_rate: u32,
    samples_per_frame: usize,
    prebuffer_ms: f64,
    ended: bool,
    router: Addr<Router>,
}

impl Stream {
    pub fn request(&self) -> RequestKey {
        self.key
    }

    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// Acknowledges every chunk up to and including `seq` (explicit-ack
    /// mode; in auto mode receiving a chunk acknowledges it).
    pub fn ack(&self, seq: u64) {
        self.gate.ack(seq);
    }

    /// The consumer acknowledges what its listener played (not what it
    /// received): the engine then schedules this stream by the acks'
    /// buffer instead of a wall-time estimate (`crate::slack`).
    pub fn acks_report_playback(&self) {
        self.gate.acks_report_playback();
    }

    /// Samples delivered or held for this request and not yet acknowledged.
    pub fn unacked_samples(&self) -> u64 {
        self.gate.outstanding()
    }

    pub fn cancel(&self) -> CancelHandle {
        cancel(&self.router, self.key)
    }

    pub async fn next(&mut self) -> Option<Event> {
        if self.ended {
            return None;
        }
        let w = self.rx.recv().await;
        Some(self.convert(w))
    }

    /// [`Self::next`] for callers outside an async runtime.
    pub fn next_blocking(&mut self) -> Option<Event> {
        if self.ended {
            return None;
        }
        let w = self.rx.blocking_recv();
        Some(self.convert(w))
    }

    fn since_req_ms(&self, t: Instant) -> f64 {
        self.log.ms_since_start(t).unwrap_or(0.0)
    }

    fn metrics(
        &self,
        outcome: Outcome,
        engine: EngineSide,
        cancel: Option<(f64, u64)>,
    ) -> Box<RequestMetrics> {
        Box::new(RequestMetrics::compute(&MetricsInput {
            chunk_ms: self.log.chunk_ms(),
            chunk_samples: self.log.chunk_samples(),
            terminal_ms: self.since_req_ms(Instant::now()),
            sample_rate: self.sample_rate,
            samples_per_frame: self.samples_per_frame,
            outcome,
            finite: self.log.finite(),
            prebuffer_ms: self.prebuffer_ms,
            engine,
            cancel_ack_ms: cancel.map(|c| c.0),
            late_audio_samples: cancel.map(|c| c.1),
        }))
    }

    fn convert(&mut self, w: Option<Wire>) -> Event {
        let request = self.key;
        let Some(w) = w else {
            self.ended = true;
            let error = EngineError::ShuttingDown;
            return Event::Error {
                request,
                kind: error.kind(),
                metrics: self.metrics(Outcome::Error, EngineSide::default(), None),
                error,
            };
        };
        match w {
            Wire::Started { generations } => Event::Started {
                request,
                sample_rate: self.sample_rate,
                samples_per_frame: self.samples_per_frame,
                generations,
            },
            Wire::Audio(chunk) => {
                self.log.record(Instant::now(), &chunk.samples);
                if !self.explicit_acks {
                    self.gate.ack(chunk.seq);
                }
                Event::Audio(chunk)
            }
            Wire::Finished {
                frames,
                stop,
                times,
                first_frame_at,
                last_frame_at,
            } => {
                self.ended = true;
                let engine = EngineSide {
                    frames: Some(frames),
                    times: Some(times),
                    first_frame_ms: first_frame_at.map(|t| self.since_req_ms(t)),
                    last_frame_ms: last_frame_at.map(|t| self.since_req_ms(t)),
                };
                Event::Done {
                    request,
                    stop,
                    metrics: self.metrics(Outcome::Done, engine, None),
                }
            }
            Wire::Cancelled {
                cancel_ack_ms,
                late_audio_samples,
            } => {
                self.ended = true;
                Event::Cancelled {
                    request,
                    metrics: self.metrics(
                        Outcome::Cancelled,
                        EngineSide::default(),
                        Some((cancel_ack_ms, late_audio_samples)),
                    ),
                }
            }
            Wire::Failed(error) => {
                self.ended = true;
                Event::Error {
                    request,
                    kind: error.kind(),
                    metrics: self.metrics(Outcome::Error, EngineSide::default(), None),
                    error,
                }
            }
        }
    }
}
