//! The talker stage's per-request state: the prompt it is fed
//! ([`Prompt`]), its KV cache, codebook-0 history and sampler
//! ([`TalkerState`]), one step alone or batched across requests
//! ([`TalkerState::step_batch`]), and its hand-off to the code predictor
//! ([`TalkerOutput`]).

use std::sync::Arc;

use super::prefix::{PrefixCache, MIN_PREFIX_ROWS};
use super::weights::Talker;
use crate::config::TalkerConfig;
use crate::lm::{BatchScratch, KvCache};
use crate::request::GenOptions;
use crate::sampling::{pick, LogitsObserver, RawLogits, Rng, SamplerConfig, TalkerRules};

/// What the talker stage reads from the loaded model (the `Qwen3Tts`
/// handle implements it): the talker and, to feed a finished frame back,
/// the code predictor's embeddings of codebooks 1..G-1. A trait so that
/// this state sits beside the talker without importing the handle that
/// holds both LMs.
pub trait TalkerModels {
    fn talker(&self) -> &Talker;
    /// `out += E_i(codes[i])` for i = 0.. in order: the code predictor's
    /// embeddings of a frame's codebooks 1..G-1.
    fn add_predicted_embeddings(&self, codes: &[u32], out: &mut [f32]);
    /// Where prompts' shared leading rows keep their KV
    /// ([`PrefixCache`]); None: every prefill computes every row.
    fn prefix_cache(&self) -> Option<&PrefixCache> {
        None
    }
}

impl<M: TalkerModels + ?Sized> TalkerModels for &M {
    fn talker(&self) -> &Talker {
        (**self).talker()
    }
    fn add_predicted_embeddings(&self, codes: &[u32], out: &mut [f32]) {
        (**self).add_predicted_embeddings(codes, out)
    }
    fn prefix_cache(&self) -> Option<&PrefixCache> {
        (**self).prefix_cache()
    }
}

impl<M: TalkerModels + ?Sized> TalkerModels for Arc<M> {
    fn talker(&self) -> &Talker {
        (**self).talker()
    }
    fn add_predicted_embeddings(&self, codes: &[u32], out: &mut [f32]) {
        (**self).add_predicted_embeddings(codes, out)
    }
    fn prefix_cache(&self) -> Option<&PrefixCache> {
        (**self).prefix_cache()
    }
}

/// The embeddings the talker is fed: prefill rows, per-frame trailing text
/// rows (then `tts_pad` forever).
/// Built by [`crate::prompt`]; defined here, with the state that holds
/// it, so the talker room does not import the prompt builder.
#[derive(Clone, Debug)]
pub struct Prompt {
    pub hidden: usize,
    pub prefill: Vec<f32>,
    pub trailing: Vec<f32>,
    pub tts_pad: Vec<f32>,
    /// Token ids of the templated text and instruction (diagnostics, tests).
    pub input_ids: Vec<u32>,
    pub instruct_ids: Option<Vec<u32>>,
    /// An in-context clone's templated reference-text ids.
    pub ref_ids: Option<Vec<u32>>,
    /// Leading prefill rows that do not depend on the text being spoken
    /// (role rows, codec prefix with the speaker or x-vector, instruct,
    /// an in-context clone's reference-transcript rows): every request of
    /// the same voice, language, mode and instruct starts with them, so
    /// their KV can be shared ([`PrefixCache`]).
    pub shared_rows: usize,
}

impl Prompt {
    pub fn prefill_rows(&self) -> usize {
        self.prefill.len() / self.hidden
    }
    pub fn trailing_rows(&self) -> usize {
        self.trailing.len() / self.hidden
    }
    /// The rows a [`PrefixCache`] may share: [`Self::shared_rows`] when
    /// there are enough of them and at least one row follows (the last row's
    /// logits pick the first token); else 0.
    pub fn cacheable_rows(&self) -> usize {
        let n = self.shared_rows.min(self.prefill_rows());
        if n >= MIN_PREFIX_ROWS && n < self.prefill_rows() {
            n
        } else {
            0
        }
    }
}

/// Frames of talker KV reserved up front (~20 s of audio at 12.5 Hz); longer
/// requests grow the cache as they go.
const TALKER_KV_RESERVE_FRAMES: usize = 256;

/// Talker-side state of one request: prompt, KV cache, codebook-0 history
/// and sampler. Stage-separable from the code predictor's
/// state ([`crate::code_predictor::PredictorState`]), so the runtime can
/// run the two LMs on different threads and batch each across sessions
/// ([`TalkerState::step_batch`], `PredictorState::predict_batch`);
/// the offline `FrameGenerator` composes them for single-threaded use.
pub struct TalkerState {
    prompt: Prompt,
    sampler: SamplerConfig,
    rules: TalkerRules,
    rng: Rng,
    cache: KvCache,
    history: Vec<u32>,
    /// Frames fed back so far (the index of the next trailing text row).
    fed: usize,
    seen: Vec<bool>,
    scratch: Vec<f32>,
    /// Prefill rows taken from a [`PrefixCache`] instead of computed.
    reused_rows: usize,
    /// Live text ([`crate::live_text`]): the trailing rows so far, without
    /// the closing `tts_eos`, while this is true.
    text_open: bool,
    /// Live text: text ids already turned into rows (the prefill's and the
    /// trailing ones).
    text_ids_taken: usize,
}

/// A chosen codebook-0 token with the talker hidden state that produced it:
/// the hand-off from the talker to the code predictor.
#[derive(Clone, Debug)]
pub struct TalkerOutput {
    pub hidden: Vec<f32>,
    pub c0: u32,
}

impl TalkerState {
    /// The state of a request with `prompt`; `t` is the checkpoint's
    /// talker config (vocabulary and codec EOS id for the official rules).
    pub fn new(talker: &Talker, t: &TalkerConfig, prompt: Prompt, options: &GenOptions) -> Self {
        let mut rules =
            TalkerRules::official(t.lm.vocab_size, t.codec.eos, options.repetition_penalty);
        if options.ignore_eos {
            // The min-new-tokens rule bans EOS; banning it forever leaves
            // `max_frames` as the only stop.
            rules.min_new_tokens = usize::MAX;
        }
        TalkerState {
            rules,
            sampler: options.talker,
            rng: Rng::new(options.seed),
            // Room for the prompt and the first frames: growing a cache of
            // ~230 KB per position (0.6B) by doubling copies the history.
            cache: talker.new_cache_with_capacity(
                prompt.prefill_rows() + options.max_frames.min(TALKER_KV_RESERVE_FRAMES) + 1,
            ),
            prompt,
            history: Vec::new(),
            fed: 0,
            seen: Vec::new(),
            scratch: Vec::new(),
            reused_rows: 0,
            text_open: false,
            text_ids_taken: 0,
        }
    }

    /// Live text: the prompt was built from the first `ids_taken` text ids
    /// of a text still arriving, so its last trailing row (`tts_eos`) is
    /// dropped and the state waits for [`Self::push_text_rows`] /
    /// [`Self::close_text`].
    pub fn open_text(&mut self, ids_taken: usize) {
        if !self.text_open {
            let h = self.prompt.hidden;
            let n = self.prompt.trailing.len();
            self.prompt.trailing.truncate(n.saturating_sub(h));
            self.text_open = true;
            self.text_ids_taken = ids_taken;
        }
    }

    /// Live text: appends the rows of `ids` more text ids (`[ids, hidden]`).
    pub fn push_text_rows(&mut self, rows: &[f32], ids: usize) {
        debug_assert!(self.text_open, "push_text_rows on a closed text");
        self.prompt.trailing.extend_from_slice(rows);
        self.text_ids_taken += ids;
    }

    /// Live text: the last rows and the closing `tts_eos` row; after it the
    /// state runs as a whole-text request does (then `tts_pad`).
    pub fn close_text(&mut self, rows: &[f32], ids: usize, tts_eos: &[f32]) {
        if self.text_open {
            self.prompt.trailing.extend_from_slice(rows);
            self.prompt.trailing.extend_from_slice(tts_eos);
            self.text_ids_taken += ids;
            self.text_open = false;
        }
    }

    /// Live text: text ids already taken into the prompt.
    pub fn text_ids_taken(&self) -> usize {
        self.text_ids_taken
    }

    /// True while the text is still arriving.
    pub fn text_is_open(&self) -> bool {
        self.text_open
    }

    /// Live text: the next step needs a text row that has not arrived (it
    /// must wait; feeding `tts_pad` instead would speak a different
    /// utterance than the whole text).
    pub fn waiting_for_text(&self) -> bool {
        self.text_open && self.fed >= self.prompt.trailing_rows()
    }

    /// Prefill rows whose KV came from the model's [`PrefixCache`] (0
    /// before the prefill, on a miss, or without a cache).
    pub fn reused_rows(&self) -> usize {
        self.reused_rows
    }

    /// Before a prefill: loads the prompt's shared rows' KV from `cache`
    /// when kept. Returns the prefill rows left to compute from.
    fn start_prefill(&mut self, cache: Option<&PrefixCache>) -> usize {
        assert!(self.cache.is_empty(), "prefill runs once per request");
        let (n, h) = (self.prompt.cacheable_rows(), self.prompt.hidden);
        let Some(cache) = cache.filter(|c| c.is_enabled() && n > 0) else {
            return 0;
        };
        match cache.get(&self.prompt.prefill[..n * h]) {
            Some(e) if self.cache.load_prefix(e.kv()) => {
                self.reused_rows = n;
                n
            }
            _ => 0,
        }
    }

    /// After a prefill that computed every row: keeps the shared rows' KV.
    fn finish_prefill(&self, cache: Option<&PrefixCache>) {
        let (n, h) = (self.prompt.cacheable_rows(), self.prompt.hidden);
        if let Some(cache) = cache.filter(|c| c.is_enabled() && n > 0 && self.reused_rows == 0) {
            cache.insert(&self.prompt.prefill[..n * h], self.cache.prefix(n));
        }
    }

    pub fn prompt(&self) -> &Prompt {
        &self.prompt
    }

    /// KV positions held.
    pub fn positions(&self) -> usize {
        self.cache.len()
    }

    /// Bytes of KV cache held (capacity).
    pub fn cache_bytes(&self) -> usize {
        self.cache.bytes()
    }

    fn choose(
        &mut self,
        hidden: Vec<f32>,
        mut logits: Vec<f32>,
        observer: &mut LogitsObserver,
    ) -> TalkerOutput {
        if let Some(obs) = observer.as_mut() {
            obs(RawLogits::Talker(&logits));
        }
        self.rules.apply(&mut logits, &self.history, &mut self.seen);
        let c0 = pick(&mut logits, &self.sampler, &mut self.rng, &mut self.scratch);
        self.history.push(c0);
        TalkerOutput { hidden, c0 }
    }

    /// Runs the prompt and picks the first codebook-0 token.
    pub fn prefill(&mut self, model: &impl TalkerModels) -> TalkerOutput {
        self.prefill_observed(model, &mut None)
    }

    pub(crate) fn prefill_observed(
        &mut self,
        model: &impl TalkerModels,
        observer: &mut LogitsObserver,
    ) -> TalkerOutput {
        let from = self.start_prefill(model.prefix_cache());
        let (rows, hd) = (self.prompt.prefill_rows(), self.prompt.hidden);
        let (h, logits) = model.talker().forward(
            &self.prompt.prefill[from * hd..],
            rows - from,
            &mut self.cache,
        );
        self.finish_prefill(model.prefix_cache());
        self.choose(h, logits, observer)
    }

    /// Feeds back a finished frame (`num_code_groups` codes) and picks the
    /// next codebook-0 token.
    pub fn step(&mut self, model: &impl TalkerModels, frame: &[u32]) -> TalkerOutput {
        self.step_observed(model, frame, &mut None)
    }

    pub(crate) fn step_observed(
        &mut self,
        model: &impl TalkerModels,
        frame: &[u32],
        observer: &mut LogitsObserver,
    ) -> TalkerOutput {
        let mut x = Vec::new();
        self.feedback_row(model, frame, &mut x);
        let (hidden, logits) = model.talker().forward(&x, 1, &mut self.cache);
        self.choose(hidden, logits, observer)
    }

    /// Appends the talker input row of a fed-back frame to `x` and counts
    /// the frame as fed: `C(c0) + sum_i E_i(c_i)` plus the next trailing
    /// text row (or `tts_pad`).
    fn feedback_row(&mut self, model: &impl TalkerModels, frame: &[u32], x: &mut Vec<f32>) {
        debug_assert!(
            !self.waiting_for_text(),
            "a live-text step before its text row arrived"
        );
        let talker = model.talker();
        let h = talker.hidden_size();
        let at = x.len();
        x.resize(at + h, 0.0);
        let row = &mut x[at..];
        talker.add_codec_embedding(frame[0], row);
        model.add_predicted_embeddings(&frame[1..], row);
        let t = self.fed;
        let add = if t < self.prompt.trailing_rows() {
            &self.prompt.trailing[t * h..(t + 1) * h]
        } else {
            &self.prompt.tts_pad[..]
        };
        row.iter_mut().zip(add).for_each(|(a, b)| *a += b);
        self.fed += 1;
    }

    /// One talker step for several sessions in one decoder pass
    /// ([`Talker::forward_batch`]): each session runs its prompt
    /// ([`TalkerWork::Prefill`], a session joining) or feeds back its last
    /// frame ([`TalkerWork::Feedback`]), with its own KV cache and
    /// positions. Each session then picks its codebook-0 token with its own
    /// rules, sampler and RNG, so every output equals what
    /// [`Self::prefill`] / [`Self::step`] give that session alone. Outputs
    /// are in `batch` order.
    ///
    /// Panics if a session is prefilled twice.
    pub fn step_batch(
        model: &impl TalkerModels,
        batch: &mut [(&mut TalkerState, TalkerWork<'_>)],
        scratch: &mut BatchScratch,
    ) -> Vec<TalkerOutput> {
        let h = model.talker().hidden_size();
        let mut x = Vec::new();
        let mut lens = Vec::with_capacity(batch.len());
        for (s, work) in batch.iter_mut() {
            match work {
                TalkerWork::Prefill => {
                    let from = s.start_prefill(model.prefix_cache());
                    x.extend_from_slice(&s.prompt.prefill[from * h..]);
                    lens.push(s.prompt.prefill_rows() - from);
                }
                TalkerWork::Feedback(frame) => {
                    s.feedback_row(model, frame, &mut x);
                    lens.push(1);
                }
            }
        }
        let (hidden, logits) = {
            let mut caches: Vec<&mut KvCache> =
                batch.iter_mut().map(|(s, _)| &mut s.cache).collect();
            model
                .talker()
                .forward_batch(&x, &lens, &mut caches, scratch)
        };
        for (s, work) in batch.iter() {
            if matches!(work, TalkerWork::Prefill) {
                s.finish_prefill(model.prefix_cache());
            }
        }
        let vocab = model.talker().vocab_size();
        batch
            .iter_mut()
            .enumerate()
            .map(|(i, (s, _))| {
                s.choose(
                    hidden[i * h..(i + 1) * h].to_vec(),
                    logits[i * vocab..(i + 1) * vocab].to_vec(),
                    &mut None,
                )
            })
            .collect()
    }
}

/// A session's part in [`TalkerState::step_batch`].
#[derive(Clone, Copy, Debug)]
pub enum TalkerWork<'a> {
    /// Run the prompt and pick the first codebook-0 token.
    Prefill,
    /// Feed back this finished frame (`num_code_groups` codes) and pick the
    /// next codebook-0 token.
    Feedback(&'a [u32]),
}
