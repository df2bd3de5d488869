//! Causal attention over a KV cache. One task per (query, head), of one
//! sequence or of several in one region ([`attention_batch`]): scores by
//! SIMD dot products over the visible key range only (positions are
//! monotonic, so the causal/window mask is a contiguous range `lo..hi`),
//! four keys at a time, vector exp, then `sum_j p_j v_j` in key order with
//! the output held in registers. Keys and values are f32 or bf16
//! ([`KvData`]); a bf16 element is widened to f32 as it is loaded, so the
//! arithmetic, and its bits, are those of the f32 path over the rounded
//! values.

use super::{for_blocks, Prefetch, Simd};
use crate::shape::{AttnSegment, AttnShape, KvData, KvLayout, KvRows};
use crate::simd::exp;

/// An element type of a KV buffer, loaded as f32.
pub(crate) trait KvElem: Copy {
    /// `S::LANES` elements at `p` as f32.
    ///
    /// # Safety
    /// `p` valid for `S::LANES` reads.
    unsafe fn load<S: Simd>(s: S, p: *const Self) -> S::V;
    fn f32(self) -> f32;
}

impl KvElem for f32 {
    #[inline(always)]
    unsafe fn load<S: Simd>(s: S, p: *const f32) -> S::V {
        s.load(p)
    }
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
}

/// bf16 bits: the upper half of an f32 (exact widening).
impl KvElem for u16 {
    #[inline(always)]
    unsafe fn load<S: Simd>(s: S, p: *const u16) -> S::V {
        s.load_bf16(p)
    }
    #[inline(always)]
    fn f32(self) -> f32 {
        f32::from_bits((self as u32) << 16)
    }
}

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
    attention_batch(s, q, &[AttnSegment { n_q, q_pos0, kv }], sh, out)
}

/// Every segment's queries in one parallel region: a task per (query,
/// head) of all segments, each computed as [`attention`] computes it for
/// its segment alone.
pub(crate) fn attention_batch<S: Simd>(
    s: S,
    q: &[f32],
    segs: &[AttnSegment<'_>],
    sh: AttnShape,
    out: &mut [f32],
) {
    let hd = sh.head_dim;
    assert!(
        sh.n_kv_heads > 0 && sh.n_heads.is_multiple_of(sh.n_kv_heads),
        "attention: n_heads % n_kv_heads != 0"
    );
    let rows: usize = segs.iter().map(|g| g.n_q).sum();
    assert_eq!(
        q.len(),
        rows * sh.n_heads * hd,
        "attention: q is not [n_q, n_heads, head_dim]"
    );
    assert_eq!(
        out.len(),
        rows * sh.n_heads * hd,
        "attention: out is not [n_q, n_heads, head_dim]"
    );
    for g in segs {
        assert!(
            g.kv.k.same_format(&g.kv.v),
            "attention: keys and values of different formats"
        );
        let need = g.kv.layout.len_for(g.kv.n, sh.n_kv_heads, hd);
        assert!(
            g.kv.k.len() >= need && g.kv.v.len() >= need,
            "attention: k/v shorter than {} positions of {:?}",
            g.kv.n,
            g.kv.layout
        );
        if let KvLayout::Heads { capacity } = g.kv.layout {
            assert!(capacity >= g.kv.n, "attention: more keys than capacity");
        }
    }
    if hd == 0 || out.is_empty() {
        return;
    }
    let group = sh.n_heads / sh.n_kv_heads;
    // Visible keys of a segment's query at `pos`: kv_pos0 + j <= pos and,
    // with a window w, kv_pos0 + j > pos - w.
    let range = |kv: &KvRows<'_>, pos: usize| {
        let hi = (pos + 1).saturating_sub(kv.pos0).min(kv.n);
        let lo = sh
            .window
            .map_or(0, |w| (pos + 1).saturating_sub(w).saturating_sub(kv.pos0));
        (lo.min(hi), hi)
    };
    // Work of a (query, head) task: the mean over the segments' last
    // queries, weighted by their query counts.
    let work = segs
        .iter()
        .map(|g| {
            let (lo, hi) = range(&g.kv, g.q_pos0 + g.n_q.max(1) - 1);
            2 * (hi - lo).max(1) * hd * g.n_q
        })
        .sum::<usize>()
        / rows.max(1);
    // A task per (query, KV head): the query heads that share a KV head
    // read its keys and values one after the other, the second time from
    // the core's own cache.
    for_blocks(out, group * hd, group * work.max(1), |idx, og| {
        let (row, kvh) = (idx / sh.n_kv_heads, idx % sh.n_kv_heads);
        // The segment holding `row` (a handful of segments: a linear scan).
        let (mut g, mut i) = (0, row);
        while i >= segs[g].n_q {
            i -= segs[g].n_q;
            g += 1;
        }
        let AttnSegment { q_pos0, kv, .. } = segs[g];
        let (lo, hi) = range(&kv, q_pos0 + i);
        og.fill(0.0);
        if lo >= hi {
            return;
        }
        let (row_stride, head_stride) = kv.layout.strides(sh.n_kv_heads, hd);
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
        for (t, o) in og.chunks_exact_mut(hd).enumerate() {
            let qh = idx * group + t;
            let qv = &q[qh * hd..(qh + 1) * hd];
            s.vectorize(
                #[inline(always)]
                || {
                    // SAFETY: every key/value row read is `j * row_stride +
                    // kvh * head_stride .. + hd` with j < hi <= kv.n, inside
                    // k and v (`len_for`, asserted); qv, o and scores are
                    // slices of the lengths passed; k and v are of one
                    // format (asserted).
                    let at = (lo, row_stride, kvh * head_stride);
                    let sc = sh.scale;
                    match (kv.k, kv.v) {
                        (KvData::F32(k), KvData::F32(v)) => unsafe {
                            head(s, qv, HeadRows::of(k, v, at), sc, scores, o)
                        },
                        (KvData::Bf16(k), KvData::Bf16(v)) => unsafe {
                            head(s, qv, HeadRows::of(k, v, at), sc, scores, o)
                        },
                        _ => unreachable!("k and v formats checked above"),
                    }
                },
            );
        }
    });
}

/// The keys and values one query head reads: rows `lo..` of stride
/// `stride` in `k` and `v`, each its head's elements at offset `off`.
#[derive(Clone, Copy)]
struct HeadRows<'a, E> {
    k: &'a [E],
    v: &'a [E],
    lo: usize,
    stride: usize,
    off: usize,
}

impl<'a, E> HeadRows<'a, E> {
    /// Rows `lo..` of stride `stride` in `k` and `v`, at offset `off`.
    fn of(k: &'a [E], v: &'a [E], (lo, stride, off): (usize, usize, usize)) -> Self {
        HeadRows {
            k,
            v,
            lo,
            stride,
            off,
        }
    }
}

/// # Safety
/// `kv.k` and `kv.v` hold rows `kv.lo .. kv.lo + scores.len()` of stride
/// `kv.stride`, each with `o.len()` elements at offset `kv.off`;
/// `q.len() == o.len()`.
#[inline(always)]
unsafe fn head<S: Simd, E: KvElem>(
    s: S,
    q: &[f32],
    kv: HeadRows<'_, E>,
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
    let n = scores.len();
    let row = |base: *const E, jj: usize| base.wrapping_add((lo + jj) * kv_stride + off);
    let esz = std::mem::size_of::<E>();
    let mut max = f32::NEG_INFINITY;
    // Scores four keys at a time: four independent FMA chains, each key's
    // the same chain `dot` runs (so the same bits), where one key at a
    // time left the core waiting on one chain's latency.
    // The keys' and values' rows of this head as prefetch spans (the
    // kernels' shared `Prefetch`: `TTS_RT_PREFETCH` applies); a hint past
    // the last row is dropped.
    let span = (n.saturating_sub(1) * kv_stride + hd) * esz;
    let pk = Prefetch::l1(row(k.as_ptr(), 0) as *const u8, span);
    let pv = Prefetch::l1(row(v.as_ptr(), 0) as *const u8, span);
    let prefetch = |j: usize| {
        if j < n {
            pk.touch(j * kv_stride * esz, hd * esz);
            pv.touch(j * kv_stride * esz, hd * esz);
        }
    };
    let mut jj = 0;
    while jj < n {
        if n - jj >= 4 {
            for t in 0..4 {
                prefetch(jj + KEYS_AHEAD + t);
            }
            let d4 = dot4(
                s,
                q.as_ptr(),
                [0, 1, 2, 3].map(|t| row(k.as_ptr(), jj + t)),
                hd,
            );
            for (t, d) in d4.into_iter().enumerate() {
                let sc = d * scale;
                scores[jj + t] = sc;
                max = max.max(sc);
            }
            jj += 4;
        } else {
            prefetch(jj + KEYS_AHEAD);
            let sc = dot(s, q.as_ptr(), row(k.as_ptr(), jj), hd) * scale;
            scores[jj] = sc;
            max = max.max(sc);
            jj += 1;
        }
    }
    let mut sum = 0f32;
    let l = S::LANES;
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
    // `o += p_j v_j` in key order, up to `O_REGS` vectors of `o` held in
    // registers across all keys (each element's sum is the same FMA chain,
    // in the same order, as one vector at a time through memory, which
    // waited on a store and a reload per key).
    let mut d0 = 0;
    while d0 + O_REGS * l <= dv {
        let mut acc = [s.splat(0.0); O_REGS];
        for (t, a) in acc.iter_mut().enumerate() {
            *a = s.load(op.add(d0 + t * l));
        }
        for (jj, &pj) in scores.iter().enumerate() {
            let vr = row(v.as_ptr(), jj).add(d0);
            let pv = s.splat(pj);
            for (t, a) in acc.iter_mut().enumerate() {
                *a = s.fma(pv, E::load(s, vr.add(t * l)), *a);
            }
        }
        for (t, a) in acc.into_iter().enumerate() {
            s.store(op.add(d0 + t * l), a);
        }
        d0 += O_REGS * l;
    }
    for (jj, &pj) in scores.iter().enumerate() {
        let vr = row(v.as_ptr(), jj);
        let pv = s.splat(pj);
        let mut d = d0;
        while d < dv {
            s.store(
                op.add(d),
                s.fma(pv, E::load(s, vr.add(d)), s.load(op.add(d))),
            );
            d += l;
        }
        for d in dv..hd {
            *op.add(d) += pj * (*vr.add(d)).f32();
        }
    }
    let inv = 1.0 / sum;
    for x in o.iter_mut() {
        *x *= inv;
    }
}

/// Keys ahead of the one being scored whose key and value rows are
/// prefetched: in a position-major buffer each row is a head's `head_dim`
/// floats in its own 4 KB stretch (rows are `n_kv_heads * head_dim`
/// apart), a pattern the hardware prefetchers do not follow across pages.
const KEYS_AHEAD: usize = 8;

/// Vectors of a head's output kept in registers while the values are
/// summed: 8 is a 128-wide head on AVX-512 and half of one on AVX2 (16
/// registers: 8 sums, the weight and the value row).
const O_REGS: usize = 8;

/// [`dot`] of `a` with four rows at once: each result has `dot`'s bits
/// (the same lane-wise FMA chain, horizontal sum and scalar tail).
///
/// # Safety
/// `a` and each of `b` valid for `n` reads.
#[inline(always)]
unsafe fn dot4<S: Simd, E: KvElem>(s: S, a: *const f32, b: [*const E; 4], n: usize) -> [f32; 4] {
    let nv = n - n % S::LANES;
    let mut acc = [s.splat(0.0); 4];
    let mut i = 0;
    while i < nv {
        let av = s.load(a.add(i));
        for (c, bp) in acc.iter_mut().zip(b) {
            *c = s.fma(av, E::load(s, bp.add(i)), *c);
        }
        i += S::LANES;
    }
    let mut r = [0f32; 4];
    for (rt, &c) in r.iter_mut().zip(&acc) {
        *rt = s.reduce_add(c);
    }
    for (rt, bp) in r.iter_mut().zip(b) {
        for i in nv..n {
            *rt += *a.add(i) * (*bp.add(i)).f32();
        }
    }
    r
}

/// `a . b` over `n` elements: one lane-wise FMA chain, fixed horizontal sum,
/// scalar tail.
///
/// # Safety
/// `a` and `b` valid for `n` reads.
#[inline(always)]
pub(crate) unsafe fn dot<S: Simd, E: KvElem>(s: S, a: *const f32, b: *const E, n: usize) -> f32 {
    let nv = n - n % S::LANES;
    let mut acc = s.splat(0.0);
    let mut i = 0;
    while i < nv {
        acc = s.fma(s.load(a.add(i)), E::load(s, b.add(i)), acc);
        i += S::LANES;
    }
    let mut r = s.reduce_add(acc);
    for i in nv..n {
        r += *a.add(i) * (*b.add(i)).f32();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::data;
    use crate::simd::{avx2::Avx2, avx512::Avx512};

    /// `dot4`'s four results have `dot`'s bits, row by row, at lengths with
    /// and without a scalar tail (the scores' bits did not change when keys
    /// went four at a time).
    fn dot4_is_dot<S: Simd>(s: S) {
        for n in [1, 7, 16, 17, 64, 128, 131] {
            let a = data(n, 1);
            let rows: Vec<Vec<f32>> = (0..4).map(|t| data(n, 2 + t)).collect();
            let (got, want) = s.vectorize(
                #[inline(always)]
                || {
                    // SAFETY: every pointer is valid for `n` reads.
                    unsafe {
                        let b = [0, 1, 2, 3].map(|t| rows[t].as_ptr());
                        let got = dot4(s, a.as_ptr(), b, n);
                        let mut want = [0f32; 4];
                        for (w, r) in want.iter_mut().zip(&rows) {
                            *w = dot(s, a.as_ptr(), r.as_ptr(), n);
                        }
                        (got, want)
                    }
                },
            );
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "n = {n}");
            // bf16 rows score as their f32 widenings do, four at a time
            // and one at a time.
            let half: Vec<Vec<u16>> = rows
                .iter()
                .map(|r| r.iter().map(|&x| crate::f32_to_bf16(x)).collect())
                .collect();
            let wide: Vec<Vec<f32>> = half
                .iter()
                .map(|r| r.iter().map(|&b| crate::bf16_to_f32(b)).collect())
                .collect();
            let (got, one, want) = s.vectorize(
                #[inline(always)]
                || {
                    // SAFETY: every pointer is valid for `n` reads.
                    unsafe {
                        let got = dot4(s, a.as_ptr(), [0, 1, 2, 3].map(|t| half[t].as_ptr()), n);
                        let want = dot4(s, a.as_ptr(), [0, 1, 2, 3].map(|t| wide[t].as_ptr()), n);
                        let one = dot(s, a.as_ptr(), half[2].as_ptr(), n);
                        (got, one, want)
                    }
                },
            );
            assert_eq!(
                got.map(f32::to_bits),
                want.map(f32::to_bits),
                "bf16, n = {n}"
            );
            assert_eq!(
                one.to_bits(),
                want[2].to_bits(),
                "bf16 one at a time, n = {n}"
            );
        }
    }

    #[test]
    fn four_keys_at_a_time_score_as_one_at_a_time() {
        if let Some(s) = Avx2::new() {
            dot4_is_dot(s);
        }
        if let Some(s) = Avx512::new() {
            dot4_is_dot(s);
        }
    }
}
