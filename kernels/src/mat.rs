use crate::group::GroupFormat;

/// A borrowed row-major weight matrix `[rows, cols]` in its storage precision.
/// New precisions (int8, 4-bit groups) are new variants: callers of
/// [`crate::matmul`] do not change.
#[derive(Clone, Copy, Debug)]
pub enum Mat<'a> {
    F32 {
        data: &'a [f32],
        rows: usize,
        cols: usize,
    },
    /// bf16 bit patterns (upper half of an f32).
    Bf16 {
        data: &'a [u16],
        rows: usize,
        cols: usize,
    },
    /// Symmetric int8 with one f32 scale per row (output feature): weight
    /// `w[r][c] = data[r * cols + c] * scales[r]`. [`quantize_q8_rows`]
    /// makes one.
    ///
    /// [`crate::matmul`] quantizes each activation row to int16 with its own
    /// scale ([`quantize_a16_row`]), takes the dot products in exact integer
    /// arithmetic (i32 lanes, i64 totals) and applies `scale_x * scale_w`
    /// once: every path gives the same bits, and the activation rounding
    /// (max|x|/65534 per element) is ~65x finer than the weights' step.
    /// [`crate::Kernels::matmul_q8_widened`] is the alternative that widens
    /// int8 to f32 and keeps f32 activations (more vector work per weight).
    Q8 {
        data: &'a [i8],
        scales: &'a [f32],
        rows: usize,
        cols: usize,
    },
    /// 4-bit group-wise weights (see [`crate::q4`] for format and layout):
    /// `w[r][c] = (q * group_scales[r][c / 32]) as f32 * scales[r]` with
    /// `q in [-8, 7]` stored as nibbles in super-block order, rows padded to
    /// 512 inputs. [`crate::quantize_q4_rows`] makes one.
    ///
    /// [`crate::matmul`] quantizes each activation row to int8 with its own
    /// scale ([`crate::quantize_a8_row`]) and sums
    /// `sum_g s_g * (q_g . x_g)` in exact integers (AVX-512 VNNI
    /// `vpdpbusd`, AVX2 `vpmaddubsw`), then applies `scale_x * scale_w`
    /// once: every path gives the reference's bits.
    Q4 {
        data: &'a [u8],
        group_scales: &'a [u8],
        scales: &'a [f32],
        rows: usize,
        cols: usize,
    },
    /// Non-linear 4-bit group-wise weights (see [`crate::iq4`]): the
    /// [`Mat::Q4`] layout with each nibble indexing the IQ4_NL level table
    /// and **i8** group scales (stored as their bytes):
    /// `w[r][c] = (IQ4_LEVELS[i] * (group_scales[r][c / 32] as i8)) as f32
    /// * scales[r]`. 4.25 bits per weight; same exact-integer matmul.
    Iq4 {
        data: &'a [u8],
        group_scales: &'a [u8],
        scales: &'a [f32],
        rows: usize,
        cols: usize,
    },
    /// 6-bit group-wise weights (see [`crate::q6`]): `q in [-32, 31]`,
    /// u8 group scales of 32 inputs, an f32 per row, 6.25 bits per weight;
    /// same exact-integer matmul.
    Q6 {
        data: &'a [u8],
        group_scales: &'a [u8],
        scales: &'a [f32],
        rows: usize,
        cols: usize,
    },
}

impl Mat<'_> {
    pub fn rows(&self) -> usize {
        match *self {
            Mat::F32 { rows, .. }
            | Mat::Bf16 { rows, .. }
            | Mat::Q8 { rows, .. }
            | Mat::Q4 { rows, .. }
            | Mat::Iq4 { rows, .. }
            | Mat::Q6 { rows, .. } => rows,
        }
    }
    pub fn cols(&self) -> usize {
        match *self {
            Mat::F32 { cols, .. }
            | Mat::Bf16 { cols, .. }
            | Mat::Q8 { cols, .. }
            | Mat::Q4 { cols, .. }
            | Mat::Iq4 { cols, .. }
            | Mat::Q6 { cols, .. } => cols,
        }
    }
    /// Bytes of weight data (scales included) a full read touches.
    pub fn bytes(&self) -> usize {
        match *self {
            Mat::F32 { rows, cols, .. } => rows * cols * 4,
            Mat::Bf16 { rows, cols, .. } => rows * cols * 2,
            Mat::Q8 { rows, cols, .. } => rows * cols + rows * 4,
            Mat::Q4 { rows, cols, .. }
            | Mat::Iq4 { rows, cols, .. }
            | Mat::Q6 { rows, cols, .. } => {
                let f = self.group_parts().expect("a group format").0;
                rows * (f.row_bytes(cols) + f.row_groups(cols) + 4)
            }
        }
    }

    /// Row `r` widened to f32 into `out` (used for embedding look-ups);
    /// int8 rows are dequantized (`q * scale`), group-wise ones as
    /// `(q * s_group) as f32 * scale`.
    pub fn row_to_f32(&self, r: usize, out: &mut [f32]) {
        match *self {
            Mat::Q4 { cols, .. } | Mat::Iq4 { cols, .. } | Mat::Q6 { cols, .. } => {
                let (f, data, group_scales, scales) = self.group_parts().expect("a group format");
                let (rb, rg) = (f.row_bytes(cols), f.row_groups(cols));
                let (row, gs) = (
                    &data[r * rb..(r + 1) * rb],
                    &group_scales[r * rg..(r + 1) * rg],
                );
                let o = &mut out[..cols];
                match f {
                    GroupFormat::Q4 => crate::q4::q4_row_to_f32(row, gs, scales[r], o),
                    GroupFormat::Iq4 => crate::iq4::iq4_row_to_f32(row, gs, scales[r], o),
                    GroupFormat::Q6 => crate::q6::q6_row_to_f32(row, gs, scales[r], o),
                }
            }
            Mat::Q8 {
                data, scales, cols, ..
            } => {
                let s = scales[r];
                for (o, &q) in out.iter_mut().zip(&data[r * cols..(r + 1) * cols]) {
                    *o = q as f32 * s;
                }
            }
            Mat::F32 { data, cols, .. } => out.copy_from_slice(&data[r * cols..(r + 1) * cols]),
            Mat::Bf16 { data, cols, .. } => {
                for (o, &b) in out.iter_mut().zip(&data[r * cols..(r + 1) * cols]) {
                    *o = bf16_to_f32(b);
                }
            }
        }
    }
}

#[inline(always)]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// Round-to-nearest-even f32 -> bf16 (NaN stays NaN), as PyTorch does.
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

/// Largest int8 magnitude used: symmetric, so -128 is never produced and
/// `-q` is always representable.
pub const Q8_MAX: f32 = 127.0;

/// Per-row symmetric int8 quantization of a row-major `[rows, cols]` f32
/// matrix: `scale[r] = max_c |w[r][c]| / 127`, `q = round(w / scale)`
/// (ties away from zero). An all-zero row gets scale 0 and zeros. The
/// worst-case rounding error of an element is `scale / 2`, i.e. 0.4% of the
/// row's largest magnitude.
pub fn quantize_q8_rows(w: &[f32], rows: usize, cols: usize) -> (Vec<i8>, Vec<f32>) {
    assert_eq!(
        w.len(),
        rows * cols,
        "quantize_q8_rows: w is not [rows, cols]"
    );
    let mut q = vec![0i8; rows * cols];
    let mut scales = vec![0f32; rows];
    for ((src, dst), s) in w
        .chunks_exact(cols.max(1))
        .zip(q.chunks_exact_mut(cols.max(1)))
        .zip(&mut scales)
    {
        *s = quantize_q8_row(src, dst);
    }
    (q, scales)
}

/// One row of [`quantize_q8_rows`]; returns its scale.
pub fn quantize_q8_row(src: &[f32], dst: &mut [i8]) -> f32 {
    assert_eq!(src.len(), dst.len(), "quantize_q8_row: length mismatch");
    let max = src.iter().fold(0f32, |m, v| m.max(v.abs()));
    if max == 0.0 || !max.is_finite() {
        // Zero rows stay zero; a non-finite row cannot be represented and
        // becomes NaN through its scale, as the f32 weights would make it.
        dst.fill(0);
        return if max == 0.0 { 0.0 } else { f32::NAN };
    }
    let inv = Q8_MAX / max;
    for (d, &v) in dst.iter_mut().zip(src) {
        *d = round_q8(v * inv);
    }
    max / Q8_MAX
}

/// `x.round().clamp(-127.0, 127.0) as i8` (round half away from zero)
/// without the libm `roundf` call, so the row loop vectorizes.
///
/// Clamping first gives the same result: the bounds are integers, so
/// rounding never crosses them. For `|c| <= 127`, `t = c as i32` truncates
/// toward zero, `t as f32` is exact and so is `f = c - t` (both have the
/// same sign and `|t| <= |c| < 2 * |t|` or `t = 0`: Sterbenz), so
/// comparing the exact fraction with +-0.5 decides the rounding exactly:
/// `f >= 0.5` rounds up, `f <= -0.5` rounds down (ties away from zero),
/// anything between stays at `t`. NaN (a row's max skips it) maps to 0,
/// as `NaN as i8` does in the reference.
#[inline(always)]
pub fn round_q8(x: f32) -> i8 {
    let c = x.clamp(-Q8_MAX, Q8_MAX);
    let t = c as i32;
    let f = c - t as f32;
    (t + (f >= 0.5) as i32 - (f <= -0.5) as i32) as i8
}

/// Largest int16 magnitude used for activations of int8 matmuls.
pub const A16_MAX: f32 = 32767.0;

/// Quantizes one activation row to int16 for the int8 matmul:
/// `scale = max |x| / 32767`, `q = round_half_even(x / scale)`; returns the scale (0
/// for an all-zero row, NaN when the row holds a non-finite value, which
/// then poisons the row's outputs as f32 arithmetic would). The rounding
/// error of an element is at most `scale / 2 = max|x| / 65534`, ~65x finer
/// than the int8 weight step, so the weights' rounding dominates.
pub fn quantize_a16_row(x: &[f32], q: &mut [i16]) -> f32 {
    assert_eq!(x.len(), q.len(), "quantize_a16_row: length mismatch");
    let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    // f32::max skips NaN, so look for it separately.
    if !max.is_finite() || x.iter().any(|v| v.is_nan()) {
        q.fill(0);
        return f32::NAN;
    }
    if max == 0.0 {
        q.fill(0);
        return 0.0;
    }
    let inv = A16_MAX / max;
    // Round half to even by the 1.5 * 2^23 trick: |v * inv| <= 32767, so
    // adding the constant leaves no fraction bits and subtracting it is
    // exact. Plain adds vectorize without SSE4.1; `f32::round` would be a
    // libm call per element (~15 us for k = 3072, 10% of a decode matvec).
    const MAGIC: f32 = 12_582_912.0;
    for (d, &v) in q.iter_mut().zip(x) {
        *d = (((v * inv).clamp(-A16_MAX, A16_MAX) + MAGIC) - MAGIC) as i16;
    }
    max / A16_MAX
}

impl GroupFormat {
    /// The [`Mat`] of this format over stored parts.
    pub fn mat<'a>(
        self,
        data: &'a [u8],
        group_scales: &'a [u8],
        scales: &'a [f32],
        rows: usize,
        cols: usize,
    ) -> Mat<'a> {
        match self {
            GroupFormat::Q4 => Mat::Q4 {
                data,
                group_scales,
                scales,
                rows,
                cols,
            },
            GroupFormat::Iq4 => Mat::Iq4 {
                data,
                group_scales,
                scales,
                rows,
                cols,
            },
            GroupFormat::Q6 => Mat::Q6 {
                data,
                group_scales,
                scales,
                rows,
                cols,
            },
        }
    }
}

/// The parts of a group-wise [`Mat`]: its format, data, group scales and
/// row scales.
pub type GroupParts<'a> = (GroupFormat, &'a [u8], &'a [u8], &'a [f32]);

impl<'a> Mat<'a> {
    /// The format and parts of a group-wise weight, `None` for the others.
    pub fn group_parts(&self) -> Option<GroupParts<'a>> {
        match *self {
            Mat::Q4 {
                data,
                group_scales,
                scales,
                ..
            } => Some((GroupFormat::Q4, data, group_scales, scales)),
            Mat::Iq4 {
                data,
                group_scales,
                scales,
                ..
            } => Some((GroupFormat::Iq4, data, group_scales, scales)),
            Mat::Q6 {
                data,
                group_scales,
                scales,
                ..
            } => Some((GroupFormat::Q6, data, group_scales, scales)),
            _ => None,
        }
    }

    /// A group-wise weight as its kernels take it, `None` for the others.
    pub(crate) fn group_mat(&self) -> Option<GroupMat<'a>> {
        let (format, data, group_scales, scales) = self.group_parts()?;
        Some(GroupMat {
            format,
            data,
            group_scales,
            scales,
            rows: self.rows(),
            cols: self.cols(),
        })
    }

    /// An int8 weight as its kernels take it, `None` for the others.
    pub(crate) fn q8_mat(&self) -> Option<Q8Mat<'a>> {
        match *self {
            Mat::Q8 {
                data,
                scales,
                rows,
                cols,
            } => Some(Q8Mat {
                data,
                scales,
                rows,
                cols,
            }),
            _ => None,
        }
    }
}

/// A group-wise weight (q4, iq4, q6: `[rows, cols]` in `format`'s layout)
/// as the reference and the group kernels take it: the fields of its
/// [`Mat`] that travel together, in one `Copy` view.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupMat<'a> {
    pub(crate) format: GroupFormat,
    pub(crate) data: &'a [u8],
    pub(crate) group_scales: &'a [u8],
    pub(crate) scales: &'a [f32],
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

/// An int8 weight (`[rows, cols]`, one scale per row) as the reference and
/// the int8 kernels take it: the fields of [`Mat::Q8`] in one `Copy` view.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Q8Mat<'a> {
    pub(crate) data: &'a [i8],
    pub(crate) scales: &'a [f32],
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

#[cfg(test)]
mod q8_tests {
    use super::*;

    /// The libm-`round` quantizer as it was before [`round_q8`]: the
    /// reference the fast row quantizer must match bit for bit.
    fn quantize_q8_row_reference(src: &[f32], dst: &mut [i8]) -> f32 {
        let max = src.iter().fold(0f32, |m, v| m.max(v.abs()));
        if max == 0.0 || !max.is_finite() {
            dst.fill(0);
            return if max == 0.0 { 0.0 } else { f32::NAN };
        }
        let inv = Q8_MAX / max;
        for (d, &v) in dst.iter_mut().zip(src) {
            *d = (v * inv).round().clamp(-Q8_MAX, Q8_MAX) as i8;
        }
        max / Q8_MAX
    }

    fn reference_round(x: f32) -> i8 {
        x.round().clamp(-Q8_MAX, Q8_MAX) as i8
    }

    #[test]
    fn round_q8_matches_round_on_edge_cases() {
        let mut cases = vec![
            0.0f32,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            126.5,
            -126.5,
            127.0,
            -127.0,
            127.4,
            -127.4,
            127.5,
            -127.5,
            128.0,
            -128.0,
            1e9,
            -1e9,
            0.49999997,
            -0.49999997,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1e-45,
            -1e-45,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        // Every half-integer in range and the 64 floats either side of it.
        for k in -128..=127 {
            let h = k as f32 + 0.5;
            cases.push(h);
            let (mut up, mut down) = (h, h);
            for _ in 0..64 {
                up = f32::from_bits(if up > 0.0 {
                    up.to_bits() + 1
                } else {
                    up.to_bits() - 1
                });
                down = f32::from_bits(if down > 0.0 {
                    down.to_bits() - 1
                } else {
                    down.to_bits() + 1
                });
                cases.push(up);
                cases.push(down);
            }
        }
        for x in cases {
            assert_eq!(
                round_q8(x),
                reference_round(x),
                "x = {x:e} ({:#x})",
                x.to_bits()
            );
        }
        assert_eq!(round_q8(-0.0), 0);
        assert_eq!(round_q8(0.5), 1);
        assert_eq!(round_q8(-0.5), -1);
        assert_eq!(round_q8(126.5), 127);
        assert_eq!(round_q8(-126.5), -127);
        assert_eq!(round_q8(0.49999997), 0);
        assert_eq!(round_q8(-2.4999998), -2);
    }

    /// Every `step`-th f32 bit pattern with |x| <= 128, both signs.
    fn sweep(step: u32) {
        let top = 128f32.to_bits();
        let mut b = 0u32;
        while b <= top {
            for x in [f32::from_bits(b), -f32::from_bits(b)] {
                assert_eq!(round_q8(x), reference_round(x), "x = {x:e}");
            }
            b += step;
        }
    }

    #[test]
    fn round_q8_matches_round_on_a_sweep_of_all_magnitudes() {
        sweep(97);
    }

    /// All 2.2e9 floats of |x| <= 128 (~20 s): `cargo test --release -p
    /// tts-kernels round_q8_exhaustive -- --ignored`.
    #[test]
    #[ignore]
    fn round_q8_exhaustive() {
        sweep(1);
    }

    #[test]
    fn row_quantizer_matches_the_libm_reference() {
        let mut z = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            z
        };
        for cols in [1usize, 7, 64, 1000, 3072] {
            for row in 0..20 {
                let src: Vec<f32> = (0..cols)
                    .map(|i| {
                        let u = (next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                        match row % 4 {
                            0 => u,
                            1 => u * 1e-3,
                            // Exact half steps: multiples of max/254.
                            2 => ((next() % 255) as f32 - 127.0) * 0.5 / 127.0,
                            _ => {
                                if i % 3 == 0 {
                                    -0.0
                                } else {
                                    u * 37.0
                                }
                            }
                        }
                    })
                    .collect();
                let (mut a, mut b) = (vec![0i8; cols], vec![0i8; cols]);
                let sa = quantize_q8_row(&src, &mut a);
                let sb = quantize_q8_row_reference(&src, &mut b);
                assert_eq!(a, b, "cols {cols} row {row}");
                assert_eq!(sa.to_bits(), sb.to_bits());
            }
        }
        for special in [
            vec![0f32; 5],
            vec![1.0, f32::NAN, 2.0],
            vec![f32::INFINITY, 1.0],
        ] {
            let (mut a, mut b) = (vec![1i8; special.len()], vec![1i8; special.len()]);
            let sa = quantize_q8_row(&special, &mut a);
            let sb = quantize_q8_row_reference(&special, &mut b);
            assert_eq!(a, b);
            assert_eq!(sa.to_bits(), sb.to_bits());
        }
    }
}
