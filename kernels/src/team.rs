//! Where a kernel's parallel work runs: a [`Team`] of threads one caller
//! owns, or rayon's pool.
//!
//! A decode step (one talker row, one code-predictor row) is hundreds of
//! short parallel regions: a 0.6B frame runs ~700 matmuls of 30-100 us
//! each. Opened from a thread outside rayon's pool, every region is
//! injected into the pool's queue, wakes a worker and puts the caller to
//! sleep on a latch: two cross-thread wake-ups per matmul. Stepping on a
//! pool thread instead avoids them but breaks stage isolation (a worker
//! waiting in one stage's region steals another stage's whole step;
//! docs/performance.md, "Stepping inside the pool").
//!
//! A [`Team`] is the decode engines' answer (llama.cpp's thread pool runs
//! m = 1 this way): `threads - 1` persistent workers plus the thread that
//! opens a region, which takes part in it. A region is published by bumping
//! an epoch; workers spin on it for a short while after each region
//! ([`crate::settings::DEFAULT_TEAM_SPIN_US`]) and then park, so back-to-back regions cost no wake-up and
//! an idle team costs no CPU. Tasks are claimed from one atomic counter, so
//! a worker the OS has descheduled only slows the region by the task it
//! holds.
//!
//! Several threads may install one team (the stages of an engine share the
//! cores): their regions take turns, first come first served, through a
//! gate that a waiting thread sleeps on, so the team never has more
//! runnable threads than it was sized for and a stage's short regions slip
//! in between another stage's. Nothing but whole regions is ever shared: a
//! thread waits only for the region in progress, never runs another
//! thread's work. A region that never ends holds its team; its owner
//! [retires](Team::retire) the team and builds a fresh one, and whoever was
//! waiting at the retired team's gate runs its region on its own thread.
//!
//! Kernels never name the executor: they call [`for_each`], which runs on
//! the installed team, on rayon's pool when none is installed, and inline
//! when called from inside a task (nested regions never fork twice).

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long a worker (and a caller waiting for the workers) keeps spinning
/// before it parks (yields), [`crate::KernelSettings::team_spin_us`]
/// (`TTS_RT_TEAM_SPIN_US`): long enough to bridge the gap between two
/// regions of a step and between the steps of one frame (a mailbox hop),
/// short enough that an idle team is idle.
fn spin() -> Duration {
    static SPIN: OnceLock<Duration> = OnceLock::new();
    *SPIN.get_or_init(|| Duration::from_micros(crate::settings::get().team_spin_us))
}

/// Whether the runtime puts its kernels on teams:
/// [`crate::KernelSettings::teams`] `false` (`TTS_RT_TEAMS=off`) keeps them
/// on rayon's pools instead (an A/B switch for measurements).
pub fn teams_enabled() -> bool {
    crate::settings::get().teams
}

/// The type-erased task of the open region: `&&(dyn Fn(usize) + Sync)`.
type TaskRef<'a> = &'a (dyn Fn(usize) + Sync);

/// What the caller and the workers share.
struct Inner {
    /// Odd while a region is open, even while closed; never wraps in
    /// practice (64 bits).
    epoch: AtomicU64,
    /// The open region's task (a pointer to a `TaskRef` on the caller's
    /// stack), its task count and the next unclaimed task.
    task: AtomicPtr<()>,
    n: AtomicUsize,
    next: AtomicUsize,
    /// Workers inside the region (between joining and leaving it); the
    /// caller closes a region only once this is 0, so the task it points at
    /// outlives every use.
    active: AtomicUsize,
    /// Workers parked (or about to park): the caller unparks them when it
    /// opens a region.
    sleepers: AtomicUsize,
    quit: AtomicBool,
    /// The first panic of the open region's tasks, re-raised on the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    panicked: AtomicBool,
    threads: Vec<Thread>,
    /// Whose turn it is to open a region.
    gate: Gate,
    /// Steps running on a lent core ([`Team::install_lent_as`]): while
    /// non-zero, every region opened through the gate runs on its
    /// opener's thread alone and the workers stay parked.
    lent: AtomicUsize,
    /// Installers inside a step (`install_as` / `install_held_as`).
    stepping: AtomicUsize,
    /// When the last of them ended, in microseconds since `base`.
    last_step_end_us: AtomicU64,
    base: Instant,
}

/// Counts an installer's step in `Inner::stepping` while alive.
struct Stepping<'a>(&'a Inner);

impl<'a> Stepping<'a> {
    fn enter(inner: &'a Inner) -> Self {
        inner.stepping.fetch_add(1, Ordering::SeqCst);
        Stepping(inner)
    }
}

impl Drop for Stepping<'_> {
    fn drop(&mut self) {
        let us = self.0.base.elapsed().as_micros() as u64;
        self.0.last_step_end_us.store(us, Ordering::Release);
        self.0.stepping.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How recently another installer must have stepped for
/// [`Team::install_lent_as`] to take it as busy: an LM stage's steps follow
/// each other within a message hand-off (tens of microseconds).
const BUSY_GAP_US: u64 = 2_000;

/// A first-come-first-served turn for opening regions: a ticket per
/// arrival, served in order; a thread that must wait sleeps (it would only
/// take a core from the region it waits for).
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    turn: std::sync::Condvar,
    /// Installer tags ([`Team::install_as`]) now waiting for a turn.
    waiting: AtomicU64,
}

/// The tag of an installer that is not tracked.
const NO_TAG: u32 = u32::MAX;

#[derive(Default)]
struct GateState {
    next: u64,
    serving: u64,
    retired: bool,
}

impl Gate {
    /// Waits for this thread's turn; false when the team was retired
    /// (before or while waiting): the region must run elsewhere.
    fn enter(&self, tag: u32) -> bool {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let me = g.next;
        g.next += 1;
        let bit = if tag < 64 { 1u64 << tag } else { 0 };
        if g.serving != me && !g.retired {
            self.waiting.fetch_or(bit, Ordering::AcqRel);
            while g.serving != me && !g.retired {
                g = self.turn.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            self.waiting.fetch_and(!bit, Ordering::AcqRel);
        }
        !g.retired
    }

    fn leave(&self) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.serving += 1;
        let waiting = g.next > g.serving;
        drop(g);
        if waiting {
            self.turn.notify_all();
        }
    }

    fn retire(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).retired = true;
        self.turn.notify_all();
    }
}

/// Leaves the gate when dropped (also when a region's panic unwinds).
struct Turn<'a>(&'a Gate);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// `threads - 1` persistent workers plus the thread that opens a region.
/// See the module documentation. Dropping (or retiring) a team stops its
/// workers (each exits once it is out of any task); it never waits for
/// them.
pub struct Team {
    inner: Arc<Inner>,
    size: usize,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team").field("threads", &self.size).finish()
    }
}

#[derive(Clone, Copy)]
enum Mode {
    /// No team installed: rayon's current pool.
    Pool,
    /// The installed team, its size and the installer's tag
    /// ([`Team::install_as`]; [`NO_TAG`] for none).
    Team(*const Inner, usize, u32),
    /// Inside a task: nested regions run on this thread.
    Inline,
}

thread_local! {
    static MODE: Cell<Mode> = const { Cell::new(Mode::Pool) };
    /// The team whose gate this thread holds for a whole step
    /// ([`Team::install_held_as`]): its regions skip the gate.
    static HELD: Cell<*const Inner> = const { Cell::new(core::ptr::null()) };
}

/// Restores the thread's mode when dropped (also on unwind).
struct ModeGuard(Mode);

impl Drop for ModeGuard {
    fn drop(&mut self) {
        MODE.with(|m| m.set(self.0));
    }
}

fn set_mode(mode: Mode) -> ModeGuard {
    ModeGuard(MODE.with(|m| m.replace(mode)))
}

impl Team {
    /// A team of `threads` (at least 1: the caller alone runs every task
    /// inline), its workers named `{name}-{i}`.
    pub fn new(threads: usize, name: &str) -> std::io::Result<Team> {
        let size = threads.max(1);
        let mut handles: Vec<JoinHandle<()>> = Vec::with_capacity(size - 1);
        // The workers need the `Inner` (with their own `Thread` handles in
        // it) before they start: they wait on a start flag.
        let start = Arc::new((Mutex::new(None::<Arc<Inner>>), std::sync::Condvar::new()));
        for i in 1..size {
            let gate = start.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    let inner = {
                        let (lock, cv) = &*gate;
                        let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
                        loop {
                            if let Some(inner) = g.as_ref() {
                                break inner.clone();
                            }
                            g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
                        }
                    };
                    drop(gate);
                    worker(&inner);
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // Release the ones already waiting (they see `quit`).
                    let inner = Arc::new(Inner::new(Vec::new()));
                    inner.quit.store(true, Ordering::SeqCst);
                    *start.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(inner);
                    start.1.notify_all();
                    return Err(e);
                }
            }
        }
        let inner = Arc::new(Inner::new(
            handles.iter().map(|h| h.thread().clone()).collect(),
        ));
        *start.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(inner.clone());
        start.1.notify_all();
        // Detached: a worker exits on `quit` once it is out of its task.
        drop(handles);
        Ok(Team { inner, size })
    }

    /// Threads the team computes with, the caller included.
    pub fn threads(&self) -> usize {
        self.size
    }

    /// Runs `f` on this thread with the team installed: every kernel region
    /// `f` opens runs on the team, taking turns with the regions of other
    /// threads that installed it (see the module documentation). A panic in
    /// `f` or in any task propagates to the caller.
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        self.install_as(NO_TAG, f)
    }

    /// [`Self::install`] for the installer `who` (< 64): while its thread
    /// waits for a turn at the gate, [`Self::is_waiting`]`(who)` says so —
    /// how a watchdog tells a step that is stuck from one queued behind it.
    pub fn install_as<R>(&self, who: u32, f: impl FnOnce() -> R) -> R {
        let tag = if who < 64 { who } else { NO_TAG };
        let _s = Stepping::enter(&self.inner);
        let _g = set_mode(Mode::Team(Arc::as_ptr(&self.inner), self.size, tag));
        f()
    }

    /// For a step of long compute-bound regions (the vocoder's) beside
    /// steps of short memory-bound ones (the LMs'): while another
    /// installer is stepping (or stepped within [`BUSY_GAP_US`]), `f` runs
    /// on this thread alone, and the team's own regions run on their
    /// openers' threads alone until `f` ends: one core each, the two steps
    /// side by side instead of one after the other. A memory-bound step
    /// loses little of its speed on one core; the compute-bound one gets a
    /// whole core without a hand-off per region. When nobody else is
    /// stepping, `f` holds the whole team ([`Self::install_held_as`]).
    pub fn install_lent_as<R>(&self, who: u32, f: impl FnOnce() -> R) -> R {
        let inner = &*self.inner;
        let recent = || {
            let now = inner.base.elapsed().as_micros() as u64;
            now.saturating_sub(inner.last_step_end_us.load(Ordering::Acquire)) < BUSY_GAP_US
        };
        if self.size < 2 || (inner.stepping.load(Ordering::SeqCst) == 0 && !recent()) {
            return self.held(who, false, f);
        }
        struct Unlend<'a>(&'a Inner);
        impl Drop for Unlend<'_> {
            fn drop(&mut self) {
                self.0.lent.fetch_sub(1, Ordering::SeqCst);
            }
        }
        inner.lent.fetch_add(1, Ordering::SeqCst);
        let _u = Unlend(inner);
        let _g = set_mode(Mode::Inline);
        f()
    }

    /// [`Self::install_as`], holding the gate for all of `f`: `f`'s regions
    /// run back to back, and other installers' regions wait until `f` ends
    /// (one turn for a whole step instead of one per region). For a step
    /// of long compute-bound regions beside steps of many short ones: per
    /// region, each hand-off between them is a sleeping thread woken at
    /// the gate, and each side evicts the other's cache. On a retired team
    /// the rest of `f`'s regions run on this thread alone.
    pub fn install_held_as<R>(&self, who: u32, f: impl FnOnce() -> R) -> R {
        self.held(who, true, f)
    }

    /// [`Self::install_held_as`]; `counted`: whether the step counts as
    /// another installer's for [`Self::install_lent_as`] (a lender's own
    /// held steps do not).
    fn held<R>(&self, who: u32, counted: bool, f: impl FnOnce() -> R) -> R {
        let tag = if who < 64 { who } else { NO_TAG };
        let inner = &*self.inner;
        if !inner.gate.enter(tag) {
            let _g = set_mode(Mode::Inline);
            return f();
        }
        let _turn = Turn(&inner.gate);
        let _s = counted.then(|| Stepping::enter(inner));
        let prev = HELD.with(|h| h.replace(inner as *const Inner));
        struct Restore(*const Inner);
        impl Drop for Restore {
            fn drop(&mut self) {
                HELD.with(|h| h.set(self.0));
            }
        }
        let _r = Restore(prev);
        let _g = set_mode(Mode::Team(Arc::as_ptr(&self.inner), self.size, tag));
        f()
    }

    /// Whether installer `who` is waiting at the gate for another region
    /// to end.
    pub fn is_waiting(&self, who: u32) -> bool {
        who < 64 && self.inner.gate.waiting.load(Ordering::Acquire) & (1 << who) != 0
    }

    /// Takes the team out of service for good: its workers stop once they
    /// are out of their tasks, and every region not yet under way — queued
    /// at the gate or opened later by a thread that still has the team
    /// installed — runs on its opener's thread alone. For the owner of a
    /// region that never ends: the threads it holds stay held, nothing
    /// else waits for them, and a fresh team serves what comes next.
    pub fn retire(&self) {
        self.inner.gate.retire();
        self.inner.quit.store(true, Ordering::SeqCst);
        for t in &self.inner.threads {
            t.unpark();
        }
    }

    /// Whether [`Self::retire`] was called.
    pub fn is_retired(&self) -> bool {
        self.inner.quit.load(Ordering::Acquire)
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.retire();
    }
}

impl Inner {
    fn new(threads: Vec<Thread>) -> Inner {
        Inner {
            epoch: AtomicU64::new(0),
            task: AtomicPtr::new(std::ptr::null_mut()),
            n: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            quit: AtomicBool::new(false),
            panic: Mutex::new(None),
            panicked: AtomicBool::new(false),
            threads,
            gate: Gate::default(),
            lent: AtomicUsize::new(0),
            stepping: AtomicUsize::new(0),
            last_step_end_us: AtomicU64::new(0),
            base: Instant::now(),
        }
    }

    /// Claims and runs tasks of the open region until none is left.
    fn drain(&self, task: TaskRef<'_>, n: usize) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                return;
            }
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| task(i))) {
                let mut slot = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                slot.get_or_insert(p);
                self.panicked.store(true, Ordering::Release);
            }
        }
    }

    /// The caller's side of one region: take a turn, publish, take part,
    /// wait, close. On a retired team the caller runs every task itself.
    fn run(&self, n: usize, tag: u32, task: TaskRef<'_>) {
        let held = std::ptr::eq(HELD.with(Cell::get), self);
        if held && self.quit.load(Ordering::Acquire) {
            let _g = set_mode(Mode::Inline);
            return (0..n).for_each(task);
        }
        if !held && !self.gate.enter(tag) {
            let _g = set_mode(Mode::Inline);
            return (0..n).for_each(task);
        }
        let _turn = (!held).then(|| Turn(&self.gate));
        if self.lent.load(Ordering::SeqCst) > 0 {
            // A core is lent (`Team::install_lent_as`): this region keeps
            // to its opener's thread, and the workers park.
            let _g = set_mode(Mode::Inline);
            return (0..n).for_each(task);
        }
        let slot: *const TaskRef<'_> = &task;
        self.task.store(slot as *mut (), Ordering::Relaxed);
        self.n.store(n, Ordering::Relaxed);
        self.next.store(0, Ordering::Relaxed);
        // Open (odd). SeqCst pairs with the workers' sleepers/epoch checks.
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            for t in &self.threads {
                t.unpark();
            }
        }
        {
            let _g = set_mode(Mode::Inline);
            self.drain(task, n);
        }
        // Close (even): a worker that joins from now on sees it and leaves
        // without touching the task. Then wait for the ones inside.
        self.epoch.fetch_add(1, Ordering::SeqCst);
        let t0 = Instant::now();
        let mut spins = 0u32;
        while self.active.load(Ordering::SeqCst) != 0 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && t0.elapsed() > spin() {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        if self.panicked.swap(false, Ordering::Acquire) {
            let p = self.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
            resume_unwind(p.unwrap_or_else(|| Box::new("a kernel task panicked")));
        }
    }
}

fn worker(inner: &Inner) {
    let _g = set_mode(Mode::Inline);
    let mut seen = 0u64;
    loop {
        // Wait for a region newer than the last one seen.
        let t0 = Instant::now();
        let mut spins = 0u32;
        let e = loop {
            let e = inner.epoch.load(Ordering::Acquire);
            if e != seen && e % 2 == 1 {
                break e;
            }
            if inner.quit.load(Ordering::Acquire) {
                return;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) || t0.elapsed() < spin() {
                std::hint::spin_loop();
                continue;
            }
            // Park: announce, re-check, sleep. The caller unparks every
            // worker after opening a region if it sees a sleeper; a wake-up
            // that comes before `park` is kept as the thread's token.
            inner.sleepers.fetch_add(1, Ordering::SeqCst);
            let e = inner.epoch.load(Ordering::SeqCst);
            if (e == seen || e.is_multiple_of(2)) && !inner.quit.load(Ordering::SeqCst) {
                std::thread::park();
            }
            inner.sleepers.fetch_sub(1, Ordering::SeqCst);
            spins = 0;
        };
        seen = e;
        // Join, then check the region is still the one seen: if the caller
        // closed it meanwhile, its task may be gone.
        inner.active.fetch_add(1, Ordering::SeqCst);
        if inner.epoch.load(Ordering::SeqCst) == e {
            let n = inner.n.load(Ordering::Relaxed);
            let slot = inner.task.load(Ordering::Relaxed) as *const TaskRef<'_>;
            // SAFETY: the region `e` is open and this worker is counted in
            // `active`, so the caller is still inside `Inner::run` (it waits
            // for `active == 0` after closing), and `slot` points at its live
            // `TaskRef` (published before the epoch, read after it).
            let task = unsafe { *slot };
            inner.drain(task, n);
        }
        inner.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether this thread has a team installed (or is inside a task): its
/// regions do not go to rayon's pool.
pub(crate) fn installed() -> bool {
    !matches!(MODE.with(Cell::get), Mode::Pool)
}

/// Threads the current executor computes with: the installed team's size,
/// 1 inside a task, else rayon's current pool.
pub(crate) fn threads() -> usize {
    match MODE.with(Cell::get) {
        Mode::Pool => rayon::current_num_threads().max(1),
        Mode::Team(_, size, _) => size,
        Mode::Inline => 1,
    }
}

/// Runs `task(0..n)` on the current executor (see the module
/// documentation); returns when every task has run. A panic in a task is
/// re-raised here.
pub(crate) fn for_each(n: usize, task: impl Fn(usize) + Sync + Send) {
    if n == 0 {
        return;
    }
    if n == 1 {
        return task(0);
    }
    match MODE.with(Cell::get) {
        Mode::Pool => {
            use rayon::prelude::*;
            (0..n).into_par_iter().for_each(task)
        }
        Mode::Team(inner, size, tag) if size > 1 => {
            // SAFETY: `Mode::Team` is only set by `Team::install_as`, whose
            // `&self` (and so the `Arc<Inner>`) outlives the mode.
            let inner = unsafe { &*inner };
            inner.run(n, tag, &task)
        }
        Mode::Team(..) | Mode::Inline => (0..n).for_each(task),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_once_per_region() {
        let team = Team::new(3, "test-team").unwrap();
        let hits: Vec<AtomicU32> = (0..1000).map(|_| AtomicU32::new(0)).collect();
        team.install(|| {
            assert_eq!(threads(), 3);
            for _ in 0..200 {
                for_each(hits.len(), |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 200));
    }

    #[test]
    fn regions_after_a_pause_wake_parked_workers() {
        let team = Team::new(2, "test-team").unwrap();
        let sum = AtomicUsize::new(0);
        for _ in 0..3 {
            team.install(|| for_each(64, |i| _ = sum.fetch_add(i, Ordering::Relaxed)));
            std::thread::sleep(spin() * 3);
        }
        assert_eq!(sum.load(Ordering::Relaxed), 3 * (0..64).sum::<usize>());
    }

    #[test]
    fn nested_regions_run_inline() {
        let team = Team::new(2, "test-team").unwrap();
        let count = AtomicUsize::new(0);
        team.install(|| {
            for_each(8, |_| {
                assert_eq!(threads(), 1);
                for_each(4, |_| _ = count.fetch_add(1, Ordering::Relaxed));
            })
        });
        assert_eq!(count.load(Ordering::Relaxed), 32);
    }

    #[test]
    fn a_task_panic_reaches_the_caller_and_the_team_goes_on() {
        let team = Team::new(2, "test-team").unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            team.install(|| {
                for_each(16, |i| {
                    if i == 11 {
                        panic!("task 11");
                    }
                })
            })
        }));
        let msg = r.unwrap_err();
        assert_eq!(msg.downcast_ref::<&str>(), Some(&"task 11"));
        let count = AtomicUsize::new(0);
        team.install(|| for_each(16, |_| _ = count.fetch_add(1, Ordering::Relaxed)));
        assert_eq!(count.load(Ordering::Relaxed), 16);
    }

    #[test]
    fn a_team_is_per_thread_and_outside_it_rayon_serves() {
        let team = Team::new(2, "test-team").unwrap();
        team.install(|| {
            let other = std::thread::spawn(threads).join().unwrap();
            assert_eq!(other, rayon::current_num_threads().max(1));
        });
        assert_eq!(threads(), rayon::current_num_threads().max(1));
    }

    #[test]
    fn threads_sharing_a_team_take_turns() {
        let team = Team::new(2, "test-team").unwrap();
        let sums: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|sc| {
            for s in &sums {
                let team = &team;
                sc.spawn(move || {
                    team.install(|| {
                        for _ in 0..300 {
                            for_each(50, |i| _ = s.fetch_add(i, Ordering::Relaxed));
                        }
                    })
                });
            }
        });
        for s in &sums {
            assert_eq!(s.load(Ordering::Relaxed), 300 * (0..50).sum::<usize>());
        }
    }

    #[test]
    fn a_retired_team_serves_its_waiters_on_their_own_threads() {
        let team = Team::new(2, "test-team").unwrap();
        let release = AtomicBool::new(false);
        let entered = AtomicBool::new(false);
        std::thread::scope(|sc| {
            // A region that does not end until told to: it holds the team.
            sc.spawn(|| {
                team.install(|| {
                    for_each(2, |i| {
                        if i == 0 {
                            entered.store(true, Ordering::SeqCst);
                            while !release.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                        }
                    })
                })
            });
            while !entered.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            // Another thread queues behind it, then the team is retired.
            let waiter = sc.spawn(|| {
                let me = std::thread::current().id();
                let ran_on = Mutex::new(Vec::new());
                team.install_as(5, || {
                    for_each(8, |_| {
                        ran_on.lock().unwrap().push(std::thread::current().id())
                    })
                });
                ran_on.into_inner().unwrap().iter().all(|&t| t == me)
            });
            std::thread::sleep(Duration::from_millis(20));
            assert!(
                !waiter.is_finished(),
                "the waiter must queue behind the held region"
            );
            assert!(team.is_waiting(5) && !team.is_waiting(4));
            team.retire();
            assert!(
                waiter.join().unwrap(),
                "a retired team's waiter runs its region itself"
            );
            assert!(!team.is_waiting(5));
            release.store(true, Ordering::SeqCst);
        });
        assert!(team.is_retired());
    }

    #[test]
    fn a_held_turn_keeps_other_regions_out_until_it_ends() {
        let team = Team::new(2, "test-team").unwrap();
        let log = Mutex::new(Vec::new());
        let held = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                team.install_held_as(2, || {
                    held.store(true, Ordering::SeqCst);
                    for r in 0..20 {
                        for_each(4, |_| {});
                        log.lock().unwrap().push(('h', r));
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
            });
            while !held.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            sc.spawn(|| {
                team.install_as(0, || {
                    for r in 0..5 {
                        for_each(4, |_| {});
                        log.lock().unwrap().push(('o', r));
                    }
                })
            });
        });
        let log = log.into_inner().unwrap();
        let first_other = log.iter().position(|e| e.0 == 'o').unwrap();
        assert_eq!(
            first_other, 20,
            "no other region between the held ones: {log:?}"
        );
    }

    #[test]
    fn a_held_turn_on_a_retired_team_runs_alone() {
        let team = Team::new(2, "test-team").unwrap();
        let me = std::thread::current().id();
        team.install_held_as(1, || {
            for_each(4, |_| {});
            team.retire();
            for_each(8, |_| assert_eq!(std::thread::current().id(), me));
        });
    }

    #[test]
    fn a_lent_step_runs_beside_a_stepping_installer_each_on_its_own_thread() {
        let team = Arc::new(Team::new(2, "test-team").unwrap());
        let lent = Arc::new(AtomicBool::new(false));
        let seen_lent = Arc::new(AtomicU32::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let stepper = {
            let (team, lent, seen_lent, done) =
                (team.clone(), lent.clone(), seen_lent.clone(), done.clone());
            std::thread::spawn(move || {
                let me = std::thread::current().id();
                team.install_as(0, || {
                    while !done.load(Ordering::Acquire) {
                        // A region that runs wholly inside the lent step
                        // keeps to this thread. The flag is set after the
                        // lent step began and cleared before it ends, so
                        // set both before and after the region means the
                        // whole region ran while the core was lent.
                        let before = lent.load(Ordering::Acquire);
                        let away = AtomicU32::new(0);
                        for_each(16, |_| {
                            if std::thread::current().id() != me {
                                away.fetch_add(1, Ordering::Relaxed);
                            }
                        });
                        if before && lent.load(Ordering::Acquire) {
                            assert_eq!(away.load(Ordering::Relaxed), 0);
                            seen_lent.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                })
            })
        };
        // Wait until the stepper is inside its step.
        while team.inner.stepping.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let me = std::thread::current().id();
        team.install_lent_as(2, || {
            assert_eq!(threads(), 1);
            lent.store(true, Ordering::Release);
            for_each(64, |_| assert_eq!(std::thread::current().id(), me));
            while seen_lent.load(Ordering::Acquire) < 20 && !stepper.is_finished() {
                std::thread::yield_now();
            }
            lent.store(false, Ordering::Release);
        });
        done.store(true, Ordering::Release);
        stepper.join().unwrap();
        assert_eq!(team.inner.lent.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_lent_step_with_nobody_else_stepping_holds_the_whole_team() {
        let team = Team::new(2, "test-team").unwrap();
        // Past the busy gap of the team's start.
        std::thread::sleep(Duration::from_micros(BUSY_GAP_US * 2));
        team.install_lent_as(2, || {
            assert_eq!(threads(), 2);
            let hits: Vec<AtomicU32> = (0..256).map(|_| AtomicU32::new(0)).collect();
            for_each(hits.len(), |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        });
        assert_eq!(team.inner.stepping.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_one_thread_team_runs_inline() {
        let team = Team::new(1, "test-team").unwrap();
        let id = std::thread::current().id();
        team.install(|| for_each(5, |_| assert_eq!(std::thread::current().id(), id)));
    }
}
