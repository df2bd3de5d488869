//! The talker's weights and forward pass: a Qwen3 decoder over summed
//! text/codec embeddings that emits codebook 0, plus the text embedding and
//! its projection MLP.

use tts_kernels::{matmul, reference::silu};

use crate::checkpoint::TensorStore;
use crate::config::TalkerConfig;
use crate::error::Result;
use crate::lm::{BatchScratch, KvCache, Qwen3Lm};
use crate::quant::{StagePlan, TensorClass};
use crate::wcache::{PlanConverter, WeightsCache};
use crate::weight::Weight;

pub struct Talker {
    pub(crate) lm: Qwen3Lm,
    text_embedding: Weight,
    fc1: Weight,
    fc1_b: Vec<f32>,
    fc2: Weight,
    fc2_b: Vec<f32>,
    codec_embedding: Weight,
    codec_head: Weight,
    hidden: usize,
}

impl Talker {
    /// Weight bytes one frame streams: the decoder and the codec head.
    pub fn bytes_per_frame(&self) -> usize {
        self.lm.weight_bytes() + self.codec_head.bytes()
    }

    pub fn load(store: &TensorStore, cfg: &TalkerConfig) -> Result<Self> {
        Self::load_with(store, cfg, StagePlan::default(), &WeightsCache::default())
    }

    /// [`Self::load`] with the decoder's linear layers and the codec head at
    /// `plan`'s precision per tensor class, through `cache` (the
    /// embeddings and the text projection keep the stored weights).
    pub fn load_with(
        store: &TensorStore,
        cfg: &TalkerConfig,
        plan: StagePlan,
        cache: &WeightsCache,
    ) -> Result<Self> {
        let (h, th) = (cfg.lm.hidden_size, cfg.text_hidden_size);
        let conv = PlanConverter::open(store, cache, "talker.model", plan);
        let talker = Talker {
            lm: Qwen3Lm::load_planned(store, "talker.model", &cfg.lm, &conv)?,
            text_embedding: store.weight(
                "talker.model.text_embedding.weight",
                &[cfg.text_vocab_size, th],
            )?,
            fc1: store.weight("talker.text_projection.linear_fc1.weight", &[th, th])?,
            fc1_b: store.vector("talker.text_projection.linear_fc1.bias", &[th])?,
            fc2: store.weight("talker.text_projection.linear_fc2.weight", &[h, th])?,
            fc2_b: store.vector("talker.text_projection.linear_fc2.bias", &[h])?,
            codec_embedding: store.weight(
                "talker.model.codec_embedding.weight",
                &[cfg.lm.vocab_size, h],
            )?,
            codec_head: conv.weight(
                TensorClass::Head,
                "talker.codec_head.weight",
                &[cfg.lm.vocab_size, h],
            )?,
            hidden: h,
        };
        conv.finish();
        Ok(talker)
    }

    /// The decoder stack.
    pub fn lm(&self) -> &Qwen3Lm {
        &self.lm
    }

    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    pub fn vocab_size(&self) -> usize {
        self.codec_head.rows()
    }

    pub fn text_vocab_size(&self) -> usize {
        self.text_embedding.rows()
    }

    /// `P(ids)`: text embedding → fc1 → SiLU → fc2, rows `[ids.len(), hidden]`.
    pub fn project_text(&self, ids: &[u32]) -> Vec<f32> {
        let n = ids.len();
        let th = self.text_embedding.cols();
        let mut e = vec![0f32; n * th];
        for (row, &id) in e.chunks_exact_mut(th).zip(ids) {
            self.text_embedding.row_into(id as usize, row);
        }
        let mut a = vec![0f32; n * th];
        matmul(&e, n, &self.fc1.mat(), Some(&self.fc1_b), &mut a);
        a.iter_mut().for_each(|v| *v = silu(*v));
        let mut out = vec![0f32; n * self.hidden];
        matmul(&a, n, &self.fc2.mat(), Some(&self.fc2_b), &mut out);
        out
    }

    /// `out += C(id)`.
    pub fn add_codec_embedding(&self, id: u32, out: &mut [f32]) {
        self.codec_embedding.add_row_into(id as usize, out)
    }

    /// Runs `n` rows through the decoder; returns the last row's final-normed
    /// hidden state and its codebook-0 logits.
    pub fn forward(&self, x: &[f32], n: usize, cache: &mut KvCache) -> (Vec<f32>, Vec<f32>) {
        let hs = self.lm.forward_in_cache(x, n, cache);
        let last = hs[(n - 1) * self.hidden..].to_vec();
        let mut logits = vec![0f32; self.vocab_size()];
        matmul(&last, 1, &self.codec_head.mat(), None, &mut logits);
        (last, logits)
    }

    /// Several sequences in one decoder pass ([`Qwen3Lm::forward_batch`]):
    /// segment `i` is `lens[i]` rows of `x` for `caches[i]` (a prefill, or
    /// one fed-back frame). Returns, per segment, the last row's final-normed
    /// hidden state `[B, hidden]` and its codebook-0 logits `[B, vocab]`;
    /// each equals what [`Self::forward`] returns for that sequence alone.
    pub fn forward_batch(
        &self,
        x: &[f32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
        scratch: &mut BatchScratch,
    ) -> (Vec<f32>, Vec<f32>) {
        let h = self.hidden;
        let hs = self.lm.forward_batch(x, lens, caches, scratch);
        let b = lens.len();
        let mut last = Vec::with_capacity(b * h);
        let mut end = 0;
        for &len in lens {
            end += len;
            last.extend_from_slice(&hs[(end - 1) * h..end * h]);
        }
        let mut logits = vec![0f32; b * self.vocab_size()];
        matmul(&last, b, &self.codec_head.mat(), None, &mut logits);
        (last, logits)
    }

    pub fn new_cache(&self) -> KvCache {
        self.lm.new_cache()
    }

    /// A cache that holds `positions` positions without reallocating.
    pub fn new_cache_with_capacity(&self, positions: usize) -> KvCache {
        self.lm.new_cache_with_capacity(positions)
    }
}
