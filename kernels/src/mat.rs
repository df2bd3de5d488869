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
}

impl Mat<'_> {
    pub fn rows(&self) -> usize {
        match *self {
            Mat::F32 { rows, .. }
            | Mat::Bf16 { rows, .. }
            | Mat::Q8 { rows, .. }
            | Mat::Q4 { rows, .. } => rows,
        }
    }
    pub fn cols(&self) -> usize {
        match *self {
            Mat::F32 { cols, .. }
            | Mat::Bf16 { cols, .. }
            | Mat::Q8 { cols, .. }
            | Mat::Q4 { cols, .. } => cols,
        }
    }
    /// Bytes of weight data (scales included) a full read touches.
    pub fn bytes(&self) -> usize {
        match *self {
            Mat::F32 { rows, cols, .. } => rows * cols * 4,
            Mat::Bf16 { rows, cols, .. } => rows * cols * 2,
            Mat::Q8 { rows, cols, .. } => rows * cols + rows * 4,
            Mat::Q4 { rows, cols, .. } => {
                rows * (crate::q4::q4_row_bytes(cols) + crate::q4::q4_row_groups(cols) + 4)
            }
        }
    }

    /// Row `r` widened to f32 into `out` (used for embedding look-ups);
    /// int8 rows are dequantized (`q * scale`), 4-bit ones as
    /// `(q * s_group) as f32 * scale`.
    pub fn row_to_f32(&self, r: usize, out: &mut [f32]) {
        match *self {
            Mat::Q4 {
                data,
                group_scales,
                scales,
                cols,
                ..
            } => {
                let (rb, rg) = (
                    crate::q4::q4_row_bytes(cols),
                    crate::q4::q4_row_groups(cols),
                );
                crate::q4::q4_row_to_f32(
                    &data[r * rb..(r + 1) * rb],
                    &group_scales[r * rg..(r + 1) * rg],
                    scales[r],
                    &mut out[..cols],
                );
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
        *d = (v * inv).round().clamp(-Q8_MAX, Q8_MAX) as i8;
    }
    max / Q8_MAX
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
