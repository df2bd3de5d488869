//! The code predictor's weights and forward pass ("sub-talker"): a small Qwen3 decoder that, for each
//! frame, fills codebooks 1..G-1 from the talker's hidden state and the
//! frame's codebook-0 token. Fresh KV cache per frame; G-1 sequential steps,
//! run for any number of sequences together ([`CodePredictor::predict_batch`]).

use tts_kernels::matmul;

use crate::checkpoint::TensorStore;
use crate::config::TalkerConfig;
use crate::error::Result;
use crate::lm::{BatchScratch, KvCache, Qwen3Lm};
use crate::quant::{StagePlan, TensorClass};
use crate::sampling::{pick, Rng, SamplerConfig};
use crate::wcache::{PlanConverter, WeightsCache};
use crate::weight::Weight;

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

/// Working memory of [`CodePredictor::predict_batch`] (and of
/// [`CodePredictor::predict_with`], its one-sequence case), owned by whoever
/// runs frames — a session, or a stage batching sessions — so the 15 steps
/// of a frame, and later frames, reuse it.
#[derive(Clone, Debug, Default)]
pub struct PredictScratch {
    /// The rows fed to the LM at this step (talker width), all sequences.
    x: Vec<f32>,
    /// `x` through `small_to_mtp_projection` (1.7B).
    projected: Vec<f32>,
    /// Rows per sequence at this step (2 for the prefill, then 1).
    lens: Vec<usize>,
    /// The last hidden row of each sequence `[B, cp_hidden]`.
    last: Vec<f32>,
    /// `[B, cp_vocab]`.
    logits: Vec<f32>,
    lm: BatchScratch,
}

impl CodePredictor {
    /// Weight bytes one frame streams: the decoder once per predicted
    /// codebook, and each codebook's head once.
    pub fn bytes_per_frame(&self) -> usize {
        let steps = self.heads.len();
        steps * self.lm.weight_bytes()
            + self.heads.iter().map(Weight::bytes).sum::<usize>()
            + self
                .projection
                .as_ref()
                .map_or(0, |(w, _)| steps * w.bytes())
    }

    pub fn load(store: &TensorStore, cfg: &TalkerConfig) -> Result<Self> {
        Self::load_with(store, cfg, StagePlan::default(), &WeightsCache::default())
    }

    /// [`Self::load`] with the decoder's linear layers and the heads at
    /// `plan`'s precision per tensor class, through `cache` (the
    /// embeddings and the projection keep the stored weights).
    pub fn load_with(
        store: &TensorStore,
        cfg: &TalkerConfig,
        plan: StagePlan,
        cache: &WeightsCache,
    ) -> Result<Self> {
        let cp = &cfg.code_predictor;
        let (th, ch, groups) = (cfg.lm.hidden_size, cp.hidden_size, cfg.num_code_groups);
        let p = "talker.code_predictor";
        let conv = PlanConverter::open(store, cache, &format!("{p}.model"), plan);
        let embeddings = (0..groups - 1)
            .map(|i| {
                store.weight(
                    &format!("{p}.model.codec_embedding.{i}.weight"),
                    &[cp.vocab_size, th],
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let heads = (0..groups - 1)
            .map(|i| {
                conv.weight(
                    TensorClass::Head,
                    &format!("{p}.lm_head.{i}.weight"),
                    &[cp.vocab_size, ch],
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let projection = if th != ch {
            Some((
                store.weight(&format!("{p}.small_to_mtp_projection.weight"), &[ch, th])?,
                store.vector(&format!("{p}.small_to_mtp_projection.bias"), &[ch])?,
            ))
        } else {
            None
        };
        let lm = Qwen3Lm::load_planned(store, &format!("{p}.model"), cp, &conv)?;
        conv.finish();
        Ok(CodePredictor {
            lm,
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
    /// nothing. The one-sequence case of [`Self::predict_batch`].
    pub fn predict_with(
        &self,
        talker_hidden: &[f32],
        c0_embedding: &[f32],
        cache: &mut KvCache,
        scratch: &mut PredictScratch,
        codes: &mut [u32],
        mut choose: impl FnMut(usize, &mut [f32]) -> u32,
    ) {
        self.predict_batch(
            talker_hidden,
            c0_embedding,
            &mut [cache],
            scratch,
            codes,
            |_, i, l| choose(i, l),
        )
    }

    /// Predicts codebooks 1..G-1 of one frame for `B = caches.len()`
    /// sequences at once: the G-1 sequential steps run for all of them
    /// together, each step one batched LM pass ([`Qwen3Lm::forward_batch`])
    /// and one batched head matmul, so every weight is read once per step
    /// for the whole batch. `talker_hidden` and `c0_embedding` are
    /// `[B, talker_hidden]` (row `b` for sequence `b`), `codes` is
    /// `[B, G-1]`, and `choose(b, i, logits)` picks sequence `b`'s code for
    /// predicted codebook `i` (each sequence keeps its own sampler and RNG,
    /// called in sequence order within a step). Every sequence's logits and
    /// codes equal what [`Self::predict`] gives it alone.
    ///
    /// Panics if the inputs are not of the sizes above.
    pub fn predict_batch(
        &self,
        talker_hidden: &[f32],
        c0_embedding: &[f32],
        caches: &mut [&mut KvCache],
        scratch: &mut PredictScratch,
        codes: &mut [u32],
        mut choose: impl FnMut(usize, usize, &mut [f32]) -> u32,
    ) {
        let th = self.talker_hidden;
        let steps = self.heads.len();
        let b = caches.len();
        assert_eq!(
            talker_hidden.len(),
            b * th,
            "predict: talker hidden is not [B, hidden]"
        );
        assert_eq!(
            c0_embedding.len(),
            b * th,
            "predict: c0 embedding is not [B, hidden]"
        );
        assert_eq!(codes.len(), b * steps, "predict: codes is not [B, G-1]");
        if b == 0 {
            return;
        }
        for cache in caches.iter_mut() {
            cache.clear();
            // Prefill of 2 rows, then one row per predicted codebook but the last.
            self.lm.reserve(cache, steps + 1);
        }
        let PredictScratch {
            x,
            projected,
            lens,
            last,
            logits,
            lm,
        } = scratch;
        // Prefill rows per sequence: its talker hidden state, then C(c0).
        x.clear();
        for (h, e) in talker_hidden
            .chunks_exact(th)
            .zip(c0_embedding.chunks_exact(th))
        {
            x.extend_from_slice(h);
            x.extend_from_slice(e);
        }
        lens.clear();
        lens.resize(b, 2);
        let vocab = self.vocab_size();
        logits.resize(b * vocab, 0.0);
        let ch = self.lm.config().hidden_size;
        last.resize(b * ch, 0.0);
        for (step, head) in self.heads.iter().enumerate() {
            let rows: usize = lens.iter().sum();
            let input = match &self.projection {
                None => &x[..],
                Some((w, bias)) => {
                    projected.resize(rows * w.rows(), 0.0);
                    matmul(x, rows, &w.mat(), Some(bias), projected);
                    &projected[..]
                }
            };
            let hs = self.lm.forward_batch(input, lens, caches, lm);
            let mut end = 0;
            for (dst, &len) in last.chunks_exact_mut(ch).zip(lens.iter()) {
                end += len;
                dst.copy_from_slice(&hs[(end - 1) * ch..end * ch]);
            }
            matmul(last, b, &head.mat(), None, logits);
            for (i, l) in logits.chunks_exact_mut(vocab).enumerate() {
                codes[i * steps + step] = choose(i, step, l);
            }
            if step + 1 < steps {
                x.clear();
                x.resize(b * th, 0.0);
                for (i, row) in x.chunks_exact_mut(th).enumerate() {
                    self.add_embedding(step, codes[i * steps + step], row);
                }
                lens.iter_mut().for_each(|l| *l = 1);
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
