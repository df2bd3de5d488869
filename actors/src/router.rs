//! The router: sessions, request lifecycle, admission, delivery to
//! consumers, cancellation, the watchdog and stage replacement.
//!
//! It runs on the engine's system thread and never blocks on a consumer:
//! events go to each request's bounded channel with `try_send`; what does
//! not fit waits in a per-request queue that the periodic tick flushes, and
//! counts as unacknowledged audio (which pauses that request's talker, and
//! past the hard bound fails it).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::{mpsc, oneshot};
use tts_models::Qwen3Tts;
use tts_models::{PredictorState, StopReason, TalkerState};

use crate::admission::{request_cost, Admission, Lifecycle, ProbeHolds};
use crate::capacity::{LendPolicy, Placement, Sampler};
use crate::config::EngineConfig;
use crate::contract::*;
use crate::error::EngineError;
use crate::flow::FlowGate;
use crate::flow::LiveFeed;
use crate::shared::Shared;
use crate::slack::Listener;
use crate::stage::actor::spawn_stage;
use crate::stage::code2wav::Code2WavStage;
use crate::stage::predictor::PredictorStage;
use crate::stage::talker::TalkerStage;
use crate::stage::wiring::{with_wiring, Directory, Wiring};

/// What the router sends down a request's channel (the [`crate::Stream`]
/// turns it into public events and metrics).
pub(crate) enum Wire {
    Started {
        generations: [Generation; 3],
    },
    Audio(AudioChunk),
    Finished {
        frames: u64,
        stop: StopReason,
        times: StageTimes,
        first_frame_at: Option<Instant>,
        last_frame_at: Option<Instant>,
    },
    Cancelled {
        cancel_ack_ms: f64,
        late_audio_samples: u64,
    },
    Failed(EngineError),
}

/// Client → router: admit and start a request.
pub(crate) struct Submit {
    pub session: SessionId,
    pub talker: TalkerState,
    pub predictor: PredictorState,
    pub max_frames: usize,
    pub tx: mpsc::Sender<Wire>,
    pub gate: Arc<FlowGate>,
    pub reply: oneshot::Sender<Result<RequestKey, EngineError>>,
    /// Live text: where the rest of the request's text arrives.
    pub live: Option<Arc<LiveFeed>>,
    /// Offline work (a body sent whole, a file): refused by real-time
    /// capacity it waits in line instead ([`OFFLINE_WAIT`] at most).
    pub offline: bool,
    /// The prebuffer its listener declared ([`crate::Session::with_prebuffer`]);
    /// `None`: the engine's (`EngineConfig::prebuffer_ms`).
    pub prebuffer: Option<Duration>,
}

/// Longest an offline request waits in line for real-time capacity
/// before it is refused as at capacity.
pub const OFFLINE_WAIT: Duration = Duration::from_secs(60);

/// Offline requests waiting in line at once, at most (more are refused).
const OFFLINE_LINE: usize = 64;

impl Message for Submit {
    type Result = ();
}

/// Acknowledgement of a cancel: sent once every stage dropped the request.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct CancelAck {
    pub request: RequestKey,
    /// False when the request had already ended (nothing to cancel).
    pub was_active: bool,
    /// Cancel received → acknowledgement sent (router side).
    pub cancel_ack_ms: f64,
    /// Audio of the request delivered after the acknowledgement (must be 0).
    pub late_audio_samples: u64,
}

pub(crate) struct Cancel {
    pub key: RequestKey,
    pub reply: oneshot::Sender<CancelAck>,
}

impl Message for Cancel {
    type Result = ();
}

pub(crate) struct Shutdown;

impl Message for Shutdown {
    type Result = ();
}

struct ActiveReq {
    tx: mpsc::Sender<Wire>,
    held: VecDeque<Wire>,
    next_seq: u64,
    gate: Arc<FlowGate>,
    reserved: u64,
    state: Lifecycle,
    paused_since: Option<Instant>,
    /// Counted in `Shared::awaiting_first_packet` until its first chunk.
    awaiting_first: bool,
    /// Live text: the feed its text arrives through. While the talker has
    /// the request parked waiting for that text, it does not count against
    /// `max_active_requests` (see [`Router::computing`]).
    live: Option<Arc<LiveFeed>>,
}

pub struct Router {
    model: Arc<Qwen3Tts>,
    config: EngineConfig,
    shared: Arc<Shared>,
    dir: Directory,
    arbiters: Vec<Option<Arbiter>>,
    sessions: HashMap<SessionId, RequestKey>,
    active: HashMap<RequestKey, ActiveReq>,
    next_epoch: u64,
    shutting_down: bool,
    sample_rate: u32,
    /// The next housekeeping tick and when it is due, while one is
    /// scheduled: every `tick` while something needs watching closely, less
    /// often while requests only wait, none while the engine is idle
    /// (`Router::schedule_tick`).
    ticking: Option<(SpawnHandle, Instant)>,
    /// Windows of steady concurrency → cost samples for the capacity model.
    sampler: Sampler,
    /// The real-time capacity last logged (a change is logged once).
    logged_streams: Option<usize>,
    /// Offline requests refused by real-time capacity, waiting in line (in
    /// arrival order) with when they came.
    waiting: VecDeque<(Submit, Instant)>,
    /// Places held by passed probes until their submits.
    probes: ProbeHolds,
}

/// Points the directory's entries for a replaced stage's messages at its
/// replacement.
fn rewire(dir: &Directory, f: impl FnOnce(&mut Wiring)) {
    f(dir
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .expect("directory"))
}

impl Router {
    /// Starts the router on the current (system) arbiter and each stage on
    /// its own arbiter thread.
    pub(crate) fn launch(
        model: Arc<Qwen3Tts>,
        config: EngineConfig,
        shared: Arc<Shared>,
        dir: Directory,
    ) -> Addr<Router> {
        Router::create(move |ctx| {
            let router = ctx.address();
            let (ta, talker) = spawn_stage(
                TalkerStage::new(model.clone(), config.max_batch),
                &shared,
                &dir,
                &config,
            );
            let (pa, predictor) = spawn_stage(
                PredictorStage::new(model.clone(), config.max_batch),
                &shared,
                &dir,
                &config,
            );
            let (ca, code2wav) = spawn_stage(
                Code2WavStage::new(
                    model.clone(),
                    config.chunks.clone(),
                    config.paced_prebuffer(),
                    config.max_batch,
                ),
                &shared,
                &dir,
                &config,
            );
            *dir.write().unwrap_or_else(|e| e.into_inner()) = Some(Wiring {
                start: talker.clone().recipient(),
                feedback: talker.clone().recipient(),
                token: predictor.clone().recipient(),
                frame: code2wav.clone().recipient(),
                audio: router.clone().recipient(),
                failed: router.recipient(),
                drop: [
                    talker.recipient(),
                    predictor.recipient(),
                    code2wav.recipient(),
                ],
            });
            Router {
                sample_rate: model.code2wav.sample_rate(),
                model,
                config,
                shared,
                dir,
                arbiters: vec![Some(ta), Some(pa), Some(ca)],
                sessions: HashMap::new(),
                active: HashMap::new(),
                next_epoch: 1,
                shutting_down: false,
                ticking: None,
                sampler: Sampler::default(),
                logged_streams: None,
                waiting: VecDeque::new(),
                probes: ProbeHolds::default(),
            }
        })
    }

    /// Makes the next housekeeping tick come within `tick`. Called by every
    /// handler that may leave something to watch; after each tick the
    /// router picks the next one's delay itself (`Router::next_tick`).
    fn ensure_ticking(&mut self, ctx: &mut Context<Self>) {
        self.schedule_tick(self.config.tick, ctx);
    }

    /// Schedules the next tick `after` from now, unless one is due sooner.
    fn schedule_tick(&mut self, after: Duration, ctx: &mut Context<Self>) {
        let due = Instant::now() + after;
        if let Some((handle, at)) = self.ticking {
            if at <= due {
                return;
            }
            ctx.cancel_future(handle);
        }
        let handle = ctx.run_later(after, |act, ctx| {
            act.ticking = None;
            act.tick(ctx);
            if let Some(next) = act.next_tick() {
                act.schedule_tick(next, ctx);
            }
        });
        self.ticking = Some((handle, due));
    }

    /// The delay to the tick after this one: `tick` while a stage is in a
    /// step (the watchdog), events wait for room in a consumer's channel, a
    /// consumer is behind, or a request is winding down; the slower
    /// `idle_tick` while requests are held but only wait (a live request
    /// waiting for text: nothing moves until a message comes, and every
    /// message the router gets brings the fast tick back); none at all when
    /// no request is held.
    fn next_tick(&self) -> Option<Duration> {
        if self.idle() {
            return None;
        }
        let watch = self.stage_busy()
            || self
                .active
                .values()
                .any(|a| !a.held.is_empty() || !a.state.is_running() || a.gate.should_pause());
        Some(if watch {
            self.config.tick
        } else {
            self.config.idle_tick()
        })
    }

    /// No request held and no stage in a step: nothing for the tick to
    /// watch, flush or forget. (A step that outlives its request keeps the
    /// tick going, so the watchdog still sees it.)
    fn idle(&self) -> bool {
        self.active.is_empty() && self.waiting.is_empty() && !self.stage_busy()
    }

    /// Whether any stage is in a step (the watchdog's concern).
    fn stage_busy(&self) -> bool {
        StageKind::ALL
            .iter()
            .any(|&k| self.shared.health(k).busy_since_us.load(Ordering::Acquire) != 0)
    }

    fn generations(&self) -> [Generation; 3] {
        StageKind::ALL.map(|k| self.shared.health(k).generation.load(Ordering::Acquire))
    }

    fn cost(&self, prompt_rows: usize, max_frames: usize) -> u64 {
        request_cost(&self.model, &self.config, prompt_rows, max_frames)
    }

    fn push(&mut self, key: RequestKey, w: Wire) {
        if let Some(a) = self.active.get_mut(&key) {
            a.held.push_back(w);
        }
        self.flush(key);
    }

    /// Moves held events into the consumer's channel while it has room.
    fn flush(&mut self, key: RequestKey) {
        let Some(a) = self.active.get_mut(&key) else {
            return;
        };
        while let Some(w) = a.held.pop_front() {
            match a.tx.try_send(w) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(w)) => {
                    a.held.push_front(w);
                    break;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    // The consumer went away: the tick stops the work it
                    // started (dropping needs the actor context).
                    a.held.clear();
                    a.state.abandon();
                    break;
                }
            }
        }
    }

    /// Requests that count against `max_active_requests`: every admitted
    /// one whose reservation is held, less the live-text requests parked
    /// waiting for their text. A live utterance paused between an LLM's
    /// tokens is not work: without this, clients that open a live context,
    /// send one word and wait would hold every engine slot indefinitely.
    /// (Such a request still holds its memory reservation, and it resumes
    /// without a new admission when its text comes: the memory budget and
    /// the transport's text-wait deadline bound how many can wait.)
    fn computing(&self) -> u64 {
        let held = self.shared.active_requests.load(Ordering::Acquire);
        let waiting = self
            .active
            .values()
            .filter(|a| a.state != Lifecycle::Released)
            .filter(|a| a.live.as_ref().is_some_and(|f| f.is_waiting()))
            .count();
        held.saturating_sub(waiting) as u64
    }

    /// Feeds the capacity model a sample when a window of steady
    /// concurrency closed, and logs the capacity when it changes.
    fn learn(&mut self, now: Instant) {
        let busy = self.shared.busy_totals(now);
        let frames = self.shared.frames_made.load(Ordering::Relaxed);
        let steps = self.shared.placement_steps();
        let n = self.computing() as usize;
        self.shared.computing.store(n, Ordering::Relaxed);
        let sample = self.sampler.sample(now, busy, frames, steps, n);
        let mut cap = self.shared.capacity();
        if let Some((m, placement, costs)) = sample {
            for (g, c) in costs.iter().enumerate().take(self.shared.groups()) {
                cap.observe(placement, g, m, *c);
            }
            tracing::trace!(
                streams = m,
                placement = placement.name(),
                busy_ms_per_frame = format_args!("{:.2}", costs[0] * 1e3),
                load = format_args!(
                    "{:.3}",
                    cap.utilization_at(placement, m).unwrap_or(f64::NAN)
                ),
                "capacity sample"
            );
        }
        if self.shared.lend == LendPolicy::Measured {
            let lend = cap.placement(n) == Placement::Lent;
            if self.shared.lend_now.swap(lend, Ordering::Relaxed) != lend {
                tracing::debug!(streams = n, lend, "code2wav placement changed");
            }
        }
        if sample.is_none() {
            return;
        }
        let streams = cap.streams();
        if self.config.realtime_load.is_some() && streams != self.logged_streams {
            let one = cap.utilization(1).unwrap_or(f64::NAN);
            drop(cap);
            if let (Some(s), None) = (streams, self.logged_streams) {
                tracing::info!(
                    streams = s,
                    measured_at = n,
                    one_stream_load = format_args!("{one:.2}"),
                    "real-time capacity: {s} stream(s) stay continuous on this machine"
                );
                if one > 1.0 {
                    tracing::warn!(
                        one_stream_load = format_args!("{one:.2}"),
                        "one stream needs more than this machine's cores: it is admitted alone and plays slower than real time; try a faster --precision, or a larger machine"
                    );
                }
            } else if let Some(s) = streams {
                tracing::debug!(streams = s, measured_at = n, "real-time capacity changed");
            }
            self.logged_streams = streams;
        }
    }

    /// Returns a request's reservation and frees its session slot.
    fn release(&mut self, key: RequestKey) {
        self.shared.slack.forget(key);
        if let Some(a) = self.active.get_mut(&key) {
            if a.state.release() {
                self.shared
                    .reserved_bytes
                    .fetch_sub(a.reserved, Ordering::AcqRel);
                self.shared.active_requests.fetch_sub(1, Ordering::AcqRel);
                if std::mem::take(&mut a.awaiting_first) {
                    self.shared
                        .awaiting_first_packet
                        .fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        if self.sessions.get(&key.session) == Some(&key) {
            self.sessions.remove(&key.session);
        }
        let n = self.computing() as usize;
        self.shared.computing.store(n, Ordering::Relaxed);
    }

    /// Drops the request's state in every stage, in pipeline order (see the
    /// contract's ordering rule 3), then runs `then` on the router.
    fn drop_everywhere(
        &self,
        key: RequestKey,
        ctx: &mut Context<Self>,
        then: impl FnOnce(&mut Router, &mut Context<Router>) + 'static,
    ) {
        let dir = self.dir.clone();
        // A stage that cannot answer within twice its deadline is being
        // retired by the watchdog; its replacement holds no state.
        let limit = self.config.stage_deadline * 2;
        let fut = async move {
            for stage in StageKind::ALL {
                let r = with_wiring(&dir, |w| w.drop[stage.index()].clone());
                let _ = tokio::time::timeout(limit, r.send(DropRequest { key })).await;
            }
        };
        ctx.spawn(fut.into_actor(self).map(move |_, act, ctx| then(act, ctx)));
    }

    /// Fails a request with an explicit error event and frees its state.
    fn fail(&mut self, key: RequestKey, err: EngineError, ctx: &mut Context<Self>) {
        let Some(a) = self.active.get_mut(&key) else {
            return;
        };
        if !a.state.stop() {
            return;
        }
        self.push(key, Wire::Failed(err));
        self.drop_everywhere(key, ctx, move |act, _| act.release(key));
    }

    fn fail_all(&mut self, err: impl Fn() -> EngineError, ctx: &mut Context<Self>) {
        let keys: Vec<RequestKey> = self
            .active
            .iter()
            .filter(|(_, a)| a.state.is_running())
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.fail(k, err(), ctx);
        }
    }

    /// Replaces a stage whose step has run past the deadline.
    fn retire(&mut self, stage: StageKind, waited: Duration, ctx: &mut Context<Self>) {
        let h = self.shared.health(stage);
        let old = h.generation.fetch_add(1, Ordering::AcqRel);
        h.restarts.fetch_add(1, Ordering::Relaxed);
        h.busy_since_us.store(0, Ordering::Release);
        h.held.store(0, Ordering::Relaxed);
        // What was on its way to the old instance is never received.
        h.inbound.store(0, Ordering::Release);
        // The stuck step may hold its kernel team inside a region: every
        // other stage would queue behind it. Retire the team; the stages
        // take a fresh one at their next step.
        if !self.shared.replace_team(stage) {
            tracing::error!(stage = %stage, "cannot start fresh kernel threads; the stages run on their own threads");
        }
        // Steps that queued behind it get their full deadline from now.
        let now_us = self.shared.now_us();
        for other in StageKind::ALL {
            if other != stage && self.shared.share_team(stage, other) {
                let h = self.shared.health(other);
                h.clock_reset_us.store(now_us, Ordering::Release);
            }
        }
        let (model, config, shared, dir) = (&self.model, &self.config, &self.shared, &self.dir);
        let arbiter = match stage {
            StageKind::Talker => {
                let (arb, addr) = spawn_stage(
                    TalkerStage::new(model.clone(), config.max_batch),
                    shared,
                    dir,
                    config,
                );
                rewire(dir, |w| {
                    w.start = addr.clone().recipient();
                    w.feedback = addr.clone().recipient();
                    w.drop[stage.index()] = addr.recipient();
                });
                arb
            }
            StageKind::CodePredictor => {
                let (arb, addr) = spawn_stage(
                    PredictorStage::new(model.clone(), config.max_batch),
                    shared,
                    dir,
                    config,
                );
                rewire(dir, |w| {
                    w.token = addr.clone().recipient();
                    w.drop[stage.index()] = addr.recipient();
                });
                arb
            }
            StageKind::Code2Wav => {
                let (arb, addr) = spawn_stage(
                    Code2WavStage::new(
                        model.clone(),
                        config.chunks.clone(),
                        config.paced_prebuffer(),
                        config.max_batch,
                    ),
                    shared,
                    dir,
                    config,
                );
                rewire(dir, |w| {
                    w.frame = addr.clone().recipient();
                    w.drop[stage.index()] = addr.recipient();
                });
                arb
            }
        };
        // The stuck thread exits when its step returns (it then sees its
        // generation retired); its outputs are dropped as stale.
        if let Some(old_arb) = self.arbiters[stage.index()].replace(arbiter) {
            old_arb.stop();
        }
        let waited_ms = waited.as_millis() as u64;
        tracing::error!(
            stage = %stage,
            generation = old,
            waited_ms,
            "stage stalled past the watchdog deadline: retired and replaced; its requests fail"
        );
        self.fail_all(
            || EngineError::StageStalled {
                stage,
                generation: old,
                waited_ms,
            },
            ctx,
        );
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        self.shared.router_ticks.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        self.learn(now);
        self.admit_waiting(now);
        // Watchdog.
        let now_us = self.shared.now_us();
        for stage in StageKind::ALL {
            let busy = self
                .shared
                .health(stage)
                .busy_since_us
                .load(Ordering::Acquire);
            if busy != 0 {
                let h = self.shared.health(stage);
                let from = busy.max(h.clock_reset_us.load(Ordering::Acquire));
                let waited = Duration::from_micros(now_us.saturating_sub(from));
                // A step queued behind another stage's kernel region is not
                // the stuck one: that stage is overdue too, and retiring it
                // frees the team.
                if waited > self.config.stage_deadline && !self.shared.waiting_on_team(stage) {
                    self.retire(stage, waited, ctx);
                }
            }
        }
        // Delivery, slow consumers, abandoned streams.
        let soft = self.config.soft_unacked_audio_s;
        let hard = (self.config.hard_unacked_audio_s * self.sample_rate as f64) as u64;
        let keys: Vec<RequestKey> = self.active.keys().copied().collect();
        for key in keys {
            self.flush(key);
            let Some(a) = self.active.get_mut(&key) else {
                continue;
            };
            if !a.state.is_running() {
                if a.state.drop_abandoned() {
                    self.drop_everywhere(key, ctx, move |act, _| act.release(key));
                }
                continue;
            }
            if a.tx.is_closed() {
                a.state.abandon();
                continue;
            }
            let out = a.gate.outstanding();
            if a.gate.should_pause() {
                let since = *a.paused_since.get_or_insert(now);
                let paused = now - since;
                if out > hard || paused > self.config.max_pause {
                    let err = EngineError::SlowConsumer {
                        unacked_s: out as f64 / self.sample_rate as f64,
                        limit_s: soft,
                        paused_ms: paused.as_millis() as u64,
                    };
                    self.fail(key, err, ctx);
                }
            } else {
                a.paused_since = None;
            }
        }
        // Forget requests whose terminal event reached the consumer.
        self.active.retain(|_, a| {
            !(a.state == Lifecycle::Released && (a.held.is_empty() || a.tx.is_closed()))
        });
    }
}

impl Actor for Router {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(4 * self.config.mailbox_capacity() + 64);
        self.ensure_ticking(ctx);
    }
}

impl Router {
    /// The admission rules for `m` (`admission.rs`): its ledger cost, or the
    /// refusal.
    fn admission(&self, m: &Submit) -> Result<u64, EngineError> {
        let cost = self.cost(m.talker.prompt().prefill_rows(), m.max_frames);
        self.check(m.session, cost)?;
        Ok(cost)
    }

    /// A [`Probe`]: the admission rules at no ledger cost; a pass holds
    /// the session's place until its submit.
    fn probe(&mut self, session: SessionId) -> Result<(), EngineError> {
        let now = Instant::now();
        self.probes.expire(now);
        self.check(session, 0)?;
        self.probes.hold(session, now);
        Ok(())
    }

    /// The admission rules for a request of `cost` ledger bytes.
    fn check(&self, session: SessionId, cost: u64) -> Result<(), EngineError> {
        Admission {
            shutting_down: self.shutting_down,
            busy: self.sessions.get(&session).copied(),
            in_flight: self.computing() + self.probes.others(session),
            max_in_flight: self.config.max_active_requests as u64,
            realtime_streams: self
                .config
                .realtime_load
                .filter(|_| !self.shared.calibrating.load(Ordering::Acquire))
                .and_then(|_| self.shared.capacity().streams())
                .map(|s| s as u64),
            reserved: self.shared.reserved_bytes.load(Ordering::Acquire),
            budget: self.config.memory_budget_bytes,
        }
        .check(session, cost)
    }

    /// Starts an admitted request and answers its submitter.
    fn start(&mut self, m: Submit, cost: u64) {
        let in_flight = self.computing();
        let limit = self.config.max_active_requests as u64;
        let key = RequestKey {
            session: m.session,
            epoch: self.next_epoch,
        };
        let start = StartRequest {
            stamp: Stamp::new(key, 0),
            talker: m.talker,
            predictor: m.predictor,
            max_frames: m.max_frames,
            gate: m.gate.clone(),
            live: m.live.clone(),
        };
        // Registered before the talker can start it, so every stage that
        // looks the stream up (its slack, its prebuffer) finds it.
        self.shared.slack.register(
            key,
            Listener {
                gate: m.gate.clone(),
                live: m.live.clone(),
                offline: m.offline,
                prebuffer: m.prebuffer,
            },
        );
        let talker = with_wiring(&self.dir, |w| w.start.clone());
        // Mailboxes hold a start per admissible request, so this only
        // fails if the talker is being replaced.
        if talker.try_send(Work(Box::new(start))).is_err() {
            self.shared.slack.forget(key);
            let _ = m.reply.send(Err(EngineError::AtCapacity {
                resource: "talker mailbox slots",
                needed: 1,
                in_use: in_flight,
                limit,
            }));
            return;
        }
        self.next_epoch += 1;
        self.shared.reserved_bytes.fetch_add(cost, Ordering::AcqRel);
        self.shared.active_requests.fetch_add(1, Ordering::AcqRel);
        self.shared
            .awaiting_first_packet
            .fetch_add(1, Ordering::AcqRel);
        self.sessions.insert(m.session, key);
        self.active.insert(
            key,
            ActiveReq {
                tx: m.tx,
                held: VecDeque::new(),
                next_seq: 0,
                gate: m.gate,
                reserved: cost,
                state: Lifecycle::Running,
                paused_since: None,
                awaiting_first: true,
                live: m.live,
            },
        );
        let n = self.computing() as usize;
        self.shared.computing.store(n, Ordering::Relaxed);
        let generations = self.generations();
        self.push(key, Wire::Started { generations });
        let _ = m.reply.send(Ok(key));
    }

    /// Starts the offline requests waiting in line that now fit, in
    /// order; drops those whose submitter left; refuses those that waited
    /// [`OFFLINE_WAIT`] or meet another refusal.
    fn admit_waiting(&mut self, now: Instant) {
        self.admit_waiting_in_line(now);
        self.shared
            .offline_waiting
            .store(self.waiting.len(), Ordering::Relaxed);
    }

    fn admit_waiting_in_line(&mut self, now: Instant) {
        while let Some((m, since)) = self.waiting.pop_front() {
            if m.reply.is_closed() {
                continue;
            }
            match self.admission(&m) {
                Ok(cost) => {
                    // The line's count is true before the submitter hears
                    // it was started (it may read the figure at once).
                    self.shared
                        .offline_waiting
                        .store(self.waiting.len(), Ordering::Relaxed);
                    self.start(m, cost)
                }
                Err(e) if realtime_refusal(&e) && now.duration_since(since) < OFFLINE_WAIT => {
                    self.waiting.push_front((m, since));
                    break;
                }
                Err(e) => {
                    let _ = m.reply.send(Err(e));
                }
            }
        }
    }
}

/// A refusal by real-time capacity alone (offline work may wait it out).
fn realtime_refusal(e: &EngineError) -> bool {
    matches!(e, EngineError::AtCapacity { resource, .. } if resource.starts_with("real-time"))
}

/// Client → router, before a request is built: would one be admitted
/// now? The same rules as [`Submit`] at no ledger cost, answered from the
/// router's own figures, so a full engine refuses without the prompt,
/// caches and states a request costs to build (under a burst of arrivals
/// that building, not the refusal, is what the refused would wait for).
/// A probe that passes holds its place until its submit, an [`Unprobe`]
/// or [`crate::admission::PROBE_HOLD`] (`ProbeHolds`): the other probes
/// of a burst count it, so they are refused here too, not after building.
/// The submit is checked again.
pub(crate) struct Probe {
    pub session: SessionId,
}

impl Message for Probe {
    type Result = Result<(), EngineError>;
}

impl Handler<Probe> for Router {
    type Result = Result<(), EngineError>;

    fn handle(&mut self, m: Probe, _: &mut Context<Self>) -> Self::Result {
        self.probe(m.session)
    }
}

/// [`Probe`] for callers outside an async runtime: the answer comes on
/// `reply`.
pub(crate) struct ProbeBlocking {
    pub session: SessionId,
    pub reply: oneshot::Sender<Result<(), EngineError>>,
}

impl Message for ProbeBlocking {
    type Result = ();
}

impl Handler<ProbeBlocking> for Router {
    type Result = ();

    fn handle(&mut self, m: ProbeBlocking, _: &mut Context<Self>) {
        let r = self.probe(m.session);
        if m.reply.send(r).is_err() {
            // The caller is gone: nothing will be submitted.
            self.probes.release(m.session);
        }
    }
}

/// Client → router: a request whose probe passed will not be submitted
/// (building it failed, or its caller went away): its place is free.
pub(crate) struct Unprobe {
    pub session: SessionId,
}

impl Message for Unprobe {
    type Result = ();
}

impl Handler<Unprobe> for Router {
    type Result = ();

    fn handle(&mut self, m: Unprobe, _: &mut Context<Self>) {
        self.probes.release(m.session);
    }
}

impl Handler<Submit> for Router {
    type Result = ();

    fn handle(&mut self, m: Submit, ctx: &mut Context<Self>) {
        self.ensure_ticking(ctx);
        // Its probe's place becomes the request itself (or a refusal).
        self.probes.release(m.session);
        self.probes.expire(Instant::now());
        // Offline work keeps its order behind what already waits.
        self.admit_waiting(Instant::now());
        if m.offline && !self.waiting.is_empty() && self.waiting.len() < OFFLINE_LINE {
            self.waiting.push_back((m, Instant::now()));
            self.shared
                .offline_waiting
                .store(self.waiting.len(), Ordering::Relaxed);
            return;
        }
        match self.admission(&m) {
            Ok(cost) => self.start(m, cost),
            Err(e) if m.offline && realtime_refusal(&e) && self.waiting.len() < OFFLINE_LINE => {
                tracing::debug!(
                    session = m.session,
                    "offline request waits for real-time capacity"
                );
                self.waiting.push_back((m, Instant::now()));
                self.shared
                    .offline_waiting
                    .store(self.waiting.len(), Ordering::Relaxed);
            }
            Err(e) => {
                let _ = m.reply.send(Err(e));
            }
        }
    }
}

impl Handler<AudioOut> for Router {
    type Result = ();

    fn handle(&mut self, m: AudioOut, ctx: &mut Context<Self>) {
        self.ensure_ticking(ctx);
        let (key, generation) = m.origin();
        if !self.shared.sender_current(StageKind::Code2Wav, generation) {
            return;
        }
        match self.active.get(&key) {
            Some(a) if a.state.is_running() => {}
            _ => {
                self.shared.stale_request();
                return;
            }
        }
        match m {
            AudioOut::Chunk(chunk) => {
                let a = self.active.get_mut(&key).expect("checked");
                let seq = chunk.seq;
                if seq != a.next_seq {
                    let err = EngineError::Internal(format!(
                        "{key}: chunk seq {seq} arrived, expected {}",
                        a.next_seq
                    ));
                    self.fail(key, err, ctx);
                    return;
                }
                a.next_seq += 1;
                if std::mem::take(&mut a.awaiting_first) {
                    self.shared
                        .awaiting_first_packet
                        .fetch_sub(1, Ordering::AcqRel);
                }
                a.gate.produced(seq, chunk.samples.len() as u64);
                self.push(key, Wire::Audio(chunk));
            }
            AudioOut::Finished {
                frames,
                stop,
                times,
                first_frame_at,
                last_frame_at,
                ..
            } => {
                self.push(
                    key,
                    Wire::Finished {
                        frames,
                        stop,
                        times,
                        first_frame_at,
                        last_frame_at,
                    },
                );
                // Every stage already forgot the request (each drops its
                // state with the request's last message).
                self.release(key);
            }
            AudioOut::Failed { message, .. } => {
                self.fail(key, EngineError::Internal(message), ctx);
            }
            AudioOut::NonFinite {
                seq, index, value, ..
            } => {
                self.fail(key, EngineError::NonFiniteAudio { seq, index, value }, ctx);
            }
        }
    }
}

impl Handler<StageFailed> for Router {
    type Result = ();

    fn handle(&mut self, m: StageFailed, ctx: &mut Context<Self>) {
        self.ensure_ticking(ctx);
        // Every request in flight holds state in every stage, and messages
        // the dead generation sent are now dropped as stale: fail them all,
        // explicitly (m.requests lists those whose state was lost for sure).
        let (stage, generation, message) = (m.stage, m.old_generation, m.message);
        self.fail_all(
            || EngineError::StageFailed {
                stage,
                generation,
                message: message.clone(),
            },
            ctx,
        );
    }
}

impl Handler<Cancel> for Router {
    type Result = ();

    fn handle(&mut self, m: Cancel, ctx: &mut Context<Self>) {
        self.ensure_ticking(ctx);
        let received = Instant::now();
        let key = m.key;
        let live = matches!(self.active.get(&key), Some(a) if a.state.is_running());
        if !live {
            let _ = m.reply.send(CancelAck {
                request: key,
                was_active: false,
                cancel_ack_ms: 0.0,
                late_audio_samples: 0,
            });
            return;
        }
        let a = self.active.get_mut(&key).expect("checked");
        a.state.stop();
        // Audio not yet handed to the consumer is never delivered now.
        a.held.retain(|w| !matches!(w, Wire::Audio(_)));
        // The session may start its next request at once.
        if self.sessions.get(&key.session) == Some(&key) {
            self.sessions.remove(&key.session);
        }
        let reply = m.reply;
        self.drop_everywhere(key, ctx, move |act, _| {
            let ms = received.elapsed().as_secs_f64() * 1e3;
            // No audio of the request can reach its consumer after the
            // acknowledgement: the cancel took it out of `Running` above,
            // and chunks for a request that is not running are dropped as
            // stale before delivery.
            let late = 0;
            act.release(key);
            act.push(
                key,
                Wire::Cancelled {
                    cancel_ack_ms: ms,
                    late_audio_samples: late,
                },
            );
            let _ = reply.send(CancelAck {
                request: key,
                was_active: true,
                cancel_ack_ms: ms,
                late_audio_samples: late,
            });
        });
    }
}

impl Handler<Shutdown> for Router {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        self.shutting_down = true;
        self.fail_all(|| EngineError::ShuttingDown, ctx);
        // The system is going away with every stage: return all
        // reservations now.
        let keys: Vec<RequestKey> = self.active.keys().copied().collect();
        for k in keys {
            self.flush(k);
            self.release(k);
        }
        for a in self.arbiters.iter_mut().filter_map(Option::take) {
            a.stop();
        }
        System::current().stop();
    }
}
