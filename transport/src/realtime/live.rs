//! Live contexts (`chunking.mode: "live"`): one context is one utterance
//! whose text reaches the talker as it arrives, through
//! [`tts_actors::Session::live`], instead of being cut into segments that
//! each restart the prosody.
//!
//! [`LiveCtx`] is the context's text bookkeeping, pure (no socket, no
//! engine call): text waits in `texts` until the context speaks, and
//! [`LiveCtx::take`] says how much of it the current live request takes
//! now and whether that request ends there. A request ends where the client
//! ends the text (`context.flush` / `context.end`) and at the long-context
//! cut: once the request holds `live_max_tokens` text tokens or has spoken
//! `live_max_audio_s` (or half its frame cap), it ends at the next
//! confirmed sentence end, and the rest of the text goes on in a new
//! request, so attention and the KV cache stay bounded. Nothing is lost or
//! spoken twice across a cut: the text before it is the old request's, the
//! text after it (less the whitespace between the sentences) the new one's
//! (`tests` below).

use std::collections::VecDeque;

use tts_actors::{LiveRequest, Request, TextPause as EnginePause};

use crate::protocol::{Chunking, TextPause};
use crate::segment::{first_sentence_end, unconfirmed_tail};

/// How far the current request has got, for the cut rule.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    /// Text tokens the request has committed.
    pub tokens: usize,
    /// Seconds of audio it has spoken.
    pub audio_s: f64,
    /// Codec frames it has made, and its cap.
    pub frames: u64,
    pub max_frames: u64,
}

/// What the current request takes now.
#[derive(Debug, PartialEq)]
pub struct Take {
    /// Text to push into the request.
    pub text: String,
    /// The request's text ends after it (close it).
    pub close: bool,
    /// The end is a long-context cut (not the client's).
    pub cut: bool,
}

/// One live context's text and live requests.
pub struct LiveCtx {
    /// Text not yet handed to a live request, by utterance: every entry but
    /// the last was ended by a flush; the last is open unless the context
    /// is ended.
    texts: VecDeque<String>,
    ended: bool,
    /// The request the text goes to now (`None` between requests).
    pub req: Option<LiveRequest>,
    /// The current request's text has been closed.
    pub closed: bool,
    /// What a new request is built from (the context's settings).
    pub template: Request,
    max_tokens: usize,
    max_audio_s: f64,
    /// Frames and waits of the context's finished requests.
    frames_before: u64,
    pauses: Vec<TextPause>,
    /// Model-rate samples the current request has spoken.
    req_samples: u64,
    /// The model ended the current utterance before its text did (end of
    /// speech, or `max_frames`): the rest of that utterance's text is
    /// dropped until a flush or the end, as a whole-text request drops it.
    dropping: bool,
    /// Requests started so far.
    pub utterances: usize,
    /// Of those, ended by the long-context cut.
    pub cuts: usize,
}

impl LiveCtx {
    /// `first`: the request made (and checked) when the context opened.
    pub fn new(template: Request, first: LiveRequest, chunking: &Chunking) -> Self {
        LiveCtx {
            texts: VecDeque::from([String::new()]),
            ended: false,
            req: Some(first),
            closed: false,
            template,
            max_tokens: chunking.live_max_tokens,
            max_audio_s: chunking.live_max_audio_s,
            frames_before: 0,
            pauses: Vec::new(),
            req_samples: 0,
            dropping: false,
            utterances: 0,
            cuts: 0,
        }
    }

    pub fn append(&mut self, text: &str) {
        if self.dropping {
            return;
        }
        if let Some(last) = self.texts.back_mut() {
            last.push_str(text);
        }
    }

    /// `context.flush`: the text so far is one utterance; later text starts
    /// another.
    pub fn flush(&mut self) {
        if self.dropping {
            self.dropping = false;
            return;
        }
        if self.texts.back().is_some_and(|t| !t.is_empty()) {
            self.texts.push_back(String::new());
        }
    }

    /// `context.end`: no more text.
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// Characters received and not yet handed to a request.
    pub fn pending_chars(&self) -> usize {
        self.texts.iter().map(|t| t.chars().count()).sum()
    }

    /// Nothing is left to say: the context can finish once its request is
    /// done.
    pub fn spoken(&self) -> bool {
        self.ended && self.req.is_none() && self.texts.iter().all(|t| t.trim().is_empty())
    }

    /// There is text for a new request (after the previous one finished).
    pub fn wants_request(&self) -> bool {
        self.req.is_none() && self.texts.iter().any(|t| !t.trim().is_empty())
    }

    /// What the current request takes now, given how far it has got.
    pub fn take(&mut self, p: Progress) -> Option<Take> {
        let bounds = (self.max_tokens, self.max_audio_s);
        take_text(
            &mut self.texts,
            self.ended,
            &mut self.closed,
            &mut self.cuts,
            bounds,
            p,
        )
    }

    /// A new request for the text that follows (`req` made from
    /// [`Self::template`] by the caller).
    pub fn next_request(&mut self, req: LiveRequest) {
        self.req = Some(req);
        self.closed = false;
        self.req_samples = 0;
    }

    /// The current request spoke `samples` more model-rate samples.
    pub fn heard(&mut self, samples: u64) {
        self.req_samples += samples;
    }

    /// How far the current request has got, at `rate` Hz with
    /// `samples_per_frame`, capped at `max_frames`.
    pub fn progress(&self, rate: u32, samples_per_frame: usize, max_frames: usize) -> Progress {
        Progress {
            // The text's last word is not committed until more text comes:
            // count it too (a word is at least one token).
            tokens: self.req.as_ref().map_or(0, |r| {
                r.committed_tokens()
                    .max(r.text().split_whitespace().count())
            }),
            audio_s: self.req_samples as f64 / rate.max(1) as f64,
            frames: self.req_samples / samples_per_frame.max(1) as u64,
            max_frames: max_frames as u64,
        }
    }

    /// The current request finished having made `frames` frames.
    pub fn request_done(&mut self, frames: u64) {
        if let Some(r) = self.req.take() {
            self.add_pauses(&r.pauses());
        }
        self.frames_before += frames;
        if !self.closed {
            // Ended by the model with its text still open: what is left
            // of this utterance is not spoken (the whole text's request
            // would not speak it either); the next utterance starts after
            // the next flush.
            if let Some(front) = self.texts.front_mut() {
                front.clear();
            }
            // Only while that utterance is still the one receiving text.
            self.dropping = self.texts.len() == 1 && !self.ended;
        }
        self.closed = false;
    }

    fn add_pauses(&mut self, p: &[EnginePause]) {
        let base = self.frames_before;
        self.pauses.extend(p.iter().map(|p| TextPause {
            frame: base + p.frame,
            ms: p.ms,
        }));
    }

    /// Every wait so far, the current request's included.
    pub fn pauses(&self) -> Vec<TextPause> {
        let mut all = self.pauses.clone();
        if let Some(r) = &self.req {
            let base = self.frames_before;
            all.extend(r.pauses().iter().map(|p| TextPause {
                frame: base + p.frame,
                ms: p.ms,
            }));
        }
        all
    }
}

/// The cut rule ([`LiveCtx::take`]) on the context's text: `texts` by
/// utterance (all but the last ended, the last too when `ended`), `closed`
/// once the current request's text is closed, `bounds` the tokens and
/// seconds that arm the cut.
fn take_text(
    texts: &mut VecDeque<String>,
    ended: bool,
    closed: &mut bool,
    cuts: &mut usize,
    (max_tokens, max_audio_s): (usize, f64),
    p: Progress,
) -> Option<Take> {
    if *closed {
        return None;
    }
    // Empty utterances (a flush with nothing after the last) are skipped.
    while texts.len() > 1 && texts[0].trim().is_empty() {
        texts.pop_front();
    }
    let closes = texts.len() > 1 || ended;
    let front = texts.front_mut()?;
    let armed = p.tokens >= max_tokens
        || p.audio_s >= max_audio_s
        || (p.max_frames > 0 && p.frames * 2 >= p.max_frames);
    if armed {
        // Hard bound: twice the tokens with no sentence end — cut at a
        // word, so one utterance never outgrows the model's text limit.
        let hard = p.tokens >= 2 * max_tokens;
        let end = first_sentence_end(front).or_else(|| {
            if !hard {
                return None;
            }
            front
                .char_indices()
                .find(|&(i, c)| i > 0 && c.is_whitespace())
                .map(|(i, _)| i)
        });
        if let Some(e) = end {
            let text = front[..e].to_string();
            *front = front[e..].trim_start().to_string();
            *closed = true;
            *cuts += 1;
            return Some(Take {
                text,
                close: true,
                cut: true,
            });
        }
    }
    // Not past a bound yet: at most one sentence, and no more words than
    // the bound has tokens left (a word is at least one token), so a large
    // append is measured as it goes in; past the soft bound, up to the hard
    // one. A trailing '.' waits for what follows it (it may be the end a
    // cut needs): it costs the talker nothing, as the text's last piece is
    // never committed before more text comes anyway.
    let bound = if armed { 2 * max_tokens } else { max_tokens };
    let tail = if closes { 0 } else { unconfirmed_tail(front) };
    let words = after_words(front, bound.saturating_sub(p.tokens).max(1));
    let sentence = if armed {
        None
    } else {
        first_sentence_end(front)
    };
    let n = (front.len() - tail)
        .min(words.unwrap_or(usize::MAX))
        .min(sentence.unwrap_or(usize::MAX));
    let text: String = front.drain(..n).collect();
    if closes && front.is_empty() {
        texts.pop_front();
        if texts.is_empty() {
            texts.push_back(String::new());
        }
        *closed = true;
        return Some(Take {
            text,
            close: true,
            cut: false,
        });
    }
    (!text.is_empty()).then_some(Take {
        text,
        close: false,
        cut: false,
    })
}

/// Byte index of the whitespace that ends the `k`-th word of `s` (`None`
/// if `s` has fewer finished words).
fn after_words(s: &str, k: usize) -> Option<usize> {
    let mut words = 0;
    let mut in_word = false;
    for (i, c) in s.char_indices() {
        if c.is_whitespace() {
            if in_word {
                words += 1;
                if words == k {
                    return Some(i);
                }
            }
            in_word = false;
        } else {
            in_word = true;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    //! The cut rule on text alone (the requests are exercised over the
    //! socket in `transport/tests/it/live.rs`).

    use super::*;

    /// The text side of a live context, without an engine.
    struct Sim {
        texts: VecDeque<String>,
        ended: bool,
        closed: bool,
        max_tokens: usize,
        cuts: usize,
    }

    impl Sim {
        fn new(max_tokens: usize) -> Self {
            Sim {
                texts: VecDeque::from([String::new()]),
                ended: false,
                closed: false,
                max_tokens,
                cuts: 0,
            }
        }
    }

    fn take(s: &mut Sim, p: Progress) -> Option<Take> {
        let b = (s.max_tokens, 60.0);
        take_text(&mut s.texts, s.ended, &mut s.closed, &mut s.cuts, b, p)
    }

    /// Feeds `pieces` one by one into simulated requests; returns each
    /// request's text and how many were cut.
    fn run(pieces: &[&str], max_tokens: usize) -> (Vec<String>, usize) {
        let mut s = Sim::new(max_tokens);
        let mut reqs = vec![String::new()];
        let drain = |s: &mut Sim, reqs: &mut Vec<String>| loop {
            if s.closed {
                // The request finished; a new one takes the rest, if any.
                if !s.texts.iter().any(|t| !t.trim().is_empty()) {
                    break;
                }
                reqs.push(String::new());
                s.closed = false;
            }
            let tokens = reqs.last().unwrap().split_whitespace().count();
            let p = Progress {
                tokens,
                ..Progress::default()
            };
            match take(s, p) {
                Some(t) => reqs.last_mut().unwrap().push_str(&t.text),
                None => break,
            }
        };
        for p in pieces {
            s.texts.back_mut().unwrap().push_str(p);
            drain(&mut s, &mut reqs);
        }
        s.ended = true;
        drain(&mut s, &mut reqs);
        if reqs.last().is_some_and(|r| r.is_empty()) {
            reqs.pop();
        }
        (reqs, s.cuts)
    }

    const TEXT: &str = "One two three four. Five six seven eight nine. Ten eleven? \
                        Twelve, thirteen... fourteen. Pi is 3.14 and e is 2.71 ok. End";

    #[test]
    fn a_long_context_is_cut_at_sentence_ends_and_loses_nothing() {
        for step in [1, 2, 3, 5, 200] {
            let chars: Vec<char> = TEXT.chars().collect();
            let pieces: Vec<String> = chars.chunks(step).map(|c| c.iter().collect()).collect();
            let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
            // 8 tokens (words here): every sentence end comes before the
            // hard bound of 16, so every cut is at one.
            let (reqs, cuts) = run(&refs, 8);
            assert!(cuts >= 2, "step {step}: {reqs:?}");
            // Every request but the last ends a sentence...
            for r in &reqs[..reqs.len() - 1] {
                let r = r.trim_end();
                assert!(
                    r.ends_with(['.', '?', '!']),
                    "step {step}: cut off a sentence end: {r:?} in {reqs:?}"
                );
                assert!(!r.ends_with("3.") && !r.ends_with("2."), "{reqs:?}");
            }
            // ...and together they are the text, nothing lost or repeated
            // (the whitespace at each cut is the separator).
            assert_eq!(reqs.join(" "), TEXT, "step {step}");
        }
    }

    #[test]
    fn below_the_bound_the_context_is_one_utterance() {
        let (reqs, cuts) = run(&["Short. And ", "sweet. Done"], 100);
        assert_eq!((reqs, cuts), (vec![TEXT_SHORT.to_string()], 0));
    }

    const TEXT_SHORT: &str = "Short. And sweet. Done";

    #[test]
    fn without_a_sentence_end_the_hard_bound_cuts_at_a_word() {
        let words = vec!["w "; 40].concat();
        let (reqs, cuts) = run(&[&words], 5);
        assert!(cuts >= 1, "{reqs:?}");
        assert_eq!(reqs.join(" ").split_whitespace().count(), 40, "{reqs:?}");
        assert!(reqs[0].split_whitespace().count() <= 11, "{reqs:?}");
    }

    #[test]
    fn the_frame_cap_arms_the_cut() {
        let mut s = Sim::new(1000);
        s.texts[0] = "First. Second".into();
        let p = Progress {
            frames: 50,
            max_frames: 100,
            ..Progress::default()
        };
        let t = take(&mut s, p).unwrap();
        assert_eq!((t.text.as_str(), t.close, t.cut), ("First.", true, true));
    }
}
