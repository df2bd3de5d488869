//! Barge-in: the client's microphone audio through the VAD, and when speech
//! starts while contexts are open (and the session asked for it), every
//! context is cancelled. Pure parts here: when an onset arrived (the input
//! clock), whether it interrupts, and how long the interruption took; the
//! connection sends the events and cancels.

use std::collections::VecDeque;
use tokio::time::Instant;

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn onset_is_dated_by_the_latest_piece_starting_at_or_before_it() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut c = VadClock::default();
        c.stamp(0.0, 60, at(0));
        c.stamp(100.0, 60, at(100));
        c.stamp(200.0, 60, at(250));
        assert_eq!(c.arrival(150.0), Some(at(100)));
        assert_eq!(c.arrival(200.0), Some(at(250)));
        assert_eq!(c.arrival(-1.0), None);
    }

    #[test]
    fn clock_drops_stamps_older_than_the_confirmation_delay() {
        let t0 = Instant::now();
        let mut c = VadClock::default();
        // 20 ms pieces, onsets confirmed within 60 ms + two 20 ms windows:
        // the clock stays a handful of entries long, not one per piece.
        for i in 0..1000 {
            c.stamp(i as f64 * 20.0, 60, t0);
        }
        assert!(c.len() <= 7, "{} stamps kept", c.len());
        assert!(c.arrival(999.0 * 20.0 - 100.0).is_some());
    }

    #[test]
    fn clock_is_capped_even_when_the_horizon_keeps_everything() {
        let t0 = Instant::now();
        let mut c = VadClock::default();
        // Pieces of zero length never leave the horizon.
        for _ in 0..VAD_CLOCK + 10 {
            c.stamp(0.0, 5000, t0);
        }
        assert_eq!(c.len(), VAD_CLOCK);
        c.clear();
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn speech_interrupts_only_with_barge_in_on_and_something_open() {
        let on = Vad::default();
        let off = Vad {
            barge_in: false,
            ..Vad::default()
        };
        assert!(interrupts(&on, 1));
        assert!(!interrupts(&on, 0));
        assert!(!interrupts(&off, 3));
    }

    #[test]
    fn interruption_runs_from_onset_to_the_last_frame_sent() {
        let on = Instant::now();
        let later = on + Duration::from_millis(120);
        let ms = interruption_ms(Some(on), true, Some(later)).expect("measured");
        assert!((ms - 120.0).abs() < 1e-6, "{ms}");
        // A frame sent before the onset: no interruption to speak of.
        assert_eq!(interruption_ms(Some(later), true, Some(on)), Some(0.0));
        assert_eq!(interruption_ms(Some(on), true, None), Some(0.0));
        // Not started, or not cancelled by speech: no figure.
        assert_eq!(interruption_ms(Some(on), false, Some(later)), None);
        assert_eq!(interruption_ms(None, true, Some(later)), None);
    }
}
