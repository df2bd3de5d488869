//! Words from settled character timings: a word is a run of characters
//! between whitespace (a CJK character is a word by itself), punctuation
//! attached, timed from its first to its last spoken character.

use super::text::Class;
use super::{Aligner, CharTiming};

/// When one word of the text is heard.
#[derive(Clone, Debug, PartialEq)]
pub struct WordTiming {
    /// The word as written (with its punctuation).
    pub text: String,
    /// Its characters: `char_start..char_end` (indices among the `char`s).
    pub char_start: usize,
    pub char_end: usize,
    /// Seconds from the first sample.
    pub start: f64,
    pub end: f64,
}

/// Groups character timings into words as they are settled.
#[derive(Default)]
pub struct Words {
    open: Option<WordTiming>,
    /// The open word has a spoken character.
    spoken: bool,
}

impl Words {
    /// Takes the timings `a` just settled (in order) and appends the words
    /// they complete. A word is complete once its last character is settled
    /// and the text after it is a word break (or the utterance's text ends
    /// there), so it goes out with the audio that ends it, not with the
    /// pause after it.
    pub fn feed(&mut self, a: &Aligner, chars: &[CharTiming], out: &mut Vec<WordTiming>) {
        for t in chars {
            let class = Class::of(t.ch);
            match class {
                Class::Space => self.close(out),
                Class::Cjk => {
                    self.close(out);
                    out.push(WordTiming {
                        text: t.ch.to_string(),
                        char_start: t.index,
                        char_end: t.index + 1,
                        start: t.start,
                        end: t.end,
                    });
                }
                _ => {
                    let spoken = matches!(class, Class::Letter | Class::Digit | Class::Spoken);
                    let w = self.open.get_or_insert_with(|| WordTiming {
                        text: String::new(),
                        char_start: t.index,
                        char_end: t.index,
                        start: t.start,
                        end: t.end,
                    });
                    w.text.push(t.ch);
                    w.char_end = t.index + 1;
                    if spoken {
                        if !self.spoken {
                            w.start = t.start;
                        }
                        w.end = t.end;
                        self.spoken = true;
                    } else if !self.spoken {
                        w.end = t.end;
                    }
                    let next = a.char_at(t.index + 1);
                    let ends = match next {
                        Some(n) => Class::of(n).breaks_words(),
                        None => a.utterance_closed() && a.settled() == t.index + 1,
                    };
                    if ends {
                        self.close(out);
                    }
                }
            }
        }
    }

    /// The word still open (the context is done).
    pub fn finish(&mut self, out: &mut Vec<WordTiming>) {
        self.close(out);
    }

    fn close(&mut self, out: &mut Vec<WordTiming>) {
        if let Some(w) = self.open.take() {
            out.push(w);
        }
        self.spoken = false;
    }
}
