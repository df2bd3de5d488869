//! bf16 `conv1d` / `conv_transpose1d` (format and arithmetic in
//! [`crate::conv_bf16`]).
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
//! Channel blocks, the pair chunking that keeps a block's weights in L1
//! and the transposed convolution's phase split are as in `conv.rs`.

use super::conv::{slab_len, Phases, Tap};
use super::{run_tasks, SharedOut, Simd};
use crate::conv_bf16::{flush, pack_planes, pair_hi, pair_lo, ConvBf16};

/// Output channels per task block.
const CO: usize = 8;
/// Channel pairs per pass: 8 ch x 32 pairs x 16 taps x 4 B = 16 KB of
/// weights at most, reused from L1 by every time tile and phase.
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
    /// `c * w_co + p * w_ci + tap.w_off`.
    w: &'a [u32],
    w_co: usize,
    w_ci: usize,
    taps: &'a [Tap],
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
    fn pack_rows(x: &[f32], c_in: usize, t_in: usize, pad: usize, p0: usize, out: &mut [Self::X]);
    /// `TV` vectors of time from `t0` for `C` channels, pairs `p0..p1`,
    /// added to `out` (`PART`: the last vector has `nl` lanes).
    ///
    /// # Safety
    /// Every read of `blk.x` / `w` and write of `out` inside the bounds
    /// asserted by `accumulate`.
    #[allow(
        clippy::too_many_arguments,
        reason = "an `#[inline(always)]` inner-loop step: its arguments are the enclosing loop's live bounds, strides and pointers, which a struct would only name twice"
    )]
    unsafe fn tile<const C: usize, const TV: usize, const PART: bool>(
        self,
        blk: &Block<'_, Self::X>,
        w: *const u32,
        out: *mut f32,
        out_cs: usize,
        t0: usize,
        nl: usize,
        p0: usize,
        p1: usize,
    );
}

impl<X: Copy> Block<'_, X> {
    /// Adds pairs `p0..p1` into `out = [nco, t_len]`.
    fn accumulate<K: PairKernel<X = X>>(
        &self,
        k: K,
        out: &mut [f32],
        t_len: usize,
        p0: usize,
        p1: usize,
    ) {
        if t_len == 0 {
            return;
        }
        let nco = out.len() / t_len;
        assert_eq!(out.len(), nco * t_len);
        // SAFETY: `out` is `[nco, t_len]`, exclusively borrowed.
        unsafe { self.accumulate_raw(k, out.as_mut_ptr(), t_len, nco, 0, t_len, p0, p1) }
    }

    /// Adds pairs `p0..p1` into columns `t0..t1` of `nco` rows at `out`
    /// (row stride `out_cs`).
    ///
    /// # Safety
    /// Those `nco` row segments are valid for reads and writes and no other
    /// thread touches them meanwhile.
    #[allow(
        clippy::too_many_arguments,
        reason = "a task's tile of the output: rows, time and channel-pair ranges it alone writes, computed by the task split"
    )]
    unsafe fn accumulate_raw<K: PairKernel<X = X>>(
        &self,
        k: K,
        out: *mut f32,
        out_cs: usize,
        nco: usize,
        t0: usize,
        t1: usize,
        p0: usize,
        p1: usize,
    ) {
        if t0 >= t1 || p0 >= p1 || self.taps.is_empty() || nco == 0 {
            return;
        }
        let max_x = self.taps.iter().map(|t| t.x_off).max().unwrap_or(0);
        let max_w = self.taps.iter().map(|t| t.w_off).max().unwrap_or(0);
        assert!(p1 <= self.pairs && t1 <= out_cs);
        assert!(
            self.x_t0 + t1 + max_x <= self.x_cs,
            "conv_bf16: x row too short"
        );
        assert!(
            (p1 - 1) * self.x_ps + (self.x_ps - self.x_cs) + self.x_cs <= self.x.len(),
            "conv_bf16: x too short"
        );
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
                        let r = (out_cs, t0, t1, p0, p1);
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

    /// # Safety
    /// As for `PairKernel::tile`.
    #[inline(always)]
    unsafe fn rows<K: PairKernel<X = X>, const C: usize, const TVMAX: usize>(
        &self,
        k: K,
        w: *const u32,
        out: *mut f32,
        (out_cs, t0, t1, p0, p1): (usize, usize, usize, usize, usize),
    ) {
        let l = K::LANES;
        let mut t = t0;
        while t + TVMAX * l <= t1 {
            k.tile::<C, TVMAX, false>(self, w, out, out_cs, t, l, p0, p1);
            t += TVMAX * l;
        }
        let rem = t1 - t;
        let nl = if rem.is_multiple_of(l) { l } else { rem % l };
        match (rem.div_ceil(l), !rem.is_multiple_of(l)) {
            (0, _) => {}
            (1, false) => k.tile::<C, 1, false>(self, w, out, out_cs, t, nl, p0, p1),
            (1, true) => k.tile::<C, 1, true>(self, w, out, out_cs, t, nl, p0, p1),
            (2, false) => k.tile::<C, 2, false>(self, w, out, out_cs, t, nl, p0, p1),
            (2, true) => k.tile::<C, 2, true>(self, w, out, out_cs, t, nl, p0, p1),
            _ => k.tile::<C, 3, true>(self, w, out, out_cs, t, nl, p0, p1),
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
    fn pack_rows(x: &[f32], c_in: usize, t_in: usize, pad: usize, p0: usize, out: &mut [f32]) {
        pack_planes(x, c_in, t_in, pad, p0, out)
    }

    #[inline(always)]
    unsafe fn tile<const C: usize, const TV: usize, const PART: bool>(
        self,
        blk: &Block<'_, f32>,
        w: *const u32,
        out: *mut f32,
        out_cs: usize,
        t0: usize,
        nl: usize,
        p0: usize,
        p1: usize,
    ) {
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
                    let wp = *wr.add(c * blk.w_co + tap.w_off);
                    let (wh, wl) = (s.splat(pair_hi(wp)), s.splat(pair_lo(wp)));
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
    use super::{Block, PairKernel};
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
        fn pack_rows(x: &[f32], c_in: usize, t_in: usize, pad: usize, p0: usize, out: &mut [u32]) {
            pack_pairs(x, c_in, t_in, pad, p0, out)
        }

        #[inline(always)]
        unsafe fn tile<const C: usize, const TV: usize, const PART: bool>(
            self,
            blk: &Block<'_, u32>,
            w: *const u32,
            out: *mut f32,
            out_cs: usize,
            t0: usize,
            nl: usize,
            p0: usize,
            p1: usize,
        ) {
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

/// Elements per packing task (rounding is ~1 ns per element scalar; the
/// vocoder's last block packs ~15M per call).
const PACK_TASK: usize = 1 << 16;

/// `x = [c_in, t_in]` packed for `K` with `pad` zero columns each side,
/// vectorised and in parallel over pairs.
fn pack<K: PairKernel>(k: K, x: &[f32], c_in: usize, t_in: usize, pad: usize) -> Vec<K::X> {
    let x_ps = K::ROWS * (t_in + 2 * pad);
    let mut out = vec![K::X::default(); c_in.div_ceil(2) * x_ps];
    pack_par(&mut out, x_ps, |p0, o| {
        k.vectorize(
            #[inline(always)]
            || K::pack_rows(x, c_in, t_in, pad, p0, o),
        )
    });
    out
}

/// Fills `out` (whole pairs of `x_ps` elements) by `fill(first pair,
/// its chunk)`, in parallel chunks of about [`PACK_TASK`] elements.
pub(super) fn pack_par<X: Send>(
    out: &mut [X],
    x_ps: usize,
    fill: impl Fn(usize, &mut [X]) + Sync + Send,
) {
    if out.is_empty() {
        return;
    }
    let per = PACK_TASK.div_ceil(x_ps).max(1);
    let (len, chunk) = (out.len(), per * x_ps);
    if len <= chunk {
        return fill(0, out);
    }
    let o = SharedOut::new(out);
    crate::team::for_each(len.div_ceil(chunk), |i| {
        // SAFETY: chunk i is `out[i * chunk..]` up to `len`; chunks are
        // disjoint and `out` outlives the call.
        let c = unsafe {
            std::slice::from_raw_parts_mut(o.ptr().add(i * chunk), chunk.min(len - i * chunk))
        };
        fill(i * per, c)
    });
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

/// `out = bias` per `t_len` row (bias flushed: DAZ on the accumulator).
pub(super) fn fill_bias(out: &mut [f32], t_len: usize, bias: Option<&[f32]>) {
    if t_len == 0 {
        return;
    }
    for (c, row) in out.chunks_mut(t_len).enumerate() {
        row.fill(bias.map_or(0.0, |b| flush(b[c])));
    }
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

fn check_common(x: &[f32], t_in: usize, w: &ConvBf16, bias: Option<&[f32]>, what: &str) {
    assert_eq!(x.len(), w.c_in * t_in, "{what}: x is not [c_in, t_in]");
    if let Some(b) = bias {
        assert_eq!(b.len(), w.c_out, "{what}: bias is not [c_out]");
    }
}

/// Checks a `conv1d_bf16` call and returns its taps and `t_out`, or `None`
/// when there is nothing to compute.
pub(super) fn conv1d_setup(
    x: &[f32],
    t_in: usize,
    w: &ConvBf16,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &[f32],
) -> Option<(Vec<Tap>, usize)> {
    check_common(x, t_in, w, bias, "conv1d_bf16");
    let t_out = t_in.saturating_sub((w.kernel - 1) * dilation);
    assert_eq!(
        out.len(),
        w.c_out * t_out,
        "conv1d_bf16: out is not [c_out, t_out]"
    );
    if t_out == 0 || w.c_out == 0 {
        return None;
    }
    let taps = (0..w.kernel)
        .map(|kk| Tap {
            x_off: kk * dilation,
            w_off: kk,
        })
        .collect();
    Some((taps, t_out))
}

/// The bias with subnormals flushed (DAZ on the accumulator), for
/// [`Phases::run`]'s fill.
pub(super) fn flushed(bias: Option<&[f32]>) -> Option<Vec<f32>> {
    bias.map(|b| b.iter().map(|&v| flush(v)).collect())
}

/// Checks a `conv_transpose1d_bf16` call and splits it into phases;
/// `None` when there is nothing to compute.
pub(super) fn transposed_setup(
    x: &[f32],
    t_in: usize,
    w: &ConvBf16,
    bias: Option<&[f32]>,
    stride: usize,
    out: &[f32],
) -> Option<Phases> {
    assert!(stride > 0, "conv_transpose1d_bf16: stride must be >= 1");
    check_common(x, t_in, w, bias, "conv_transpose1d_bf16");
    let ph = Phases::split(t_in, w.kernel, stride);
    assert_eq!(
        out.len(),
        w.c_out * ph.t_out,
        "conv_transpose1d_bf16: out is not [c_out, t_out]"
    );
    (ph.t_out > 0 && w.c_out > 0).then_some(ph)
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
    let xp = pack(k, x, w.c_in, t_in, 0);
    let pairs = w.pairs();
    let x_ps = xp.len() / pairs.max(1);
    let wpc = pairs * w.kernel;
    fill_bias(out, t_out, bias);
    // Tasks are (time slab, block of CO output channels), slab-major, so
    // each thread works through a contiguous run of slabs and every
    // channel block of a slab reuses its packed input from L2 (a whole
    // row of the last vocoder block is 96 pairs x 77k samples = 29 MB at
    // 40 frames; sweeping it once per channel block went to DRAM).
    let slab = slab_len(K::ROWS * pairs, K::LANES * K::C8_TV, t_out);
    let (n_slabs, n_cb) = (t_out.div_ceil(slab), w.c_out.div_ceil(CO));
    let n_tasks = n_slabs * n_cb;
    let task_work = CO * 2 * wpc * slab;
    let o = SharedOut::new(out);
    let task = |i: usize| {
        let (si, cb) = (i / n_cb, i % n_cb);
        let (t0, t1) = (si * slab, ((si + 1) * slab).min(t_out));
        let co0 = cb * CO;
        let nco = CO.min(w.c_out - co0);
        let blk = Block {
            x: &xp,
            x_ps,
            x_cs: t_in,
            x_t0: 0,
            pairs,
            w: &w.pair_layout()[co0 * wpc..(co0 + nco) * wpc],
            w_co: wpc,
            w_ci: w.kernel,
            taps: &taps,
        };
        for p0 in (0..pairs).step_by(P_CHUNK) {
            let p1 = (p0 + P_CHUNK).min(pairs);
            // SAFETY: task i alone writes rows co0..co0 + nco, columns
            // t0..t1 of `out` ([c_out, t_out], alive for the whole call).
            unsafe { blk.accumulate_raw(k, o.ptr().add(co0 * t_out), t_out, nco, t0, t1, p0, p1) }
        }
    };
    run_tasks(n_tasks, task_work, task);
}

pub(crate) fn conv_transpose1d<S: Simd>(
    k: Bf16Kernel<S>,
    x: &[f32],
    t_in: usize,
    w: &ConvBf16,
    bias: Option<&[f32]>,
    stride: usize,
    out: &mut [f32],
) {
    match k {
        Bf16Kernel::Emulated(s) => conv_transpose1d_with(Emu(s), x, t_in, w, bias, stride, out),
        #[cfg(target_arch = "x86_64")]
        Bf16Kernel::Native(d) => conv_transpose1d_with(d, x, t_in, w, bias, stride, out),
        #[cfg(target_arch = "x86_64")]
        Bf16Kernel::Amx(a) => super::conv_amx::conv_transpose1d(a, x, t_in, w, bias, stride, out),
    }
}

fn conv_transpose1d_with<K: PairKernel>(
    k: K,
    x: &[f32],
    t_in: usize,
    w: &ConvBf16,
    bias: Option<&[f32]>,
    stride: usize,
    out: &mut [f32],
) {
    let Some(ph) = transposed_setup(x, t_in, w, bias, stride, out) else {
        return;
    };
    let kernel = w.kernel;
    let x_cs = t_in + 2 * ph.pad;
    let xp = pack(k, x, w.c_in, t_in, ph.pad);
    let pairs = w.pairs();
    let x_ps = xp.len() / pairs.max(1);
    let wpc = pairs * kernel;
    let n_q = ph.t_out.div_ceil(stride);
    let slab = slab_len(K::ROWS * pairs, K::LANES * K::C8_TV, n_q);
    ph.run(
        w.c_out,
        flushed(bias).as_deref(),
        out,
        (CO, slab, CO * 2 * pairs * (ph.pad + 1) * slab * stride),
        |q0, co0, nco, y, lens| {
            for p0 in (0..pairs).step_by(P_CHUNK) {
                let p1 = (p0 + P_CHUNK).min(pairs);
                for ((_, taps), (yr, &len)) in ph.phases.iter().zip(y.iter_mut().zip(lens)) {
                    let blk = Block {
                        x: &xp,
                        x_ps,
                        x_cs,
                        x_t0: q0,
                        pairs,
                        w: &w.pair_layout()[co0 * wpc..(co0 + nco) * wpc],
                        w_co: wpc,
                        w_ci: kernel,
                        taps,
                    };
                    blk.accumulate(k, yr, len, p0, p1);
                }
            }
        },
    );
}
