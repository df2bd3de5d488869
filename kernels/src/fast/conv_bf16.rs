//! bf16 `conv1d` (format and arithmetic in [`crate::conv_bf16`]); a
//! transposed conv runs on it as the dense conv over its phases.
//!
//! The same register tiling as the f32 kernels in `conv.rs` (`C` output
//! channels x `TV` vectors of time, weights broadcast, activations loaded),
//! with one step of the reduction now covering a *pair* of input channels:
//! - AVX-512 BF16: activations packed as `u32` pairs `(x[2p, t], x[2p+1,
//!   t])`, one `vdpbf16ps` per (channel, vector) and pair: an 8 x 3 tile is
//!   24 `vdpbf16ps` = 768 multiply-adds per 3 loads + 8 broadcasts.
//! - Emulation (AVX2 / AVX-512F without BF16): activations as two f32 rows
//!   per pair (bf16 values), two FMAs per pair in the instruction's order
//!   (high, then low): the same bits, the f32 kernel's speed.
//!
//! Channel blocks and the pair chunking that keeps a block's weights in L1
//! are as in `conv.rs`.
//!
//! Short outputs (at most [`CHANNEL_T_MAX`] columns: a streaming step
//! of one frame gives `decoder.0` 4 columns) run on **channel tiles**
//! instead where the kernel has them (AVX-512 BF16): 16 output channels
//! per vector, up to 8 columns, one weight vector load per (pair, tap)
//! serving every column, the activation pair broadcast. The weight layout
//! (`[c_out / 16][pairs][k][16]`, [`ConvBf16`]) makes both tiles read
//! whole cache lines. Per output the operations and their order are the
//! time tiles', so the bits do not depend on which tile ran.
//!
//! [`Bf16Kernel`] names the tile a call runs on, and [`conv1d`] here is
//! the only place that chooses: AMX tiles go to `conv_amx.rs`, which
//! knows nothing of this file; what both do around their tiles (the
//! call's checks, the bias, the parallel packing) is `conv_bf16_setup.rs`.

use super::conv::{slab_len, Tap};
use super::conv_bf16_setup::{conv1d_setup, fill_bias, pack_par};
use super::{run_tasks, SharedOut, Simd};
use crate::conv_bf16::{pack_planes, ConvBf16};

/// Output channels per task block of the time tiles: one group of 16 in
/// the weight layout, so a task reads whole cache lines of weights.
const CO: usize = 16;
/// Columns of one channel tile (its accumulators: 2 x 8 vectors).
const SHORT_T: usize = 8;
/// Outputs at or under which a kernel with channel tiles
/// ([`PairKernel::CHANNEL_TILES`]) vectorises over output channels instead
/// of time: a streaming step of one frame gives `decoder.0` 4 outputs, and
/// block 0's transposed conv (over its phases) 4 per phase row, where a
/// 16-lane time vector would be a quarter full; at 16 (`decoder.0` in 4-frame steps) each
/// weight vector still serves 8 columns, where the time tiles' weight
/// broadcasts serve one vector each.
const CHANNEL_T_MAX: usize = 16;
/// Output channels per task block of the channel tiles (two vectors).
const SHORT_CO: usize = 32;
/// Channel pairs per pass: 16 ch x 32 pairs x 7 taps x 4 B = 14 KB of
/// weights for the vocoder's k7 convs, reused from L1 by every time tile.
const P_CHUNK: usize = 32;

/// A block of output channels over one packed input.
struct Block<'a, X> {
    /// Packed input; pair `p` starts at `p * x_ps` (time-major within).
    x: &'a [X],
    /// Elements per pair (`x_cs` for `u32` pairs, `2 * x_cs` for planes).
    x_ps: usize,
    /// Row length (time columns incl. padding).
    x_cs: usize,
    /// Input column of output column 0 (a slab's start; the output buffer
    /// holds only the slab).
    x_t0: usize,
    pairs: usize,
    /// Weight pair of (block channel `c`, pair `p`, tap) at
    /// `c * w_co + p * w_ci + tap.w_off`: in the `[c_out / 16][pairs][k][16]`
    /// layout, from the block's first channel (a block never crosses a
    /// group of 16), `w_co = 1`, `w_ci = 16 k` and `w_off = 16 kk`.
    w: &'a [u32],
    w_co: usize,
    w_ci: usize,
    taps: &'a [Tap],
}

/// Accumulators of the channel tiles: `[groups][t_len][16]`, output
/// channel `16 g + c` at lane `c` of group `g` (zero lanes past the last
/// channel). Filled from and written back to `[nco, t_len]` rows once per
/// output, so the pair chunks in between load and store whole vectors.
struct Lanes {
    buf: Vec<f32>,
    groups: usize,
    t_len: usize,
}

impl Lanes {
    /// From `nco` rows of `t_len` (row `c` at `rows[c * row_stride..]`,
    /// columns `t0..t0 + t_len`).
    fn gather(rows: &[f32], row_stride: usize, nco: usize, t0: usize, t_len: usize) -> Lanes {
        let groups = nco.div_ceil(16);
        let mut buf = vec![0f32; groups * t_len * 16];
        for c in 0..nco {
            let row = &rows[c * row_stride + t0..c * row_stride + t0 + t_len];
            for (t, &v) in row.iter().enumerate() {
                buf[((c / 16) * t_len + t) * 16 + c % 16] = v;
            }
        }
        Lanes { buf, groups, t_len }
    }

    /// Back into the rows [`Lanes::gather`] read.
    fn scatter(&self, rows: &mut [f32], row_stride: usize, nco: usize, t0: usize) {
        let t_len = self.t_len;
        for c in 0..nco {
            let row = &mut rows[c * row_stride + t0..c * row_stride + t0 + t_len];
            for (t, v) in row.iter_mut().enumerate() {
                *v = self.buf[((c / 16) * t_len + t) * 16 + c % 16];
            }
        }
    }
}

/// One way of computing a register tile.
trait PairKernel: Copy + Send + Sync {
    type X: Copy + Send + Sync + Default;
    /// f32 lanes per vector.
    const LANES: usize;
    /// Tile height for blocks of >= 8 channels, and its width in vectors.
    const C8_TV: usize;
    fn vectorize<R>(self, f: impl FnOnce() -> R) -> R;
    /// Packed rows per pair.
    const ROWS: usize;
    /// Packs pairs `p0..` of `x` into `out` (whole pairs, zeroed).
    fn pack_rows(x: &[f32], c_in: usize, t_in: usize, p0: usize, out: &mut [Self::X]);
    /// `TV` vectors of time from `pass.t0` for `C` channels, pairs
    /// `pass.p0..pass.p1`, added to `out` (row stride `pass.out_cs`; `PART`:
    /// the last vector has `nl` lanes; `pass.t1` is not read).
    ///
    /// # Safety
    /// Every read of `blk.x` / `w` and write of `out` inside the bounds
    /// asserted by `accumulate`.
    unsafe fn tile<const C: usize, const TV: usize, const PART: bool>(
        self,
        blk: &Block<'_, Self::X>,
        w: *const u32,
        out: *mut f32,
        pass: Pass,
        nl: usize,
    );
    /// Whether [`PairKernel::channel_tile`] is implemented.
    const CHANNEL_TILES: bool = false;
    /// Output columns `t0..t0 + T` of `V` groups of 16 output channels
    /// (group `v`'s weights at `w + v * w_grp`), pairs `p0..p1` (all four
    /// from `lp`), added to the lane-major accumulators `acc`
    /// (`[V][t_len][16]`, column `t` of group `v` at `acc + (v * t_len + t)
    /// * 16`): the vector axis is the
    /// output channel, and each weight vector serves `T` columns. Per
    /// output the same operations in the same order as
    /// [`PairKernel::tile`].
    ///
    /// # Safety
    /// As for `tile`; `w` is valid for the whole `V` groups of 16 and
    /// `acc` for `V * t_len * 16` elements.
    unsafe fn channel_tile<const V: usize, const T: usize>(
        self,
        _blk: &Block<'_, Self::X>,
        _w: *const u32,
        _acc: *mut f32,
        _lp: LanePass,
    ) {
        unreachable!("channel tiles are not implemented for this kernel")
    }
}

/// One pass over a block's output: columns `t0..t1` of its rows (row
/// stride `out_cs`), adding channel pairs `p0..p1`.
#[derive(Clone, Copy)]
struct Pass {
    out_cs: usize,
    t0: usize,
    t1: usize,
    p0: usize,
    p1: usize,
}

/// One channel tile's place in the lane-major accumulators ([`Lanes`]):
/// weight groups `w_grp` apart, `t_len` columns per group, the tile's first
/// column `t0`, and the channel pairs `p0..p1` it adds.
#[derive(Clone, Copy)]
struct LanePass {
    w_grp: usize,
    t_len: usize,
    t0: usize,
    p0: usize,
    p1: usize,
}

impl<X: Copy> Block<'_, X> {
    /// Asserts that pairs `..p1` and output columns `..t_end` (from
    /// `x_t0`) read inside `x` at every tap; returns the taps' largest
    /// weight offset.
    fn check_x(&self, t_end: usize, p1: usize) -> usize {
        let max_x = self.taps.iter().map(|t| t.x_off).max().unwrap_or(0);
        assert!(p1 <= self.pairs);
        assert!(
            self.x_t0 + t_end + max_x <= self.x_cs,
            "conv_bf16: x row too short"
        );
        assert!(
            (p1 - 1) * self.x_ps + (self.x_ps - self.x_cs) + self.x_cs <= self.x.len(),
            "conv_bf16: x too short"
        );
        self.taps.iter().map(|t| t.w_off).max().unwrap_or(0)
    }

    /// Adds pairs `p0..p1` into columns `t0..t1` of `nco` rows at `out`
    /// (row stride `out_cs`; all four from `pass`).
    ///
    /// # Safety
    /// Those `nco` row segments are valid for reads and writes and no other
    /// thread touches them meanwhile.
    unsafe fn accumulate_raw<K: PairKernel<X = X>>(
        &self,
        k: K,
        out: *mut f32,
        nco: usize,
        pass: Pass,
    ) {
        let Pass {
            out_cs,
            t0,
            t1,
            p0,
            p1,
        } = pass;
        if t0 >= t1 || p0 >= p1 || self.taps.is_empty() || nco == 0 {
            return;
        }
        let max_w = self.check_x(t1, p1);
        assert!(t1 <= out_cs);
        assert!(
            (nco - 1) * self.w_co + (p1 - 1) * self.w_ci + max_w < self.w.len(),
            "conv_bf16: w too short"
        );
        k.vectorize(
            #[inline(always)]
            || {
                let mut c0 = 0;
                while c0 < nco {
                    let c = match nco - c0 {
                        r if r >= 8 => 8,
                        r if r >= 4 => 4,
                        _ => 1,
                    };
                    // SAFETY: the asserts above bound every x and w access;
                    // the caller vouches for the out rows.
                    unsafe {
                        let o = out.add(c0 * out_cs);
                        let w = self.w.as_ptr().add(c0 * self.w_co);
                        let r = pass;
                        match c {
                            8 if K::C8_TV == 3 => self.rows::<K, 8, 3>(k, w, o, r),
                            8 => self.rows::<K, 8, 2>(k, w, o, r),
                            4 => self.rows::<K, 4, 3>(k, w, o, r),
                            _ => self.rows::<K, 1, 3>(k, w, o, r),
                        }
                    }
                    c0 += c;
                }
            },
        )
    }

    /// Adds pairs `p0..p1` into the lane-major accumulators `acc` of
    /// `nco` channels (`[nco / 16 groups][t_len][16]`, see
    /// [`Lanes`]) on the channel tiles. `self.w` starts at a group of 16
    /// channels; groups are `w_grp` apart.
    fn channel_accumulate<K: PairKernel<X = X>>(
        &self,
        k: K,
        acc: &mut Lanes,
        (p0, p1): (usize, usize),
        w_grp: usize,
    ) {
        let (t_len, groups) = (acc.t_len, acc.groups);
        if t_len == 0 || p0 >= p1 || self.taps.is_empty() || groups == 0 {
            return;
        }
        let max_w = self.check_x(t_len, p1);
        assert!(K::CHANNEL_TILES);
        assert_eq!(acc.buf.len(), groups * t_len * 16);
        assert!(
            (groups - 1) * w_grp + (p1 - 1) * self.w_ci + max_w + 16 <= self.w.len(),
            "conv_bf16: w too short"
        );
        let a = acc.buf.as_mut_ptr();
        let lp = |t0| LanePass {
            w_grp,
            t_len,
            t0,
            p0,
            p1,
        };
        k.vectorize(
            #[inline(always)]
            || {
                let mut g = 0;
                while g < groups {
                    let v = (groups - g).min(2);
                    let mut t = 0;
                    while t < t_len {
                        let n = (t_len - t).min(SHORT_T);
                        // SAFETY: the asserts above bound every x and w
                        // access (whole groups of 16 exist in the layout)
                        // and `acc`'s groups g..g + v.
                        unsafe {
                            let w = self.w.as_ptr().add(g * w_grp);
                            let a = a.add(g * t_len * 16);
                            macro_rules! go {
                                ($v:literal, $($t:literal)*) => {
                                    match n {
                                        $($t => k.channel_tile::<$v, $t>(
                                            self, w, a, lp(t),
                                        ),)*
                                        _ => unreachable!(),
                                    }
                                };
                            }
                            if v == 2 {
                                go!(2, 1 2 3 4 5 6 7 8)
                            } else {
                                go!(1, 1 2 3 4 5 6 7 8)
                            }
                        }
                        t += n;
                    }
                    g += v;
                }
            },
        )
    }

    /// # Safety
    /// As for `PairKernel::tile`.
    #[inline(always)]
    unsafe fn rows<K: PairKernel<X = X>, const C: usize, const TVMAX: usize>(
        &self,
        k: K,
        w: *const u32,
        out: *mut f32,
        pass: Pass,
    ) {
        let l = K::LANES;
        let mut t = pass.t0;
        while t + TVMAX * l <= pass.t1 {
            k.tile::<C, TVMAX, false>(self, w, out, Pass { t0: t, ..pass }, l);
            t += TVMAX * l;
        }
        let rem = pass.t1 - t;
        let nl = if rem.is_multiple_of(l) { l } else { rem % l };
        let p = Pass { t0: t, ..pass };
        match (rem.div_ceil(l), !rem.is_multiple_of(l)) {
            (0, _) => {}
            (1, false) => k.tile::<C, 1, false>(self, w, out, p, nl),
            (1, true) => k.tile::<C, 1, true>(self, w, out, p, nl),
            (2, false) => k.tile::<C, 2, false>(self, w, out, p, nl),
            (2, true) => k.tile::<C, 2, true>(self, w, out, p, nl),
            _ => k.tile::<C, 3, true>(self, w, out, p, nl),
        }
    }
}

/// Emulation on f32 FMAs, generic over the ISA token.
#[derive(Clone, Copy)]
struct Emu<S>(S);

impl<S: Simd> PairKernel for Emu<S> {
    type X = f32;
    const LANES: usize = S::LANES;
    const C8_TV: usize = if S::LANES >= 16 { 3 } else { 2 };

    #[inline(always)]
    fn vectorize<R>(self, f: impl FnOnce() -> R) -> R {
        self.0.vectorize(f)
    }

    const ROWS: usize = 2;
    #[inline(always)]
    fn pack_rows(x: &[f32], c_in: usize, t_in: usize, p0: usize, out: &mut [f32]) {
        pack_planes(x, c_in, t_in, p0, out)
    }

    #[inline(always)]
    unsafe fn tile<const C: usize, const TV: usize, const PART: bool>(
        self,
        blk: &Block<'_, f32>,
        w: *const u32,
        out: *mut f32,
        pass: Pass,
        nl: usize,
    ) {
        let Pass {
            out_cs, t0, p0, p1, ..
        } = pass;
        let s = self.0;
        macro_rules! ld {
            ($p:expr, $v:expr) => {
                if PART && $v == TV - 1 {
                    s.load_part($p, nl)
                } else {
                    s.load($p)
                }
            };
        }
        let mut acc = [[s.splat(0.0); TV]; C];
        for (c, a) in acc.iter_mut().enumerate() {
            for (v, av) in a.iter_mut().enumerate() {
                *av = ld!(out.add(c * out_cs + t0 + v * S::LANES), v);
            }
        }
        let x = blk.x.as_ptr();
        for p in p0..p1 {
            let lo = x.add(p * blk.x_ps + blk.x_t0 + t0);
            let hi = lo.add(blk.x_cs);
            let wr = w.add(p * blk.w_ci);
            for tap in blk.taps {
                let mut xh = [s.splat(0.0); TV];
                let mut xl = [s.splat(0.0); TV];
                for v in 0..TV {
                    xh[v] = ld!(hi.add(tap.x_off + v * S::LANES), v);
                    xl[v] = ld!(lo.add(tap.x_off + v * S::LANES), v);
                }
                for (c, a) in acc.iter_mut().enumerate() {
                    let (wh, wl) = s.splat_bf16_pair(wr.add(c * blk.w_co + tap.w_off));
                    for v in 0..TV {
                        a[v] = s.fma(wh, xh[v], a[v]);
                        a[v] = s.fma(wl, xl[v], a[v]);
                    }
                }
            }
        }
        for (c, a) in acc.iter().enumerate() {
            for (v, &av) in a.iter().enumerate() {
                let p = out.add(c * out_cs + t0 + v * S::LANES);
                if PART && v == TV - 1 {
                    s.store_part(p, nl, av)
                } else {
                    s.store(p, av)
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod dp {
    use super::{Block, LanePass, PairKernel, Pass};
    use crate::conv_bf16::pack_pairs;
    use core::arch::x86_64::*;

    /// Token proving the CPU has AVX-512F and AVX-512 BF16.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct DpBf16 {
        _detected: (),
    }

    impl DpBf16 {
        pub(crate) fn new() -> Option<Self> {
            (is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16"))
                .then_some(DpBf16 { _detected: () })
        }
    }

    #[inline(always)]
    fn mask(n: usize) -> __mmask16 {
        debug_assert!(n <= 16);
        ((1u32 << n) - 1) as __mmask16
    }

    #[inline(always)]
    unsafe fn bh(v: __m512i) -> __m512bh {
        // SAFETY: same size; __m512bh is 32 bf16 bit patterns.
        core::mem::transmute::<__m512i, __m512bh>(v)
    }

    impl PairKernel for DpBf16 {
        type X = u32;
        const LANES: usize = 16;
        const C8_TV: usize = 3;

        #[inline(always)]
        fn vectorize<R>(self, f: impl FnOnce() -> R) -> R {
            #[target_feature(enable = "avx512f,avx512bf16")]
            unsafe fn run<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            // SAFETY: the token proves avx512f and avx512bf16.
            unsafe { run(f) }
        }

        const ROWS: usize = 1;
        #[inline(always)]
        fn pack_rows(x: &[f32], c_in: usize, t_in: usize, p0: usize, out: &mut [u32]) {
            pack_pairs(x, c_in, t_in, p0, out)
        }

        #[inline(always)]
        unsafe fn tile<const C: usize, const TV: usize, const PART: bool>(
            self,
            blk: &Block<'_, u32>,
            w: *const u32,
            out: *mut f32,
            pass: Pass,
            nl: usize,
        ) {
            let Pass {
                out_cs, t0, p0, p1, ..
            } = pass;
            let m = mask(nl);
            let mut acc = [[_mm512_setzero_ps(); TV]; C];
            for (c, a) in acc.iter_mut().enumerate() {
                for (v, av) in a.iter_mut().enumerate() {
                    let p = out.add(c * out_cs + t0 + v * 16);
                    *av = if PART && v == TV - 1 {
                        _mm512_maskz_loadu_ps(m, p)
                    } else {
                        _mm512_loadu_ps(p)
                    };
                }
            }
            let x = blk.x.as_ptr();
            for p in p0..p1 {
                let xr = x.add(p * blk.x_ps + blk.x_t0 + t0);
                let wr = w.add(p * blk.w_ci);
                for tap in blk.taps {
                    let mut xv = [bh(_mm512_setzero_si512()); TV];
                    for (v, xv) in xv.iter_mut().enumerate() {
                        let q = xr.add(tap.x_off + v * 16) as *const i32;
                        *xv = bh(if PART && v == TV - 1 {
                            _mm512_maskz_loadu_epi32(m, q)
                        } else {
                            _mm512_loadu_si512(q as *const _)
                        });
                    }
                    for (c, a) in acc.iter_mut().enumerate() {
                        let wv = bh(_mm512_set1_epi32(*wr.add(c * blk.w_co + tap.w_off) as i32));
                        for (av, &xv) in a.iter_mut().zip(&xv) {
                            *av = _mm512_dpbf16_ps(*av, xv, wv);
                        }
                    }
                }
            }
            for (c, a) in acc.iter().enumerate() {
                for (v, &av) in a.iter().enumerate() {
                    let p = out.add(c * out_cs + t0 + v * 16);
                    if PART && v == TV - 1 {
                        _mm512_mask_storeu_ps(p, m, av)
                    } else {
                        _mm512_storeu_ps(p, av)
                    }
                }
            }
        }

        const CHANNEL_TILES: bool = true;

        #[inline(always)]
        unsafe fn channel_tile<const V: usize, const T: usize>(
            self,
            blk: &Block<'_, u32>,
            w: *const u32,
            acc: *mut f32,
            lp: LanePass,
        ) {
            let LanePass {
                w_grp,
                t_len,
                t0,
                p0,
                p1,
            } = lp;
            let at = |v: usize, t: usize| acc.add((v * t_len + t0 + t) * 16);
            let mut a = [[_mm512_setzero_ps(); T]; V];
            for (v, av) in a.iter_mut().enumerate() {
                for (t, a) in av.iter_mut().enumerate() {
                    *a = _mm512_loadu_ps(at(v, t));
                }
            }
            let x = blk.x.as_ptr();
            for p in p0..p1 {
                let xr = x.add(p * blk.x_ps + blk.x_t0 + t0);
                let wr = w.add(p * blk.w_ci);
                for tap in blk.taps {
                    let mut wv = [bh(_mm512_setzero_si512()); V];
                    for (v, wv) in wv.iter_mut().enumerate() {
                        *wv = bh(_mm512_loadu_si512(wr.add(v * w_grp + tap.w_off) as *const _));
                    }
                    for t in 0..T {
                        let xv = bh(_mm512_set1_epi32(*xr.add(tap.x_off + t) as i32));
                        for (av, &wv) in a.iter_mut().zip(&wv) {
                            av[t] = _mm512_dpbf16_ps(av[t], xv, wv);
                        }
                    }
                }
            }
            for (v, av) in a.iter().enumerate() {
                for (t, &a) in av.iter().enumerate() {
                    _mm512_storeu_ps(at(v, t), a);
                }
            }
        }
    }

    /// `vdpbf16ps` on single lanes, for the test that pins the scalar
    /// model of the instruction: `acc + hi(a) * hi(b) + lo(a) * lo(b)` as
    /// this CPU computes it.
    pub(crate) fn dp_lane(self_: DpBf16, acc: f32, a: u32, b: u32) -> f32 {
        self_.vectorize(
            #[inline(always)]
            || {
                // SAFETY: register-only intrinsics under the detected features.
                unsafe {
                    let r = _mm512_dpbf16_ps(
                        _mm512_set1_ps(acc),
                        bh(_mm512_set1_epi32(a as i32)),
                        bh(_mm512_set1_epi32(b as i32)),
                    );
                    _mm_cvtss_f32(_mm512_castps512_ps128(r))
                }
            },
        )
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use dp::{dp_lane, DpBf16};

/// `x = [c_in, t_in]` packed for `K`, vectorised and in parallel over
/// pairs.
fn pack<K: PairKernel>(k: K, x: &[f32], c_in: usize, t_in: usize) -> Vec<K::X> {
    let x_ps = K::ROWS * t_in;
    let mut out = vec![K::X::default(); c_in.div_ceil(2) * x_ps];
    pack_par(&mut out, x_ps, |p0, o| {
        k.vectorize(
            #[inline(always)]
            || K::pack_rows(x, c_in, t_in, p0, o),
        )
    });
    out
}

/// Which tile computes a bf16 convolution.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Bf16Kernel<S> {
    /// f32 FMAs on the bf16 values (any SIMD token).
    Emulated(S),
    /// `vdpbf16ps`.
    #[cfg(target_arch = "x86_64")]
    Native(DpBf16),
    /// AMX `tdpbf16ps` tiles ([`super::conv_amx`]).
    #[cfg(target_arch = "x86_64")]
    Amx(super::conv_amx::Amx),
}

/// `taps` with their weight offsets in the `[c_out / 16][pairs][k][16]`
/// layout (16 elements per tap).
fn group_taps(taps: &[Tap]) -> Vec<Tap> {
    taps.iter()
        .map(|t| Tap {
            x_off: t.x_off,
            w_off: 16 * t.w_off,
        })
        .collect()
}

pub(crate) fn conv1d<S: Simd>(
    k: Bf16Kernel<S>,
    x: &[f32],
    t_in: usize,
    w: &ConvBf16,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &mut [f32],
) {
    match k {
        Bf16Kernel::Emulated(s) => conv1d_with(Emu(s), x, t_in, w, bias, dilation, out),
        #[cfg(target_arch = "x86_64")]
        Bf16Kernel::Native(d) => conv1d_with(d, x, t_in, w, bias, dilation, out),
        #[cfg(target_arch = "x86_64")]
        Bf16Kernel::Amx(a) => super::conv_amx::conv1d(a, x, t_in, w, bias, dilation, out),
    }
}

fn conv1d_with<K: PairKernel>(
    k: K,
    x: &[f32],
    t_in: usize,
    w: &ConvBf16,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &mut [f32],
) {
    let Some((taps, t_out)) = conv1d_setup(x, t_in, w, bias, dilation, out) else {
        return;
    };
    let xp = pack(k, x, w.c_in, t_in);
    let pairs = w.pairs();
    let x_ps = xp.len() / pairs.max(1);
    let wpc = pairs * w.kernel;
    let (layout, grp, taps) = (w.pair_layout(), w.group_stride(), group_taps(&taps));
    let short = K::CHANNEL_TILES && t_out <= CHANNEL_T_MAX;
    let co_blk = if short { SHORT_CO } else { CO };
    fill_bias(out, t_out, bias);
    // Tasks are (time slab, block of CO output channels), slab-major, so
    // each thread works through a contiguous run of slabs and every
    // channel block of a slab reuses its packed input from L2 (a whole
    // row of the last vocoder block is 96 pairs x 77k samples = 29 MB at
    // 40 frames; sweeping it once per channel block went to DRAM).
    let slab = slab_len(K::ROWS * pairs, K::LANES * K::C8_TV, t_out);
    let (n_slabs, n_cb) = (t_out.div_ceil(slab), w.c_out.div_ceil(co_blk));
    let n_tasks = n_slabs * n_cb;
    let task_work = co_blk * 2 * wpc * slab;
    let o = SharedOut::new(out);
    let task = |i: usize| {
        let (si, cb) = (i / n_cb, i % n_cb);
        let (t0, t1) = (si * slab, ((si + 1) * slab).min(t_out));
        let co0 = cb * co_blk;
        let nco = co_blk.min(w.c_out - co0);
        let blk = Block {
            x: &xp,
            x_ps,
            x_cs: t_in,
            x_t0: 0,
            pairs,
            w: &layout[co0 / 16 * grp + co0 % 16..],
            w_co: 1,
            w_ci: 16 * w.kernel,
            taps: &taps,
        };
        if short {
            // SAFETY: task i alone writes rows co0..co0 + nco of `out`
            // ([c_out, t_out], alive for the whole call); t_out is one slab.
            let rows =
                unsafe { std::slice::from_raw_parts_mut(o.ptr().add(co0 * t_out), nco * t_out) };
            let mut lanes = Lanes::gather(rows, t_out, nco, t0, t1 - t0);
            Block { x_t0: t0, ..blk }.channel_accumulate(k, &mut lanes, (0, pairs), grp);
            return lanes.scatter(rows, t_out, nco, t0);
        }
        for p0 in (0..pairs).step_by(P_CHUNK) {
            let p1 = (p0 + P_CHUNK).min(pairs);
            let pass = Pass {
                out_cs: t_out,
                t0,
                t1,
                p0,
                p1,
            };
            // SAFETY: task i alone writes rows co0..co0 + nco, columns
            // t0..t1 of `out` ([c_out, t_out], alive for the whole call).
            unsafe { blk.accumulate_raw(k, o.ptr().add(co0 * t_out), nco, pass) }
        }
    };
    run_tasks(n_tasks, task_work, task);
}
