//! Non-linear 4-bit weight matmul with int8 activations (the semantics of
//! [`crate::matmul`] on [`crate::Mat::Iq4`]; reference:
//! `reference::matmul_group_a8`; format: [`crate::iq4`]).
//!
//! The layout, activation preparation and threading are q4's
//! (`super::group`: `with_acts`, `par_rows`, the `rows_fn` blocking); what
//! differs is the nibble's meaning — an index into the 16 int8 levels,
//! looked up with one `vpshufb` per 32/64 nibbles — and the signed group
//! scales (`vpmovsxbd`).
//!
//! - AVX-512 VNNI: `vpdpbusd` wants unsigned weights, so the table holds
//!   `level + 128` (1..=241) and each group's sum starts at
//!   `-128 * sum(x in group)`, which gives `level . x` exactly.
//! - AVX2: `vpmaddubsw(|w|, sign(x, w))` (the signed-by-signed trick:
//!   pairs <= 2 * 127 * 127 = 32258, never saturating), then `vpmaddwd` by
//!   ones to one i32 per group each step.
//!
//! Exactness: a group's dot is at most 32 * 127 * 127 = 516128 in
//! magnitude, times |s| <= 127: 6.6e7 per group and super-block, 1.3e8 per
//! AVX2 lane (two groups); lanes are flushed to i64 every `SBB` = 8
//! super-blocks (1.1e9 < 2^31). Every path and thread count gives the
//! reference's bits.

use super::group::{put, Acts, GroupKernels};
use super::SharedOut;
use crate::iq4::IQ4_LEVELS;
use crate::mat::GroupMat;
use crate::q4::{q4_row_bytes, Q4_SUPER, Q4_SUPER_BYTES, Q4_SUPER_GROUPS};

/// Super-blocks per i32 accumulation block (see the module docs).
#[cfg(target_arch = "x86_64")]
const SBB: usize = 8;

/// The levels biased by +128 (unsigned, for `vpdpbusd`).
#[cfg(target_arch = "x86_64")]
const BIASED: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (IQ4_LEVELS[i] as i16 + 128) as u8;
        i += 1;
    }
    t
};

pub(crate) const KERNELS: GroupKernels = GroupKernels {
    name: "iq4",
    offset: -128,
    row_bytes: q4_row_bytes,
    portable: rows_portable,
    #[cfg(target_arch = "x86_64")]
    avx2: x86::rows_avx2,
    #[cfg(target_arch = "x86_64")]
    vnni: x86::rows_vnni,
};

/// The portable kernel: one weight row at a time, its levels looked up per
/// super-block into 64 i32 partial sums (which LLVM vectorizes), exact.
///
/// # Safety
/// `dst` is a live `[m, n]` buffer of which this call alone writes columns
/// `j0..j1 <= n`; the slices hold what `matmul` asserted.
unsafe fn rows_portable(
    a: &Acts<'_>,
    m: usize,
    w: &GroupMat<'_>,
    bias: Option<&[f32]>,
    j0: usize,
    j1: usize,
    dst: SharedOut,
) {
    let (data, group_scales) = (w.data, w.group_scales);
    let (rb, rg, nsb) = (a.kp / 2, a.rg, a.kp / Q4_SUPER);
    let mut v = [0i32; Q4_SUPER];
    for j in j0..j1 {
        let (wj, sj) = (
            &data[j * rb..(j + 1) * rb],
            &group_scales[j * rg..(j + 1) * rg],
        );
        let (mut tot_stack, mut tot_heap) = ([0i64; 16], Vec::new());
        let tot: &mut [i64] = if m <= 16 {
            &mut tot_stack[..m]
        } else {
            tot_heap.resize(m, 0);
            &mut tot_heap
        };
        for sb in 0..nsb {
            let wb = &wj[sb * Q4_SUPER_BYTES..(sb + 1) * Q4_SUPER_BYTES];
            for (t, bytes) in wb.chunks_exact(32).enumerate() {
                for (p, &b) in bytes.iter().enumerate() {
                    v[64 * t + p] = IQ4_LEVELS[(b & 0x0f) as usize] as i32;
                    v[64 * t + 32 + p] = IQ4_LEVELS[(b >> 4) as usize] as i32;
                }
            }
            let s = &sj[sb * Q4_SUPER_GROUPS..(sb + 1) * Q4_SUPER_GROUPS];
            for (i, ti) in tot.iter_mut().enumerate() {
                let x = &a.xp[i * a.kp + sb * Q4_SUPER..i * a.kp + (sb + 1) * Q4_SUPER];
                let mut acc = [0i32; 64];
                for (vc, xc) in v.chunks_exact(64).zip(x.chunks_exact(64)) {
                    for p in 0..64 {
                        acc[p] += vc[p] * xc[p] as i32;
                    }
                }
                for l in 0..Q4_SUPER_GROUPS {
                    let g = acc[4 * l] + acc[4 * l + 1] + acc[4 * l + 2] + acc[4 * l + 3];
                    *ti += g as i64 * s[l] as i8 as i64;
                }
            }
        }
        for (i, &t) in tot.iter().enumerate() {
            put(dst.ptr(), a, w, bias, i, j, t);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use crate::fast::group::x86::rows_fn;
    use crate::fast::group::{ActBlock, WeightBlock};
    use crate::fast::Prefetch;
    use core::arch::x86_64::*;

    // The blocking of the q4 kernels (register budgets there).
    rows_fn!(
        rows_vnni,
        block_vnni,
        "avx512f,avx512bw,avx512vl,avx512vnni",
        1,
        8,
        Q4_SUPER_BYTES
    );
    rows_fn!(rows_avx2, block_avx2, "avx2", 1, 4, Q4_SUPER_BYTES);

    /// Exact `t[i][j] = sum_g s[j][g] * (level[j] . x[i])_g` over `MR`
    /// activation rows and `NR` weight rows.
    ///
    /// # Safety
    /// avx512f/bw/vl/vnni present; `x` valid for `MR` rows of stride `kp`
    /// (`nsb * 512` i8), `nx` for `MR` rows of stride `rg` i32, `w` for `NR`
    /// rows of stride `rb` (`nsb * 256` bytes), `s` for `NR` rows of stride
    /// `rg` bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn block_vnni<const MR: usize, const NR: usize>(
        acts: ActBlock,
        weights: WeightBlock,
        pf: Prefetch,
    ) -> [[i64; NR]; MR] {
        let ActBlock { x, nx, kp, rg } = acts;
        let WeightBlock { w, s, rb, nsb } = weights;
        let shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
        let low = _mm512_set1_epi8(0x0f);
        let table = _mm512_broadcast_i32x4(_mm_loadu_si128(BIASED.as_ptr() as *const __m128i));
        let mut tot = [[0i64; NR]; MR];
        let mut sb0 = 0;
        while sb0 < nsb {
            let sb1 = (sb0 + SBB).min(nsb);
            let mut acc = [[_mm512_setzero_si512(); NR]; MR];
            for sb in sb0..sb1 {
                let mut t = [[_mm512_setzero_si512(); NR]; MR];
                for (ii, ti) in t.iter_mut().enumerate() {
                    let c = _mm512_loadu_si512(nx.add(ii * rg + sb * 16) as *const __m512i);
                    ti.fill(c);
                }
                for step in 0..8 {
                    pf.touch(NR * (sb * Q4_SUPER_BYTES + step * 32), NR * 32);
                    let mut wv = [_mm512_setzero_si512(); NR];
                    for (jj, v) in wv.iter_mut().enumerate() {
                        let b = _mm256_loadu_si256(
                            w.add(jj * rb + sb * Q4_SUPER_BYTES + step * 32) as *const __m256i,
                        );
                        let b = _mm512_broadcast_i64x4(b);
                        let idx = _mm512_and_si512(_mm512_srlv_epi64(b, shift), low);
                        *v = _mm512_shuffle_epi8(table, idx);
                    }
                    for (ii, ti) in t.iter_mut().enumerate() {
                        let xv = _mm512_loadu_si512(
                            x.add(ii * kp + sb * Q4_SUPER + step * 64) as *const __m512i
                        );
                        for (tj, &wj) in ti.iter_mut().zip(&wv) {
                            *tj = _mm512_dpbusd_epi32(*tj, wj, xv);
                        }
                    }
                }
                for jj in 0..NR {
                    let sv = _mm512_cvtepi8_epi32(_mm_loadu_si128(
                        s.add(jj * rg + sb * 16) as *const __m128i
                    ));
                    for ii in 0..MR {
                        acc[ii][jj] =
                            _mm512_add_epi32(acc[ii][jj], _mm512_mullo_epi32(t[ii][jj], sv));
                    }
                }
            }
            for (ti, a) in tot.iter_mut().zip(&acc) {
                for (tj, &aj) in ti.iter_mut().zip(a) {
                    let lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(aj));
                    let hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(aj));
                    *tj += _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi));
                }
            }
            sb0 = sb1;
        }
        tot
    }

    /// [`block_vnni`] on AVX2: each 32-byte step unpacks into two ymm of
    /// levels (low nibbles: groups 0-7, high: 8-15) by `vpshufb`, then
    /// `vpmaddubsw(|w|, sign(x, w))` and `vpmaddwd` by ones into one i32
    /// per group. `nx` is not read (no offset).
    ///
    /// # Safety
    /// avx2 present; pointers as for [`block_vnni`].
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn block_avx2<const MR: usize, const NR: usize>(
        acts: ActBlock,
        weights: WeightBlock,
        pf: Prefetch,
    ) -> [[i64; NR]; MR] {
        let ActBlock { x, nx: _, kp, rg } = acts;
        let WeightBlock { w, s, rb, nsb } = weights;
        let low = _mm256_set1_epi8(0x0f);
        let ones = _mm256_set1_epi16(1);
        let table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(IQ4_LEVELS.as_ptr() as *const __m128i));
        // A macro, not a closure: it must compile with this function's
        // target features.
        macro_rules! dot {
            ($w:expr, $x:expr) => {
                _mm256_madd_epi16(
                    _mm256_maddubs_epi16(_mm256_abs_epi8($w), _mm256_sign_epi8($x, $w)),
                    ones,
                )
            };
        }
        let mut tot = [[0i64; NR]; MR];
        let mut sb0 = 0;
        while sb0 < nsb {
            let sb1 = (sb0 + SBB).min(nsb);
            let mut acc = [[_mm256_setzero_si256(); NR]; MR];
            for sb in sb0..sb1 {
                let mut tl = [[_mm256_setzero_si256(); NR]; MR];
                let mut th = [[_mm256_setzero_si256(); NR]; MR];
                for step in 0..8 {
                    pf.touch(NR * (sb * Q4_SUPER_BYTES + step * 32), NR * 32);
                    let mut wl = [_mm256_setzero_si256(); NR];
                    let mut wh = [_mm256_setzero_si256(); NR];
                    for jj in 0..NR {
                        let b = _mm256_loadu_si256(
                            w.add(jj * rb + sb * Q4_SUPER_BYTES + step * 32) as *const __m256i,
                        );
                        wl[jj] = _mm256_shuffle_epi8(table, _mm256_and_si256(b, low));
                        wh[jj] = _mm256_shuffle_epi8(
                            table,
                            _mm256_and_si256(_mm256_srli_epi16::<4>(b), low),
                        );
                    }
                    for ii in 0..MR {
                        let xb = x.add(ii * kp + sb * Q4_SUPER + step * 64);
                        let xl = _mm256_loadu_si256(xb as *const __m256i);
                        let xh = _mm256_loadu_si256(xb.add(32) as *const __m256i);
                        for jj in 0..NR {
                            tl[ii][jj] = _mm256_add_epi32(tl[ii][jj], dot!(wl[jj], xl));
                            th[ii][jj] = _mm256_add_epi32(th[ii][jj], dot!(wh[jj], xh));
                        }
                    }
                }
                for jj in 0..NR {
                    let sg = s.add(jj * rg + sb * 16);
                    let sl = _mm256_cvtepi8_epi32(_mm_loadl_epi64(sg as *const __m128i));
                    let sh = _mm256_cvtepi8_epi32(_mm_loadl_epi64(sg.add(8) as *const __m128i));
                    for ii in 0..MR {
                        acc[ii][jj] = _mm256_add_epi32(
                            acc[ii][jj],
                            _mm256_add_epi32(
                                _mm256_mullo_epi32(tl[ii][jj], sl),
                                _mm256_mullo_epi32(th[ii][jj], sh),
                            ),
                        );
                    }
                }
            }
            for (ti, a) in tot.iter_mut().zip(&acc) {
                for (tj, &aj) in ti.iter_mut().zip(a) {
                    let lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(aj));
                    let hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(aj));
                    let v = _mm256_add_epi64(lo, hi);
                    let mut l = [0i64; 4];
                    _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, v);
                    *tj += l.iter().sum::<i64>();
                }
            }
            sb0 = sb1;
        }
        tot
    }
}
