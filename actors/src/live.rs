//! Live text through the runtime: one request whose text arrives while it is
//! spoken (an LLM's tokens), in the streaming text mode.
//!
//! The caller holds a [`LiveRequest`] ([`Session::live`]) and pushes text
//! as it comes. The text is tokenized on the caller's thread
//! ([`tts_models::live_text::LiveText`] commits ids only where later text
//! cannot change them); the request is submitted as soon as its first ids
//! commit, so its time to first audio counts from the first text pushed.
//! Later ids travel as projected rows through a [`LiveFeed`] shared with
//! the talker stage, which takes them before each step and holds the
//! request — out of the batch, no compute — while its next step would need
//! a row that has not arrived. [`LiveRequest::close`] ends the text (the
//! talker then feeds `tts_eos` and the utterance finishes as a whole-text
//! one would). The codes equal the whole text's, greedy or sampled
//! (`actors/tests/it/live.rs`).
//!
//! A held request costs nothing while it waits: the talker parks its input
//! and leaves a [`crate::flow::StageWaker`] in the feed; the next rows
//! pushed wake the talker, which resumes the request. The feed also keeps
//! where those waits fell ([`TextPause`]), for the caller's metrics. The
//! feed lives in `flow` beside the flow gate: it is what the talker and the
//! router share with the caller, and they must not depend on the caller's
//! side of live text.

use std::sync::Arc;
use std::time::Instant;

use tts_models::live_text::LiveText;
use tts_models::{Qwen3Tts, Request};

use crate::engine::{Session, Stream};
use crate::error::Result;
use crate::flow::{LiveFeed, TextPause};

/// One live-text request, from the caller's side. Dropping it closes the
/// text (what was received is spoken to its end); cancel through the
/// [`Stream`] to stop speaking.
pub struct LiveRequest {
    session: Session,
    model: Arc<Qwen3Tts>,
    req: Request,
    text: LiveText,
    feed: Arc<LiveFeed>,
    /// Text ids handed to the request so far (its prompt's and the feed's).
    sent: usize,
    /// The end of the text was handed over.
    ended: bool,
    started: bool,
    first_text: Option<Instant>,
}

impl Session {
    /// A request whose text will arrive in pieces ([`LiveRequest::push`]).
    /// `req.text` is ignored; `req.text_streaming` must be set. The request
    /// is checked now (speaker, language, family, options) with a stand-in
    /// text, so a refusal comes before any text is sent.
    pub fn live(&self, req: Request) -> Result<LiveRequest> {
        let model = self.inner.model.clone();
        if !req.text_streaming {
            return Err(tts_models::ModelError::InvalidRequest(
                "live text needs the streaming text mode (text_streaming)".into(),
            )
            .into());
        }
        let mut probe = req.clone();
        probe.text = "a".into();
        model.build_prompt(&probe)?;
        // Refusals that depend on the layout (an in-context clone) come
        // from the live builder itself.
        let mut empty = LiveText::new();
        empty.push(&model.tokenizer, "a ")?;
        empty.push(&model.tokenizer, "b")?;
        model.live_sessions(&probe, &empty)?;
        Ok(LiveRequest {
            session: self.clone(),
            model,
            req,
            text: LiveText::new(),
            feed: Arc::new(LiveFeed::default()),
            sent: 0,
            ended: false,
            started: false,
            first_text: None,
        })
    }
}

impl LiveRequest {
    /// Everything pushed so far.
    pub fn text(&self) -> &str {
        self.text.text()
    }

    /// True once the request was submitted (its first words committed).
    pub fn started(&self) -> bool {
        self.started
    }

    /// Text token ids committed so far (what the talker will have taken
    /// once it has spoken them): the measure of the request's length.
    pub fn committed_tokens(&self) -> usize {
        self.text.ids().len()
    }

    /// The talker has spoken every text token it has and holds the request
    /// until more text comes (while it does, the request does not count
    /// against the engine's `max_active_requests`).
    pub fn waiting_for_text(&self) -> bool {
        self.feed.is_waiting()
    }

    /// Where the talker waited for text so far, in this request's frames.
    pub fn pauses(&self) -> Vec<TextPause> {
        self.feed.pauses()
    }

    /// Appends text. Returns the request's [`Stream`] the first time the
    /// request starts (when its first words commit), else `None`.
    pub async fn push(&mut self, chunk: &str) -> Result<Option<Stream>> {
        self.first_text.get_or_insert_with(Instant::now);
        self.text.push(&self.model.tokenizer, chunk)?;
        self.advance_async().await
    }

    /// Ends the text. Returns the [`Stream`] if the request starts only now
    /// (all its text was one unfinished word until the end).
    pub async fn close(&mut self) -> Result<Option<Stream>> {
        self.first_text.get_or_insert_with(Instant::now);
        self.text.close(&self.model.tokenizer)?;
        self.advance_async().await
    }

    /// [`Self::push`] for callers outside an async runtime.
    pub fn push_blocking(&mut self, chunk: &str) -> Result<Option<Stream>> {
        self.first_text.get_or_insert_with(Instant::now);
        self.text.push(&self.model.tokenizer, chunk)?;
        self.advance_blocking()
    }

    /// [`Self::close`] for callers outside an async runtime.
    pub fn close_blocking(&mut self) -> Result<Option<Stream>> {
        self.first_text.get_or_insert_with(Instant::now);
        self.text.close(&self.model.tokenizer)?;
        self.advance_blocking()
    }

    async fn advance_async(&mut self) -> Result<Option<Stream>> {
        match self.advance()? {
            Some((submit, reply, stream)) => {
                Ok(Some(self.session.submit(submit, reply, stream).await?))
            }
            None => Ok(None),
        }
    }

    fn advance_blocking(&mut self) -> Result<Option<Stream>> {
        match self.advance()? {
            Some((submit, reply, stream)) => {
                Ok(Some(self.session.submit_blocking(submit, reply, stream)?))
            }
            None => Ok(None),
        }
    }

    /// Before the start: the prepared request once the first ids commit.
    /// After it: newly committed rows into the feed.
    #[allow(
        clippy::type_complexity,
        reason = "the three parts of a prepared request, consumed at once by submit"
    )]
    fn advance(
        &mut self,
    ) -> Result<
        Option<(
            crate::router::Submit,
            tokio::sync::oneshot::Receiver<Result<crate::contract::RequestKey>>,
            Stream,
        )>,
    > {
        if self.started {
            if !self.ended && (self.text.ids().len() > self.sent || self.text.is_closed()) {
                let rows = self.model.live_rows(&self.text, self.sent)?;
                self.sent = self.text.ids().len();
                self.ended = rows.eos.is_some();
                self.feed.push(rows);
            }
            return Ok(None);
        }
        let Some((talker, predictor)) = self.model.live_sessions(&self.req, &self.text)? else {
            return Ok(None);
        };
        self.sent = self.text.ids().len();
        self.ended = self.text.is_closed();
        self.started = true;
        let t0 = self.first_text.unwrap_or_else(Instant::now);
        Ok(Some(self.session.prepare_states(
            talker,
            predictor,
            self.req.options.max_frames,
            t0,
            Some(self.feed.clone()),
        )))
    }
}

impl LiveRequest {
    /// The request is given up together with its stream (its context
    /// failed, was cancelled, or its session ended): dropped without
    /// closing its text, so a request the talker has parked waiting for
    /// text stays parked — not counted as computing — until the stream's
    /// cancel releases it. (Closing it would wake it to speak its last
    /// rows first, holding an engine slot for a request nobody hears.)
    pub fn abandon(mut self) {
        self.ended = true;
    }
}

impl Drop for LiveRequest {
    fn drop(&mut self) {
        // A started request must not wait for text forever: close it.
        if self.started && !self.ended && self.text.close(&self.model.tokenizer).is_ok() {
            if let Ok(rows) = self.model.live_rows(&self.text, self.sent) {
                self.feed.push(rows);
            }
        }
    }
}
