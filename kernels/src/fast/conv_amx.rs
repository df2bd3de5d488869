//! bf16 convolutions on AMX tiles (`tdpbf16ps`): 16 output channels x 16
//! time columns x 16 channel pairs per instruction, 8192 multiply-adds,
//! where `vdpbf16ps` does 32.
//!
//! The convolution is a GEMM per tap: `C[co, t] += A[co, p] . B[p, t]`
//! with `A` the tap's weights (16 output channels x 16 pairs, one 64-byte
//! row per channel, `ConvBf16::tile_layout`) and `B` the packed input pairs
//! of [`crate::conv_bf16::pack_pairs`] shifted by the tap's offset: that
//! layout (a pair of channels per 32-bit lane, time along the row) *is*
//! the pair-interleaved ("VNNI") layout `tdpbf16ps` wants for `B`, so each
//! tap is a strided tile load from the same packed input, no im2col.
//! Four accumulator tiles (32 channels x 32 columns) take every pair block
//! and tap before they are stored.
//!
//! # Arithmetic
//! Per output: `acc = bias`, then for each block of 16 channel pairs in
//! order, for each tap in order, one `tdpbf16ps` step over the block's
//! pairs. The instruction's internal order and rounding of its 32
//! products are the hardware's (measured: neither a sequential RNE FMA
//! chain in either element order nor one rounding per pair), so this path
//! has no scalar twin: its outputs are within the f32 accumulation error
//! of [`crate::reference::conv1d_bf16`], and every output is computed the
//! same way wherever it sits in a tile, slab or streaming step (edge tiles
//! go through a scratch tile, missing pairs and channels are zeros), so a
//! stream still equals its one-shot decode bit for bit.
//!
//! # Availability
//! CPUID AMX-TILE and AMX-BF16, the OS's XTILEDATA state enabled in XCR0,
//! and Linux's per-process permission (`arch_prctl(ARCH_REQ_XCOMP_PERM)`),
//! asked once. [`crate::KernelSettings::amx`] `false` (`TTS_RT_AMX=off`)
//! keeps the process on `vdpbf16ps`.

use super::conv::{slab_len, Tap};
use super::conv_bf16_setup::{conv1d_setup, fill_bias, pack_par};
use super::{run_tasks, SharedOut};
use crate::conv_bf16::{pack_pairs, ConvBf16};
use core::arch::asm;

/// Output channels per tile.
const TR: usize = 16;
/// Time columns per tile.
const TC: usize = 16;
/// Channel pairs per tile (64 bytes of bf16 pairs).
const TK: usize = 16;
/// Output channels per task: two tile rows.
const CO: usize = 2 * TR;

/// Token proving AMX-BF16 is usable by this process.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Amx {
    _granted: (),
}

impl Amx {
    /// Detects AMX-BF16 and asks Linux for the tile state, once.
    pub(crate) fn new() -> Option<Self> {
        static A: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let ok = *A.get_or_init(|| crate::settings::get().amx && detect());
        ok.then_some(Amx { _granted: () })
    }
}

#[cfg(target_os = "linux")]
fn detect() -> bool {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    let (l1, l7) = (__cpuid(1), __cpuid_count(7, 0));
    let osxsave = l1.ecx & (1 << 27) != 0;
    let amx = l7.edx & (1 << 24) != 0 && l7.edx & (1 << 22) != 0;
    if !(osxsave && amx && is_x86_feature_detected!("avx512f")) {
        return false;
    }
    // SAFETY: OSXSAVE is set, so XGETBV is available.
    let xcr0 = unsafe { xgetbv0() };
    // XTILECFG (17) and XTILEDATA (18) enabled by the OS.
    if xcr0 & (0b11 << 17) != 0b11 << 17 {
        return false;
    }
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    const SYS_ARCH_PRCTL: usize = 158;
    let ret: isize;
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) only changes this
    // process's permitted xsave features; the syscall clobbers rcx, r11.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL as isize => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

#[cfg(not(target_os = "linux"))]
fn detect() -> bool {
    false
}

#[cfg(target_os = "linux")]
unsafe fn xgetbv0() -> u64 {
    let (lo, hi): (u32, u32);
    asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags));
    (hi as u64) << 32 | lo as u64
}

/// Palette 1, all eight tiles 16 rows x 64 bytes.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    _reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

/// Tile state for the duration of `f`: configured before, released after
/// (so a context switch does not save 8 KB of tiles for an idle thread).
fn with_tiles<R>(_: Amx, f: impl FnOnce() -> R) -> R {
    let mut cfg = TileConfig {
        palette: 1,
        start_row: 0,
        _reserved: [0; 14],
        colsb: [0; 16],
        rows: [0; 16],
    };
    for t in 0..8 {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    // SAFETY: the token proves AMX is present and permitted; the config is
    // a valid palette-1 layout.
    unsafe { asm!("ldtilecfg [{}]", in(reg) &cfg, options(nostack, readonly)) };
    let r = f();
    // SAFETY: as above.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
    r
}

macro_rules! tload {
    ($t:literal, $p:expr, $s:expr) => {
        asm!(concat!("tileloadd tmm", $t, ", [{p} + {s}*1]"),
            p = in(reg) $p, s = in(reg) $s, options(nostack, readonly))
    };
}
macro_rules! tstore {
    ($t:literal, $p:expr, $s:expr) => {
        asm!(concat!("tilestored [{p} + {s}*1], tmm", $t),
            p = in(reg) $p, s = in(reg) $s, options(nostack))
    };
}
macro_rules! tdp {
    ($c:literal, $a:literal, $b:literal) => {
        asm!(
            concat!("tdpbf16ps tmm", $c, ", tmm", $a, ", tmm", $b),
            options(nostack, nomem)
        )
    };
}

/// One packed input and weight, as the tiles read them.
struct Src<'a> {
    /// `[pairs16][x_cs]` pairs, plus `TC` slack (edge tiles read past a
    /// row's end into the next row or the slack; those columns are never
    /// stored).
    x: &'a [u32],
    x_cs: usize,
    /// Input column of output column 0.
    x_t0: usize,
    pairs16: usize,
    /// `[kernel][co16][pairs16]` (`ConvBf16::tile_layout`).
    w: &'a [u32],
    co16: usize,
    taps: &'a [Tap],
}

/// An accumulator tile's home: straight in the output, or a scratch tile
/// for an edge (fewer than 16 rows or columns).
struct Home {
    ptr: *mut f32,
    stride: usize,
    rows: usize,
    cols: usize,
    out: *mut f32,
    out_cs: usize,
}

impl Src<'_> {
    /// Adds every pair and tap into rows `0..nco` (weights of channels
    /// `co0..`), columns `t0..t1` of `out` (row stride `out_cs`).
    ///
    /// # Safety
    /// Those rows of `out` are valid and this thread's alone; tile state
    /// configured ([`with_tiles`]).
    unsafe fn accumulate(
        &self,
        out: *mut f32,
        out_cs: usize,
        co0: usize,
        nco: usize,
        t0: usize,
        t1: usize,
    ) {
        if t0 >= t1 || nco == 0 || self.taps.is_empty() {
            return;
        }
        let max_x = self.taps.iter().map(|t| t.x_off).max().unwrap_or(0);
        let max_k = self.taps.iter().map(|t| t.w_off).max().unwrap_or(0);
        assert!(
            self.x_t0 + t1 + max_x <= self.x_cs,
            "conv_amx: x row too short"
        );
        assert!(
            self.pairs16 * self.x_cs + TC <= self.x.len(),
            "conv_amx: x too short"
        );
        assert!(co0 + nco.next_multiple_of(TR) <= self.co16);
        assert!(
            (max_k + 1) * self.co16 * self.pairs16 <= self.w.len(),
            "conv_amx: w too short"
        );
        assert!(t1 <= out_cs);
        let mut scratch = [[[0f32; TR * TC]; 2]; 2];
        let mut c = 0;
        while c < nco {
            let nc = if nco - c > TR { 2 } else { 1 };
            let mut t = t0;
            while t < t1 {
                let nt = if t1 - t > TC { 2 } else { 1 };
                let mut homes: [[Option<Home>; 2]; 2] = Default::default();
                for (ci, hrow) in homes.iter_mut().enumerate().take(nc) {
                    for (ti, h) in hrow.iter_mut().enumerate().take(nt) {
                        let (r0, c0) = (c + ci * TR, t + ti * TC);
                        let rows = TR.min(nco - r0);
                        let cols = TC.min(t1 - c0);
                        let o = out.add(r0 * out_cs + c0);
                        *h = Some(if rows == TR && cols == TC {
                            Home {
                                ptr: o,
                                stride: out_cs * 4,
                                rows,
                                cols,
                                out: o,
                                out_cs,
                            }
                        } else {
                            let s = &mut scratch[ci][ti];
                            s.fill(0.0);
                            for r in 0..rows {
                                for k in 0..cols {
                                    s[r * TC + k] = *o.add(r * out_cs + k);
                                }
                            }
                            Home {
                                ptr: s.as_mut_ptr(),
                                stride: TC * 4,
                                rows,
                                cols,
                                out: o,
                                out_cs,
                            }
                        });
                    }
                }
                match (nc, nt) {
                    (2, 2) => self.block::<2, 2>(&homes, co0 + c, t),
                    (2, _) => self.block::<2, 1>(&homes, co0 + c, t),
                    (_, 2) => self.block::<1, 2>(&homes, co0 + c, t),
                    _ => self.block::<1, 1>(&homes, co0 + c, t),
                }
                for h in homes.iter().flatten().flatten() {
                    if h.ptr != h.out {
                        for r in 0..h.rows {
                            for k in 0..h.cols {
                                *h.out.add(r * h.out_cs + k) = *h.ptr.add(r * TC + k);
                            }
                        }
                    }
                }
                t += nt * TC;
            }
            c += nc * TR;
        }
    }

    /// `NC` x `NT` accumulator tiles (tmm0..3 = C[ci][ti] at `2 ci + ti`),
    /// weight tiles in tmm4/5, input tiles in tmm6/7.
    #[inline(always)]
    unsafe fn block<const NC: usize, const NT: usize>(
        &self,
        homes: &[[Option<Home>; 2]; 2],
        co: usize,
        t: usize,
    ) {
        let h = |ci: usize, ti: usize| homes[ci][ti].as_ref().expect("tile home");
        tload!("0", h(0, 0).ptr, h(0, 0).stride);
        if NT == 2 {
            tload!("1", h(0, 1).ptr, h(0, 1).stride);
        }
        if NC == 2 {
            tload!("2", h(1, 0).ptr, h(1, 0).stride);
            if NT == 2 {
                tload!("3", h(1, 1).ptr, h(1, 1).stride);
            }
        }
        let (ws, xs) = (self.pairs16 * 4, self.x_cs * 4);
        let (w, x) = (self.w.as_ptr(), self.x.as_ptr());
        for pb in (0..self.pairs16).step_by(TK) {
            let xb = x.add(pb * self.x_cs + self.x_t0 + t);
            for tap in self.taps {
                let a0 = w.add((tap.w_off * self.co16 + co) * self.pairs16 + pb);
                let b0 = xb.add(tap.x_off);
                tload!("4", a0, ws);
                tload!("6", b0, xs);
                tdp!("0", "4", "6");
                if NT == 2 {
                    tload!("7", b0.add(TC), xs);
                    tdp!("1", "4", "7");
                }
                if NC == 2 {
                    tload!("5", a0.add(TR * self.pairs16), ws);
                    tdp!("2", "5", "6");
                    if NT == 2 {
                        tdp!("3", "5", "7");
                    }
                }
            }
        }
        tstore!("0", h(0, 0).ptr, h(0, 0).stride);
        if NT == 2 {
            tstore!("1", h(0, 1).ptr, h(0, 1).stride);
        }
        if NC == 2 {
            tstore!("2", h(1, 0).ptr, h(1, 0).stride);
            if NT == 2 {
                tstore!("3", h(1, 1).ptr, h(1, 1).stride);
            }
        }
    }
}

/// `x = [c_in, t_in]` as bf16 pairs `[pairs16][t_in]` (zero rows past the
/// last pair) plus `TC` slack.
fn pack(x: &[f32], c_in: usize, t_in: usize, pairs16: usize) -> Vec<u32> {
    let mut out = vec![0u32; pairs16 * t_in + TC];
    let used = c_in.div_ceil(2) * t_in;
    pack_par(&mut out[..used], t_in, |p0, o| {
        pack_pairs(x, c_in, t_in, p0, o)
    });
    out
}

pub(crate) fn conv1d(
    amx: Amx,
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
    let (tiles, co16, pairs16) = w.tile_layout();
    let xp = pack(x, w.c_in, t_in, pairs16);
    fill_bias(out, t_out, bias);
    let slab = slab_len(pairs16, 2 * TC, t_out);
    let (n_slabs, n_cb) = (t_out.div_ceil(slab), w.c_out.div_ceil(CO));
    let task_work = CO * 2 * pairs16 * w.kernel * slab;
    let src = Src {
        x: &xp,
        x_cs: t_in,
        x_t0: 0,
        pairs16,
        w: tiles,
        co16,
        taps: &taps,
    };
    let o = SharedOut::new(out);
    let task = |i: usize| {
        let (si, cb) = (i / n_cb, i % n_cb);
        let (t0, t1) = (si * slab, ((si + 1) * slab).min(t_out));
        let co0 = cb * CO;
        let nco = CO.min(w.c_out - co0);
        with_tiles(amx, || {
            // SAFETY: task i alone writes rows co0..co0 + nco, columns
            // t0..t1 of `out` ([c_out, t_out], alive for the call).
            unsafe { src.accumulate(o.ptr().add(co0 * t_out), t_out, co0, nco, t0, t1) }
        })
    };
    run_tasks(n_slabs * n_cb, task_work, task);
}
