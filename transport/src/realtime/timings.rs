//! A context's word and character timings (`timings: true`): the
//! context's text as the client sent it, the aligner that places it in the
//! context's audio (`tts_audio::timing`), and what has been played.
//!
//! The text reaches the model in pieces (a segment, a live request's
//! take), each the client's text less the whitespace around it; each piece
//! takes the raw text up to its end, whitespace included, so every
//! character the client sent is timed exactly once. Text the model never
//! speaks (an utterance it ended early) is timed, with no duration, at the
//! context's end. Times are from the start of the context's audio.

use tts_audio::timing::{Aligner, CharTiming, WordTiming, Words};

use crate::protocol::{CharTimings, WordTimingMsg};

pub struct CtxTimings {
    aligner: Aligner,
    words: Words,
    /// The context's text as appended.
    raw: Vec<char>,
    /// Characters of `raw` handed to the aligner.
    pushed: usize,
    /// (`char_end`, end seconds) of each word settled, in order.
    settled_words: Vec<(usize, f64)>,
}

/// The timings one step settled.
#[derive(Default)]
pub struct Settled {
    pub chars: Vec<CharTiming>,
    pub words: Vec<WordTiming>,
}

impl Settled {
    pub fn is_empty(&self) -> bool {
        self.chars.is_empty() && self.words.is_empty()
    }

    /// The protocol's shapes (milliseconds).
    pub fn to_msg(&self) -> (Vec<WordTimingMsg>, CharTimings) {
        let words = self
            .words
            .iter()
            .map(|w| WordTimingMsg {
                text: w.text.clone(),
                char_start: w.char_start,
                char_end: w.char_end,
                start_ms: ms(w.start),
                end_ms: ms(w.end),
            })
            .collect();
        let chars = CharTimings {
            index: self.chars.first().map_or(0, |c| c.index),
            chars: self.chars.iter().map(|c| c.ch.to_string()).collect(),
            start_ms: self.chars.iter().map(|c| ms(c.start)).collect(),
            end_ms: self.chars.iter().map(|c| ms(c.end)).collect(),
        };
        (words, chars)
    }
}

fn ms(s: f64) -> f64 {
    (s * 10_000.0).round() / 10.0
}

impl CtxTimings {
    /// Timings of audio at `rate` Hz.
    pub fn new(rate: u32) -> Self {
        CtxTimings {
            aligner: Aligner::new(rate, 1.0),
            words: Words::default(),
            raw: Vec::new(),
            pushed: 0,
            settled_words: Vec::new(),
        }
    }

    /// Seconds of the context's audio timed so far.
    pub fn audio_seconds(&self) -> f64 {
        self.aligner.audio_seconds()
    }

    /// The client's text, as appended.
    pub fn append(&mut self, text: &str) {
        self.raw.extend(text.chars());
    }

    /// `spoken` goes to the model next (a segment, or a live take): the
    /// client's text up to its end is what the audio now speaks.
    pub fn speak(&mut self, spoken: &str) {
        let spoken = spoken.trim();
        if spoken.is_empty() {
            return;
        }
        // The pieces are the client's text with whitespace trimmed or
        // joined by one space: match them ignoring whitespace.
        let mut i = self.pushed;
        for c in spoken.chars().filter(|c| !c.is_whitespace()) {
            while i < self.raw.len() && self.raw[i].is_whitespace() && self.raw[i] != c {
                i += 1;
            }
            if i < self.raw.len() {
                i += 1;
            }
        }
        let n = i - self.pushed;
        let piece: String = self.raw[self.pushed..self.pushed + n].iter().collect();
        self.pushed += n;
        self.aligner.push_text(&piece);
    }

    /// The next audio of the context (at the rate given to `new`).
    pub fn audio(&mut self, samples: &[f32]) -> Settled {
        let mut s = Settled::default();
        self.aligner.push_audio(samples, &mut s.chars);
        self.words_of(&mut s);
        s
    }

    /// The model finished a request: its text is all in the audio sent.
    pub fn utterance_done(&mut self) -> Settled {
        let mut s = Settled::default();
        self.aligner.end_utterance(&mut s.chars);
        self.words_of(&mut s);
        s
    }

    /// The context is done: everything left is timed.
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

    /// The client's text up to the last word whose audio ended by
    /// `played_s` seconds (whole words; whitespace after it trimmed).
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
        let mut t = CtxTimings::new(16000);
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
        let mut t = CtxTimings::new(16000);
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
        let mut t = CtxTimings::new(16000);
        t.append("spoken. never spoken");
        t.speak("spoken.");
        let mut n = t.audio(&tone(0.5, 16000)).chars.len();
        n += t.utterance_done().chars.len();
        let rest = t.finish();
        assert_eq!(n + rest.chars.len(), "spoken. never spoken".chars().count());
    }
}
