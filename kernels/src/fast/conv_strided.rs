//! Strided `conv1d` as a stride-1 [`conv1d`](super::conv::conv1d) over the
//! input's polyphase split.
//!
//! With stride `s` and dilation 1, output `t` reads `x[ci, t * s + k]`.
//! Writing tap `k = j * s + r` (phase `r = k % s`, offset `j = k / s`), that
//! is `x_r[ci, t + j]` with `x_r[ci, u] = x[ci, u * s + r]`: a valid stride-1
//! convolution over `s * c_in` phase channels with `ceil(kernel / s)` taps.
//! Taps past the kernel (`j * s + r >= kernel`) get weight 0 and read zero
//! padding. The SEANet encoder's downsampling convs have `kernel = 2 * s`,
//! so nothing is padded there and each phase conv has exactly 2 taps.
//!
//! The split costs one copy of the input and of the weight per call, against
//! `t_out * c_out * c_in * kernel` multiply-adds; the tuned stride-1 tile
//! (and its rayon split) does the rest. The sum per output runs over
//! (phase, channel, tap) instead of the reference's (channel, tap): the same
//! terms in another order.

use super::Simd;
use crate::reference;
use crate::shape::{Conv1dShape, StridedConv1dShape};

pub(crate) fn conv1d_strided<S: Simd>(
    tok: S,
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    sh: StridedConv1dShape,
    out: &mut [f32],
) {
    let StridedConv1dShape { conv: c, stride } = sh;
    assert!(stride >= 1, "conv1d_strided: stride must be >= 1");
    if stride == 1 {
        return super::conv::conv1d(tok, x, t_in, w, bias, c, out);
    }
    if c.groups != 1 || c.dilation != 1 {
        return reference::conv1d_strided(x, t_in, w, bias, sh, out);
    }
    let t_out = sh.t_out(t_in);
    assert!(c.kernel > 0, "conv1d_strided: kernel must be >= 1");
    assert_eq!(
        x.len(),
        c.c_in * t_in,
        "conv1d_strided: x is not [c_in, t_in]"
    );
    assert_eq!(
        w.len(),
        c.c_out * c.c_in * c.kernel,
        "conv1d_strided: weight shape"
    );
    assert_eq!(
        out.len(),
        c.c_out * t_out,
        "conv1d_strided: out is not [c_out, t_out]"
    );
    if t_out == 0 || c.c_out == 0 {
        return;
    }
    let taps = c.kernel.div_ceil(stride);
    let t_ph = t_out + taps - 1;
    // Phase channel `r * c_in + ci`.
    let mut xp = vec![0f32; stride * c.c_in * t_ph];
    for r in 0..stride {
        for ci in 0..c.c_in {
            let src = &x[ci * t_in..(ci + 1) * t_in];
            let dst = &mut xp[(r * c.c_in + ci) * t_ph..][..t_ph];
            for (u, d) in dst.iter_mut().enumerate() {
                if let Some(&v) = src.get(u * stride + r) {
                    *d = v;
                }
            }
        }
    }
    let cp = stride * c.c_in;
    let mut wp = vec![0f32; c.c_out * cp * taps];
    for co in 0..c.c_out {
        for ci in 0..c.c_in {
            let src = &w[(co * c.c_in + ci) * c.kernel..][..c.kernel];
            for (k, &v) in src.iter().enumerate() {
                let (j, r) = (k / stride, k % stride);
                wp[(co * cp + r * c.c_in + ci) * taps + j] = v;
            }
        }
    }
    let shape = Conv1dShape {
        c_in: cp,
        c_out: c.c_out,
        kernel: taps,
        dilation: 1,
        groups: 1,
    };
    super::conv::conv1d(tok, &xp, t_ph, &wp, bias, shape, out)
}
