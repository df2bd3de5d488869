//! The group-wise low-bit weight formats as one family: [`GroupFormat`]
//! names a format ([`crate::Mat::Q4`], [`crate::Mat::Iq4`],
//! [`crate::Mat::Q6`]) and gives what storage, conversion and caching need
//! without matching each variant: the bytes of a stored row, its group
//! scales and the row quantizer (the [`crate::Mat`] view of stored parts
//! is made in `mat.rs`, beside `Mat`).
//!
//! All three store a matrix as the same three parts ([`crate::Q4Rows`]):
//! `data` (`[rows, row_bytes(cols)]`), `group_scales` (`[rows,
//! row_groups(cols)]`, one byte per group of 32 inputs) and `scales` (one
//! f32 per row), rows padded to 512-input super-blocks, and all three
//! dequantize as `(q * s_group) as f32 * d_row` with integer `q` and `s`, so
//! their matmuls sum exact integers.

use crate::q4::{q4_row_bytes, q4_row_groups, Q4Rows};

/// One of the group-wise formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupFormat {
    /// Linear 4-bit, `q in [-8, 7]`, u8 group scales ([`crate::q4`]).
    Q4,
    /// Non-linear 4-bit (the IQ4_NL table), i8 group scales
    /// ([`crate::iq4`]).
    Iq4,
    /// Linear 6-bit, `q in [-32, 31]`, u8 group scales ([`crate::q6`]).
    Q6,
}

impl GroupFormat {
    pub const ALL: [GroupFormat; 3] = [GroupFormat::Q4, GroupFormat::Iq4, GroupFormat::Q6];

    pub fn name(self) -> &'static str {
        match self {
            GroupFormat::Q4 => "q4",
            GroupFormat::Iq4 => "iq4",
            GroupFormat::Q6 => "q6",
        }
    }

    /// Bits per weight of a row whose length is a multiple of 512 (the
    /// f32 row scale excluded): data plus one scale byte per 32 weights.
    pub fn bits_per_weight(self) -> f64 {
        match self {
            GroupFormat::Q4 | GroupFormat::Iq4 => 4.25,
            GroupFormat::Q6 => 6.25,
        }
    }

    /// Bytes of `data` per stored row of `cols` inputs.
    pub fn row_bytes(self, cols: usize) -> usize {
        match self {
            GroupFormat::Q4 | GroupFormat::Iq4 => q4_row_bytes(cols),
            GroupFormat::Q6 => crate::q6::q6_row_bytes(cols),
        }
    }

    /// Group scales per stored row (padding groups included).
    pub fn row_groups(self, cols: usize) -> usize {
        q4_row_groups(cols)
    }

    /// Quantizes one row of `src.len()` inputs into `data`
    /// (`row_bytes`) and `group_scales` (`row_groups`); returns the row
    /// scale.
    pub fn quantize_row(self, src: &[f32], data: &mut [u8], group_scales: &mut [u8]) -> f32 {
        match self {
            GroupFormat::Q4 => crate::q4::quantize_q4_row(src, data, group_scales),
            GroupFormat::Iq4 => crate::iq4::quantize_iq4_row(src, data, group_scales),
            GroupFormat::Q6 => crate::q6::quantize_q6_row(src, data, group_scales),
        }
    }

    /// Quantizes a row-major `[rows, cols]` f32 matrix.
    pub fn quantize_rows(self, w: &[f32], rows: usize, cols: usize) -> Q4Rows {
        assert_eq!(w.len(), rows * cols, "quantize_rows: w is not [rows, cols]");
        let (rb, rg) = (self.row_bytes(cols), self.row_groups(cols));
        let mut out = Q4Rows {
            data: vec![0; rows * rb],
            group_scales: vec![0; rows * rg],
            scales: vec![0.0; rows],
        };
        for r in 0..rows {
            out.scales[r] = self.quantize_row(
                &w[r * cols..(r + 1) * cols],
                &mut out.data[r * rb..(r + 1) * rb],
                &mut out.group_scales[r * rg..(r + 1) * rg],
            );
        }
        out
    }
}

impl std::fmt::Display for GroupFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
