//! What the group-wise integer formats (q4, iq4, q6: [`crate::GroupFormat`])
//! share: the activations quantized to int8 and permuted into super-block
//! order once per call ([`with_acts`]), the split of output rows over the executor
//! ([`par_rows`]), the `MR x NR` register blocking of the SIMD row workers
//! (`rows_fn!`), and one [`matmul`] driver that checks the shapes and picks a
//! format's worker for the detected ISA. A format brings only its
//! [`GroupKernels`]: its activation offset, row size and the three workers
//! (portable, AVX2, AVX-512 VNNI), each exact, so every path and thread count
//! gives the reference's bits. The table of each format's kernels is
//! `group_formats`, which its callers consult: the formats import this
//! file, so it names none of them.

use super::{SharedOut, PAR_MIN_WORK, TASK_MIN_WORK};
use crate::mat::GroupMat;
use crate::q4::{
    q4_offset_group_sums, q4_permute_activations, q4_row_groups, q4_supers, quantize_a8_row,
    Q4_SUPER,
};

/// Weight rows per task granule (a multiple of every path's block).
const NR: usize = 8;

#[derive(Clone, Copy, Debug)]
pub(crate) enum GroupPath {
    /// Plain Rust (what the scalar path runs for Q4; autovectorized).
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
}

impl GroupPath {
    /// The VNNI path when the CPU has it (an `Avx512` token alone proves
    /// only avx512f), else AVX2.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn for_avx512() -> GroupPath {
        if is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
        {
            GroupPath::Avx512Vnni
        } else {
            GroupPath::Avx2
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

/// A column-range worker: output features `j0..j1` of all `m` activation
/// rows, from one format's weight `w` (`n = w.rows`).
///
/// # Safety
/// `dst` is a live `[m, n]` buffer of which this call alone writes columns
/// `j0..j1 <= n`; the slices hold what [`matmul`] asserted; a SIMD worker
/// runs only on a CPU with its features.
pub(crate) type RowsFn = unsafe fn(
    a: &Acts<'_>,
    m: usize,
    w: &GroupMat<'_>,
    bias: Option<&[f32]>,
    j0: usize,
    j1: usize,
    dst: SharedOut,
);

/// `MR` activation rows of one register block as a SIMD block step reads
/// them: the permuted int8 rows (stride `kp`) and their offset group sums
/// (stride `rg`).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct ActBlock {
    pub(crate) x: *const i8,
    pub(crate) nx: *const i32,
    pub(crate) kp: usize,
    pub(crate) rg: usize,
}

/// `NR` weight rows of one register block as a SIMD block step reads
/// them: their data (stride `rb` bytes, `nsb` super-blocks) and group
/// scales (stride [`ActBlock::rg`]: a weight row has as many groups as an
/// activation row).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct WeightBlock {
    pub(crate) w: *const u8,
    pub(crate) s: *const u8,
    pub(crate) rb: usize,
    pub(crate) nsb: usize,
}

/// One group format's kernels.
pub(crate) struct GroupKernels {
    /// For messages (`q4`, `iq4`, `q6`).
    pub(crate) name: &'static str,
    /// The offset of the weights' unsigned encoding: each group's sum starts
    /// at `offset * sum(x in group)` (see [`with_acts`]).
    pub(crate) offset: i32,
    /// Data bytes of one weight row of `k` inputs.
    pub(crate) row_bytes: fn(usize) -> usize,
    pub(crate) portable: RowsFn,
    #[cfg(target_arch = "x86_64")]
    pub(crate) avx2: RowsFn,
    #[cfg(target_arch = "x86_64")]
    pub(crate) vnni: RowsFn,
}

impl GroupKernels {
    /// The column-range worker of `path`.
    fn worker(&self, path: GroupPath) -> RowsFn {
        match path {
            GroupPath::Portable => self.portable,
            #[cfg(target_arch = "x86_64")]
            GroupPath::Avx2 => self.avx2,
            #[cfg(target_arch = "x86_64")]
            GroupPath::Avx512Vnni => self.vnni,
        }
    }
}

/// `out = x . W^T + bias` for a group-wise `W` (`w`: `[n, k]` in its
/// format's layout, whose kernels `kn` are) with int8 activations, on
/// `path`'s worker.
///
/// # Panics
/// On shapes that do not match (`x = [m, k]`, weights at least `[n, k]` in
/// the format's layout, `out = [m, n]`).
pub(crate) fn matmul(
    kn: &GroupKernels,
    path: GroupPath,
    x: &[f32],
    m: usize,
    w: GroupMat<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let GroupMat {
        data,
        group_scales,
        scales,
        rows: n,
        cols: k,
        ..
    } = w;
    let (rb, rg) = ((kn.row_bytes)(k), q4_row_groups(k));
    assert_eq!(x.len(), m * k, "matmul: x is not [m, k]");
    assert_eq!(out.len(), m * n, "matmul: out is not [m, n]");
    assert!(
        data.len() >= n * rb,
        "matmul: {} data shorter than [n, k]",
        kn.name
    );
    assert!(
        group_scales.len() >= n * rg,
        "matmul: fewer {} group scales than [n, groups]",
        kn.name
    );
    assert!(scales.len() >= n, "matmul: fewer scales than rows");
    if let Some(b) = bias {
        assert_eq!(b.len(), n, "matmul: bias is not [n]");
    }
    if m == 0 || n == 0 {
        return;
    }
    let worker = kn.worker(path);
    with_acts(x, m, k, kn.offset, |a| {
        let dst = SharedOut::new(out);
        let rows = |j0: usize, j1: usize| {
            // SAFETY: the asserts above give x = [m, k] (so xp = [m, kp],
            // nx8 = [m, rg]), data >= [n, rb], group_scales >= [n, rg],
            // scales >= [n], out = [m, n], and j0 <= j1 <= n; tasks get
            // disjoint row ranges, so their writes to `dst` are disjoint. The
            // SIMD paths were chosen by detection of their features
            // (`GroupPath` is built only from an `Avx2`/`Avx512` token or
            // `for_avx512`).
            unsafe { worker(a, m, &w, bias, j0, j1, dst) }
        };
        par_rows(m, n, a.kp, rows);
    });
}

/// One weight of a [`matmul_shared`] call (all in one format, `k`
/// inputs): the weight and its `[m, w.rows]` output.
pub(crate) struct Part<'a> {
    pub(crate) w: GroupMat<'a>,
    pub(crate) out: &'a mut [f32],
}

/// [`matmul`] (no bias) of one `x = [m, k]` against several weights of one
/// group format, in one parallel region over all their rows with the
/// activations quantized once (`crate::matmul_shared`); every output has
/// the bits of its own `matmul` (the same activations and exact sums).
///
/// # Panics
/// On shapes that do not match, as [`matmul`].
pub(crate) fn matmul_shared(
    kn: &GroupKernels,
    path: GroupPath,
    x: &[f32],
    m: usize,
    k: usize,
    parts: &mut [Part<'_>],
) {
    let (rb, rg) = ((kn.row_bytes)(k), q4_row_groups(k));
    assert_eq!(x.len(), m * k, "matmul_shared: x is not [m, k]");
    for Part { w, out } in parts.iter() {
        assert_eq!(w.cols, k, "matmul_shared: a weight is not [n, k]");
        assert_eq!(out.len(), m * w.rows, "matmul_shared: out is not [m, n]");
        assert!(
            w.data.len() >= w.rows * rb,
            "matmul_shared: {} data shorter than [n, k]",
            kn.name
        );
        assert!(
            w.group_scales.len() >= w.rows * rg,
            "matmul_shared: fewer {} group scales than [n, groups]",
            kn.name
        );
        assert!(
            w.scales.len() >= w.rows,
            "matmul_shared: fewer scales than rows"
        );
    }
    if m == 0 {
        return;
    }
    let worker = kn.worker(path);
    let rows: Vec<usize> = parts.iter().map(|p| p.w.rows).collect();
    let views: Vec<_> = parts
        .iter_mut()
        .map(|p| (p.w, SharedOut::new(p.out)))
        .collect();
    with_acts(x, m, k, kn.offset, |a| {
        super::par_parts(&rows, NR, m * a.kp, |i, j0, j1| {
            let (w, dst) = &views[i];
            // SAFETY: as in `matmul`, for each part: the asserts above give
            // its shapes, `j0 <= j1 <= rows[i]`, and tasks get disjoint row
            // ranges of each part, so their writes to its output are
            // disjoint.
            unsafe { worker(a, m, w, None, j0, j1, *dst) }
        });
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
/// whole `NR` granules on the current executor when the `m * n * kp` work is worth it.
pub(crate) fn par_rows(m: usize, n: usize, kp: usize, rows: impl Fn(usize, usize) + Sync + Send) {
    let work = m * n * kp;
    if work < PAR_MIN_WORK || n <= NR {
        rows(0, n);
        return;
    }
    let min_rows = TASK_MIN_WORK.div_ceil(m * kp);
    super::par_rows(n, NR, min_rows, rows);
}

/// `out[i][j] = tot as f32 * (sx[i] * d[j]) + b[j]`, as the reference
/// (`n = w.rows`, `d = w.scales`).
///
/// # Safety
/// `out` is a live `[m, n]` buffer; `i < m`, `j < n`.
#[inline(always)]
pub(crate) unsafe fn put(
    out: *mut f32,
    a: &Acts<'_>,
    w: &GroupMat<'_>,
    bias: Option<&[f32]>,
    i: usize,
    j: usize,
    tot: i64,
) {
    *out.add(i * w.rows + j) = tot as f32 * (a.sx[i] * w.scales[j]) + bias.map_or(0.0, |b| b[j]);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    /// Output features `j0..j1` for all `m` rows, blocked `MR x NR`, for a
    /// format of `$sbytes` data bytes per super-block (every group
    /// format's SIMD workers: each brings its own `$block`). The caller's
    /// scope provides `Acts`, `ActBlock`, `WeightBlock`, `GroupMat`,
    /// `SharedOut`, `Prefetch`, `put` and `Q4_SUPER`.
    macro_rules! rows_fn {
        ($name:ident, $block:ident, $feat:literal, $mr:literal, $nr:literal, $sbytes:expr) => {
            /// # Safety
            /// The CPU has the features named in `target_feature`; `dst` is
            /// a live `[m, n]` buffer of which this call alone writes
            /// columns `j0..j1 <= n`; the slices hold what `matmul`
            /// asserted.
            #[target_feature(enable = $feat)]
            pub(crate) unsafe fn $name(
                a: &Acts<'_>,
                m: usize,
                w: &GroupMat<'_>,
                bias: Option<&[f32]>,
                j0: usize,
                j1: usize,
                dst: SharedOut,
            ) {
                let (data, group_scales) = (w.data, w.group_scales);
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
                            ActBlock {
                                x: xp.add($i * kp),
                                nx: nxp.add($i * rg),
                                kp,
                                rg,
                            },
                            WeightBlock {
                                w: wp.add($j * rb),
                                s: sp.add($j * rg),
                                rb,
                                nsb,
                            },
                            $pf,
                        );
                        for (ii, row) in t.iter().enumerate() {
                            for (jj, &v) in row.iter().enumerate() {
                                put(out, a, w, bias, $i + ii, $j + jj, v);
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

    pub(crate) use rows_fn;
}
