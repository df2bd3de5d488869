//! The encoder transformer (`MimiTransformerModel`): pre-LayerNorm layers
//! with LayerScale residuals, exact GELU MLPs and rotate-half RoPE at
//! positions `0..t`.
//!
//! Attention is **full causal over the whole clip**: the config's
//! `sliding_window` (250) is not applied, because the official encoder
//! builds its mask with `create_causal_mask` and runs without a cache, where
//! no sliding mask exists (spec §3.2: perturbing frame 0 changes outputs
//! past frame 250). There is no final norm.
//!
//! Layout: `[t, hidden]` rows inside; the public entry takes and returns
//! the conv layout `[hidden, t]`.

use tts_kernels::{AttnShape, KvLayout, KvRows};

use super::weights::Transformer;
use crate::config::CodecEncoderConfig;

/// `[rows, cols]` -> `[cols, rows]`.
pub(crate) fn transpose(src: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut dst = vec![0f32; rows * cols];
    for (r, row) in src.chunks_exact(cols).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            dst[c * rows + r] = v;
        }
    }
    dst
}

/// `x += scale * y`, per feature over rows of `scale.len()`.
fn add_scaled(x: &mut [f32], scale: &[f32], y: &[f32]) {
    for (xr, yr) in x
        .chunks_exact_mut(scale.len())
        .zip(y.chunks_exact(scale.len()))
    {
        for ((a, &s), &b) in xr.iter_mut().zip(scale).zip(yr) {
            *a += s * b;
        }
    }
}

/// The transformer over `x = [hidden, t]`; returns `[hidden, t]`.
pub(crate) fn forward(tr: &Transformer, cfg: &CodecEncoderConfig, x: &[f32], t: usize) -> Vec<f32> {
    let hs = cfg.hidden_size;
    let (hd, half) = (cfg.head_dim, cfg.head_dim / 2);
    let (qd, kvd) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
    let shape = AttnShape {
        n_heads: cfg.num_heads,
        n_kv_heads: cfg.num_kv_heads,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        window: None,
    };
    // RoPE tables: the angle rounded to f32 before cos/sin, as the official
    // f32 `inv_freq @ positions` product.
    let mut cos = Vec::with_capacity(t * half);
    let mut sin = Vec::with_capacity(t * half);
    for p in 0..t {
        for &f in &tr.inv_freq {
            let ang = (f * p as f32) as f64;
            cos.push(ang.cos() as f32);
            sin.push(ang.sin() as f32);
        }
    }

    let mut h = transpose(x, hs, t);
    let mut xn = vec![0f32; t * hs];
    let (mut q, mut k, mut v, mut att, mut proj, mut mid) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for layer in &tr.layers {
        tts_kernels::layer_norm(&h, &layer.ln1_w, &layer.ln1_b, cfg.norm_eps, &mut xn);
        layer.q.run(&xn, t, &mut q);
        layer.k.run(&xn, t, &mut k);
        layer.v.run(&xn, t, &mut v);
        for i in 0..t {
            let (c, s) = (
                &cos[i * half..(i + 1) * half],
                &sin[i * half..(i + 1) * half],
            );
            tts_kernels::rope(&mut q[i * qd..(i + 1) * qd], hd, c, s);
            tts_kernels::rope(&mut k[i * kvd..(i + 1) * kvd], hd, c, s);
        }
        att.clear();
        att.resize(t * qd, 0.0);
        tts_kernels::attention(
            &q,
            t,
            0,
            KvRows {
                k: k[..].into(),
                v: v[..].into(),
                n: t,
                pos0: 0,
                layout: KvLayout::Positions,
            },
            shape,
            &mut att,
        );
        layer.o.run(&att, t, &mut proj);
        add_scaled(&mut h, &layer.attn_scale, &proj);

        tts_kernels::layer_norm(&h, &layer.ln2_w, &layer.ln2_b, cfg.norm_eps, &mut xn);
        layer.fc1.run(&xn, t, &mut mid);
        tts_kernels::gelu(&mut mid);
        layer.fc2.run(&mid, t, &mut proj);
        add_scaled(&mut h, &layer.mlp_scale, &proj);
    }
    transpose(&h, t, hs)
}
