//! Element-wise kernels and row norms.

use super::{for_blocks, Simd};
use crate::simd;

/// A lane-wise map. A trait with an `#[inline(always)]` method rather than
/// a closure: LLVM declined to inline the (large) GELU/sin closures into the
/// `#[target_feature]` trampoline, which left every intrinsic an
/// out-of-line call and the "SIMD" path 3x slower than scalar.
trait Unary: Copy {
    fn apply<S: Simd>(self, s: S, v: S::V) -> S::V;
}

#[derive(Clone, Copy)]
struct Gelu;
impl Unary for Gelu {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, v: S::V) -> S::V {
        simd::gelu(s, v)
    }
}

/// `x + inv_beta * sin(alpha x)^2`.
#[derive(Clone, Copy)]
struct Snake {
    alpha: f32,
    inv_beta: f32,
}
impl Unary for Snake {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, v: S::V) -> S::V {
        let y = simd::sin(s, s.mul(v, s.splat(self.alpha)));
        s.fma(s.mul(s.splat(self.inv_beta), y), y, v)
    }
}

/// Applies `f` to every vector of `x` in place; the tail is one partial
/// vector (masked load/store), so every element sees identical arithmetic.
#[inline(always)]
fn map_inplace<S: Simd, F: Unary>(s: S, x: &mut [f32], f: F) {
    let (n, l, p) = (x.len(), S::LANES, x.as_mut_ptr());
    let mut i = 0;
    // SAFETY: full vectors cover i..i + l <= n, the last partial one i..n.
    unsafe {
        while i + l <= n {
            s.store(p.add(i), f.apply(s, s.load(p.add(i))));
            i += l;
        }
        if i < n {
            s.store_part(p.add(i), n - i, f.apply(s, s.load_part(p.add(i), n - i)));
        }
    }
}

/// Elements per parallel block of the element-wise kernels: ~100 ns of work
/// each, so small calls stay on the caller's thread (see `for_blocks`).
const EW_BLOCK: usize = 4096;

pub(crate) fn gelu<S: Simd>(s: S, x: &mut [f32]) {
    // ~40 flops per element: count it as 16 FMAs of work.
    for_blocks(x, EW_BLOCK, EW_BLOCK * 16, |_, b| {
        s.vectorize(
            #[inline(always)]
            || map_inplace(s, b, Gelu),
        )
    });
}

pub(crate) fn silu_mul<S: Simd>(s: S, gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        gate.len() == out.len() && up.len() == out.len(),
        "silu_mul: length mismatch"
    );
    for_blocks(out, EW_BLOCK, EW_BLOCK * 8, |bi, o| {
        let r = bi * EW_BLOCK..bi * EW_BLOCK + o.len();
        let (g, u) = (&gate[r.clone()], &up[r]);
        s.vectorize(
            #[inline(always)]
            || {
                let (n, l) = (o.len(), S::LANES);
                let (gp, up, op) = (g.as_ptr(), u.as_ptr(), o.as_mut_ptr());
                let mut i = 0;
                // SAFETY: g, u and o all have n elements; full vectors cover
                // i..i + l <= n, the partial one i..n.
                unsafe {
                    while i + l <= n {
                        let y = s.mul(simd::silu(s, s.load(gp.add(i))), s.load(up.add(i)));
                        s.store(op.add(i), y);
                        i += l;
                    }
                    if i < n {
                        let k = n - i;
                        let y = s.mul(
                            simd::silu(s, s.load_part(gp.add(i), k)),
                            s.load_part(up.add(i), k),
                        );
                        s.store_part(op.add(i), k, y);
                    }
                }
            },
        )
    });
}

pub(crate) fn snake_beta<S: Simd>(s: S, x: &mut [f32], t: usize, alpha: &[f32], inv_beta: &[f32]) {
    if t == 0 || x.is_empty() {
        return;
    }
    assert_eq!(x.len() % t, 0, "snake_beta: x is not [channels, t]");
    let c = x.len() / t;
    assert!(
        alpha.len() >= c && inv_beta.len() >= c,
        "snake_beta: alpha/beta shorter than channels"
    );
    // ~20 flops per element (sin polynomial).
    for_blocks(x, t, t * 10, |ch, row| {
        snake_row(s, row, alpha[ch], inv_beta[ch])
    });
}

/// SnakeBeta in place on one channel's row.
fn snake_row<S: Simd>(s: S, row: &mut [f32], alpha: f32, inv_beta: f32) {
    let f = Snake { alpha, inv_beta };
    s.vectorize(
        #[inline(always)]
        || map_inplace(s, row, f),
    )
}

/// [`snake_beta`] of `[head | x]` row by row (`head = [c, h]`,
/// `x = [c, n]`) written to `out = [c, h + n]`: each task copies its rows
/// and maps them while they are in L1, in one pass where a concatenation
/// and an in-place map took two (the second on one thread).
#[allow(clippy::too_many_arguments)]
pub(crate) fn snake_beta_concat<S: Simd>(
    s: S,
    head: &[f32],
    h: usize,
    x: &[f32],
    n: usize,
    alpha: &[f32],
    inv_beta: &[f32],
    out: &mut [f32],
) {
    let w = h + n;
    if w == 0 || out.is_empty() {
        return;
    }
    let c = out.len() / w;
    assert!(
        out.len() == c * w && head.len() == c * h && x.len() == c * n,
        "snake_beta_concat: out is not [c, h + n] for head [c, h] and x [c, n]"
    );
    assert!(
        alpha.len() >= c && inv_beta.len() >= c,
        "snake_beta_concat: alpha/beta shorter than channels"
    );
    for_blocks(out, w, w * 10, |ch, row| {
        row[..h].copy_from_slice(&head[ch * h..(ch + 1) * h]);
        row[h..].copy_from_slice(&x[ch * n..(ch + 1) * n]);
        snake_row(s, row, alpha[ch], inv_beta[ch])
    });
}

/// Elements per task of [`add_assign`].
const ADD_BLOCK: usize = 1 << 14;

/// `acc += x`, element by element, in parallel tasks over large arrays
/// (each sum is the one a serial loop makes).
pub(crate) fn add_assign<S: Simd>(s: S, acc: &mut [f32], x: &[f32]) {
    assert_eq!(acc.len(), x.len(), "add_assign: lengths differ");
    for_blocks(acc, ADD_BLOCK, ADD_BLOCK / 4, |i, a| {
        let x = &x[i * ADD_BLOCK..i * ADD_BLOCK + a.len()];
        s.vectorize(
            #[inline(always)]
            || a.iter_mut().zip(x).for_each(|(a, &b)| *a += b),
        )
    });
}

/// Output elements per task of [`interleave_phases`] (whole channels).
const INTERLEAVE_BLOCK: usize = 1 << 14;

/// See [`crate::interleave_phases`]: tasks of whole channels, each a
/// `[stride, n]` to `[n, stride]` transpose.
pub(crate) fn interleave_phases<S: Simd>(
    s: S,
    rows: &[f32],
    c_out: usize,
    stride: usize,
    n: usize,
    out: &mut [f32],
) {
    crate::reference::check_interleave(rows, c_out, stride, n, out);
    let ch = n * stride;
    if ch == 0 {
        return;
    }
    let per = (INTERLEAVE_BLOCK / ch).max(1);
    for_blocks(out, per * ch, per * ch / 4, |i, o| {
        let co0 = i * per;
        s.vectorize(
            #[inline(always)]
            || {
                for (c, oc) in o.chunks_exact_mut(ch).enumerate() {
                    let base = (co0 + c) * ch;
                    for r in 0..stride {
                        let row = &rows[base + r * n..base + (r + 1) * n];
                        for (q, &v) in row.iter().enumerate() {
                            oc[q * stride + r] = v;
                        }
                    }
                }
            },
        )
    });
}

pub(crate) fn rms_norm<S: Simd>(s: S, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    assert_eq!(x.len(), out.len(), "rms_norm: x and out differ in length");
    if d == 0 {
        return;
    }
    assert_eq!(x.len() % d, 0, "rms_norm: x is not [rows, weight.len()]");
    for_blocks(out, d, 2 * d, |r, o| {
        let xr = &x[r * d..(r + 1) * d];
        s.vectorize(
            #[inline(always)]
            || {
                let (l, xp, wp, op) = (S::LANES, xr.as_ptr(), weight.as_ptr(), o.as_mut_ptr());
                let dv = d - d % l;
                // SAFETY: xr, weight and o all have d elements; vectors cover
                // 0..dv <= d, the scalar loops dv..d.
                unsafe {
                    let mut acc = s.splat(0.0);
                    let mut i = 0;
                    while i < dv {
                        let v = s.load(xp.add(i));
                        acc = s.fma(v, v, acc);
                        i += l;
                    }
                    let mut ss = s.reduce_add(acc);
                    for i in dv..d {
                        ss += *xp.add(i) * *xp.add(i);
                    }
                    let r = 1.0 / (ss / d as f32 + eps).sqrt();
                    let rv = s.splat(r);
                    let mut i = 0;
                    while i < dv {
                        s.store(
                            op.add(i),
                            s.mul(s.mul(s.load(xp.add(i)), rv), s.load(wp.add(i))),
                        );
                        i += l;
                    }
                    for i in dv..d {
                        *op.add(i) = (*xp.add(i) * r) * *wp.add(i);
                    }
                }
            },
        )
    });
}
