//! The code predictor ("sub-talker"): a small Qwen3 decoder that, for each
//! frame, fills codebooks 1..G-1 from the talker's hidden state and the
//! frame's codebook-0 token. Fresh KV cache per frame; G-1 sequential steps.

use tts_kernels::matmul;

use crate::checkpoint::{TensorStore, Weight};
use crate::config::TalkerConfig;
use crate::error::Result;
use crate::lm::{KvCache, Qwen3Lm};
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

impl CodePredictor {
    pub fn load(store: &TensorStore, cfg: &TalkerConfig) -> Result<Self> {
        let cp = &cfg.code_predictor;
        let (th, ch, groups) = (cfg.lm.hidden_size, cp.hidden_size, cfg.num_code_groups);
        let p = "talker.code_predictor";
        let embeddings = (0..groups - 1)
            .map(|i| store.weight(&format!("{p}.model.codec_embedding.{i}.weight"), &[cp.vocab_size, th]))
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
        Ok(CodePredictor { lm: Qwen3Lm::load(store, &format!("{p}.model"), cp)?, embeddings, heads, projection, talker_hidden: th })
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

    fn project(&self, x: Vec<f32>, n: usize) -> Vec<f32> {
        match &self.projection {
            None => x,
            Some((w, b)) => {
                let mut y = vec![0f32; n * w.rows()];
                matmul(&x, n, &w.mat(), Some(b), &mut y);
                y
            }
        }
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
        mut choose: impl FnMut(usize, &mut [f32]) -> u32,
    ) {
        let th = self.talker_hidden;
        cache.clear();
        let mut x = Vec::with_capacity(2 * th);
        x.extend_from_slice(talker_hidden);
        x.extend_from_slice(c0_embedding);
        let mut hs = self.lm.forward(&self.project(x, 2), 2, cache);
        let ch = self.lm.config().hidden_size;
        let mut logits = vec![0f32; self.vocab_size()];
        for step in 0..self.heads.len() {
            let last = &hs[hs.len() - ch..];
            matmul(last, 1, &self.heads[step].mat(), None, &mut logits);
            let code = choose(step, &mut logits);
            codes[step] = code;
            if step + 1 < self.heads.len() {
                let mut e = vec![0f32; th];
                self.add_embedding(step, code, &mut e);
                hs = self.lm.forward(&self.project(e, 1), 1, cache);
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
        self.predict(talker_hidden, c0_embedding, cache, codes, |_, l| pick(l, sampler, rng, &mut scratch))
    }
}
