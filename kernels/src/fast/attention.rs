//! Causal attention over a KV cache. One task per (query, head): scores by
//! SIMD dot products over the visible key range only (positions are
//! monotonic, so the causal/window mask is a contiguous range `lo..hi`),
//! vector exp, then `sum_j p_j v_j` as SIMD axpys in key order.

use super::{for_blocks, Simd};
use crate::shape::{AttnShape, KvRows};
use crate::simd::exp;

/// Keys whose scores fit in a stack buffer (4 KB).
const STACK_SCORES: usize = 1024;

pub(crate) fn attention<S: Simd>(
    s: S,
    q: &[f32],
    n_q: usize,
    q_pos0: usize,
    kv: KvRows<'_>,
    sh: AttnShape,
    out: &mut [f32],
) {
    let KvRows {
        k,
        v,
        n: n_kv,
        pos0: kv_pos0,
    } = kv;
    let hd = sh.head_dim;
    assert!(
        sh.n_kv_heads > 0 && sh.n_heads.is_multiple_of(sh.n_kv_heads),
        "attention: n_heads % n_kv_heads != 0"
    );
    assert_eq!(
        q.len(),
        n_q * sh.n_heads * hd,
        "attention: q is not [n_q, n_heads, head_dim]"
    );
    assert_eq!(
        out.len(),
        n_q * sh.n_heads * hd,
        "attention: out is not [n_q, n_heads, head_dim]"
    );
    let kv_stride = sh.n_kv_heads * hd;
    assert!(
        k.len() >= n_kv * kv_stride && v.len() >= n_kv * kv_stride,
        "attention: k/v shorter than [n_kv, n_kv_heads, head_dim]"
    );
    if hd == 0 || out.is_empty() {
        return;
    }
    let group = sh.n_heads / sh.n_kv_heads;
    // Visible keys of the query at `pos`: kv_pos0 + j <= pos and, with a
    // window w, kv_pos0 + j > pos - w.
    let range = |pos: usize| {
        let hi = (pos + 1).saturating_sub(kv_pos0).min(n_kv);
        let lo = sh
            .window
            .map_or(0, |w| (pos + 1).saturating_sub(w).saturating_sub(kv_pos0));
        (lo.min(hi), hi)
    };
    let (lo0, hi0) = range(q_pos0 + n_q - 1);
    let work = 2 * (hi0 - lo0).max(1) * hd;
    for_blocks(out, hd, work, |idx, o| {
        let (i, h) = (idx / sh.n_heads, idx % sh.n_heads);
        let (lo, hi) = range(q_pos0 + i);
        o.fill(0.0);
        if lo >= hi {
            return;
        }
        let kvh = h / group;
        let qv = &q[idx * hd..(idx + 1) * hd];
        // Scores on the stack up to STACK_SCORES keys: one heap allocation
        // per (query, head) was ~450 per one-row talker step.
        let mut stack = [0f32; STACK_SCORES];
        let mut heap = Vec::new();
        let scores: &mut [f32] = if hi - lo <= STACK_SCORES {
            &mut stack[..hi - lo]
        } else {
            heap.resize(hi - lo, 0.0);
            &mut heap
        };
        s.vectorize(
            #[inline(always)]
            || {
                // SAFETY: every key/value row read is `(j * n_kv_heads + kvh) *
                // hd .. + hd` with j < hi <= n_kv, inside k and v (asserted);
                // qv, o and scores are slices of the lengths passed.
                let kv = HeadRows {
                    k,
                    v,
                    lo,
                    stride: kv_stride,
                    off: kvh * hd,
                };
                unsafe { head::<S>(s, qv, kv, sh.scale, scores, o) }
            },
        );
    });
}

/// The keys and values one query head reads: rows `lo..` of stride
/// `stride` in `k` and `v`, each its head's elements at offset `off`.
#[derive(Clone, Copy)]
struct HeadRows<'a> {
    k: &'a [f32],
    v: &'a [f32],
    lo: usize,
    stride: usize,
    off: usize,
}

/// # Safety
/// `kv.k` and `kv.v` hold rows `kv.lo .. kv.lo + scores.len()` of stride
/// `kv.stride`, each with `o.len()` elements at offset `kv.off`;
/// `q.len() == o.len()`.
#[inline(always)]
unsafe fn head<S: Simd>(
    s: S,
    q: &[f32],
    kv: HeadRows<'_>,
    scale: f32,
    scores: &mut [f32],
    o: &mut [f32],
) {
    let HeadRows {
        k,
        v,
        lo,
        stride: kv_stride,
        off,
    } = kv;
    let hd = o.len();
    let mut max = f32::NEG_INFINITY;
    for (jj, sc) in scores.iter_mut().enumerate() {
        let kr = k.as_ptr().add((lo + jj) * kv_stride + off);
        *sc = dot(s, q.as_ptr(), kr, hd) * scale;
        max = max.max(*sc);
    }
    let mut sum = 0f32;
    let l = S::LANES;
    let n = scores.len();
    let mut j = 0;
    let (vmax, p) = (s.splat(max), scores.as_mut_ptr());
    while j < n {
        let nl = (n - j).min(l);
        let e = if nl == l {
            let e = exp(s, s.sub(s.load(p.add(j)), vmax));
            s.store(p.add(j), e);
            e
        } else {
            // Zero lanes of the partial load would become exp(-max): mask
            // them out of the sum by storing and re-loading only `nl`.
            let e = exp(s, s.sub(s.load_part(p.add(j), nl), vmax));
            s.store_part(p.add(j), nl, e);
            s.load_part(p.add(j), nl)
        };
        sum += s.reduce_add(e);
        j += l;
    }
    let op = o.as_mut_ptr();
    let dv = hd - hd % l;
    for (jj, &pj) in scores.iter().enumerate() {
        let vr = v.as_ptr().add((lo + jj) * kv_stride + off);
        let pv = s.splat(pj);
        let mut d = 0;
        while d < dv {
            s.store(op.add(d), s.fma(pv, s.load(vr.add(d)), s.load(op.add(d))));
            d += l;
        }
        for d in dv..hd {
            *op.add(d) += pj * *vr.add(d);
        }
    }
    let inv = 1.0 / sum;
    for x in o.iter_mut() {
        *x *= inv;
    }
}

/// `a . b` over `n` elements: one lane-wise FMA chain, fixed horizontal sum,
/// scalar tail.
///
/// # Safety
/// `a` and `b` valid for `n` reads.
#[inline(always)]
pub(crate) unsafe fn dot<S: Simd>(s: S, a: *const f32, b: *const f32, n: usize) -> f32 {
    let nv = n - n % S::LANES;
    let mut acc = s.splat(0.0);
    let mut i = 0;
    while i < nv {
        acc = s.fma(s.load(a.add(i)), s.load(b.add(i)), acc);
        i += S::LANES;
    }
    let mut r = s.reduce_add(acc);
    for i in nv..n {
        r += *a.add(i) * *b.add(i);
    }
    r
}
