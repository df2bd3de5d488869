//! Weight matrices as the kernels take them: f32 or bf16 borrowed from a
//! checkpoint's memory map (zero copy) or owned, and int8 / group-wise
//! (q4, iq4, q6) weights
//! converted at load time ([`crate::quant`]) or mapped from a weights cache
//! file ([`crate::wcache`]). Below both the checkpoint reader and the
//! converters, so neither has to import the other.

use std::sync::Arc;

use tts_kernels::{bf16_to_f32, GroupFormat, Mat};

use crate::mmap::MappedFile;

/// A weight matrix `[rows, cols]` ready for [`tts_kernels::matmul`]: f32 or
/// bf16, either borrowed from the memory map (zero copy) or owned; or int8
/// with per-row scales or group-wise (q4, iq4, q6), quantized at load time (see
/// [`crate::quant`]).
pub struct Weight {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) data: WeightData,
}

pub(crate) enum WeightData {
    MappedF32(Arc<MappedFile>, usize),
    MappedBf16(Arc<MappedFile>, usize),
    OwnedF32(Vec<f32>),
    OwnedBf16(Vec<u16>),
    OwnedQ8 {
        data: Vec<i8>,
        scales: Vec<f32>,
    },
    /// Group-wise weights (`tts_kernels::group`): the format and its parts.
    OwnedGroup(GroupFormat, tts_kernels::Q4Rows),
    /// Int8 weights in a weights cache file (`crate::wcache`): byte
    /// offsets of the `[rows, cols]` i8 data and the `[rows]` f32 scales.
    MappedQ8 {
        file: Arc<MappedFile>,
        data: usize,
        scales: usize,
    },
    /// Group-wise weights in a weights cache file: the format, byte
    /// offsets of the data, the group scales and the f32 row scales.
    MappedGroup {
        format: GroupFormat,
        file: Arc<MappedFile>,
        data: usize,
        group_scales: usize,
        scales: usize,
    },
}

impl Weight {
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn mat(&self) -> Mat<'_> {
        let (rows, cols, n) = (self.rows, self.cols, self.rows * self.cols);
        match &self.data {
            WeightData::MappedF32(f, off) => Mat::F32 {
                data: f.f32s(*off, n),
                rows,
                cols,
            },
            WeightData::MappedBf16(f, off) => Mat::Bf16 {
                data: f.u16s(*off, n),
                rows,
                cols,
            },
            WeightData::OwnedF32(v) => Mat::F32 {
                data: v,
                rows,
                cols,
            },
            WeightData::OwnedBf16(v) => Mat::Bf16 {
                data: v,
                rows,
                cols,
            },
            WeightData::OwnedQ8 { data, scales } => Mat::Q8 {
                data,
                scales,
                rows,
                cols,
            },
            WeightData::OwnedGroup(f, q) => f.mat(&q.data, &q.group_scales, &q.scales, rows, cols),
            WeightData::MappedQ8 { file, data, scales } => Mat::Q8 {
                data: file.i8s(*data, n),
                scales: file.f32s(*scales, rows),
                rows,
                cols,
            },
            WeightData::MappedGroup {
                format,
                file,
                data,
                group_scales,
                scales,
            } => {
                let (rb, rg) = (format.row_bytes(cols), format.row_groups(cols));
                let b = file.bytes();
                format.mat(
                    &b[*data..*data + rows * rb],
                    &b[*group_scales..*group_scales + rows * rg],
                    file.f32s(*scales, rows),
                    rows,
                    cols,
                )
            }
        }
    }
    /// Int8 weights viewed in a mapped weights cache file (zero copy), or
    /// None when the ranges do not fit the file or the scales are
    /// misaligned.
    pub(crate) fn mapped_q8(
        file: Arc<MappedFile>,
        rows: usize,
        cols: usize,
        data: usize,
        scales: usize,
    ) -> Option<Self> {
        let len = file.bytes().len();
        let fits = |off: usize, n: usize| off.checked_add(n).is_some_and(|e| e <= len);
        let ok = fits(data, rows.checked_mul(cols)?)
            && fits(scales, rows.checked_mul(4)?)
            && file.f32_aligned(scales);
        ok.then_some(Weight {
            rows,
            cols,
            data: WeightData::MappedQ8 { file, data, scales },
        })
    }
    /// Group-wise weights viewed in a mapped weights cache file (see
    /// [`Self::mapped_q8`]).
    pub(crate) fn mapped_group(
        format: GroupFormat,
        file: Arc<MappedFile>,
        rows: usize,
        cols: usize,
        [data, group_scales, scales]: [usize; 3],
    ) -> Option<Self> {
        let len = file.bytes().len();
        let fits = |off: usize, n: usize| off.checked_add(n).is_some_and(|e| e <= len);
        let (rb, rg) = (format.row_bytes(cols), format.row_groups(cols));
        let ok = fits(data, rows.checked_mul(rb)?)
            && fits(group_scales, rows.checked_mul(rg)?)
            && fits(scales, rows.checked_mul(4)?)
            && file.f32_aligned(scales);
        ok.then_some(Weight {
            rows,
            cols,
            data: WeightData::MappedGroup {
                format,
                file,
                data,
                group_scales,
                scales,
            },
        })
    }
    /// Whether the data lives in a memory-mapped file (the checkpoint or a
    /// weights cache): shared page cache, not anonymous memory.
    pub fn is_file_backed(&self) -> bool {
        matches!(
            self.data,
            WeightData::MappedF32(..)
                | WeightData::MappedBf16(..)
                | WeightData::MappedQ8 { .. }
                | WeightData::MappedGroup { .. }
        )
    }
    /// Bytes of weight data (resident when touched; int8 includes its scales).
    pub fn bytes(&self) -> usize {
        self.mat().bytes()
    }
    /// Whether the data is int8 (owned or in a weights cache file).
    pub fn is_q8(&self) -> bool {
        matches!(
            self.data,
            WeightData::OwnedQ8 { .. } | WeightData::MappedQ8 { .. }
        )
    }
    /// Row `r` as f32 (embedding look-up).
    pub fn row_into(&self, r: usize, out: &mut [f32]) {
        self.mat().row_to_f32(r, out)
    }
    /// Adds row `r` into `out` (summing embeddings without a temporary).
    pub fn add_row_into(&self, r: usize, out: &mut [f32]) {
        match self.mat() {
            Mat::F32 { data, cols, .. } => {
                for (o, &v) in out.iter_mut().zip(&data[r * cols..(r + 1) * cols]) {
                    *o += v;
                }
            }
            Mat::Bf16 { data, cols, .. } => {
                for (o, &v) in out.iter_mut().zip(&data[r * cols..(r + 1) * cols]) {
                    *o += bf16_to_f32(v);
                }
            }
            Mat::Q8 {
                data, scales, cols, ..
            } => {
                let s = scales[r];
                for (o, &q) in out.iter_mut().zip(&data[r * cols..(r + 1) * cols]) {
                    *o += q as f32 * s;
                }
            }
            m @ (Mat::Q4 { .. } | Mat::Iq4 { .. } | Mat::Q6 { .. }) => {
                let mut row = vec![0f32; m.cols()];
                m.row_to_f32(r, &mut row);
                for (o, v) in out.iter_mut().zip(row) {
                    *o += v;
                }
            }
        }
    }
    /// An owned int8 weight: `data` is `[rows, cols]`, `scales` `[rows]`.
    pub fn from_q8(rows: usize, cols: usize, data: Vec<i8>, scales: Vec<f32>) -> Self {
        assert_eq!(data.len(), rows * cols);
        assert_eq!(scales.len(), rows);
        Weight {
            rows,
            cols,
            data: WeightData::OwnedQ8 { data, scales },
        }
    }
    /// An owned 4-bit group-wise weight ([`tts_kernels::q4`] layout for
    /// `[rows, cols]`).
    pub fn from_q4(rows: usize, cols: usize, q: tts_kernels::Q4Rows) -> Self {
        Self::from_group(GroupFormat::Q4, rows, cols, q)
    }
    /// An owned group-wise weight of `format` (its layout for `[rows,
    /// cols]`, see [`tts_kernels::group`]).
    pub fn from_group(
        format: GroupFormat,
        rows: usize,
        cols: usize,
        q: tts_kernels::Q4Rows,
    ) -> Self {
        assert_eq!(q.data.len(), rows * format.row_bytes(cols));
        assert_eq!(q.group_scales.len(), rows * format.row_groups(cols));
        assert_eq!(q.scales.len(), rows);
        Weight {
            rows,
            cols,
            data: WeightData::OwnedGroup(format, q),
        }
    }
    /// This weight with bf16 elements (round to nearest even, as PyTorch's
    /// `.to(torch.bfloat16)`): f32 (and any f16 widened to f32) is rounded
    /// into an owned copy; bf16 is returned as it is. Quantized weights are
    /// not float and are returned unchanged.
    pub fn to_bf16(self) -> Self {
        let data = match self.mat() {
            Mat::F32 { data, .. } => {
                WeightData::OwnedBf16(data.iter().map(|&v| tts_kernels::f32_to_bf16(v)).collect())
            }
            _ => return self,
        };
        Weight { data, ..self }
    }
    /// An owned f32 weight (tests, generated checkpoints).
    pub fn from_f32(rows: usize, cols: usize, data: Vec<f32>) -> Self {
        assert_eq!(data.len(), rows * cols);
        Weight {
            rows,
            cols,
            data: WeightData::OwnedF32(data),
        }
    }
}

impl std::fmt::Debug for Weight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Weight[{}x{}]", self.rows, self.cols)
    }
}
