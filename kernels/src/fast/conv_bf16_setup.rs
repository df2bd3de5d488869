//! What every bf16 convolution does around its tiles, whichever tile
//! runs it (`vdpbf16ps` or the emulation in `conv_bf16.rs`, AMX in
//! `conv_amx.rs`): the checks of a call and the taps it splits into, the bias the accumulators start from (flushed: DAZ on the
//! accumulator) and the parallel packing of the input.

use super::conv::Tap;
use super::SharedOut;
use crate::conv_bf16::{flush, ConvBf16};

fn check_common(x: &[f32], t_in: usize, w: &ConvBf16, bias: Option<&[f32]>, what: &str) {
    assert_eq!(x.len(), w.c_in * t_in, "{what}: x is not [c_in, t_in]");
    if let Some(b) = bias {
        assert_eq!(b.len(), w.c_out, "{what}: bias is not [c_out]");
    }
}

/// Checks a `conv1d_bf16` call and returns its taps and `t_out`, or `None`
/// when there is nothing to compute.
pub(super) fn conv1d_setup(
    x: &[f32],
    t_in: usize,
    w: &ConvBf16,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &[f32],
) -> Option<(Vec<Tap>, usize)> {
    check_common(x, t_in, w, bias, "conv1d_bf16");
    let t_out = t_in.saturating_sub((w.kernel - 1) * dilation);
    assert_eq!(
        out.len(),
        w.c_out * t_out,
        "conv1d_bf16: out is not [c_out, t_out]"
    );
    if t_out == 0 || w.c_out == 0 {
        return None;
    }
    let taps = (0..w.kernel)
        .map(|kk| Tap {
            x_off: kk * dilation,
            w_off: kk,
        })
        .collect();
    Some((taps, t_out))
}

/// `out = bias` per `t_len` row (bias flushed: DAZ on the accumulator).
pub(super) fn fill_bias(out: &mut [f32], t_len: usize, bias: Option<&[f32]>) {
    if t_len == 0 {
        return;
    }
    for (c, row) in out.chunks_mut(t_len).enumerate() {
        row.fill(bias.map_or(0.0, |b| flush(b[c])));
    }
}

/// Elements per packing task (rounding is ~1 ns per element scalar; the
/// vocoder's last block packs ~15M per call).
const PACK_TASK: usize = 1 << 16;

/// Fills `out` (whole pairs of `x_ps` elements) by `fill(first pair,
/// its chunk)`, in parallel chunks of about [`PACK_TASK`] elements.
pub(super) fn pack_par<X: Send>(
    out: &mut [X],
    x_ps: usize,
    fill: impl Fn(usize, &mut [X]) + Sync + Send,
) {
    if out.is_empty() {
        return;
    }
    let per = PACK_TASK.div_ceil(x_ps).max(1);
    let (len, chunk) = (out.len(), per * x_ps);
    if len <= chunk {
        return fill(0, out);
    }
    let o = SharedOut::new(out);
    crate::team::for_each(len.div_ceil(chunk), |i| {
        // SAFETY: chunk i is `out[i * chunk..]` up to `len`; chunks are
        // disjoint and `out` outlives the call.
        let c = unsafe {
            std::slice::from_raw_parts_mut(o.ptr().add(i * chunk), chunk.min(len - i * chunk))
        };
        fill(i * per, c)
    });
}
