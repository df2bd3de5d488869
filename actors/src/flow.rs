//! Per-request flow control between the router and the consumer.
//!
//! The router counts the samples it accepts for a request (`produced`); the
//! consumer counts what it has acknowledged (`consumed`: explicit `ack(seq)`
//! or, in auto-ack mode, every chunk it receives). The difference is the
//! request's undelivered/unacknowledged audio. The talker reads it before
//! each step and pauses only that request while it is above the soft bound;
//! the router fails the request past the hard bound. Lock-free on the read
//! side: two relaxed atomics per check.
//!
//! The gate also keeps each stream's buffer slack — the audio sent and
//! not yet played — which the stage schedulers order their work by
//! ([`crate::slack`]): from the acks where the client acknowledges what it
//! played ([`FlowGate::acks_report_playback`]), from wall time where not
//! (a listener that starts playing at the first chunk, or the prebuffer its
//! client declared after it ([`FlowGate::with_listener_prebuffer`]), and
//! plays on in real time, pausing when its buffer runs dry).
//!
//! Live text is flow control too, the other way round: the caller feeds
//! the talker's text through a [`LiveFeed`], and the talker parks a request
//! whose next step needs text that has not come, leaving a [`StageWaker`]
//! that the next push fires.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix::{Message, Recipient};
use tts_models::live_text::LiveRows;
use tts_models::TalkerState;

#[derive(Debug)]
pub struct FlowGate {
    produced: AtomicU64,
    consumed: AtomicU64,
    soft_limit: u64,
    /// Cumulative end sample of each chunk, by seq (for `ack(seq)`).
    ends: Mutex<Vec<u64>>,
    /// Samples per second of `produced` and `consumed`.
    sample_rate: u32,
    /// When the request was admitted (its wait for a first chunk).
    created: Instant,
    /// The wall-time listener (slack without playback acks).
    player: Mutex<Player>,
    /// The consumer acknowledges what it played, not what it received: the
    /// acks are the slack ([`Self::acks_report_playback`]).
    playback_acks: AtomicBool,
}

/// A listener modelled from wall time: playback starts at the first chunk
/// (after `delay`: the prebuffer its client declared) and runs in real
/// time, pausing while nothing is buffered.
#[derive(Debug, Default)]
struct Player {
    /// Samples played by `at`; `None` before the first chunk. `at` lies
    /// ahead of the clock while the listener fills its prebuffer.
    played: Option<(f64, Instant)>,
    /// From the first chunk to the start of playback.
    delay: Duration,
}

impl FlowGate {
    pub fn new(soft_limit_samples: u64, sample_rate: u32) -> Self {
        Self::created_at(soft_limit_samples, sample_rate, Instant::now())
    }

    /// [`Self::new`], admitted at `created` (tests control time with it).
    pub fn created_at(soft_limit_samples: u64, sample_rate: u32, created: Instant) -> Self {
        FlowGate {
            produced: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            soft_limit: soft_limit_samples,
            ends: Mutex::new(Vec::new()),
            sample_rate: sample_rate.max(1),
            created,
            player: Mutex::new(Player::default()),
            playback_acks: AtomicBool::new(false),
        }
    }

    /// This gate's wall-time listener holds `prebuffer` before it starts
    /// playing (what the client declared, [`crate::Session::with_prebuffer`]):
    /// its slack counts that audio as in hand. Without it the listener plays
    /// from the first chunk, which never takes a stream for further ahead
    /// than it is. Acks that report playback replace the model either way.
    pub fn with_listener_prebuffer(mut self, prebuffer: Duration) -> Self {
        self.player
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .delay = prebuffer;
        self
    }

    /// Router: a chunk of `n` samples with sequence number `seq` was accepted.
    pub fn produced(&self, seq: u64, n: u64) {
        self.produced_at(seq, n, Instant::now());
    }

    /// [`Self::produced`] at `now`.
    pub fn produced_at(&self, seq: u64, n: u64, now: Instant) {
        {
            let mut p = self.player.lock().unwrap_or_else(|e| e.into_inner());
            let before = self.produced.load(Ordering::Acquire);
            match p.played {
                // The first chunk: playback starts after the prebuffer.
                None => p.played = Some((0.0, now + p.delay)),
                // Still filling the prebuffer: the start stays where it is.
                Some((_, at)) if now < at => {}
                Some(_) => {
                    let played = p.played_by(before, now, self.sample_rate);
                    p.played = Some((played, now));
                }
            }
        }
        let end = self.produced.fetch_add(n, Ordering::AcqRel) + n;
        let mut ends = self.ends.lock().unwrap_or_else(|e| e.into_inner());
        debug_assert_eq!(ends.len() as u64, seq);
        ends.push(end);
    }

    /// The consumer acknowledges audio once played (a player's
    /// `audio.ack`), so the acks measure the listener's buffer.
    pub fn acks_report_playback(&self) {
        self.playback_acks.store(true, Ordering::Release);
    }

    /// Seconds of audio sent and not yet played at `now`: what the
    /// listener has before it underruns. Before the first chunk it is the
    /// wait so far, negated (a newcomer waiting for its first packet comes
    /// before a stream with audio in hand).
    pub fn slack_at(&self, now: Instant) -> f64 {
        let produced = self.produced.load(Ordering::Acquire);
        if produced == 0 {
            return -now.saturating_duration_since(self.created).as_secs_f64();
        }
        let sr = self.sample_rate as f64;
        if self.playback_acks.load(Ordering::Acquire) {
            return self.outstanding() as f64 / sr;
        }
        let p = self.player.lock().unwrap_or_else(|e| e.into_inner());
        (produced as f64 - p.played_by(produced, now, self.sample_rate)) / sr
    }

    /// Consumer: everything up to and including chunk `seq` is acknowledged.
    /// Acks may arrive out of order or twice; only the highest counts.
    pub fn ack(&self, seq: u64) {
        let end = {
            let ends = self.ends.lock().unwrap_or_else(|e| e.into_inner());
            match ends.get(seq as usize) {
                Some(&e) => e,
                None => return,
            }
        };
        self.consumed.fetch_max(end, Ordering::AcqRel);
    }

    /// Samples produced but not yet acknowledged.
    pub fn outstanding(&self) -> u64 {
        self.produced
            .load(Ordering::Acquire)
            .saturating_sub(self.consumed.load(Ordering::Acquire))
    }

    pub fn produced_samples(&self) -> u64 {
        self.produced.load(Ordering::Acquire)
    }

    /// The talker should not generate more frames for this request now.
    pub fn should_pause(&self) -> bool {
        self.outstanding() >= self.soft_limit
    }
}

impl Player {
    /// Samples played by `now` out of `available` sent.
    fn played_by(&self, available: u64, now: Instant, sample_rate: u32) -> f64 {
        match self.played {
            None => 0.0,
            Some((played, at)) => {
                let more = now.saturating_duration_since(at).as_secs_f64() * sample_rate as f64;
                (played + more).min(available as f64)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn outstanding_follows_produce_and_ack() {
        let g = FlowGate::new(100, 24_000);
        g.produced(0, 60);
        assert!(!g.should_pause());
        g.produced(1, 60);
        assert_eq!(g.outstanding(), 120);
        assert!(g.should_pause());
        g.ack(0);
        assert_eq!(g.outstanding(), 60);
        g.ack(0); // duplicate
        g.ack(7); // unknown seq: ignored
        assert_eq!(g.outstanding(), 60);
        g.ack(1);
        assert_eq!(g.outstanding(), 0);
        g.ack(0); // late, lower ack does not move consumed back
        assert_eq!(g.outstanding(), 0);
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A declared prebuffer: the listener starts that long after the first
    /// chunk, so until then everything sent is in hand; a chunk arriving
    /// meanwhile does not move the start; after it, playback runs and
    /// pauses as without one.
    #[test]
    fn a_declared_prebuffer_starts_the_wall_time_listener_late() {
        let t0 = Instant::now();
        let g = FlowGate::created_at(u64::MAX, 1000, t0).with_listener_prebuffer(ms(300));
        assert_eq!(g.slack_at(t0 + ms(100)), -0.1);
        g.produced_at(0, 200, t0 + ms(100));
        assert_eq!(g.slack_at(t0 + ms(300)), 0.2);
        g.produced_at(1, 200, t0 + ms(350));
        assert_eq!(g.slack_at(t0 + ms(400)), 0.4, "playback not started");
        // Playing from 400 ms.
        assert_eq!(g.slack_at(t0 + ms(500)), 0.3);
        g.produced_at(2, 100, t0 + ms(600));
        assert_eq!(g.slack_at(t0 + ms(600)), 0.3);
        // Dry at 900 ms, and stays at zero.
        assert_eq!(g.slack_at(t0 + ms(1200)), 0.0);
        // The same chunks without a declaration: playing from 100 ms.
        let plain = FlowGate::created_at(u64::MAX, 1000, t0);
        plain.produced_at(0, 200, t0 + ms(100));
        assert_eq!(plain.slack_at(t0 + ms(300)), 0.0);
        plain.produced_at(1, 200, t0 + ms(350));
        assert_eq!(plain.slack_at(t0 + ms(400)), 0.15);
    }

    #[test]
    fn slack_is_the_wall_time_listeners_buffer_and_pauses_when_it_runs_dry() {
        let t0 = Instant::now();
        let g = FlowGate::created_at(u64::MAX, 1000, t0);
        // Waiting for the first chunk: the wait, negated.
        assert_eq!(g.slack_at(t0 + ms(150)), -0.15);
        // 500 ms of audio at 200 ms: playing from then on.
        g.produced_at(0, 500, t0 + ms(200));
        assert_eq!(g.slack_at(t0 + ms(200)), 0.5);
        assert_eq!(g.slack_at(t0 + ms(500)), 0.2);
        // Ran dry at 700 ms: nothing left, however long it waits.
        assert_eq!(g.slack_at(t0 + ms(900)), 0.0);
        // The next chunk plays from its arrival: the gap was a pause, not
        // played audio.
        g.produced_at(1, 300, t0 + ms(1000));
        assert_eq!(g.slack_at(t0 + ms(1100)), 0.2);
        // A chunk arriving ahead adds to what is buffered.
        g.produced_at(2, 1000, t0 + ms(1100));
        assert_eq!(g.slack_at(t0 + ms(1100)), 1.2);
    }

    #[test]
    fn slack_is_what_the_player_has_not_acknowledged_when_acks_report_playback() {
        let t0 = Instant::now();
        let g = FlowGate::created_at(u64::MAX, 1000, t0);
        g.acks_report_playback();
        g.produced_at(0, 400, t0);
        g.produced_at(1, 400, t0);
        // Wall time says nothing: the player's acks do.
        assert_eq!(g.slack_at(t0 + ms(5000)), 0.8);
        g.ack(0);
        assert_eq!(g.slack_at(t0 + ms(5000)), 0.4);
    }
}

/// A handle that wakes one stage actor from any thread: the stage then asks
/// its logic for the inputs it parked (`StageLogic::woken`). What the
/// talker hands to a live request's text feed, so text arriving resumes a
/// request held for it at once, with no polling while it waits.
#[derive(Clone)]
pub struct StageWaker(Recipient<Wake>);

/// Sent by a [`StageWaker`]: something a parked input waits for arrived.
pub struct Wake;
impl Message for Wake {
    type Result = ();
}

impl StageWaker {
    pub(crate) fn new(stage: Recipient<Wake>) -> Self {
        StageWaker(stage)
    }

    pub fn wake(&self) {
        // Unbounded on purpose: a wake-up must not be lost to a full
        // mailbox, and several pending wake-ups cost one empty round each.
        self.0.do_send(Wake);
    }
}

impl std::fmt::Debug for StageWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StageWaker")
    }
}

/// One wait of a live request for text: the talker had used every text
/// token it had, the text was still open, and frame `frame` (0-based, of
/// this request) waited `ms` for the next.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TextPause {
    pub frame: u64,
    pub ms: f64,
}

/// Text rows committed by the caller and not yet taken by the talker, and
/// the talker's side of waiting for them.
#[derive(Debug, Default)]
pub struct LiveFeed {
    state: Mutex<FeedState>,
}

#[derive(Debug, Default)]
struct FeedState {
    pending: LiveRows,
    /// Set while the talker has the request parked: woken by the next push.
    waker: Option<StageWaker>,
    /// The wait in progress: its frame and since when.
    waiting: Option<(u64, Instant)>,
    pauses: Vec<TextPause>,
}

impl LiveFeed {
    fn lock(&self) -> std::sync::MutexGuard<'_, FeedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn push(&self, rows: LiveRows) {
        let waker = {
            let mut s = self.lock();
            s.pending.extend(rows);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Talker: moves the pending rows into `talker`.
    pub(crate) fn drain_into(&self, talker: &mut TalkerState) {
        let rows = std::mem::take(&mut self.lock().pending);
        if !rows.is_empty() {
            talker.take_live_rows(rows);
        }
    }

    /// Talker: rows are waiting to be taken.
    pub(crate) fn has_pending(&self) -> bool {
        !self.lock().pending.is_empty()
    }

    /// Talker: frame `frame` needs text that has not come; the request is
    /// parked and `waker` fires on the next push. False (nothing parked)
    /// if rows arrived since the last [`Self::drain_into`]: take them.
    pub(crate) fn park(&self, frame: u64, waker: &StageWaker) -> bool {
        let mut s = self.lock();
        if !s.pending.is_empty() {
            return false;
        }
        s.waker = Some(waker.clone());
        s.waiting.get_or_insert((frame, Instant::now()));
        true
    }

    /// Talker: the request has text for its next frame again; a wait in
    /// progress ends.
    pub(crate) fn resumed(&self) {
        let mut s = self.lock();
        if let Some((frame, since)) = s.waiting.take() {
            let ms = since.elapsed().as_secs_f64() * 1e3;
            s.pauses.push(TextPause { frame, ms });
        }
    }

    /// The talker has the request parked waiting for text right now.
    pub(crate) fn is_waiting(&self) -> bool {
        self.lock().waiting.is_some()
    }

    /// The waits so far, the one in progress (if any) up to now.
    pub(crate) fn pauses(&self) -> Vec<TextPause> {
        let s = self.lock();
        let mut p = s.pauses.clone();
        if let Some((frame, since)) = s.waiting {
            p.push(TextPause {
                frame,
                ms: since.elapsed().as_secs_f64() * 1e3,
            });
        }
        p
    }
}
