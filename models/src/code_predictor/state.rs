//! The code predictor stage's per-request state ([`PredictorState`]): its
//! sampler and RNG stream, the scratch KV cache reset every frame, and one
//! frame alone or batched across requests
//! ([`PredictorState::predict_batch`]).

use std::sync::Arc;

use super::weights::{CodePredictor, PredictScratch};
use crate::codec::DecoderState;
use crate::lm::KvCache;
use crate::request::GenOptions;
use crate::sampling::{pick, LogitsObserver, RawLogits, Rng, SamplerConfig};
use crate::talker::{TalkerModels, TalkerOutput};

/// What the code predictor stage reads from the loaded model (the
/// `Qwen3Tts` handle implements it): the code predictor, and the talker
/// for the codec embedding of each frame's codebook-0 token.
pub trait PredictorModels: TalkerModels {
    fn code_predictor(&self) -> &CodePredictor;
}

impl<M: PredictorModels + ?Sized> PredictorModels for &M {
    fn code_predictor(&self) -> &CodePredictor {
        (**self).code_predictor()
    }
}

impl<M: PredictorModels + ?Sized> PredictorModels for Arc<M> {
    fn code_predictor(&self) -> &CodePredictor {
        (**self).code_predictor()
    }
}

/// Seed offset of the code predictor's RNG stream (independent of the
/// talker's, so the two stages can run apart and stay reproducible).
const PREDICTOR_STREAM: u64 = 0x5EED_C0DE_0000_0001;

/// Code-predictor-side state of one request (its scratch KV cache is reset
/// every frame; the RNG stream persists).
pub struct PredictorState {
    sampler: SamplerConfig,
    rng: Rng,
    cache: KvCache,
    scratch: Vec<f32>,
    work: PredictScratch,
    /// The state code2wav starts this request's decoder from (an ICL
    /// clone's decoder primed with the reference codes); it rides to
    /// code2wav with the request's first frame. None: a fresh decoder.
    decoder_start: Option<Box<DecoderState>>,
}

impl PredictorState {
    pub fn new(cp: &CodePredictor, options: &GenOptions) -> Self {
        PredictorState {
            sampler: options.code_predictor,
            rng: Rng::new(options.seed ^ PREDICTOR_STREAM),
            cache: cp.new_cache(),
            scratch: Vec::new(),
            work: PredictScratch::default(),
            decoder_start: None,
        }
    }

    /// This state with code2wav's start state for the request.
    pub fn with_decoder_start(mut self, state: Option<DecoderState>) -> Self {
        self.decoder_start = state.map(Box::new);
        self
    }

    /// Hands over code2wav's start state (once; None afterwards or when
    /// the decoder starts fresh).
    pub fn take_decoder_start(&mut self) -> Option<Box<DecoderState>> {
        self.decoder_start.take()
    }

    /// Fills codebooks 1..G-1 for a talker output; returns the whole frame.
    pub fn predict(&mut self, model: &impl PredictorModels, t: &TalkerOutput) -> Vec<u32> {
        self.predict_observed(model, t, &mut None)
    }

    pub(crate) fn predict_observed(
        &mut self,
        model: &impl PredictorModels,
        t: &TalkerOutput,
        observer: &mut LogitsObserver,
    ) -> Vec<u32> {
        let (talker, cp) = (model.talker(), model.code_predictor());
        let mut c0_emb = vec![0f32; talker.hidden_size()];
        talker.add_codec_embedding(t.c0, &mut c0_emb);
        let mut frame = vec![0u32; cp.num_predicted() + 1];
        frame[0] = t.c0;
        let (rng, scratch, sampler) = (&mut self.rng, &mut self.scratch, &self.sampler);
        cp.predict_with(
            &t.hidden,
            &c0_emb,
            &mut self.cache,
            &mut self.work,
            &mut frame[1..],
            |i, l| {
                if let Some(obs) = observer.as_mut() {
                    obs(RawLogits::CodePredictor(i, l));
                }
                pick(l, sampler, rng, scratch)
            },
        );
        frame
    }

    /// Fills codebooks 1..G-1 for several sessions' talker outputs in one
    /// batched code-predictor frame ([`CodePredictor::predict_batch`]);
    /// returns each whole frame, in `batch` order. Each session samples with
    /// its own options and RNG stream, so its frame equals what
    /// [`Self::predict`] gives it alone.
    pub fn predict_batch(
        model: &impl PredictorModels,
        batch: &mut [(&mut PredictorState, &TalkerOutput)],
        scratch: &mut PredictScratch,
    ) -> Vec<Vec<u32>> {
        let (talker, cp) = (model.talker(), model.code_predictor());
        let (h, steps) = (talker.hidden_size(), cp.num_predicted());
        let b = batch.len();
        let mut hidden = Vec::with_capacity(b * h);
        let mut c0_emb = vec![0f32; b * h];
        for ((_, t), e) in batch.iter().zip(c0_emb.chunks_exact_mut(h)) {
            hidden.extend_from_slice(&t.hidden);
            talker.add_codec_embedding(t.c0, e);
        }
        let mut codes = vec![0u32; b * steps];
        let mut caches = Vec::with_capacity(b);
        let mut pickers = Vec::with_capacity(b);
        for (s, _) in batch.iter_mut() {
            let PredictorState {
                sampler,
                rng,
                cache,
                scratch,
                ..
            } = &mut **s;
            caches.push(cache);
            pickers.push((&*sampler, rng, scratch));
        }
        cp.predict_batch(
            &hidden,
            &c0_emb,
            &mut caches,
            scratch,
            &mut codes,
            |i, _, l| {
                let (sampler, rng, scratch) = &mut pickers[i];
                pick(l, sampler, rng, scratch)
            },
        );
        batch
            .iter()
            .zip(codes.chunks_exact(steps))
            .map(|((_, t), c)| {
                let mut frame = Vec::with_capacity(steps + 1);
                frame.push(t.c0);
                frame.extend_from_slice(c);
                frame
            })
            .collect()
    }
}
