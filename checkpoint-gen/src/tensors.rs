//! A tensor list and the fan-in codes its entries use, shared by the
//! decoder lists (`lib.rs`) and the encoders' (`encoders`).

/// Tensor list: (name, shape, fan_in for scaling; 0 = norm-like "around 1",
/// [`SMALL`] = small values, [`ONE`] = exactly 1).
pub(crate) type Tensors = Vec<(String, Vec<usize>, usize)>;

/// Fan-in code of small values (layer scales, log-alpha/beta, LN biases).
pub(crate) const SMALL: usize = usize::MAX;
/// Fan-in code of exact ones (flags such as a codebook's `initialized`).
pub(crate) const ONE: usize = usize::MAX - 1;
