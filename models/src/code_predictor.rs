//! The code predictor ("sub-talker"): a small Qwen3 decoder that, for each
//! frame, fills codebooks 1..G-1 from the talker's hidden state and the
//! frame's codebook-0 token. Fresh KV cache per frame; G-1 sequential steps.

use tts_kernels::matmul;

use crate::checkpoint::{TensorStore, Weight};
use crate::config::TalkerConfig;
use crate::error::Result;
use crate::lm::{KvCache, Qwen3Lm};
use crate::quant::Precision;
use crate::sampling::{pick, Rng, SamplerConfig};

pub struct CodePredictor {
    lm: Qwen3Lm,
    /// `E_i`, i = 1..G-1: `[cp_vocab, talker_hidden]` each.
    embeddings: Vec<Weight>,
    /// One head per predicted codebook: `[cp_vocab, cp_hidden]`.
    heads: Vec<Weight>,
    /// `small_to_mtp_projection` (talker width → predictor width), when the
    /// widths differ (1.7B).
    projection: Option<(Weight, Vec<f32>)>,
    talker_hidden: usize,
}

/// Working memory of [`CodePredictor::predict_with`], owned by a session so
/// the 15 steps of a frame reuse it.
#[derive(Clone, Debug, Default)]
pub struct PredictScratch {
    /// The rows fed to the LM at this step (talker width).
    x: Vec<f32>,
    /// `x` through `small_to_mtp_projection` (1.7B).
    projected: Vec<f32>,
    logits: Vec<f32>,
}

impl CodePredictor {
    pub fn load(store: &TensorStore, cfg: &TalkerConfig) -> Result<Self> {
        Self::load_with(store, cfg, Precision::F32)
    }

    /// [`Self::load`] with the decoder's linear layers in `precision` (the
    /// embeddings, heads and projection keep the stored weights).
    pub fn load_with(
        store: &TensorStore,
        cfg: &TalkerConfig,
        precision: Precision,
    ) -> Result<Self> {
        let cp = &cfg.code_predictor;
        let (th, ch, groups) = (cfg.lm.hidden_size, cp.hidden_size, cfg.num_code_groups);
        let p = "talker.code_predictor";
        let embeddings = (0..groups - 1)
            .map(|i| {
                store.weight(
                    &format!("{p}.model.codec_embedding.{i}.weight"),
                    &[cp.vocab_size, th],
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let heads = (0..groups - 1)
            .map(|i| store.weight(&format!("{p}.lm_head.{i}.weight"), &[cp.vocab_size, ch]))
            .collect::<Result<Vec<_>>>()?;
        let projection = if th != ch {
            Some((
                store.weight(&format!("{p}.small_to_mtp_projection.weight"), &[ch, th])?,
                store.vector(&format!("{p}.small_to_mtp_projection.bias"), &[ch])?,
            ))
        } else {
            None
        };
        Ok(CodePredictor {
            lm: Qwen3Lm::load_with(store, &format!("{p}.model"), cp, precision)?,
            embeddings,
            heads,
            projection,
            talker_hidden: th,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.heads[0].rows()
    }

    /// Number of codebooks this predicts (G - 1).
    pub fn num_predicted(&self) -> usize {
        self.heads.len()
    }

    pub fn new_cache(&self) -> KvCache {
        self.lm.new_cache()
    }

    /// `out += E_{i+1}(code)` for predicted codebook index `i` (0-based).
    pub fn add_embedding(&self, i: usize, code: u32, out: &mut [f32]) {
        self.embeddings[i].add_row_into(code as usize, out)
    }

    /// Predicts codebooks 1..G-1 of one frame. `talker_hidden` is the talker's
    /// final-normed hidden state that produced codebook 0, `c0_embedding` is
    /// `C(c0)`. `choose(i, logits)` turns the raw logits of predicted codebook
    /// `i` (0-based) into a code — sampling in production, a forced code in
    /// teacher-forced tests. The codes are written to `codes`.
    pub fn predict(
        &self,
        talker_hidden: &[f32],
        c0_embedding: &[f32],
        cache: &mut KvCache,
        codes: &mut [u32],
        choose: impl FnMut(usize, &mut [f32]) -> u32,
    ) {
        self.predict_with(
            talker_hidden,
            c0_embedding,
            cache,
            &mut PredictScratch::default(),
            codes,
            choose,
        )
    }

    /// [`Self::predict`] with caller-owned working memory: with a `cache`
    /// and `scratch` kept across frames (a session's), a frame allocates
    /// nothing.
    pub fn predict_with(
        &self,
        talker_hidden: &[f32],
        c0_embedding: &[f32],
        cache: &mut KvCache,
        scratch: &mut PredictScratch,
        codes: &mut [u32],
        mut choose: impl FnMut(usize, &mut [f32]) -> u32,
    ) {
        let th = self.talker_hidden;
        let steps = self.heads.len();
        cache.clear();
        // Prefill of 2 rows, then one row per predicted codebook but the last.
        self.lm.reserve(cache, steps + 1);
        let PredictScratch {
            x,
            projected,
            logits,
        } = scratch;
        x.clear();
        x.extend_from_slice(talker_hidden);
        x.extend_from_slice(c0_embedding);
        logits.resize(self.vocab_size(), 0.0);
        let ch = self.lm.config().hidden_size;
        let mut rows = 2;
        for (step, head) in self.heads.iter().enumerate() {
            let input = match &self.projection {
                None => &x[..],
                Some((w, b)) => {
                    projected.resize(rows * w.rows(), 0.0);
                    matmul(x, rows, &w.mat(), Some(b), projected);
                    &projected[..]
                }
            };
            let hs = self.lm.forward_in_cache(input, rows, cache);
            matmul(&hs[hs.len() - ch..], 1, &head.mat(), None, logits);
            let code = choose(step, logits);
            codes[step] = code;
            if step + 1 < steps {
                x.clear();
                x.resize(th, 0.0);
                self.add_embedding(step, code, x);
                rows = 1;
            }
        }
    }

    /// [`Self::predict`] with a sampler.
    pub fn predict_sampled(
        &self,
        talker_hidden: &[f32],
        c0_embedding: &[f32],
        cache: &mut KvCache,
        codes: &mut [u32],
        sampler: &SamplerConfig,
        rng: &mut Rng,
    ) {
        let mut scratch = Vec::new();
        self.predict(talker_hidden, c0_embedding, cache, codes, |_, l| {
            pick(l, sampler, rng, &mut scratch)
        })
    }
}
