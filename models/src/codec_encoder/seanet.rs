//! The causal SEANet encoder (audio -> `hidden_size` channels at 25 Hz) and
//! the causal `MimiConv1d` padding it and the downsample share, run over
//! the clip in chunks with per-conv histories (exact: every conv is
//! causal) so long clips do not need whole-clip buffers of every layer.
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

/// Below this many padded elements the padding copy stays on the calling
/// thread (a rayon fork-join costs a few microseconds).
const PAR_MIN_ELEMS: usize = 1 << 16;

/// Samples per SEANet chunk, in hops (columns of the output): 250 hops are
/// 10 s at 24 kHz. Clips up to that run as one chunk; longer ones in chunks
/// of it, which bounds the working set at ~215 MB for the hub encoder
/// (64 channels of f32 per sample in four buffers) whatever the clip length.
const CHUNK_HOPS: usize = 250;

/// The last `keep = kernel_eff - stride` (post-ELU) input columns of one
/// causal conv, `[c_in, keep]`: its left padding, then its left context
/// when the input arrives in chunks. Because every conv is causal, running
/// chunks with these histories is the same arithmetic as the whole clip.
pub(crate) struct History {
    keep: usize,
    data: Vec<f32>,
}

impl History {
    /// The left padding of a clip whose first column is `first` (one value
    /// per input channel; read only for replicate padding).
    pub(crate) fn start(conv: &MimiConv, first: impl Fn(usize) -> f32) -> Self {
        let c = conv.shape.conv;
        let keep = (c.kernel - 1) * c.dilation + 1 - conv.shape.stride;
        let data = match conv.pad {
            Pad::Zero => vec![0.0; c.c_in * keep],
            Pad::Replicate => (0..c.c_in)
                .flat_map(|ch| std::iter::repeat_n(first(ch), keep))
                .collect(),
        };
        History { keep, data }
    }
}

/// One input chunk of a causal conv: `x = [c_in, n]`, read through ELU
/// when `elu`; `last` when it ends the clip.
#[derive(Clone, Copy)]
pub(crate) struct Chunk<'a> {
    pub x: &'a [f32],
    pub n: usize,
    pub elu: bool,
    pub last: bool,
}

impl Chunk<'_> {
    /// `x = [c_in, n]` read through ELU (the input of every SEANet conv
    /// but the first).
    fn elu(x: &[f32], n: usize, last: bool) -> Chunk<'_> {
        Chunk {
            x,
            n,
            elu: true,
            last,
        }
    }
}

/// One chunk of a causal `MimiConv1d`: `out = conv([history | f(x) | right])`
/// for `input.x = [c_in, n]`, `f` = ELU with `input.elu`, else identity;
/// returns the output columns. A chunk that is not `last` must hold a whole number of
/// strides; the `last` one gets the official right padding (zeros, or the
/// last column replicated) up to a whole stride. `padded` is scratch.
///
/// Every ELU of the SEANet sits right before a conv, so it is applied here,
/// while the input is copied into the padded buffer: one pass and no extra
/// buffer, and `x` itself is left intact for the ResBlock's residual. (ELU
/// maps 0 to 0, so zero padding of `elu(x)` is `elu` of zero padding; the
/// replicate-padded downsample has no ELU.)
pub(crate) fn conv_chunk(
    conv: &MimiConv,
    input: Chunk<'_>,
    hist: &mut History,
    padded: &mut Vec<f32>,
    out: &mut Vec<f32>,
) -> usize {
    use rayon::prelude::*;

    let Chunk { x, n, elu, last } = input;
    let c = conv.shape.conv;
    let stride = conv.shape.stride;
    debug_assert!(n > 0 && (last || n.is_multiple_of(stride)));
    debug_assert_eq!(x.len(), c.c_in * n);
    let keep = hist.keep;
    let right = if last {
        n.div_ceil(stride) * stride - n
    } else {
        0
    };
    let tp = keep + n + right;
    padded.clear();
    padded.resize(c.c_in * tp, 0.0);
    let fill = |((dst, row), h): ((&mut [f32], &[f32]), &mut [f32])| {
        dst[..keep].copy_from_slice(h);
        dst[keep..keep + n].copy_from_slice(row);
        if elu {
            elu_in_place(&mut dst[keep..keep + n]);
        }
        let edge = match conv.pad {
            Pad::Zero => 0.0,
            Pad::Replicate => row[n - 1],
        };
        dst[keep + n..].fill(edge);
        h.copy_from_slice(&dst[n..keep + n]);
    };
    let par = padded.len() >= PAR_MIN_ELEMS && c.c_in > 1;
    if keep == 0 {
        // 1x1 convs: no history to carry.
        let fill0 = |(dst, row): (&mut [f32], &[f32])| fill(((dst, row), &mut []));
        if par {
            padded
                .par_chunks_mut(tp)
                .zip(x.par_chunks_exact(n))
                .for_each(fill0);
        } else {
            padded.chunks_mut(tp).zip(x.chunks_exact(n)).for_each(fill0);
        }
    } else if par {
        padded
            .par_chunks_mut(tp)
            .zip(x.par_chunks_exact(n))
            .zip(hist.data.par_chunks_mut(keep))
            .for_each(fill);
    } else {
        padded
            .chunks_mut(tp)
            .zip(x.chunks_exact(n))
            .zip(hist.data.chunks_mut(keep))
            .for_each(fill);
    }
    let t_out = conv.shape.t_out(tp);
    debug_assert_eq!(t_out, n.div_ceil(stride));
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

/// A whole clip through one causal conv without ELU (the downsample):
/// `ceil(t / stride)` output columns.
pub(crate) fn causal_conv(conv: &MimiConv, x: &[f32], t: usize, out: &mut Vec<f32>) -> usize {
    let mut hist = History::start(conv, |ch| x[ch * t]);
    let input = Chunk {
        x,
        n: t,
        elu: false,
        last: true,
    };
    conv_chunk(conv, input, &mut hist, &mut Vec::new(), out)
}

/// ELU with alpha 1 (`nn.ELU()`), `expm1` on the negative side as PyTorch.
pub(crate) fn elu_in_place(x: &mut [f32]) {
    for v in x.iter_mut() {
        if *v <= 0.0 {
            *v = v.exp_m1();
        }
    }
}

/// Appends the `n` columns of `chunk = [c, n]` to `dst = [c, total]` at
/// column `at`.
fn place(dst: &mut [f32], total: usize, at: usize, chunk: &[f32], n: usize) {
    for (d, s) in dst.chunks_exact_mut(total).zip(chunk.chunks_exact(n)) {
        d[at..at + n].copy_from_slice(s);
    }
}

/// The SEANet over `samples` (mono, the encoder's rate): returns
/// `[hidden_size, t]` and `t = ceil(n / hop)`.
pub(crate) fn forward(s: &Seanet, samples: &[f32], hop: usize) -> (Vec<f32>, usize) {
    forward_chunked(s, samples, hop, CHUNK_HOPS * hop)
}

/// [`forward`] in input chunks of `chunk` samples (a multiple of `hop`).
pub(crate) fn forward_chunked(
    s: &Seanet,
    samples: &[f32],
    hop: usize,
    chunk: usize,
) -> (Vec<f32>, usize) {
    use rayon::prelude::*;

    debug_assert!(chunk > 0 && chunk.is_multiple_of(hop));
    let zero = |_| 0.0;
    let mut h_in = History::start(&s.conv_in, zero);
    let mut h_res: Vec<Vec<(History, History)>> = s
        .blocks
        .iter()
        .map(|b| {
            b.res
                .iter()
                .map(|r| {
                    (
                        History::start(&r.conv1, zero),
                        History::start(&r.conv2, zero),
                    )
                })
                .collect()
        })
        .collect();
    let mut h_down: Vec<History> = s
        .blocks
        .iter()
        .map(|b| History::start(&b.down, zero))
        .collect();
    let mut h_out = History::start(&s.conv_out, zero);

    let total = samples.len().div_ceil(hop);
    let mut y = vec![0f32; s.conv_out.shape.conv.c_out * total];
    let (mut padded, mut x, mut h, mut h2) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut at = 0;
    for (ci, piece) in samples.chunks(chunk).enumerate() {
        let last = (ci + 1) * chunk >= samples.len();
        let input = Chunk {
            x: piece,
            n: piece.len(),
            elu: false,
            last,
        };
        let mut t = conv_chunk(&s.conv_in, input, &mut h_in, &mut padded, &mut x);
        for (bi, block) in s.blocks.iter().enumerate() {
            for (res, (h1, h2s)) in block.res.iter().zip(&mut h_res[bi]) {
                conv_chunk(&res.conv1, Chunk::elu(&x, t, last), h1, &mut padded, &mut h);
                conv_chunk(
                    &res.conv2,
                    Chunk::elu(&h, t, last),
                    h2s,
                    &mut padded,
                    &mut h2,
                );
                if x.len() >= PAR_MIN_ELEMS {
                    x.par_chunks_mut(t)
                        .zip(h2.par_chunks(t))
                        .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, b)| *a += b));
                } else {
                    x.iter_mut().zip(&h2).for_each(|(a, b)| *a += b);
                }
            }
            let input = Chunk::elu(&x, t, last);
            t = conv_chunk(&block.down, input, &mut h_down[bi], &mut padded, &mut h);
            std::mem::swap(&mut x, &mut h);
        }
        let n = conv_chunk(
            &s.conv_out,
            Chunk::elu(&x, t, last),
            &mut h_out,
            &mut padded,
            &mut h,
        );
        place(&mut y, total, at, &h, n);
        at += n;
    }
    debug_assert_eq!(at, total);
    (y, total)
}
