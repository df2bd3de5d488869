//! int8 `conv1d` (format and arithmetic in [`crate::conv_q8`]).
//!
//! - AVX-512 VNNI: activations packed as `u32` quads of input channels
//!   (`u8 = xq + 128`, `[quads][t]`), one `vpdpbusd` per (channel, vector
//!   of 16 time steps) and quad: a 4 x 4 tile is 16 `vpdpbusd` = 1024
//!   multiply-adds per 4 loads + 4 broadcasts. Each tap is its own i32 sum
//!   (the taps read columns with different scales), then converted and
//!   added in f32.
//! - Portable (every other path): the reference's loops per output
//!   channel, i32 rows the compiler vectorises, channels in parallel.
//!
//! Tasks are (time slab, block of [`CO`] output channels), slab-major, as
//! the bf16 kernel's, so a slab's packed input is reused from L2.

use super::conv::slab_len;
use super::conv_bf16_setup::pack_par;
use super::{run_tasks, SharedOut};
use crate::conv_q8::{column_scales, quantize, ConvQ8};

/// Output channels per task block.
const CO: usize = 16;

/// Which kernel runs an int8 convolution.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Q8ConvPath {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Vnni(vnni::Vnni),
}

impl Q8ConvPath {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Q8ConvPath::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Q8ConvPath::Vnni(_) => "avx512vnni",
        }
    }
}

/// Checks a call; `Some(t_out)` when there is something to compute.
fn setup(
    x: &[f32],
    t_in: usize,
    w: &ConvQ8,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &[f32],
) -> Option<usize> {
    assert_eq!(x.len(), w.c_in * t_in, "conv1d_q8: x is not [c_in, t_in]");
    if let Some(b) = bias {
        assert_eq!(b.len(), w.c_out, "conv1d_q8: bias is not [c_out]");
    }
    let t_out = t_in.saturating_sub((w.kernel - 1) * dilation);
    assert_eq!(
        out.len(),
        w.c_out * t_out,
        "conv1d_q8: out is not [c_out, t_out]"
    );
    (t_out > 0 && w.c_out > 0).then_some(t_out)
}

pub(crate) fn conv1d(
    path: Q8ConvPath,
    x: &[f32],
    t_in: usize,
    w: &ConvQ8,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &mut [f32],
) {
    let Some(t_out) = setup(x, t_in, w, bias, dilation, out) else {
        return;
    };
    match path {
        Q8ConvPath::Portable => portable(x, t_in, t_out, w, bias, dilation, out),
        #[cfg(target_arch = "x86_64")]
        Q8ConvPath::Vnni(v) => vnni::conv1d(
            v,
            Call {
                x,
                t_in,
                t_out,
                w,
                bias,
                dilation,
            },
            out,
        ),
    }
}

/// A checked call's inputs, as the SIMD path takes them.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Call<'a> {
    x: &'a [f32],
    t_in: usize,
    t_out: usize,
    w: &'a ConvQ8,
    bias: Option<&'a [f32]>,
    dilation: usize,
}

/// The reference's loops, output channels in parallel.
fn portable(
    x: &[f32],
    t_in: usize,
    t_out: usize,
    w: &ConvQ8,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &mut [f32],
) {
    let (sx, inv) = column_scales(x, w.c_in, t_in);
    let mut xq = vec![0i8; x.len()];
    pack_par(&mut xq, t_in, |c0, o| {
        for (i, q) in o.iter_mut().enumerate() {
            let j = c0 * t_in + i;
            *q = quantize(x[j], inv[j % t_in]);
        }
    });
    let k = w.kernel;
    let o = SharedOut::new(out);
    run_tasks(w.c_out, 2 * w.c_in * k * t_out, |co| {
        // SAFETY: task `co` alone writes row `co` of `out` ([c_out, t_out],
        // alive for the whole call).
        let row = unsafe { std::slice::from_raw_parts_mut(o.ptr().add(co * t_out), t_out) };
        row.fill(bias.map_or(0.0, |b| b[co]));
        let mut acc = vec![0i32; t_out];
        for kk in 0..k {
            acc.fill(0);
            let off = kk * dilation;
            for ci in 0..w.c_in {
                let wv = w.weight(co, ci, kk) as i32;
                let xr = &xq[ci * t_in + off..ci * t_in + off + t_out];
                for (a, &v) in acc.iter_mut().zip(xr) {
                    *a += wv * v as i32;
                }
            }
            let s = w.scales[co];
            for ((r, &a), &sxt) in row.iter_mut().zip(&acc).zip(&sx[off..off + t_out]) {
                *r += a as f32 * (sxt * s);
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod vnni {
    use super::*;
    use core::arch::x86_64::*;

    /// Proof that the CPU has avx512f, avx512bw and avx512vnni.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Vnni(());

    impl Vnni {
        pub(crate) fn new() -> Option<Vnni> {
            (is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vnni"))
            .then_some(Vnni(()))
        }
    }

    /// Output channels per register tile.
    const C: usize = 4;
    /// Vectors of 16 time steps per register tile.
    const TV: usize = 4;
    /// Zero columns after the packed input, so a tile's last vector may
    /// read past `t_in` (its extra lanes are never stored).
    const PAD: usize = 16 * TV;

    /// The call's packed activations.
    struct Packed {
        /// `[quads][x_cs]` quads of `u8 = xq + 128` (zero bytes of
        /// padding encode 128: quantized 0 reads as -128, which is why
        /// the padded lanes are never stored).
        x: Vec<u32>,
        /// `s_x` per column, `x_cs` long.
        sx: Vec<f32>,
        x_cs: usize,
    }

    fn pack(x: &[f32], c_in: usize, t_in: usize) -> Packed {
        let (mut sx, inv) = column_scales(x, c_in, t_in);
        let x_cs = t_in + PAD;
        sx.resize(x_cs, 0.0);
        let quads = c_in.div_ceil(4);
        let mut xp = vec![0u32; quads * x_cs];
        pack_par(&mut xp, x_cs, |q0, o| {
            for (qi, row) in o.chunks_exact_mut(x_cs).enumerate() {
                let q = q0 + qi;
                for i in 0..4 {
                    let ci = 4 * q + i;
                    let shift = 8 * i;
                    if ci >= c_in {
                        // Quantized 0: byte 128.
                        for v in row[..t_in].iter_mut() {
                            *v |= 128 << shift;
                        }
                        continue;
                    }
                    let xr = &x[ci * t_in..(ci + 1) * t_in];
                    for ((v, &a), &s) in row.iter_mut().zip(xr).zip(&inv) {
                        *v |= ((quantize(a, s) as i32 + 128) as u32) << shift;
                    }
                }
            }
        });
        Packed { x: xp, sx, x_cs }
    }

    /// What every task of one call reads: the packed input, the weight,
    /// and where the output goes.
    #[derive(Clone, Copy)]
    struct Tiles<'a> {
        p: &'a Packed,
        w: &'a ConvQ8,
        bias: Option<&'a [f32]>,
        dilation: usize,
        out: *mut f32,
        t_out: usize,
    }

    pub(super) fn conv1d(v: Vnni, c: super::Call<'_>, out: &mut [f32]) {
        let super::Call {
            x,
            t_in,
            t_out,
            w,
            bias,
            dilation,
        } = c;
        let p = pack(x, w.c_in, t_in);
        let quads = w.quads();
        let slab = slab_len(quads, 16 * TV, t_out);
        let (n_slabs, n_cb) = (t_out.div_ceil(slab), w.c_out.div_ceil(CO));
        let task_work = CO * 2 * w.c_in * w.kernel * slab;
        let o = SharedOut::new(out);
        run_tasks(n_slabs * n_cb, task_work, |i| {
            let (si, cb) = (i / n_cb, i % n_cb);
            let (t0, t1) = (si * slab, ((si + 1) * slab).min(t_out));
            let co0 = cb * CO;
            let co1 = (co0 + CO).min(w.c_out);
            // SAFETY: task i alone writes rows co0..co1, columns t0..t1 of
            // `out` ([c_out, t_out], alive for the whole call); `p` holds
            // `t_in + PAD` columns per quad, so every tile's reads from
            // column `t + kk * dilation` with `t < t1` rounded up to a
            // multiple of 16 stay inside it; the CPU has the features
            // (`v`).
            unsafe {
                let tiles = Tiles {
                    p: &p,
                    w,
                    bias,
                    dilation,
                    out: o.ptr(),
                    t_out,
                };
                block(v, tiles, (co0, co1), (t0, t1))
            }
        });
    }

    /// Rows `co0..co1`, columns `t0..t1` of `out`.
    ///
    /// # Safety
    /// As stated at the call: `out` valid for `[c_out, t_out]`, the range
    /// written by this call alone, avx512f/bw/vnni present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn block(
        _v: Vnni,
        tiles: Tiles<'_>,
        (co0, co1): (usize, usize),
        (t0, t1): (usize, usize),
    ) {
        let mut co = co0;
        while co + C <= co1 {
            cols::<C>(tiles, co, (t0, t1));
            co += C;
        }
        while co < co1 {
            cols::<1>(tiles, co, (t0, t1));
            co += 1;
        }
    }

    /// Channels `co..co + NC`, columns `t0..t1`.
    #[inline(always)]
    unsafe fn cols<const NC: usize>(tiles: Tiles<'_>, co: usize, (t0, t1): (usize, usize)) {
        let mut t = t0;
        while t + 16 * TV <= t1 {
            tile::<NC, TV>(tiles, co, t, 16 * TV);
            t += 16 * TV;
        }
        while t < t1 {
            let n = (t1 - t).min(16);
            tile::<NC, 1>(tiles, co, t, n);
            t += n;
        }
    }

    /// `NC` channels x `NV` vectors of time from column `t`, `n` columns
    /// stored (the last vector masked).
    #[inline(always)]
    unsafe fn tile<const NC: usize, const NV: usize>(
        tiles: Tiles<'_>,
        co: usize,
        t: usize,
        n: usize,
    ) {
        let Tiles {
            p,
            w,
            bias,
            dilation,
            out,
            t_out,
        } = tiles;
        let (k, quads, x_cs) = (w.kernel, w.quads(), p.x_cs);
        let mut acc = [[_mm512_setzero_ps(); NV]; NC];
        for (c, a) in acc.iter_mut().enumerate() {
            let b = _mm512_set1_ps(bias.map_or(0.0, |b| b[co + c]));
            *a = [b; NV];
        }
        let wp = w.w.as_ptr();
        let xp = p.x.as_ptr();
        for kk in 0..k {
            let tx = t + kk * dilation;
            let mut ia = [[_mm512_setzero_si512(); NV]; NC];
            let xb = xp.add(tx);
            let wrow: [*const u32; NC] =
                std::array::from_fn(|c| wp.add(((co + c) * k + kk) * quads));
            for q in 0..quads {
                let xs: [__m512i; NV] = std::array::from_fn(|v| {
                    _mm512_loadu_si512(xb.add(q * x_cs + 16 * v) as *const __m512i)
                });
                for c in 0..NC {
                    let wv = _mm512_set1_epi32(*wrow[c].add(q) as i32);
                    for v in 0..NV {
                        ia[c][v] = _mm512_dpbusd_epi32(ia[c][v], xs[v], wv);
                    }
                }
            }
            for c in 0..NC {
                let corr = _mm512_set1_epi32(128 * w.wsum[(co + c) * k + kk]);
                let sw = _mm512_set1_ps(w.scales[co + c]);
                for v in 0..NV {
                    let i = _mm512_sub_epi32(ia[c][v], corr);
                    let s = _mm512_mul_ps(_mm512_loadu_ps(p.sx.as_ptr().add(tx + 16 * v)), sw);
                    acc[c][v] = _mm512_add_ps(acc[c][v], _mm512_mul_ps(_mm512_cvtepi32_ps(i), s));
                }
            }
        }
        for (c, a) in acc.iter().enumerate() {
            let row = out.add((co + c) * t_out + t);
            for (v, &av) in a.iter().enumerate() {
                let lanes = n.saturating_sub(16 * v).min(16);
                if lanes == 16 {
                    _mm512_storeu_ps(row.add(16 * v), av);
                } else if lanes > 0 {
                    _mm512_mask_storeu_ps(row.add(16 * v), (1u32 << lanes) as u16 - 1, av);
                }
            }
        }
    }
}
