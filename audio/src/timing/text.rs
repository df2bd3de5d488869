//! What the text says about time: each character's expected share of the
//! spoken duration (its *weight*, in syllable-like units), and where the
//! speaker is likely to pause.
//!
//! A word's weight is `0.75 × syllables + 0.25 × letters + 0.2`, the
//! syllables counted as vowel groups (Latin, Cyrillic and Greek letters),
//! spread evenly over its letters; a run of digits is read as several words
//! (1.5 units a digit); a CJK character (Han, kana, Hangul) is a syllable
//! and a word of its own. Whitespace, punctuation, quotes and brackets
//! weigh nothing: they take the pauses between words. Sentence ends and
//! clause marks are where pauses are expected (`Boundary::score`).

/// What kind of character, for weighting and word grouping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A letter of an alphabetic script (part of a word).
    Letter,
    /// A digit (part of a word).
    Digit,
    /// A CJK character: a syllable and a word by itself.
    Cjk,
    /// A symbol read aloud (`%`, `&`, `@`, `+`, currency signs).
    Spoken,
    /// Whitespace: separates words.
    Space,
    /// Punctuation, quotes, brackets, dashes: silent, attached to words.
    Mark,
}

impl Class {
    pub fn of(c: char) -> Class {
        if c.is_whitespace() {
            Class::Space
        } else if is_cjk(c) {
            Class::Cjk
        } else if c.is_alphabetic() {
            Class::Letter
        } else if c.is_numeric() {
            Class::Digit
        } else if matches!(
            c,
            '%' | '&' | '@' | '+' | '=' | '$' | '€' | '£' | '¥' | '#' | '°'
        ) {
            Class::Spoken
        } else {
            Class::Mark
        }
    }

    /// Whether a word ends before this character.
    pub fn breaks_words(self) -> bool {
        matches!(self, Class::Space | Class::Cjk)
    }
}

/// Han ideographs, kana, Hangul, and their punctuation-free neighbours.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // hiragana, katakana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0x20000..=0x2FA1F) // CJK extensions B-F, compatibility supplement
}

/// How strongly a pause is expected after a word that ends with `mark`.
pub fn pause_score(marks: &str) -> f64 {
    let mut score: f64 = 0.25;
    for c in marks.chars() {
        let s = match c {
            '.' | '!' | '?' | '…' | '。' | '！' | '？' | '\n' => 1.0,
            ',' | ';' | ':' | '—' | '–' | '，' | '；' | '：' | '、' | ')' | '(' => 0.7,
            _ => 0.0,
        };
        score = score.max(s);
    }
    score
}

fn is_vowel(c: char) -> bool {
    let l = c.to_lowercase().next().unwrap_or(c);
    "aeiouyàáâãäåæèéêëìíîïòóôõöøùúûüýÿœąęėįųůűőāēīōūăěǎǐǒǔ\
     аеёиоуыэюяіїєαεηιουωάέήίόύώ"
        .contains(l)
}

/// The weight of each character of `text` (one entry per `char`), in
/// units of roughly a syllable, and its share of the word's syllables. The
/// weights of a word depend on the whole word, so a caller weighing text
/// piece by piece re-weighs the word that was open at the end of the last
/// piece (see `Aligner::push_text`).
pub fn weights(text: &[char], out: &mut Vec<(f64, f64)>) {
    let mut i = 0;
    while i < text.len() {
        match Class::of(text[i]) {
            Class::Letter => {
                let start = i;
                while i < text.len() && Class::of(text[i]) == Class::Letter {
                    i += 1;
                }
                let word = &text[start..i];
                let mut syllables = 0usize;
                let mut in_vowel = false;
                for &c in word {
                    let v = is_vowel(c);
                    if v && !in_vowel {
                        syllables += 1;
                    }
                    in_vowel = v;
                }
                let letters = word.len() as f64;
                let w = 0.75 * syllables.max(1) as f64 + 0.25 * letters + 0.2;
                let syl = syllables.max(1) as f64 / letters;
                out.extend(std::iter::repeat_n((w / letters, syl), word.len()));
            }
            Class::Digit => {
                out.push((1.5, 1.5));
                i += 1;
            }
            Class::Cjk => {
                out.push((2.6, 1.0));
                i += 1;
            }
            Class::Spoken => {
                out.push((1.5, 1.5));
                i += 1;
            }
            Class::Space | Class::Mark => {
                out.push((0.0, 0.0));
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<f64> {
        let chars: Vec<char> = s.chars().collect();
        let mut out = Vec::new();
        weights(&chars, &mut out);
        out.into_iter().map(|(w, _)| w).collect()
    }

    #[test]
    fn every_character_has_a_weight_and_only_words_weigh() {
        let s = "Hello, world! 42 字。";
        let ws = w(s);
        assert_eq!(ws.len(), s.chars().count());
        for (c, x) in s.chars().zip(&ws) {
            let spoken = c.is_alphanumeric();
            assert_eq!(*x > 0.0, spoken, "{c:?}");
        }
    }

    #[test]
    fn longer_words_weigh_more() {
        let a: f64 = w("cat").iter().sum();
        let b: f64 = w("information").iter().sum();
        assert!(b > 2.0 * a, "{a} {b}");
    }

    #[test]
    fn classes() {
        assert_eq!(Class::of('é'), Class::Letter);
        assert_eq!(Class::of('я'), Class::Letter);
        assert_eq!(Class::of('中'), Class::Cjk);
        assert_eq!(Class::of('ア'), Class::Cjk);
        assert_eq!(Class::of('7'), Class::Digit);
        assert_eq!(Class::of('"'), Class::Mark);
        assert_eq!(Class::of('\u{a0}'), Class::Space);
        assert!(pause_score(".") > pause_score(",") && pause_score(",") > pause_score(""));
    }
}
