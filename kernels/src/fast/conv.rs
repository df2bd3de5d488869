//! `conv1d` and `conv_transpose1d`.
//!
//! Both reduce to one register tile: `C` output channels x `TV` vectors of
//! time, accumulating `sum_ci sum_tap w[c, ci, tap] * x[ci, t + x_off(tap)]`
//! with the weight broadcast and `x` loaded unaligned. With AVX-512 an 8 x 3
//! tile is 24 accumulators and costs 3 loads + 8 broadcasts per 24 FMAs, so
//! the FMA pipes, not the loads, are the limit: one thread measured 54 G
//! multiply-adds/s on 1536-channel k7 (the Zen 4 here retires one 512-bit
//! FMA per cycle, so that is about peak). Tasks are (time slab, block of
//! output channels) pairs, slab-major, so a slab of the input (~512 KB) is
//! reused from L2 by every channel block (`slab_len`).
//!
//! The transposed convolution is split into its `stride` phases: outputs
//! `t = q * stride + r` only see taps `r, r + stride, ...`, which is a valid
//! convolution with unit dilation over `x` zero-padded by `J - 1` on both
//! sides (`J = ceil(kernel / stride)` taps per phase). Weights are read in
//! place (`[c_in, c_out, kernel]` strides), never repacked: the vocoder's
//! upsampling weights are tens of MB.
//!
//! Over 700 lines on purpose: both convolutions drive the one `Block` tile
//! and task split defined here, and their short-input special cases
//! (im2col GEMM, outer products) sit beside the path they replace.

use super::{for_blocks, run_tasks, SharedOut, Simd};
use crate::shape::{Conv1dShape, ConvTranspose1dShape};

/// Output channels per block handed to a task (a multiple of every tile
/// height below).
const CO: usize = 8;

/// One kernel tap: `x` is read at time offset `x_off`, the weight at element
/// offset `w_off` within a `(c_out, c_in)` pair.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tap {
    pub(crate) x_off: usize,
    pub(crate) w_off: usize,
}

/// A transposed convolution split into `stride` phases: phase `r` computes
/// outputs `q * stride + r` from the taps `kk = r + jp * stride`, which
/// read `x[q - jp]`, i.e. column `q + pad - jp` of an input padded by
/// `pad = ceil(kernel / stride) - 1` zero columns each side. Shared by the
/// f32, bf16 and AMX transposed convolutions.
pub(crate) struct Phases {
    pub(crate) t_out: usize,
    pub(crate) pad: usize,
    /// Per phase: its output count and its taps.
    pub(crate) phases: Vec<(usize, Vec<Tap>)>,
}

impl Phases {
    pub(crate) fn split(t_in: usize, kernel: usize, stride: usize) -> Phases {
        let t_out = if t_in == 0 {
            0
        } else {
            (t_in - 1) * stride + kernel
        };
        let j = kernel.div_ceil(stride);
        let pad = j - 1;
        let phases = (0..stride)
            .map(|r| {
                let n_r = if r >= t_out {
                    0
                } else {
                    (t_out - r).div_ceil(stride)
                };
                let taps = (0..j)
                    .map(|jp| (jp, r + jp * stride))
                    .filter(|&(_, kk)| kk < kernel)
                    .map(|(jp, kk)| Tap {
                        x_off: pad - jp,
                        w_off: kk,
                    })
                    .collect();
                (n_r, taps)
            })
            .collect();
        Phases { t_out, pad, phases }
    }

    /// Runs the convolution as tasks of (slab of `slab` phase columns,
    /// block of `co_block` of the `c_out` output channels), slab-major, so
    /// a slab of the input stays in L2 while every channel block and phase
    /// reads it. `compute(q0, co0, nco, y, lens)` adds a task's phases into
    /// its local `[nco, lens[r]]` buffers `y[r]` (filled with the bias);
    /// they are then scattered to `out[co, q * stride + r]`.
    pub(crate) fn run(
        &self,
        c_out: usize,
        bias: Option<&[f32]>,
        out: &mut [f32],
        (co_block, slab, task_work): (usize, usize, usize),
        compute: impl Fn(usize, usize, usize, &mut [Vec<f32>], &[usize]) + Sync + Send,
    ) {
        let stride = self.phases.len();
        let n_q = self.t_out.div_ceil(stride); // columns of phase 0, the longest
        let (n_slabs, n_cb) = (n_q.div_ceil(slab), c_out.div_ceil(co_block));
        let o = SharedOut::new(out);
        let task = |i: usize| {
            let (si, cb) = (i / n_cb, i % n_cb);
            let q0 = si * slab;
            let co0 = cb * co_block;
            let nco = co_block.min(c_out - co0);
            let bias = bias.map(|b| &b[co0..co0 + nco]);
            let lens: Vec<usize> = self
                .phases
                .iter()
                .map(|(n_r, _)| (*n_r).min(q0 + slab).saturating_sub(q0))
                .collect();
            let mut y: Vec<Vec<f32>> = lens
                .iter()
                .map(|&len| {
                    let mut v = vec![0f32; nco * len];
                    fill_bias(&mut v, len, bias);
                    v
                })
                .collect();
            compute(q0, co0, nco, &mut y, &lens);
            // SAFETY: task i alone writes rows co0..co0 + nco at columns
            // q * stride + r for q in q0..q0 + len (< t_out by the phase
            // length), inside `out` ([c_out, t_out], alive for the call).
            unsafe { scatter_phases(o, &y, &lens, co0, q0, stride, self.t_out) };
        };
        run_tasks(n_slabs * n_cb, task_work, task);
    }
}

/// A block of output channels sharing one input slice.
struct Block<'a> {
    /// `[cin, x_cs]` input rows.
    x: &'a [f32],
    x_cs: usize,
    /// Input column of output column 0 (a slab's start when the output
    /// buffer holds only that slab).
    x_t0: usize,
    cin: usize,
    /// Weight of (block channel `c`, input `ci`, tap) at `c * w_co + ci * w_ci + tap.w_off`.
    w: &'a [f32],
    w_co: usize,
    w_ci: usize,
    taps: &'a [Tap],
}

/// One pass over a block's output: columns `t0..t1` of its rows (row
/// stride `out_cs`), adding input channels `ci0..ci1`.
#[derive(Clone, Copy)]
struct Pass {
    out_cs: usize,
    t0: usize,
    t1: usize,
    ci0: usize,
    ci1: usize,
}

/// Input channels per pass over a block's outputs: the block's weights for
/// one pass (4 ch x 64 x 16 taps x 4 B = 16 KB at most here) stay in L1
/// while every time tile and transposed phase reuses them. Without it the
/// transposed convolution re-fetched each weight from DRAM once per time
/// tile (its `c_in` stride is tens of KB, beyond the prefetchers) and ran
/// 10x slower than the dense one. Partial sums live in `out` between
/// passes; storing an f32 and loading it back is exact, so the per-element
/// arithmetic (and the bits) do not depend on the chunking.
const CI_CHUNK: usize = 64;

impl Block<'_> {
    /// Adds input channels `ci0..ci1` into `out = [nco, t_len]` (rows
    /// contiguous, `nco = out.len() / t_len`), which holds the bias or the
    /// partial sums of earlier channels.
    fn accumulate<S: Simd>(&self, s: S, out: &mut [f32], t_len: usize, ci0: usize, ci1: usize) {
        if t_len == 0 {
            return;
        }
        let nco = out.len() / t_len;
        assert_eq!(out.len(), nco * t_len);
        let pass = Pass {
            out_cs: t_len,
            t0: 0,
            t1: t_len,
            ci0,
            ci1,
        };
        // SAFETY: `out` is `[nco, t_len]`, exclusively borrowed.
        unsafe { self.accumulate_raw(s, out.as_mut_ptr(), nco, pass) }
    }

    /// Adds input channels `ci0..ci1` into columns `t0..t1` of `nco` rows
    /// at `out` (row stride `out_cs`; all four from `pass`).
    ///
    /// # Safety
    /// Those `nco` row segments are valid for reads and writes and no other
    /// thread touches them meanwhile.
    unsafe fn accumulate_raw<S: Simd>(&self, s: S, out: *mut f32, nco: usize, pass: Pass) {
        let Pass {
            out_cs,
            t0,
            t1,
            ci0,
            ci1,
        } = pass;
        if t0 >= t1 || ci0 >= ci1 || self.taps.is_empty() || nco == 0 {
            return;
        }
        let max_x = self.taps.iter().map(|t| t.x_off).max().unwrap_or(0);
        let max_w = self.taps.iter().map(|t| t.w_off).max().unwrap_or(0);
        // The bounds every unchecked access below relies on.
        assert!(ci1 <= self.cin && t1 <= out_cs);
        assert!(
            (ci1 - 1) * self.x_cs + self.x_t0 + t1 + max_x <= self.x.len(),
            "conv: x too short"
        );
        assert!(
            (nco - 1) * self.w_co + (ci1 - 1) * self.w_ci + max_w < self.w.len(),
            "conv: w too short"
        );
        s.vectorize(
            #[inline(always)]
            || {
                let mut c0 = 0;
                while c0 < nco {
                    // Tiles (channels x vectors): AVX-512 8 x 3 = 24 of 32
                    // zmm accumulators, 3 loads + 8 broadcasts per 24 FMAs;
                    // AVX2 4 x 2 = 8 of 16 ymm.
                    let wide = S::LANES >= 16;
                    let c = match nco - c0 {
                        r if wide && r >= 8 => 8,
                        r if r >= 4 => 4,
                        _ => 1,
                    };
                    // SAFETY: the asserts above bound every x read
                    // (ci * x_cs + t + x_off < x.len() for ci < ci1, t < t1)
                    // and weight read; the caller vouches for the out rows.
                    unsafe {
                        let o = out.add(c0 * out_cs);
                        let w = self.w.as_ptr().add(c0 * self.w_co);
                        let r = pass;
                        match (c, wide) {
                            (8, _) => self.rows::<S, 8, 3>(s, w, o, r),
                            (4, true) => self.rows::<S, 4, 4>(s, w, o, r),
                            (4, false) => self.rows::<S, 4, 2>(s, w, o, r),
                            (_, true) => self.rows::<S, 1, 4>(s, w, o, r),
                            _ => self.rows::<S, 1, 2>(s, w, o, r),
                        }
                    }
                    c0 += c;
                }
            },
        )
    }

    /// Whole register tiles of `TVMAX` vectors, then one tile of the
    /// remaining (1..TVMAX) vectors whose last may be partial: a short row
    /// (transposed phases of a few dozen samples) is a single tile, so each
    /// weight is loaded once per pass.
    ///
    /// # Safety
    /// `w` and `out` point at the block's first channel, with the bounds
    /// `accumulate` asserts.
    #[inline(always)]
    unsafe fn rows<S: Simd, const C: usize, const TVMAX: usize>(
        &self,
        s: S,
        w: *const f32,
        out: *mut f32,
        pass: Pass,
    ) {
        let l = S::LANES;
        let mut t = pass.t0;
        while t + TVMAX * l <= pass.t1 {
            let p = Pass { t0: t, ..pass };
            self.tile::<S, C, TVMAX, false>(s, w, out, p, l);
            t += TVMAX * l;
        }
        let rem = pass.t1 - t;
        let nl = if rem.is_multiple_of(l) { l } else { rem % l };
        let p = Pass { t0: t, ..pass };
        match (rem.div_ceil(l), !rem.is_multiple_of(l)) {
            (0, _) => {}
            (1, false) => self.tile::<S, C, 1, false>(s, w, out, p, nl),
            (1, true) => self.tile::<S, C, 1, true>(s, w, out, p, nl),
            (2, false) => self.tile::<S, C, 2, false>(s, w, out, p, nl),
            (2, true) => self.tile::<S, C, 2, true>(s, w, out, p, nl),
            (3, false) => self.tile::<S, C, 3, false>(s, w, out, p, nl),
            (3, true) => self.tile::<S, C, 3, true>(s, w, out, p, nl),
            _ => self.tile::<S, C, 4, true>(s, w, out, p, nl),
        }
    }

    /// `TV` vectors of time from `pass.t0` for `C` channels (`pass.t1` is
    /// not read); with `PART` the last vector has only `nl` lanes. Per
    /// element: the value in `out`, then one FMA per (`ci`, tap) in order.
    ///
    /// # Safety
    /// As for `rows`, with the tile inside `0..t_len`.
    #[inline(always)]
    unsafe fn tile<S: Simd, const C: usize, const TV: usize, const PART: bool>(
        &self,
        s: S,
        w: *const f32,
        out: *mut f32,
        pass: Pass,
        nl: usize,
    ) {
        let Pass {
            out_cs,
            t0,
            ci0,
            ci1,
            ..
        } = pass;
        // (No closure here: closures in vector code are not reliably
        // inlined into the `#[target_feature]` trampoline.)
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
        let x = self.x.as_ptr();
        for ci in ci0..ci1 {
            let xr = x.add(ci * self.x_cs + self.x_t0 + t0);
            let wr = w.add(ci * self.w_ci);
            for tap in self.taps {
                let mut xv = [s.splat(0.0); TV];
                for (v, xv) in xv.iter_mut().enumerate() {
                    *xv = ld!(xr.add(tap.x_off + v * S::LANES), v);
                }
                for (c, a) in acc.iter_mut().enumerate() {
                    let wv = s.splat(*wr.add(c * self.w_co + tap.w_off));
                    for (av, &xv) in a.iter_mut().zip(&xv) {
                        *av = s.fma(wv, xv, *av);
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

/// Each `t_len` row of `out` set to its bias (or 0).
fn fill_bias(out: &mut [f32], t_len: usize, bias: Option<&[f32]>) {
    if t_len == 0 {
        return;
    }
    for (c, row) in out.chunks_mut(t_len).enumerate() {
        row.fill(bias.map_or(0.0, |b| b[c]));
    }
}

pub(crate) fn conv1d<S: Simd>(
    s: S,
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    sh: Conv1dShape,
    out: &mut [f32],
) {
    assert!(
        sh.kernel > 0 && sh.groups > 0,
        "conv1d: kernel and groups must be >= 1"
    );
    assert!(
        sh.c_in.is_multiple_of(sh.groups) && sh.c_out.is_multiple_of(sh.groups),
        "conv1d: groups must divide channels"
    );
    let span = (sh.kernel - 1) * sh.dilation;
    let t_out = t_in.saturating_sub(span);
    let (cin_g, cout_g) = (sh.c_in / sh.groups, sh.c_out / sh.groups);
    assert_eq!(x.len(), sh.c_in * t_in, "conv1d: x is not [c_in, t_in]");
    assert_eq!(
        w.len(),
        sh.c_out * cin_g * sh.kernel,
        "conv1d: weight shape"
    );
    assert_eq!(
        out.len(),
        sh.c_out * t_out,
        "conv1d: out is not [c_out, t_out]"
    );
    if let Some(b) = bias {
        assert_eq!(b.len(), sh.c_out, "conv1d: bias is not [c_out]");
    }
    if t_out == 0 || sh.c_out == 0 {
        return;
    }
    let taps: Vec<Tap> = (0..sh.kernel)
        .map(|kk| Tap {
            x_off: kk * sh.dilation,
            w_off: kk,
        })
        .collect();
    if cin_g == 1 && cout_g == 1 && matches!(sh.kernel, 3 | 5 | 7) {
        return depthwise(s, x, t_in, w, bias, sh, out);
    }
    if sh.groups == 1 && t_out < S::LANES && sh.c_out >= 8 {
        return short_dense(s, x, t_in, w, bias, sh, out);
    }
    // A block must not straddle groups; other depthwise shapes
    // (cout_g == 1) get one channel per block, reading its own input row.
    let block = [CO, 4]
        .into_iter()
        .find(|b| cout_g.is_multiple_of(*b))
        .unwrap_or(1);
    let wpc = cin_g * sh.kernel; // weights per output channel
    fill_bias(out, t_out, bias);
    // Tasks are (time slab, block of output channels), slab-major: each
    // thread works through a contiguous run of slabs, and every channel
    // block of a slab reuses that slab's input from L2. (One task per
    // channel block, each sweeping all of time, re-read the whole input
    // from DRAM per block once it outgrew the caches: the vocoder's last
    // block reads 192 x 77k samples = 59 MB per conv at 40 frames; measured
    // 21-49 G multiply-adds per CPU second there against 52 with slabs.)
    // Per output element the order is unchanged (bias, then input channels
    // and taps in order): the same bits as before.
    let tile = if S::LANES >= 16 {
        3 * S::LANES
    } else {
        2 * S::LANES
    };
    let slab = slab_len(cin_g, tile, t_out);
    let (n_slabs, n_cb) = (t_out.div_ceil(slab), sh.c_out.div_ceil(block));
    let n_tasks = n_slabs * n_cb;
    let task_work = block * wpc * slab;
    let o = SharedOut::new(out);
    let task = |i: usize| {
        let (si, cb) = (i / n_cb, i % n_cb);
        let (t0, t1) = (si * slab, ((si + 1) * slab).min(t_out));
        let co0 = cb * block;
        let g = co0 / cout_g;
        let nco = block.min(sh.c_out - co0);
        let blk = Block {
            x: &x[g * cin_g * t_in..(g + 1) * cin_g * t_in],
            x_cs: t_in,
            x_t0: 0,
            cin: cin_g,
            w: &w[co0 * wpc..(co0 + nco) * wpc],
            w_co: wpc,
            w_ci: sh.kernel,
            taps: &taps,
        };
        for ci0 in (0..cin_g).step_by(CI_CHUNK) {
            let ci1 = (ci0 + CI_CHUNK).min(cin_g);
            let pass = Pass {
                out_cs: t_out,
                t0,
                t1,
                ci0,
                ci1,
            };
            // SAFETY: task i alone writes rows co0..co0 + nco, columns
            // t0..t1 of `out` ([c_out, t_out], alive for the whole call).
            unsafe { blk.accumulate_raw(s, o.ptr().add(co0 * t_out), nco, pass) }
        }
    };
    run_tasks(n_tasks, task_work, task);
}

/// Time columns per slab of a conv: a multiple of the register tile's
/// width whose input (`rows` rows of f32, or of bf16 pairs) fills about
/// `SLAB_BYTES`.
pub(crate) fn slab_len(rows: usize, tile: usize, t_out: usize) -> usize {
    let s = (SLAB_BYTES / (4 * rows.max(1))).max(tile);
    let s = s - s % tile;
    s.min(t_out.max(1))
}

/// Input bytes per slab: half of Zen 4's 1 MB L2 (256 to 2048 KB measured
/// within noise of each other on the bf16 kernel; no slabs was worse).
const SLAB_BYTES: usize = 512 << 10;

/// A dense convolution with fewer outputs than vector lanes (streaming at
/// the frame rate: one new column per call) would leave most lanes of the
/// time-vectorised tiles idle. Instead, as a GEMM over the im2col matrix:
/// `out^T [t_out, c_out] = cols [t_out, c_in * k] x W^T`, where the weight
/// `[c_out, c_in, k]` already is the `[n, k]` row-major matrix `matmul`
/// wants, and `matmul` vectorises along `c_in * k`. Weights are still read
/// once per call, which is what bounds this case.
fn short_dense<S: Simd>(
    s: S,
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    sh: Conv1dShape,
    out: &mut [f32],
) {
    let t_out = sh.t_out(t_in);
    let kk_n = sh.c_in * sh.kernel;
    let mut cols = vec![0f32; t_out * kk_n];
    for (t, col) in cols.chunks_exact_mut(kk_n).enumerate() {
        for (ci, c) in col.chunks_exact_mut(sh.kernel).enumerate() {
            for (kk, v) in c.iter_mut().enumerate() {
                *v = x[ci * t_in + t + kk * sh.dilation];
            }
        }
    }
    let mut tmp = vec![0f32; t_out * sh.c_out];
    let wm = crate::mat::Mat::F32 {
        data: w,
        rows: sh.c_out,
        cols: kk_n,
    };
    super::matmul::matmul(s, &cols, t_out, &wm, bias, &mut tmp);
    for (t, row) in tmp.chunks_exact(sh.c_out).enumerate() {
        for (co, &v) in row.iter().enumerate() {
            out[co * t_out + t] = v;
        }
    }
}

/// Depthwise convolution with a small odd kernel: one channel per row, the
/// `K` weights hoisted into registers, one FMA chain per output vector (the
/// generic block path re-broadcasts each weight per tile and round-trips
/// partial sums through memory, which is most of the work when each
/// output costs only `K` FMAs). Same per-element order as the reference:
/// bias, then taps in order.
fn depthwise<S: Simd>(
    s: S,
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    sh: Conv1dShape,
    out: &mut [f32],
) {
    let t_out = sh.t_out(t_in);
    let k = sh.kernel;
    for_blocks(out, t_out, k * t_out, |c, o| {
        let xr = &x[c * t_in..(c + 1) * t_in];
        let wr = &w[c * k..(c + 1) * k];
        let b = bias.map_or(0.0, |b| b[c]);
        s.vectorize(
            #[inline(always)]
            || {
                // SAFETY: `o` has t_out elements, `xr` has
                // t_in = t_out + (k - 1) * dilation, and `dw_row` reads
                // xr[t + kk * dilation] only for t < t_out, kk < k.
                unsafe {
                    match k {
                        3 => dw_row::<S, 3>(s, xr, wr, b, sh.dilation, o),
                        5 => dw_row::<S, 5>(s, xr, wr, b, sh.dilation, o),
                        _ => dw_row::<S, 7>(s, xr, wr, b, sh.dilation, o),
                    }
                }
            },
        )
    });
}

/// # Safety
/// `w.len() == K`, `x.len() >= o.len() + (K - 1) * dilation`.
#[inline(always)]
unsafe fn dw_row<S: Simd, const K: usize>(
    s: S,
    x: &[f32],
    w: &[f32],
    bias: f32,
    dilation: usize,
    o: &mut [f32],
) {
    let mut wv = [s.splat(0.0); K];
    for (v, &wk) in wv.iter_mut().zip(w) {
        *v = s.splat(wk);
    }
    let (n, l, xp, op) = (o.len(), S::LANES, x.as_ptr(), o.as_mut_ptr());
    let b = s.splat(bias);
    let mut t = 0;
    while t + l <= n {
        let mut acc = b;
        for (kk, &wk) in wv.iter().enumerate() {
            acc = s.fma(wk, s.load(xp.add(t + kk * dilation)), acc);
        }
        s.store(op.add(t), acc);
        t += l;
    }
    if t < n {
        let nl = n - t;
        let mut acc = b;
        for (kk, &wk) in wv.iter().enumerate() {
            acc = s.fma(wk, s.load_part(xp.add(t + kk * dilation), nl), acc);
        }
        s.store_part(op.add(t), nl, acc);
    }
}

pub(crate) fn conv_transpose1d<S: Simd>(
    s: S,
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    sh: ConvTranspose1dShape,
    out: &mut [f32],
) {
    let ConvTranspose1dShape {
        c_in,
        c_out,
        kernel,
        stride,
    } = sh;
    assert!(
        kernel > 0 && stride > 0,
        "conv_transpose1d: kernel and stride must be >= 1"
    );
    let t_out = sh.t_out(t_in);
    assert_eq!(
        x.len(),
        c_in * t_in,
        "conv_transpose1d: x is not [c_in, t_in]"
    );
    assert_eq!(
        w.len(),
        c_in * c_out * kernel,
        "conv_transpose1d: weight shape"
    );
    assert_eq!(
        out.len(),
        c_out * t_out,
        "conv_transpose1d: out is not [c_out, t_out]"
    );
    if let Some(b) = bias {
        assert_eq!(b.len(), c_out, "conv_transpose1d: bias is not [c_out]");
    }
    if t_out == 0 || c_out == 0 {
        return;
    }
    if t_in <= 4 && c_out * kernel >= 64 {
        return short_transpose(s, x, t_in, w, bias, sh, out);
    }
    let ph = Phases::split(t_in, kernel, stride);
    let pad = ph.pad;
    let x_cs = t_in + 2 * pad;
    let xp_owned;
    let xp: &[f32] = if pad == 0 {
        x
    } else {
        let mut v = vec![0f32; c_in * x_cs];
        for (d, r) in v.chunks_exact_mut(x_cs).zip(x.chunks_exact(t_in)) {
            d[pad..pad + t_in].copy_from_slice(r);
        }
        xp_owned = v;
        &xp_owned
    };
    // Tasks are (slab of phase columns q, block of CO output channels),
    // slab-major as in `conv1d` (`Phases::run`; the vocoder's last
    // upsampling reads 192 x 25.6k samples at 40 frames: 13-31 G
    // multiply-adds per CPU second without slabs). Each task computes its
    // phases input-channel chunk by chunk across all phases (a chunk's
    // weights are reused from cache by every phase). Per output the order
    // is unchanged: bias, then input channels and the phase's taps in order.
    let n_q = t_out.div_ceil(stride); // columns of phase 0, the longest
    let tile = if S::LANES >= 16 {
        3 * S::LANES
    } else {
        2 * S::LANES
    };
    let slab = slab_len(c_in, tile, n_q);
    let task_work = CO * c_in * (pad + 1) * slab * stride;
    ph.run(
        c_out,
        bias,
        out,
        (CO, slab, task_work),
        |q0, co0, _, y, lens| {
            for ci0 in (0..c_in).step_by(CI_CHUNK) {
                let ci1 = (ci0 + CI_CHUNK).min(c_in);
                for ((_, taps), (yr, &len)) in ph.phases.iter().zip(y.iter_mut().zip(lens)) {
                    let blk = Block {
                        x: xp,
                        x_cs,
                        x_t0: q0,
                        cin: c_in,
                        w: &w[co0 * kernel..],
                        w_co: kernel,
                        w_ci: c_out * kernel,
                        taps,
                    };
                    blk.accumulate(s, yr, len, ci0, ci1);
                }
            }
        },
    );
}

/// Columns of `[c_out * kernel]` per task in `short_transpose`.
const ST_COLS: usize = 2048;

/// A transposed convolution over at most 4 input columns (streaming: one
/// new frame plus history per call). The phase split would run vectors of
/// 1-4 useful lanes (measured ~20% slower at t_in = 2; both are far below
/// DRAM bandwidth on 75 MB of weights, an open item); instead, the weight `[c_in, c_out * kernel]` is a
/// matrix with contiguous rows, and `p[t, n] = sum_ci x[ci, t] w[ci, n]` is
/// `t_in` rows of outer-product accumulation vectorised along `n`, each
/// weight read once. Then `out[co, t * stride + kk] = bias + sum_t p[t,
/// co * kernel + kk]` (t in order).
fn short_transpose<S: Simd>(
    s: S,
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    sh: ConvTranspose1dShape,
    out: &mut [f32],
) {
    let ConvTranspose1dShape {
        c_in,
        c_out,
        kernel,
        stride,
    } = sh;
    let t_out = sh.t_out(t_in);
    let n = c_out * kernel;
    // p in column blocks: block b is [t_in, cb] at b * t_in * ST_COLS, so
    // each task owns one contiguous chunk.
    let mut p = vec![0f32; t_in * n];
    for_blocks(&mut p, t_in * ST_COLS, c_in * t_in * ST_COLS, |b, pb| {
        let (n0, cb) = (b * ST_COLS, pb.len() / t_in);
        let cols = Cols { w, n, n0, cb };
        s.vectorize(
            #[inline(always)]
            || {
                // SAFETY: x is [c_in, t_in], w is [c_in, n] (asserted by the
                // caller) and n0 + cb <= n; pb is [t_in, cb].
                unsafe {
                    match t_in {
                        1 => outer_rows::<S, 1>(s, x, c_in, cols, pb),
                        2 => outer_rows::<S, 2>(s, x, c_in, cols, pb),
                        3 => outer_rows::<S, 3>(s, x, c_in, cols, pb),
                        _ => outer_rows::<S, 4>(s, x, c_in, cols, pb),
                    }
                }
            },
        )
    });
    fill_bias(out, t_out, bias);
    for t in 0..t_in {
        for co in 0..c_out {
            let orow = &mut out[co * t_out + t * stride..][..kernel];
            for (kk, o) in orow.iter_mut().enumerate() {
                let col = co * kernel + kk;
                let (b, c) = (col / ST_COLS, col % ST_COLS);
                let cb = ST_COLS.min(n - b * ST_COLS);
                *o += p[b * t_in * ST_COLS + t * cb + c];
            }
        }
    }
}

/// One task's block of weight columns in [`short_transpose`]: columns
/// `n0..n0 + cb` of `w = [c_in, n]`.
#[derive(Clone, Copy)]
struct Cols<'a> {
    w: &'a [f32],
    n: usize,
    n0: usize,
    cb: usize,
}

/// `pb[t, c] = sum_ci x[ci, t] * w[ci, n0 + c]` for `t < T`, `c < cb`.
///
/// `ci` is the outer loop so weights stream as `c_in` contiguous runs of
/// `cb` floats (8 KB) rather than 128-byte reads 48 KB apart (a
/// column-tile-outer order, ~1.7x slower). The `[T, cb]` partial sums stay
/// in L1.
///
/// # Safety
/// `x` is `[c_in, T]`, `cols.w` is `[c_in, n]` with `n0 + cb <= n`, `pb`
/// is `[T, cb]`.
#[inline(always)]
unsafe fn outer_rows<S: Simd, const T: usize>(
    s: S,
    x: &[f32],
    c_in: usize,
    cols: Cols<'_>,
    pb: &mut [f32],
) {
    let Cols { w, n, n0, cb } = cols;
    pb.fill(0.0);
    let (l, rs) = (S::LANES, cb);
    let cv = cb - cb % l;
    let (xp, wp, op) = (x.as_ptr(), w.as_ptr().add(n0), pb.as_mut_ptr());
    for ci in 0..c_in {
        let wr = wp.add(ci * n);
        let mut xb = [s.splat(0.0); T];
        for (t, xb) in xb.iter_mut().enumerate() {
            *xb = s.splat(*xp.add(ci * T + t));
        }
        let mut c = 0;
        while c < cv {
            let wv = s.load(wr.add(c));
            for (t, &xb) in xb.iter().enumerate() {
                let p = op.add(t * rs + c);
                s.store(p, s.fma(xb, wv, s.load(p)));
            }
            c += l;
        }
        if c < cb {
            let nl = cb - c;
            let wv = s.load_part(wr.add(c), nl);
            for (t, &xb) in xb.iter().enumerate() {
                let p = op.add(t * rs + c);
                s.store_part(p, nl, s.fma(xb, wv, s.load_part(p, nl)));
            }
        }
    }
}

/// Writes a transposed convolution task's phase outputs into `out`: phase
/// `r`'s `y[r]` (`[nco, lens[r]]`) goes to rows `co0..`, columns
/// `q * stride + r` for `q` in `q0..q0 + lens[r]`.
///
/// # Safety
/// `o` points at a live `[c_out, t_out]` buffer of which the caller alone
/// writes those rows and columns, all inside it.
pub(crate) unsafe fn scatter_phases(
    o: SharedOut,
    y: &[Vec<f32>],
    lens: &[usize],
    co0: usize,
    q0: usize,
    stride: usize,
    t_out: usize,
) {
    for (r, (yr, &len)) in y.iter().zip(lens).enumerate() {
        if len == 0 {
            continue;
        }
        for (c, row) in yr.chunks_exact(len).enumerate() {
            let orow = o.ptr().add((co0 + c) * t_out);
            for (dq, &v) in row.iter().enumerate() {
                *orow.add((q0 + dq) * stride + r) = v;
            }
        }
    }
}
