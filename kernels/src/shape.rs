//! The parameter structs the kernels take their shapes in, shared by the
//! reference, the SIMD paths and the crate's entry points (which re-export
//! them). Plain data: this file imports nothing of the crate.

/// Attention parameters shared by [`attention`](crate::attention) calls of one layer.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplier on `q . k` (usually `head_dim^-0.5`).
    pub scale: f32,
    /// Sliding window: a query at position `p` sees keys `p - w + 1 ..= p`.
    pub window: Option<usize>,
}

/// The keys and values an [`attention`](crate::attention) call reads, key
/// `j` at absolute position `pos0 + j` (the cache may have dropped its
/// oldest rows: ring buffers pass the position of their first retained
/// row), laid out in `k` and `v` as `layout` says.
/// `k` and `v` must be of one format.
#[derive(Clone, Copy, Debug)]
pub struct KvRows<'a> {
    pub k: KvData<'a>,
    pub v: KvData<'a>,
    pub n: usize,
    pub pos0: usize,
    pub layout: KvLayout,
}

/// The elements of a KV buffer: f32, or bf16 (each the upper 16 bits of an
/// f32, round to nearest even) widened back to f32 exactly as they are
/// read, so attention over bf16 keys and values is attention over those
/// rounded values in f32.
#[derive(Clone, Copy, Debug)]
pub enum KvData<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
}

impl KvData<'_> {
    /// Elements held.
    pub fn len(&self) -> usize {
        match self {
            KvData::F32(x) => x.len(),
            KvData::Bf16(x) => x.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as f32 (exact).
    #[inline]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            KvData::F32(x) => x[i],
            KvData::Bf16(x) => f32::from_bits((x[i] as u32) << 16),
        }
    }

    /// Whether `self` and `other` are of the same format.
    pub fn same_format(&self, other: &KvData<'_>) -> bool {
        matches!(
            (self, other),
            (KvData::F32(_), KvData::F32(_)) | (KvData::Bf16(_), KvData::Bf16(_))
        )
    }
}

impl<'a> From<&'a [f32]> for KvData<'a> {
    fn from(x: &'a [f32]) -> Self {
        KvData::F32(x)
    }
}

impl<'a> From<&'a Vec<f32>> for KvData<'a> {
    fn from(x: &'a Vec<f32>) -> Self {
        KvData::F32(x)
    }
}

impl<'a> From<&'a [u16]> for KvData<'a> {
    fn from(x: &'a [u16]) -> Self {
        KvData::Bf16(x)
    }
}

impl<'a> From<&'a Vec<u16>> for KvData<'a> {
    fn from(x: &'a Vec<u16>) -> Self {
        KvData::Bf16(x)
    }
}

/// One sequence's queries in an [`attention_batch`](crate::attention_batch)
/// call: `n_q` query rows at absolute positions `q_pos0..`, against `kv`.
#[derive(Clone, Copy, Debug)]
pub struct AttnSegment<'a> {
    pub n_q: usize,
    pub q_pos0: usize,
    pub kv: KvRows<'a>,
}

/// How a KV buffer orders positions and heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvLayout {
    /// `[n, n_kv_heads, head_dim]`: a position's heads side by side (what a
    /// forward's k/v projection writes).
    Positions,
    /// `[n_kv_heads, capacity, head_dim]` with `capacity >= n`: each head's
    /// positions contiguous, so a head's keys are one forward stream (the
    /// LM caches: docs/performance.md, "Attention over a long context").
    Heads { capacity: usize },
}

impl KvLayout {
    /// `(row, head)`: the elements from one position's row of a head to the
    /// next position's, and from one KV head to the next.
    pub fn strides(self, n_kv_heads: usize, head_dim: usize) -> (usize, usize) {
        match self {
            KvLayout::Positions => (n_kv_heads * head_dim, head_dim),
            KvLayout::Heads { capacity } => (head_dim, capacity * head_dim),
        }
    }

    /// Elements a buffer of `n` positions needs (0 when `n` is 0).
    pub fn len_for(self, n: usize, n_kv_heads: usize, head_dim: usize) -> usize {
        if n == 0 || n_kv_heads == 0 {
            return 0;
        }
        let (row, head) = self.strides(n_kv_heads, head_dim);
        (n_kv_heads - 1) * head + (n - 1) * row + head_dim
    }
}

/// Parameters of a 1-D convolution.
#[derive(Clone, Copy, Debug)]
pub struct Conv1dShape {
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub dilation: usize,
    pub groups: usize,
}

impl Conv1dShape {
    /// Output columns of the "valid" convolution of `t_in` input columns:
    /// `t_in - (kernel - 1) * dilation`, 0 when the input is shorter.
    /// `kernel >= 1`.
    pub fn t_out(&self, t_in: usize) -> usize {
        t_in.saturating_sub((self.kernel - 1) * self.dilation)
    }
}

/// Parameters of a strided 1-D convolution: a [`Conv1dShape`] whose outputs
/// are taken every `stride` input columns (the SEANet encoder's
/// downsampling convs, kernel `2 * stride`).
#[derive(Clone, Copy, Debug)]
pub struct StridedConv1dShape {
    pub conv: Conv1dShape,
    /// `>= 1`; 1 is [`conv1d`](crate::conv1d).
    pub stride: usize,
}

impl StridedConv1dShape {
    /// Output columns of the "valid" strided convolution of `t_in` input
    /// columns: `(t_in - span - 1) / stride + 1` with `span = (kernel - 1) *
    /// dilation`, 0 when the input is shorter than one kernel span.
    pub fn t_out(&self, t_in: usize) -> usize {
        let span = (self.conv.kernel - 1) * self.conv.dilation;
        if t_in <= span {
            0
        } else {
            (t_in - span - 1) / self.stride + 1
        }
    }
}

/// Parameters of a transposed 1-D convolution (no padding, no groups, no
/// dilation: the checkpoint's upsamplers use none).
#[derive(Clone, Copy, Debug)]
pub struct ConvTranspose1dShape {
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub stride: usize,
}

impl ConvTranspose1dShape {
    /// Output columns for `t_in` input columns: `(t_in - 1) * stride +
    /// kernel`, 0 for no input.
    pub fn t_out(&self, t_in: usize) -> usize {
        if t_in == 0 {
            0
        } else {
            (t_in - 1) * self.stride + self.kernel
        }
    }

    /// The same layer as a stride-1 conv of `kernel / stride` taps with
    /// `c_out * stride` output rows (`kernel` a multiple of `stride`): from
    /// a `[c_in, c_out, kernel]` weight, the `[c_out * stride, c_in, kernel
    /// / stride]` one in which row `co * stride + r` is phase `r` of channel
    /// `co`. Its output `q * stride + r` reads inputs `q` (the last tap,
    /// weight `kk = r`) back to `q - taps + 1` (tap 0, `kk = r + (taps - 1)
    /// * stride`), so over `taps - 1` columns of history plus `n` new ones
    /// the valid conv gives exactly the new columns' `n * stride` outputs
    /// (in phase rows; [`crate::interleave_phases`] puts them in time order).
    /// Nothing outside them is computed, where the transposed form computes
    /// `(n + taps) * stride` columns and drops the history's and the tail's.
    ///
    /// # Panics
    /// If `kernel` is not a positive multiple of `stride` or `w` is not
    /// `[c_in, c_out, kernel]`.
    pub fn phase_weights(&self, w: &[f32]) -> Vec<f32> {
        let taps = self.phase_taps(w);
        let (c_in, rows) = (self.c_in, self.c_out * self.stride);
        let mut d = vec![0f32; rows * c_in * taps];
        for (row, dr) in d.chunks_exact_mut(c_in * taps).enumerate() {
            for (ci, dt) in dr.chunks_exact_mut(taps).enumerate() {
                for (t, v) in dt.iter_mut().enumerate() {
                    *v = w[self.phase_index(row, ci, t)];
                }
            }
        }
        d
    }

    /// The taps of the phase form (`kernel / stride`), checking that `w` is
    /// this layer's `[c_in, c_out, kernel]` weight and `kernel` a positive
    /// multiple of `stride`.
    ///
    /// # Panics
    /// If either does not hold.
    pub fn phase_taps(&self, w: &[f32]) -> usize {
        let Self {
            c_in,
            c_out,
            kernel,
            stride,
        } = *self;
        assert!(
            stride > 0 && kernel >= stride && kernel.is_multiple_of(stride),
            "phase form: kernel {kernel} is not a multiple of stride {stride}"
        );
        assert_eq!(w.len(), c_in * c_out * kernel, "phase form: weight shape");
        kernel / stride
    }

    /// Where element `(row, ci, t)` of [`Self::phase_weights`] lives in the
    /// `[c_in, c_out, kernel]` weight (for building a packed copy without
    /// the dense one).
    #[inline]
    pub fn phase_index(&self, row: usize, ci: usize, t: usize) -> usize {
        let (co, r) = (row / self.stride, row % self.stride);
        let taps = self.kernel / self.stride;
        (ci * self.c_out + co) * self.kernel + r + (taps - 1 - t) * self.stride
    }
}
