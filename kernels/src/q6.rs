//! The 6-bit group-wise weight format ([`crate::Mat::Q6`]): the
//! [`crate::q4`] scheme with 64 levels.
//!
//! # Format
//! Groups of 32 inputs; weight `w[r][c]` is stored as `q in [-32, 31]`
//! (6 bits holding `q + 32`) and dequantizes to `(q * s[r][g]) as f32 *
//! d[r]` with a u8 group scale `s` (0 for an all-zero group) and one f32
//! `d` per row. Per 32 weights: 24 bytes of 6-bit values + 1 scale byte,
//! **6.25 bits per weight** plus 4 bytes per row. (A simpler layout than
//! llama.cpp's Q6_K, 6.5625 bits with groups of 16 and i8 scales: one scale
//! per 32 keeps the q4 activation order and kernels' shape, and its step is
//! 1/8 of q4's.) Exact integer sums with int8 activations, as q4.
//!
//! The quantizer is q4's with 64 levels: `d = max|w| / (31 * 255)`; per
//! group up to 6 integer scales from the no-clamp one (`ceil(a / 31d)`,
//! every weight within half a step) down to `ceil(a / 32d)`, the one with
//! the smallest squared error winning (ties: the larger), `q =
//! clamp(round_half_even(w / (d s)), -32, 31)`.
//!
//! # Layout
//! Rows are padded to 512-input super-blocks of 384 bytes: first the low
//! nibbles of `q + 32`, 256 bytes in exactly the [`crate::q4`] order (for
//! step `t in 0..8`, bytes `32 t .. 32 t + 32`, byte `b` holding `V_t[b]`
//! low and `V_t[b + 32]` high), then the high 2-bit pairs, 128 bytes: step
//! `t` at `256 + 16 t .. 256 + 16 t + 16`, byte `b` holding the high bits of
//! `V_t[b + 16 j]` at bits `2j, 2j + 1`, `j in 0..4`. One 16-byte load
//! broadcast to four 128-bit lanes, a per-lane shift by `2j` and a mask
//! give the high bits of all 64 values of a step in byte order.

use crate::q4::{q4_position, q4_row_groups, q4_supers, Q4_GROUP, Q4_SUPER, Q4_SUPER_BYTES};

/// Bytes per 512-input super-block: 256 of nibbles, 128 of high pairs.
pub const Q6_SUPER_BYTES: usize = Q4_SUPER_BYTES + Q4_SUPER / 4;

/// Bytes of one stored row (`cols` padded to 512).
pub fn q6_row_bytes(cols: usize) -> usize {
    q4_supers(cols) * Q6_SUPER_BYTES
}

/// Positions of input `c` in a stored row: (nibble byte, high nibble?,
/// high-pair byte, bit shift of the pair).
#[inline(always)]
pub fn q6_position(c: usize) -> (usize, bool, usize, u32) {
    let (sb, e) = (c / Q4_SUPER, c % Q4_SUPER);
    let (b, hi) = q4_position(e);
    let (t, p) = (b / 32, b % 32 + 32 * hi as usize);
    let base = sb * Q6_SUPER_BYTES;
    (
        base + b,
        hi,
        base + Q4_SUPER_BYTES + 16 * t + p % 16,
        2 * (p / 16) as u32,
    )
}

/// Integer weight `q in [-32, 31]` of input `c` of one stored row.
#[inline(always)]
pub fn q6_get(row: &[u8], c: usize) -> i32 {
    let (b, hi, h, sh) = q6_position(c);
    let lo = if hi { row[b] >> 4 } else { row[b] & 0x0f };
    let up = (row[h] >> sh) & 3;
    (lo | (up << 4)) as i32 - 32
}

/// Candidate group scales tried per group (evenly spaced, both ends kept).
const CANDIDATES: i32 = 6;

/// Quantizes one row into `data` (`q6_row_bytes(src.len())`) and
/// `group_scales` (`q4_row_groups(src.len())`); returns the row scale (the
/// rule in the module docs). An all-zero row gets `d = 0`; a row with a
/// non-finite value gets `d = NaN`.
pub fn quantize_q6_row(src: &[f32], data: &mut [u8], group_scales: &mut [u8]) -> f32 {
    let k = src.len();
    assert_eq!(data.len(), q6_row_bytes(k), "quantize_q6_row: data length");
    assert_eq!(
        group_scales.len(),
        q4_row_groups(k),
        "quantize_q6_row: group_scales length"
    );
    // q = 0 everywhere: nibble 0 and high pair 2 (q + 32 = 0b10_0000).
    for sb in data.chunks_exact_mut(Q6_SUPER_BYTES) {
        sb[..Q4_SUPER_BYTES].fill(0);
        sb[Q4_SUPER_BYTES..].fill(0xaa);
    }
    group_scales.fill(0);
    if src.iter().any(|v| !v.is_finite()) {
        return f32::NAN;
    }
    let max = src.iter().fold(0f32, |m, v| m.max(v.abs()));
    if max == 0.0 {
        return 0.0;
    }
    let d = max / (31.0 * 255.0);
    for (g, grp) in src.chunks(Q4_GROUP).enumerate() {
        let mut v = [0f32; Q4_GROUP];
        v[..grp.len()].copy_from_slice(grp);
        let a = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        if a == 0.0 {
            continue;
        }
        let hi = ((a / (31.0 * d)).ceil() as i32).clamp(1, 255);
        let lo = ((a / (32.0 * d)).ceil() as i32).clamp(1, hi);
        let span = hi - lo;
        let n = (span + 1).min(CANDIDATES);
        let mut best = (f32::INFINITY, hi);
        for c in 0..n {
            let s = if n == 1 {
                hi
            } else {
                hi - (c * span) / (n - 1)
            };
            let step = d * s as f32;
            let inv = 1.0 / step;
            let err: f32 = v
                .iter()
                .map(|&x| {
                    let e = x - rne(x * inv).clamp(-32.0, 31.0) * step;
                    e * e
                })
                .sum();
            if err < best.0 {
                best = (err, s);
            }
        }
        let s = best.1;
        group_scales[g] = s as u8;
        let inv = 1.0 / (d * s as f32);
        for (o, &x) in v.iter().enumerate().take(grp.len()) {
            let u = (rne(x * inv).clamp(-32.0, 31.0) as i32 + 32) as u8;
            let (b, hib, h, sh) = q6_position(g * Q4_GROUP + o);
            data[b] = if hib {
                (data[b] & 0x0f) | ((u & 0x0f) << 4)
            } else {
                (data[b] & 0xf0) | (u & 0x0f)
            };
            data[h] = (data[h] & !(3 << sh)) | ((u >> 4) << sh);
        }
    }
    d
}

/// Round half to even (see `q4::rne`).
#[inline(always)]
fn rne(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v.clamp(-4e6, 4e6) + MAGIC) - MAGIC
}

/// Dequantized row `r` of a Q6 matrix: `(q * s) as f32 * d`.
pub fn q6_row_to_f32(row: &[u8], group_scales: &[u8], d: f32, out: &mut [f32]) {
    for (c, o) in out.iter_mut().enumerate() {
        let s = group_scales[c / Q4_GROUP] as i32;
        *o = (q6_get(row, c) * s) as f32 * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_cover_each_bit_once() {
        let k = 2 * Q4_SUPER;
        let mut nib = vec![0u8; q6_row_bytes(k) * 2];
        let mut pairs = vec![0u8; q6_row_bytes(k) * 4];
        for c in 0..k {
            let (b, hi, h, sh) = q6_position(c);
            assert!(b % Q6_SUPER_BYTES < Q4_SUPER_BYTES);
            assert!(h % Q6_SUPER_BYTES >= Q4_SUPER_BYTES);
            nib[2 * b + hi as usize] += 1;
            pairs[4 * h + sh as usize / 2] += 1;
        }
        assert_eq!(nib.iter().filter(|&&s| s == 1).count(), k);
        assert!(nib.iter().all(|&s| s <= 1));
        assert_eq!(pairs.iter().filter(|&&s| s == 1).count(), k);
        assert!(pairs.iter().all(|&s| s <= 1));
    }

    #[test]
    fn stored_values_round_trip() {
        let k = Q4_SUPER + 40;
        let src: Vec<f32> = (0..k).map(|c| ((c * 29) % 64) as f32 - 32.0).collect();
        let mut data = vec![0; q6_row_bytes(k)];
        let mut gs = vec![0; q4_row_groups(k)];
        let d = quantize_q6_row(&src, &mut data, &mut gs);
        let mut out = vec![0f32; k];
        q6_row_to_f32(&data, &gs, d, &mut out);
        for (c, (&a, &b)) in src.iter().zip(&out).enumerate() {
            assert!(
                (a - b).abs() <= 0.5 * d * gs[c / 32] as f32 + 1e-6,
                "{c}: {a} {b}"
            );
        }
        for c in k..q4_supers(k) * Q4_SUPER {
            assert_eq!(q6_get(&data, c), 0, "padding {c}");
        }
    }
}
