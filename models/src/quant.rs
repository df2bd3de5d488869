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

pub use plan::{KvFormat, PlanError, PrecisionPlan, Preset, StagePlan, TensorClass};

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
///
/// [`Code2WavPrecision::Int8`] runs the dense convolutions named by its
/// [`Code2WavLayers`] (a vocoder block's transposed conv as a dense conv
/// over its phases) in int8 (`tts_kernels::conv_q8`: weights per
/// output channel, activations per time column, exact i32 sums; AVX-512
/// VNNI `vpdpbusd` where the CPU has it) and everything else at `rest`
/// (`Bf16` as above, or `F32`). Spelled `int8` (the residual convs of
/// vocoder blocks 2-4 and the transposed convs of blocks 3-4,
/// [`Code2WavLayers::INT8_SET`], the rest bf16); per layer in a `--precision` plan
/// (`code2wav=int8,code2wav.decoder.4.conv1=bf16` opts a layer out,
/// `code2wav=int8,code2wav.decoder.0=int8` one in).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Code2WavPrecision {
    #[default]
    F32,
    Bf16,
    Int8 {
        layers: Code2WavLayers,
        /// Everything not int8 in bf16 (else f32).
        rest_bf16: bool,
    },
}

/// Which of code2wav's dense convolutions run in int8: a set of layers,
/// named as in the checkpoint (`decoder.B.trans` is the transposed conv that
/// upsamples vocoder block `B`, `decoder.B.conv1` the k7 conv of its three
/// residual units, `decoder.B.conv2` their 1x1; blocks 1..=8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Code2WavLayers(u32);

/// Vocoder blocks a [`Code2WavLayers`] can name.
const MAX_BLOCKS: usize = 8;

impl Code2WavLayers {
    pub const NONE: Code2WavLayers = Code2WavLayers(0);
    pub const ALL: Code2WavLayers = Code2WavLayers(u32::MAX);
    /// `pre_conv` (k3, before the transformer).
    pub const PRE_CONV: Code2WavLayers = Code2WavLayers(1);
    /// `decoder.0` (k7, the vocoder's input conv).
    pub const CONV_IN: Code2WavLayers = Code2WavLayers(2);
    /// The output conv (`decoder.6` at the official size: k7 to 1 channel).
    pub const CONV_OUT: Code2WavLayers = Code2WavLayers(4);
    /// Every vocoder block's residual convs (k7 and 1x1): ~75% of the
    /// decoder's multiply-adds.
    pub const RESIDUAL: Code2WavLayers = Code2WavLayers(0x00ff_ff00);
    /// Every residual conv (k7 and 1x1) of vocoder blocks 2, 3 and 4
    /// (`decoder.2`-`decoder.4`, `conv1` and `conv2`): ~45% of the
    /// decoder's multiply-adds, and a set whose int8 error keeps the
    /// full-size random 0.6B 1.6 dB above the official bf16's SNR
    /// (docs/performance.md, "int8 vocoder": block 1's 768-channel convs
    /// cost 21.8-22.6 dB each there, block 2's 25.4-26.8, the last two
    /// 31.1-39.5; every residual conv together falls under the bar).
    pub const LATE_RESIDUAL: Code2WavLayers = Code2WavLayers(0x000e_0e00);
    /// What `int8` runs in int8: [`Self::LATE_RESIDUAL`] and the transposed
    /// convs of vocoder blocks 3 and 4 (`decoder.3.trans`,
    /// `decoder.4.trans`), which cost the full-size random 0.6B 0.24 dB more
    /// (20.93 dB against the official bf16's 19.6; `decoder.2.trans` alone
    /// is 24.8 dB, and with it the set would fall under the bar).
    pub const INT8_SET: Code2WavLayers = Code2WavLayers(0x0c0e_0e00);

    /// The k7 residual convs of vocoder block `b` (0-based).
    pub fn conv1(b: usize) -> Code2WavLayers {
        assert!(b < MAX_BLOCKS);
        Code2WavLayers(1 << (8 + b))
    }

    /// The 1x1 residual convs of vocoder block `b` (0-based).
    pub fn conv2(b: usize) -> Code2WavLayers {
        assert!(b < MAX_BLOCKS);
        Code2WavLayers(1 << (16 + b))
    }

    /// The transposed conv of vocoder block `b` (0-based).
    pub fn trans(b: usize) -> Code2WavLayers {
        assert!(b < MAX_BLOCKS);
        Code2WavLayers(1 << (24 + b))
    }

    pub fn contains(self, l: Code2WavLayers) -> bool {
        self.0 & l.0 == l.0
    }

    pub fn with(self, l: Code2WavLayers) -> Code2WavLayers {
        Code2WavLayers(self.0 | l.0)
    }

    pub fn without(self, l: Code2WavLayers) -> Code2WavLayers {
        Code2WavLayers(self.0 & !l.0)
    }

    /// Every layer a decoder with `blocks` vocoder blocks has, with its
    /// name, in forward order.
    pub fn each(blocks: usize) -> Vec<(String, Code2WavLayers)> {
        let mut v = vec![
            ("pre_conv".to_string(), Self::PRE_CONV),
            ("decoder.0".to_string(), Self::CONV_IN),
        ];
        for b in 0..blocks.min(MAX_BLOCKS) {
            v.push((format!("decoder.{}.trans", b + 1), Self::trans(b)));
            v.push((format!("decoder.{}.conv1", b + 1), Self::conv1(b)));
            v.push((format!("decoder.{}.conv2", b + 1), Self::conv2(b)));
        }
        v.push(("conv_out".to_string(), Self::CONV_OUT));
        v
    }

    /// The layer called `name` (see [`Code2WavLayers::each`]).
    pub fn from_name(name: &str) -> Option<Code2WavLayers> {
        Self::each(MAX_BLOCKS)
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, l)| l)
    }

    /// The names a user may spell.
    pub fn spellings() -> String {
        "pre_conv, decoder.0, decoder.B.trans, decoder.B.conv1, decoder.B.conv2 (B = 1..8), conv_out".into()
    }
}

impl Code2WavPrecision {
    pub const ALL: [Code2WavPrecision; 3] = [
        Code2WavPrecision::F32,
        Code2WavPrecision::Bf16,
        Code2WavPrecision::INT8,
    ];

    /// The residual convs of vocoder blocks 2-4 and the transposed convs
    /// of blocks 3-4 int8 ([`Code2WavLayers::INT8_SET`]), the rest bf16:
    /// the spelling `int8`. Every other layer opts in one by one: with all
    /// of them the full-size random 0.6B falls 2.4 dB under the official
    /// bf16's SNR.
    pub const INT8: Code2WavPrecision = Code2WavPrecision::Int8 {
        layers: Code2WavLayers::INT8_SET,
        rest_bf16: true,
    };

    /// The name of a precision with one name (`f32`, `bf16`, `int8`); `None`
    /// for a per-layer int8 set ([`Code2WavPrecision::items`] spells it).
    pub fn simple_name(self) -> Option<&'static str> {
        match self {
            Code2WavPrecision::F32 => Some("f32"),
            Code2WavPrecision::Bf16 => Some("bf16"),
            p if p == Self::INT8 => Some("int8"),
            Code2WavPrecision::Int8 { .. } => None,
        }
    }

    /// `code2wav=...` items that [`crate::PrecisionPlan::parse`] reads
    /// back into this precision.
    pub fn items(self) -> Vec<String> {
        if let Some(n) = self.simple_name() {
            return vec![format!("code2wav={n}")];
        }
        let Code2WavPrecision::Int8 { layers, rest_bf16 } = self else {
            unreachable!("the simple precisions have names")
        };
        let every = Code2WavLayers::each(MAX_BLOCKS);
        let rest = if rest_bf16 { "bf16" } else { "f32" };
        let base = Code2WavLayers::INT8_SET;
        if rest_bf16 && 2 * (layers.0 & base.0).count_ones() >= base.0.count_ones() {
            // `int8` with opt-ins and opt-outs.
            let mut v = vec!["code2wav=int8".to_string()];
            for (n, l) in &every {
                match (layers.contains(*l), base.contains(*l)) {
                    (true, false) => v.push(format!("code2wav.{n}=int8")),
                    (false, true) => v.push(format!("code2wav.{n}=bf16")),
                    _ => {}
                }
            }
            return v;
        }
        let mut v = vec![format!("code2wav={rest}")];
        v.extend(
            every
                .iter()
                .filter(|(_, l)| layers.contains(*l))
                .map(|(n, _)| format!("code2wav.{n}=int8")),
        );
        v
    }

    pub fn name(self) -> String {
        match self.simple_name() {
            Some(n) => n.to_string(),
            None => self
                .items()
                .iter()
                .map(|i| i.trim_start_matches("code2wav="))
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// Whether what is not int8 runs in bf16.
    pub fn rest_bf16(self) -> bool {
        match self {
            Code2WavPrecision::F32 => false,
            Code2WavPrecision::Bf16 => true,
            Code2WavPrecision::Int8 { rest_bf16, .. } => rest_bf16,
        }
    }

    /// Whether `layer` runs in int8.
    pub fn int8(self, layer: Code2WavLayers) -> bool {
        matches!(self, Code2WavPrecision::Int8 { layers, .. } if layers.contains(layer))
    }

    /// This precision with `layer` set to `value` (`int8`, or the rest's
    /// precision: `bf16` or `f32`); an error says why not.
    pub fn set_layer(
        self,
        layer: Code2WavLayers,
        value: &str,
    ) -> Result<Code2WavPrecision, String> {
        let rest_bf16 = self.rest_bf16();
        let layers = match self {
            Code2WavPrecision::Int8 { layers, .. } => layers,
            _ => Code2WavLayers::NONE,
        };
        let v = value.trim().to_ascii_lowercase();
        let layers = match v.as_str() {
            "int8" | "i8" | "q8" => layers.with(layer),
            "bf16" | "f32" if (v == "bf16") == rest_bf16 => layers.without(layer),
            "bf16" | "f32" => {
                return Err(format!(
                    "a code2wav layer that is not int8 runs at the rest's precision ({}); set code2wav={v} first",
                    if rest_bf16 { "bf16" } else { "f32" }
                ))
            }
            _ => {
                return Err(format!(
                    "unknown code2wav layer precision {value:?}; expected int8, bf16 or f32"
                ))
            }
        };
        Ok(match (layers == Code2WavLayers::NONE, rest_bf16) {
            (true, false) => Code2WavPrecision::F32,
            (true, true) => Code2WavPrecision::Bf16,
            (false, _) => Code2WavPrecision::Int8 { layers, rest_bf16 },
        })
    }

    /// Parses `f32`, `bf16` or `int8` (case-insensitive).
    pub fn from_name(s: &str) -> Option<Code2WavPrecision> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" => Some(Code2WavPrecision::F32),
            "bf16" => Some(Code2WavPrecision::Bf16),
            "int8" | "i8" | "q8" => Some(Code2WavPrecision::INT8),
            _ => None,
        }
    }
}

impl std::fmt::Display for Code2WavPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl std::str::FromStr for Code2WavPrecision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Code2WavPrecision::from_name(s)
            .ok_or_else(|| format!("unknown code2wav precision {s:?}; expected f32, bf16 or int8"))
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
        assert_eq!(
            "int8".parse::<Code2WavPrecision>(),
            Ok(Code2WavPrecision::INT8)
        );
        let e = "int4".parse::<Code2WavPrecision>().unwrap_err();
        assert!(e.contains("code2wav") && e.contains("int8"), "{e}");
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
