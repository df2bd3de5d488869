//! Live text: a request in the streaming text mode whose text is still
//! arriving (an LLM's tokens) while it is spoken.
//!
//! In the streaming text mode the talker takes one text token per frame
//! (the prompt's trailing rows), so it can start once the first token is
//! known and go on while more arrive, pausing (never feeding `tts_eos` or
//! `tts_pad` early) when it has used every token it has. For the result to
//! equal the full text's, the token ids it takes must be the ones the whole
//! text tokenizes to. [`LiveText`] commits ids only up to a point that no
//! later text can change: just before the last run of spaces or tabs that
//! is followed by a visible character. Qwen2's pre-tokenizer starts a new
//! piece there (a word with its leading space, punctuation, digits), and
//! byte-level BPE never merges across pieces, so the ids of the text before
//! that point are final; the word after it may still grow. Closing the text
//! commits the rest.
//!
//! Newline runs are never cut points (the pre-tokenizer can attach newlines
//! to the punctuation before them), and ids are always re-derived from the
//! whole templated text, so the committed ids are a prefix of the full
//! text's ids (`models/tests/it/live_text.rs` checks it on random chunkings).

use crate::code_predictor::PredictorState;
use crate::error::{ModelError, Result};
use crate::model::Qwen3Tts;
use crate::request::{Request, MAX_TEXT_TOKENS};
use crate::talker::TalkerState;
use crate::tokenizer::{template, TextTokenizer};

/// The text of a live request so far and the token ids committed from it.
#[derive(Clone, Debug, Default)]
pub struct LiveText {
    text: String,
    /// Bytes of `text` whose ids are final.
    stable: usize,
    /// The templated text's inner ids (`ids[3..len-5]`) of `text[..stable]`.
    ids: Vec<u32>,
    closed: bool,
}

/// Where `text` may be cut so that its ids before the cut are final: the
/// later of [`blank_cut`] and [`punctuation_cut`]; 0 if there is none.
pub fn stable_cut(text: &str) -> usize {
    blank_cut(text).max(punctuation_cut(text))
}

/// The last punctuation character that follows a letter or digit (scripts
/// without spaces, such as Chinese, have their cut points there: a run of
/// letters is one piece and ends at the punctuation).
fn punctuation_cut(text: &str) -> usize {
    let mut prev: Option<char> = None;
    let mut cut = 0;
    for (i, c) in text.char_indices() {
        let punct = !c.is_whitespace() && !c.is_alphanumeric();
        if punct && prev.is_some_and(char::is_alphanumeric) {
            cut = i;
        }
        prev = Some(c);
    }
    cut
}

/// The start of the last run of spaces/tabs that has a non-whitespace
/// character before and after it.
fn blank_cut(text: &str) -> usize {
    let b = text.as_bytes();
    let mut i = b.len();
    // Skip the (possibly growing) last piece: back to the last blank that
    // is followed by a visible character.
    while i > 0 {
        let c = b[i - 1];
        if (c == b' ' || c == b'\t') && i < b.len() && !b[i].is_ascii_whitespace() {
            // `i - 1` is the last blank of a run; find the run's start.
            let mut s = i - 1;
            while s > 0 && (b[s - 1] == b' ' || b[s - 1] == b'\t') {
                s -= 1;
            }
            if s > 0 && !b[s - 1].is_ascii_whitespace() {
                return s;
            }
            i = s;
            continue;
        }
        i -= 1;
    }
    0
}

impl LiveText {
    pub fn new() -> Self {
        LiveText::default()
    }

    /// Everything received so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text whose ids are committed.
    pub fn committed_text(&self) -> &str {
        &self.text[..self.stable]
    }

    /// Committed token ids (the talker's text ids, without the template).
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Appends `chunk`; returns how many ids it committed. Text pushed after
    /// [`Self::close`] is ignored (0).
    pub fn push(&mut self, tokenizer: &TextTokenizer, chunk: &str) -> Result<usize> {
        if self.closed {
            return Ok(0);
        }
        self.text.push_str(chunk);
        let cut = stable_cut(&self.text);
        if cut <= self.stable {
            return Ok(0);
        }
        self.commit(tokenizer, cut)
    }

    /// No more text: commits the rest; returns how many ids that added.
    pub fn close(&mut self, tokenizer: &TextTokenizer) -> Result<usize> {
        if self.closed {
            return Ok(0);
        }
        self.closed = true;
        let end = self.text.len();
        if end == self.stable {
            return Ok(0);
        }
        self.commit(tokenizer, end)
    }

    fn commit(&mut self, tokenizer: &TextTokenizer, cut: usize) -> Result<usize> {
        let all = tokenizer.encode(&template::assistant(&self.text[..cut]))?;
        let inner = if all.len() >= 8 {
            &all[3..all.len() - 5]
        } else {
            &[][..]
        };
        // The ids already committed stay (the talker may have spoken them);
        // by the cut rule `inner` starts with them.
        let before = self.ids.len();
        if inner.len() > before {
            self.ids.extend_from_slice(&inner[before..]);
        }
        self.stable = cut;
        Ok(self.ids.len() - before)
    }
}

/// Defined here, beside the text it reads, so the model handle does not
/// depend on live text.
impl Qwen3Tts {
    /// The two stage states of a live-text request (`req` in the streaming
    /// text mode; its `text` is ignored), once `live` has committed its
    /// first ids: built as the whole-text request's would be from the text
    /// so far, with the talker waiting for the rest
    /// ([`TalkerState::waiting_for_text`]). `None` while nothing is
    /// committed yet. Keep feeding it with [`Self::feed_live_text`].
    pub fn live_sessions(
        &self,
        req: &Request,
        live: &LiveText,
    ) -> Result<Option<(TalkerState, PredictorState)>> {
        if !req.text_streaming {
            return Err(ModelError::InvalidRequest(
                "live text needs the streaming text mode (the talker takes one text token per frame)".into(),
            ));
        }
        if req
            .voice_clone
            .as_ref()
            .is_some_and(|v| v.reference.is_some())
        {
            return Err(ModelError::InvalidRequest(
                "live text is not available for an in-context clone (its prompt needs the text beside the reference codes); clone from the x-vector only, or send the text whole".into(),
            ));
        }
        if live.ids().is_empty() {
            if live.is_closed() {
                return Err(ModelError::EmptyText);
            }
            return Ok(None);
        }
        let mut whole = req.clone();
        whole.text = live.committed_text().to_string();
        let (mut talker, predictor) = self.sessions(&whole)?;
        talker.open_text(live.ids().len());
        self.feed_live_text(&mut talker, live)?;
        Ok(Some((talker, predictor)))
    }

    /// Gives `talker` the ids `live` committed since it last took text, and
    /// the closing `tts_eos` once `live` is closed.
    pub fn feed_live_text(&self, talker: &mut TalkerState, live: &LiveText) -> Result<()> {
        if !talker.text_is_open() {
            return Ok(());
        }
        let rows = self.live_rows(live, talker.text_ids_taken())?;
        talker.take_live_rows(rows);
        Ok(())
    }

    /// The talker rows of the ids `live` committed from id `from` on, with
    /// the closing `tts_eos` row once `live` is closed: what a runtime hands
    /// to the talker that runs the request ([`TalkerState::take_live_rows`]).
    pub fn live_rows(&self, live: &LiveText, from: usize) -> Result<LiveRows> {
        if live.ids().len() + 8 > MAX_TEXT_TOKENS {
            return Err(ModelError::TextTooLong {
                tokens: live.ids().len() + 8,
                max: MAX_TEXT_TOKENS,
            });
        }
        let new = &live.ids()[from.min(live.ids().len())..];
        if let Some(&id) = new
            .iter()
            .find(|&&id| id as usize >= self.talker.text_vocab_size())
        {
            return Err(ModelError::Tokenizer(format!(
                "token id {id} is outside text_vocab_size"
            )));
        }
        Ok(LiveRows {
            rows: self.talker.project_text(new),
            ids: new.len(),
            eos: live
                .is_closed()
                .then(|| self.talker.project_text(&[self.config.tts_eos_token_id])),
        })
    }
}

/// Text rows for a live request's talker: `ids` more text ids projected
/// (`rows`, `[ids, hidden]`) and, when the text is closed, the `tts_eos`
/// row that ends it.
#[derive(Clone, Debug, Default)]
pub struct LiveRows {
    pub rows: Vec<f32>,
    pub ids: usize,
    pub eos: Option<Vec<f32>>,
}

impl LiveRows {
    /// Appends `later` (rows committed after these).
    pub fn extend(&mut self, later: LiveRows) {
        self.rows.extend_from_slice(&later.rows);
        self.ids += later.ids;
        if later.eos.is_some() {
            self.eos = later.eos;
        }
    }
    pub fn is_empty(&self) -> bool {
        self.ids == 0 && self.eos.is_none()
    }
}

impl TalkerState {
    /// Live text: takes `r` (more text rows, and the end of the text).
    pub fn take_live_rows(&mut self, r: LiveRows) {
        match r.eos {
            Some(eos) => self.close_text(&r.rows, r.ids, &eos),
            None if r.ids > 0 => self.push_text_rows(&r.rows, r.ids),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::stable_cut;

    #[test]
    fn the_cut_is_before_the_last_blank_run_between_visible_characters() {
        assert_eq!(stable_cut(""), 0);
        assert_eq!(stable_cut("Hello"), 0);
        assert_eq!(stable_cut("Hello "), 0, "the next piece has not begun");
        assert_eq!(stable_cut("Hello wor"), 5);
        assert_eq!(stable_cut("Hello,  wor"), 6, "before the whole run");
        assert_eq!(stable_cut("one two three"), 7);
        assert_eq!(
            stable_cut("Hi!\n\nNext"),
            2,
            "newline runs are not cuts (the punctuation before them is)"
        );
        assert_eq!(stable_cut("Hi!\n\nNext word"), 9);
        assert_eq!(stable_cut(" leading"), 0);
        assert_eq!(stable_cut("a\n b"), 0, "a blank run after a newline");
        assert_eq!(stable_cut("a\tb"), 1);
        assert_eq!(stable_cut("你好，世界"), "你好".len());
        assert_eq!(
            stable_cut("Hello, wor"),
            6,
            "the blank after the comma is later"
        );
        assert_eq!(
            stable_cut("Hi!!"),
            2,
            "before the first of a punctuation run"
        );
    }
}
