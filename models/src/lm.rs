//! The Qwen3 decoder stack shared by the talker and the code predictor.
//!
//! Per layer: `h = x + o(attn(rmsnorm(x)))`, `x' = h + down(silu(gate(y)) *
//! up(y))` with `y = rmsnorm(h)`; q/k get a per-head RMSNorm before
//! rotate-half RoPE; GQA; causal (optionally sliding-window) attention.
//! The KV cache is a separate value ([`KvCache`], `lm/kv.rs`, f32 or bf16 as
//! the stage's plan says) owned by the caller, so one
//! set of weights serves any number of sessions, and
//! [`Qwen3Lm::forward_batch`] steps several sequences (each with its own
//! cache and positions) in one pass over the weights.

use tts_kernels::{
    attention_batch, matmul, matmul_shared, rms_norm, rope, silu_mul, AttnSegment, AttnShape,
    KvData, KvLayout, KvRows,
};

mod kv;
mod scratch;

pub use kv::{KvCache, KvPrefix};
use scratch::Scratch;

use crate::checkpoint::TensorStore;
use crate::config::LmConfig;
use crate::error::Result;
use crate::quant::{KvFormat, Precision, StagePlan, TensorClass};
use crate::wcache::{PlanConverter, WeightsCache};
use crate::weight::Weight;

struct Layer {
    input_norm: Vec<f32>,
    post_norm: Vec<f32>,
    q: Weight,
    k: Weight,
    v: Weight,
    o: Weight,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    gate: Weight,
    up: Weight,
    down: Weight,
    window: Option<usize>,
}

/// Rotary tables computed as the official code does: f32 inverse
/// frequencies `1 / theta^(2i/d)`, f32 angle `pos * inv_freq`, f32 cos/sin.
#[derive(Clone, Debug)]
pub struct Rope {
    inv_freq: Vec<f32>,
}

impl Rope {
    pub fn new(head_dim: usize, theta: f64) -> Self {
        let theta = theta as f32;
        let inv_freq = (0..head_dim / 2)
            .map(|i| 1.0f32 / theta.powf((2 * i) as f32 / head_dim as f32))
            .collect();
        Rope { inv_freq }
    }

    /// cos and sin (each `head_dim / 2`) for absolute position `pos`.
    pub fn at(&self, pos: usize, cos: &mut [f32], sin: &mut [f32]) {
        for ((c, s), &f) in cos.iter_mut().zip(sin.iter_mut()).zip(&self.inv_freq) {
            let a = pos as f32 * f;
            *c = a.cos();
            *s = a.sin();
        }
    }
}

/// Working memory of [`Qwen3Lm::forward_batch`], owned by whoever batches
/// (a stage serving many sequences): the activations of every row of a call.
/// Reused across calls, so a steady batch size allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct BatchScratch(Scratch);

impl BatchScratch {
    /// Bytes held (capacity).
    pub fn bytes(&self) -> usize {
        self.0.bytes()
    }
}

/// Sets `v.len() = n` without zeroing what is kept (callers overwrite it).
fn fit(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    v.resize(n, 0.0);
    v
}

/// Sequences whose attention segments a forward keeps on the stack (more
/// is a heap list: a batch that large is rare and each of its steps is long).
const STACK_SEGMENTS: usize = 16;

/// A placeholder for the stack's unused segments (never read).
const EMPTY_SEGMENT: AttnSegment<'static> = AttnSegment {
    n_q: 0,
    q_pos0: 0,
    kv: KvRows {
        k: KvData::F32(&[]),
        v: KvData::F32(&[]),
        n: 0,
        pos0: 0,
        layout: KvLayout::Positions,
    },
};

pub struct Qwen3Lm {
    cfg: LmConfig,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    rope: Rope,
    /// The format its caches keep keys and values in (the plan's `kv`).
    kv: KvFormat,
}

impl Qwen3Lm {
    /// Loads `{prefix}.layers.{i}.*` and `{prefix}.norm.weight`; `in_dim` is
    /// the width of the rows fed to [`Self::forward`] (the hidden size).
    pub fn load(store: &TensorStore, prefix: &str, cfg: &LmConfig) -> Result<Self> {
        Self::load_with(store, prefix, cfg, Precision::F32, &WeightsCache::default())
    }

    /// [`Self::load`] with the linear layers converted to `precision`,
    /// through `cache` (which records what it did).
    pub fn load_with(
        store: &TensorStore,
        prefix: &str,
        cfg: &LmConfig,
        precision: Precision,
        cache: &WeightsCache,
    ) -> Result<Self> {
        let conv = PlanConverter::open(store, cache, prefix, StagePlan::uniform(precision));
        let lm = Self::load_planned(store, prefix, cfg, &conv)?;
        conv.finish();
        Ok(lm)
    }

    /// [`Self::load`] with each linear layer taken through `conv` at its
    /// tensor class's precision (attention, MLP gate/up, MLP down); the
    /// caller finishes `conv` once the stage's other tensors are loaded.
    pub fn load_planned(
        store: &TensorStore,
        prefix: &str,
        cfg: &LmConfig,
        conv: &PlanConverter,
    ) -> Result<Self> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let attn = |name: &str, shape: &[usize]| conv.weight(TensorClass::Attn, name, shape);
        let up_gate =
            |name: &str, shape: &[usize]| conv.weight(TensorClass::MlpUpGate, name, shape);
        let down = |name: &str, shape: &[usize]| conv.weight(TensorClass::MlpDown, name, shape);
        let (qd, kvd) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let p = format!("{prefix}.layers.{i}");
            layers.push(Layer {
                input_norm: store.vector(&format!("{p}.input_layernorm.weight"), &[h])?,
                post_norm: store.vector(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                q: attn(&format!("{p}.self_attn.q_proj.weight"), &[qd, h])?,
                k: attn(&format!("{p}.self_attn.k_proj.weight"), &[kvd, h])?,
                v: attn(&format!("{p}.self_attn.v_proj.weight"), &[kvd, h])?,
                o: attn(&format!("{p}.self_attn.o_proj.weight"), &[h, qd])?,
                q_norm: store.vector(&format!("{p}.self_attn.q_norm.weight"), &[hd])?,
                k_norm: store.vector(&format!("{p}.self_attn.k_norm.weight"), &[hd])?,
                gate: up_gate(
                    &format!("{p}.mlp.gate_proj.weight"),
                    &[cfg.intermediate_size, h],
                )?,
                up: up_gate(
                    &format!("{p}.mlp.up_proj.weight"),
                    &[cfg.intermediate_size, h],
                )?,
                down: down(
                    &format!("{p}.mlp.down_proj.weight"),
                    &[h, cfg.intermediate_size],
                )?,
                window: cfg.layer_windows.get(i).copied().flatten(),
            });
        }
        Ok(Qwen3Lm {
            cfg: cfg.clone(),
            layers,
            norm: store.vector(&format!("{prefix}.norm.weight"), &[h])?,
            rope: Rope::new(hd, cfg.rope_theta),
            kv: conv.plan().kv,
        })
    }

    pub fn config(&self) -> &LmConfig {
        &self.cfg
    }

    /// The format its KV caches keep keys and values in.
    pub fn kv_format(&self) -> KvFormat {
        self.kv
    }

    /// Whether `cache` is laid out for this model (else a forward rebinds it).
    fn binds(&self, cache: &KvCache) -> bool {
        cache.k.len() == self.layers.len()
            && (cache.heads, cache.head_dim) == (self.cfg.num_kv_heads, self.cfg.head_dim)
            && cache.format == self.kv
    }

    pub fn new_cache(&self) -> KvCache {
        KvCache::new(
            self.layers.len(),
            self.cfg.num_kv_heads,
            self.cfg.head_dim,
            self.kv,
        )
    }

    /// A cache with room for `positions` positions: appending up to that many
    /// never reallocates (a reallocation copies the whole history).
    pub fn new_cache_with_capacity(&self, positions: usize) -> KvCache {
        let mut c = self.new_cache();
        self.reserve(&mut c, positions);
        c
    }

    /// Makes room in `cache` for `positions` positions in total.
    pub fn reserve(&self, cache: &mut KvCache, positions: usize) {
        if !self.binds(cache) {
            *cache = self.new_cache();
        }
        cache.reserve_positions(positions);
    }

    /// Bytes of the linear layers' weights (what one decode step streams).
    pub fn weight_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| {
                [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                    .iter()
                    .map(|w| w.bytes())
                    .sum::<usize>()
            })
            .sum()
    }

    /// Bytes of KV cache per position (all layers, k and v, in the
    /// cache's format).
    pub fn kv_bytes_per_position(&self) -> usize {
        2 * self.layers.len() * self.cfg.num_kv_heads * self.cfg.head_dim * self.kv.bytes()
    }

    /// Runs `n` input rows `x = [n, hidden]` at positions `cache.len()..`,
    /// appends their keys/values to `cache`, and returns the final-normed
    /// hidden states `[n, hidden]`.
    pub fn forward(&self, x: &[f32], n: usize, cache: &mut KvCache) -> Vec<f32> {
        self.forward_in_cache(x, n, cache).to_vec()
    }

    /// [`Self::forward`] without allocating once `cache` has seen a call of
    /// `n` rows: the hidden states are returned in the cache's working
    /// memory, valid until its next forward.
    pub fn forward_in_cache<'c>(&self, x: &[f32], n: usize, cache: &'c mut KvCache) -> &'c [f32] {
        // The cache's own working memory serves a one-sequence call; it is
        // moved out (no allocation) so the batch core can borrow both.
        let mut sc = std::mem::take(&mut cache.scratch);
        self.run(x, &[n], &mut [&mut *cache], &mut sc);
        cache.scratch = sc;
        &cache.scratch.hn[..n * self.cfg.hidden_size]
    }

    /// One forward over several sequences at once: segment `i` is `lens[i]`
    /// consecutive rows of `x = [sum(lens), hidden]` for the sequence held
    /// in `caches[i]`, at that cache's positions `caches[i].len()..`. Returns
    /// the final-normed hidden states of every row, `[sum(lens), hidden]`,
    /// in `scratch` (valid until its next use).
    ///
    /// The linear layers run once for all rows (`matmul` with `m =
    /// sum(lens)`), so their weights are read once per call however many
    /// sequences take part; norms, QK-norm, RoPE, the KV append and
    /// attention stay per sequence. Every row is computed exactly as
    /// [`Self::forward`] computes it for its sequence alone (the kernels
    /// treat rows independently), so a batched result is bit-identical to
    /// the unbatched one — `models/tests/it/batch.rs` checks it.
    ///
    /// Panics if `lens` and `caches` differ in length, a segment is empty,
    /// or `x` is not `[sum(lens), hidden]`.
    pub fn forward_batch<'s>(
        &self,
        x: &[f32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
        scratch: &'s mut BatchScratch,
    ) -> &'s [f32] {
        self.run(x, lens, caches, &mut scratch.0);
        let rows: usize = lens.iter().sum();
        &scratch.0.hn[..rows * self.cfg.hidden_size]
    }

    /// The decoder over segments (see [`Self::forward_batch`]); the result
    /// is left in `sc.hn`.
    fn run(&self, x: &[f32], lens: &[usize], caches: &mut [&mut KvCache], sc: &mut Scratch) {
        let c = &self.cfg;
        let (h, hd) = (c.hidden_size, c.head_dim);
        let (qd, kvd, inter) = (c.num_heads * hd, c.num_kv_heads * hd, c.intermediate_size);
        assert_eq!(
            lens.len(),
            caches.len(),
            "lm forward: {} segment lengths for {} caches",
            lens.len(),
            caches.len()
        );
        assert!(
            lens.iter().all(|&l| l > 0),
            "lm forward: empty segment in {lens:?}"
        );
        let n: usize = lens.iter().sum();
        assert_eq!(x.len(), n * h, "lm forward: input is not [n, hidden]");
        for (cache, &len) in caches.iter_mut().zip(lens) {
            if !self.binds(cache) {
                let scratch = std::mem::take(&mut cache.scratch);
                **cache = self.new_cache();
                cache.scratch = scratch;
            }
            cache.grow_for(cache.len + len);
        }
        fit(&mut sc.x, n * h).copy_from_slice(x);
        fit(&mut sc.hn, n * h);
        fit(&mut sc.q, n * qd);
        fit(&mut sc.k, n * kvd);
        fit(&mut sc.v, n * kvd);
        fit(&mut sc.att, n * qd);
        fit(&mut sc.proj, n * h);
        fit(&mut sc.gate, n * inter);
        fit(&mut sc.up, n * inter);
        fit(&mut sc.act, n * inter);
        fit(&mut sc.tmp, qd.max(kvd));
        let half = hd / 2;
        fit(&mut sc.cos, n * half);
        fit(&mut sc.sin, n * half);
        // Row ranges of the segments and their first positions.
        let mut row = 0;
        for (cache, &len) in caches.iter().zip(lens) {
            for i in 0..len {
                let r = (row + i) * half..(row + i + 1) * half;
                self.rope
                    .at(cache.len + i, &mut sc.cos[r.clone()], &mut sc.sin[r]);
            }
            row += len;
        }
        let Scratch {
            x,
            hn,
            q,
            k,
            v,
            att,
            proj,
            gate,
            up,
            act,
            cos,
            sin,
            tmp,
        } = sc;
        for (li, l) in self.layers.iter().enumerate() {
            rms_norm(x, &l.input_norm, c.rms_norm_eps, hn);
            matmul_shared(
                hn,
                n,
                &mut [
                    (&l.q.mat(), &mut q[..]),
                    (&l.k.mat(), &mut k[..]),
                    (&l.v.mat(), &mut v[..]),
                ],
            );
            for i in 0..n {
                let (cos, sin) = (
                    &cos[i * half..(i + 1) * half],
                    &sin[i * half..(i + 1) * half],
                );
                let qi = &mut q[i * qd..(i + 1) * qd];
                tmp[..qd].copy_from_slice(qi);
                rms_norm(&tmp[..qd], &l.q_norm, c.rms_norm_eps, qi);
                rope(qi, hd, cos, sin);
                let ki = &mut k[i * kvd..(i + 1) * kvd];
                tmp[..kvd].copy_from_slice(ki);
                rms_norm(&tmp[..kvd], &l.k_norm, c.rms_norm_eps, ki);
                rope(ki, hd, cos, sin);
            }
            let shape = AttnShape {
                n_heads: c.num_heads,
                n_kv_heads: c.num_kv_heads,
                head_dim: hd,
                scale: (hd as f32).powf(-0.5),
                window: l.window,
            };
            let mut row = 0;
            for (cache, &len) in caches.iter_mut().zip(lens) {
                let kr = row * kvd..(row + len) * kvd;
                cache.append(li, len, &k[kr.clone()], &v[kr]);
                row += len;
            }
            // One region for every sequence's (query, head) tasks; the
            // segments on the stack up to `STACK_SEGMENTS` sequences, so a
            // decode step still allocates nothing.
            if caches.len() <= STACK_SEGMENTS {
                let mut stack = [EMPTY_SEGMENT; STACK_SEGMENTS];
                for (d, (c, &len)) in stack.iter_mut().zip(caches.iter().zip(lens)) {
                    *d = c.segment(li, len);
                }
                attention_batch(q, &stack[..caches.len()], shape, att);
            } else {
                let segments: Vec<_> = caches
                    .iter()
                    .zip(lens)
                    .map(|(c, &len)| c.segment(li, len))
                    .collect();
                attention_batch(q, &segments, shape, att);
            }
            matmul(att, n, &l.o.mat(), None, proj);
            x.iter_mut().zip(proj.iter()).for_each(|(a, b)| *a += b);

            rms_norm(x, &l.post_norm, c.rms_norm_eps, hn);
            matmul_shared(
                hn,
                n,
                &mut [(&l.gate.mat(), &mut gate[..]), (&l.up.mat(), &mut up[..])],
            );
            silu_mul(gate, up, act);
            matmul(act, n, &l.down.mat(), None, proj);
            x.iter_mut().zip(proj.iter()).for_each(|(a, b)| *a += b);
        }
        for (cache, &len) in caches.iter_mut().zip(lens) {
            cache.len += len;
        }
        rms_norm(x, &self.norm, c.rms_norm_eps, hn);
    }
}
