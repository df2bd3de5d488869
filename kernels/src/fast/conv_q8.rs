//! int8 `conv1d` (format and arithmetic in [`crate::conv_q8`]).
//!
//! - AVX-512 VNNI: activations packed as `u32` quads of input channels
//!   (`u8 = xq + 128`, `[quads][t]`), one `vpdpbusd` per (channel, vector
//!   of 16 time steps) and quad: a 4 x 4 tile is 16 `vpdpbusd` = 1024
//!   multiply-adds per 4 loads + 4 broadcasts. Each tap is its own i32 sum
//!   (the taps read columns with different scales), then converted and
//!   added in f32. The scales and the packing are one vectorised pass in
//!   parallel tasks of columns, each reading its slice of the input twice
//!   (max over the channels, then quantize), the second time from L2: at
//!   96-192 channels a serial scalar pass (`roundevenf` calls) cost more
//!   than the tiles.
//! - AVX2 ([`avx2`]): activations and weights as i16 pairs, `vpmaddwd`
//!   (16 exact multiply-adds into eight i32).
//! - Portable (every other path): the reference's loops per output
//!   channel, i32 rows the compiler vectorises, channels in parallel.
//!
//! Tasks are (time slab, block of [`CO`] output channels), slab-major, as
//! the bf16 kernel's, so a slab's packed input is reused from L2.

use super::conv::slab_len;
use super::conv_bf16_setup::pack_par;
use super::{run_tasks, SharedOut};
use crate::conv_q8::{column_scales, quantize, ConvQ8};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;

/// Output channels per task block.
const CO: usize = 16;

/// Which kernel runs an int8 convolution.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Q8ConvPath {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Vnni(vnni::Vnni),
    #[cfg(target_arch = "x86_64")]
    Avx2(crate::simd::avx2::Avx2),
}

impl Q8ConvPath {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Q8ConvPath::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Q8ConvPath::Vnni(_) => "avx512vnni",
            #[cfg(target_arch = "x86_64")]
            Q8ConvPath::Avx2(_) => "avx2",
        }
    }
}

/// Checks a call; `Some(t_out)` when there is something to compute.
fn setup(
    x: &[f32],
    t_in: usize,
    w: &ConvQ8,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &[f32],
) -> Option<usize> {
    assert_eq!(x.len(), w.c_in * t_in, "conv1d_q8: x is not [c_in, t_in]");
    if let Some(b) = bias {
        assert_eq!(b.len(), w.c_out, "conv1d_q8: bias is not [c_out]");
    }
    let t_out = t_in.saturating_sub((w.kernel - 1) * dilation);
    assert_eq!(
        out.len(),
        w.c_out * t_out,
        "conv1d_q8: out is not [c_out, t_out]"
    );
    (t_out > 0 && w.c_out > 0).then_some(t_out)
}

pub(crate) fn conv1d(
    path: Q8ConvPath,
    x: &[f32],
    t_in: usize,
    w: &ConvQ8,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &mut [f32],
) {
    let Some(t_out) = setup(x, t_in, w, bias, dilation, out) else {
        return;
    };
    #[cfg(target_arch = "x86_64")]
    let call = Call {
        x,
        t_in,
        t_out,
        w,
        bias,
        dilation,
    };
    match path {
        Q8ConvPath::Portable => portable(x, t_in, t_out, w, bias, dilation, out),
        #[cfg(target_arch = "x86_64")]
        Q8ConvPath::Vnni(v) => vnni::conv1d(v, call, out),
        #[cfg(target_arch = "x86_64")]
        Q8ConvPath::Avx2(v) => avx2::conv1d(v, call, out),
    }
}

/// A checked call's inputs, as the SIMD path takes them.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Call<'a> {
    x: &'a [f32],
    t_in: usize,
    t_out: usize,
    w: &'a ConvQ8,
    bias: Option<&'a [f32]>,
    dilation: usize,
}

/// A call's packed activations, as the SIMD paths feed them: `rows` rows
/// of `u32` lanes (VNNI: quads of `u8 = xq + 128`; AVX2: pairs of i16),
/// each `x_cs` columns long (the input's plus a tile's padding), and the
/// per-column scales.
#[cfg(target_arch = "x86_64")]
pub(super) struct Packed {
    /// `[rows][x_cs]` (the buffer may be longer: a reused one).
    pub(super) x: Vec<u32>,
    /// `s_x` per column, `x_cs` long (or longer).
    pub(super) sx: Vec<f32>,
    pub(super) x_cs: usize,
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// The last call's buffers on this thread, reused by the next
    /// ([`pack_columns`]): a fresh zeroed allocation per call was a serial
    /// `memset` of the whole packed input on the stepping thread (2.5% of
    /// a decode's samples) before the parallel pack overwrote it.
    static SPARE: std::cell::Cell<(Vec<u32>, Vec<f32>)> = const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

/// The largest packed input (`u32` lanes, 4 MB) a thread keeps for its
/// next call: a streaming step's (8 frames: 1.5 MB at the vocoder's last
/// block); an offline decode's longer chunks are freed as before.
#[cfg(target_arch = "x86_64")]
const SPARE_MAX: usize = 1 << 20;

#[cfg(target_arch = "x86_64")]
impl Drop for Packed {
    fn drop(&mut self) {
        let bufs = (std::mem::take(&mut self.x), std::mem::take(&mut self.sx));
        if bufs.0.len() > SPARE_MAX {
            return;
        }
        // A thread exiting has no spare to keep: the buffers are freed.
        let _ = SPARE.try_with(|s| {
            let old = s.take();
            s.set(if old.0.len() > bufs.0.len() {
                old
            } else {
                bufs
            });
        });
    }
}

/// Columns per packing task (a multiple of 16): its `c_in x PACK_COLS`
/// input slice (96 KB at 96 channels, 192 KB at 192) is read twice, the
/// second time from L2.
#[cfg(target_arch = "x86_64")]
const PACK_COLS: usize = 256;

/// Packs `t_in` columns of a `c_in`-channel input into `rows` rows of
/// `t_in + pad` columns: tasks of [`PACK_COLS`] columns across the kernel
/// team, each given `(t0, t1, x, sx, x_cs)` to find its columns' scales
/// and write their lanes (the raw pointers: task `i` alone writes columns
/// `t0..t1` of both).
#[cfg(target_arch = "x86_64")]
fn pack_columns(
    rows: usize,
    c_in: usize,
    t_in: usize,
    pad: usize,
    task: impl Fn((usize, usize), *mut u32, *mut f32, usize) + Sync + Send,
) -> Packed {
    let x_cs = t_in + pad;
    // This thread's spare buffers, grown if short: the tasks below write
    // every input column of every row, so only the padding is zeroed here.
    let (mut xp, mut sx) = SPARE.try_with(|s| s.take()).unwrap_or_default();
    if xp.len() < rows * x_cs {
        xp.resize(rows * x_cs, 0);
    }
    if sx.len() < x_cs {
        sx.resize(x_cs, 0.0);
    }
    for r in 0..rows {
        xp[r * x_cs + t_in..(r + 1) * x_cs].fill(0);
    }
    sx[t_in..x_cs].fill(0.0);
    let (xo, so) = (
        SharedOut::new(&mut xp[..rows * x_cs]),
        SharedOut::new(&mut sx[..x_cs]),
    );
    // ~3 vector operations per input value, two reads of it.
    run_tasks(t_in.div_ceil(PACK_COLS), 8 * c_in * PACK_COLS, |i| {
        let (t0, t1) = (i * PACK_COLS, ((i + 1) * PACK_COLS).min(t_in));
        task((t0, t1), xo.ptr(), so.ptr(), x_cs)
    });
    Packed { x: xp, sx, x_cs }
}

/// The reference's loops, output channels in parallel.
fn portable(
    x: &[f32],
    t_in: usize,
    t_out: usize,
    w: &ConvQ8,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &mut [f32],
) {
    let (sx, inv) = column_scales(x, w.c_in, t_in);
    let mut xq = vec![0i8; x.len()];
    pack_par(&mut xq, t_in, |c0, o| {
        for (i, q) in o.iter_mut().enumerate() {
            let j = c0 * t_in + i;
            *q = quantize(x[j], inv[j % t_in]);
        }
    });
    let k = w.kernel;
    let o = SharedOut::new(out);
    run_tasks(w.c_out, 2 * w.c_in * k * t_out, |co| {
        // SAFETY: task `co` alone writes row `co` of `out` ([c_out, t_out],
        // alive for the whole call).
        let row = unsafe { std::slice::from_raw_parts_mut(o.ptr().add(co * t_out), t_out) };
        row.fill(bias.map_or(0.0, |b| b[co]));
        let mut acc = vec![0i32; t_out];
        for kk in 0..k {
            acc.fill(0);
            let off = kk * dilation;
            for ci in 0..w.c_in {
                let wv = w.weight(co, ci, kk) as i32;
                let xr = &xq[ci * t_in + off..ci * t_in + off + t_out];
                for (a, &v) in acc.iter_mut().zip(xr) {
                    *a += wv * v as i32;
                }
            }
            let s = w.scales[co];
            for ((r, &a), &sxt) in row.iter_mut().zip(&acc).zip(&sx[off..off + t_out]) {
                *r += a as f32 * (sxt * s);
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod vnni {
    use super::*;
    use crate::conv_q8::Q_MAX;
    use core::arch::x86_64::*;

    /// Proof that the CPU has avx512f, avx512bw and avx512vnni.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Vnni(());

    impl Vnni {
        pub(crate) fn new() -> Option<Vnni> {
            (is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vnni"))
            .then_some(Vnni(()))
        }
    }

    /// Output channels per register tile.
    const C: usize = 4;
    /// Vectors of 16 time steps per register tile.
    const TV: usize = 4;
    /// Zero columns after the packed input, so a tile's last vector may
    /// read past `t_in` (its extra lanes are never stored).
    const PAD: usize = 16 * TV;

    /// Quantizes and packs `x = [c_in, t_in]` as `[quads][t]` of `u8 =
    /// xq + 128` (zero bytes of padding encode 128: quantized 0 reads as
    /// -128, which is why the padded lanes are never stored).
    pub(super) fn pack(v: Vnni, x: &[f32], c_in: usize, t_in: usize) -> Packed {
        pack_columns(c_in.div_ceil(4), c_in, t_in, PAD, |cols, xp, sx, x_cs| {
            // SAFETY: this task alone writes columns `cols` of `xp`
            // ([quads, x_cs]) and of `sx` (x_cs), both alive for the whole
            // call; `x` is [c_in, t_in] (checked by `setup`); the CPU has
            // the features (`v`).
            unsafe { pack_cols(v, x, (c_in, t_in), cols, xp, sx, x_cs) }
        })
    }

    /// Columns `t0..t1` (at most [`PACK_COLS`]) of the packed input: the
    /// scalar [`column_scales`] and [`quantize`] per lane, the same bits.
    ///
    /// # Safety
    /// `x` is `[c_in, t_in]`; `xp` is valid for `[ceil(c_in / 4), x_cs]`
    /// and `sx` for `x_cs` elements, columns `t0..t1 <= t_in` written by
    /// this call alone; avx512f/bw present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn pack_cols(
        _v: Vnni,
        x: &[f32],
        (c_in, t_in): (usize, usize),
        (t0, t1): (usize, usize),
        xp: *mut u32,
        sx: *mut f32,
        x_cs: usize,
    ) {
        const NV: usize = PACK_COLS / 16;
        let nv = (t1 - t0).div_ceil(16);
        let mask = |v: usize| -> __mmask16 {
            let n = (t1 - t0 - 16 * v).min(16);
            (((1u32 << n) - 1) & 0xffff) as __mmask16
        };
        let xb = x.as_ptr();
        // Max |x| per column (`f32::max` ignores NaN, as `vmaxps` with the
        // running max second).
        let mut max = [_mm512_setzero_ps(); NV];
        for c in 0..c_in {
            let row = xb.add(c * t_in + t0);
            for (v, m) in max.iter_mut().enumerate().take(nv) {
                let a = _mm512_abs_ps(_mm512_maskz_loadu_ps(mask(v), row.add(16 * v)));
                *m = _mm512_max_ps(a, *m);
            }
        }
        // `scale_of`: (max / 127, 127 / max), (0, 0) for a silent column.
        let q_max = _mm512_set1_ps(Q_MAX);
        let mut inv = [_mm512_setzero_ps(); NV];
        for v in 0..nv {
            let loud = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(max[v], _mm512_setzero_ps());
            let s = _mm512_maskz_div_ps(loud, max[v], q_max);
            inv[v] = _mm512_maskz_div_ps(loud, q_max, max[v]);
            _mm512_mask_storeu_ps(sx.add(t0 + 16 * v), mask(v), s);
        }
        // `quantize` + 128 per byte, four channels per u32.
        let (lo, hi) = (_mm512_set1_ps(-Q_MAX), _mm512_set1_ps(Q_MAX));
        let off = _mm512_set1_epi32(128);
        for q in 0..c_in.div_ceil(4) {
            let orow = xp.add(q * x_cs + t0);
            for (v, &iv) in inv.iter().enumerate().take(nv) {
                let mut u = _mm512_setzero_si512();
                for i in 0..4 {
                    let ci = 4 * q + i;
                    let b = if ci < c_in {
                        let a = _mm512_maskz_loadu_ps(mask(v), xb.add(ci * t_in + t0 + 16 * v));
                        let y = _mm512_mul_ps(a, iv);
                        let r = _mm512_roundscale_ps::<
                            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
                        >(y);
                        let r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
                        // NaN quantizes to 0 (`NaN as i8`).
                        let ord = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(y, y);
                        _mm512_add_epi32(_mm512_maskz_cvtps_epi32(ord, r), off)
                    } else {
                        // Quantized 0: byte 128.
                        off
                    };
                    u = _mm512_or_si512(u, _mm512_sll_epi32(b, _mm_cvtsi32_si128(8 * i as i32)));
                }
                _mm512_mask_storeu_epi32(orow.add(16 * v) as *mut i32, mask(v), u);
            }
        }
    }

    /// What every task of one call reads: the packed input, the weight,
    /// and where the output goes.
    #[derive(Clone, Copy)]
    struct Tiles<'a> {
        p: &'a Packed,
        w: &'a ConvQ8,
        bias: Option<&'a [f32]>,
        dilation: usize,
        out: *mut f32,
        t_out: usize,
    }

    pub(super) fn conv1d(v: Vnni, c: super::Call<'_>, out: &mut [f32]) {
        let super::Call {
            x,
            t_in,
            t_out,
            w,
            bias,
            dilation,
        } = c;
        let p = pack(v, x, w.c_in, t_in);
        let quads = w.quads();
        let slab = slab_len(quads, 16 * TV, t_out);
        let (n_slabs, n_cb) = (t_out.div_ceil(slab), w.c_out.div_ceil(CO));
        let task_work = CO * 2 * w.c_in * w.kernel * slab;
        let o = SharedOut::new(out);
        run_tasks(n_slabs * n_cb, task_work, |i| {
            let (si, cb) = (i / n_cb, i % n_cb);
            let (t0, t1) = (si * slab, ((si + 1) * slab).min(t_out));
            let co0 = cb * CO;
            let co1 = (co0 + CO).min(w.c_out);
            // SAFETY: task i alone writes rows co0..co1, columns t0..t1 of
            // `out` ([c_out, t_out], alive for the whole call); `p` holds
            // `t_in + PAD` columns per quad, so every tile's reads from
            // column `t + kk * dilation` with `t < t1` rounded up to a
            // multiple of 16 stay inside it; the CPU has the features
            // (`v`).
            unsafe {
                let tiles = Tiles {
                    p: &p,
                    w,
                    bias,
                    dilation,
                    out: o.ptr(),
                    t_out,
                };
                block(v, tiles, (co0, co1), (t0, t1))
            }
        });
    }

    /// Rows `co0..co1`, columns `t0..t1` of `out`.
    ///
    /// # Safety
    /// As stated at the call: `out` valid for `[c_out, t_out]`, the range
    /// written by this call alone, avx512f/bw/vnni present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn block(
        _v: Vnni,
        tiles: Tiles<'_>,
        (co0, co1): (usize, usize),
        (t0, t1): (usize, usize),
    ) {
        let mut co = co0;
        while co + C <= co1 {
            cols::<C>(tiles, co, (t0, t1));
            co += C;
        }
        while co < co1 {
            cols::<1>(tiles, co, (t0, t1));
            co += 1;
        }
    }

    /// Channels `co..co + NC`, columns `t0..t1`.
    #[inline(always)]
    unsafe fn cols<const NC: usize>(tiles: Tiles<'_>, co: usize, (t0, t1): (usize, usize)) {
        let mut t = t0;
        while t + 16 * TV <= t1 {
            tile::<NC, TV>(tiles, co, t, 16 * TV);
            t += 16 * TV;
        }
        while t < t1 {
            let n = (t1 - t).min(16);
            tile::<NC, 1>(tiles, co, t, n);
            t += n;
        }
    }

    /// `NC` channels x `NV` vectors of time from column `t`, `n` columns
    /// stored (the last vector masked).
    #[inline(always)]
    unsafe fn tile<const NC: usize, const NV: usize>(
        tiles: Tiles<'_>,
        co: usize,
        t: usize,
        n: usize,
    ) {
        let Tiles {
            p,
            w,
            bias,
            dilation,
            out,
            t_out,
        } = tiles;
        let (k, quads, x_cs) = (w.kernel, w.quads(), p.x_cs);
        let mut acc = [[_mm512_setzero_ps(); NV]; NC];
        for (c, a) in acc.iter_mut().enumerate() {
            let b = _mm512_set1_ps(bias.map_or(0.0, |b| b[co + c]));
            *a = [b; NV];
        }
        let wp = w.w.as_ptr();
        let xp = p.x.as_ptr();
        for kk in 0..k {
            let tx = t + kk * dilation;
            // Each sum starts at `-128 * sum_c q`: the u8 offset's
            // correction, the same i32 at the end.
            let mut ia: [[__m512i; NV]; NC] =
                std::array::from_fn(|c| [_mm512_set1_epi32(-128 * w.wsum[(co + c) * k + kk]); NV]);
            let xb = xp.add(tx);
            let wrow: [*const u32; NC] =
                std::array::from_fn(|c| wp.add(((co + c) * k + kk) * quads));
            for q in 0..quads {
                let xs: [__m512i; NV] = std::array::from_fn(|v| {
                    _mm512_loadu_si512(xb.add(q * x_cs + 16 * v) as *const __m512i)
                });
                for c in 0..NC {
                    let wv = _mm512_set1_epi32(*wrow[c].add(q) as i32);
                    for v in 0..NV {
                        ia[c][v] = _mm512_dpbusd_epi32(ia[c][v], xs[v], wv);
                    }
                }
            }
            for c in 0..NC {
                let sw = _mm512_set1_ps(w.scales[co + c]);
                for v in 0..NV {
                    let i = ia[c][v];
                    let s = _mm512_mul_ps(_mm512_loadu_ps(p.sx.as_ptr().add(tx + 16 * v)), sw);
                    acc[c][v] = _mm512_add_ps(acc[c][v], _mm512_mul_ps(_mm512_cvtepi32_ps(i), s));
                }
            }
        }
        for (c, a) in acc.iter().enumerate() {
            let row = out.add((co + c) * t_out + t);
            for (v, &av) in a.iter().enumerate() {
                let lanes = n.saturating_sub(16 * v).min(16);
                if lanes == 16 {
                    _mm512_storeu_ps(row.add(16 * v), av);
                } else if lanes > 0 {
                    _mm512_mask_storeu_ps(row.add(16 * v), (1u32 << lanes) as u16 - 1, av);
                }
            }
        }
    }
}

/// Inputs a pack must quantize as the scalar [`quantize`] does: several
/// widths (whole vectors, tails, several tasks, channel counts around the
/// pair and the quad), ties, zeros, signed zeros, the clamp's edge,
/// subnormals and non-finite values; `(c_in, t_in, x)`.
#[cfg(all(test, target_arch = "x86_64"))]
fn pack_inputs() -> Vec<(usize, usize, Vec<f32>)> {
    let mut v = Vec::new();
    for (seed, (c_in, t_in)) in (777..).zip([
        (1, 1),
        (2, 7),
        (3, 17),
        (4, 16),
        (5, 33),
        (8, 255),
        (13, 256),
        (96, 700),
    ]) {
        let mut x: Vec<f32> = crate::probe::data(c_in * t_in, seed)
            .iter()
            .map(|v| v * 3.0)
            .collect();
        // Column 0: ties after scaling (max 127 maps to itself).
        let ties = [127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.0, 126.5, -126.5];
        for c in 0..c_in {
            x[c * t_in] = ties[c % ties.len()];
        }
        if t_in > 5 {
            for c in 0..c_in {
                x[c * t_in + 1] = if c % 2 == 0 { 0.0 } else { -0.0 };
                x[c * t_in + 2] = if c == 0 { f32::NAN } else { 1.0 };
                x[c * t_in + 3] = if c == c_in - 1 { f32::INFINITY } else { 2.0 };
                x[c * t_in + 4] = if c == 0 { f32::NEG_INFINITY } else { f32::NAN };
                x[c * t_in + 5] = f32::MIN_POSITIVE / (c + 2) as f32;
            }
        }
        v.push((c_in, t_in, x));
    }
    v
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::pack_inputs;
    use super::vnni::{pack, Vnni};
    use crate::conv_q8::{column_scales, quantize};

    /// The AVX-512 scale-and-pack pass gives the scalar quads and scales
    /// on every width (whole vectors, tails, several tasks, channel counts
    /// around the quad), on ties, zeros, signed zeros, the clamp's edge,
    /// subnormals and non-finite values.
    #[test]
    fn the_avx512_pack_matches_the_scalar_one() {
        let Some(v) = Vnni::new() else {
            return;
        };
        for (c_in, t_in, x) in pack_inputs() {
            let p = pack(v, &x, c_in, t_in);
            let (sx, inv) = column_scales(&x, c_in, t_in);
            for t in 0..t_in {
                assert_eq!(
                    p.sx[t].to_bits(),
                    sx[t].to_bits(),
                    "c_in={c_in} t={t}: scale"
                );
                for q in 0..c_in.div_ceil(4) {
                    let want = (0..4).fold(0u32, |u, i| {
                        let ci = 4 * q + i;
                        let b = if ci < c_in {
                            (quantize(x[ci * t_in + t], inv[t]) as i32 + 128) as u32
                        } else {
                            128
                        };
                        u | b << (8 * i)
                    });
                    assert_eq!(p.x[q * p.x_cs + t], want, "c_in={c_in} t={t} quad {q}");
                }
            }
        }
    }
}
