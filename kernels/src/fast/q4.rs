//! 4-bit group-wise weight matmul with int8 activations (the semantics of
//! [`crate::matmul`] on [`crate::Mat::Q4`]; reference:
//! `reference::matmul_q4_a8`; format and layout: [`crate::q4`]).
//!
//! Each activation row is quantized to int8 ([`quantize_a8_row`]) and
//! permuted into the weights' super-block order once per call, so that for
//! every 64-byte step `t` of a 512-input super-block, byte `p` of the
//! activations meets the nibble of `V_t[p]` and 32-bit lane `l` sums four
//! inputs of group `l`. The kernels multiply the stored nibbles `u = q + 8`
//! (unsigned, as `vpdpbusd`/`vpmaddubsw` want their first operand) and
//! start each group's sum at `-8 * sum(x in group)` (precomputed per
//! activation row), which gives `q . x` exactly. After the 8 steps lane `l`
//! holds group `l`'s integer dot; one `vpmulld` by the 16 group scales and
//! an add finish the super-block.
//!
//! Per 64 weights and weight row: one 32-byte broadcast load, one shift,
//! one mask (shared by the activation rows of a block), then one `vpdpbusd`
//! per activation row (AVX-512 VNNI). AVX2: one load, one shift, two masks
//! for two ymm halves, then two `vpmaddubsw` + two `vpaddw` per activation
//! row (16-bit partial sums: <= 8 * 2 * 15 * 127 = 30480, never saturating).
//!
//! Exactness: a group's super-block sum is at most 32512 + 8 * 4 * 15 * 127
//! = 93472 in magnitude, times a scale <= 255: 2.4e7 per i32 lane (4.8e7
//! on AVX2, whose lanes take two groups), so lanes are flushed to i64
//! totals every `SBB` = 32 super-blocks (1.5e9 < 2^31).
//! Totals are exact integers: every path (including the portable one) and
//! thread count gives the reference's bits.

use super::group::{put, Acts, GroupKernels};
use super::{Prefetch, SharedOut};
use crate::mat::GroupMat;
use crate::q4::{q4_row_bytes, Q4_SUPER, Q4_SUPER_BYTES, Q4_SUPER_GROUPS};

/// Super-blocks per i32 accumulation block (see the module docs).
#[cfg(target_arch = "x86_64")]
const SBB: usize = 32;

pub(crate) const KERNELS: GroupKernels = GroupKernels {
    name: "q4",
    offset: -8,
    row_bytes: q4_row_bytes,
    portable: rows_portable,
    #[cfg(target_arch = "x86_64")]
    avx2: x86::rows_avx2,
    #[cfg(target_arch = "x86_64")]
    vnni: x86::rows_vnni,
};

/// The portable kernel: one weight row at a time, its nibbles unpacked per
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
    debug_assert_eq!(a.sx.len(), m);
    portable_cols(a, w.data, w.group_scales, w, bias, j0..j1, dst)
}

/// [`rows_portable`]'s body, with the weight's data and group scales as
/// arguments of their own: as arguments they are known not to alias the
/// totals it writes, which keeps its loops vectorized (read out of the
/// [`GroupMat`] inside one function they were not, and the kernel ran
/// ~1.7x slower).
///
/// # Safety
/// As for [`rows_portable`] (`j0..j1 = cols`, `m = a.sx.len()`).
#[inline(never)]
unsafe fn portable_cols(
    a: &Acts<'_>,
    data: &[u8],
    group_scales: &[u8],
    w: &GroupMat<'_>,
    bias: Option<&[f32]>,
    cols: core::ops::Range<usize>,
    dst: SharedOut,
) {
    let (m, j0, j1) = (a.sx.len(), cols.start, cols.end);
    let (rb, rg, nsb) = (a.kp / 2, a.rg, a.kp / Q4_SUPER);
    let mut u = [0u8; Q4_SUPER];
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
            // The nibbles of 8 bytes at a time: low ones to the first half of
            // each 64, high ones to the second.
            const LOW: u64 = 0x0f0f_0f0f_0f0f_0f0f;
            for (bytes, ut) in wb.chunks_exact(32).zip(u.chunks_exact_mut(64)) {
                let (lo, hi) = ut.split_at_mut(32);
                for ((b8, l8), h8) in bytes
                    .chunks_exact(8)
                    .zip(lo.chunks_exact_mut(8))
                    .zip(hi.chunks_exact_mut(8))
                {
                    let v = u64::from_le_bytes(b8.try_into().expect("8 bytes"));
                    l8.copy_from_slice(&(v & LOW).to_le_bytes());
                    h8.copy_from_slice(&((v >> 4) & LOW).to_le_bytes());
                }
            }
            let s = &sj[sb * Q4_SUPER_GROUPS..(sb + 1) * Q4_SUPER_GROUPS];
            for (i, ti) in tot.iter_mut().enumerate() {
                let x = &a.xp[i * a.kp + sb * Q4_SUPER..i * a.kp + (sb + 1) * Q4_SUPER];
                let mut acc = [0i32; 64];
                for (uc, xc) in u.chunks_exact(64).zip(x.chunks_exact(64)) {
                    for p in 0..64 {
                        acc[p] += uc[p] as i32 * xc[p] as i32;
                    }
                }
                let nx = &a.nx8[i * rg + sb * Q4_SUPER_GROUPS..];
                for l in 0..Q4_SUPER_GROUPS {
                    let g = acc[4 * l] + acc[4 * l + 1] + acc[4 * l + 2] + acc[4 * l + 3] + nx[l];
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
pub(crate) mod x86 {
    use super::*;
    use crate::fast::group::x86::rows_fn;
    use crate::fast::group::{ActBlock, WeightBlock};
    use core::arch::x86_64::*;

    // AVX-512: 1 x 8 dots + 8 accumulators + 8 weight vectors + 1
    // activation + 2 constants of 32 zmm. (2 x 4 was the same speed at
    // m = 1 and 0.72x at m = 16: 8 weight rows share each activation load.)
    rows_fn!(
        rows_vnni,
        block_vnni,
        "avx512f,avx512bw,avx512vl,avx512vnni",
        1,
        8,
        Q4_SUPER_BYTES
    );
    // AVX2: 1 x 4 x (two 16-bit halves + accumulator) + 2 weight halves +
    // 2 activation halves + mask: 17 of 16 ymm, the accumulators (touched
    // once per super-block) are the ones that spill.
    rows_fn!(rows_avx2, block_avx2, "avx2", 1, 4, Q4_SUPER_BYTES);

    /// Exact `t[i][j] = sum_g s[j][g] * (q[j] . x[i])_g` over `MR`
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
                        *v = _mm512_and_si512(_mm512_srlv_epi64(b, shift), low);
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

    /// [`block_vnni`] on AVX2: each 32-byte step unpacks into two ymm (low
    /// nibbles: groups 0-7, high: 8-15), `vpmaddubsw` + 16-bit adds over
    /// the 8 steps, then `vpmaddwd` by ones to i32 per group.
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
        let ones = _mm256_set1_epi16(1);
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
                        wl[jj] = _mm256_and_si256(b, low);
                        wh[jj] = _mm256_and_si256(_mm256_srli_epi16::<4>(b), low);
                    }
                    for ii in 0..MR {
                        let xb = x.add(ii * kp + sb * Q4_SUPER + step * 64);
                        let xl = _mm256_loadu_si256(xb as *const __m256i);
                        let xh = _mm256_loadu_si256(xb.add(32) as *const __m256i);
                        for jj in 0..NR {
                            tl[ii][jj] =
                                _mm256_add_epi16(tl[ii][jj], _mm256_maddubs_epi16(wl[jj], xl));
                            th[ii][jj] =
                                _mm256_add_epi16(th[ii][jj], _mm256_maddubs_epi16(wh[jj], xh));
                        }
                    }
                }
                for jj in 0..NR {
                    let sg = s.add(jj * rg + sb * 16);
                    let sl = _mm256_cvtepu8_epi32(_mm_loadl_epi64(sg as *const __m128i));
                    let sh = _mm256_cvtepu8_epi32(_mm_loadl_epi64(sg.add(8) as *const __m128i));
                    for ii in 0..MR {
                        let nb = nx.add(ii * rg + sb * 16);
                        let gl = _mm256_add_epi32(
                            _mm256_madd_epi16(tl[ii][jj], ones),
                            _mm256_loadu_si256(nb as *const __m256i),
                        );
                        let gh = _mm256_add_epi32(
                            _mm256_madd_epi16(th[ii][jj], ones),
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
