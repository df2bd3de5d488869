//! Voice-activity detection on the client's microphone audio (duplex).
//!
//! [`VoiceActivity`] is the seam: the server only needs "speech started at
//! input time t" and "speech stopped at t". [`EnergyVad`] is the default: RMS
//! energy per 20 ms window against a threshold, with hysteresis in time. It
//! is cheap (one multiply-add per sample) and good enough for barge-in on a
//! headset or an echo-cancelled microphone; a model-based detector can
//! replace it behind the same trait.

use crate::protocol::Vad;

/// A speech transition, in milliseconds of input audio since the stream
/// began (input time, not wall time).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum VadEvent {
    /// `onset_ms`: where speech began; `detected_ms`: the input time at
    /// which the detector was sure (onset + its confirmation delay).
    SpeechStarted {
        onset_ms: f64,
        detected_ms: f64,
    },
    SpeechStopped {
        end_ms: f64,
    },
}

pub trait VoiceActivity: Send {
    /// Consumes samples at `sample_rate` and appends transitions to `out`.
    fn push(&mut self, samples: &[f32], sample_rate: u32, out: &mut Vec<VadEvent>);
    /// Input time consumed so far, ms.
    fn position_ms(&self) -> f64;
    /// Forget the stream (new settings).
    fn reset(&mut self);
}

/// Window length: 20 ms is the usual VAD frame (WebRTC VAD uses 10–30 ms).
pub const WINDOW_MS: f64 = 20.0;

#[derive(Debug)]
pub struct EnergyVad {
    cfg: Vad,
    rate: u32,
    window: usize,
    acc: f64,
    filled: usize,
    /// Input time at the start of the current window.
    window_start_ms: f64,
    speaking: bool,
    /// Start of the current run of loud (silent, while speaking) windows.
    run_start_ms: Option<f64>,
}

impl EnergyVad {
    pub fn new(cfg: Vad) -> Self {
        EnergyVad {
            cfg,
            rate: 0,
            window: 0,
            acc: 0.0,
            filled: 0,
            window_start_ms: 0.0,
            speaking: false,
            run_start_ms: None,
        }
    }

    pub fn is_speaking(&self) -> bool {
        self.speaking
    }

    fn end_window(&mut self, out: &mut Vec<VadEvent>) {
        let mean_sq = self.acc / self.filled.max(1) as f64;
        let db = 10.0 * (mean_sq + 1e-20).log10();
        let loud = db > self.cfg.threshold_db as f64;
        let start = self.window_start_ms;
        let end = start + self.filled as f64 * 1e3 / self.rate as f64;
        // While silent we look for a run of loud windows, while speaking for
        // a run of quiet ones.
        let interesting = loud != self.speaking;
        if interesting {
            let run_start = *self.run_start_ms.get_or_insert(start);
            let need = if self.speaking {
                self.cfg.min_silence_ms
            } else {
                self.cfg.min_speech_ms
            } as f64;
            if end - run_start >= need - 1e-9 {
                self.speaking = !self.speaking;
                self.run_start_ms = None;
                out.push(if self.speaking {
                    VadEvent::SpeechStarted {
                        onset_ms: run_start,
                        detected_ms: end,
                    }
                } else {
                    VadEvent::SpeechStopped { end_ms: run_start }
                });
            }
        } else {
            self.run_start_ms = None;
        }
        self.window_start_ms = end;
        self.acc = 0.0;
        self.filled = 0;
    }
}

impl VoiceActivity for EnergyVad {
    fn push(&mut self, samples: &[f32], sample_rate: u32, out: &mut Vec<VadEvent>) {
        if !self.cfg.enabled || sample_rate == 0 {
            return;
        }
        if sample_rate != self.rate {
            // A new rate starts a new window; time keeps running.
            if self.filled > 0 {
                self.window_start_ms += self.filled as f64 * 1e3 / self.rate as f64;
            }
            self.rate = sample_rate;
            self.window = ((sample_rate as f64 * WINDOW_MS / 1e3) as usize).max(1);
            self.acc = 0.0;
            self.filled = 0;
        }
        for &s in samples {
            let s = if s.is_finite() { s as f64 } else { 0.0 };
            self.acc += s * s;
            self.filled += 1;
            if self.filled == self.window {
                self.end_window(out);
            }
        }
    }

    fn position_ms(&self) -> f64 {
        if self.rate == 0 {
            return self.window_start_ms;
        }
        self.window_start_ms + self.filled as f64 * 1e3 / self.rate as f64
    }

    fn reset(&mut self) {
        *self = EnergyVad::new(self.cfg.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(ms: usize, rate: u32, amp: f32) -> Vec<f32> {
        (0..ms * rate as usize / 1000)
            .map(|i| amp * (i as f32 * 0.2).sin())
            .collect()
    }

    #[test]
    fn detects_onset_and_end_with_hysteresis() {
        let mut v = EnergyVad::new(Vad::default());
        let rate = 16000;
        let mut ev = Vec::new();
        v.push(&tone(200, rate, 0.001), rate, &mut ev); // −63 dBFS: room noise
        assert!(ev.is_empty());
        v.push(&tone(40, rate, 0.3), rate, &mut ev); // a 40 ms click: too short
        v.push(&tone(100, rate, 0.001), rate, &mut ev);
        assert!(ev.is_empty(), "{ev:?}");
        // Speech at 340 ms, in 10 ms pieces (streaming).
        for piece in tone(300, rate, 0.3).chunks(160) {
            v.push(piece, rate, &mut ev);
        }
        assert_eq!(
            ev,
            [VadEvent::SpeechStarted {
                onset_ms: 340.0,
                detected_ms: 400.0
            }]
        );
        assert!(v.is_speaking());
        v.push(&tone(600, rate, 0.0), rate, &mut ev);
        assert_eq!(ev[1], VadEvent::SpeechStopped { end_ms: 640.0 });
        assert!((v.position_ms() - 1240.0).abs() < 1e-6);
    }

    #[test]
    fn disabled_detects_nothing() {
        let mut v = EnergyVad::new(Vad {
            enabled: false,
            ..Vad::default()
        });
        let mut ev = Vec::new();
        v.push(&tone(500, 8000, 0.5), 8000, &mut ev);
        assert!(ev.is_empty());
    }
}
