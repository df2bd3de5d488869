//! Convolutions with bf16 weights and bf16 activations, f32 accumulation:
//! the arithmetic of AVX-512 BF16 `vdpbf16ps` (`_mm512_dpbf16_ps`), which
//! does 32 multiply-adds per instruction against 16 for an f32 FMA.
//!
//! # Format
//! [`ConvBf16`] holds a convolution weight converted once (at model load)
//! to bf16, round-to-nearest-even, with **pairs of adjacent input channels
//! interleaved**: the `u32` of (`co`, `p`, `kk`) holds `bf16(w[co, 2p, kk])`
//! in its low half and `bf16(w[co, 2p + 1, kk])` in its high half (0 past
//! an odd `c_in`). The pairs are stored `[c_out / 16][pairs][k][16]`: in
//! groups of 16 output channels (the last group padded with zero
//! channels), the 16 channels of one (pair, tap) side by side. The time
//! tiles broadcast one channel's pair at a time (8 neighbours in one cache
//! line); the channel tiles of short outputs load all 16 as one vector.
//! `conv1d` weights (`[c_out, c_in, k]`) are repacked into this order; a
//! transposed conv's (`[c_in, c_out, k]`) are repacked as the dense conv
//! over its phases ([`ConvBf16::from_transpose1d_phases`]), so one kernel
//! serves both.
//! Activations are rounded to bf16 (RNE) in the same pairing as they enter
//! the dot product; one 32-bit lane holds `(x[2p, t], x[2p + 1, t])`.
//!
//! # Arithmetic (what every path computes)
//! Per output element, from `acc = bias` (0 without one): for each channel
//! pair `p` in order, for each tap in order,
//! `acc = dp(acc, x_hi * w_hi)` then `acc = dp(acc, x_lo * w_lo)`, where
//! `dp` is one f32 fused multiply-add, round-to-nearest-even, with inputs
//! denormal-as-zero and output flush-to-zero. That is Intel's pseudocode of
//! `VDPBF16PS` (odd element first, then even; "FP32 FMA with daz in, ftz
//! out and RNE rounding"), confirmed on this Zen 4 by
//! `dpbf16_instruction_matches_the_scalar_model` in kernels/tests. A
//! bf16 x bf16 product is exact in f32 (8 + 8 significant bits), so an
//! f32 FMA on the widened values reproduces the instruction bit for bit
//! whenever no partial sum lands in the f32 subnormal range (below
//! 1.2e-38), where the emulation keeps a subnormal that the instruction
//! flushes. Rounding the inputs flushes bf16 subnormals to zero, so DAZ on
//! the operands costs nothing.
//!
//! The paths: [`crate::reference::conv1d_bf16`] (scalar, the definition),
//! AVX-512 BF16 (`vdpbf16ps`), and a portable emulation on AVX2/AVX-512F
//! FMAs (two FMAs per pair, in the instruction's order) for CPUs without
//! avx512_bf16; the scalar path runs the reference.

use crate::mat::bf16_to_f32;
use crate::shape::ConvTranspose1dShape;
use std::sync::OnceLock;

/// bf16 of `x`, round-to-nearest-even, subnormals flushed to (signed) zero
/// (the instruction treats them as zero anyway), NaN kept NaN (quieted).
/// Equal to `f32_to_bf16` (the `half` crate's rounding) except for the
/// flush; branch-free so the packing loops vectorise.
#[inline(always)]
pub fn round_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    let nan = b & 0x7fff_ffff > 0x7f80_0000;
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let r = if nan { (b >> 16) | 0x40 } else { r };
    let r = if r & 0x7f80 == 0 { r & 0x8000 } else { r };
    r as u16
}

/// `x` rounded through bf16 (the value the dot product sees).
#[inline]
pub fn bf16_value(x: f32) -> f32 {
    bf16_to_f32(round_bf16(x))
}

/// The high (odd-channel) bf16 of a pair, as f32.
#[inline(always)]
pub(crate) fn pair_hi(p: u32) -> f32 {
    f32::from_bits(p & 0xffff_0000)
}

/// The low (even-channel) bf16 of a pair, as f32.
#[inline(always)]
pub(crate) fn pair_lo(p: u32) -> f32 {
    f32::from_bits(p << 16)
}

/// Two bf16 as one pair (`lo` in the low half).
#[inline(always)]
pub(crate) fn pair(lo: u16, hi: u16) -> u32 {
    lo as u32 | (hi as u32) << 16
}

/// `x` with an f32 subnormal replaced by a zero of the same sign.
#[inline(always)]
pub(crate) fn flush(x: f32) -> f32 {
    if x != 0.0 && x.abs() < f32::MIN_POSITIVE {
        f32::from_bits(x.to_bits() & 0x8000_0000)
    } else {
        x
    }
}

/// One step of the dot product: `acc + a * b` as one f32 FMA (RNE), DAZ
/// on `acc`, FTZ on the result (`a`, `b` are bf16 values, never subnormal).
#[inline(always)]
pub fn dp_step(acc: f32, a: f32, b: f32) -> f32 {
    flush(a.mul_add(b, flush(acc)))
}

/// Which of its two layouts a [`ConvBf16`] is built in: the one the
/// kernels that will run it read ([`crate::Kernels::bf16_layout`]), so a
/// loaded weight holds one copy. The other is built from it on first use
/// by a path that reads it (tests and benches comparing paths); the pairs
/// are the same either way, so the layout changes memory, never a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Layout {
    /// `[c_out / 16][pairs][kernel][16]`: the `vdpbf16ps` tiles, the
    /// emulation and the reference.
    Pairs,
    /// `[kernel][co16][pairs16]`: AMX weight tiles.
    AmxTiles,
}

/// A convolution weight in bf16 channel pairs (see the module docs).
///
/// Two layouts of the same pairs ([`Bf16Layout`]):
/// `[c_out / 16][pairs][kernel][16]` ([`ConvBf16::pair_index`]) for the
/// `vdpbf16ps` tiles, the emulation and the reference, and AMX weight
/// tiles `[kernel][co16][pairs16]` (output channels and pairs padded with
/// zeros to multiples of 16). A weight is built in the layout its caller
/// names and holds that one copy until a path asks for the other.
#[derive(Clone, Debug)]
pub struct ConvBf16 {
    pairs: OnceLock<Vec<u32>>,
    tiles: OnceLock<Vec<u32>>,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
}

impl PartialEq for ConvBf16 {
    fn eq(&self, o: &Self) -> bool {
        (self.c_in, self.c_out, self.kernel) == (o.c_in, o.c_out, o.kernel)
            && self.pair_layout() == o.pair_layout()
    }
}

impl ConvBf16 {
    /// From a `Conv1d` weight `[c_out, c_in, kernel]` (groups = 1), in
    /// `layout`.
    pub fn from_conv1d(
        w: &[f32],
        c_out: usize,
        c_in: usize,
        kernel: usize,
        layout: Bf16Layout,
    ) -> Self {
        assert_eq!(w.len(), c_out * c_in * kernel, "ConvBf16: weight shape");
        Self::build(c_in, c_out, kernel, layout, |co, ci, kk| {
            w[(co * c_in + ci) * kernel + kk]
        })
    }

    /// A `ConvTranspose1d` weight `[c_in, c_out, kernel]` as the dense conv
    /// over its phases ([`ConvTranspose1dShape::phase_weights`]: `c_out *
    /// stride` rows of `kernel / stride` taps), in `layout`, without
    /// building the dense f32 copy.
    pub fn from_transpose1d_phases(
        w: &[f32],
        shape: ConvTranspose1dShape,
        layout: Bf16Layout,
    ) -> Self {
        let taps = shape.phase_taps(w);
        let (c_in, rows) = (shape.c_in, shape.c_out * shape.stride);
        Self::build(c_in, rows, taps, layout, |row, ci, t| {
            w[shape.phase_index(row, ci, t)]
        })
    }

    fn build(
        c_in: usize,
        c_out: usize,
        kernel: usize,
        layout: Bf16Layout,
        get: impl Fn(usize, usize, usize) -> f32,
    ) -> Self {
        assert!(kernel > 0, "ConvBf16: kernel must be >= 1");
        let pairs = c_in.div_ceil(2);
        let mut c = ConvBf16 {
            pairs: OnceLock::new(),
            tiles: OnceLock::new(),
            c_in,
            c_out,
            kernel,
        };
        let mut w = vec![0u32; c.co16() * pairs * kernel];
        for co in 0..c_out {
            for p in 0..pairs {
                for kk in 0..kernel {
                    let lo = round_bf16(get(co, 2 * p, kk));
                    let hi = if 2 * p + 1 < c_in {
                        round_bf16(get(co, 2 * p + 1, kk))
                    } else {
                        0
                    };
                    w[c.pair_index(co, p, kk)] = pair(lo, hi);
                }
            }
        }
        c.pairs = OnceLock::from(w);
        match layout {
            Bf16Layout::Pairs => c,
            Bf16Layout::AmxTiles => {
                c.tile_layout();
                ConvBf16 {
                    pairs: OnceLock::new(),
                    ..c
                }
            }
        }
    }

    /// Input channel pairs (`ceil(c_in / 2)`).
    pub fn pairs(&self) -> usize {
        self.c_in.div_ceil(2)
    }

    fn co16(&self) -> usize {
        self.c_out.next_multiple_of(16)
    }

    /// Index of (`co`, pair `p`, tap `kk`) in [`ConvBf16::pair_layout`]:
    /// `[c_out / 16][pairs][kernel][16]`.
    #[inline(always)]
    pub(crate) fn pair_index(&self, co: usize, p: usize, kk: usize) -> usize {
        (((co / 16) * self.pairs() + p) * self.kernel + kk) * 16 + co % 16
    }

    /// Elements between two groups of 16 output channels in
    /// [`ConvBf16::pair_layout`].
    pub(crate) fn group_stride(&self) -> usize {
        self.pairs() * self.kernel * 16
    }

    fn pairs16(&self) -> usize {
        self.pairs().next_multiple_of(16)
    }

    /// The `[c_out / 16][pairs][kernel][16]` layout (zero past `c_out`).
    pub(crate) fn pair_layout(&self) -> &[u32] {
        self.pairs.get_or_init(|| {
            let t = self.tiles.get().expect("ConvBf16 holds one layout");
            let (pairs, k, co16, p16) = (self.pairs(), self.kernel, self.co16(), self.pairs16());
            let mut w = vec![0u32; co16 * pairs * k];
            for co in 0..self.c_out {
                for p in 0..pairs {
                    for kk in 0..k {
                        w[self.pair_index(co, p, kk)] = t[(kk * co16 + co) * p16 + p];
                    }
                }
            }
            w
        })
    }

    /// The AMX layout `[kernel][co16][pairs16]`, with `co16` and `pairs16`.
    pub(crate) fn tile_layout(&self) -> (&[u32], usize, usize) {
        let (co16, p16) = (self.co16(), self.pairs16());
        let t = self.tiles.get_or_init(|| {
            let w = self.pairs.get().expect("ConvBf16 holds one layout");
            let (pairs, k) = (self.pairs(), self.kernel);
            let mut t = vec![0u32; k * co16 * p16];
            for co in 0..self.c_out {
                for p in 0..pairs {
                    for kk in 0..k {
                        t[(kk * co16 + co) * p16 + p] = w[self.pair_index(co, p, kk)];
                    }
                }
            }
            t
        });
        (t, co16, p16)
    }

    /// The bf16 weight of (`co`, `ci`, `kk`) as f32.
    pub fn weight(&self, co: usize, ci: usize, kk: usize) -> f32 {
        let p = match (self.pairs.get(), self.tiles.get()) {
            (Some(w), _) => w[self.pair_index(co, ci / 2, kk)],
            (None, Some(t)) => t[(kk * self.co16() + co) * self.pairs16() + ci / 2],
            (None, None) => unreachable!("ConvBf16 holds one layout"),
        };
        if ci % 2 == 1 {
            pair_hi(p)
        } else {
            pair_lo(p)
        }
    }

    /// Heap bytes of the packed weight (both layouts, where a path has
    /// asked for the second).
    pub fn bytes(&self) -> usize {
        (self.pairs.get().map_or(0, Vec::len) + self.tiles.get().map_or(0, Vec::len)) * 4
    }
}

/// Pairs `p0..` of `x = [c_in, t_in]` rounded to bf16 pairs into `out`
/// (whole rows of `t_in`; a missing odd channel is 0).
#[inline(always)]
pub(crate) fn pack_pairs(x: &[f32], c_in: usize, t_in: usize, p0: usize, out: &mut [u32]) {
    for (i, dst) in out.chunks_exact_mut(t_in).enumerate() {
        let p = p0 + i;
        let lo = &x[2 * p * t_in..(2 * p + 1) * t_in];
        if 2 * p + 1 < c_in {
            let hi = &x[(2 * p + 1) * t_in..(2 * p + 2) * t_in];
            for ((d, &a), &b) in dst.iter_mut().zip(lo).zip(hi) {
                *d = pair(round_bf16(a), round_bf16(b));
            }
        } else {
            for (d, &a) in dst.iter_mut().zip(lo) {
                *d = pair(round_bf16(a), 0);
            }
        }
    }
}

/// The emulation's layout: `x` rounded through bf16 and kept as f32,
/// two rows of `t_in` per pair (row `2p` is the low element of
/// pair `p`, row `2p + 1` the high one; a missing odd channel is a zero
/// row). Pairs `p0..` into `out` (zero-initialised), as [`pack_pairs`].
#[inline(always)]
pub(crate) fn pack_planes(x: &[f32], c_in: usize, t_in: usize, p0: usize, out: &mut [f32]) {
    for (i, row) in out.chunks_exact_mut(t_in).enumerate() {
        let ci = 2 * p0 + i;
        if ci >= c_in {
            break;
        }
        for (d, &a) in row.iter_mut().zip(&x[ci * t_in..(ci + 1) * t_in]) {
            *d = bf16_to_f32(round_bf16(a));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_matches_the_half_crate_except_the_flush() {
        let mut s = 0x1234_5678_9abc_def0u64;
        for i in 0..2_000_000u64 {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Random bit patterns, plus every pattern near the rounding ties.
            let b = if i % 2 == 0 {
                (s >> 32) as u32
            } else {
                ((s >> 32) as u32 & 0xffff_0000) | (0x7fff + (i as u32 % 3))
            };
            let x = f32::from_bits(b);
            let want = crate::mat::f32_to_bf16(x);
            let want = if want & 0x7f80 == 0 {
                want & 0x8000
            } else {
                want
            };
            assert_eq!(round_bf16(x), want, "{b:#x}");
        }
    }

    #[test]
    fn rounding_is_nearest_even_and_flushes_subnormals() {
        // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(bf16_value(1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(bf16_value(1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(round_bf16(1e-39), 0);
        assert_eq!(round_bf16(-1e-39), 0x8000);
        assert!(bf16_value(f32::NAN).is_nan());
        assert_eq!(bf16_value(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn the_pairs_hold_each_weight_once() {
        let (c_out, c_in, k) = (3, 5, 2);
        let w: Vec<f32> = (0..c_out * c_in * k)
            .map(|i| i as f32 * 0.37 - 4.0)
            .collect();
        let a = ConvBf16::from_conv1d(&w, c_out, c_in, k, Bf16Layout::Pairs);
        assert_eq!(a.pairs(), 3);
        for co in 0..c_out {
            for ci in 0..c_in {
                for kk in 0..k {
                    assert_eq!(
                        a.weight(co, ci, kk),
                        bf16_value(w[(co * c_in + ci) * k + kk])
                    );
                }
            }
        }
        // The odd channel's partner is zero.
        assert_eq!(pair_hi(a.pair_layout()[a.pair_index(0, 2, 0)]), 0.0);
    }

    #[test]
    fn the_amx_tiles_and_the_channel_groups_convert_both_ways() {
        // 37 output channels: three groups of 16, the last one padded.
        let (c_out, c_in, k) = (37, 9, 3);
        let w: Vec<f32> = (0..c_out * c_in * k)
            .map(|i| (i as f32 * 0.731).sin())
            .collect();
        let a = ConvBf16::from_conv1d(&w, c_out, c_in, k, Bf16Layout::Pairs);
        let (tiles, co16, p16) = a.tile_layout();
        let pairs = a.pair_layout().to_vec();
        assert_eq!(pairs.len(), 48 * a.pairs() * k);
        for co in 0..c_out {
            for p in 0..a.pairs() {
                for kk in 0..k {
                    assert_eq!(
                        tiles[(kk * co16 + co) * p16 + p],
                        pairs[a.pair_index(co, p, kk)]
                    );
                }
            }
        }
        // Built in the tile layout (as on an AMX host), it holds the tiles
        // alone, and the pairs come back from them.
        let b = ConvBf16::from_conv1d(&w, c_out, c_in, k, Bf16Layout::AmxTiles);
        assert_eq!(b.bytes(), tiles.len() * 4);
        for co in 0..c_out {
            for ci in 0..c_in {
                for kk in 0..k {
                    assert_eq!(b.weight(co, ci, kk), a.weight(co, ci, kk));
                }
            }
        }
        assert_eq!(b.tile_layout().0, tiles);
        assert_eq!(b.pair_layout(), &pairs[..]);
        assert_eq!(a, b);
    }
}
