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
//! [`Precision::Q4`] converts the same layers to 4-bit group-wise weights
//! (groups of 32 inputs with a u8 scale each and an f32 per row: 4.25 bits
//! per weight; format in [`tts_kernels::q4`]); its matmul quantizes
//! activations to int8 per row and sums in exact integers.
//!
//! [`Precision::Iq4`] is the same 4.25 bits on a better grid: IQ4_NL's
//! non-linear 16-level table with least-squares group scales (i8) and an
//! f32 row scale ([`tts_kernels::iq4`]); [`Precision::Q6`] is 6-bit
//! group-wise, 6.25 bits per weight ([`tts_kernels::q6`]). Both keep q4's
//! exact-integer matmul with int8 activations.
//!
//! Decode reads every weight once per step, so the bytes per weight set the
//! floor: int8 halves the bytes of bf16 and q4 nearly halves them again
//! (see docs/performance.md for the measured speed and the fidelity gates
//! in tests/it/precision.rs).
//!
//! What each tensor class of each stage is converted to is a
//! [`PrecisionPlan`] ([`plan`]: the classes, the named presets
//! `reference`/`balanced`/`fast` and the `--precision` grammar); a
//! [`Precision`] per stage is its uniform case.

pub mod plan;

pub use plan::{PlanError, PrecisionPlan, Preset, StagePlan, TensorClass};

use rayon::prelude::*;
use tts_kernels::{quantize_q8_row, GroupFormat, Mat, Q4Rows};

use crate::weight::Weight;

/// Storage precision of an LM's linear layers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// The checkpoint's stored weights (bf16 or f32), f32 compute.
    #[default]
    F32,
    /// Int8 weights, one f32 scale per output channel, f32 compute.
    Int8,
    /// 4-bit weights in groups of 32 inputs (u8 group scale, f32 row
    /// scale), int8 activations, exact integer sums.
    Q4,
    /// 4-bit weights on IQ4_NL's non-linear grid (i8 least-squares group
    /// scale, f32 row scale; 4.25 bits), int8 activations, exact sums.
    Iq4,
    /// 6-bit weights in groups of 32 (u8 group scale, f32 row scale; 6.25
    /// bits), int8 activations, exact integer sums.
    Q6,
}

impl Precision {
    pub const ALL: [Precision; 5] = [
        Precision::F32,
        Precision::Int8,
        Precision::Q4,
        Precision::Iq4,
        Precision::Q6,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Int8 => "int8",
            Precision::Q4 => "q4",
            Precision::Iq4 => "iq4",
            Precision::Q6 => "q6",
        }
    }

    /// The group-wise kernel format of this precision (`None` for f32 and
    /// int8).
    pub fn group_format(self) -> Option<GroupFormat> {
        match self {
            Precision::F32 | Precision::Int8 => None,
            Precision::Q4 => Some(GroupFormat::Q4),
            Precision::Iq4 => Some(GroupFormat::Iq4),
            Precision::Q6 => Some(GroupFormat::Q6),
        }
    }

    /// Parses `f32` (alias `bf16`, `native`: the stored weights), `int8`
    /// (alias `i8`, `q8`), `q4`, `iq4` (alias `iq4_nl`) or `q6`.
    pub fn from_name(s: &str) -> Option<Precision> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "bf16" | "native" => Some(Precision::F32),
            "int8" | "i8" | "q8" => Some(Precision::Int8),
            "q4" => Some(Precision::Q4),
            "iq4" | "iq4_nl" => Some(Precision::Iq4),
            "q6" => Some(Precision::Q6),
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
            .ok_or_else(|| format!("unknown precision {s:?}; expected f32, int8, q4, iq4 or q6"))
    }
}

/// Compute precision of code2wav's dense convolutions, chosen at load.
///
/// [`Code2WavPrecision::F32`] (the default, what the goldens compare) runs
/// the stored f32 weights. [`Code2WavPrecision::Bf16`] converts every dense
/// conv and transposed conv of the decoder (groups = 1: `pre_conv`, the
/// upsampling transposed convs, `decoder.0`, every vocoder block's
/// transposed conv and residual convs, the output conv) to bf16 once at
/// load, rounds activations to bf16 as they enter the dot product and
/// accumulates in f32 (`tts_kernels::conv_bf16`: `vdpbf16ps` on CPUs with
/// avx512_bf16, a bit-identical f32-FMA emulation elsewhere). The
/// transformer's linears and the ConvNeXt pointwise MLPs get bf16 weights
/// too (rounded once at load; f32 activations and accumulation, the LMs'
/// bf16 matmul): at a streaming step of one frame they are read for one
/// row each, so their bytes, not their multiply-adds, are their cost. The
/// depthwise conv, norms, SnakeBeta and the dequantizer stay f32. Fidelity gate:
/// tests/it/precision_codec.rs; speed: docs/performance.md.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Code2WavPrecision {
    #[default]
    F32,
    Bf16,
}

impl Code2WavPrecision {
    pub const ALL: [Code2WavPrecision; 2] = [Code2WavPrecision::F32, Code2WavPrecision::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            Code2WavPrecision::F32 => "f32",
            Code2WavPrecision::Bf16 => "bf16",
        }
    }

    /// Parses `f32` or `bf16` (case-insensitive).
    pub fn from_name(s: &str) -> Option<Code2WavPrecision> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" => Some(Code2WavPrecision::F32),
            "bf16" => Some(Code2WavPrecision::Bf16),
            _ => None,
        }
    }
}

impl std::fmt::Display for Code2WavPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Code2WavPrecision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Code2WavPrecision::from_name(s)
            .ok_or_else(|| format!("unknown code2wav precision {s:?}; expected f32 or bf16"))
    }
}

/// `w` converted to `precision` (`F32` returns it unchanged).
pub fn convert(w: Weight, precision: Precision) -> Weight {
    match precision {
        Precision::F32 => w,
        Precision::Int8 => quantize_q8(&w),
        Precision::Q4 | Precision::Iq4 | Precision::Q6 => quantize_group(
            &w,
            precision
                .group_format()
                .expect("a group-wise precision has a format"),
        ),
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

/// Group-wise 4-bit copy of `w` (see [`quantize_group`]).
pub fn quantize_q4(w: &Weight) -> Weight {
    quantize_group(w, GroupFormat::Q4)
}

/// Group-wise copy of `w` in `format` (from its f32 values; an int8 or
/// group-wise weight is dequantized first, so prefer converting the stored
/// weights).
pub fn quantize_group(w: &Weight, format: GroupFormat) -> Weight {
    let (rows, cols) = (w.rows(), w.cols());
    let mat = w.mat();
    let (rb, rg) = (format.row_bytes(cols), format.row_groups(cols));
    let mut q = Q4Rows {
        data: vec![0; rows * rb],
        group_scales: vec![0; rows * rg],
        scales: vec![0.0; rows],
    };
    if cols > 0 {
        q.data
            .par_chunks_mut(ROWS_PER_TASK * rb)
            .zip(q.group_scales.par_chunks_mut(ROWS_PER_TASK * rg))
            .zip(q.scales.par_chunks_mut(ROWS_PER_TASK))
            .enumerate()
            .for_each(|(t, ((d, g), s))| {
                let mut row = vec![0f32; cols];
                for (i, ((dr, gr), sr)) in d
                    .chunks_exact_mut(rb)
                    .zip(g.chunks_exact_mut(rg))
                    .zip(s.iter_mut())
                    .enumerate()
                {
                    mat.row_to_f32(t * ROWS_PER_TASK + i, &mut row);
                    *sr = format.quantize_row(&row, dr, gr);
                }
            });
    }
    Weight::from_group(format, rows, cols, q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tts_kernels::q4::{q4_row_bytes, q4_row_groups};

    #[test]
    fn names_round_trip_and_aliases_parse() {
        for p in Precision::ALL {
            assert_eq!(p.name().parse::<Precision>(), Ok(p));
        }
        assert_eq!("Q4".parse::<Precision>(), Ok(Precision::Q4));
        assert_eq!("bf16".parse::<Precision>(), Ok(Precision::F32));
        let e = "q3".parse::<Precision>().unwrap_err();
        assert!(e.contains("q4"), "{e}");
        for p in Code2WavPrecision::ALL {
            assert_eq!(p.name().parse::<Code2WavPrecision>(), Ok(p));
        }
        assert_eq!(
            "BF16".parse::<Code2WavPrecision>(),
            Ok(Code2WavPrecision::Bf16)
        );
        let e = "int8".parse::<Code2WavPrecision>().unwrap_err();
        assert!(e.contains("code2wav") && e.contains("bf16"), "{e}");
    }

    /// The parallel conversion equals the single-threaded kernel quantizer
    /// (rows not a multiple of the task size).
    #[test]
    fn int8_conversion_matches_the_kernel_quantizer() {
        for (rows, cols) in [(130, 96), (1, 7), (64, 33)] {
            let v: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let (want_q, want_s) = tts_kernels::quantize_q8_rows(&v, rows, cols);
            match convert(Weight::from_f32(rows, cols, v), Precision::Int8).mat() {
                Mat::Q8 { data, scales, .. } => {
                    assert_eq!(data, &want_q[..]);
                    let bits = |s: &[f32]| s.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(scales), bits(&want_s));
                }
                _ => panic!("not Q8"),
            }
        }
    }

    #[test]
    fn q4_conversion_matches_the_kernel_quantizer() {
        let (rows, cols) = (70, 96);
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let want = tts_kernels::quantize_q4_rows(&v, rows, cols);
        let w = convert(Weight::from_f32(rows, cols, v), Precision::Q4);
        match w.mat() {
            Mat::Q4 {
                data,
                group_scales,
                scales,
                ..
            } => {
                assert_eq!(data, &want.data[..]);
                assert_eq!(group_scales, &want.group_scales[..]);
                assert_eq!(scales, &want.scales[..]);
            }
            _ => panic!("not Q4"),
        }
        assert_eq!(
            w.bytes(),
            rows * (q4_row_bytes(cols) + q4_row_groups(cols) + 4)
        );
    }

    #[test]
    fn iq4_and_q6_conversions_match_the_kernel_quantizers() {
        let (rows, cols) = (70, 600);
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        for p in [Precision::Iq4, Precision::Q6] {
            let f = p.group_format().unwrap();
            let want = f.quantize_rows(&v, rows, cols);
            let w = convert(Weight::from_f32(rows, cols, v.clone()), p);
            let (got_f, data, gs, scales) = w.mat().group_parts().expect("group-wise");
            assert_eq!(got_f, f);
            assert_eq!(data, &want.data[..], "{p}");
            assert_eq!(gs, &want.group_scales[..], "{p}");
            assert_eq!(scales, &want.scales[..], "{p}");
            assert_eq!(
                w.bytes(),
                rows * (f.row_bytes(cols) + f.row_groups(cols) + 4)
            );
        }
        assert_eq!("IQ4_NL".parse::<Precision>(), Ok(Precision::Iq4));
        assert_eq!("q6".parse::<Precision>(), Ok(Precision::Q6));
    }
}
