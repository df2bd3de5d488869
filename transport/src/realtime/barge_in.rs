//! Barge-in: the client's microphone audio through the VAD, and when speech
//! starts while contexts are open (and the session asked for it), every
//! context is cancelled. Pure parts here: when an onset arrived (the input
//! clock), whether it interrupts, and how long the interruption took; the
//! connection sends the events and cancels.

use std::collections::VecDeque;
use std::time::Instant;

use crate::protocol::Vad;
use crate::vad::WINDOW_MS;

/// Input-audio arrival stamps kept to date a speech onset (a hard cap; in
/// practice only the stamps within the detector's confirmation delay stay).
pub const VAD_CLOCK: usize = 256;

/// When each piece of input audio arrived, by its start in input time, so a
/// speech onset (in input ms) can be dated on the server's clock.
#[derive(Default)]
pub struct VadClock {
    /// (input time at the start of a piece, when it arrived).
    stamps: VecDeque<(f64, Instant)>,
}

impl VadClock {
    /// A piece starting at input time `pos_ms` arrived at `now`. An onset
    /// detected in this piece lies at most `min_speech_ms` (plus two windows
    /// of rounding) before it: older stamps are never looked up again, so
    /// the clock stays a few entries long.
    pub fn stamp(&mut self, pos_ms: f64, min_speech_ms: u32, now: Instant) {
        let horizon = pos_ms - min_speech_ms as f64 - 2.0 * WINDOW_MS;
        while self.stamps.len() >= 2 && self.stamps[1].0 <= horizon {
            self.stamps.pop_front();
        }
        if self.stamps.len() == VAD_CLOCK {
            self.stamps.pop_front();
        }
        self.stamps.push_back((pos_ms, now));
    }

    /// When the onset at input time `onset_ms` arrived: with the latest
    /// piece that starts at or before it (`None` if none is remembered).
    pub fn arrival(&self, onset_ms: f64) -> Option<Instant> {
        self.stamps
            .iter()
            .rev()
            .find(|(start, _)| *start <= onset_ms + 1e-9)
            .map(|(_, t)| *t)
    }

    pub fn len(&self) -> usize {
        self.stamps.len()
    }

    pub fn clear(&mut self) {
        self.stamps.clear();
    }
}

/// A speech onset cancels every open context when the session enabled
/// barge-in and something is open to interrupt.
pub fn interrupts(vad: &Vad, open_contexts: usize) -> bool {
    vad.barge_in && open_contexts > 0
}

/// `interruption_ms` of a cancelled context: from the speech onset to the
/// last frame sent (0 if none was sent), for a context that had started
/// speaking and was cancelled by an onset; `None` otherwise.
pub fn interruption_ms(
    onset: Option<Instant>,
    started: bool,
    last_sent: Option<Instant>,
) -> Option<f64> {
    match (onset, started) {
        (Some(on), true) => {
            Some(last_sent.map_or(0.0, |t| t.saturating_duration_since(on).as_secs_f64() * 1e3))
        }
        _ => None,
    }
}
