//! The int8 convolution on AVX2 (every x86-64 CPU since ~2013 without
//! AVX-512 VNNI: AMD Zen 1-3, Intel client cores, which have AVX2 and
//! maybe AVX-VNNI but no AVX-512).
//!
//! AVX2 has no exact u8 x i8 dot product (`vpmaddubsw` saturates its i16
//! pair sums), so activations are packed as **i16 pairs** of input
//! channels (`[pairs][t]`, channel `2p` in the low half; no offset) and
//! weights as i16 pairs too: one `vpmaddwd` is 16 exact multiply-adds into
//! eight i32, the same sums as `vpdpbusd` after its offset correction. The
//! f32 side is the reference's: per tap `acc + (i as f32) * (s_x * s_w)`,
//! two roundings, taps in order; so this path gives the reference's bits.
//!
//! A register tile is [`C`] output channels by [`TV`] vectors of 8 time
//! steps: per channel pair, `TV` loads, `C` broadcasts, `C * TV` `vpmaddwd`
//! and as many `vpaddd`. The weight's pairs are made from its quads on the
//! first call ([`ConvQ8::pairs`]), so only a CPU that runs this path holds
//! them.

use super::super::conv::slab_len;
use super::super::{run_tasks, SharedOut};
use super::{pack_columns, Call, Packed, CO, PACK_COLS};
use crate::conv_q8::{ConvQ8, Q_MAX};
use crate::simd::avx2::Avx2;
use core::arch::x86_64::*;

/// Output channels per register tile.
const C: usize = 4;
/// Vectors of 8 time steps per register tile.
const TV: usize = 2;
/// Zero columns after the packed input, so a tile's last vector may read
/// past `t_in` (its extra lanes are never stored).
const PAD: usize = 8 * TV;
/// Lanes `0..n` of an 8-lane mask.
#[inline(always)]
unsafe fn lanes(n: usize) -> __m256i {
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(n.min(8) as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

/// Quantizes and packs `x = [c_in, t_in]` as `[pairs][t]`: two i16 per
/// `u32` (channel `2p` low, `2p + 1` high; 0 past `c_in`), `pairs = 2 *
/// quads`.
pub(super) fn pack(v: Avx2, x: &[f32], c_in: usize, t_in: usize) -> Packed {
    pack_columns(
        2 * c_in.div_ceil(4),
        c_in,
        t_in,
        PAD,
        |cols, xp, sx, x_cs| {
            // SAFETY: this task alone writes columns `cols` of `xp` ([pairs,
            // x_cs]) and of `sx` (x_cs), both alive for the whole call; `x` is
            // [c_in, t_in] (checked by `setup`); the CPU has avx2 (`v`).
            unsafe { pack_cols(v, x, (c_in, t_in), cols, xp, sx, x_cs) }
        },
    )
}

/// Columns `t0..t1` (at most [`PACK_COLS`]) of the packed input: the
/// scalar `column_scales` and `quantize` per lane, the same bits.
///
/// # Safety
/// `x` is `[c_in, t_in]`; `xp` is valid for `[2 * ceil(c_in / 4), x_cs]`
/// and `sx` for `x_cs` elements, columns `t0..t1 <= t_in` written by this
/// call alone; avx2 present.
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_cols(
    _v: Avx2,
    x: &[f32],
    (c_in, t_in): (usize, usize),
    (t0, t1): (usize, usize),
    xp: *mut u32,
    sx: *mut f32,
    x_cs: usize,
) {
    const NV: usize = PACK_COLS / 8;
    let nv = (t1 - t0).div_ceil(8);
    let mask = |v: usize| lanes(t1 - t0 - 8 * v);
    let xb = x.as_ptr();
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    // Max |x| per column (`f32::max` ignores NaN, as `vmaxps` with the
    // running max second; masked-off lanes load 0).
    let mut max = [_mm256_setzero_ps(); NV];
    for c in 0..c_in {
        let row = xb.add(c * t_in + t0);
        for (v, m) in max.iter_mut().enumerate().take(nv) {
            let a = _mm256_and_ps(_mm256_maskload_ps(row.add(8 * v), mask(v)), abs);
            *m = _mm256_max_ps(a, *m);
        }
    }
    // `scale_of`: (max / 127, 127 / max), (0, 0) for a silent column.
    let q_max = _mm256_set1_ps(Q_MAX);
    let mut inv = [_mm256_setzero_ps(); NV];
    for v in 0..nv {
        let loud = _mm256_cmp_ps::<_CMP_GT_OQ>(max[v], _mm256_setzero_ps());
        let s = _mm256_and_ps(_mm256_div_ps(max[v], q_max), loud);
        inv[v] = _mm256_and_ps(_mm256_div_ps(q_max, max[v]), loud);
        _mm256_maskstore_ps(sx.add(t0 + 8 * v), mask(v), s);
    }
    // `quantize` per lane, two channels per u32.
    let (lo, hi) = (_mm256_set1_ps(-Q_MAX), _mm256_set1_ps(Q_MAX));
    let low16 = _mm256_set1_epi32(0xffff);
    for p in 0..2 * c_in.div_ceil(4) {
        let orow = xp.add(p * x_cs + t0);
        for (v, &iv) in inv.iter().enumerate().take(nv) {
            let col = |ci: usize| (ci < c_in).then(|| xb.add(ci * t_in + t0 + 8 * v));
            let a = quantized(col(2 * p), mask(v), iv, (lo, hi));
            let b = quantized(col(2 * p + 1), mask(v), iv, (lo, hi));
            let u = _mm256_or_si256(_mm256_and_si256(a, low16), _mm256_slli_epi32::<16>(b));
            _mm256_maskstore_epi32(orow.add(8 * v) as *mut i32, mask(v), u);
        }
    }
}

/// `quantize` on the lanes of `mask` at `src` (0 past `c_in`: `None`).
#[inline(always)]
unsafe fn quantized(
    src: Option<*const f32>,
    mask: __m256i,
    inv: __m256,
    (lo, hi): (__m256, __m256),
) -> __m256i {
    let Some(src) = src else {
        return _mm256_setzero_si256();
    };
    let y = _mm256_mul_ps(_mm256_maskload_ps(src, mask), inv);
    let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y);
    let r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
    // NaN quantizes to 0 (`NaN as i8`).
    let ord = _mm256_cmp_ps::<_CMP_ORD_Q>(y, y);
    _mm256_and_si256(_mm256_cvtps_epi32(r), _mm256_castps_si256(ord))
}

/// What every task of one call reads: the packed input, the weight, and
/// where the output goes.
#[derive(Clone, Copy)]
struct Tiles<'a> {
    p: &'a Packed,
    w: &'a ConvQ8,
    /// The weight's pairs ([`ConvQ8::pairs`]).
    w16: &'a [u32],
    bias: Option<&'a [f32]>,
    dilation: usize,
    out: *mut f32,
    t_out: usize,
}

pub(super) fn conv1d(v: Avx2, c: Call<'_>, out: &mut [f32]) {
    let Call {
        x,
        t_in,
        t_out,
        w,
        bias,
        dilation,
    } = c;
    let p = pack(v, x, w.c_in, t_in);
    let w16 = w.pairs();
    let pairs = 2 * w.quads();
    // Rows of i16 pairs are as wide as f32 rows.
    let slab = slab_len(pairs, 8 * TV, t_out);
    let (n_slabs, n_cb) = (t_out.div_ceil(slab), w.c_out.div_ceil(CO));
    let task_work = CO * 2 * w.c_in * w.kernel * slab;
    let o = SharedOut::new(out);
    run_tasks(n_slabs * n_cb, task_work, |i| {
        let (si, cb) = (i / n_cb, i % n_cb);
        let (t0, t1) = (si * slab, ((si + 1) * slab).min(t_out));
        let co0 = cb * CO;
        let co1 = (co0 + CO).min(w.c_out);
        let tiles = Tiles {
            p: &p,
            w,
            w16,
            bias,
            dilation,
            out: o.ptr(),
            t_out,
        };
        // SAFETY: task i alone writes rows co0..co1, columns t0..t1 of
        // `out` ([c_out, t_out], alive for the whole call); `p` holds
        // `t_in + PAD` columns per pair, so every tile's reads from column
        // `t + kk * dilation` with `t < t1` rounded up to a multiple of 8
        // stay inside it; the CPU has avx2 (`v`).
        unsafe { block(v, tiles, (co0, co1), (t0, t1)) }
    });
}

/// Rows `co0..co1`, columns `t0..t1` of `out`.
///
/// # Safety
/// As stated at the call: `out` valid for `[c_out, t_out]`, the range
/// written by this call alone, avx2 present.
#[target_feature(enable = "avx2,fma")]
unsafe fn block(_v: Avx2, tiles: Tiles<'_>, (co0, co1): (usize, usize), (t0, t1): (usize, usize)) {
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
    while t + 8 * TV <= t1 {
        tile::<NC, TV>(tiles, co, t, 8 * TV);
        t += 8 * TV;
    }
    while t < t1 {
        let n = (t1 - t).min(8);
        tile::<NC, 1>(tiles, co, t, n);
        t += n;
    }
}

/// `NC` channels x `NV` vectors of time from column `t`, `n` columns
/// stored (the last vector masked).
#[inline(always)]
unsafe fn tile<const NC: usize, const NV: usize>(tiles: Tiles<'_>, co: usize, t: usize, n: usize) {
    let Tiles {
        p,
        w,
        w16,
        bias,
        dilation,
        out,
        t_out,
    } = tiles;
    let (k, x_cs) = (w.kernel, p.x_cs);
    let pairs = 2 * w.quads();
    let mut acc = [[_mm256_setzero_ps(); NV]; NC];
    for (c, a) in acc.iter_mut().enumerate() {
        *a = [_mm256_set1_ps(bias.map_or(0.0, |b| b[co + c])); NV];
    }
    let xp = p.x.as_ptr();
    for kk in 0..k {
        let tx = t + kk * dilation;
        let mut ia = [[_mm256_setzero_si256(); NV]; NC];
        let xb = xp.add(tx);
        let wrow: [*const u32; NC] =
            std::array::from_fn(|c| w16.as_ptr().add(((co + c) * k + kk) * pairs));
        for q in 0..pairs {
            let xs: [__m256i; NV] = std::array::from_fn(|v| {
                _mm256_loadu_si256(xb.add(q * x_cs + 8 * v) as *const __m256i)
            });
            for c in 0..NC {
                let wv = _mm256_set1_epi32(*wrow[c].add(q) as i32);
                for v in 0..NV {
                    ia[c][v] = _mm256_add_epi32(ia[c][v], _mm256_madd_epi16(xs[v], wv));
                }
            }
        }
        for c in 0..NC {
            let sw = _mm256_set1_ps(w.scales[co + c]);
            for v in 0..NV {
                let s = _mm256_mul_ps(_mm256_loadu_ps(p.sx.as_ptr().add(tx + 8 * v)), sw);
                acc[c][v] =
                    _mm256_add_ps(acc[c][v], _mm256_mul_ps(_mm256_cvtepi32_ps(ia[c][v]), s));
            }
        }
    }
    for (c, a) in acc.iter().enumerate() {
        let row = out.add((co + c) * t_out + t);
        for (v, &av) in a.iter().enumerate() {
            let m = n.saturating_sub(8 * v).min(8);
            if m == 8 {
                _mm256_storeu_ps(row.add(8 * v), av);
            } else if m > 0 {
                _mm256_maskstore_ps(row.add(8 * v), lanes(m), av);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv_q8::{column_scales, quantize};

    /// The AVX2 scale-and-pack pass gives the scalar pairs and scales on
    /// every width (whole vectors, tails, several tasks, channel counts
    /// around the pair and the quad), on ties, zeros, signed zeros, the
    /// clamp's edge, subnormals and non-finite values.
    #[test]
    fn the_avx2_pack_matches_the_scalar_one() {
        let Some(v) = Avx2::new() else {
            return;
        };
        for (c_in, t_in, x) in super::super::pack_inputs() {
            let p = pack(v, &x, c_in, t_in);
            let (sx, inv) = column_scales(&x, c_in, t_in);
            for t in 0..t_in {
                assert_eq!(
                    p.sx[t].to_bits(),
                    sx[t].to_bits(),
                    "c_in={c_in} t={t}: scale"
                );
                for pr in 0..2 * c_in.div_ceil(4) {
                    let half = |ci: usize| {
                        if ci < c_in {
                            quantize(x[ci * t_in + t], inv[t]) as i16 as u16 as u32
                        } else {
                            0
                        }
                    };
                    let want = half(2 * pr) | half(2 * pr + 1) << 16;
                    assert_eq!(p.x[pr * p.x_cs + t], want, "c_in={c_in} t={t} pair {pr}");
                }
            }
        }
    }

    /// The pairs hold the quads' signed bytes.
    #[test]
    fn weight_pairs_hold_the_quads_bytes() {
        let wf: Vec<f32> = (0..3 * 6 * 2)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let w = ConvQ8::from_conv1d(&wf, 3, 6, 2);
        let p = w.pairs();
        let pairs = 2 * w.quads();
        for co in 0..3 {
            for kk in 0..2 {
                for ci in 0..8 {
                    let u = p[(co * 2 + kk) * pairs + ci / 2];
                    let got = (u >> (16 * (ci % 2))) as u16 as i16;
                    let want = if ci < 6 {
                        w.weight(co, ci, kk) as i16
                    } else {
                        0
                    };
                    assert_eq!(got, want, "co={co} kk={kk} ci={ci}");
                }
            }
        }
    }
}
