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
}

impl Mat<'_> {
    pub fn rows(&self) -> usize {
        match *self {
            Mat::F32 { rows, .. } | Mat::Bf16 { rows, .. } => rows,
        }
    }
    pub fn cols(&self) -> usize {
        match *self {
            Mat::F32 { cols, .. } | Mat::Bf16 { cols, .. } => cols,
        }
    }
    /// Row `r` widened to f32 into `out` (used for embedding look-ups).
    pub fn row_to_f32(&self, r: usize, out: &mut [f32]) {
        match *self {
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
