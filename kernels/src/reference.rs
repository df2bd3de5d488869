//! Scalar reference kernels: the definition of every kernel's semantics.
//! Straightforward loops, f32 accumulation, no parallelism.

use crate::conv_bf16::{bf16_value, dp_step, flush, ConvBf16};
use crate::conv_q8::{column_scales, quantize, ConvQ8};
use crate::group::GroupFormat;
use crate::mat::quantize_a16_row;
use crate::mat::{GroupMat, Mat, Q8Mat};
use crate::q4::{q4_get, quantize_a8_row, Q4_GROUP};
use crate::shape::{
    AttnSegment, AttnShape, Conv1dShape, ConvTranspose1dShape, KvRows, StridedConv1dShape,
};

pub fn matmul(x: &[f32], m: usize, w: &Mat<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
    let (n, k) = (w.rows(), w.cols());
    assert_eq!(x.len(), m * k, "matmul: x is not [m, k]");
    assert_eq!(out.len(), m * n, "matmul: out is not [m, n]");
    if let Some(w) = w.q8_mat() {
        return matmul_q8_a16(x, m, w, bias, out);
    }
    if let Some(w) = w.group_mat() {
        return matmul_group_a8(x, m, w, bias, out);
    }
    let mut row = vec![0f32; k];
    for j in 0..n {
        w.row_to_f32(j, &mut row);
        let b = bias.map_or(0.0, |b| b[j]);
        for i in 0..m {
            let xi = &x[i * k..(i + 1) * k];
            let mut acc = 0f32;
            for (a, b) in xi.iter().zip(&row) {
                acc += a * b;
            }
            out[i * n + j] = acc + b;
        }
    }
}

/// Int8 weights x int16-quantized activations, exact integer dot products
/// (the semantics of `matmul` on `Mat::Q8`):
/// `out[i][j] = (sum_k xq[i][k] q[j][k]) as f32 * (sx[i] * s[j]) + b[j]`.
fn matmul_q8_a16(x: &[f32], m: usize, w: Q8Mat<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
    let Q8Mat {
        data,
        scales,
        rows: n,
        cols: k,
    } = w;
    let mut xq = vec![0i16; m * k];
    let sx: Vec<f32> = (0..m)
        .map(|i| quantize_a16_row(&x[i * k..(i + 1) * k], &mut xq[i * k..(i + 1) * k]))
        .collect();
    for j in 0..n {
        let wj = &data[j * k..(j + 1) * k];
        let b = bias.map_or(0.0, |b| b[j]);
        for i in 0..m {
            let dot: i64 = xq[i * k..(i + 1) * k]
                .iter()
                .zip(wj)
                .map(|(&a, &w)| a as i64 * w as i64)
                .sum();
            out[i * n + j] = dot as f32 * (sx[i] * scales[j]) + b;
        }
    }
}

/// Group-wise weights (q4, iq4, q6) x int8-quantized activations, exact
/// integer dot products (the semantics of `matmul` on `Mat::Q4`,
/// `Mat::Iq4` and `Mat::Q6`):
/// `out[i][j] = (sum_g s[j][g] * sum_{c in g} xq[i][c] q[j][c]) as f32 *
/// (sx[i] * d[j]) + b[j]`, the sum an exact i64, where `q` is the stored
/// integer weight (for iq4 its table level) and `s` the group scale (u8,
/// or i8 for iq4).
fn matmul_group_a8(x: &[f32], m: usize, w: GroupMat<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
    let GroupMat {
        format: f,
        data,
        group_scales,
        scales,
        rows: n,
        cols: k,
    } = w;
    let (rb, rg) = (f.row_bytes(k), f.row_groups(k));
    assert!(data.len() >= n * rb, "matmul: {f} data shorter than [n, k]");
    assert!(
        group_scales.len() >= n * rg,
        "matmul: fewer {f} group scales than [n, groups]"
    );
    assert!(scales.len() >= n, "matmul: fewer scales than rows");
    let get = |row: &[u8], c: usize| -> i64 {
        match f {
            GroupFormat::Q4 => q4_get(row, c) as i64,
            GroupFormat::Iq4 => crate::iq4::iq4_get(row, c) as i64,
            GroupFormat::Q6 => crate::q6::q6_get(row, c) as i64,
        }
    };
    let scale = |b: u8| -> i64 {
        match f {
            GroupFormat::Iq4 => b as i8 as i64,
            GroupFormat::Q4 | GroupFormat::Q6 => b as i64,
        }
    };
    let mut xq = vec![0i8; m * k];
    let sx: Vec<f32> = (0..m)
        .map(|i| quantize_a8_row(&x[i * k..(i + 1) * k], &mut xq[i * k..(i + 1) * k]))
        .collect();
    for j in 0..n {
        let (wj, sj) = (&data[j * rb..], &group_scales[j * rg..]);
        let b = bias.map_or(0.0, |b| b[j]);
        for i in 0..m {
            let xi = &xq[i * k..(i + 1) * k];
            let mut dot = 0i64;
            for (g, xg) in xi.chunks(Q4_GROUP).enumerate() {
                let t: i64 = xg
                    .iter()
                    .enumerate()
                    .map(|(c, &a)| a as i64 * get(wj, g * Q4_GROUP + c))
                    .sum();
                dot += t * scale(sj[g]);
            }
            out[i * n + j] = dot as f32 * (sx[i] * scales[j]) + b;
        }
    }
}

/// `matmul` on `Mat::Q8` with f32 activations: `out = (x . q_j) * s_j + b`,
/// int8 widened exactly to f32, f32 accumulation.
pub fn matmul_q8_widened(x: &[f32], m: usize, w: &Mat<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
    let Mat::Q8 {
        data,
        scales,
        rows: n,
        cols: k,
    } = *w
    else {
        panic!("matmul_q8_widened: weight is not Q8");
    };
    assert_eq!(x.len(), m * k, "matmul: x is not [m, k]");
    assert_eq!(out.len(), m * n, "matmul: out is not [m, n]");
    let mut row = vec![0f32; k];
    for j in 0..n {
        for (r, &q) in row.iter_mut().zip(&data[j * k..(j + 1) * k]) {
            *r = q as f32;
        }
        let b = bias.map_or(0.0, |b| b[j]);
        for i in 0..m {
            let xi = &x[i * k..(i + 1) * k];
            let mut acc = 0f32;
            for (a, b) in xi.iter().zip(&row) {
                acc += a * b;
            }
            out[i * n + j] = acc * scales[j] + b;
        }
    }
}

pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    assert_eq!(x.len(), out.len());
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let ss: f32 = xr.iter().map(|v| v * v).sum::<f32>() / d as f32;
        let r = 1.0 / (ss + eps).sqrt();
        for ((o, &v), &g) in or.iter_mut().zip(xr).zip(weight) {
            *o = (v * r) * g;
        }
    }
}

pub fn layer_norm(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    assert_eq!(x.len(), out.len());
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let mean = xr.iter().sum::<f32>() / d as f32;
        let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let r = 1.0 / (var + eps).sqrt();
        for i in 0..d {
            or[i] = (xr[i] - mean) * r * weight[i] + bias[i];
        }
    }
}

pub fn rope(x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    let half = head_dim / 2;
    assert_eq!(cos.len(), half);
    for h in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (a, b) = (h[i], h[i + half]);
            h[i] = a * cos[i] - b * sin[i];
            h[i + half] = b * cos[i] + a * sin[i];
        }
    }
}

#[inline]
pub fn silu(v: f32) -> f32 {
    v / (1.0 + (-v).exp())
}

pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu(g) * u;
    }
}

/// erf with < 1.2e-7 relative error (W. J. Cody's rational approximations via
/// libm-style evaluation in f64), so GELU matches PyTorch's exact GELU in f32.
pub fn erf(x: f64) -> f64 {
    libm_erf(x)
}

pub fn gelu(x: &mut [f32]) {
    for v in x.iter_mut() {
        let xf = *v as f64;
        *v = (0.5 * xf * (1.0 + erf(xf / std::f64::consts::SQRT_2))) as f32;
    }
}

pub fn snake_beta(x: &mut [f32], t: usize, alpha: &[f32], inv_beta: &[f32]) {
    for (c, row) in x.chunks_exact_mut(t).enumerate() {
        let (a, ib) = (alpha[c], inv_beta[c]);
        for v in row.iter_mut() {
            let s = (*v * a).sin();
            *v += ib * s * s;
        }
    }
}

/// [`snake_beta`] of `[head | x]` row by row into `out = [c, h + n]`.
pub fn snake_beta_concat(
    head: &[f32],
    h: usize,
    x: &[f32],
    n: usize,
    alpha: &[f32],
    inv_beta: &[f32],
    out: &mut [f32],
) {
    let w = h + n;
    if w == 0 {
        return;
    }
    let c = out.len() / w;
    assert!(
        out.len() == c * w && head.len() == c * h && x.len() == c * n,
        "snake_beta_concat: out is not [c, h + n] for head [c, h] and x [c, n]"
    );
    for (ch, row) in out.chunks_exact_mut(w).enumerate() {
        row[..h].copy_from_slice(&head[ch * h..(ch + 1) * h]);
        row[h..].copy_from_slice(&x[ch * n..(ch + 1) * n]);
    }
    snake_beta(out, w, alpha, inv_beta);
}

/// `acc += x`, element by element.
/// Checks [`interleave_phases`]' shapes (every path's): `rows = [c_out *
/// stride, n]`, `out = [c_out, n * stride]`.
pub(crate) fn check_interleave(rows: &[f32], c_out: usize, stride: usize, n: usize, out: &[f32]) {
    let len = c_out * stride * n;
    let shape = |what: &str| format!("interleave_phases: {what}");
    assert_eq!(
        rows.len(),
        len,
        "{}",
        shape("rows is not [c_out * stride, n]")
    );
    assert_eq!(
        out.len(),
        len,
        "{}",
        shape("out is not [c_out, n * stride]")
    );
}

pub fn interleave_phases(rows: &[f32], c_out: usize, stride: usize, n: usize, out: &mut [f32]) {
    check_interleave(rows, c_out, stride, n, out);
    for (co, o) in out.chunks_exact_mut((n * stride).max(1)).enumerate() {
        for r in 0..stride {
            let row = &rows[(co * stride + r) * n..(co * stride + r + 1) * n];
            for (q, &v) in row.iter().enumerate() {
                o[q * stride + r] = v;
            }
        }
    }
}

pub fn add_assign(acc: &mut [f32], x: &[f32]) {
    assert_eq!(acc.len(), x.len(), "add_assign: lengths differ");
    acc.iter_mut().zip(x).for_each(|(a, &b)| *a += b);
}

pub fn attention(
    q: &[f32],
    n_q: usize,
    q_pos0: usize,
    kv: KvRows<'_>,
    s: AttnShape,
    out: &mut [f32],
) {
    let KvRows {
        k,
        v,
        n: n_kv,
        pos0: kv_pos0,
        layout,
    } = kv;
    let hd = s.head_dim;
    let group = s.n_heads / s.n_kv_heads;
    let (row, head) = layout.strides(s.n_kv_heads, hd);
    let mut scores = vec![0f32; n_kv];
    for i in 0..n_q {
        let pos = q_pos0 + i;
        for h in 0..s.n_heads {
            let kvh = h / group;
            let qv = &q[(i * s.n_heads + h) * hd..][..hd];
            let mut max = f32::NEG_INFINITY;
            for (j, sc) in scores.iter_mut().enumerate() {
                let pk = kv_pos0 + j;
                let visible = pk <= pos && s.window.is_none_or(|w| pk + w > pos);
                *sc = if visible {
                    let base = j * row + kvh * head;
                    qv.iter()
                        .enumerate()
                        .map(|(d, a)| a * k.get(base + d))
                        .sum::<f32>()
                        * s.scale
                } else {
                    f32::NEG_INFINITY
                };
                max = max.max(*sc);
            }
            let o = &mut out[(i * s.n_heads + h) * hd..][..hd];
            o.fill(0.0);
            if max == f32::NEG_INFINITY {
                continue;
            }
            let mut sum = 0f32;
            for sc in scores.iter_mut() {
                *sc = (*sc - max).exp();
                sum += *sc;
            }
            for (j, &p) in scores.iter().enumerate() {
                if p == 0.0 {
                    continue;
                }
                let base = j * row + kvh * head;
                for (d, oo) in o.iter_mut().enumerate() {
                    *oo += p * v.get(base + d);
                }
            }
            let inv = 1.0 / sum;
            o.iter_mut().for_each(|x| *x *= inv);
        }
    }
}

/// [`attention`] of each segment, its rows of `q` and `out` in turn.
pub fn attention_batch(q: &[f32], segs: &[AttnSegment<'_>], s: AttnShape, out: &mut [f32]) {
    let width = s.n_heads * s.head_dim;
    let mut row = 0;
    for g in segs {
        let r = row * width..(row + g.n_q) * width;
        attention(&q[r.clone()], g.n_q, g.q_pos0, g.kv, s, &mut out[r]);
        row += g.n_q;
    }
}

pub fn conv1d(
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    s: Conv1dShape,
    out: &mut [f32],
) {
    let span = (s.kernel - 1) * s.dilation;
    let t_out = t_in.saturating_sub(span);
    let cin_g = s.c_in / s.groups;
    let cout_g = s.c_out / s.groups;
    assert_eq!(x.len(), s.c_in * t_in, "conv1d: x is not [c_in, t_in]");
    assert_eq!(w.len(), s.c_out * cin_g * s.kernel, "conv1d: weight shape");
    assert_eq!(
        out.len(),
        s.c_out * t_out,
        "conv1d: out is not [c_out, t_out]"
    );
    for co in 0..s.c_out {
        let g = co / cout_g;
        let o = &mut out[co * t_out..(co + 1) * t_out];
        o.fill(bias.map_or(0.0, |b| b[co]));
        for ci in 0..cin_g {
            let xr = &x[(g * cin_g + ci) * t_in..][..t_in];
            for kk in 0..s.kernel {
                let wv = w[(co * cin_g + ci) * s.kernel + kk];
                let off = kk * s.dilation;
                for (t, ov) in o.iter_mut().enumerate() {
                    *ov += wv * xr[t + off];
                }
            }
        }
    }
}

pub fn conv1d_strided(
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    s: StridedConv1dShape,
    out: &mut [f32],
) {
    let StridedConv1dShape { conv: c, stride } = s;
    assert!(stride >= 1, "conv1d_strided: stride must be >= 1");
    let t_out = s.t_out(t_in);
    let cin_g = c.c_in / c.groups;
    let cout_g = c.c_out / c.groups;
    assert_eq!(
        x.len(),
        c.c_in * t_in,
        "conv1d_strided: x is not [c_in, t_in]"
    );
    assert_eq!(
        w.len(),
        c.c_out * cin_g * c.kernel,
        "conv1d_strided: weight shape"
    );
    assert_eq!(
        out.len(),
        c.c_out * t_out,
        "conv1d_strided: out is not [c_out, t_out]"
    );
    for co in 0..c.c_out {
        let g = co / cout_g;
        let o = &mut out[co * t_out..(co + 1) * t_out];
        o.fill(bias.map_or(0.0, |b| b[co]));
        for ci in 0..cin_g {
            let xr = &x[(g * cin_g + ci) * t_in..][..t_in];
            for kk in 0..c.kernel {
                let wv = w[(co * cin_g + ci) * c.kernel + kk];
                let off = kk * c.dilation;
                for (t, ov) in o.iter_mut().enumerate() {
                    *ov += wv * xr[t * stride + off];
                }
            }
        }
    }
}

pub fn conv_transpose1d(
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    s: ConvTranspose1dShape,
    out: &mut [f32],
) {
    let ConvTranspose1dShape {
        c_in,
        c_out,
        kernel,
        stride,
    } = s;
    let t_out = s.t_out(t_in);
    assert_eq!(x.len(), c_in * t_in);
    assert_eq!(w.len(), c_in * c_out * kernel);
    assert_eq!(out.len(), c_out * t_out);
    for co in 0..c_out {
        out[co * t_out..(co + 1) * t_out].fill(bias.map_or(0.0, |b| b[co]));
    }
    for ci in 0..c_in {
        for co in 0..c_out {
            let wk = &w[(ci * c_out + co) * kernel..][..kernel];
            let o = &mut out[co * t_out..(co + 1) * t_out];
            for t in 0..t_in {
                let xv = x[ci * t_in + t];
                for (kk, &wv) in wk.iter().enumerate() {
                    o[t * stride + kk] += xv * wv;
                }
            }
        }
    }
}

/// bf16 `conv1d` (groups = 1, stride 1, "valid"): `x = [c_in, t_in]`,
/// `out = [c_out, t_in - (kernel - 1) * dilation]`. The arithmetic of
/// [`crate::conv_bf16`]: activations rounded to bf16, per output `acc =
/// bias`, then per channel pair, per tap: `dp(hi * hi)`, `dp(lo * lo)`.
pub fn conv1d_bf16(
    x: &[f32],
    t_in: usize,
    w: &ConvBf16,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &mut [f32],
) {
    let k = w.kernel;
    let t_out = t_in.saturating_sub((k - 1) * dilation);
    assert_eq!(x.len(), w.c_in * t_in, "conv1d_bf16: x is not [c_in, t_in]");
    assert_eq!(
        out.len(),
        w.c_out * t_out,
        "conv1d_bf16: out is not [c_out, t_out]"
    );
    let xb = |ci: usize, t: usize| {
        if ci < w.c_in {
            bf16_value(x[ci * t_in + t])
        } else {
            0.0
        }
    };
    for co in 0..w.c_out {
        for t in 0..t_out {
            let mut acc = flush(bias.map_or(0.0, |b| b[co]));
            for p in 0..w.pairs() {
                for kk in 0..k {
                    let tx = t + kk * dilation;
                    acc = dp_step(acc, xb(2 * p + 1, tx), w.weight(co, 2 * p + 1, kk));
                    acc = dp_step(acc, xb(2 * p, tx), w.weight(co, 2 * p, kk));
                }
            }
            out[co * t_out + t] = acc;
        }
    }
}

/// int8 `conv1d` (groups 1, stride 1, "valid"): activations quantized per
/// time column, one exact i32 sum per tap, the taps combined in f32 (the
/// arithmetic in [`crate::conv_q8`]).
pub fn conv1d_q8(
    x: &[f32],
    t_in: usize,
    w: &ConvQ8,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &mut [f32],
) {
    let k = w.kernel;
    let t_out = t_in.saturating_sub((k - 1) * dilation);
    assert_eq!(x.len(), w.c_in * t_in, "conv1d_q8: x is not [c_in, t_in]");
    assert_eq!(
        out.len(),
        w.c_out * t_out,
        "conv1d_q8: out is not [c_out, t_out]"
    );
    if let Some(b) = bias {
        assert_eq!(b.len(), w.c_out, "conv1d_q8: bias is not [c_out]");
    }
    let (sx, inv) = column_scales(x, w.c_in, t_in);
    let xq: Vec<i8> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| quantize(v, inv[i % t_in]))
        .collect();
    for co in 0..w.c_out {
        for t in 0..t_out {
            let mut acc = bias.map_or(0.0, |b| b[co]);
            for kk in 0..k {
                let tx = t + kk * dilation;
                let i: i32 = (0..w.c_in)
                    .map(|ci| w.weight(co, ci, kk) as i32 * xq[ci * t_in + tx] as i32)
                    .sum();
                acc += i as f32 * (sx[tx] * w.scales[co]);
            }
            out[co * t_out + t] = acc;
        }
    }
}

// erf from FreeBSD's s_erf.c (as in musl/libm), f64. Public-domain-style
// algorithm, rewritten here so the kernels crate has no libm dependency.
#[allow(clippy::excessive_precision)]
fn libm_erf(x: f64) -> f64 {
    const ERX: f64 = 8.45062911510467529297e-01;
    const EFX8: f64 = 1.02703333676410069053e+00;
    const PP: [f64; 5] = [
        1.28379167095512558561e-01,
        -3.25042107247001499370e-01,
        -2.84817495755985104766e-02,
        -5.77027029648944159157e-03,
        -2.37630166566501626084e-05,
    ];
    const QQ: [f64; 5] = [
        3.97917223959155352819e-01,
        6.50222499887672944485e-02,
        5.08130628187576562776e-03,
        1.32494738004321644526e-04,
        -3.96022827877536812320e-06,
    ];
    const PA: [f64; 7] = [
        -2.36211856075265944077e-03,
        4.14856118683748331666e-01,
        -3.72207876035701323847e-01,
        3.18346619901161753674e-01,
        -1.10894694282396677476e-01,
        3.54783043256182359371e-02,
        -2.16637559486879084300e-03,
    ];
    const QA: [f64; 6] = [
        1.06420880400844228286e-01,
        5.40397917702171048937e-01,
        7.18286544141962662868e-02,
        1.26171219808761642112e-01,
        1.36370839120290507362e-02,
        1.19844998467991074170e-02,
    ];
    let sign = x.is_sign_negative();
    let ax = x.abs();
    if ax.is_nan() {
        return x;
    }
    let r = if ax < 0.84375 {
        if ax < 1e-300 {
            return 0.125 * (8.0 * x + EFX8 * x);
        }
        let z = x * x;
        let r = PP[0] + z * (PP[1] + z * (PP[2] + z * (PP[3] + z * PP[4])));
        let s = 1.0 + z * (QQ[0] + z * (QQ[1] + z * (QQ[2] + z * (QQ[3] + z * QQ[4]))));
        return x + x * (r / s);
    } else if ax < 1.25 {
        let s = ax - 1.0;
        let p =
            PA[0] + s * (PA[1] + s * (PA[2] + s * (PA[3] + s * (PA[4] + s * (PA[5] + s * PA[6])))));
        let q =
            1.0 + s * (QA[0] + s * (QA[1] + s * (QA[2] + s * (QA[3] + s * (QA[4] + s * QA[5])))));
        ERX + p / q
    } else if ax >= 6.0 {
        1.0
    } else {
        1.0 - erfc_tail(ax)
    };
    if sign {
        -r
    } else {
        r
    }
}

#[allow(clippy::excessive_precision)]
fn erfc_tail(x: f64) -> f64 {
    const RA: [f64; 8] = [
        -9.86494403484714822705e-03,
        -6.93858572707181764372e-01,
        -1.05586262253232909814e+01,
        -6.23753324503260060396e+01,
        -1.62396669462573470355e+02,
        -1.84605092906711035994e+02,
        -8.12874355063065934246e+01,
        -9.81432934416914548592e+00,
    ];
    const SA: [f64; 8] = [
        1.96512716674392571292e+01,
        1.37657754143519042600e+02,
        4.34565877475229228821e+02,
        6.45387271733267880336e+02,
        4.29008140027567833386e+02,
        1.08635005541779435134e+02,
        6.57024977031928170135e+00,
        -6.04244152148580987438e-02,
    ];
    const RB: [f64; 7] = [
        -9.86494292470009928597e-03,
        -7.99283237680523006574e-01,
        -1.77579549177547519889e+01,
        -1.60636384855821916062e+02,
        -6.37566443368389627722e+02,
        -1.02509513161107724954e+03,
        -4.83519191608651397019e+02,
    ];
    const SB: [f64; 7] = [
        3.03380607434824582924e+01,
        3.25792512996573918826e+02,
        1.53672958608443695994e+03,
        3.19985821950859553908e+03,
        2.55305040643316442583e+03,
        4.74528541206955367215e+02,
        -2.24409524465858183362e+01,
    ];
    let s = 1.0 / (x * x);
    let (r, ss) = if x < 1.0 / 0.35 {
        (
            RA[0]
                + s * (RA[1]
                    + s * (RA[2]
                        + s * (RA[3] + s * (RA[4] + s * (RA[5] + s * (RA[6] + s * RA[7])))))),
            1.0 + s
                * (SA[0]
                    + s * (SA[1]
                        + s * (SA[2]
                            + s * (SA[3] + s * (SA[4] + s * (SA[5] + s * (SA[6] + s * SA[7]))))))),
        )
    } else {
        (
            RB[0] + s * (RB[1] + s * (RB[2] + s * (RB[3] + s * (RB[4] + s * (RB[5] + s * RB[6]))))),
            1.0 + s
                * (SB[0]
                    + s * (SB[1]
                        + s * (SB[2] + s * (SB[3] + s * (SB[4] + s * (SB[5] + s * SB[6])))))),
        )
    };
    let z = f64::from_bits(x.to_bits() & 0xffff_ffff_0000_0000);
    (-z * z - 0.5625).exp() * ((z - x) * (z + x) + r / ss).exp() / x
}
