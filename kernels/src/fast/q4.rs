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

use super::{Prefetch, SharedOut, PAR_MIN_WORK, TASK_MIN_WORK};
use crate::q4::{
    q4_offset_group_sums, q4_permute_activations, q4_row_bytes, q4_row_groups, q4_supers,
    quantize_a8_row, Q4_SUPER, Q4_SUPER_BYTES, Q4_SUPER_GROUPS,
};
use rayon::prelude::*;

/// Super-blocks per i32 accumulation block (see the module docs).
const SBB: usize = 32;
/// Weight rows per task granule (a multiple of every path's block).
const NR: usize = 8;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Q4Path {
    /// Plain Rust (what the scalar path runs for Q4; autovectorized).
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
}

impl Q4Path {
    /// The VNNI path when the CPU has it (an `Avx512` token alone proves
    /// only avx512f), else AVX2.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn for_avx512() -> Q4Path {
        if is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
        {
            Q4Path::Avx512Vnni
        } else {
            Q4Path::Avx2
        }
    }
}

/// The activations of one call, quantized and permuted.
pub(crate) struct Acts<'a> {
    /// `[m, kp]` int8 in super-block order, zero-padded.
    pub(crate) xp: &'a [i8],
    /// `[m, groups]`: `offset * sum(x in group)` (`-8` for q4).
    pub(crate) nx8: &'a [i32],
    /// `[m]` activation scales.
    pub(crate) sx: &'a [f32],
    pub(crate) kp: usize,
    pub(crate) rg: usize,
}

/// # Panics
/// On shapes that do not match (`x = [m, k]`, weights at least `[n, k]` in
/// the Q4 layout, `out = [m, n]`).
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one quantized `Mat` as the caller's match bound them: passing the `Mat` again would need an unreachable arm for the other formats"
)]
pub(crate) fn matmul(
    path: Q4Path,
    x: &[f32],
    m: usize,
    data: &[u8],
    group_scales: &[u8],
    scales: &[f32],
    n: usize,
    k: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let (rb, rg) = (q4_row_bytes(k), q4_row_groups(k));
    assert_eq!(x.len(), m * k, "matmul: x is not [m, k]");
    assert_eq!(out.len(), m * n, "matmul: out is not [m, n]");
    assert!(data.len() >= n * rb, "matmul: Q4 data shorter than [n, k]");
    assert!(
        group_scales.len() >= n * rg,
        "matmul: fewer Q4 group scales than [n, groups]"
    );
    assert!(scales.len() >= n, "matmul: fewer scales than rows");
    if let Some(b) = bias {
        assert_eq!(b.len(), n, "matmul: bias is not [n]");
    }
    if m == 0 || n == 0 {
        return;
    }
    with_acts(x, m, k, -8, |a| {
        let dst = SharedOut::new(out);
        let rows = |j0: usize, j1: usize| {
            // SAFETY: the asserts above give x = [m, k] (so xp = [m, kp],
            // nx8 = [m, rg]), data >= [n, rb], group_scales >= [n, rg],
            // scales >= [n], out = [m, n], and j0 <= j1 <= n; tasks get
            // disjoint row ranges, so their writes to `dst` are disjoint. The
            // SIMD paths were chosen by detection of their features (`Q4Path`
            // is built only from an `Avx2`/`Avx512` token or `for_avx512`).
            unsafe {
                match path {
                    Q4Path::Portable => {
                        rows_portable(a, m, data, group_scales, scales, n, bias, j0, j1, dst)
                    }
                    #[cfg(target_arch = "x86_64")]
                    Q4Path::Avx512Vnni => {
                        rows_vnni(a, m, data, group_scales, scales, n, bias, j0, j1, dst)
                    }
                    #[cfg(target_arch = "x86_64")]
                    Q4Path::Avx2 => {
                        rows_avx2(a, m, data, group_scales, scales, n, bias, j0, j1, dst)
                    }
                }
            }
        };
        par_rows(m, n, a.kp, rows);
    });
}

/// Quantizes the `m` activation rows of `x` (`[m, k]`) to int8, permutes
/// them into super-block order and computes their per-group sums times
/// `offset` (the correction of an offset weight encoding, see
/// [`q4_offset_group_sums`]), then runs `f` on them. Decode (m = 1,
/// k <= 4096) works on the stack. Shared by the q4, iq4 and q6 kernels,
/// which all use this activation order.
pub(crate) fn with_acts<R>(
    x: &[f32],
    m: usize,
    k: usize,
    offset: i32,
    f: impl FnOnce(&Acts<'_>) -> R,
) -> R {
    let kp = q4_supers(k) * Q4_SUPER;
    let rg = q4_row_groups(k);
    let mut xq_stack = [0i8; 4096];
    let mut xp_stack = [0i8; 4096];
    let mut nx_stack = [0i32; 4096 / 32];
    let mut sx_stack = [0f32; 16];
    let (mut xq_heap, mut xp_heap, mut nx_heap, mut sx_heap) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let small = m * kp <= xp_stack.len();
    let xq: &mut [i8] = if small {
        &mut xq_stack[..k]
    } else {
        xq_heap.resize(k, 0);
        &mut xq_heap
    };
    let xp: &mut [i8] = if small {
        &mut xp_stack[..m * kp]
    } else {
        xp_heap.resize(m * kp, 0);
        &mut xp_heap
    };
    let nx8: &mut [i32] = if small {
        &mut nx_stack[..m * rg]
    } else {
        nx_heap.resize(m * rg, 0);
        &mut nx_heap
    };
    let sx: &mut [f32] = if m <= sx_stack.len() {
        &mut sx_stack[..m]
    } else {
        sx_heap.resize(m, 0.0);
        &mut sx_heap
    };
    for i in 0..m {
        sx[i] = quantize_a8_row(&x[i * k..(i + 1) * k], xq);
        let xpi = &mut xp[i * kp..(i + 1) * kp];
        q4_permute_activations(xq, xpi);
        q4_offset_group_sums(xpi, offset, &mut nx8[i * rg..(i + 1) * rg]);
    }
    f(&Acts {
        xp,
        nx8,
        sx,
        kp,
        rg,
    })
}

/// Runs `rows(j0, j1)` over the `n` output features, split into tasks of
/// whole `NR` granules on rayon when the `m * n * kp` work is worth it.
pub(crate) fn par_rows(m: usize, n: usize, kp: usize, rows: impl Fn(usize, usize) + Sync) {
    let work = m * n * kp;
    if work < PAR_MIN_WORK || n <= NR {
        rows(0, n);
        return;
    }
    let threads = rayon::current_num_threads().max(1);
    let min_rows = TASK_MIN_WORK.div_ceil(m * kp);
    let per = n.div_ceil(4 * threads).max(min_rows).next_multiple_of(NR);
    let tasks = n.div_ceil(per);
    (0..tasks)
        .into_par_iter()
        .for_each(|t| rows(t * per, ((t + 1) * per).min(n)));
}

/// `out[i][j] = tot as f32 * (sx[i] * d[j]) + b[j]`, as the reference.
///
/// # Safety
/// `out` is a live `[m, n]` buffer; `i < m`, `j < n`.
#[allow(
    clippy::too_many_arguments,
    reason = "an `#[inline(always)]` inner-loop step: its arguments are the enclosing loop's live bounds, strides and pointers, which a struct would only name twice"
)]
#[inline(always)]
pub(crate) unsafe fn put(
    out: *mut f32,
    n: usize,
    a: &Acts<'_>,
    scales: &[f32],
    bias: Option<&[f32]>,
    i: usize,
    j: usize,
    tot: i64,
) {
    *out.add(i * n + j) = tot as f32 * (a.sx[i] * scales[j]) + bias.map_or(0.0, |b| b[j]);
}

/// The portable kernel: one weight row at a time, its nibbles unpacked per
/// super-block into 64 i32 partial sums (which LLVM vectorizes), exact.
///
/// # Safety
/// `dst` is a live `[m, n]` buffer of which this call alone writes columns
/// `j0..j1 <= n`; the slices hold what `matmul` asserted.
#[allow(
    clippy::too_many_arguments,
    reason = "the portable column-range worker: the weight fields, the activations and its `j0..j1` share of the output, each a scalar its one caller already holds"
)]
unsafe fn rows_portable(
    a: &Acts<'_>,
    m: usize,
    data: &[u8],
    group_scales: &[u8],
    scales: &[f32],
    n: usize,
    bias: Option<&[f32]>,
    j0: usize,
    j1: usize,
    dst: SharedOut,
) {
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
            for (t, bytes) in wb.chunks_exact(32).enumerate() {
                for (p, &b) in bytes.iter().enumerate() {
                    u[64 * t + p] = b & 0x0f;
                    u[64 * t + 32 + p] = b >> 4;
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
            put(dst.ptr(), n, a, scales, bias, i, j, t);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{rows_avx2, rows_vnni};

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::*;
    use core::arch::x86_64::*;

    /// Output features `j0..j1` for all `m` rows, blocked `MR x NR`, for a
    /// format of `$sbytes` data bytes per super-block (the q4 family's
    /// kernels share it: each brings its own `$block`).
    macro_rules! rows_fn {
        ($name:ident, $block:ident, $feat:literal, $mr:literal, $nr:literal, $sbytes:expr) => {
            /// # Safety
            /// The CPU has the features named in `target_feature`; `dst` is
            /// a live `[m, n]` buffer of which this call alone writes
            /// columns `j0..j1 <= n`; the slices hold what `matmul`
            /// asserted.
            #[allow(
                clippy::too_many_arguments,
                reason = "a `#[target_feature]` column-range worker: the weight fields, the activations and its `j0..j1` share of the output, each a scalar its one caller already holds"
            )]
            #[target_feature(enable = $feat)]
            pub(crate) unsafe fn $name(
                a: &Acts<'_>,
                m: usize,
                data: &[u8],
                group_scales: &[u8],
                scales: &[f32],
                n: usize,
                bias: Option<&[f32]>,
                j0: usize,
                j1: usize,
                dst: SharedOut,
            ) {
                let out = dst.ptr();
                let (kp, rg) = (a.kp, a.rg);
                let nsb = kp / Q4_SUPER;
                let rb = nsb * $sbytes;
                let (xp, nxp, wp, sp) = (
                    a.xp.as_ptr(),
                    a.nx8.as_ptr(),
                    data.as_ptr(),
                    group_scales.as_ptr(),
                );
                macro_rules! block {
                    ($r:literal, $c:expr, $i:expr, $j:expr) => {
                        block!($r, $c, $i, $j, Prefetch::NONE)
                    };
                    ($r:literal, $c:expr, $i:expr, $j:expr, $pf:expr) => {{
                        let t = $block::<$r, { $c }>(
                            xp.add($i * kp),
                            nxp.add($i * rg),
                            kp,
                            rg,
                            wp.add($j * rb),
                            sp.add($j * rg),
                            rb,
                            nsb,
                            $pf,
                        );
                        for (ii, row) in t.iter().enumerate() {
                            for (jj, &v) in row.iter().enumerate() {
                                put(out, n, a, scales, bias, $i + ii, $j + jj, v);
                            }
                        }
                    }};
                }
                let mut j = j0;
                while j < j1 {
                    if j1 - j >= $nr {
                        // The next block (rows are contiguous, `rb` bytes
                        // each) and its group scales, fetched during the
                        // first pass over this one (see `Prefetch`).
                        let mut pf = if j1 - j >= 2 * $nr {
                            Prefetch::new(sp.add((j + $nr) * rg), $nr * rg).touch(0, $nr * rg);
                            Prefetch::new(wp.add((j + $nr) * rb), $nr * rb)
                        } else {
                            Prefetch::NONE
                        };
                        let mut i = 0;
                        while m - i >= $mr {
                            block!($mr, $nr, i, j, pf);
                            pf = Prefetch::NONE;
                            i += $mr;
                        }
                        while i < m {
                            block!(1, $nr, i, j, pf);
                            pf = Prefetch::NONE;
                            i += 1;
                        }
                        j += $nr;
                    } else {
                        for i in 0..m {
                            block!(1, 1, i, j);
                        }
                        j += 1;
                    }
                }
            }
        };
    }

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
    pub(crate) use rows_fn;

    /// Exact `t[i][j] = sum_g s[j][g] * (q[j] . x[i])_g` over `MR`
    /// activation rows and `NR` weight rows.
    ///
    /// # Safety
    /// avx512f/bw/vl/vnni present; `x` valid for `MR` rows of stride `kp`
    /// (`nsb * 512` i8), `nx` for `MR` rows of stride `rg` i32, `w` for `NR`
    /// rows of stride `rb` (`nsb * 256` bytes), `s` for `NR` rows of stride
    /// `rg` bytes.
    #[allow(
        clippy::too_many_arguments,
        reason = "an `#[inline(always)]` inner-loop step: its arguments are the enclosing loop's live bounds, strides and pointers, which a struct would only name twice"
    )]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn block_vnni<const MR: usize, const NR: usize>(
        x: *const i8,
        nx: *const i32,
        kp: usize,
        rg: usize,
        w: *const u8,
        s: *const u8,
        rb: usize,
        nsb: usize,
        pf: Prefetch,
    ) -> [[i64; NR]; MR] {
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
    #[allow(
        clippy::too_many_arguments,
        reason = "an `#[inline(always)]` inner-loop step: its arguments are the enclosing loop's live bounds, strides and pointers, which a struct would only name twice"
    )]
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn block_avx2<const MR: usize, const NR: usize>(
        x: *const i8,
        nx: *const i32,
        kp: usize,
        rg: usize,
        w: *const u8,
        s: *const u8,
        rb: usize,
        nsb: usize,
        pf: Prefetch,
    ) -> [[i64; NR]; MR] {
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
