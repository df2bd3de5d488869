//! Convolutions with int8 weights and int8 activations, exact i32 sums:
//! the arithmetic of AVX-512 VNNI `vpdpbusd` (`_mm512_dpbusd_epi32`),
//! which does 64 multiply-adds per instruction against 32 for
//! `vdpbf16ps`.
//!
//! # Format
//! [`ConvQ8`] holds a `Conv1d` weight `[c_out, c_in, k]` quantized once (at
//! model load): symmetric int8 with one f32 scale per output channel,
//! `s_w[co] = max |w[co, .., ..]| / 127`, `q = round_ties_even(w / s_w)`.
//! Quads of adjacent input channels share a `u32` (channel `4j + i` in
//! byte `i`, 0 past `c_in`), stored `[c_out][k][quads]`: a time tile
//! broadcasts one channel's quad at a time.
//!
//! # Arithmetic (what every path computes)
//! Activations are quantized per input **time column**, over all input
//! channels: `s_x[t] = max_c |x[c, t]| / 127`, `xq = round_ties_even(x *
//! (127 / max))` (0 for an all-zero column). A column's scale follows the
//! signal's loudness, so quiet passages keep their resolution. Because the
//! taps of one output read different columns, each tap is its own exact
//! integer sum, and the taps are combined in f32:
//!
//! ```text
//! acc = bias[co] (0 without one)
//! for kk in 0..k:   (in order)
//!     i   = sum_c q[co, c, kk] * xq[c, t + kk * d]          (exact, i32)
//!     acc = acc + (i as f32) * (s_x[t + kk * d] * s_w[co])  (two roundings)
//! ```
//!
//! The SIMD path feeds `vpdpbusd` the activations as `u8 = xq + 128` and
//! starts each sum at `-128 * sum_c q[co, c, kk]`, which gives the same
//! i32 (wrapping adds, exact once the sum fits); it then does the same f32 operations in the same order, so all
//! paths agree bit for bit. `|i| <= 1536 * 127 * 255 < 2^31` at the
//! decoder's widest conv. The paths: [`crate::reference::conv1d_q8`]
//! (the definition), AVX-512 VNNI, and on every other path a portable
//! kernel with the reference's loops in parallel (the same bits).

use crate::shape::ConvTranspose1dShape;

/// Largest quantized magnitude (symmetric: -127..=127).
pub const Q_MAX: f32 = 127.0;

/// An int8 convolution weight (see the module docs).
#[derive(Clone, Debug)]
pub struct ConvQ8 {
    /// `[c_out][kernel][quads]`, four i8 per `u32`.
    pub(crate) w: Vec<u32>,
    /// `s_w`, one per output channel.
    pub scales: Vec<f32>,
    /// `sum_c q[co, c, kk]`, `[c_out][kernel]`: the correction of the u8
    /// offset the VNNI path feeds its activations with.
    pub(crate) wsum: Vec<i32>,
    /// The quads as i16 pairs (`[c_out][kernel][2 * quads]`), made on the
    /// first call that runs the AVX2 kernel ([`ConvQ8::pairs`]).
    pub(crate) pairs: std::sync::OnceLock<Vec<u32>>,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
}

/// Equal weights are equal whether or not their pairs were made yet.
impl PartialEq for ConvQ8 {
    fn eq(&self, o: &Self) -> bool {
        (
            &self.w,
            &self.scales,
            &self.wsum,
            self.c_in,
            self.c_out,
            self.kernel,
        ) == (&o.w, &o.scales, &o.wsum, o.c_in, o.c_out, o.kernel)
    }
}

/// `v` quantized by `inv` (127 / the block's max magnitude), clamped.
#[inline(always)]
pub fn quantize(v: f32, inv: f32) -> i8 {
    (v * inv).round_ties_even().clamp(-Q_MAX, Q_MAX) as i8
}

/// `(scale, inverse)` of a block whose largest magnitude is `max`:
/// `(max / 127, 127 / max)`, `(0, 0)` for an all-zero block.
#[inline(always)]
pub fn scale_of(max: f32) -> (f32, f32) {
    if max > 0.0 {
        (max / Q_MAX, Q_MAX / max)
    } else {
        (0.0, 0.0)
    }
}

impl ConvQ8 {
    /// From a `Conv1d` weight `[c_out, c_in, kernel]` (groups = 1).
    pub fn from_conv1d(w: &[f32], c_out: usize, c_in: usize, kernel: usize) -> Self {
        assert_eq!(w.len(), c_out * c_in * kernel, "ConvQ8: weight shape");
        Self::build(c_out, c_in, kernel, |co, ci, kk| {
            w[(co * c_in + ci) * kernel + kk]
        })
    }

    /// A `ConvTranspose1d` weight `[c_in, c_out, kernel]` as the dense conv
    /// over its phases ([`ConvTranspose1dShape::phase_weights`]: `c_out *
    /// stride` rows of `kernel / stride` taps, each row its own scale),
    /// without building the dense f32 copy.
    pub fn from_transpose1d_phases(w: &[f32], shape: ConvTranspose1dShape) -> Self {
        let taps = shape.phase_taps(w);
        let (c_in, rows) = (shape.c_in, shape.c_out * shape.stride);
        Self::build(rows, c_in, taps, |row, ci, t| {
            w[shape.phase_index(row, ci, t)]
        })
    }

    fn build(
        c_out: usize,
        c_in: usize,
        kernel: usize,
        get: impl Fn(usize, usize, usize) -> f32,
    ) -> Self {
        assert!(kernel > 0, "ConvQ8: kernel must be >= 1");
        let quads = c_in.div_ceil(4);
        let mut packed = vec![0u32; c_out * kernel * quads];
        let mut scales = vec![0f32; c_out];
        let mut wsum = vec![0i32; c_out * kernel];
        for co in 0..c_out {
            let mut max = 0f32;
            for ci in 0..c_in {
                for kk in 0..kernel {
                    max = max.max(get(co, ci, kk).abs());
                }
            }
            let (s, inv) = scale_of(max);
            scales[co] = s;
            for ci in 0..c_in {
                for kk in 0..kernel {
                    let q = quantize(get(co, ci, kk), inv);
                    packed[(co * kernel + kk) * quads + ci / 4] |=
                        (q as u8 as u32) << (8 * (ci % 4));
                    wsum[co * kernel + kk] += q as i32;
                }
            }
        }
        ConvQ8 {
            w: packed,
            scales,
            wsum,
            pairs: std::sync::OnceLock::new(),
            c_in,
            c_out,
            kernel,
        }
    }

    /// The weight as i16 pairs of input channels, `[c_out][kernel][2 *
    /// quads]`: quad `q`'s bytes 0-1 and 2-3, sign-extended (what AVX2's
    /// `vpmaddwd` multiplies). Made once, on first use.
    pub(crate) fn pairs(&self) -> &[u32] {
        self.pairs.get_or_init(|| {
            let half = |b: u32| b as u8 as i8 as i16 as u16 as u32;
            self.w
                .iter()
                .flat_map(|&q| {
                    [
                        half(q) | half(q >> 8) << 16,
                        half(q >> 16) | half(q >> 24) << 16,
                    ]
                })
                .collect()
        })
    }

    /// Input channel quads (`ceil(c_in / 4)`).
    pub fn quads(&self) -> usize {
        self.c_in.div_ceil(4)
    }

    /// The quantized weight of (`co`, `ci`, `kk`).
    pub fn weight(&self, co: usize, ci: usize, kk: usize) -> i8 {
        (self.w[(co * self.kernel + kk) * self.quads() + ci / 4] >> (8 * (ci % 4))) as u8 as i8
    }

    /// The weight as f32 again (`q * s_w`), `[c_out, c_in, kernel]`: what
    /// the int8 weight stands for.
    pub fn dequantized(&self) -> Vec<f32> {
        let mut w = Vec::with_capacity(self.c_out * self.c_in * self.kernel);
        for co in 0..self.c_out {
            for ci in 0..self.c_in {
                for kk in 0..self.kernel {
                    w.push(self.weight(co, ci, kk) as f32 * self.scales[co]);
                }
            }
        }
        w
    }

    /// Weight bytes (the packed quads, scales and tap sums).
    pub fn bytes(&self) -> usize {
        4 * (self.w.len() + self.scales.len() + self.wsum.len())
    }
}

/// Per-column activation scales of `x = [c_in, t_in]`: `(s_x, inverse)`
/// per column (see the module docs).
pub fn column_scales(x: &[f32], c_in: usize, t_in: usize) -> (Vec<f32>, Vec<f32>) {
    assert_eq!(x.len(), c_in * t_in, "column_scales: x is not [c_in, t_in]");
    let mut max = vec![0f32; t_in];
    for row in x.chunks_exact(t_in.max(1)).take(c_in) {
        for (m, v) in max.iter_mut().zip(row) {
            *m = m.max(v.abs());
        }
    }
    max.into_iter().map(scale_of).unzip()
}
