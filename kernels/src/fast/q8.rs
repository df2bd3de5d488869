//! Int8-weight matmul with int16 activations (the semantics of
//! [`crate::matmul`] on [`crate::Mat::Q8`]; reference:
//! `reference::matmul_q8_a16`).
//!
//! Why int16 activations rather than widening int8 to f32
//! (`Kernels::matmul_q8_widened`): the integer sums are exact, so every ISA
//! and thread count gives the reference's bits, and 32 weights take one
//! load, one sign extension and one `vpdpwssd` (AVX-512 VNNI: 32 int16
//! products summed pairwise into 16 int32 lanes) per activation row instead
//! of two loads, four conversions and two FMAs; AVX2 uses `vpmaddwd` +
//! `vpaddd` on 16. Measured (docs/performance.md): from DRAM at m = 1 both
//! reach ~16 G weights/s on 2 threads (not a ranking; both are bound by the
//! per-core work, not bandwidth), and in cache the widened kernel was
//! faster (47 vs 41 G/s at 2048x2048): the instruction count is not what
//! limits this loop yet.
//!
//! Exactness: a lane gains at most 2 * 32767 * 127 = 8.3e6 per instruction,
//! so i32 lanes are flushed to an i64 total every `KB` = 4096 inputs (256
//! instructions per lane on either ISA: < 2^31). Totals are exact integers,
//! so every path and thread count gives the reference's bits.

use super::{Prefetch, SharedOut, PAR_MIN_WORK, TASK_MIN_WORK};
use crate::mat::{quantize_a16_row, Q8Mat};
use core::arch::x86_64::*;

/// Inputs per i32 accumulation block (see the module docs).
const KB: usize = 4096;
/// The accumulation blocks `(p0, p1)` of `k` inputs, at most [`KB`] each.
#[inline(always)]
fn kb_blocks(k: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..k).step_by(KB).map(move |p0| (p0, (p0 + KB).min(k)))
}
/// Weight rows per block.
const NR: usize = 4;
/// How many blocks ahead of the one it computes a blocked (m >= 2) task
/// prefetches: 2 keeps 8-24 KB in flight at k = 1024..3072. With 1 (the
/// next block, 4-12 KB) a batched step of two or three sessions pulled
/// 23-26 GB/s from DRAM on the Zen 4 host where the same bytes at m = 1
/// came at 33-36: at m >= 2 the core spends longer computing each block,
/// and one block of look-ahead no longer covers the latency of the next
/// (docs/performance.md, "Two blocks of look-ahead").
const BLOCKS_AHEAD: usize = 2;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Q8Path {
    Avx2,
    Avx512Vnni,
}

impl Q8Path {
    /// The VNNI path when the CPU has it (an `Avx512` token alone proves
    /// only avx512f), else AVX2.
    pub(crate) fn for_avx512() -> Q8Path {
        if is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
        {
            Q8Path::Avx512Vnni
        } else {
            Q8Path::Avx2
        }
    }
}

/// The activations of one call quantized to int16: `xq = [m, k]` and the
/// row scales `sx = [m]`.
#[derive(Clone, Copy)]
struct Acts<'a> {
    xq: &'a [i16],
    sx: &'a [f32],
    m: usize,
}

/// # Panics
/// On shapes that do not match (`x = [m, k]`, `w.data >= [n, k]`, `out =
/// [m, n]`).
pub(crate) fn matmul(
    path: Q8Path,
    x: &[f32],
    m: usize,
    w: Q8Mat<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let Q8Mat {
        data,
        scales,
        rows: n,
        cols: k,
    } = w;
    assert_eq!(x.len(), m * k, "matmul: x is not [m, k]");
    assert_eq!(out.len(), m * n, "matmul: out is not [m, n]");
    assert!(
        data.len() >= n * k,
        "matmul: weight data shorter than [n, k]"
    );
    assert!(scales.len() >= n, "matmul: fewer scales than rows");
    if let Some(b) = bias {
        assert_eq!(b.len(), n, "matmul: bias is not [n]");
    }
    if m == 0 || n == 0 {
        return;
    }
    with_quantized(path, x, m, k, |a| {
        let dst = SharedOut::new(out);
        let rows = |j0: usize, j1: usize| {
            // SAFETY: the asserts above give xq = [m, k], w >= [n, k],
            // scales >= [n], out = [m, n], and j0 <= j1 <= n; tasks get
            // disjoint row ranges, so their writes to `dst` are disjoint.
            unsafe { part_rows(path, a, w, bias, j0, j1, dst) }
        };
        if m * n * k < PAR_MIN_WORK || n <= NR {
            return rows(0, n);
        }
        let min_rows = TASK_MIN_WORK.div_ceil(m * k.max(1));
        super::par_rows(n, NR, min_rows, rows);
    })
}

/// One weight of a [`matmul_shared`] call (`k` inputs) and its `[m,
/// w.rows]` output.
pub(crate) struct Part<'a> {
    pub(crate) w: Q8Mat<'a>,
    pub(crate) out: &'a mut [f32],
}

/// [`matmul`] of one `x = [m, k]` against several int8 weights of `k`
/// inputs at once (no bias), each into its own output: the activations
/// are quantized once and every part's rows are split among the tasks of
/// one parallel region, so the step pays one fork-join and one tail where
/// separate calls pay one per weight. Each output has the bits a separate
/// [`matmul`] gives it: the same quantized activations and exact sums.
///
/// # Panics
/// On shapes that do not match (`x = [m, k]`, each `w.data >= [rows,
/// k]`, `w.scales >= [rows]`, `out = [m, rows]`).
pub(crate) fn matmul_shared(path: Q8Path, x: &[f32], m: usize, k: usize, parts: &mut [Part<'_>]) {
    assert_eq!(x.len(), m * k, "matmul_shared: x is not [m, k]");
    for Part { w, out } in parts.iter() {
        assert_eq!(w.cols, k, "matmul_shared: a weight is not [n, k]");
        assert_eq!(out.len(), m * w.rows, "matmul_shared: out is not [m, n]");
        assert!(
            w.data.len() >= w.rows * k,
            "matmul_shared: weight data shorter than [n, k]"
        );
        assert!(
            w.scales.len() >= w.rows,
            "matmul_shared: fewer scales than rows"
        );
    }
    if m == 0 || parts.iter().all(|p| p.w.rows == 0) {
        return;
    }
    let rows: Vec<usize> = parts.iter().map(|p| p.w.rows).collect();
    let views: Vec<_> = parts
        .iter_mut()
        .map(|p| (p.w, SharedOut::new(p.out)))
        .collect();
    with_quantized(path, x, m, k, |a| {
        super::par_parts(&rows, NR, m * k, |i, j0, j1| {
            let (w, dst) = views[i];
            // SAFETY: the asserts above give each part's shapes; `j0 <= j1
            // <= rows[i]`, and tasks get disjoint row ranges of each part,
            // so their writes to its output are disjoint.
            unsafe { part_rows(path, a, w, None, j0, j1, dst) }
        })
    });
}

/// Runs `f` on the rows of `x = [m, k]` quantized to int16 ([`Acts`]).
/// Decode (m * k <= 4096) quantizes into the stack.
fn with_quantized<R>(
    path: Q8Path,
    x: &[f32],
    m: usize,
    k: usize,
    f: impl FnOnce(Acts<'_>) -> R,
) -> R {
    let mut xq_stack = [0i16; 4096];
    let mut xq_heap = Vec::new();
    let xq: &mut [i16] = if m * k <= xq_stack.len() {
        &mut xq_stack[..m * k]
    } else {
        xq_heap.resize(m * k, 0);
        &mut xq_heap
    };
    let mut sx_stack = [0f32; 16];
    let mut sx_heap = Vec::new();
    let sx: &mut [f32] = if m <= sx_stack.len() {
        &mut sx_stack[..m]
    } else {
        sx_heap.resize(m, 0.0);
        &mut sx_heap
    };
    for (i, s) in sx.iter_mut().enumerate() {
        let (xr, qr) = (&x[i * k..(i + 1) * k], &mut xq[i * k..(i + 1) * k]);
        *s = match path {
            // SAFETY: the VNNI path is chosen only when avx512f/bw/vl
            // are detected (`Q8Path::for_avx512`).
            Q8Path::Avx512Vnni => unsafe { quantize_row_avx512(xr, qr) },
            Q8Path::Avx2 => quantize_a16_row(xr, qr),
        };
    }
    f(Acts { xq, sx, m })
}

/// Output features `j0..j1` of one weight on `path`'s kernel.
///
/// # Safety
/// As the kernels': `a.xq = [m, k]`, `w.data >= [n, k]`, `w.scales >=
/// [n]`, `dst` a live `[m, n]` buffer of which this call alone writes
/// columns `j0..j1 <= n`. The path was chosen by detection of its features
/// (`Q8Path`, built only from an `Avx2`/`Avx512` token or `for_avx512`).
unsafe fn part_rows(
    path: Q8Path,
    a: Acts<'_>,
    w: Q8Mat<'_>,
    bias: Option<&[f32]>,
    j0: usize,
    j1: usize,
    dst: SharedOut,
) {
    match path {
        Q8Path::Avx512Vnni if a.m == 1 => rows_vnni_stream(a, w, bias, j0, j1, dst),
        Q8Path::Avx512Vnni => rows_vnni(a, w, bias, j0, j1, dst),
        Q8Path::Avx2 if a.m == 1 => rows_avx2_stream(a, w, bias, j0, j1, dst),
        Q8Path::Avx2 => rows_avx2(a, w, bias, j0, j1, dst),
    }
}

/// [`quantize_a16_row`] on AVX-512, bit for bit: the same IEEE
/// operations per element (multiply, clamp, the round-half-even constant
/// added and taken away) 16 lanes at a time, and the row's max |x| and
/// NaN check in one pass (a max is exact in any order). The scalar
/// version, compiled for the baseline ISA, was ~3% of a three-session
/// run's CPU (one `cvttss2si` and `pinsrw` per element).
///
/// # Safety
/// avx512f, avx512bw and avx512vl present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn quantize_row_avx512(x: &[f32], q: &mut [i16]) -> f32 {
    use crate::mat::A16_MAX;
    assert_eq!(x.len(), q.len(), "quantize_row_avx512: length mismatch");
    let k = x.len();
    let tail = |p: usize| -> u16 {
        if k - p >= 16 {
            u16::MAX
        } else {
            (1u16 << (k - p)) - 1
        }
    };
    let abs = _mm512_set1_epi32(0x7fff_ffff);
    let mut vmax = _mm512_setzero_ps();
    let mut nan: u16 = 0;
    let mut p = 0;
    while p < k {
        let v = _mm512_maskz_loadu_ps(tail(p), x.as_ptr().add(p));
        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        vmax = _mm512_max_ps(
            vmax,
            _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), abs)),
        );
        p += 16;
    }
    let max = _mm512_reduce_max_ps(vmax);
    if nan != 0 || !max.is_finite() {
        q.fill(0);
        return f32::NAN;
    }
    if max == 0.0 {
        q.fill(0);
        return 0.0;
    }
    let inv = _mm512_set1_ps(A16_MAX / max);
    let (hi, lo) = (_mm512_set1_ps(A16_MAX), _mm512_set1_ps(-A16_MAX));
    let magic = _mm512_set1_ps(12_582_912.0);
    let mut p = 0;
    while p < k {
        let m = tail(p);
        let v = _mm512_maskz_loadu_ps(m, x.as_ptr().add(p));
        let c = _mm512_max_ps(_mm512_min_ps(_mm512_mul_ps(v, inv), hi), lo);
        let r = _mm512_sub_ps(_mm512_add_ps(c, magic), magic);
        let i = _mm512_cvtepi32_epi16(_mm512_cvttps_epi32(r));
        _mm256_mask_storeu_epi16(q.as_mut_ptr().add(p), m, i);
        p += 16;
    }
    max / A16_MAX
}

/// Output features `j0..j1` for all `m` rows, blocked `MR x NR`.
macro_rules! rows_fn {
    ($name:ident, $block:ident, $feat:literal, $mr:literal) => {
        /// # Safety
        /// The CPU has the features named in `target_feature`; `a.xq` is
        /// `[m, k]`, `w.data` at least `[n, k]`, `w.scales` at least `[n]`,
        /// `dst` a live `[m, n]` buffer of which this call alone writes
        /// columns `j0..j1 <= n`.
        #[target_feature(enable = $feat)]
        unsafe fn $name(
            a: Acts<'_>,
            w: Q8Mat<'_>,
            bias: Option<&[f32]>,
            j0: usize,
            j1: usize,
            dst: SharedOut,
        ) {
            let Acts { xq, sx, m } = a;
            let Q8Mat {
                data: w,
                scales,
                rows: n,
                cols: k,
            } = w;
            let out = dst.ptr();
            let (xp, wp) = (xq.as_ptr(), w.as_ptr());
            macro_rules! block {
                ($r:literal, $c:expr, $i:expr, $j:expr) => {
                    block!($r, $c, $i, $j, Prefetch::NONE)
                };
                ($r:literal, $c:expr, $i:expr, $j:expr, $pf:expr) => {{
                    let t = $block::<$r, { $c }>(xp.add($i * k), wp.add($j * k), k, $pf);
                    for (ii, row) in t.iter().enumerate() {
                        for (jj, &v) in row.iter().enumerate() {
                            let (i, j) = ($i + ii, $j + jj);
                            *out.add(i * n + j) =
                                v as f32 * (sx[i] * scales[j]) + bias.map_or(0.0, |b| b[j]);
                        }
                    }
                }};
            }
            let mut j = j0;
            while j < j1 {
                if j1 - j >= NR {
                    // The block `BLOCKS_AHEAD` on, fetched during the
                    // first pass over this one (see `Prefetch`).
                    let mut pf = if j1 - j > BLOCKS_AHEAD * NR {
                        Prefetch::new(wp.add((j + BLOCKS_AHEAD * NR) * k) as *const u8, NR * k)
                    } else {
                        Prefetch::NONE
                    };
                    let mut i = 0;
                    while m - i >= $mr {
                        block!($mr, NR, i, j, pf);
                        pf = Prefetch::NONE;
                        i += $mr;
                    }
                    // The rest as one block (2 or 3 rows: the batched
                    // decode of 2-3 sessions), not row by row: each
                    // pass over the weight block re-does its loads and
                    // sign extensions for every activation row it serves.
                    if $mr > 3 && m - i == 3 {
                        block!(3, NR, i, j, pf);
                        pf = Prefetch::NONE;
                        i += 3;
                    }
                    if $mr > 2 && m - i >= 2 {
                        block!(2, NR, i, j, pf);
                        pf = Prefetch::NONE;
                        i += 2;
                    }
                    while i < m {
                        block!(1, NR, i, j, pf);
                        pf = Prefetch::NONE;
                        i += 1;
                    }
                    j += NR;
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

// AVX-512: MR x NR = 4 x 4 accumulators + 4 weight vectors + 1 activation
// vector of 32 zmm. AVX2: 2 x 4 + 4 + 1 of 16 ymm.
rows_fn!(
    rows_vnni,
    block_vnni,
    "avx512f,avx512bw,avx512vl,avx512vnni",
    4
);
rows_fn!(rows_avx2, block_avx2, "avx2", 2);

/// A one-row (m = 1) kernel over a task's rows `j0..j1`: each row's
/// exact sum by `$row`, read as one forward stream with the task's
/// look-ahead window.
macro_rules! stream_fn {
    ($(#[$doc:meta])* $name:ident, $row:ident, $feat:literal) => {
        $(#[$doc])*
        #[target_feature(enable = $feat)]
        unsafe fn $name(
            a: Acts<'_>,
            w: Q8Mat<'_>,
            bias: Option<&[f32]>,
            j0: usize,
            j1: usize,
            dst: SharedOut,
        ) {
            let (xq, sx) = (a.xq, a.sx);
            let Q8Mat {
                data: w,
                scales,
                cols: k,
                ..
            } = w;
            let out = dst.ptr();
            let (xp, wp) = (xq.as_ptr(), w.as_ptr());
            let pf = Prefetch::ahead(wp.wrapping_add(j0 * k) as *const u8, (j1 - j0) * k);
            for j in j0..j1 {
                let t = $row(xp, wp.add(j * k), k, pf, (j - j0) * k);
                *out.add(j) = t as f32 * (sx[0] * scales[j]) + bias.map_or(0.0, |b| b[j]);
            }
        }
    };
}

stream_fn!(
    /// Output features `j0..j1` of a one-row decode step (m = 1), one weight
    /// row after the other: a task reads its rows `j0..j1` (contiguous bytes)
    /// as a single forward stream, and prefetches `STREAM_AHEAD` bytes ahead
    /// of where it reads.
    ///
    /// Why not the `MR x NR` blocks of [`rows_vnni`]: a block of 4 weight rows
    /// is 4 streams `k` bytes apart, and at m = 1 the loop is bound by how fast
    /// one core pulls weights from DRAM, not by its arithmetic; one stream with
    /// a fixed look-ahead keeps more line fills in flight (docs/performance.md,
    /// "One stream per task": 5-17% more from DRAM on two threads). At m = 2..4 the
    /// blocks were as fast or faster, so they keep those. The sums are the same
    /// exact integers: the bits are the blocked kernel's.
    ///
    /// # Safety
    /// As [`rows_vnni`]'s, with `m == 1`.
    rows_vnni_stream,
    row_vnni,
    "avx512f,avx512bw,avx512vl,avx512vnni"
);

/// Exact `sum_p x[p] * w[p]` over one activation row and one weight row;
/// `pf` is the task's look-ahead window, `at` this row's offset in it.
///
/// # Safety
/// avx512f, avx512bw, avx512vl and avx512vnni present; `x` valid for `k`
/// i16 reads, `w` for `k` i8 reads.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn row_vnni(x: *const i16, w: *const i8, k: usize, pf: Prefetch, at: usize) -> i64 {
    let mut tot = 0i64;
    for (p0, p1) in kb_blocks(k) {
        // Two accumulators: the two halves of each 64 weights.
        let (mut a0, mut a1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let mut p = p0;
        while p + 64 <= p1 {
            pf.line(at + p);
            let w0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(w.add(p) as *const __m256i));
            let w1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(w.add(p + 32) as *const __m256i));
            a0 = _mm512_dpwssd_epi32(a0, _mm512_loadu_si512(x.add(p) as *const __m512i), w0);
            a1 = _mm512_dpwssd_epi32(a1, _mm512_loadu_si512(x.add(p + 32) as *const __m512i), w1);
            p += 64;
        }
        while p < p1 {
            // Tail in steps of up to 32: masked loads read only the
            // remaining elements; the zeroed lanes add nothing.
            let len = (p1 - p).min(32);
            let mask = if len == 32 {
                u32::MAX
            } else {
                (1u32 << len) - 1
            };
            let wv = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, w.add(p)));
            let xv = _mm512_maskz_loadu_epi16(mask, x.add(p));
            a0 = _mm512_dpwssd_epi32(a0, xv, wv);
            p += len;
        }
        // A lane gains at most 2 * 32767 * 127 per instruction and takes
        // at most KB / 64 + 2 instructions per block: < 2^31.
        for v in [a0, a1] {
            let lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
            let hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(v));
            tot += _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi));
        }
    }
    tot
}

/// Exact `t[i][j] = sum_p x[i*k + p] * w[j*k + p]` over `MR` activation rows
/// and `NR` weight rows.
///
/// # Safety
/// avx512f, avx512bw, avx512vl and avx512vnni present; `x` valid for `MR * k` i16
/// reads, `w` for `NR * k` i8 reads.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn block_vnni<const MR: usize, const NR: usize>(
    x: *const i16,
    w: *const i8,
    k: usize,
    pf: Prefetch,
) -> [[i64; NR]; MR] {
    let mut tot = [[0i64; NR]; MR];
    for (p0, p1) in kb_blocks(k) {
        let mut acc = [[_mm512_setzero_si512(); NR]; MR];
        let mut p = p0;
        while p + 32 <= p1 {
            pf.touch(NR * p, NR * 32);
            let mut wv = [_mm512_setzero_si512(); NR];
            for (jj, v) in wv.iter_mut().enumerate() {
                *v = _mm512_cvtepi8_epi16(_mm256_loadu_si256(w.add(jj * k + p) as *const __m256i));
            }
            for (ii, a) in acc.iter_mut().enumerate() {
                let xv = _mm512_loadu_si512(x.add(ii * k + p) as *const __m512i);
                for (aj, &wj) in a.iter_mut().zip(&wv) {
                    *aj = _mm512_dpwssd_epi32(*aj, xv, wj);
                }
            }
            p += 32;
        }
        if p < p1 {
            // Tail: masked loads read only the remaining elements; the
            // zeroed lanes add nothing.
            let mask = (1u32 << (p1 - p)) - 1;
            let mut wv = [_mm512_setzero_si512(); NR];
            for (jj, v) in wv.iter_mut().enumerate() {
                *v = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, w.add(jj * k + p)));
            }
            for (ii, a) in acc.iter_mut().enumerate() {
                let xv = _mm512_maskz_loadu_epi16(mask, x.add(ii * k + p));
                for (aj, &wj) in a.iter_mut().zip(&wv) {
                    *aj = _mm512_dpwssd_epi32(*aj, xv, wj);
                }
            }
        }
        for (t, a) in tot.iter_mut().zip(&acc) {
            for (tj, &aj) in t.iter_mut().zip(a) {
                let lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(aj));
                let hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(aj));
                *tj += _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi));
            }
        }
    }
    tot
}

stream_fn!(
    /// [`rows_vnni_stream`] on AVX2: a one-row decode step reads each
    /// task's weight rows as one forward stream with the same look-ahead,
    /// where the blocks of [`rows_avx2`] read 4 rows `k` bytes apart. The
    /// sums are the same exact integers, so the bits are the blocked
    /// kernel's.
    ///
    /// # Safety
    /// As [`rows_avx2`]'s, with `m == 1`.
    rows_avx2_stream,
    row_avx2,
    "avx2"
);

/// [`row_vnni`] on AVX2: 64 weights (one cache line) per step, as four
/// sign extensions and `vpmaddwd`s into two accumulators; 16 at a time
/// and then a scalar tail at the end of a block.
///
/// # Safety
/// avx2 present; `x` valid for `k` i16 reads, `w` for `k` i8 reads.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn row_avx2(x: *const i16, w: *const i8, k: usize, pf: Prefetch, at: usize) -> i64 {
    let mut tot = 0i64;
    let madd = |p: usize| {
        let wv = _mm256_cvtepi8_epi16(_mm_loadu_si128(w.add(p) as *const __m128i));
        _mm256_madd_epi16(_mm256_loadu_si256(x.add(p) as *const __m256i), wv)
    };
    for (p0, p1) in kb_blocks(k) {
        let (mut a0, mut a1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        let mut p = p0;
        while p + 64 <= p1 {
            pf.line(at + p);
            a0 = _mm256_add_epi32(a0, madd(p));
            a1 = _mm256_add_epi32(a1, madd(p + 16));
            a0 = _mm256_add_epi32(a0, madd(p + 32));
            a1 = _mm256_add_epi32(a1, madd(p + 48));
            p += 64;
        }
        while p + 16 <= p1 {
            a0 = _mm256_add_epi32(a0, madd(p));
            p += 16;
        }
        // A lane gains at most 2 * 32767 * 127 per instruction and takes
        // at most KB / 32 + 3 instructions per block: < 2^31.
        for v in [a0, a1] {
            let lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v));
            let hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(v));
            let s = _mm256_add_epi64(lo, hi);
            let mut l = [0i64; 4];
            _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, s);
            tot += l.iter().sum::<i64>();
        }
        for q in p..p1 {
            tot += *x.add(q) as i64 * *w.add(q) as i64;
        }
    }
    tot
}

/// [`block_vnni`] on AVX2: 16 inputs per `vpmaddwd`, scalar tail.
///
/// # Safety
/// avx2 present; `x` valid for `MR * k` i16 reads, `w` for `NR * k` i8.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn block_avx2<const MR: usize, const NR: usize>(
    x: *const i16,
    w: *const i8,
    k: usize,
    pf: Prefetch,
) -> [[i64; NR]; MR] {
    let mut tot = [[0i64; NR]; MR];
    for (p0, p1) in kb_blocks(k) {
        let mut acc = [[_mm256_setzero_si256(); NR]; MR];
        let mut p = p0;
        while p + 16 <= p1 {
            pf.touch(NR * p, NR * 16);
            let mut wv = [_mm256_setzero_si256(); NR];
            for (jj, v) in wv.iter_mut().enumerate() {
                *v = _mm256_cvtepi8_epi16(_mm_loadu_si128(w.add(jj * k + p) as *const __m128i));
            }
            for (ii, a) in acc.iter_mut().enumerate() {
                let xv = _mm256_loadu_si256(x.add(ii * k + p) as *const __m256i);
                for (aj, &wj) in a.iter_mut().zip(&wv) {
                    *aj = _mm256_add_epi32(*aj, _mm256_madd_epi16(xv, wj));
                }
            }
            p += 16;
        }
        for (ii, (t, a)) in tot.iter_mut().zip(&acc).enumerate() {
            for (jj, (tj, &aj)) in t.iter_mut().zip(a).enumerate() {
                let lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(aj));
                let hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(aj));
                let s = _mm256_add_epi64(lo, hi);
                let mut l = [0i64; 4];
                _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, s);
                *tj += l.iter().sum::<i64>();
                for q in p..p1 {
                    *tj += *x.add(ii * k + q) as i64 * *w.add(jj * k + q) as i64;
                }
            }
        }
    }
    tot
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX-512 row quantizer gives the scalar one's bits and scale on
    /// every length (whole vectors and tails), on ties, zeros, signed
    /// zeros, the clamp's edge and non-finite rows.
    #[test]
    fn the_avx512_quantizer_matches_the_scalar_one() {
        if !(is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl"))
        {
            return;
        }
        let mut rows: Vec<Vec<f32>> = Vec::new();
        for k in [0, 1, 15, 16, 17, 31, 33, 1024, 3072 + 5] {
            rows.push(
                crate::probe::data(k, 12345 + k as u32)
                    .iter()
                    .map(|v| v * 3.0)
                    .collect(),
            );
        }
        // Exact halves after scaling: max 32767 maps to itself, so x.5
        // values round to even.
        rows.push(vec![
            32767.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -0.0, 0.0,
        ]);
        rows.push(vec![0.0; 19]);
        rows.push(vec![-0.0; 5]);
        rows.push(vec![1.0, f32::NAN, 2.0]);
        rows.push(
            (0..40)
                .map(|i| if i == 37 { f32::INFINITY } else { 1.0 })
                .collect(),
        );
        rows.push(
            (0..40)
                .map(|i| if i == 3 { f32::NEG_INFINITY } else { 1.0 })
                .collect(),
        );
        rows.push(vec![f32::MIN_POSITIVE, -f32::MIN_POSITIVE / 2.0, 1e-30]);
        for x in &rows {
            let (mut a, mut b) = (vec![7i16; x.len()], vec![9i16; x.len()]);
            let sa = quantize_a16_row(x, &mut a);
            // SAFETY: the features were detected above.
            let sb = unsafe { quantize_row_avx512(x, &mut b) };
            assert_eq!(a, b, "codes of {x:?}");
            assert!(
                sa.to_bits() == sb.to_bits() || (sa.is_nan() && sb.is_nan()),
                "scale {sa} vs {sb}"
            );
        }
    }

    /// The paths this CPU can run.
    fn paths() -> Vec<Q8Path> {
        let mut p = Vec::new();
        if is_x86_feature_detected!("avx2") {
            p.push(Q8Path::Avx2);
        }
        if matches!(Q8Path::for_avx512(), Q8Path::Avx512Vnni) {
            p.push(Q8Path::Avx512Vnni);
        }
        p
    }

    /// Worst-case magnitudes (every product +-32767 * 127, all of one
    /// sign, past one accumulation block): the streamed (m = 1) and the
    /// blocked kernels of each path give the exact integer sum, so the
    /// same bits as the reference.
    #[test]
    fn extreme_sums_stay_exact_on_every_int8_kernel() {
        for path in paths() {
            extreme_sums_stay_exact(path);
        }
    }

    fn extreme_sums_stay_exact(path: Q8Path) {
        let (n, k) = (6, 2 * KB + 70);
        let w: Vec<i8> = (0..n * k)
            .map(|i| if (i / k) % 2 == 0 { 127 } else { -127 })
            .collect();
        let scales = vec![1.0f32; n];
        for m in [1, 3, 4, 5, 8] {
            let x: Vec<f32> = (0..m * k)
                .map(|i| if (i / k) % 2 == 0 { 1.0 } else { -1.0 })
                .collect();
            let mat = crate::Mat::Q8 {
                data: &w,
                scales: &scales,
                rows: n,
                cols: k,
            };
            let mut want = vec![0f32; m * n];
            crate::reference::matmul(&x, m, &mat, None, &mut want);
            let mut got = vec![f32::NAN; m * n];
            let q8 = mat.q8_mat().expect("int8");
            matmul(path, &x, m, q8, None, &mut got);
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{path:?} m={m}"
            );
            let exact = (k as f32) * (1.0 / crate::mat::A16_MAX) * 32767.0 * 127.0;
            assert!(
                (got[0] - exact).abs() <= exact * 1e-6,
                "{path:?} m={m}: {} vs {exact}",
                got[0]
            );
        }
    }

    /// A one-row step on every path gives the reference's bits at every
    /// length a row can end on (whole lines, 16-input steps, the scalar
    /// tail, past an accumulation block), with a bias, over more rows
    /// than one task takes.
    #[test]
    fn one_row_steps_give_the_reference_bits_at_every_tail() {
        for path in paths() {
            for k in [1, 15, 16, 17, 63, 64, 65, 100, 1024, KB + 70] {
                let n = 300;
                let (w, scales) =
                    crate::quantize_q8_rows(&crate::probe::data(n * k, 11 + k as u32), n, k);
                let x = crate::probe::data(k, 5 + k as u32);
                let bias = crate::probe::data(n, 3);
                let mat = crate::Mat::Q8 {
                    data: &w,
                    scales: &scales,
                    rows: n,
                    cols: k,
                };
                let mut want = vec![0f32; n];
                crate::reference::matmul(&x, 1, &mat, Some(&bias), &mut want);
                let mut got = vec![f32::NAN; n];
                let q8 = mat.q8_mat().expect("int8");
                matmul(path, &x, 1, q8, Some(&bias), &mut got);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{path:?} k={k}"
                );
            }
        }
    }
}
