//! A text's timings as its audio streams: the text as written (its raw
//! characters, whitespace included), the pieces of it each model request
//! speaks, and the [`Aligner`] that places them in the audio. What a server
//! context or a CLI run needs on top of the aligner.
//!
//! The text reaches the model in pieces (a segment, a live request's take,
//! a CLI piece), each the written text less the whitespace around it (or
//! joined by single spaces); each piece takes the raw text up to its end,
//! whitespace included, so every character written is timed exactly once.
//! Text the model never speaks is timed, with no duration, at the end.

use super::{Aligner, CharTiming, WordTiming, Words};

pub struct Transcript {
    aligner: Aligner,
    words: Words,
    /// The text as written.
    raw: Vec<char>,
    /// Characters of `raw` handed to the aligner.
    pushed: usize,
    /// (`char_end`, end seconds) of each word settled, in order.
    settled_words: Vec<(usize, f64)>,
}

/// The timings one step settled.
#[derive(Default, Debug)]
pub struct Settled {
    pub chars: Vec<CharTiming>,
    pub words: Vec<WordTiming>,
}

impl Settled {
    pub fn is_empty(&self) -> bool {
        self.chars.is_empty() && self.words.is_empty()
    }

    pub fn extend(&mut self, other: Settled) {
        self.chars.extend(other.chars);
        self.words.extend(other.words);
    }
}

impl Transcript {
    /// Timings of audio at `rate` Hz spoken at `speed` (1.0: natural).
    pub fn new(rate: u32, speed: f64) -> Self {
        Transcript {
            aligner: Aligner::new(rate, speed),
            words: Words::default(),
            raw: Vec::new(),
            pushed: 0,
            settled_words: Vec::new(),
        }
    }

    /// Seconds of audio timed so far.
    pub fn audio_seconds(&self) -> f64 {
        self.aligner.audio_seconds()
    }

    /// More of the text, as written.
    pub fn append(&mut self, text: &str) {
        self.raw.extend(text.chars());
    }

    /// `spoken` goes to the model next (a segment, a live take, a piece):
    /// the written text up to its end is what the audio now speaks.
    pub fn speak(&mut self, spoken: &str) {
        let spoken = spoken.trim();
        if spoken.is_empty() {
            return;
        }
        // Pieces are the written text with whitespace trimmed or joined by
        // one space: matched ignoring whitespace.
        let mut i = self.pushed;
        for c in spoken.chars().filter(|c| !c.is_whitespace()) {
            while i < self.raw.len() && self.raw[i].is_whitespace() && self.raw[i] != c {
                i += 1;
            }
            if i < self.raw.len() {
                i += 1;
            }
        }
        let piece: String = self.raw[self.pushed..i].iter().collect();
        self.pushed = i;
        self.aligner.push_text(&piece);
    }

    /// The next audio (at the rate given to `new`).
    pub fn audio(&mut self, samples: &[f32]) -> Settled {
        let mut s = Settled::default();
        self.aligner.push_audio(samples, &mut s.chars);
        self.words_of(&mut s);
        s
    }

    /// The model finished a request: its text is all in the audio so far.
    pub fn utterance_done(&mut self) -> Settled {
        let mut s = Settled::default();
        self.aligner.end_utterance(&mut s.chars);
        self.words_of(&mut s);
        s
    }

    /// The end: everything left is timed.
    pub fn finish(&mut self) -> Settled {
        let mut s = Settled::default();
        if self.pushed < self.raw.len() {
            let rest: String = self.raw[self.pushed..].iter().collect();
            self.pushed = self.raw.len();
            self.aligner.skip_text(&rest, &mut s.chars);
        }
        self.aligner.finish(&mut s.chars);
        self.words_of(&mut s);
        self.words.finish(&mut s.words);
        self.note(&s);
        s
    }

    fn words_of(&mut self, s: &mut Settled) {
        self.words.feed(&self.aligner, &s.chars, &mut s.words);
        self.note(s);
    }

    fn note(&mut self, s: &Settled) {
        for w in &s.words {
            if self.settled_words.last().is_none_or(|l| l.0 < w.char_end) {
                self.settled_words.push((w.char_end, w.end));
            }
        }
    }

    /// The text up to the last word whose audio ended by `played_s`
    /// seconds (whole words).
    pub fn played_text(&self, played_s: f64) -> String {
        let end = self
            .settled_words
            .iter()
            .take_while(|(_, t)| *t <= played_s + 1e-6)
            .last()
            .map_or(0, |(c, _)| *c);
        self.raw[..end.min(self.raw.len())].iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(seconds: f64, rate: u32) -> Vec<f32> {
        (0..(seconds * rate as f64) as usize)
            .map(|i| 0.3 * (i as f32 * 0.07).sin() * (0.2 + (i as f32 / 1600.0).sin().abs()))
            .collect()
    }

    #[test]
    fn every_character_of_the_raw_text_is_timed_once_across_segments() {
        let mut t = Transcript::new(16000, 1.0);
        let text = "  Hello there.  How are you?  ";
        t.append(text);
        let mut chars = Vec::new();
        t.speak("Hello there.");
        chars.extend(t.audio(&tone(0.8, 16000)).chars);
        chars.extend(t.utterance_done().chars);
        t.speak("How are you?");
        chars.extend(t.audio(&tone(0.9, 16000)).chars);
        chars.extend(t.utterance_done().chars);
        chars.extend(t.finish().chars);
        let got: String = chars.iter().map(|c| c.ch).collect();
        assert_eq!(got, text);
        assert!(chars.windows(2).all(|w| w[1].index == w[0].index + 1));
        assert!(chars.iter().all(|c| c.end <= 1.7 + 1e-9));
    }

    #[test]
    fn played_text_is_whole_words_up_to_the_position() {
        let mut t = Transcript::new(16000, 1.0);
        t.append("one two three");
        t.speak("one two three");
        let _ = t.audio(&tone(1.5, 16000));
        let _ = t.finish();
        assert_eq!(t.played_text(0.0), "");
        assert_eq!(t.played_text(10.0), "one two three");
        let mid = t.played_text(0.9);
        assert!("one two three".starts_with(&mid), "{mid:?}");
    }

    #[test]
    fn unspoken_text_is_timed_at_the_end() {
        let mut t = Transcript::new(16000, 1.0);
        t.append("spoken. never spoken");
        t.speak("spoken.");
        let mut n = t.audio(&tone(0.5, 16000)).chars.len();
        n += t.utterance_done().chars.len();
        let rest = t.finish();
        assert_eq!(n + rest.chars.len(), "spoken. never spoken".chars().count());
    }
}
