//! The non-linear 4-bit weight format ([`crate::Mat::Iq4`]): IQ4_NL's
//! 16-level grid with least-squares group scales, in the [`crate::q4`]
//! layout.
//!
//! # Format
//! A row of `k` inputs is cut into groups of 32 as in [`crate::q4`]. Weight
//! `w[r][c]` is stored as a nibble `i in 0..16` indexing [`IQ4_LEVELS`]
//! (llama.cpp's IQ4_NL int8 table, denser near zero where trained and
//! Gaussian weights are dense) and dequantizes to
//! `(IQ4_LEVELS[i] * s[r][g]) as f32 * d[r]`, with an **i8 group scale**
//! `s` (stored as its byte; -127..=127, 0 for an all-zero group) and one f32
//! `d` per row. The sign of `s` matters: the table is asymmetric (-127 ..
//! 113), so a group whose largest weight is positive may use a negative
//! scale to put it on -127. This is the "row-wise IQ4_NL" / IQ4_KS shape
//! (int8 block scales plus one float per row): per 32 weights 16 bytes of
//! nibbles + 1 scale byte, **4.25 bits per weight** plus 4 bytes per row,
//! the same as q4.
//!
//! Exactness: the levels are int8, so with int8 activations a group's dot
//! `sum IQ4_LEVELS[i_c] * x_c` is an integer and the matmul sums
//! `sum_g s_g * dot_g` exactly, as q4 does (every ISA and thread count
//! gives the reference's bits). The SIMD kernels look the levels up with
//! `vpshufb` (16 entries: one register).
//!
//! # Quantizer
//! Per group (as ggml's `quantize_row_iq4_nl`): start from the scale that
//! maps the largest-magnitude weight to +127 and from 15 that map it to
//! `-127 + t`, `t in -7..=7`; for each, round every weight to the nearest
//! level and refit the scale by least squares (`sigma = sum L x / sum L^2`),
//! keeping the one with the smallest squared error. Unweighted: for
//! activations of equal variance the output error is the plain squared
//! weight error. Then `d = max_g |sigma_g| / 127`, and each group takes the
//! integer `s` near `sigma_g / d` (it, and one either side) whose re-rounded
//! levels give the smallest squared error of the stored values.
//!
//! # Layout
//! Identical to [`crate::q4`] (super-blocks of 512 inputs, the same nibble
//! order and activation permutation). Padding groups hold scale 0; the
//! padded tail of a partial group holds index 8 (level 1: the table has no
//! 0), harmless because the matmul zero-pads the activations there.

use crate::q4::{q4_get, q4_row_bytes, q4_row_groups, Q4_GROUP, Q4_SUPER, Q4_SUPER_BYTES};

/// IQ4_NL's levels (llama.cpp `kvalues_iq4nl`), ascending.
pub const IQ4_LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Level of input `c` of one stored row (the table value, not the index).
#[inline(always)]
pub fn iq4_get(row: &[u8], c: usize) -> i32 {
    IQ4_LEVELS[(q4_get(row, c) + 8) as usize] as i32
}

/// The index of the level nearest `v` (a value in level units): the count
/// of midpoints at or below it, so an exact midpoint goes to the upper level.
#[inline(always)]
fn nearest(v: f32) -> usize {
    const MID: [f32; 15] = {
        let mut m = [0f32; 15];
        let mut i = 0;
        while i < 15 {
            m[i] = (IQ4_LEVELS[i] as f32 + IQ4_LEVELS[i + 1] as f32) * 0.5;
            i += 1;
        }
        m
    };
    MID.iter().map(|&m| (v >= m) as usize).sum()
}

/// Quantizes one row into `data` (`q4_row_bytes(src.len())`) and
/// `group_scales` (`q4_row_groups(src.len())`, i8 bit patterns); returns
/// the row scale `d` (see the module docs for the rule).
///
/// An all-zero row gets `d = 0`, zero scales; a row with a non-finite value
/// gets `d = NaN` (its outputs become NaN, as the f32 weights would make
/// them).
pub fn quantize_iq4_row(src: &[f32], data: &mut [u8], group_scales: &mut [u8]) -> f32 {
    let k = src.len();
    assert_eq!(data.len(), q4_row_bytes(k), "quantize_iq4_row: data length");
    assert_eq!(
        group_scales.len(),
        q4_row_groups(k),
        "quantize_iq4_row: group_scales length"
    );
    data.fill(0x88);
    group_scales.fill(0);
    if src.iter().any(|v| !v.is_finite()) {
        return f32::NAN;
    }
    let groups: Vec<[f32; Q4_GROUP]> = src
        .chunks(Q4_GROUP)
        .map(|g| {
            let mut v = [0f32; Q4_GROUP];
            v[..g.len()].copy_from_slice(g);
            v
        })
        .collect();
    let sigma: Vec<f32> = groups.iter().map(group_sigma).collect();
    let top = sigma.iter().fold(0f32, |m, s| m.max(s.abs()));
    if top == 0.0 {
        return 0.0;
    }
    let d = top / 127.0;
    for (g, (v, &sg)) in groups.iter().zip(&sigma).enumerate() {
        if sg == 0.0 {
            continue;
        }
        let s0 = (sg / d).round().clamp(-127.0, 127.0) as i32;
        let mut best = (f32::INFINITY, 0i32, [0u8; Q4_GROUP]);
        for s in [s0, s0 - 1, s0 + 1] {
            if s == 0 || s.abs() > 127 {
                continue;
            }
            let (err, idx) = round_group(v, s, d);
            if err < best.0 {
                best = (err, s, idx);
            }
        }
        group_scales[g] = best.1 as i8 as u8;
        // Group l of super-block sb: input o at byte
        // sb * 256 + 32 * (o / 4) + 4 * (l % 8) + o % 4, low nibble for
        // l < 8 (see `q4_position`).
        let (sb, l) = (g / (Q4_SUPER / Q4_GROUP), g % (Q4_SUPER / Q4_GROUP));
        let base = sb * Q4_SUPER_BYTES + 4 * (l % 8);
        let len = (k - g * Q4_GROUP).min(Q4_GROUP);
        for (o, &u) in best.2.iter().enumerate().take(len) {
            let b = &mut data[base + 32 * (o / 4) + o % 4];
            *b = if l >= 8 {
                (*b & 0x0f) | (u << 4)
            } else {
                (*b & 0xf0) | u
            };
        }
    }
    d
}

/// The squared error of group `v` stored with scale `s` of row scale `d`
/// (each weight on its nearest level, values as they dequantize) and the
/// level indices.
fn round_group(v: &[f32; Q4_GROUP], s: i32, d: f32) -> (f32, [u8; Q4_GROUP]) {
    let inv = 1.0 / (s as f32 * d);
    let mut idx = [0u8; Q4_GROUP];
    let mut err = 0f32;
    for (i, &x) in idx.iter_mut().zip(v) {
        let l = nearest(x * inv);
        *i = l as u8;
        let e = x - (IQ4_LEVELS[l] as i32 * s) as f32 * d;
        err += e * e;
    }
    (err, idx)
}

/// The least-squares float scale of one group (0 for an all-zero group):
/// the candidate search of the module docs.
fn group_sigma(v: &[f32; Q4_GROUP]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &x in v {
        if x.abs() > amax {
            (amax, max) = (x.abs(), x);
        }
    }
    if amax == 0.0 {
        return 0.0;
    }
    let sumx2: f32 = v.iter().map(|x| x * x).sum();
    let mut best = (f32::INFINITY, 0f32);
    let lo = IQ4_LEVELS[0] as f32;
    let candidates = std::iter::once(-lo / max).chain((-7..=7).map(|t: i32| (t as f32 + lo) / max));
    for id in candidates {
        let (mut sqx, mut sq2) = (0f32, 0f32);
        for &x in v {
            let q = IQ4_LEVELS[nearest(id * x)] as f32;
            sqx += q * x;
            sq2 += q * q;
        }
        if sq2 == 0.0 {
            continue;
        }
        // Error after the refit: sum x^2 - (sum q x)^2 / sum q^2.
        let err = sumx2 - sqx * sqx / sq2;
        if err < best.0 {
            best = (err, sqx / sq2);
        }
    }
    best.1
}

/// Dequantized row `r` of an Iq4 matrix: `(level * s) as f32 * d`.
pub fn iq4_row_to_f32(row: &[u8], group_scales: &[u8], d: f32, out: &mut [f32]) {
    for (c, o) in out.iter_mut().enumerate() {
        let s = group_scales[c / Q4_GROUP] as i8 as i32;
        *o = (iq4_get(row, c) * s) as f32 * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_level_rounds_to_the_closest_and_midpoints_up() {
        assert_eq!(nearest(-1000.0), 0);
        assert_eq!(nearest(1000.0), 15);
        assert_eq!(nearest(1.2), 8);
        assert_eq!(nearest(-4.5), 8);
        assert_eq!(nearest(-4.6), 7);
        assert_eq!(nearest(7.0), 9);
        assert_eq!(nearest(6.9), 8);
        for (i, &l) in IQ4_LEVELS.iter().enumerate() {
            assert_eq!(nearest(l as f32), i);
        }
    }

    #[test]
    fn least_squares_scale_beats_absmax_on_a_gaussian_like_group() {
        let v: [f32; Q4_GROUP] =
            std::array::from_fn(|i| ((i * 37 % 32) as f32 - 15.5) / 8.0 * ((i % 5) as f32 + 1.0));
        let s = group_sigma(&v);
        let err = |sc: f32| -> f32 {
            v.iter()
                .map(|&x| {
                    let q = IQ4_LEVELS[nearest(x / sc)] as f32 * sc;
                    (x - q) * (x - q)
                })
                .sum()
        };
        let amax = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(
            err(s) <= err(amax / 127.0),
            "{} > {}",
            err(s),
            err(amax / 127.0)
        );
    }
}
