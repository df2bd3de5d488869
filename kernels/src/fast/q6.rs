//! 6-bit weight matmul with int8 activations (the semantics of
//! [`crate::matmul`] on [`crate::Mat::Q6`]; reference:
//! `reference::matmul_group_a8`; format and layout: [`crate::q6`]).
//!
//! The activation preparation, threading and blocking are q4's
//! (`super::group`: `with_acts`, `par_rows`, `rows_fn`). Per 64-weight step the
//! kernels unpack the low nibbles as q4 does and the high pairs from one
//! 16-byte load broadcast to every 128-bit lane, shifted per lane by
//! `2j` (`vpsrlvq`), masked and moved up 4 bits; `u = q + 32` (0..=63) is
//! the unsigned operand of `vpdpbusd` (AVX-512 VNNI) or `vpmaddubsw`
//! (AVX2, pairs <= 2 * 63 * 127 = 16002, then `vpmaddwd` by ones each step),
//! and each group's sum starts at / adds `-32 * sum(x in group)`, which
//! gives `q . x` exactly.
//!
//! Exactness: a group's dot is at most 32 * 32 * 127 = 130048 in
//! magnitude, times a scale <= 255: 3.3e7 per group and super-block, 6.6e7
//! per AVX2 lane (two groups); lanes are flushed to i64 every `SBB` = 8
//! super-blocks. Every path and thread count gives the reference's bits.

use super::group::{put, Acts, GroupKernels};
use super::SharedOut;
use crate::mat::GroupMat;
use crate::q4::{Q4_SUPER, Q4_SUPER_BYTES, Q4_SUPER_GROUPS};
use crate::q6::{q6_row_bytes, Q6_SUPER_BYTES};

/// Super-blocks per i32 accumulation block (see the module docs).
#[cfg(target_arch = "x86_64")]
const SBB: usize = 8;

pub(crate) const KERNELS: GroupKernels = GroupKernels {
    name: "q6",
    offset: -32,
    row_bytes: q6_row_bytes,
    portable: rows_portable,
    #[cfg(target_arch = "x86_64")]
    avx2: x86::rows_avx2,
    #[cfg(target_arch = "x86_64")]
    vnni: x86::rows_vnni,
};

/// The portable kernel: one weight row at a time, its values unpacked per
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
    let (rg, nsb) = (a.rg, a.kp / Q4_SUPER);
    let rb = nsb * Q6_SUPER_BYTES;
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
            let wb = &wj[sb * Q6_SUPER_BYTES..(sb + 1) * Q6_SUPER_BYTES];
            let (nib, pairs) = wb.split_at(Q4_SUPER_BYTES);
            for t in 0..8 {
                for p in 0..64 {
                    let b = nib[32 * t + p % 32];
                    let lo = if p >= 32 { b >> 4 } else { b & 0x0f };
                    let hi = (pairs[16 * t + p % 16] >> (2 * (p / 16))) & 3;
                    v[64 * t + p] = (lo | (hi << 4)) as i32 - 32;
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
                    *ti += g as i64 * s[l] as i64;
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
        Q6_SUPER_BYTES
    );
    rows_fn!(rows_avx2, block_avx2, "avx2", 1, 4, Q6_SUPER_BYTES);

    /// Exact `t[i][j] = sum_g s[j][g] * (q[j] . x[i])_g` over `MR`
    /// activation rows and `NR` weight rows.
    ///
    /// # Safety
    /// avx512f/bw/vl/vnni present; `x` valid for `MR` rows of stride `kp`
    /// (`nsb * 512` i8), `nx` for `MR` rows of stride `rg` i32, `w` for `NR`
    /// rows of stride `rb` (`nsb * 384` bytes), `s` for `NR` rows of stride
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
        let hshift = _mm512_set_epi64(6, 6, 4, 4, 2, 2, 0, 0);
        let low = _mm512_set1_epi8(0x0f);
        let three = _mm512_set1_epi8(3);
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
                    pf.touch(NR * (sb * Q6_SUPER_BYTES + step * 48), NR * 48);
                    let mut wv = [_mm512_setzero_si512(); NR];
                    for (jj, v) in wv.iter_mut().enumerate() {
                        let base = w.add(jj * rb + sb * Q6_SUPER_BYTES);
                        let b = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                            base.add(step * 32) as *const __m256i
                        ));
                        let h = _mm512_broadcast_i32x4(_mm_loadu_si128(
                            base.add(Q4_SUPER_BYTES + step * 16) as *const __m128i,
                        ));
                        let lo = _mm512_and_si512(_mm512_srlv_epi64(b, shift), low);
                        let hi = _mm512_slli_epi16::<4>(_mm512_and_si512(
                            _mm512_srlv_epi64(h, hshift),
                            three,
                        ));
                        *v = _mm512_or_si512(lo, hi);
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
                    let sv = _mm512_cvtepu8_epi32(_mm_loadu_si128(
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

    /// [`block_vnni`] on AVX2: each step unpacks into two ymm of `q + 32`
    /// (groups 0-7 and 8-15), `vpmaddubsw` + `vpmaddwd` by ones into one
    /// i32 per group, the `-32 * sum(x)` offsets added per super-block.
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
        let ActBlock { x, nx, kp, rg } = acts;
        let WeightBlock { w, s, rb, nsb } = weights;
        let low = _mm256_set1_epi8(0x0f);
        let three = _mm256_set1_epi8(3);
        let ones = _mm256_set1_epi16(1);
        let shift_l = _mm256_set_epi64x(2, 2, 0, 0);
        let shift_h = _mm256_set_epi64x(6, 6, 4, 4);
        let mut tot = [[0i64; NR]; MR];
        let mut sb0 = 0;
        while sb0 < nsb {
            let sb1 = (sb0 + SBB).min(nsb);
            let mut acc = [[_mm256_setzero_si256(); NR]; MR];
            for sb in sb0..sb1 {
                let mut tl = [[_mm256_setzero_si256(); NR]; MR];
                let mut th = [[_mm256_setzero_si256(); NR]; MR];
                for step in 0..8 {
                    pf.touch(NR * (sb * Q6_SUPER_BYTES + step * 48), NR * 48);
                    let mut wl = [_mm256_setzero_si256(); NR];
                    let mut wh = [_mm256_setzero_si256(); NR];
                    for jj in 0..NR {
                        let base = w.add(jj * rb + sb * Q6_SUPER_BYTES);
                        let b = _mm256_loadu_si256(base.add(step * 32) as *const __m256i);
                        let h = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                            base.add(Q4_SUPER_BYTES + step * 16) as *const __m128i,
                        ));
                        let hl = _mm256_slli_epi16::<4>(_mm256_and_si256(
                            _mm256_srlv_epi64(h, shift_l),
                            three,
                        ));
                        let hh = _mm256_slli_epi16::<4>(_mm256_and_si256(
                            _mm256_srlv_epi64(h, shift_h),
                            three,
                        ));
                        wl[jj] = _mm256_or_si256(_mm256_and_si256(b, low), hl);
                        wh[jj] =
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(b), low), hh);
                    }
                    for ii in 0..MR {
                        let xb = x.add(ii * kp + sb * Q4_SUPER + step * 64);
                        let xl = _mm256_loadu_si256(xb as *const __m256i);
                        let xh = _mm256_loadu_si256(xb.add(32) as *const __m256i);
                        for jj in 0..NR {
                            tl[ii][jj] = _mm256_add_epi32(
                                tl[ii][jj],
                                _mm256_madd_epi16(_mm256_maddubs_epi16(wl[jj], xl), ones),
                            );
                            th[ii][jj] = _mm256_add_epi32(
                                th[ii][jj],
                                _mm256_madd_epi16(_mm256_maddubs_epi16(wh[jj], xh), ones),
                            );
                        }
                    }
                }
                for jj in 0..NR {
                    let sg = s.add(jj * rg + sb * 16);
                    let sl = _mm256_cvtepu8_epi32(_mm_loadl_epi64(sg as *const __m128i));
                    let sh = _mm256_cvtepu8_epi32(_mm_loadl_epi64(sg.add(8) as *const __m128i));
                    for ii in 0..MR {
                        let nb = nx.add(ii * rg + sb * 16);
                        let gl =
                            _mm256_add_epi32(tl[ii][jj], _mm256_loadu_si256(nb as *const __m256i));
                        let gh = _mm256_add_epi32(
                            th[ii][jj],
                            _mm256_loadu_si256(nb.add(8) as *const __m256i),
                        );
                        acc[ii][jj] = _mm256_add_epi32(
                            acc[ii][jj],
                            _mm256_add_epi32(
                                _mm256_mullo_epi32(gl, sl),
                                _mm256_mullo_epi32(gh, sh),
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
