//! Numeric kernels for tts-rt.
//!
//! # Layout
//! - [`reference`]: one plain scalar implementation per kernel. It defines the
//!   semantics; every optimised path is tested against it.
//! - [`Isa`] / [`isa()`]: the instruction set chosen once at run time
//!   (AVX-512, AVX2+FMA, or portable scalar). `TTS_RT_ISA=scalar|avx2|avx512`
//!   forces a path (a path the CPU lacks is refused, falling back to detection).
//! - The free functions at the crate root ([`matmul`], [`rms_norm`], ...) are
//!   the dispatching entry points the models call.
//!
//! Layout conventions: activations are row-major `[rows, features]` for the
//! transformer parts and channel-major `[channels, time]` for convolutions
//! (the PyTorch layouts of the checkpoint). Linear weights are `[out, in]`.

pub mod reference;
mod dispatch;
mod mat;

pub use dispatch::{isa, Isa};
pub use mat::{bf16_to_f32, f32_to_bf16, Mat};

/// `out[m, n] = sum_k x[m, k] * w[n, k] + bias[n]`: `y = x W^T + b` for a
/// row-major `x` of `m` rows and a weight `w` stored `[n, k]` (PyTorch Linear).
/// Accumulation is f32 whatever the weight storage.
pub fn matmul(x: &[f32], m: usize, w: &Mat<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
    reference::matmul(x, m, w, bias, out)
}

/// Row-wise RMSNorm over rows of `weight.len()` features:
/// `out = x * rsqrt(mean(x^2) + eps) * weight`.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    reference::rms_norm(x, weight, eps, out)
}

/// Row-wise LayerNorm with affine weight and bias.
pub fn layer_norm(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    reference::layer_norm(x, weight, bias, eps, out)
}

/// Rotate-half RoPE applied in place to `x = [n_heads, head_dim]` for one
/// position, with `cos`/`sin` of length `head_dim / 2` for that position.
pub fn rope(x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    reference::rope(x, head_dim, cos, sin)
}

/// SwiGLU gate: `out[i] = silu(gate[i]) * up[i]`.
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    reference::silu_mul(gate, up, out)
}

/// Exact (erf) GELU in place.
pub fn gelu(x: &mut [f32]) {
    reference::gelu(x)
}

/// SnakeBeta in place on channel-major `x = [channels, t]`:
/// `x + inv_beta[c] * sin(x * alpha[c])^2`, with `alpha = exp(log_alpha)` and
/// `inv_beta = 1 / (exp(log_beta) + 1e-9)` precomputed by the caller.
pub fn snake_beta(x: &mut [f32], t: usize, alpha: &[f32], inv_beta: &[f32]) {
    reference::snake_beta(x, t, alpha, inv_beta)
}

/// Attention parameters shared by [`attention`] calls of one layer.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplier on `q . k` (usually `head_dim^-0.5`).
    pub scale: f32,
    /// Sliding window: a query at position `p` sees keys `p - w + 1 ..= p`.
    pub window: Option<usize>,
}

/// Causal attention of `n_q` new queries against a KV cache.
///
/// - `q`: `[n_q, n_heads, head_dim]`; query `i` is at absolute position
///   `q_pos0 + i`.
/// - `k`, `v`: `[n_kv, n_kv_heads, head_dim]`, key `j` at absolute position
///   `kv_pos0 + j` (the cache may have dropped its oldest rows: ring buffers
///   pass the position of their first retained row).
/// - `out`: `[n_q, n_heads, head_dim]`.
///
/// Query head `h` uses KV head `h / (n_heads / n_kv_heads)` (GQA). Softmax in
/// f32. A query sees keys with `pos_k <= pos_q` and, with a window `w`,
/// `pos_k > pos_q - w`.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    n_q: usize,
    q_pos0: usize,
    k: &[f32],
    v: &[f32],
    n_kv: usize,
    kv_pos0: usize,
    shape: AttnShape,
    out: &mut [f32],
) {
    reference::attention(q, n_q, q_pos0, k, v, n_kv, kv_pos0, shape, out)
}

/// Parameters of a 1-D convolution.
#[derive(Clone, Copy, Debug)]
pub struct Conv1dShape {
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub dilation: usize,
    pub groups: usize,
}

/// "Valid" 1-D convolution, stride 1, on channel-major `x = [c_in, t_in]`
/// with weight `[c_out, c_in / groups, kernel]` and optional bias:
/// `out = [c_out, t_in - (kernel - 1) * dilation]`. Causal padding and
/// streaming history are the caller's business (it prepends the left
/// context), which is what lets one kernel serve one-shot and streaming use.
pub fn conv1d(x: &[f32], t_in: usize, w: &[f32], bias: Option<&[f32]>, s: Conv1dShape, out: &mut [f32]) {
    reference::conv1d(x, t_in, w, bias, s, out)
}

/// Full transposed 1-D convolution (PyTorch `ConvTranspose1d`, no padding)
/// on `x = [c_in, t_in]` with weight `[c_in, c_out, kernel]`:
/// `out = [c_out, (t_in - 1) * stride + kernel]`. Trimming is the caller's.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose1d(
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    c_in: usize,
    c_out: usize,
    kernel: usize,
    stride: usize,
    out: &mut [f32],
) {
    reference::conv_transpose1d(x, t_in, w, bias, c_in, c_out, kernel, stride, out)
}
