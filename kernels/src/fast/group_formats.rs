//! Each group-wise format's kernels, by format: the one place that names
//! all three (q4, iq4, q6), consulted by the callers of
//! [`super::group::matmul`] and [`super::group::matmul_shared`].

use super::group::GroupKernels;
use crate::group::GroupFormat;

/// The kernels of `format`.
pub(crate) fn kernels(format: GroupFormat) -> &'static GroupKernels {
    match format {
        GroupFormat::Q4 => &super::q4::KERNELS,
        GroupFormat::Iq4 => &super::iq4::KERNELS,
        GroupFormat::Q6 => &super::q6::KERNELS,
    }
}
