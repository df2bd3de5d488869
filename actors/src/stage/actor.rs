//! The generic stage actor: mailbox, work queue, panic boundary, health.
//! It knows no concrete stage: its outputs go out through the
//! [`super::wiring`] directory, by message type.
//!
//! Each model stage is a [`StageActor`] around a [`StageLogic`] (the model
//! calls and per-request state), supervised by `actix::Supervisor` on its
//! own Arbiter thread. Data messages are queued locally and processed in
//! rounds from a self-notification, so control messages (drops, and new
//! work joining) are handled between steps. A round takes every item ready
//! when it starts; a step takes up to [`StageLogic::max_batch`] of them
//! (distinct requests) at once — the talker and the code predictor run them
//! as one batched forward, code2wav decodes the chunks they make due in one
//! batched call.
//!
//! Failure handling:
//! - a panic in a model call is caught here, the stage's in-flight requests
//!   are reported to the router ([`StageFailed`]), the generation is bumped,
//!   and the actor stops so its supervisor restarts it with empty state. A
//!   batched step shares its failure: the panic cannot be pinned on one
//!   request (the caches of the whole batch may be half-updated), so every
//!   request in the batch is lost with the stage's state — exactly what a
//!   panic already meant before batching, since a restarted stage holds
//!   nothing and the router fails every request in flight;
//! - a stall is detected by the router's watchdog from [`StageHealth`]
//!   (busy longer than the deadline); the router bumps the generation and
//!   starts a replacement, and this instance, when it wakes, sees it was
//!   retired, discards its outputs and stops its arbiter.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::wiring::{deliver, try_deliver, with_wiring, Delivery, Directory, Handoff};
use crate::capacity::Placement;
use crate::config::{EngineConfig, TeamHold};
use crate::contract::*;
use crate::flow::{StageWaker, Wake};
use crate::shared::{Shared, StageHealth};
use crate::slack;

/// Per-step context given to [`StageLogic::process`].
pub struct StepCx<'a> {
    pub out: &'a mut Vec<Handoff>,
    pub generation: Generation,
    pub shared: &'a Shared,
    /// Wakes this stage from another thread ([`StageLogic::woken`]); `None`
    /// outside a running actor (unit tests).
    pub waker: Option<&'a StageWaker>,
}

impl StepCx<'_> {
    /// Runs one model call serving `inputs` inputs: counts the step and its
    /// batch size, fires an injected fault if one is due, and returns the
    /// result with its wall time.
    pub fn batch_call<R>(
        &mut self,
        stage: StageKind,
        inputs: usize,
        f: impl FnOnce() -> R,
    ) -> (R, Duration) {
        let h = self.shared.health(stage);
        let step = h.steps.fetch_add(1, Ordering::Relaxed);
        h.batched_inputs.fetch_add(inputs as u64, Ordering::Relaxed);
        h.max_batch.fetch_max(inputs, Ordering::Relaxed);
        #[cfg(feature = "fault-injection")]
        crate::fault::maybe_fire(self.shared, stage, step, inputs, self.generation);
        let _ = step;
        let t = Instant::now();
        let r = f();
        (r, t.elapsed())
    }
}

/// What a stage does with its input. Implementations hold the per-request
/// state of the stage (KV caches, decoder states) and nothing else.
pub trait StageLogic: Sized + Send + Unpin + 'static {
    const KIND: StageKind;
    type Input: Send + Unpin + 'static;
    /// What the stage keeps per request (KV cache, RNG stream, decoder
    /// state).
    type State;
    fn stamp(input: &Self::Input) -> &Stamp;
    /// The stage that sent this input (None: the router).
    fn sender(input: &Self::Input) -> Option<StageKind>;
    /// The stage whose outputs come back to this one (the talker ↔
    /// predictor cycle), if any: see [`StageActor`]'s gathering.
    const PARTNER: Option<StageKind> = None;
    /// Whether a step holds the shared kernel team for all its regions
    /// (`Team::install_held_as`) instead of taking a turn per region: for
    /// steps of a few long compute-bound regions beside stages of many
    /// short ones (`EngineConfig::team_hold`, `TTS_RT_TEAM_HOLD` in
    /// `tts-rt`, overrides it for measurements).
    const HOLDS_TEAM: bool = false;
    /// Most inputs one step may take (1: one at a time).
    fn max_batch(&self) -> usize;
    /// Processes the inputs of one step — at most [`Self::max_batch`], each
    /// for a different request — appending hand-offs to `cx.out`. Returns
    /// the inputs that must wait (paused requests).
    fn process(&mut self, inputs: Vec<Self::Input>, cx: &mut StepCx<'_>) -> Vec<Self::Input>;
    /// The state the stage holds for each request.
    fn states(&self) -> &HashMap<RequestKey, Self::State>;
    fn states_mut(&mut self) -> &mut HashMap<RequestKey, Self::State>;
    /// Drops a request's state; true if there was any.
    fn drop_request(&mut self, key: RequestKey) -> bool {
        self.states_mut().remove(&key).is_some()
    }
    /// Requests holding state.
    fn held(&self) -> Vec<RequestKey> {
        self.states().keys().copied().collect()
    }
    fn clear(&mut self) {
        self.states_mut().clear();
    }
    /// Inputs the logic parked itself (kept out of `process`'s returned
    /// `deferred`, which is rechecked on a timer) that may go on now: called
    /// when a [`StageWaker`] fires.
    fn woken(&mut self) -> Vec<Self::Input> {
        Vec::new()
    }
    /// The request's next input is parked by the logic (waiting for
    /// something outside the engine): a step need not gather for it.
    fn parked(&self, _key: &RequestKey) -> bool {
        false
    }
}

pub struct StageActor<L: StageLogic> {
    logic: L,
    generation: Generation,
    shared: Arc<Shared>,
    dir: Directory,
    ready: VecDeque<L::Input>,
    deferred: Vec<L::Input>,
    /// Inputs held back for a stream closer to underrun (`crate::slack`),
    /// oldest first: put back before `ready` at the next round, so a
    /// request's inputs never overtake one another.
    held: Vec<L::Input>,
    tick_pending: bool,
    recheck_pending: bool,
    /// Longest a step waits for the partner's outputs (0: never waits).
    gather: Duration,
    /// When the current wait for the partner began.
    gathering_since: Option<Instant>,
    gather_timer_pending: bool,
    mailbox: usize,
    recheck: Duration,
    retired: bool,
    waker: Option<StageWaker>,
}

impl<L: StageLogic> StageActor<L> {
    pub fn new(
        logic: L,
        shared: Arc<Shared>,
        dir: Directory,
        mailbox: usize,
        recheck: Duration,
        gather: Duration,
    ) -> Self {
        let generation = shared.health(L::KIND).generation.load(Ordering::Acquire);
        StageActor {
            logic,
            generation,
            shared,
            dir,
            ready: VecDeque::new(),
            deferred: Vec::new(),
            held: Vec::new(),
            tick_pending: false,
            recheck_pending: false,
            gather,
            gathering_since: None,
            gather_timer_pending: false,
            mailbox,
            recheck,
            retired: false,
            waker: None,
        }
    }

    fn health(&self) -> &StageHealth {
        self.shared.health(L::KIND)
    }

    fn is_retired(&self) -> bool {
        self.health().generation.load(Ordering::Acquire) != self.generation
    }

    fn schedule_tick(&mut self, ctx: &mut Context<Self>) {
        if !self.tick_pending && !self.ready.is_empty() {
            self.tick_pending = true;
            ctx.notify(Tick);
        }
    }

    fn update_held(&self) {
        if self.is_retired() {
            // The figures belong to the replacement now.
            return;
        }
        self.health()
            .held
            .store(self.logic.held().len(), Ordering::Relaxed);
    }

    /// Forgets everything (after a panic, a restart, or retirement).
    fn reset(&mut self) {
        self.logic.clear();
        self.ready.clear();
        self.deferred.clear();
        self.held.clear();
        if !self.is_retired() {
            self.health().busy_since_us.store(0, Ordering::Release);
        }
        self.update_held();
    }

    /// Whether the next step should wait for the partner stage: this stage
    /// holds requests whose next input is not here yet, and the partner is
    /// mid-step (so those inputs are about to arrive, and waiting lets them
    /// join this step's batch: one pass over the weights instead of two).
    /// The partner's outputs arriving re-run the check; a timer bounds the
    /// wait by `gather`.
    ///
    /// Without it, two requests settle into a pipeline — one at the talker
    /// while the other is at the predictor — and never share a step.
    fn should_gather(&mut self, ctx: &mut Context<Self>) -> bool {
        let Some(partner) = L::PARTNER else {
            return false;
        };
        let limit = self.logic.max_batch();
        if self.gather.is_zero() || limit <= 1 || self.ready.len() >= limit {
            self.gathering_since = None;
            return false;
        }
        let here: Vec<RequestKey> = self
            .ready
            .iter()
            .chain(&self.deferred)
            .chain(&self.held)
            .map(|i| L::stamp(i).key)
            .collect();
        let missing = self
            .logic
            .held()
            .iter()
            .any(|k| !here.contains(k) && !self.logic.parked(k));
        // The partner is mid-step, or has handed this stage outputs that
        // are still on their way (the rest of its last step's batch).
        let partner_busy = self
            .shared
            .health(partner)
            .busy_since_us
            .load(Ordering::Acquire)
            != 0
            || self.health().inbound.load(Ordering::Acquire) > 0;
        if !(missing && partner_busy) {
            self.gathering_since = None;
            return false;
        }
        let now = Instant::now();
        let since = *self.gathering_since.get_or_insert(now);
        let waited = now - since;
        if waited >= self.gather {
            self.gathering_since = None;
            return false;
        }
        if !self.gather_timer_pending {
            self.gather_timer_pending = true;
            ctx.run_later(self.gather - waited, |act, ctx| {
                act.gather_timer_pending = false;
                act.schedule_tick(ctx);
            });
        }
        true
    }

    /// Runs one step (a batch of items for distinct requests) inside the
    /// panic boundary. Returns false if the actor must stop processing
    /// (panicked, retired or waiting on a full mailbox).
    fn run_step(&mut self, items: Vec<L::Input>, ctx: &mut Context<Self>) -> bool {
        let keys: Vec<RequestKey> = items.iter().map(|i| L::stamp(i).key).collect();
        let mut out = Vec::new();
        let started = self.shared.now_us();
        self.health()
            .busy_since_us
            .store(started, Ordering::Release);
        let shared = self.shared.clone();
        let generation = self.generation;
        // While a request waits for its first packet (prefill, its first
        // frames, its first chunk) the team is not lent: one core for the
        // LMs would delay that packet.
        let turns = match turns(
            L::HOLDS_TEAM,
            self.shared.team_hold,
            self.shared.lends_now(),
        ) {
            Turns::Lent if self.shared.awaiting_first_packet.load(Ordering::Acquire) > 0 => {
                Turns::Held
            }
            t => t,
        };
        if L::HOLDS_TEAM {
            // The capacity's windows are measured at one placement each.
            self.shared.stepped_at(match turns {
                Turns::Lent => Placement::Lent,
                _ => Placement::Held,
            });
        }
        let logic = &mut self.logic;
        let team = shared.team(L::KIND);
        // The group's busy clock (real-time capacity): entered here, left
        // once the step returned or panicked.
        shared.stepping(L::KIND, true);
        let waker = self.waker.as_ref();
        let result = catch_unwind(AssertUnwindSafe(|| {
            let mut cx = StepCx {
                out: &mut out,
                generation,
                shared: &shared,
                waker,
            };
            // `install` re-raises a panic of the step on this thread, so the
            // boundary below still catches it.
            //
            // The step deliberately runs here, not on a pool thread
            // (`tts_kernels::on_pool`): a worker waiting inside one stage's
            // parallel region can pick up another stage's whole step, so a
            // stuck step would hold the shared pool and stall every stage
            // and session, even after the watchdog retired it
            // (docs/performance.md, "Stepping inside the pool"). On a team
            // this thread opens each region and takes part in it; the
            // stages' regions take turns, and nothing but a region is
            // shared.
            let who = L::KIND.index() as u32;
            match (team, shared.pool(L::KIND)) {
                (Some(team), _) => match turns {
                    Turns::Held => team.install_held_as(who, || logic.process(items, &mut cx)),
                    Turns::Lent => team.install_lent_as(who, || logic.process(items, &mut cx)),
                    Turns::PerRegion => team.install_as(who, || logic.process(items, &mut cx)),
                },
                (None, Some(pool)) => pool.install(|| logic.process(items, &mut cx)),
                (None, None) => logic.process(items, &mut cx),
            }
        }));
        shared.stepping(L::KIND, false);
        tracing::trace!(
            stage = %L::KIND,
            inputs = keys.len(),
            requests = ?keys,
            start_us = started,
            us = self.shared.now_us().saturating_sub(started),
            "step"
        );
        // Clear only our own mark: a retired instance waking up must not
        // hide its replacement's step from the watchdog.
        let _ = self.health().busy_since_us.compare_exchange(
            started,
            0,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if self.is_retired() {
            // The watchdog replaced this instance while it was stuck: its
            // outputs are stale, and its arbiter is being stopped.
            self.retire(ctx);
            return false;
        }
        match result {
            Ok(back) => self.deferred.extend(back),
            Err(panic) => {
                self.fail(keys, panic_message(&*panic), ctx);
                return false;
            }
        }
        self.update_held();
        self.dispatch(out, ctx)
    }

    fn retire(&mut self, ctx: &mut Context<Self>) {
        self.retired = true;
        self.reset();
        ctx.stop();
        Arbiter::current().stop();
    }

    /// The panic path: report, bump the generation, stop (the supervisor
    /// restarts this actor with empty state).
    fn fail(&mut self, current: Vec<RequestKey>, message: String, ctx: &mut Context<Self>) {
        let mut requests = self.logic.held();
        requests.extend(current);
        requests.extend(
            self.ready
                .iter()
                .chain(&self.deferred)
                .chain(&self.held)
                .map(|i| L::stamp(i).key),
        );
        requests.sort();
        requests.dedup();
        let old = self.generation;
        let new = self.health().generation.fetch_add(1, Ordering::AcqRel) + 1;
        tracing::error!(
            stage = %L::KIND,
            generation = old,
            requests = requests.len(),
            panic = %message,
            "stage panicked: restarting with empty state; its requests fail"
        );
        self.generation = new;
        self.health().restarts.fetch_add(1, Ordering::Relaxed);
        self.reset();
        let router = with_wiring(&self.dir, |w| w.failed.clone());
        let msg = StageFailed {
            stage: L::KIND,
            old_generation: old,
            new_generation: new,
            requests,
            message,
        };
        // Control path, rare: a task on this arbiter (it outlives the stop)
        // waits for room in the router's mailbox.
        actix::spawn(async move {
            let _ = router.send(msg).await;
        });
        ctx.stop();
    }

    /// Hands outputs on in order: `try_send` while mailboxes have room;
    /// from the first full one on, the rest go in order through one waiting
    /// future that blocks this actor (backpressure) until delivered.
    ///
    /// Every output is counted in its receiver's `inbound` before the first
    /// is sent: a receiver that takes the first message sees the rest on
    /// their way (see [`StageHealth::inbound`](crate::shared::StageHealth)).
    fn dispatch(&mut self, out: Vec<Handoff>, ctx: &mut Context<Self>) -> bool {
        for k in out.iter().filter_map(Handoff::stage) {
            self.shared.health(k).inbound.fetch_add(1, Ordering::AcqRel);
        }
        let mut it = out.into_iter();
        for o in it.by_ref() {
            let stage = o.stage();
            match try_deliver(&self.dir, o) {
                Ok(Delivery::Sent) => {}
                Ok(Delivery::Dropped) => uncount(&self.shared, stage),
                Err(o) => {
                    let (dir, shared) = (self.dir.clone(), self.shared.clone());
                    let rest: Vec<Handoff> = std::iter::once(o).chain(it).collect();
                    ctx.wait(
                        async move {
                            for o in rest {
                                let stage = o.stage();
                                if deliver(&dir, o).await == Delivery::Dropped {
                                    uncount(&shared, stage);
                                }
                            }
                        }
                        .into_actor(self),
                    );
                    return false;
                }
            }
        }
        true
    }
}

/// One message counted in `stage`'s `inbound` that will never arrive (or
/// just did). Saturating: a replaced stage's count starts again from 0.
fn uncount(shared: &Shared, stage: Option<StageKind>) {
    if let Some(k) = stage {
        let _ = shared
            .health(k)
            .inbound
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// Starts a stage on its own arbiter thread under a supervisor (which
/// restarts it with empty state after a caught panic).
pub fn spawn_stage<L: StageLogic + Send>(
    logic: L,
    shared: &Arc<Shared>,
    dir: &Directory,
    config: &EngineConfig,
) -> (Arbiter, Addr<StageActor<L>>) {
    let arbiter = Arbiter::new();
    let (shared, dir, mailbox, recheck, gather) = (
        shared.clone(),
        dir.clone(),
        config.mailbox_capacity(),
        config.tick,
        config.batch_gather,
    );
    let addr = Supervisor::start_in_arbiter(&arbiter.handle(), move |_| {
        StageActor::new(logic, shared, dir, mailbox, recheck, gather)
    });
    (arbiter, addr)
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".into()
    }
}

impl<L: StageLogic> Actor for StageActor<L> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(self.mailbox);
        self.waker = Some(StageWaker::new(ctx.address().recipient()));
    }
}

impl<L: StageLogic> Supervised for StageActor<L> {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        self.reset();
        self.tick_pending = false;
        self.recheck_pending = false;
        self.gather_timer_pending = false;
        self.gathering_since = None;
        self.generation = self.health().generation.load(Ordering::Acquire);
    }
}

struct Tick;
impl Message for Tick {
    type Result = ();
}

impl<L: StageLogic> Handler<Wake> for StageActor<L> {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        if self.retired {
            return;
        }
        self.health().wakeups.fetch_add(1, Ordering::Relaxed);
        let back = self.logic.woken();
        if !back.is_empty() {
            self.ready.extend(back);
            self.schedule_tick(ctx);
        }
    }
}

/// Any message the stage's input can be made from (the talker takes
/// starts and fed-back frames, each from its own sender).
impl<L: StageLogic, M: Into<L::Input> + Send + 'static> Handler<Work<M>> for StageActor<L> {
    type Result = ();

    fn handle(&mut self, Work(item): Work<M>, ctx: &mut Context<Self>) {
        let item: L::Input = item.into();
        let stamp = *L::stamp(&item);
        if let Some(from) = L::sender(&item) {
            // Counted by the sending stage's `dispatch` (the router's
            // starts are not).
            if !self.retired {
                uncount(&self.shared, Some(L::KIND));
            }
            if !self.shared.sender_current(from, stamp.generation) {
                return;
            }
        }
        self.ready.push_back(item);
        self.schedule_tick(ctx);
    }
}

impl<L: StageLogic> Handler<Tick> for StageActor<L> {
    type Result = ();

    fn handle(&mut self, _: Tick, ctx: &mut Context<Self>) {
        self.tick_pending = false;
        if self.retired {
            return;
        }
        self.health().wakeups.fetch_add(1, Ordering::Relaxed);
        if self.should_gather(ctx) {
            return;
        }
        if self.shared.slack_order {
            // The stream closest to underrun first; one far ahead waits
            // (in `held`, back in front of `ready` next round, so its
            // inputs keep their order) while another is close. Within a
            // round a request's held inputs are its youngest ones (the
            // wait is bounded per input's age), so what runs now of it
            // came first.
            if !self.held.is_empty() {
                let mut back: VecDeque<L::Input> = self.held.drain(..).collect();
                back.extend(self.ready.drain(..));
                self.ready = back;
            }
            let now = Instant::now();
            let snap = self.shared.slack.snapshot(now);
            slack::hold(
                &mut self.ready,
                &mut self.held,
                &snap,
                |i| L::stamp(i).key,
                |i| now.saturating_duration_since(L::stamp(i).sent_at),
            );
            if !self.held.is_empty() {
                self.health()
                    .held_for_slack
                    .fetch_add(self.held.len() as u64, Ordering::Relaxed);
                // Rechecked even if this round stops early.
                self.schedule_recheck(ctx);
            }
            slack::order(&mut self.ready, |i| L::stamp(i).key, |k| snap.slack(k));
        }
        // One round: every item ready now, in steps of up to `max_batch`
        // items for distinct requests (a request's next item waits for the
        // next step, keeping its order). Mailbox messages — drops, new
        // requests — are handled between rounds.
        let mut left = self.ready.len();
        let limit = self.logic.max_batch().max(1);
        while left > 0 {
            let items = take_step(&mut self.ready, &mut left, limit, |i| L::stamp(i).key);
            if items.is_empty() {
                break;
            }
            if !self.run_step(items, ctx) {
                if !self.retired {
                    // Resume after the waiting hand-off (or restart).
                    self.schedule_tick(ctx);
                }
                return;
            }
        }
        self.schedule_tick(ctx);
        self.schedule_recheck(ctx);
    }
}

impl<L: StageLogic> StageActor<L> {
    /// One `recheck` from now, the inputs that wait — the logic's deferred
    /// ones and those held for slack — get another round.
    fn schedule_recheck(&mut self, ctx: &mut Context<Self>) {
        if (self.deferred.is_empty() && self.held.is_empty()) || self.recheck_pending {
            return;
        }
        self.recheck_pending = true;
        ctx.run_later(self.recheck, |act, ctx| {
            act.recheck_pending = false;
            act.ready.extend(act.deferred.drain(..));
            act.schedule_tick(ctx);
            if !act.held.is_empty() && !act.tick_pending {
                // The held inputs go back in front of `ready` at the round.
                act.tick_pending = true;
                ctx.notify(Tick);
            }
        });
    }
}

/// The next step's items, from the front of `ready`: at most `limit` and
/// at most `left` (what remains of the round), each for a different
/// request. It stops at the first item whose request is already in the
/// step, so that request's next item waits for the next step and its items
/// keep their order.
fn take_step<I>(
    ready: &mut VecDeque<I>,
    left: &mut usize,
    limit: usize,
    key: impl Fn(&I) -> RequestKey,
) -> Vec<I> {
    let mut items = Vec::new();
    let mut keys = Vec::new();
    while *left > 0 && items.len() < limit {
        let Some(front) = ready.front() else {
            break;
        };
        let k = key(front);
        if keys.contains(&k) {
            break;
        }
        keys.push(k);
        items.extend(ready.pop_front());
        *left -= 1;
    }
    items
}

impl<L: StageLogic> Handler<DropRequest> for StageActor<L> {
    type Result = bool;

    fn handle(&mut self, m: DropRequest, ctx: &mut Context<Self>) -> bool {
        let queued = self.ready.len() + self.deferred.len() + self.held.len();
        self.ready.retain(|i| L::stamp(i).key != m.key);
        self.deferred.retain(|i| L::stamp(i).key != m.key);
        self.held.retain(|i| L::stamp(i).key != m.key);
        let had = self.logic.drop_request(m.key)
            || queued != self.ready.len() + self.deferred.len() + self.held.len();
        self.update_held();
        // A step gathering for the dropped request need not wait for it.
        self.schedule_tick(ctx);
        had
    }
}

/// How a step takes the team's cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turns {
    /// A turn per kernel region (`Team::install_as`).
    PerRegion,
    /// One turn for the whole step (`Team::install_held_as`).
    Held,
    /// The whole step on its own thread beside the other stages' steps,
    /// each on one core, while they step; held when they do not
    /// (`Team::install_lent_as`).
    Lent,
}

/// How a step takes the team, given its stage's
/// [`StageLogic::HOLDS_TEAM`] (code2wav's: interleaving its long
/// convolutions one by one with the LMs' hundreds of short memory-bound
/// matmuls cost a wake-up per hand-off and each other's cache;
/// docs/performance.md, "code2wav holds the team for its step").
/// The holding stages are lent a core instead where `lend` says so
/// ([`crate::EngineConfig::lends_core`]). An explicit
/// [`crate::EngineConfig::team_hold`] (`TTS_RT_TEAM_HOLD`, an A/B switch
/// for measurements) `off` gives every stage a turn per region, `all` has
/// every stage hold; `c2w` and `lend` keep each stage by its own (their
/// lending is already in `lend`: a validated config never pairs `c2w`
/// with `lend_core`).
fn turns(holds: bool, hold: Option<TeamHold>, lend: bool) -> Turns {
    match (hold, holds) {
        (Some(TeamHold::Off), _) => Turns::PerRegion,
        (Some(TeamHold::All), _) => Turns::Held,
        (_, true) if lend => Turns::Lent,
        (_, true) => Turns::Held,
        (_, false) => Turns::PerRegion,
    }
}

#[cfg(test)]
mod tests {
    //! The work queue's rounds, without actors or a model.

    use super::*;

    fn key(session: u64) -> RequestKey {
        RequestKey { session, epoch: 1 }
    }

    /// Splits a round over `ready` (sessions) into steps of `limit`.
    fn steps(ready: &[u64], limit: usize) -> Vec<Vec<u64>> {
        let mut q: VecDeque<u64> = ready.iter().copied().collect();
        let mut left = q.len();
        let mut out = Vec::new();
        while left > 0 {
            let step = take_step(&mut q, &mut left, limit, |&s| key(s));
            if step.is_empty() {
                break;
            }
            out.push(step);
        }
        out
    }

    #[test]
    fn team_hold_and_lending_decide_the_turns() {
        use Turns::*;
        let cfg = |hold: Option<TeamHold>, lend_core: bool| crate::EngineConfig {
            team_hold: hold,
            lend_core,
            ..crate::EngineConfig::default()
        };
        // (team_hold, lend_core) -> (holding stage, other stage); `None`:
        // the config is refused.
        let cases = [
            (None, false, Some((Held, PerRegion))),
            (None, true, Some((Lent, PerRegion))),
            (Some(TeamHold::C2w), false, Some((Held, PerRegion))),
            (Some(TeamHold::Lend), false, Some((Lent, PerRegion))),
            (Some(TeamHold::Lend), true, Some((Lent, PerRegion))),
            (Some(TeamHold::Off), false, Some((PerRegion, PerRegion))),
            (Some(TeamHold::All), false, Some((Held, Held))),
            (Some(TeamHold::C2w), true, None),
            (Some(TeamHold::Off), true, None),
            (Some(TeamHold::All), true, None),
        ];
        for (hold, lend_core, want) in cases {
            let c = cfg(hold, lend_core);
            match want {
                None => assert!(c.validate().is_err(), "{hold:?} {lend_core}"),
                Some(want) => {
                    c.validate().unwrap();
                    let lend = c.lends_core();
                    let got = (turns(true, hold, lend), turns(false, hold, lend));
                    assert_eq!(got, want, "{hold:?} {lend_core}");
                }
            }
        }
    }

    #[test]
    fn a_step_takes_distinct_requests_up_to_the_batch_limit() {
        assert_eq!(steps(&[1, 2, 3, 4, 5], 3), [vec![1, 2, 3], vec![4, 5]]);
        assert_eq!(steps(&[1, 2, 3], 1), [vec![1], vec![2], vec![3]]);
        assert_eq!(steps(&[], 4), Vec::<Vec<u64>>::new());
    }

    #[test]
    fn a_requests_second_item_waits_for_the_next_step_in_order() {
        // Request 1's second item ends the first step, although there is
        // room: taking request 2's second item past it would reorder.
        assert_eq!(steps(&[1, 2, 1, 3, 2], 4), [vec![1, 2], vec![1, 3, 2]]);
        assert_eq!(steps(&[1, 1, 1], 16), [vec![1], vec![1], vec![1]]);
    }

    #[test]
    fn a_round_takes_only_what_was_ready_when_it_started() {
        let mut q: VecDeque<u64> = [1, 2, 3, 4].into_iter().collect();
        let mut left = 2;
        assert_eq!(take_step(&mut q, &mut left, 16, |&s| key(s)), [1, 2]);
        assert_eq!(left, 0);
        assert_eq!(
            take_step(&mut q, &mut left, 16, |&s| key(s)),
            Vec::<u64>::new()
        );
        assert_eq!(q, [3, 4], "later items wait for the next round");
    }
}
