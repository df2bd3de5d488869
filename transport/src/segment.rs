//! Server-side text segmentation: incremental text (LLM tokens) in,
//! synthesis segments out, cut at sentence and clause boundaries, with a
//! deadline so a slow producer does not leave the speaker silent.
//!
//! Each segment becomes one engine request; boundaries are where a person
//! would pause anyway, so cutting there costs no prosody, and a cut as soon
//! as a boundary is confirmed starts audio one sentence (not one reply)
//! after the text starts.

use std::time::Duration;

use tokio::time::Instant;

use crate::protocol::{Chunking, ChunkingMode};

/// Sentence ends that need a following whitespace to count ("3.14", "e.g."
/// mid-word and URLs do not cut).
const SENTENCE_ASCII: &[char] = &['.', '!', '?', '…'];
/// Full-width sentence ends: no spaces in CJK text, so they cut at once.
const SENTENCE_WIDE: &[char] = &['。', '！', '？'];
const CLAUSE_ASCII: &[char] = &[',', ';', ':', '—'];
const CLAUSE_WIDE: &[char] = &['，', '；', '：', '、'];

/// Byte index just past the first sentence end of `text` that is
/// confirmed (a full-width end, or an ASCII one followed by whitespace):
/// where a live context may be cut. `None` if there is none yet; an ASCII
/// end as the last character is not confirmed.
pub fn first_sentence_end(text: &str) -> Option<usize> {
    let mut it = text.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        let followed_by_space = matches!(it.peek(), Some((_, n)) if n.is_whitespace());
        if SENTENCE_WIDE.contains(&c) || (SENTENCE_ASCII.contains(&c) && followed_by_space) {
            return Some(i + c.len_utf8());
        }
    }
    None
}

/// Bytes at the end of `text` that may still become a sentence end once
/// the next character arrives: a trailing run of ASCII sentence marks.
pub fn unconfirmed_tail(text: &str) -> usize {
    text.len() - text.trim_end_matches(SENTENCE_ASCII).len()
}

#[derive(Debug)]
pub struct Segmenter {
    cfg: Chunking,
    pending: String,
    /// When the oldest pending text arrived.
    since: Option<Instant>,
}

impl Segmenter {
    pub fn new(cfg: Chunking) -> Self {
        Segmenter {
            cfg,
            pending: String::new(),
            since: None,
        }
    }

    /// Characters appended and not yet cut.
    pub fn pending_chars(&self) -> usize {
        self.pending.chars().count()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.trim().is_empty()
    }

    /// Appends `text` and returns the segments it completed.
    pub fn push(&mut self, text: &str, now: Instant, out: &mut Vec<String>) {
        if text.is_empty() {
            return;
        }
        if self.pending.is_empty() {
            self.since = Some(now);
        }
        self.pending.push_str(text);
        while let Some(cut) = self.next_cut() {
            self.emit(cut, now, out);
        }
    }

    /// Everything pending, as one segment (flush, end of input).
    pub fn flush(&mut self, out: &mut Vec<String>) {
        let all = self.pending.len();
        self.emit(all, Instant::now(), out);
        self.pending.clear();
        self.since = None;
    }

    /// When pending text becomes due under `max_delay_ms` (None when there
    /// is none, or in manual mode).
    pub fn deadline(&self) -> Option<Instant> {
        if matches!(self.cfg.mode, ChunkingMode::Manual | ChunkingMode::Live) || self.is_empty() {
            return None;
        }
        self.since
            .map(|t| t + Duration::from_millis(self.cfg.max_delay_ms))
    }

    /// The deadline passed: cut at the last word boundary (the whole text if
    /// it ends a sentence). A single unfinished word keeps waiting.
    pub fn on_deadline(&mut self, now: Instant, out: &mut Vec<String>) {
        match self.deadline() {
            Some(d) if d <= now => {}
            _ => return,
        }
        let trimmed = self.pending.trim_end();
        let cut = if trimmed.ends_with(SENTENCE_ASCII) || trimmed.ends_with(SENTENCE_WIDE) {
            Some(self.pending.len())
        } else {
            trimmed.rfind(char::is_whitespace)
        };
        match cut {
            Some(c) if !self.pending[..c].trim().is_empty() => self.emit(c, now, out),
            // Nothing cuttable yet: re-arm the deadline from now.
            _ => self.since = Some(now),
        }
    }

    /// Byte index just past the first boundary that cuts now.
    fn next_cut(&self) -> Option<usize> {
        let mut chars = 0usize;
        let mut it = self.pending.char_indices().peekable();
        let mut last_space = None;
        while let Some((i, c)) = it.next() {
            chars += 1;
            let end = i + c.len_utf8();
            if c.is_whitespace() {
                last_space = Some(i);
            }
            if chars > self.cfg.max_chars {
                // Too long without a boundary: cut at the last space, or
                // mid-word as a last resort.
                return Some(last_space.filter(|&s| s > 0).unwrap_or(i));
            }
            if matches!(self.cfg.mode, ChunkingMode::Manual | ChunkingMode::Live) {
                continue;
            }
            let followed_by_space = matches!(it.peek(), Some((_, n)) if n.is_whitespace());
            let sentence =
                SENTENCE_WIDE.contains(&c) || (SENTENCE_ASCII.contains(&c) && followed_by_space);
            let clause = self.cfg.mode == ChunkingMode::Clause
                && chars >= self.cfg.min_chars
                && (CLAUSE_WIDE.contains(&c) || (CLAUSE_ASCII.contains(&c) && followed_by_space));
            if sentence || clause {
                return Some(end);
            }
        }
        None
    }

    fn emit(&mut self, cut: usize, now: Instant, out: &mut Vec<String>) {
        let seg = self.pending[..cut].trim();
        if !seg.is_empty() {
            out.push(seg.to_string());
        }
        self.pending.drain(..cut);
        self.since = if self.pending.is_empty() {
            None
        } else {
            Some(now)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(mode: ChunkingMode) -> Segmenter {
        Segmenter::new(Chunking {
            mode,
            max_delay_ms: 100,
            min_chars: 10,
            max_chars: 40,
            ..Chunking::default()
        })
    }

    fn feed(s: &mut Segmenter, pieces: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        let now = Instant::now();
        for p in pieces {
            s.push(p, now, &mut out);
        }
        out
    }

    #[test]
    fn sentences_cut_once_confirmed_by_the_next_space() {
        let mut s = seg(ChunkingMode::Sentence);
        let out = feed(
            &mut s,
            &[
                "Hel",
                "lo there",
                ".",
                " How are",
                " you? Pi is 3.14",
                " ok",
            ],
        );
        assert_eq!(out, ["Hello there.", "How are you?"]);
        let mut rest = Vec::new();
        s.flush(&mut rest);
        assert_eq!(rest, ["Pi is 3.14 ok"]);
        assert!(s.is_empty());
    }

    #[test]
    fn clauses_cut_only_past_min_chars_in_clause_mode() {
        let mut s = seg(ChunkingMode::Clause);
        let out = feed(&mut s, &["Yes, well, I think that, maybe; not"]);
        assert_eq!(out, ["Yes, well,", "I think that,"]);
        let mut s = seg(ChunkingMode::Sentence);
        assert!(feed(&mut s, &["Yes, well, I think that, maybe"]).is_empty());
    }

    #[test]
    fn wide_punctuation_cuts_without_spaces() {
        let mut s = seg(ChunkingMode::Sentence);
        assert_eq!(
            feed(&mut s, &["你好。今天好吗？"]),
            ["你好。", "今天好吗？"]
        );
    }

    #[test]
    fn long_text_is_cut_at_a_space() {
        let mut s = seg(ChunkingMode::Manual);
        let out = feed(
            &mut s,
            &["aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj"],
        );
        assert_eq!(out, ["aaaa bbbb cccc dddd eeee ffff gggg hhhh"]);
        let mut s = seg(ChunkingMode::Manual);
        let out = feed(&mut s, &[&"x".repeat(85)]);
        assert_eq!(out.iter().map(|x| x.len()).collect::<Vec<_>>(), [40, 40]);
    }

    #[test]
    fn the_deadline_cuts_at_the_last_word_boundary() {
        let mut s = seg(ChunkingMode::Sentence);
        let t0 = Instant::now();
        let mut out = Vec::new();
        s.push("one two thr", t0, &mut out);
        assert!(out.is_empty());
        let d = s.deadline().unwrap();
        assert_eq!(d, t0 + Duration::from_millis(100));
        s.on_deadline(t0 + Duration::from_millis(50), &mut out);
        assert!(out.is_empty(), "not due yet");
        s.on_deadline(d, &mut out);
        assert_eq!(out, ["one two"]);
        // A lone unfinished word waits, with the deadline re-armed.
        s.on_deadline(d + Duration::from_millis(500), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(s.deadline().unwrap(), d + Duration::from_millis(600));
        // A finished sentence goes whole.
        s.push("ee.", d, &mut out);
        s.on_deadline(d + Duration::from_secs(1), &mut out);
        assert_eq!(out, ["one two", "three."]);
        assert!(seg(ChunkingMode::Manual).deadline().is_none());
    }

    #[test]
    fn a_sentence_end_is_confirmed_by_what_follows_it() {
        assert_eq!(first_sentence_end("Pi is 3.14 ok. Next"), Some(14));
        assert_eq!(first_sentence_end("Wait..."), None);
        assert_eq!(first_sentence_end("Wait... then"), Some(7));
        assert_eq!(first_sentence_end("好。然后"), Some(6));
        assert_eq!(unconfirmed_tail("Wait..."), 3);
        assert_eq!(unconfirmed_tail("Wait"), 0);
    }

    #[test]
    fn token_by_token_equals_all_at_once() {
        let text = "The quick brown fox, having jumped, rested. Then it ran! Did it? Yes; far away, very far.";
        for mode in [
            ChunkingMode::Clause,
            ChunkingMode::Sentence,
            ChunkingMode::Manual,
        ] {
            let mut a = seg(mode);
            let mut whole = feed(&mut a, &[text]);
            a.flush(&mut whole);
            for step in [1, 2, 3, 7] {
                let mut b = seg(mode);
                let chars: Vec<char> = text.chars().collect();
                let pieces: Vec<String> = chars.chunks(step).map(|c| c.iter().collect()).collect();
                let refs: Vec<&str> = pieces.iter().map(|s| s.as_str()).collect();
                let mut got = feed(&mut b, &refs);
                b.flush(&mut got);
                assert_eq!(got, whole, "{mode:?} step {step}");
            }
        }
    }
}
