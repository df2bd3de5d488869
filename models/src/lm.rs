//! The Qwen3 decoder stack shared by the talker and the code predictor.
//!
//! Per layer: `h = x + o(attn(rmsnorm(x)))`, `x' = h + down(silu(gate(y)) *
//! up(y))` with `y = rmsnorm(h)`; q/k get a per-head RMSNorm before
//! rotate-half RoPE; GQA; causal (optionally sliding-window) attention.
//! The KV cache is a separate value ([`KvCache`]) owned by the caller, so one
//! set of weights serves any number of sessions, and a later batched forward
//! can take several caches at once.

use tts_kernels::{attention, matmul, rms_norm, rope, silu_mul, AttnShape};

use crate::checkpoint::{TensorStore, Weight};
use crate::config::LmConfig;
use crate::error::Result;

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
        let inv_freq =
            (0..head_dim / 2).map(|i| 1.0f32 / theta.powf((2 * i) as f32 / head_dim as f32)).collect();
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

/// Key/value history of one sequence for every layer: `[len, kv_heads, head_dim]`.
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    len: usize,
}

impl KvCache {
    /// Positions already in the cache (the next input's position).
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Forgets the sequence but keeps the allocation.
    pub fn clear(&mut self) {
        self.k.iter_mut().for_each(Vec::clear);
        self.v.iter_mut().for_each(Vec::clear);
        self.len = 0;
    }
    /// Bytes held (capacity), for memory accounting.
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|b| b.capacity() * 4).sum()
    }
}

pub struct Qwen3Lm {
    cfg: LmConfig,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    rope: Rope,
}

impl Qwen3Lm {
    /// Loads `{prefix}.layers.{i}.*` and `{prefix}.norm.weight`; `in_dim` is
    /// the width of the rows fed to [`Self::forward`] (the hidden size).
    pub fn load(store: &TensorStore, prefix: &str, cfg: &LmConfig) -> Result<Self> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let (qd, kvd) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let p = format!("{prefix}.layers.{i}");
            layers.push(Layer {
                input_norm: store.vector(&format!("{p}.input_layernorm.weight"), &[h])?,
                post_norm: store.vector(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                q: store.weight(&format!("{p}.self_attn.q_proj.weight"), &[qd, h])?,
                k: store.weight(&format!("{p}.self_attn.k_proj.weight"), &[kvd, h])?,
                v: store.weight(&format!("{p}.self_attn.v_proj.weight"), &[kvd, h])?,
                o: store.weight(&format!("{p}.self_attn.o_proj.weight"), &[h, qd])?,
                q_norm: store.vector(&format!("{p}.self_attn.q_norm.weight"), &[hd])?,
                k_norm: store.vector(&format!("{p}.self_attn.k_norm.weight"), &[hd])?,
                gate: store.weight(&format!("{p}.mlp.gate_proj.weight"), &[cfg.intermediate_size, h])?,
                up: store.weight(&format!("{p}.mlp.up_proj.weight"), &[cfg.intermediate_size, h])?,
                down: store.weight(&format!("{p}.mlp.down_proj.weight"), &[h, cfg.intermediate_size])?,
                window: cfg.layer_windows.get(i).copied().flatten(),
            });
        }
        Ok(Qwen3Lm {
            cfg: cfg.clone(),
            layers,
            norm: store.vector(&format!("{prefix}.norm.weight"), &[h])?,
            rope: Rope::new(hd, cfg.rope_theta),
        })
    }

    pub fn config(&self) -> &LmConfig {
        &self.cfg
    }

    pub fn new_cache(&self) -> KvCache {
        KvCache { k: vec![Vec::new(); self.layers.len()], v: vec![Vec::new(); self.layers.len()], len: 0 }
    }

    /// Bytes of KV cache per position (all layers, k and v, f32).
    pub fn kv_bytes_per_position(&self) -> usize {
        2 * self.layers.len() * self.cfg.num_kv_heads * self.cfg.head_dim * 4
    }

    /// Runs `n` input rows `x = [n, hidden]` at positions `cache.len()..`,
    /// appends their keys/values to `cache`, and returns the final-normed
    /// hidden states `[n, hidden]`.
    pub fn forward(&self, x: &[f32], n: usize, cache: &mut KvCache) -> Vec<f32> {
        let c = &self.cfg;
        let (h, hd) = (c.hidden_size, c.head_dim);
        let (qd, kvd, inter) = (c.num_heads * hd, c.num_kv_heads * hd, c.intermediate_size);
        assert_eq!(x.len(), n * h, "lm forward: input is not [n, hidden]");
        if cache.k.len() != self.layers.len() {
            *cache = self.new_cache();
        }
        let pos0 = cache.len;
        let mut x = x.to_vec();
        let mut hn = vec![0f32; n * h];
        let mut q = vec![0f32; n * qd];
        let mut k = vec![0f32; n * kvd];
        let mut v = vec![0f32; n * kvd];
        let mut att = vec![0f32; n * qd];
        let mut proj = vec![0f32; n * h];
        let mut gate = vec![0f32; n * inter];
        let mut up = vec![0f32; n * inter];
        let mut act = vec![0f32; n * inter];
        let mut cos = vec![0f32; hd / 2];
        let mut sin = vec![0f32; hd / 2];
        let mut tmp = vec![0f32; qd.max(kvd)];
        for (li, l) in self.layers.iter().enumerate() {
            rms_norm(&x, &l.input_norm, c.rms_norm_eps, &mut hn);
            matmul(&hn, n, &l.q.mat(), None, &mut q);
            matmul(&hn, n, &l.k.mat(), None, &mut k);
            matmul(&hn, n, &l.v.mat(), None, &mut v);
            for i in 0..n {
                self.rope.at(pos0 + i, &mut cos, &mut sin);
                let qi = &mut q[i * qd..(i + 1) * qd];
                tmp[..qd].copy_from_slice(qi);
                rms_norm(&tmp[..qd], &l.q_norm, c.rms_norm_eps, qi);
                rope(qi, hd, &cos, &sin);
                let ki = &mut k[i * kvd..(i + 1) * kvd];
                tmp[..kvd].copy_from_slice(ki);
                rms_norm(&tmp[..kvd], &l.k_norm, c.rms_norm_eps, ki);
                rope(ki, hd, &cos, &sin);
            }
            cache.k[li].extend_from_slice(&k);
            cache.v[li].extend_from_slice(&v);
            let n_kv = pos0 + n;
            let shape = AttnShape {
                n_heads: c.num_heads,
                n_kv_heads: c.num_kv_heads,
                head_dim: hd,
                scale: (hd as f32).powf(-0.5),
                window: l.window,
            };
            attention(&q, n, pos0, &cache.k[li], &cache.v[li], n_kv, 0, shape, &mut att);
            matmul(&att, n, &l.o.mat(), None, &mut proj);
            x.iter_mut().zip(&proj).for_each(|(a, b)| *a += b);

            rms_norm(&x, &l.post_norm, c.rms_norm_eps, &mut hn);
            matmul(&hn, n, &l.gate.mat(), None, &mut gate);
            matmul(&hn, n, &l.up.mat(), None, &mut up);
            silu_mul(&gate, &up, &mut act);
            matmul(&act, n, &l.down.mat(), None, &mut proj);
            x.iter_mut().zip(&proj).for_each(|(a, b)| *a += b);
        }
        cache.len += n;
        rms_norm(&x, &self.norm, c.rms_norm_eps, &mut hn);
        hn
    }
}
