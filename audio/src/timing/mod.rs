//! Word and character timings of synthesized speech, as it streams: which
//! character of the text is heard when.
//!
//! The method reads the waveform with the text (docs/architecture.md,
//! "Timings", says why this one, docs/timings-accuracy.md how well it does):
//!
//! - **The waveform** (`voicing`): every 10 ms frame is speech or silence;
//!   a silence of [`MIN_PAUSE_MS`] or more is a pause, a shorter one (a stop
//!   consonant) is part of the speech around it.
//! - **The text** (`text`): each character's expected share of the spoken
//!   time (syllable-like units), and how strongly a pause is expected after
//!   each word (sentence end, clause mark, plain space).
//! - **Progress**: while speech is heard the text advances at the speaking
//!   rate (units per second of speech); during a pause it stands. At a pause
//!   the position snaps to the best-placed word boundary near it (punctuation
//!   preferred), and the rate is re-estimated from the text spoken so far
//!   and the speech time it took, shrunk toward the prior
//!   ([`DEFAULT_RATE`], scaled by the speed).
//! - **Utterances**: the caller says where the text of one model request
//!   ends ([`Aligner::end_utterance`]): everything left of it is spread over
//!   the speech that remains, so errors never carry over to the next
//!   request.
//!
//! Timings are *settled* in order and never revised: [`Aligner::push_audio`]
//! returns the characters whose end the audio pushed so far has passed, so a
//! caller sends each chunk's timings with (before) that chunk's audio and a
//! client that stops playing holds the timings of everything it played.
//! Settled timings are contiguous (each character starts where the last
//! ended), cover every character pushed exactly once, in order, and never
//! end after the audio pushed so far. Whitespace and punctuation take the
//! pauses; a word is timed from its first to its last spoken character.

mod text;
mod transcript;
mod voicing;
mod words;

#[cfg(test)]
mod tests;

pub use text::Class;
pub use transcript::{Settled, Transcript};
pub use words::{WordTiming, Words};

use text::pause_score;
use voicing::{Nuclei, Voicing, FRAMES_PER_SECOND};

/// The shortest silence that counts as a pause, in ms.
pub const MIN_PAUSE_MS: u32 = 120;
/// The speaking rate before any speech is heard, in text units (see
/// `text`) per second of speech, at speed 1.
pub const DEFAULT_RATE: f64 = 7.0;
/// How many seconds of speech the prior rate weighs as.
const PRIOR_SECONDS: f64 = 0.5;
/// The spread of syllables counted by nuclei (log ratio to the text's).
const NUCLEI_SIGMA: f64 = 0.3;

const MIN_PAUSE_FRAMES: usize = (MIN_PAUSE_MS * FRAMES_PER_SECOND / 1000) as usize;

/// When one character of the text is heard.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CharTiming {
    /// Its index among the characters (`char`s) pushed so far.
    pub index: usize,
    pub ch: char,
    /// Seconds from the first sample pushed.
    pub start: f64,
    pub end: f64,
}

#[derive(Clone, Copy, Debug)]
struct TChar {
    ch: char,
    class: Class,
    /// Units of the utterance before and after this character.
    u0: f64,
    u1: f64,
    /// Syllables of the utterance up to and including it.
    s1: f64,
}

#[derive(Clone, Copy, Debug)]
struct Frame {
    speech: bool,
    /// Units of the utterance spoken by the end of this frame.
    u: f64,
}

/// Streams timings for one context's text and audio (see the module docs).
pub struct Aligner {
    sample_rate: u32,
    voicing: Voicing,
    /// Samples pushed so far (all utterances).
    samples: u64,
    /// Every character pushed, with the units of its utterance.
    chars: Vec<TChar>,
    /// The current utterance's first character.
    utt_start: usize,
    /// Its text is complete (no more will be pushed into it).
    utt_closed: bool,
    /// Frames of the current utterance; `frame0`: the absolute index of
    /// `frames[0]`.
    frames: Vec<Frame>,
    frame0: u64,
    /// Trailing silent frames of the current utterance.
    run: usize,
    heard_speech: bool,
    /// Speech frames of the utterance (pauses and leading silence excluded).
    speech_frames: usize,
    /// The last frame a snap fixed, and the units there.
    anchor: Option<(usize, f64)>,
    /// Units per second of speech, and how many times it was learned.
    rate: f64,
    observations: u32,
    /// Syllable nuclei heard in the utterance, and how many syllables of
    /// text one nucleus stands for (learned at anchors).
    nuclei_detector: Nuclei,
    nuclei: usize,
    bias: f64,
    /// Speech frames heard while progress waited at a barrier, and the
    /// last barrier released.
    at_barrier: usize,
    released: Option<f64>,
    /// Speech frames of the utterance at the last anchor.
    anchor_speech: usize,
    /// Most of the utterance's syllables are CJK characters.
    utt_tonal: bool,
    prior: f64,
    /// Characters settled; the end time of the last one.
    settled: usize,
    settled_end: f64,
    /// Where the next search for a time begins (a frame index).
    cursor: usize,
}

impl Aligner {
    /// An aligner for audio at `sample_rate` spoken at `speed` (1.0: the
    /// model's natural rate; the prior rate scales with it).
    pub fn new(sample_rate: u32, speed: f64) -> Self {
        let speed = if speed.is_finite() && speed > 0.0 {
            speed
        } else {
            1.0
        };
        Aligner {
            sample_rate: sample_rate.max(1),
            voicing: Voicing::new(sample_rate.max(1)),
            samples: 0,
            chars: Vec::new(),
            utt_start: 0,
            utt_closed: false,
            frames: Vec::new(),
            frame0: 0,
            run: 0,
            heard_speech: false,
            speech_frames: 0,
            anchor: None,
            rate: DEFAULT_RATE * speed,
            observations: 0,
            nuclei_detector: Nuclei::default(),
            nuclei: 0,
            bias: 1.0,
            at_barrier: 0,
            released: None,
            anchor_speech: 0,
            utt_tonal: false,
            prior: DEFAULT_RATE * speed,
            settled: 0,
            settled_end: 0.0,
            cursor: 0,
        }
    }

    /// Characters pushed so far.
    pub fn len(&self) -> usize {
        self.chars.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    /// Characters settled so far.
    pub fn settled(&self) -> usize {
        self.settled
    }

    /// Whether the current utterance's text is complete.
    pub fn utterance_closed(&self) -> bool {
        self.utt_closed
    }

    /// Seconds of audio pushed so far.
    pub fn audio_seconds(&self) -> f64 {
        self.samples as f64 / self.sample_rate as f64
    }

    /// The character at `index`, if pushed.
    pub fn char_at(&self, index: usize) -> Option<char> {
        self.chars.get(index).map(|c| c.ch)
    }

    /// Appends `text` to what the current utterance speaks (a new utterance
    /// begins after [`Aligner::end_utterance`]).
    pub fn push_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.utt_closed {
            self.begin_utterance();
        }
        // The word open at the end of the text so far is weighed again
        // with its continuation (nothing of it is settled: see `cap`).
        let mut from = self.chars.len();
        while from > self.utt_start.max(self.settled) && !self.chars[from - 1].class.breaks_words()
        {
            from -= 1;
        }
        let mut all: Vec<char> = self.chars[from..].iter().map(|c| c.ch).collect();
        all.extend(text.chars());
        let mut ws = Vec::with_capacity(all.len());
        text::weights(&all, &mut ws);
        self.chars.truncate(from);
        let last = self.chars[self.utt_start..].last();
        let mut u = last.map_or(0.0, |c| c.u1);
        let mut syl = last.map_or(0.0, |c| c.s1);
        for (ch, (w, s)) in all.into_iter().zip(ws) {
            syl += s;
            self.chars.push(TChar {
                ch,
                class: Class::of(ch),
                u0: u,
                u1: u + w,
                s1: syl,
            });
            u += w;
        }
        let utt = &self.chars[self.utt_start..];
        let cjk = utt.iter().filter(|c| c.class == Class::Cjk).count() as f64;
        self.utt_tonal = cjk > 0.5 * utt.last().map_or(0.0, |c| c.s1);
    }

    /// Text that is not spoken (dropped before it reached the model): its
    /// characters are settled at once, with no duration, where the audio
    /// stands. Ends the current utterance first.
    pub fn skip_text(&mut self, text: &str, out: &mut Vec<CharTiming>) {
        self.end_utterance(out);
        let t = self.settled_end.max(self.audio_seconds_framed());
        for ch in text.chars() {
            let index = self.chars.len();
            self.chars.push(TChar {
                ch,
                class: Class::of(ch),
                u0: 0.0,
                u1: 0.0,
                s1: 0.0,
            });
            out.push(CharTiming {
                index,
                ch,
                start: t.max(self.settled_end),
                end: t.max(self.settled_end),
            });
            self.settled = index + 1;
            self.settled_end = t.max(self.settled_end);
        }
        self.utt_start = self.chars.len();
    }

    /// Feeds the next audio and appends the timings it settles to `out`.
    pub fn push_audio(&mut self, samples: &[f32], out: &mut Vec<CharTiming>) {
        if self.utt_closed && self.settled == self.chars.len() && !self.frames.is_empty() {
            // Audio after a finished utterance belongs to the next one.
            self.begin_utterance();
        }
        self.samples += samples.len() as u64;
        let mut flags = Vec::with_capacity(samples.len() / self.voicing.hop() + 1);
        self.voicing.push(samples, |s, db| flags.push((s, db)));
        for (speech, db) in flags {
            if self.nuclei_detector.push(speech, db) {
                self.nuclei += 1;
                self.update_rate();
            }
            self.frame(speech);
        }
        self.settle(out, false);
    }

    /// The audio pushed so far carries all the current utterance's text:
    /// settles the rest of it (spread over the speech left) and appends
    /// those timings to `out`. The next text pushed starts a new utterance.
    pub fn end_utterance(&mut self, out: &mut Vec<CharTiming>) {
        if self.utt_start == self.chars.len() && self.utt_closed {
            return;
        }
        self.utt_closed = true;
        let total = self.utt_units();
        let settled_u = self.settled_units();
        // Spread the units left over the speech frames after the last
        // settled time (all of them when none is left after it).
        let from = self.frame_at(self.settled_end).min(self.frames.len());
        for f in self.cursor.min(from)..from {
            self.frames[f].u = self.frames[f].u.min(settled_u);
        }
        let speech: Vec<usize> = (from..self.frames.len())
            .filter(|&f| self.frames[f].speech)
            .collect();
        if !speech.is_empty() {
            let step = (total - settled_u).max(0.0) / speech.len() as f64;
            let mut u = settled_u;
            for f in from..self.frames.len() {
                if self.frames[f].speech {
                    u += step;
                }
                self.frames[f].u = u;
            }
            if let Some(last) = speech.last() {
                self.frames[*last].u = total;
            }
            if speech_seconds(self.speech_frames) > 0.5 {
                self.observe(
                    total,
                    self.syllables_at(total),
                    self.speech_frames,
                    self.nuclei,
                );
                // What this utterance taught is the next one's prior.
                self.prior = self.rate;
            }
        } else {
            for f in from..self.frames.len() {
                self.frames[f].u = total;
            }
        }
        self.settle(out, true);
    }

    /// Ends the text and settles everything (the context is done).
    pub fn finish(&mut self, out: &mut Vec<CharTiming>) {
        self.end_utterance(out);
    }

    fn begin_utterance(&mut self) {
        self.frame0 += self.frames.len() as u64;
        self.frames.clear();
        self.utt_start = self.chars.len();
        self.utt_closed = false;
        self.run = 0;
        self.heard_speech = false;
        self.speech_frames = 0;
        self.anchor = None;
        self.cursor = 0;
        self.nuclei = 0;
        self.at_barrier = 0;
        self.released = None;
        self.anchor_speech = 0;
    }

    /// Syllables of the utterance text up to `units`.
    fn syllables_at(&self, units: f64) -> f64 {
        self.chars[self.utt_start..]
            .iter()
            .take_while(|c| c.u1 <= units + 1e-9)
            .last()
            .map_or(0.0, |c| c.s1)
    }

    /// Units per syllable of the utterance's text so far.
    fn units_per_syllable(&self) -> f64 {
        match self.chars[self.utt_start..].last() {
            Some(c) if c.s1 > 0.0 => c.u1 / c.s1,
            _ => 1.6,
        }
    }

    /// The rate from the nuclei heard, shrunk toward the prior.
    fn update_rate(&mut self) {
        let seconds = speech_seconds(self.speech_frames);
        if seconds <= 0.0 {
            return;
        }
        if !self.nuclei_work() {
            return;
        }
        let heard = self.nuclei as f64 * self.bias / seconds * self.units_per_syllable();
        let rate = (heard * seconds + self.prior * PRIOR_SECONDS) / (seconds + PRIOR_SECONDS);
        self.rate = rate.clamp(self.prior * 0.4, self.prior * 2.5);
    }

    fn utt_units(&self) -> f64 {
        self.chars[self.utt_start..].last().map_or(0.0, |c| c.u1)
    }

    /// Units of the current utterance settled so far.
    fn settled_units(&self) -> f64 {
        if self.settled > self.utt_start {
            self.chars[self.settled - 1].u1
        } else {
            0.0
        }
    }

    /// How far progress may go now: to the end of a closed text, else to
    /// the start of a last word that may still grow.
    fn cap(&self) -> f64 {
        let utt = &self.chars[self.utt_start..];
        match utt.last() {
            None => 0.0,
            Some(last) if self.utt_closed || last.class.breaks_words() => last.u1,
            Some(_) => {
                let mut i = utt.len();
                while i > 0 && !utt[i - 1].class.breaks_words() {
                    i -= 1;
                }
                utt.get(i).map_or(0.0, |c| c.u0)
            }
        }
    }

    /// Whether the nuclei heard look like syllables (a plausible count
    /// per second of speech): otherwise they are not used.
    fn nuclei_work(&self) -> bool {
        // Tonal syllables (CJK text) swell more than once: their nuclei
        // overcount (measured: twice as many on Mandarin), so they are not
        // used there.
        if self.utt_tonal {
            return false;
        }
        let seconds = speech_seconds(self.speech_frames);
        seconds < 1.0 || (self.nuclei as f64 / seconds) >= 1.5
    }

    /// The units at which `syllables` syllables of the utterance's text
    /// are spoken.
    fn units_at_syllables(&self, syllables: f64) -> f64 {
        let utt = &self.chars[self.utt_start..];
        let i = utt.partition_point(|c| c.s1 < syllables);
        match utt.get(i) {
            None => utt.last().map_or(0.0, |c| c.u1),
            Some(c) => {
                let s0 = if i == 0 { 0.0 } else { utt[i - 1].s1 };
                if c.s1 > s0 {
                    c.u0 + (syllables - s0) / (c.s1 - s0) * (c.u1 - c.u0)
                } else {
                    c.u0
                }
            }
        }
    }

    /// The first clause or sentence end beyond `u` (units) that progress
    /// has not been released past, with the speech frames after which it
    /// is released.
    fn next_barrier(&self, u: f64) -> Option<(f64, usize)> {
        let utt = &self.chars[self.utt_start..];
        let from = self.settled.saturating_sub(self.utt_start);
        let mut i = from;
        while i < utt.len() {
            if utt[i].u1 > utt[i].u0
                && utt[i].u1 + 1e-9 >= u
                && utt.get(i + 1).is_some_and(|n| n.u1 == n.u0)
            {
                let mut j = i + 1;
                let mut marks = String::new();
                while j < utt.len() && utt[j].u1 == utt[j].u0 {
                    marks.push(utt[j].ch);
                    j += 1;
                }
                let score = pause_score(&marks);
                if score >= 0.7 && j < utt.len() {
                    if self.released.is_some_and(|r| r + 1e-9 >= utt[i].u1) {
                        i = j;
                        continue;
                    }
                    // Released after half the speech it took to get
                    // here from the last anchor (at least 0.3 s, 0.6 s
                    // at a sentence end).
                    let since = self.speech_frames - self.anchor_speech;
                    let release = (since / 2).max(if score >= 1.0 { 60 } else { 30 });
                    return Some((utt[i].u1, release));
                }
                i = j;
                continue;
            }
            i += 1;
        }
        None
    }

    fn frame(&mut self, speech: bool) {
        let step = self.rate / FRAMES_PER_SECOND as f64;
        let mut cap = self.cap();
        if self.nuclei_work() {
            // No further than a syllable past the nuclei heard.
            cap = cap.min(self.units_at_syllables(self.nuclei as f64 * self.bias + 0.5));
        }
        let prev = self.frames.last().map_or(0.0, |f| f.u);
        // Progress waits at the next clause or sentence end until the
        // pause there is heard, or until the speech has gone on past it
        // (a speaker who does not pause there).
        if let Some((b, release)) = self.next_barrier(prev) {
            if prev + 1e-9 >= b {
                if speech {
                    self.at_barrier += 1;
                }
                if self.at_barrier < release {
                    cap = cap.min(b);
                } else {
                    self.released = Some(b);
                    self.at_barrier = 0;
                }
            } else {
                cap = cap.min(b);
            }
        }
        if speech {
            if self.run > 0 && self.run < MIN_PAUSE_FRAMES && self.heard_speech {
                // A short gap inside speech: it was speech after all.
                let n = self.frames.len();
                let mut u = if n > self.run {
                    self.frames[n - self.run - 1].u
                } else {
                    0.0
                };
                for f in &mut self.frames[n - self.run..] {
                    u = (u + step).min(cap.max(u));
                    f.u = u;
                }
                self.speech_frames += self.run;
            }
            let prev = self.frames.last().map_or(0.0, |f| f.u);
            self.run = 0;
            self.heard_speech = true;
            self.speech_frames += 1;
            self.frames.push(Frame {
                speech: true,
                u: (prev + step).min(cap.max(prev)),
            });
        } else {
            self.run += 1;
            self.frames.push(Frame {
                speech: false,
                u: prev,
            });
            if self.run == MIN_PAUSE_FRAMES && self.heard_speech {
                let start = self.frames.len() - MIN_PAUSE_FRAMES;
                self.snap(start);
            }
        }
    }

    /// A pause began at frame `p`: move the position there to the most
    /// likely word boundary, and learn the rate from it. Each boundary
    /// after the last anchor implies a rate (its units over the speech
    /// since the anchor); the one chosen balances how far that rate is
    /// from the estimate (log ratio, against the estimate's uncertainty)
    /// and how strongly its punctuation predicts a pause.
    fn snap(&mut self, p: usize) {
        if p == 0 {
            return;
        }
        let (a_frame, a_u) = self.anchor.unwrap_or((0, 0.0));
        let speech = self.frames[a_frame.min(p)..p]
            .iter()
            .filter(|f| f.speech)
            .count();
        let seconds = speech_seconds(speech);
        if seconds < 0.1 {
            return;
        }
        let floor = self.settled_units().max(a_u);
        let cap = self.cap();
        let sigma = if self.observations == 0 { 0.35 } else { 0.2 };
        let heard_syllables = if self.nuclei_work() {
            self.nuclei as f64 * self.bias
        } else {
            0.0
        };
        let utt = &self.chars[self.utt_start..];
        let mut best: Option<(f64, f64)> = None; // (cost, units)
        let mut i = 0;
        while i < utt.len() {
            // A boundary: after the last spoken character of a word, with
            // the marks up to the next word's first spoken character.
            if utt[i].u1 > utt[i].u0
                && utt
                    .get(i + 1)
                    .is_some_and(|n| n.u1 == n.u0 || n.class == Class::Cjk)
            {
                let b = utt[i].u1;
                let mut j = i + 1;
                let mut marks = String::new();
                while j < utt.len() && utt[j].u1 == utt[j].u0 {
                    marks.push(utt[j].ch);
                    j += 1;
                }
                let complete = j < utt.len() || self.utt_closed;
                if complete && b > a_u && b >= floor && b <= cap {
                    let implied = (b - a_u) / seconds;
                    let dev = (implied / self.rate).ln();
                    let score = pause_score(&marks);
                    let mut cost = dev * dev / (2.0 * sigma * sigma) - 1.5 * score;
                    if heard_syllables >= 2.0 {
                        // The nuclei counted say how many syllables are
                        // behind us, whatever the rate.
                        let d = (utt[i].s1 / heard_syllables).ln();
                        cost += d * d / (2.0 * NUCLEI_SIGMA * NUCLEI_SIGMA);
                    }
                    if dev.abs() < 1.0 && best.is_none_or(|(c, _)| cost < c) {
                        best = Some((cost, b));
                    }
                }
                i = j;
                continue;
            }
            i += 1;
        }
        let Some((_, b)) = best else {
            return;
        };
        // Rescale the progress since the anchor so that it reaches `b` at
        // the pause, and hold it there through the pause.
        let u_p = self.frames[p - 1].u;
        let span = u_p - a_u;
        for f in a_frame..p {
            let x = self.frames[f].u;
            self.frames[f].u = if span > 1e-9 {
                a_u + (x - a_u) * (b - a_u) / span
            } else {
                b
            };
        }
        for f in p..self.frames.len() {
            self.frames[f].u = b;
        }
        self.anchor = Some((p, b));
        self.at_barrier = 0;
        self.anchor_speech = self.speech_frames;
        let speech_before = self.frames[..p].iter().filter(|f| f.speech).count();
        if speech_before > 0 && b > 0.0 {
            self.observe(b, self.syllables_at(b), speech_before, self.nuclei);
        }
    }

    /// `units` (`syllables`) of this utterance took `frames` frames of
    /// speech in which `nuclei` nuclei were heard: learns how many
    /// syllables a nucleus stands for, and the rate.
    fn observe(&mut self, units: f64, syllables: f64, frames: usize, nuclei: usize) {
        if nuclei > 0 && syllables > 0.0 {
            let b = (syllables / nuclei as f64).clamp(0.5, 2.5);
            self.bias = if self.observations == 0 {
                b
            } else {
                0.5 * (self.bias + b)
            };
        }
        let seconds = speech_seconds(frames);
        let rate = (units + self.prior * PRIOR_SECONDS) / (seconds + PRIOR_SECONDS);
        self.rate = rate.clamp(self.prior * 0.4, self.prior * 2.5);
        self.observations += 1;
    }

    /// Audio time at the end of the last whole frame.
    fn audio_seconds_framed(&self) -> f64 {
        (self.samples - self.voicing.partial() as u64) as f64 / self.sample_rate as f64
    }

    fn frame_start(&self, f: usize) -> f64 {
        (self.frame0 + f as u64) as f64 / FRAMES_PER_SECOND as f64
    }

    /// The utterance frame that holds time `t` (0 before the utterance).
    fn frame_at(&self, t: f64) -> usize {
        let abs = (t * FRAMES_PER_SECOND as f64).floor() as u64;
        abs.saturating_sub(self.frame0) as usize
    }

    /// The earliest time the progress reaches `u` (None: not yet).
    fn t_early(&mut self, u: f64) -> Option<f64> {
        let eps = 1e-9;
        for f in self.cursor..self.frames.len() {
            let hi = self.frames[f].u;
            if hi + eps >= u {
                let lo = if f == 0 { 0.0 } else { self.frames[f - 1].u };
                let frac = if hi - lo > eps {
                    ((u - lo) / (hi - lo)).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                self.cursor = f.saturating_sub(1);
                return Some(self.frame_start(f) + frac / FRAMES_PER_SECOND as f64);
            }
        }
        None
    }

    /// The latest time the progress still stands at `u`: where speech
    /// after it begins (None: not heard yet).
    fn t_late(&mut self, u: f64) -> Option<f64> {
        let eps = 1e-9;
        for f in self.cursor..self.frames.len() {
            if self.frames[f].u > u + eps {
                return Some(self.frame_start(f));
            }
        }
        None
    }

    /// Settles what the audio so far has passed (`end`: all of the
    /// utterance, the rest placed at its last frame).
    fn settle(&mut self, out: &mut Vec<CharTiming>, end: bool) {
        let audio_end = self.audio_seconds_framed();
        let utt_end = self.chars.len();
        let total = self.utt_units();
        while self.settled < utt_end {
            let i = self.settled;
            let c = self.chars[i];
            let spoken = c.u1 > c.u0;
            let onset = if spoken { self.t_late(c.u0) } else { None };
            // Whitespace and punctuation end with the word before them (so
            // a client that splits words at spaces has each word as soon
            // as it is spoken); the pause after them is a gap before the
            // next word's onset. The last marks of an utterance take its
            // trailing silence.
            let when = if spoken {
                self.t_early(c.u1)
            } else if end && c.u1 + 1e-9 >= total {
                Some(audio_end)
            } else {
                self.t_early(c.u1)
            };
            let t = match (when, end) {
                (Some(t), _) => t,
                (None, true) => audio_end,
                (None, false) => break,
            };
            // A spoken character begins where the progress leaves its
            // start (after a pause: where the speech resumes).
            let start = match spoken {
                true => onset
                    .unwrap_or(t)
                    .clamp(self.settled_end, t.max(self.settled_end)),
                false => self.settled_end,
            };
            let t = t.clamp(start, audio_end.max(start));
            out.push(CharTiming {
                index: i,
                ch: c.ch,
                start,
                end: t,
            });
            self.settled = i + 1;
            self.settled_end = t;
        }
    }
}

fn speech_seconds(frames: usize) -> f64 {
    frames as f64 / FRAMES_PER_SECOND as f64
}
