//! Weight precision of the two LMs, chosen per stage at load time.
//!
//! [`Precision::F32`] runs the checkpoint's own weights (bf16 or f32 in the
//! map, zero copy) with f32 compute: the parity-tested path.
//! [`Precision::Int8`] converts every linear layer of the decoder stack
//! (q/k/v/o, gate/up/down) to symmetric int8 with one scale per output
//! channel when the model loads; compute stays f32 (weight-only
//! quantization: the kernels widen int8 to f32 in registers). Embedding
//! tables, the output heads, the text projection and the small
//! `small_to_mtp_projection` keep the stored precision: they are ~2% of the
//! bytes a frame reads and they touch the logits directly.
//!
//! Decode reads every weight once per step, so the bytes per weight set the
//! floor: int8 halves the bytes of bf16 (see docs/performance.md for the
//! measured speed and the fidelity gates in tests/precision.rs).

use rayon::prelude::*;
use tts_kernels::{quantize_q8_row, Mat};

use crate::checkpoint::Weight;

/// Storage precision of an LM's linear layers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// The checkpoint's stored weights (bf16 or f32), f32 compute.
    #[default]
    F32,
    /// Int8 weights, one f32 scale per output channel, f32 compute.
    Int8,
}

impl Precision {
    pub const ALL: [Precision; 2] = [Precision::F32, Precision::Int8];

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Int8 => "int8",
        }
    }

    /// Parses `f32` (alias `bf16`, `native`: the stored weights) or `int8`
    /// (alias `i8`, `q8`).
    pub fn from_name(s: &str) -> Option<Precision> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "bf16" | "native" => Some(Precision::F32),
            "int8" | "i8" | "q8" => Some(Precision::Int8),
            _ => None,
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Precision::from_name(s)
            .ok_or_else(|| format!("unknown precision {s:?}; expected f32 or int8"))
    }
}

/// `w` converted to `precision` (`F32` returns it unchanged).
pub fn convert(w: Weight, precision: Precision) -> Weight {
    match precision {
        Precision::F32 => w,
        Precision::Int8 => quantize_q8(&w),
    }
}

/// Rows quantized in parallel: a 0.6B talker + predictor is ~520M weights,
/// ~1 s single-threaded.
const ROWS_PER_TASK: usize = 64;

/// Per-row symmetric int8 copy of `w` (already int8: a copy).
pub fn quantize_q8(w: &Weight) -> Weight {
    let (rows, cols) = (w.rows(), w.cols());
    let mat = w.mat();
    let mut data = vec![0i8; rows * cols];
    let mut scales = vec![0f32; rows];
    if cols > 0 {
        data.par_chunks_mut(ROWS_PER_TASK * cols)
            .zip(scales.par_chunks_mut(ROWS_PER_TASK))
            .enumerate()
            .for_each(|(t, (q, s))| {
                let mut row = vec![0f32; cols];
                for (i, (qr, sr)) in q.chunks_exact_mut(cols).zip(s.iter_mut()).enumerate() {
                    let r = t * ROWS_PER_TASK + i;
                    match mat {
                        Mat::Q8 { data, scales, .. } => {
                            qr.copy_from_slice(&data[r * cols..(r + 1) * cols]);
                            *sr = scales[r];
                        }
                        _ => {
                            mat.row_to_f32(r, &mut row);
                            *sr = quantize_q8_row(&row, qr);
                        }
                    }
                }
            });
    }
    Weight::from_q8(rows, cols, data, scales)
}
