//! The causal SEANet encoder (audio -> `hidden_size` channels at 25 Hz) and
//! the causal `MimiConv1d` padding it and the downsample share.
//!
//! `MimiConv1d` (causal) pads `padding_total = kernel_eff - stride` columns
//! on the left and `ceil(L / stride) * stride - L` on the right, so a conv
//! of `L` input columns gives exactly `ceil(L / stride)` outputs and the
//! last partial stride is computed (`kernel_eff = (kernel - 1) * dilation +
//! 1`). The official code finds the right padding through a float32
//! division, `ceil((L - kernel_eff + padding_total) / stride + 1) - 1`;
//! that equals the integer form for every clip shorter than ~2^24 samples
//! (about 11 minutes at 24 kHz).
//!
//! Layout: `[channels, time]` throughout.

use super::weights::{MimiConv, Pad, Seanet};

/// Output columns of a causal `MimiConv1d` over `t` input columns.
pub(crate) fn conv_out_len(conv: &MimiConv, t: usize) -> usize {
    t.div_ceil(conv.shape.stride)
}

/// Below this many padded elements the padding copy stays on the calling
/// thread (a rayon fork-join costs a few microseconds).
const PAR_MIN_ELEMS: usize = 1 << 16;

/// `out = conv(pad(x))`, or `conv(pad(elu(x)))` with `elu`, for `x = [c_in,
/// t]`; returns the output length (`ceil(t / stride)`). `padded` is scratch.
///
/// Every ELU of the SEANet sits right before a conv, so it is applied here,
/// while the input is copied into the padded buffer: one pass and no extra
/// buffer, and `x` itself is left intact for the ResBlock's residual. (ELU
/// maps 0 to 0, so zero padding of `elu(x)` is `elu` of zero padding; the
/// replicate-padded downsample has no ELU.)
pub(crate) fn causal_conv(
    conv: &MimiConv,
    x: &[f32],
    t: usize,
    elu: bool,
    padded: &mut Vec<f32>,
    out: &mut Vec<f32>,
) -> usize {
    use rayon::prelude::*;

    let c = conv.shape.conv;
    let stride = conv.shape.stride;
    let kernel_eff = (c.kernel - 1) * c.dilation + 1;
    debug_assert!(kernel_eff >= stride && t > 0);
    debug_assert_eq!(x.len(), c.c_in * t);
    let left = kernel_eff - stride;
    let right = t.div_ceil(stride) * stride - t;
    let tp = left + t + right;
    padded.clear();
    padded.resize(c.c_in * tp, 0.0);
    let fill = |(dst, row): (&mut [f32], &[f32])| {
        let (first, last) = match conv.pad {
            Pad::Zero => (0.0, 0.0),
            Pad::Replicate => (row[0], row[t - 1]),
        };
        dst[..left].fill(first);
        dst[left..left + t].copy_from_slice(row);
        dst[left + t..].fill(last);
        if elu {
            elu_in_place(&mut dst[left..left + t]);
        }
    };
    if padded.len() >= PAR_MIN_ELEMS && c.c_in > 1 {
        padded
            .par_chunks_mut(tp)
            .zip(x.par_chunks_exact(t))
            .for_each(fill);
    } else {
        padded.chunks_mut(tp).zip(x.chunks_exact(t)).for_each(fill);
    }
    let t_out = conv.shape.t_out(tp);
    debug_assert_eq!(t_out, conv_out_len(conv, t));
    out.clear();
    out.resize(c.c_out * t_out, 0.0);
    tts_kernels::conv1d_strided(
        padded,
        tp,
        conv.w.data(),
        conv.bias.as_deref(),
        conv.shape,
        out,
    );
    t_out
}

/// ELU with alpha 1 (`nn.ELU()`), `expm1` on the negative side as PyTorch.
pub(crate) fn elu_in_place(x: &mut [f32]) {
    for v in x.iter_mut() {
        if *v <= 0.0 {
            *v = v.exp_m1();
        }
    }
}

/// Reused buffers of one SEANet pass.
#[derive(Default)]
struct Scratch {
    padded: Vec<f32>,
    h: Vec<f32>,
    h2: Vec<f32>,
}

/// The SEANet over `samples` (mono, the encoder's rate): returns
/// `[hidden_size, t]` and `t = ceil(n / hop)`.
pub(crate) fn forward(s: &Seanet, samples: &[f32]) -> (Vec<f32>, usize) {
    use rayon::prelude::*;

    let mut w = Scratch::default();
    let mut x = Vec::new();
    let n = samples.len();
    let mut t = causal_conv(&s.conv_in, samples, n, false, &mut w.padded, &mut x);
    for block in &s.blocks {
        for res in &block.res {
            causal_conv(&res.conv1, &x, t, true, &mut w.padded, &mut w.h);
            causal_conv(&res.conv2, &w.h, t, true, &mut w.padded, &mut w.h2);
            if x.len() >= PAR_MIN_ELEMS {
                x.par_chunks_mut(t)
                    .zip(w.h2.par_chunks(t))
                    .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, b)| *a += b));
            } else {
                x.iter_mut().zip(&w.h2).for_each(|(a, b)| *a += b);
            }
        }
        t = causal_conv(&block.down, &x, t, true, &mut w.padded, &mut w.h);
        std::mem::swap(&mut x, &mut w.h);
    }
    t = causal_conv(&s.conv_out, &x, t, true, &mut w.padded, &mut w.h);
    (std::mem::take(&mut w.h), t)
}
