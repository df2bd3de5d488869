//! Speaking faster or slower at the same pitch: OpenAI's `speed`.
//!
//! [`Stretch`] changes the tempo of a mono stream by WSOLA (waveform-similarity
//! overlap-add, the `wsola` crate): the signal is cut into 30 ms Hann frames
//! that are laid back down at a new spacing, each one placed where its
//! waveform best continues the last, so duration changes and pitch does not.
//! It streams: whatever is pushed comes out as soon as a frame is complete
//! (about 42 ms of look-ahead at any rate), and the output does not depend
//! on how the input was chunked — it equals one run over the whole signal,
//! so chunk boundaries cannot click. The stream ends at exactly
//! `round(input / speed)` samples (WSOLA's edges leave it ~10 ms long or
//! short; the tail is trimmed or padded with silence at the end). Speed 1.0
//! is an exact pass-through.

use std::num::{NonZeroU16, NonZeroU32};

/// The slowest speed, as OpenAI's API allows.
pub const MIN_SPEED: f32 = 0.25;
/// The fastest speed, as OpenAI's API allows.
pub const MAX_SPEED: f32 = 4.0;

/// Why a stretcher cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StretchError {
    #[error("speed {0} is out of range: give a number from 0.25 to 4.0 (1.0 is the natural rate)")]
    Speed(f32),
    #[error("sample rate {0} Hz cannot be time-stretched")]
    Rate(u32),
}

/// A streaming, pitch-preserving tempo change of a mono signal.
pub struct Stretch {
    /// None at speed 1.0: samples pass through untouched.
    ts: Option<wsola::TimeStretch>,
    scratch: Vec<f32>,
    speed: f64,
    /// Samples taken and handed out in this stream.
    taken: u64,
    given: u64,
}

impl Stretch {
    /// A stretcher for `rate` Hz mono audio that plays `speed` times as fast
    /// (2.0: half the duration; 0.5: twice).
    pub fn new(rate: u32, speed: f32) -> Result<Self, StretchError> {
        if !speed.is_finite() || !(MIN_SPEED..=MAX_SPEED).contains(&speed) {
            return Err(StretchError::Speed(speed));
        }
        if speed == 1.0 {
            return Ok(Stretch {
                ts: None,
                scratch: Vec::new(),
                speed: 1.0,
                taken: 0,
                given: 0,
            });
        }
        let sr = NonZeroU32::new(rate).ok_or(StretchError::Rate(rate))?;
        let mut ts =
            wsola::TimeStretch::new(sr, NonZeroU16::MIN).map_err(|_| StretchError::Rate(rate))?;
        ts.set_tempo(speed);
        // A few hops per pull: small enough to hand audio on promptly.
        let scratch = vec![0.0; ts.min_output_buff_size() * 8];
        Ok(Stretch {
            ts: Some(ts),
            scratch,
            speed: speed as f64,
            taken: 0,
            given: 0,
        })
    }

    /// Whether this stretcher changes anything (speed is not 1.0).
    pub fn is_active(&self) -> bool {
        self.ts.is_some()
    }

    /// Takes `samples`; appends to `out` the stretched samples now complete.
    pub fn push(&mut self, samples: &[f32], out: &mut Vec<f32>) {
        match &mut self.ts {
            None => out.extend_from_slice(samples),
            Some(ts) => {
                let before = out.len();
                ts.push(samples);
                drain(ts, &mut self.scratch, out);
                self.taken += samples.len() as u64;
                self.given += (out.len() - before) as u64;
            }
        }
    }

    /// Ends the stream: appends the rest. The stretcher can then start a
    /// new stream.
    pub fn finish(&mut self, out: &mut Vec<f32>) {
        if let Some(ts) = &mut self.ts {
            let before = out.len();
            ts.set_draining();
            drain(ts, &mut self.scratch, out);
            // The exact length: trim what the drain added past it, or pad
            // the end with silence.
            let want = (self.taken as f64 / self.speed).round() as u64;
            let have = self.given + (out.len() - before) as u64;
            if have > want {
                let cut = ((have - want) as usize).min(out.len() - before);
                out.truncate(out.len() - cut);
            } else {
                out.resize(out.len() + (want - have) as usize, 0.0);
            }
            self.taken = 0;
            self.given = 0;
        }
    }
}

/// Pulls everything `ts` can produce into `out`.
fn drain(ts: &mut wsola::TimeStretch, scratch: &mut [f32], out: &mut Vec<f32>) {
    loop {
        match ts.pull(scratch) {
            Ok(n) => {
                out.extend_from_slice(&scratch[..n]);
                if n < scratch.len() {
                    return;
                }
            }
            // Not enough input for another frame: the rest comes with the
            // next push (or the drain). The scratch size is always valid.
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: u32 = 24_000;

    /// A voiced-speech-like signal: a 150 Hz fundamental with harmonics
    /// under a slow amplitude envelope.
    fn voiced(seconds: f32) -> Vec<f32> {
        let n = (seconds * RATE as f32) as usize;
        (0..n)
            .map(|i| {
                let t = i as f32 / RATE as f32;
                let env = 0.6 + 0.4 * (std::f32::consts::TAU * 2.0 * t).sin();
                let f = std::f32::consts::TAU * 150.0 * t;
                env * (0.5 * f.sin() + 0.25 * (2.0 * f).sin() + 0.12 * (3.0 * f).sin())
            })
            .collect()
    }

    fn run(x: &[f32], speed: f32, chunk: usize) -> Vec<f32> {
        let mut s = Stretch::new(RATE, speed).unwrap();
        let mut out = Vec::new();
        for c in x.chunks(chunk) {
            s.push(c, &mut out);
        }
        s.finish(&mut out);
        out
    }

    /// The fundamental by autocorrelation over 60-400 Hz.
    fn f0(x: &[f32]) -> f32 {
        let x = &x[x.len() / 4..x.len() * 3 / 4];
        let (lo, hi) = ((RATE / 400) as usize, (RATE / 60) as usize);
        let best = (lo..hi)
            .max_by(|&a, &b| {
                let ac = |lag: usize| -> f32 { x.iter().zip(&x[lag..]).map(|(p, q)| p * q).sum() };
                ac(a).total_cmp(&ac(b))
            })
            .unwrap();
        RATE as f32 / best as f32
    }

    #[test]
    fn half_and_double_speed_change_duration_within_2_percent_and_keep_the_pitch() {
        let x = voiced(4.0);
        for (speed, want) in [(0.5f32, 2.0f32), (2.0, 0.5), (1.5, 1.0 / 1.5)] {
            let y = run(&x, speed, 1920);
            let exact = (x.len() as f64 / speed as f64).round() as usize;
            assert_eq!(y.len(), exact, "speed {speed}: the exact length");
            let ratio = y.len() as f32 / x.len() as f32;
            assert!(
                (ratio / want - 1.0).abs() < 0.02,
                "speed {speed}: duration ratio {ratio}, want {want}"
            );
            let (a, b) = (f0(&x), f0(&y));
            assert!((b / a - 1.0).abs() < 0.02, "speed {speed}: f0 {a} -> {b}");
            assert!(y.iter().all(|v| v.is_finite()));
        }
    }

    #[test]
    fn streamed_output_does_not_depend_on_the_chunking() {
        let x = voiced(2.0);
        let whole = run(&x, 1.7, x.len());
        for chunk in [1, 333, 1920, 7680] {
            assert_eq!(run(&x, 1.7, chunk), whole, "chunk {chunk}");
        }
    }

    #[test]
    fn a_short_stream_ends_at_its_exact_length_too() {
        // One second of audio at 12.5 frames/s: 0.96 s, the tests' size.
        let x = voiced(0.96);
        for speed in [0.25f32, 0.5, 2.0, 4.0] {
            let y = run(&x, speed, 1920);
            assert_eq!(y.len(), (x.len() as f64 / speed as f64).round() as usize);
        }
    }

    #[test]
    fn output_arrives_while_the_input_streams() {
        let x = voiced(1.0);
        let mut s = Stretch::new(RATE, 2.0).unwrap();
        let mut out = Vec::new();
        s.push(&x[..RATE as usize / 5], &mut out);
        assert!(!out.is_empty(), "200 ms in, nothing out yet");
    }

    #[test]
    fn speed_one_is_an_exact_pass_through() {
        let x = voiced(0.5);
        let s = Stretch::new(RATE, 1.0).unwrap();
        assert!(!s.is_active());
        assert_eq!(run(&x, 1.0, 100), x);
    }

    #[test]
    fn out_of_range_speeds_are_refused_by_name() {
        for bad in [0.0f32, 0.2, 4.5, f32::NAN, -1.0] {
            let e = Stretch::new(RATE, bad).err().unwrap();
            assert!(e.to_string().contains("0.25 to 4.0"), "{e}");
        }
        assert!(Stretch::new(RATE, 0.25).is_ok());
        assert!(Stretch::new(RATE, 4.0).is_ok());
    }
}
