//! The 4-bit group-wise weight format ([`crate::Mat::Q4`]): layout, the
//! load-time quantizer and the int8 activation quantizer its matmul uses.
//!
//! # Format
//! A row (output feature) of `k` inputs is cut into groups of
//! [`Q4_GROUP`] = 32 consecutive inputs. Weight `w[r][c]` is stored as
//! `q in [-8, 7]` (a nibble holding `q + 8`) and dequantizes to
//! `(q * s[r][g]) as f32 * d[r]`, where `g = c / 32`, `s` is a **u8 group
//! scale** (1..=255, 0 for an all-zero group) and `d` one f32 per row. The
//! two-level scale (as in llama.cpp's k-quants) is what lets the matmul run
//! in exact integers: `sum_g s_g * (q_g . x_g)` is an integer for integer
//! activations, so every ISA and thread count gives the same bits as the
//! reference, as with [`crate::Mat::Q8`]. Per 32 weights it stores 16 bytes
//! of nibbles + 1 scale byte: **4.25 bits per weight** plus 4 bytes per row
//! (an f16 group scale would be 4.5, an f32 one 5).
//!
//! The group scale is an 8-bit fraction of the row's largest group scale,
//! so a group's step is at most the float optimum rounded up by `d` (1/255
//! of the row's largest step): the cost is < 1% of a typical group's step
//! when the row's groups are within ~2x of each other and grows only for
//! groups far smaller than the row's largest, whose absolute error stays
//! below `d/2` (1/510 of the largest step). See `quantize_q4_row`.
//!
//! # Layout
//! Rows are padded to a multiple of [`Q4_SUPER`] = 512 inputs (16 groups),
//! a *super-block*; padding holds `q = 0` and scale 0. A super-block is 256
//! bytes of nibbles followed by nothing (its 16 group scales live in the
//! separate `group_scales` array, 16 bytes per super-block). Inside it the
//! nibbles are ordered for the SIMD kernels: for step `t in 0..8`, the 64
//! values `V_t[p]`, `p in 0..64`, are the elements
//! `32 * (p / 4) + 4 * t + p % 4` — four consecutive inputs of each of the
//! 16 groups, so an integer dot-product instruction summing 4 adjacent
//! bytes into 32-bit lane `l` keeps lane `l` = group `l` for all 8 steps.
//! Step `t` occupies bytes `32 t .. 32 t + 32`: byte `b` holds `V_t[b]` in
//! its low nibble and `V_t[b + 32]` in its high nibble (one load, one
//! shift, one mask unpack it). A row is `k_pad / 2` contiguous bytes, so a
//! matvec streams memory front to back.
//!
//! # Activations
//! The matmul quantizes each activation row to int8 with one scale per row
//! ([`quantize_a8_row`]: `max|x| / 127`, round half to even) and permutes
//! it into the same super-block order. Int8 (not the int16 of `Q8`) is what
//! lets one `vpdpbusd` take 64 weights; its rounding (`max|x|/254` per
//! element) is ~8x finer than the weights' own 4-bit step relative to a
//! group's largest weight, but rows with a few huge activations (outlier
//! channels of trained models) quantize their small entries coarsely. That
//! risk is what the fidelity gates (tests/it/precision.rs) measure.

/// Inputs per group sharing one u8 scale.
pub const Q4_GROUP: usize = 32;
/// Inputs per super-block: 16 groups, 256 bytes of nibbles.
pub const Q4_SUPER: usize = 512;
/// Nibble bytes per super-block.
pub const Q4_SUPER_BYTES: usize = Q4_SUPER / 2;
/// Groups per super-block.
pub const Q4_SUPER_GROUPS: usize = Q4_SUPER / Q4_GROUP;
/// Largest int8 magnitude of a quantized activation.
pub const A8_MAX: f32 = 127.0;

/// Super-blocks of a row of `cols` inputs.
pub fn q4_supers(cols: usize) -> usize {
    cols.div_ceil(Q4_SUPER)
}

/// Nibble bytes of one stored row (`cols` padded to 512, two per byte).
pub fn q4_row_bytes(cols: usize) -> usize {
    q4_supers(cols) * Q4_SUPER_BYTES
}

/// Group scales of one stored row (padding groups included).
pub fn q4_row_groups(cols: usize) -> usize {
    q4_supers(cols) * Q4_SUPER_GROUPS
}

/// Position of input `c` of a row: (byte index in the row, high nibble?).
#[inline(always)]
pub fn q4_position(c: usize) -> (usize, bool) {
    let (sb, e) = (c / Q4_SUPER, c % Q4_SUPER);
    let (l, o) = (e / Q4_GROUP, e % Q4_GROUP);
    let (t, r) = (o / 4, o % 4);
    let p = 4 * l + r;
    (sb * Q4_SUPER_BYTES + 32 * t + p % 32, p >= 32)
}

/// Integer weight `q in [-8, 7]` of input `c` of one stored row.
#[inline(always)]
pub fn q4_get(row: &[u8], c: usize) -> i32 {
    let (b, hi) = q4_position(c);
    let v = if hi { row[b] >> 4 } else { row[b] & 0x0f };
    v as i32 - 8
}

/// An owned [`crate::Mat::Q4`]: `data` is `[rows, q4_row_bytes(cols)]`,
/// `group_scales` `[rows, q4_row_groups(cols)]`, `scales` `[rows]`.
#[derive(Clone, Debug, Default)]
pub struct Q4Rows {
    pub data: Vec<u8>,
    pub group_scales: Vec<u8>,
    pub scales: Vec<f32>,
}

/// Group-wise 4-bit quantization of a row-major `[rows, cols]` f32 matrix
/// (see `quantize_q4_row` for the rule and its error bound).
pub fn quantize_q4_rows(w: &[f32], rows: usize, cols: usize) -> Q4Rows {
    assert_eq!(
        w.len(),
        rows * cols,
        "quantize_q4_rows: w is not [rows, cols]"
    );
    let (rb, rg) = (q4_row_bytes(cols), q4_row_groups(cols));
    let mut out = Q4Rows {
        data: vec![0x88; rows * rb],
        group_scales: vec![0; rows * rg],
        scales: vec![0.0; rows],
    };
    for r in 0..rows {
        out.scales[r] = quantize_q4_row(
            &w[r * cols..(r + 1) * cols],
            &mut out.data[r * rb..(r + 1) * rb],
            &mut out.group_scales[r * rg..(r + 1) * rg],
        );
    }
    out
}

/// Candidate group scales tried per group (evenly spaced, both ends kept).
const CANDIDATES: usize = 6;

/// Quantizes one row into `data` (`q4_row_bytes(src.len())` bytes) and
/// `group_scales` (`q4_row_groups(src.len())`); returns the row scale `d`.
///
/// Rule: `d = max|w| / (7 * 255)`. For a group with largest magnitude `a`,
/// the candidate scales are the integers from `ceil(a / 7d)` (the largest
/// element lands inside +-7: nothing clamps, every element is within half a
/// step) down to `ceil(a / 8d)` (the largest lands on about -8, or clamps
/// to 7 by at most one step: the full 16 levels used), at most 6 of them evenly spaced; the one with
/// the smallest squared error wins (ties: the larger scale), and
/// `q = clamp(round_half_even(w / (d s)), -8, 7)`. Hence, per group: the squared error
/// is at most that of the no-clamp candidate (every element within half its
/// step), and every element is within one step `d s` of its weight.
///
/// An all-zero row gets `d = 0`, zero scales and `q = 0`; a row with a
/// non-finite value gets `d = NaN` (its outputs become NaN, as the f32
/// weights would make them).
pub fn quantize_q4_row(src: &[f32], data: &mut [u8], group_scales: &mut [u8]) -> f32 {
    let k = src.len();
    assert_eq!(data.len(), q4_row_bytes(k), "quantize_q4_row: data length");
    assert_eq!(
        group_scales.len(),
        q4_row_groups(k),
        "quantize_q4_row: group_scales length"
    );
    data.fill(0x88);
    group_scales.fill(0);
    let max = src.iter().fold(0f32, |m, v| m.max(v.abs()));
    if src.iter().any(|v| !v.is_finite()) {
        return f32::NAN;
    }
    if max == 0.0 {
        return 0.0;
    }
    let d = max / (7.0 * 255.0);
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: avx2 was just detected.
        unsafe { quantize_groups_avx2(src, d, data, group_scales) };
        return d;
    }
    quantize_groups(src, d, data, group_scales);
    d
}

/// [`quantize_groups`] compiled for AVX2 (8-lane error sums: ~2x faster
/// loading). The arithmetic is the same element-wise IEEE operations in the
/// same order, so the result is identical to the baseline build's.
///
/// # Safety
/// The CPU has avx2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_groups_avx2(src: &[f32], d: f32, data: &mut [u8], group_scales: &mut [u8]) {
    quantize_groups(src, d, data, group_scales)
}

/// The per-group search of [`quantize_q4_row`] for row scale `d > 0`.
#[inline(always)]
fn quantize_groups(src: &[f32], d: f32, data: &mut [u8], group_scales: &mut [u8]) {
    for (g, grp) in src.chunks(Q4_GROUP).enumerate() {
        // A zero-padded copy: fixed-size loops vectorize, and padding
        // quantizes to 0 with no error.
        let mut v = [0f32; Q4_GROUP];
        v[..grp.len()].copy_from_slice(grp);
        let a = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        if a == 0.0 {
            continue;
        }
        let hi = ((a / (7.0 * d)).ceil() as i32).clamp(1, 255);
        let lo = ((a / (8.0 * d)).ceil() as i32).clamp(1, hi);
        let span = hi - lo;
        let n = (span + 1).min(CANDIDATES as i32);
        let mut best = (f32::INFINITY, hi);
        for c in 0..n {
            // hi first, so ties keep the larger (no-clamp) scale.
            let s = if n == 1 {
                hi
            } else {
                hi - (c * span) / (n - 1)
            };
            let step = d * s as f32;
            let inv = 1.0 / step;
            // Eight partial sums so the loop vectorizes (one f32 sum is a
            // serial chain).
            let mut part = [0f32; 8];
            for c8 in v.chunks_exact(8) {
                for (p, &x) in part.iter_mut().zip(c8) {
                    let q = rne(x * inv).clamp(-8.0, 7.0);
                    let e = x - q * step;
                    *p += e * e;
                }
            }
            let err: f32 = part.iter().sum();
            if err < best.0 {
                best = (err, s);
            }
        }
        let s = best.1;
        group_scales[g] = s as u8;
        let inv = 1.0 / (d * s as f32);
        let mut q = [0i8; Q4_GROUP];
        for (qi, &x) in q.iter_mut().zip(&v) {
            *qi = rne(x * inv).clamp(-8.0, 7.0) as i8;
        }
        // Group l of super-block sb: input o sits at byte
        // sb * 256 + 32 * (o / 4) + 4 * (l % 8) + o % 4, low nibble for
        // l < 8, high for l >= 8 (see `q4_position`).
        let (sb, l) = (g / Q4_SUPER_GROUPS, g % Q4_SUPER_GROUPS);
        let base = sb * Q4_SUPER_BYTES + 4 * (l % 8);
        for (o, &qo) in q.iter().enumerate().take(grp.len()) {
            let b = &mut data[base + 32 * (o / 4) + o % 4];
            let u = (qo + 8) as u8;
            *b = if l >= 8 {
                (*b & 0x0f) | (u << 4)
            } else {
                (*b & 0xf0) | u
            };
        }
    }
}

/// Round half to even for |v| < 2^22 by adding and subtracting 1.5 * 2^23
/// (plain adds: `f32::round` is a libm call per element without SSE4.1).
/// `v * inv` is at most ~9 in magnitude here; the clamp keeps huge ratios
/// (never produced) from breaking the trick.
#[inline(always)]
fn rne(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v.clamp(-4e6, 4e6) + MAGIC) - MAGIC
}

/// Dequantized row `r` of a Q4 matrix: `(q * s) as f32 * d`.
pub fn q4_row_to_f32(row: &[u8], group_scales: &[u8], d: f32, out: &mut [f32]) {
    for (c, o) in out.iter_mut().enumerate() {
        let s = group_scales[c / Q4_GROUP] as i32;
        *o = (q4_get(row, c) * s) as f32 * d;
    }
}

/// Quantizes one activation row to int8 for the Q4 matmul:
/// `scale = max|x| / 127`, `q = round_half_even(x / scale)`; returns the
/// scale (0 for an all-zero row, NaN when the row holds a non-finite value,
/// which then poisons the row's outputs as f32 arithmetic would).
pub fn quantize_a8_row(x: &[f32], q: &mut [i8]) -> f32 {
    assert_eq!(x.len(), q.len(), "quantize_a8_row: length mismatch");
    let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if !max.is_finite() || x.iter().any(|v| v.is_nan()) {
        q.fill(0);
        return f32::NAN;
    }
    if max == 0.0 {
        q.fill(0);
        return 0.0;
    }
    let inv = A8_MAX / max;
    // Round half to even by adding and subtracting 1.5 * 2^23 (see
    // `quantize_a16_row`).
    const MAGIC: f32 = 12_582_912.0;
    for (d, &v) in q.iter_mut().zip(x) {
        *d = (((v * inv).clamp(-A8_MAX, A8_MAX) + MAGIC) - MAGIC) as i8;
    }
    max / A8_MAX
}

/// `xq` (one int8 activation row of `k` inputs) permuted into the stored
/// super-block order and zero-padded: `out[sb * 512 + 64 t + p]` is input
/// `sb * 512 + 32 (p / 4) + 4 t + p % 4` (0 past `k`). `out.len()` must be
/// `q4_supers(k) * 512`.
pub fn q4_permute_activations(xq: &[i8], out: &mut [i8]) {
    let k = xq.len();
    assert_eq!(out.len(), q4_supers(k) * Q4_SUPER, "q4_permute: out length");
    for (sb, o) in out.chunks_exact_mut(Q4_SUPER).enumerate() {
        let base = sb * Q4_SUPER;
        if base + Q4_SUPER <= k {
            let src = &xq[base..base + Q4_SUPER];
            for t in 0..8 {
                for l in 0..16 {
                    let s = 32 * l + 4 * t;
                    o[64 * t + 4 * l..64 * t + 4 * l + 4].copy_from_slice(&src[s..s + 4]);
                }
            }
        } else {
            for (j, v) in o.iter_mut().enumerate() {
                let (t, p) = (j / 64, j % 64);
                let c = base + 32 * (p / 4) + 4 * t + p % 4;
                *v = if c < k { xq[c] } else { 0 };
            }
        }
    }
}

/// Per group of the permuted activation row `xp`: `-8 * sum(x in group)`,
/// i32 (|.| <= 8 * 32 * 127 = 32512, so it also fits i16). The SIMD kernels
/// multiply the stored nibbles `q + 8` and add this times the group scale
/// to get `q . x` back.
pub fn q4_neg8_group_sums(xp: &[i8], out: &mut [i32]) {
    q4_offset_group_sums(xp, -8, out)
}

/// Per group of the permuted activation row `xp`: `factor * sum(x in
/// group)` (the correction for weights stored with an offset: `-8` for
/// q4's nibbles, `-128` for iq4's biased levels, `-32` for q6).
pub fn q4_offset_group_sums(xp: &[i8], factor: i32, out: &mut [i32]) {
    assert_eq!(xp.len() % Q4_SUPER, 0);
    assert_eq!(out.len(), xp.len() / Q4_GROUP);
    for (sb, o) in xp
        .chunks_exact(Q4_SUPER)
        .zip(out.chunks_exact_mut(Q4_SUPER_GROUPS))
    {
        o.fill(0);
        for (j, &v) in sb.iter().enumerate() {
            o[(j % 64) / 4] += v as i32;
        }
        for v in o.iter_mut() {
            *v *= factor;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_quantizer_build_matches_the_baseline() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let k = 1000;
        let mut z = 0x2545_f491_4f6c_dd1du64;
        let src: Vec<f32> = (0..k)
            .map(|_| {
                z ^= z << 13;
                z ^= z >> 7;
                z ^= z << 17;
                (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect();
        let d = src.iter().fold(0f32, |m, v| m.max(v.abs())) / (7.0 * 255.0);
        let (mut a, mut b) = (vec![0x88; q4_row_bytes(k)], vec![0x88; q4_row_bytes(k)]);
        let (mut sa, mut sb) = (vec![0; q4_row_groups(k)], vec![0; q4_row_groups(k)]);
        quantize_groups(&src, d, &mut a, &mut sa);
        // SAFETY: avx2 detected above.
        unsafe { quantize_groups_avx2(&src, d, &mut b, &mut sb) };
        assert_eq!(a, b);
        assert_eq!(sa, sb);
    }

    #[test]
    fn positions_cover_each_nibble_once() {
        let k = 2 * Q4_SUPER;
        let mut seen = vec![0u8; q4_row_bytes(k) * 2];
        for c in 0..k {
            let (b, hi) = q4_position(c);
            seen[2 * b + hi as usize] += 1;
        }
        assert!(seen.iter().all(|&s| s == 1));
    }

    #[test]
    fn permuted_activations_line_up_with_the_nibbles() {
        // For each input c: the permuted activation slot and the unpacked
        // nibble slot (low nibbles of step t are V_t[0..32], high ones
        // V_t[32..64]) are the same.
        let k = Q4_SUPER + 100;
        let xq: Vec<i8> = (0..k).map(|c| (c % 251) as i8).collect();
        let mut xp = vec![0i8; q4_supers(k) * Q4_SUPER];
        q4_permute_activations(&xq, &mut xp);
        for (c, &want) in xq.iter().enumerate() {
            let (b, hi) = q4_position(c);
            let (sb, within) = (b / Q4_SUPER_BYTES, b % Q4_SUPER_BYTES);
            let (t, p) = (within / 32, within % 32 + 32 * hi as usize);
            assert_eq!(xp[sb * Q4_SUPER + 64 * t + p], want, "input {c}");
        }
    }
}
