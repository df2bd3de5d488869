//! Speech or silence, 10 ms at a time: the frame's RMS level against a
//! threshold that follows the loudest speech heard so far (30 dB below it,
//! never below -50 dBFS), so quiet and loud voices are judged alike.

/// Frames per second.
pub const FRAMES_PER_SECOND: u32 = 100;

/// How far below the running peak a frame still counts as speech, in dB.
const BELOW_PEAK_DB: f32 = 30.0;
/// Nothing quieter than this is speech, in dBFS.
const FLOOR_DB: f32 = -50.0;

/// Cuts a stream of samples into 10 ms frames and classifies each.
pub struct Voicing {
    hop: usize,
    acc: f64,
    n: usize,
    peak_db: f32,
}

impl Voicing {
    pub fn new(sample_rate: u32) -> Self {
        Voicing {
            hop: (sample_rate / FRAMES_PER_SECOND).max(1) as usize,
            acc: 0.0,
            n: 0,
            peak_db: FLOOR_DB,
        }
    }

    /// Samples per frame.
    pub fn hop(&self) -> usize {
        self.hop
    }

    /// Feeds `samples`, calling `frame(speech, level_db)` for each frame
    /// completed.
    pub fn push(&mut self, samples: &[f32], mut frame: impl FnMut(bool, f32)) {
        for &s in samples {
            let s = if s.is_finite() { s as f64 } else { 0.0 };
            self.acc += s * s;
            self.n += 1;
            if self.n == self.hop {
                let rms = (self.acc / self.n as f64).sqrt();
                let db = if rms > 0.0 {
                    20.0 * rms.log10() as f32
                } else {
                    -200.0
                };
                self.peak_db = self.peak_db.max(db);
                frame(db > FLOOR_DB.max(self.peak_db - BELOW_PEAK_DB), db);
                self.acc = 0.0;
                self.n = 0;
            }
        }
    }

    /// Samples of the frame in progress.
    pub fn partial(&self) -> usize {
        self.n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tone_is_speech_and_silence_is_not() {
        let mut v = Voicing::new(16000);
        let mut frames = Vec::new();
        let tone: Vec<f32> = (0..1600).map(|i| 0.3 * (i as f32 * 0.2).sin()).collect();
        v.push(&tone, |s, _| frames.push(s));
        v.push(&[0.0; 1600], |s, _| frames.push(s));
        v.push(&[0.0; 80], |s, _| frames.push(s));
        assert_eq!(frames.len(), 20);
        assert!(frames[..10].iter().all(|&s| s));
        assert!(frames[10..].iter().all(|&s| !s));
        assert_eq!(v.partial(), 80);
    }

    #[test]
    fn quiet_hiss_after_loud_speech_is_silence() {
        let mut v = Voicing::new(8000);
        let mut frames = Vec::new();
        let loud: Vec<f32> = (0..800).map(|i| 0.5 * (i as f32 * 0.3).sin()).collect();
        let hiss: Vec<f32> = (0..800).map(|i| 0.005 * (i as f32 * 1.7).sin()).collect();
        v.push(&loud, |s, _| frames.push(s));
        v.push(&hiss, |s, _| frames.push(s));
        assert!(frames[10..].iter().all(|&s| !s));
    }
}

/// Syllable nuclei: peaks of the smoothed level (30 ms) that rise and fall
/// by at least [`NUCLEUS_DIP_DB`] around them, at least 80 ms apart, in
/// speech. A vowel is the loudest part of its syllable, so in speech they
/// come about one per syllable; their rate, scaled by what the text says a
/// syllable weighs, is the speaking rate heard.
#[derive(Default)]
pub struct Nuclei {
    recent: [f32; 3],
    n: usize,
    frame: usize,
    low: Option<f32>,
    candidate: Option<(usize, f32)>,
    last_peak: Option<usize>,
}

/// How far a nucleus rises above the dip before it and falls after it, dB.
pub const NUCLEUS_DIP_DB: f32 = 3.0;
const MIN_NUCLEUS_GAP: usize = 8;

impl Nuclei {
    /// Takes the next frame; true when it confirms a nucleus.
    pub fn push(&mut self, speech: bool, db: f32) -> bool {
        self.recent[self.n % 3] = db.max(-100.0);
        self.n += 1;
        self.frame += 1;
        let e = self.recent[..self.n.min(3)].iter().sum::<f32>() / self.n.min(3) as f32;
        if !speech {
            // Silence ends a rise: its peak counts.
            let counted = self.candidate.take().is_some();
            self.low = Some(e);
            if counted {
                self.last_peak = Some(self.frame);
            }
            return counted;
        }
        let low = *self.low.get_or_insert(e);
        match self.candidate {
            None => {
                if e > low + NUCLEUS_DIP_DB {
                    self.candidate = Some((self.frame, e));
                } else {
                    self.low = Some(low.min(e));
                }
                false
            }
            Some((f, peak)) => {
                if e > peak {
                    self.candidate = Some((self.frame, e));
                    false
                } else if e < peak - NUCLEUS_DIP_DB
                    && self.last_peak.is_none_or(|p| f >= p + MIN_NUCLEUS_GAP)
                {
                    self.last_peak = Some(f);
                    self.candidate = None;
                    self.low = Some(e);
                    true
                } else {
                    false
                }
            }
        }
    }
}
