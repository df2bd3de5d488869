//! `y = x W^T + b` with f32, bf16 or int8 (per-row scale) weights. Every
//! format is widened to f32 in registers and accumulated with FMAs; int8
//! applies its row scale to the finished dot product.
//!
//! Decode is a matvec over weights far larger than cache, so it is bound by
//! weight bandwidth: every weight byte is read once per call. A task owns a
//! range of output features (weight rows); it walks them `NR = 4` rows at a
//! time and, for `m > 1`, streams all `x` rows past each 4-row block
//! (`MR` = 6 with AVX-512, 2 with AVX2) while the block sits in L1/L2, so weights are still read
//! from memory once whatever `m` is.

use super::{Prefetch, SharedOut, Simd, PAR_MIN_WORK, TASK_MIN_WORK};
use crate::mat::{bf16_to_f32, Mat};

/// Weight element types the kernel reads.
pub(crate) trait WElem: Copy + Send + Sync {
    /// # Safety
    /// `p` must be valid for reading `S::LANES` elements.
    unsafe fn vload<S: Simd>(s: S, p: *const Self) -> S::V;
    fn to_f32(self) -> f32;
}

impl WElem for f32 {
    #[inline(always)]
    unsafe fn vload<S: Simd>(s: S, p: *const f32) -> S::V {
        s.load(p)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl WElem for u16 {
    #[inline(always)]
    unsafe fn vload<S: Simd>(s: S, p: *const u16) -> S::V {
        s.load_bf16(p)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16_to_f32(self)
    }
}

impl WElem for i8 {
    #[inline(always)]
    unsafe fn vload<S: Simd>(s: S, p: *const i8) -> S::V {
        s.load_i8(p)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
}

const NR: usize = 4;

pub(crate) fn matmul<S: Simd>(
    s: S,
    x: &[f32],
    m: usize,
    w: &Mat<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let (n, k) = (w.rows(), w.cols());
    assert_eq!(x.len(), m * k, "matmul: x is not [m, k]");
    assert_eq!(out.len(), m * n, "matmul: out is not [m, n]");
    if let Some(b) = bias {
        assert_eq!(b.len(), n, "matmul: bias is not [n]");
    }
    match *w {
        Mat::F32 { data, .. } => {
            assert!(
                data.len() >= n * k,
                "matmul: weight data shorter than [n, k]"
            );
            run(s, x, m, Linear::new(data, None, bias, n, k), out)
        }
        Mat::Bf16 { data, .. } => {
            assert!(
                data.len() >= n * k,
                "matmul: weight data shorter than [n, k]"
            );
            run(s, x, m, Linear::new(data, None, bias, n, k), out)
        }
        Mat::Q8 { data, scales, .. } => {
            assert!(
                data.len() >= n * k,
                "matmul: weight data shorter than [n, k]"
            );
            assert!(scales.len() >= n, "matmul: fewer scales than rows");
            run(s, x, m, Linear::new(data, Some(scales), bias, n, k), out)
        }
        // Group-wise weights have their own integer kernels
        // (`Kernels::matmul` sends them there); this keeps a direct call
        // correct.
        Mat::Q4 { .. } | Mat::Iq4 { .. } | Mat::Q6 { .. } => {
            let g = w.group_mat().expect("a group format");
            super::group::matmul(
                super::group_formats::kernels(g.format),
                super::group::GroupPath::Portable,
                x,
                m,
                g,
                bias,
                out,
            )
        }
    }
}

/// One weight of a call as [`run`] and [`rows_kernel`] read it: `[n, k]`
/// elements of `W`, the int8 row scales (`None` for f32 and bf16) and the
/// bias added to each output row.
#[derive(Clone, Copy)]
struct Linear<'a, W> {
    w: &'a [W],
    scales: Option<&'a [f32]>,
    bias: Option<&'a [f32]>,
    n: usize,
    k: usize,
}

impl<'a, W> Linear<'a, W> {
    fn new(
        w: &'a [W],
        scales: Option<&'a [f32]>,
        bias: Option<&'a [f32]>,
        n: usize,
        k: usize,
    ) -> Self {
        Linear {
            w,
            scales,
            bias,
            n,
            k,
        }
    }
}

/// One body for every weight format: `out = x . w^T (* scales) + bias`.
fn run<S: Simd, W: WElem>(s: S, x: &[f32], m: usize, lin: Linear<'_, W>, out: &mut [f32]) {
    let (n, k) = (lin.n, lin.k);
    if m == 0 || n == 0 {
        return;
    }
    let dst = SharedOut::new(out);
    let rows = |j0: usize, j1: usize| {
        s.vectorize(
            #[inline(always)]
            || {
                // SAFETY: the asserts in `matmul` give x = [m, k],
                // w >= [n, k], scales (int8) >= [n], out = [m, n], and
                // j0 <= j1 <= n; tasks get disjoint row ranges, so their
                // writes to `dst` are disjoint.
                unsafe {
                    // 16 lanes: 6 x rows x 4 weight rows = 24 of 32 zmm
                    // accumulators, so each widened bf16 weight vector
                    // feeds 6 FMAs: m=16 bf16 2048^2 went from 25 to 46 G
                    // multiply-adds/s on one thread vs a 4 x 4 block (the
                    // widening shares vector pipes with the FMAs). AVX2
                    // has 16 ymm, so 2 x 4.
                    if S::LANES >= 16 {
                        rows_kernel::<S, W, 6>(s, x, m, lin, j0, j1, dst)
                    } else {
                        rows_kernel::<S, W, 2>(s, x, m, lin, j0, j1, dst)
                    }
                }
            },
        )
    };
    let work = m * n * k;
    if work < PAR_MIN_WORK || n <= NR {
        rows(0, n);
        return;
    }
    let min_rows = TASK_MIN_WORK.div_ceil(m * k.max(1));
    super::par_rows(n, NR, min_rows, rows);
}

/// One weight of a [`matmul_shared`] call and its `[m, rows]` output.
pub(crate) struct Part<'a, W> {
    pub(crate) w: &'a [W],
    pub(crate) rows: usize,
    pub(crate) out: &'a mut [f32],
}

/// [`matmul`] (no bias) of one `x = [m, k]` against several f32 or bf16
/// weights of `k` inputs, in one parallel region over all their rows
/// (`crate::matmul_shared`); every output has the bits of its own
/// `matmul`, whose kernel and per-row sums it runs.
///
/// # Panics
/// On shapes that do not match (`x = [m, k]`, each `w >= [rows, k]`,
/// `out = [m, rows]`).
pub(crate) fn matmul_shared<S: Simd, W: WElem>(
    s: S,
    x: &[f32],
    m: usize,
    k: usize,
    parts: &mut [Part<'_, W>],
) {
    assert_eq!(x.len(), m * k, "matmul_shared: x is not [m, k]");
    for p in parts.iter() {
        assert_eq!(p.out.len(), m * p.rows, "matmul_shared: out is not [m, n]");
        assert!(
            p.w.len() >= p.rows * k,
            "matmul_shared: weight data shorter than [n, k]"
        );
    }
    if m == 0 {
        return;
    }
    let rows: Vec<usize> = parts.iter().map(|p| p.rows).collect();
    let views: Vec<_> = parts
        .iter_mut()
        .map(|p| (p.w, SharedOut::new(p.out)))
        .collect();
    super::par_parts(&rows, NR, m * k, |i, j0, j1| {
        let ((w, dst), n) = (views[i], rows[i]);
        let lin = Linear::new(w, None, None, n, k);
        s.vectorize(
            #[inline(always)]
            || {
                // SAFETY: the asserts above give x = [m, k], w >= [n, k],
                // out = [m, n], and j0 <= j1 <= n; tasks get disjoint row
                // ranges of each part, so their writes are disjoint.
                unsafe {
                    if S::LANES >= 16 {
                        rows_kernel::<S, W, 6>(s, x, m, lin, j0, j1, dst)
                    } else {
                        rows_kernel::<S, W, 2>(s, x, m, lin, j0, j1, dst)
                    }
                }
            },
        )
    });
}

/// Output features `j0..j1` for all `m` rows.
///
/// # Safety
/// `x` is `[m, k]`, `lin.w` at least `[n, k]`, `lin.scales` (int8) at
/// least `[n]`, `dst` points at a live `[m, n]` buffer of which this call
/// alone writes columns `j0..j1 <= n`.
#[inline(always)]
unsafe fn rows_kernel<S: Simd, W: WElem, const MR: usize>(
    s: S,
    x: &[f32],
    m: usize,
    lin: Linear<'_, W>,
    j0: usize,
    j1: usize,
    dst: SharedOut,
) {
    let Linear {
        w,
        scales,
        bias,
        n,
        k,
    } = lin;
    let out = dst.ptr();
    let put = |i: usize, j: usize, v: f32| {
        let v = scales.map_or(v, |sc| v * sc[j]);
        *out.add(i * n + j) = v + bias.map_or(0.0, |b| b[j]);
    };
    // Writes one MRc x NRc block at (i, j).
    macro_rules! block {
        ($mr:literal, $nr:expr, $i:expr, $j:expr) => {
            block!($mr, $nr, $i, $j, Prefetch::NONE)
        };
        ($mr:literal, $nr:expr, $i:expr, $j:expr, $pf:expr) => {{
            let r = dot_block::<S, W, $mr, { $nr }>(
                s,
                x.as_ptr().add($i * k),
                w.as_ptr().add($j * k),
                k,
                $pf,
            );
            for (ii, row) in r.iter().enumerate() {
                for (jj, &v) in row.iter().enumerate() {
                    put($i + ii, $j + jj, v);
                }
            }
        }};
    }
    let mut j = j0;
    while j < j1 {
        if j1 - j >= NR {
            // The next block of this task, fetched during the first pass
            // over this one (see `Prefetch`).
            let size = core::mem::size_of::<W>();
            let mut pf = if j1 - j >= 2 * NR {
                Prefetch::new(w.as_ptr().add((j + NR) * k) as *const u8, NR * k * size)
            } else {
                Prefetch::NONE
            };
            // x rows MR at a time, then the rest of a wide kernel as one
            // block of 3 to 5 (the batched decode of 3-5 sessions: one
            // pass, where pairs and a single widened each weight vector
            // two or three times), then pairs, then singles.
            let mut i = 0;
            while m - i >= MR {
                match MR {
                    6 => block!(6, NR, i, j, pf),
                    _ => block!(2, NR, i, j, pf),
                }
                pf = Prefetch::NONE;
                i += MR;
            }
            if MR == 6 && m - i >= 3 {
                match m - i {
                    5 => block!(5, NR, i, j, pf),
                    4 => block!(4, NR, i, j, pf),
                    _ => block!(3, NR, i, j, pf),
                }
                pf = Prefetch::NONE;
                i = m;
            }
            while m - i >= 2 {
                block!(2, NR, i, j, pf);
                pf = Prefetch::NONE;
                i += 2;
            }
            if i < m {
                block!(1, NR, i, j, pf);
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

/// `r[i][j] = x_i . w_j` for `MR` rows of `x` and `NR` rows of `w` (both with
/// row stride `k`). Each element is one lane-wise FMA chain over the full
/// vectors, a fixed horizontal sum, then the scalar tail in order: the same
/// arithmetic in every `MR`/`NR` instantiation, so blocking never changes a
/// bit of the result.
///
/// `pf` is touched in step with the loop (the next block's bytes).
///
/// # Safety
/// `x` valid for `MR * k` reads, `w` for `NR * k`.
#[inline(always)]
unsafe fn dot_block<S: Simd, W: WElem, const MR: usize, const NR: usize>(
    s: S,
    x: *const f32,
    w: *const W,
    k: usize,
    pf: Prefetch,
) -> [[f32; NR]; MR] {
    let mut acc = [[s.splat(0.0); NR]; MR];
    let kv = k - k % S::LANES;
    let step = NR * S::LANES * core::mem::size_of::<W>();
    let mut p = 0;
    while p < kv {
        pf.touch(NR * p * core::mem::size_of::<W>(), step);
        let mut wv = [s.splat(0.0); NR];
        for (jj, v) in wv.iter_mut().enumerate() {
            *v = W::vload(s, w.add(jj * k + p));
        }
        for (ii, a) in acc.iter_mut().enumerate() {
            let xv = s.load(x.add(ii * k + p));
            for (aj, &wj) in a.iter_mut().zip(&wv) {
                *aj = s.fma(xv, wj, *aj);
            }
        }
        p += S::LANES;
    }
    let mut r = [[0f32; NR]; MR];
    for ii in 0..MR {
        for jj in 0..NR {
            let mut v = s.reduce_add(acc[ii][jj]);
            for q in kv..k {
                v += *x.add(ii * k + q) * (*w.add(jj * k + q)).to_f32();
            }
            r[ii][jj] = v;
        }
    }
    r
}
