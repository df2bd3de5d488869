//! Numeric kernels for tts-rt.
//!
//! # Layout
//! From the bottom up: each file imports only files listed above it, and
//! the crate root, last, is imported by none (`tools/import_circles.py`
//! finds no circle).
//! - `shape.rs`: the parameter structs shapes travel in, shared by the
//!   reference, the SIMD paths and the entry points: [`AttnShape`] and
//!   [`KvRows`] for [`attention`], [`Conv1dShape`], [`StridedConv1dShape`]
//!   (for [`conv1d_strided`]), [`ConvTranspose1dShape`].
//! - `simd/` (private): a `Simd` token trait (`simd/mod.rs`, with the
//!   vector maths: exp, sin, GELU) and one implementation per ISA file
//!   (`avx2.rs`, `avx512.rs`).
//! - [`Isa`] (`instruction_set.rs`): the paths and what this CPU supports;
//!   [`KernelSettings`] (`settings.rs`): the process-wide switches
//!   (instruction set, pool, teams, team spin, AMX, prefetch), installed
//!   once by the program before the first kernel runs
//!   ([`KernelSettings::install`]); the crate reads no environment
//!   variable itself. `KernelSettings::from_env_map` is the one parser of
//!   their `TTS_RT_*` spellings. [`isa()`] (`dispatch.rs`): the
//!   instruction set chosen once at run time (AVX-512, AVX2+FMA, or
//!   portable scalar); [`KernelSettings::isa`]
//!   (`TTS_RT_ISA=scalar|avx2|avx512`) forces a path (a path the CPU lacks
//!   is refused, falling back to detection).
//! - [`Team`] (`team.rs`): where a kernel's parallel work runs (a team of
//!   threads one caller owns, or rayon's pool); [`probe`]: the host's
//!   memory read bandwidth, measured on it.
//! - The weight formats: [`q4`], then [`iq4`] and [`q6`] on its layout,
//!   [`group`] ([`GroupFormat`], the three as one family), `mat.rs`
//!   ([`Mat`], the weight view a matmul takes, and the `Copy` views the
//!   reference and the fast kernels take of its quantized variants:
//!   `GroupMat`, `Q8Mat`); [`conv_bf16`]: the packed
//!   bf16 convolution weight ([`ConvBf16`], built in the [`Bf16Layout`]
//!   its caller names) and the arithmetic every bf16 path computes;
//!   [`conv_q8`]: the int8 convolution weight ([`ConvQ8`], per output
//!   channel scales) and its arithmetic (activations per time column, an
//!   exact i32 sum per tap).
//! - [`reference`](mod@reference): one plain scalar implementation per
//!   kernel. It defines the semantics; every optimised path is tested
//!   against it.
//! - `fast/` (private): the optimised kernels, generic over the token,
//!   with rayon over output rows / channels / heads when the work is
//!   large: `fast/mod.rs` first (the task split and the shared output
//!   they all use), then `elementwise.rs`, `attention.rs`, `q8.rs` (the
//!   int8 matmul). `fast::group` drives the group-wise integer formats
//!   (q4, iq4, q6): one activation preparation, row split and register
//!   blocking, and per format only its row workers (`fast/q4.rs`,
//!   `fast/iq4.rs`, `fast/q6.rs`), named by format in
//!   `fast/group_formats.rs` for `fast/matmul.rs`. `fast/conv.rs` is the
//!   f32 convolution tile (`fast/conv_strided.rs` runs it over a
//!   polyphase split). The bf16 convolutions: `fast/conv_bf16_setup.rs`
//!   (what every bf16 tile does around it: the call's checks, the bias,
//!   the parallel packing), `fast/conv_amx.rs` (AMX tiles), then
//!   `fast/conv_bf16.rs` (the `vdpbf16ps` and emulation tiles, and the
//!   choice among the three); `fast/conv_q8.rs`, the int8 convolution
//!   (`vpdpbusd` tiles and a portable kernel with the same bits).
//! - The crate root: [`Kernels`], every kernel as a method, bound to one
//!   path. Built for the selected path ([`Kernels::selected`]) or a named
//!   one ([`Kernels::new`], `None` when the CPU lacks it), which is how
//!   tests and benches compare paths whatever `TTS_RT_ISA` says. The free
//!   functions ([`matmul`], [`rms_norm`], ...) are the dispatching entry
//!   points the models call: `Kernels::selected()`; [`bf16_layout`] is the
//!   layout those entry points read bf16 convolution weights in, for the
//!   loaders that build them. [`on_pool`] runs a whole step on a thread of
//!   the kernel pool (the models wrap their steps and decodes in it).
//!
//! Weights: [`Mat`] is f32, bf16 or int8 with one scale per row
//! ([`Mat::Q8`], made by [`quantize_q8_rows`]). Int8 matmul quantizes each
//! activation row to int16 and sums in exact integers (AVX-512 VNNI
//! `vpdpwssd`, AVX2 `vpmaddwd`), so all paths agree bit for bit on it;
//! [`Kernels::matmul_q8_widened`] is the f32-activation alternative.
//! [`Mat::Q4`] is 4-bit group-wise ([`q4`]: groups of 32 inputs, a u8
//! scale per group and an f32 per row, made by [`quantize_q4_rows`]); its
//! matmul quantizes activations to int8 and sums in exact integers too
//! (AVX-512 VNNI `vpdpbusd`, AVX2 `vpmaddubsw`, and a portable kernel that
//! the scalar path runs), so all paths agree bit for bit.
//! [`Mat::Iq4`] ([`iq4`]) is the same layout and 4.25 bits on IQ4_NL's
//! non-linear 16-level int8 table with least-squares i8 group scales
//! (levels looked up by `vpshufb`), and [`Mat::Q6`] ([`q6`]) 6-bit
//! group-wise at 6.25 bits; both keep q4's exact integer sums, activation
//! order and threading. [`GroupFormat`] ([`group`]) names the three
//! group-wise formats for storage and conversion (row bytes, group scales,
//! the row quantizer, the `Mat` view of stored parts).
//!
//! bf16 convolutions ([`conv_bf16`], [`conv1d_bf16`]): weights packed
//! once into [`ConvBf16`] (pairs of input channels), activations rounded
//! to bf16, f32 accumulation; AVX-512 BF16 `vdpbf16ps` where the CPU has
//! it, a bit-identical f32-FMA emulation on the other SIMD paths, the
//! reference on the scalar path. A transposed conv runs below f32 as the
//! dense conv over its phases ([`ConvBf16::from_transpose1d_phases`],
//! [`ConvQ8::from_transpose1d_phases`], then [`interleave_phases`]), so
//! it needs no bf16 or int8 kernel of its own.
//!
//! int8 convolutions ([`conv_q8`], [`conv1d_q8`]): weights quantized once
//! per output channel into [`ConvQ8`], activations per time column, exact
//! i32 sums per tap combined in f32; AVX-512 VNNI `vpdpbusd` (64
//! multiply-adds an instruction) where the CPU has it, a portable kernel
//! with the same bits on every other path.
//!
//! Paths: matmul, conv1d (incl. grouped/depthwise; strided via its
//! polyphase split), conv_transpose1d,
//! attention, rms_norm, silu_mul, gelu and snake_beta have SIMD versions,
//! parallel on rayon's global pool when a call has more than ~64k
//! multiply-adds; layer_norm and rope (a few thousand flops per call) use the
//! reference on every path. The scalar path *is* the reference
//! (single-threaded), except for the group-wise formats (`Mat::Q4`,
//! `Mat::Iq4`, `Mat::Q6`), where it runs a portable
//! multi-threaded kernel with the reference's exact integer sums (same
//! bits). Results are deterministic: the same bits for every run
//! and thread count on one path (see `fast`); paths differ from each other
//! in the last bits (summation order, FMA).
//!
//! Where the SIMD paths knowingly differ from the reference beyond rounding:
//! GELU is computed via `erfc` and stays accurate where the reference's
//! `1 + erf` cancels to 0 (x < -8.5: |gelu| < 1e-16 there); the vector exp
//! clamps its argument to [-87.3, 88], so results below ~1e-38 are not
//! flushed to 0 (silu of x < -87, softmax weights of masked-out-by-value
//! keys). `silu_mul` asserts equal lengths where the reference truncates.
//!
//! Layout conventions: activations are row-major `[rows, features]` for the
//! transformer parts and channel-major `[channels, time]` for convolutions
//! (the PyTorch layouts of the checkpoint). Linear weights are `[out, in]`.

pub mod conv_bf16;
pub mod conv_q8;
mod dispatch;
mod instruction_set;
// Without x86_64 only the scalar path exists and the generic SIMD code is
// never instantiated.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
mod fast;
pub mod group;
pub mod iq4;
mod mat;
pub mod probe;
pub mod q4;
pub mod q6;
pub mod reference;
mod settings;
mod shape;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
mod simd;
mod team;

pub use conv_bf16::{Bf16Layout, ConvBf16};
pub use conv_q8::ConvQ8;
pub use dispatch::isa;
pub use group::GroupFormat;
pub use instruction_set::Isa;
pub use mat::{
    bf16_to_f32, f32_to_bf16, quantize_a16_row, quantize_q8_row, quantize_q8_rows, GroupParts, Mat,
    A16_MAX, Q8_MAX,
};
pub use q4::{quantize_a8_row, quantize_q4_rows, Q4Rows};
pub use settings::{
    parse_switch, KernelSettings, PrefetchLevel, SettingError, SettingsFixed, SWITCH_VALUES,
};
pub use shape::{
    AttnSegment, AttnShape, Conv1dShape, ConvTranspose1dShape, KvData, KvLayout, KvRows,
    StridedConv1dShape,
};
pub use team::{teams_enabled, Team};

#[cfg(target_arch = "x86_64")]
use simd::{avx2::Avx2, avx512::Avx512};

/// Runs `f` on a thread of the current rayon pool (the global one unless
/// called inside `ThreadPool::install`), blocking the caller until it
/// returns; inline when already on one.
///
/// Why: every parallel region a kernel opens from a thread *outside* the
/// pool is injected into the pool's queue, wakes a worker and puts the
/// caller to sleep until the region is done — two cross-thread wake-ups per
/// matmul. A decode step is hundreds of regions of 30-100 us each (a 0.6B
/// frame: ~700), so those wake-ups cost a large share of the step
/// (docs/performance.md, "Stepping inside the pool"). From a worker, a
/// region forks in place and the idle worker, still spinning from the last
/// region, steals its half at once. Call it around a whole step (a talker
/// or predictor step, a decode call), not around each kernel. A panic in
/// `f` is re-raised on the calling thread.
///
/// On a thread with a [`Team`] installed, `f` runs right here: the team is
/// already where its regions go. [`KernelSettings::on_pool`] `false`
/// (`TTS_RT_ON_POOL=off`) runs `f` on the calling thread too (for A/B
/// measurements).
pub fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if !team::installed() && settings::get().on_pool {
        rayon::scope(|_| f())
    } else {
        f()
    }
}

/// Runs `task(0..n)` in parallel where this thread's kernels run: on its
/// installed [`Team`], else on rayon's current pool; inline inside another
/// task. For model code whose parallel loops are not kernels.
pub fn parallel_for(n: usize, task: impl Fn(usize) + Sync + Send) {
    team::for_each(n, task)
}

/// The kernels of one instruction-set path. `Copy` and free to build; the
/// path is a closed enum so each call is one predictable branch.
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    path: Path,
    /// bf16 convolutions on the f32-FMA emulation even where the CPU has
    /// avx512_bf16 ([`Kernels::with_emulated_bf16`]).
    emulate_bf16: bool,
    /// bf16 convolutions on `vdpbf16ps` even where AMX is usable
    /// ([`Kernels::without_amx`]).
    no_amx: bool,
}

#[derive(Clone, Copy, Debug)]
enum Path {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2(Avx2),
    #[cfg(target_arch = "x86_64")]
    Avx512(Avx512),
}

/// `dispatch!(self, reference_call, |s| fast_call_using_token_s)`.
macro_rules! dispatch {
    ($self:expr, $scalar:expr, |$s:ident| $fast:expr) => {
        match $self.path {
            Path::Scalar => $scalar,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2($s) => $fast,
            #[cfg(target_arch = "x86_64")]
            Path::Avx512($s) => $fast,
        }
    };
}

impl Kernels {
    /// The kernels for `isa`, or `None` when this CPU lacks its features.
    pub fn new(isa: Isa) -> Option<Kernels> {
        let path = match isa {
            Isa::Scalar => Path::Scalar,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => Path::Avx2(Avx2::new()?),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => Path::Avx512(Avx512::new()?),
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 => return None,
        };
        Some(Kernels {
            path,
            emulate_bf16: false,
            no_amx: false,
        })
    }

    /// The kernels of the process-wide path [`isa()`].
    pub fn selected() -> Kernels {
        static SELECTED: std::sync::OnceLock<Kernels> = std::sync::OnceLock::new();
        *SELECTED.get_or_init(|| {
            Kernels::new(isa()).unwrap_or(Kernels {
                path: Path::Scalar,
                emulate_bf16: false,
                no_amx: false,
            })
        })
    }

    pub fn isa(&self) -> Isa {
        match self.path {
            Path::Scalar => Isa::Scalar,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2(_) => Isa::Avx2,
            #[cfg(target_arch = "x86_64")]
            Path::Avx512(_) => Isa::Avx512,
        }
    }

    /// See [`matmul`].
    pub fn matmul(&self, x: &[f32], m: usize, w: &Mat<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if let (Some(q8), Some(path)) = (w.q8_mat(), self.q8_path()) {
            return fast::q8::matmul(path, x, m, q8, bias, out);
        }
        if let Some(g) = w.group_mat() {
            return fast::group::matmul(
                fast::group_formats::kernels(g.format),
                self.group_path(),
                x,
                m,
                g,
                bias,
                out,
            );
        }
        dispatch!(self, reference::matmul(x, m, w, bias, out), |s| {
            fast::matmul::matmul(s, x, m, w, bias, out)
        })
    }

    /// The int8 kernels' path, where the ISA has one (the scalar path runs
    /// the reference).
    #[cfg(target_arch = "x86_64")]
    fn q8_path(&self) -> Option<fast::q8::Q8Path> {
        use fast::q8::Q8Path;
        match self.path {
            Path::Scalar => None,
            Path::Avx2(_) => Some(Q8Path::Avx2),
            Path::Avx512(_) => Some(Q8Path::for_avx512()),
        }
    }

    /// The group-wise formats' kernel path.
    fn group_path(&self) -> fast::group::GroupPath {
        use fast::group::GroupPath;
        match self.path {
            // Exact integers: the portable kernels have the reference's
            // bits, so the scalar path may run them (multi-threaded).
            Path::Scalar => GroupPath::Portable,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2(_) => GroupPath::Avx2,
            #[cfg(target_arch = "x86_64")]
            Path::Avx512(_) => GroupPath::for_avx512(),
        }
    }

    /// See [`matmul_shared`].
    pub fn matmul_shared(&self, x: &[f32], m: usize, parts: &mut [(&Mat<'_>, &mut [f32])]) {
        let Some(k) = parts.first().map(|p| p.0.cols()) else {
            return;
        };
        // Int8, on the ISAs with an int8 kernel.
        #[cfg(target_arch = "x86_64")]
        if let Some(path) = self.q8_path() {
            let q8: Option<Vec<fast::q8::Part<'_>>> = parts
                .iter_mut()
                .map(|(w, out)| match w.q8_mat() {
                    Some(w) if w.cols == k => Some(fast::q8::Part { w, out }),
                    _ => None,
                })
                .collect();
            if let Some(mut q8) = q8 {
                return fast::q8::matmul_shared(path, x, m, k, &mut q8);
            }
        }
        // One group format for all.
        let format = parts
            .first()
            .and_then(|p| p.0.group_mat())
            .map(|g| g.format);
        if let Some(format) = format {
            let group: Option<Vec<_>> = parts
                .iter_mut()
                .map(|(w, out)| match w.group_mat() {
                    Some(w) if w.format == format && w.cols == k => {
                        Some(fast::group::Part { w, out })
                    }
                    _ => None,
                })
                .collect();
            if let Some(mut p) = group {
                return fast::group::matmul_shared(
                    fast::group_formats::kernels(format),
                    self.group_path(),
                    x,
                    m,
                    k,
                    &mut p,
                );
            }
        }
        // All bf16, or all f32, on a SIMD path.
        if let Some(mut p) = float_parts(parts, k, |w| match *w {
            Mat::Bf16 { data, .. } => Some(data),
            _ => None,
        }) {
            if self.matmul_shared_float(x, m, k, &mut p) {
                return;
            }
        }
        if let Some(mut p) = float_parts(parts, k, |w| match *w {
            Mat::F32 { data, .. } => Some(data),
            _ => None,
        }) {
            if self.matmul_shared_float(x, m, k, &mut p) {
                return;
            }
        }
        for (w, out) in parts.iter_mut() {
            self.matmul(x, m, w, None, out);
        }
    }

    /// [`matmul_shared`] of f32 or bf16 weights on a SIMD path; false on
    /// the scalar path (the caller then runs one reference `matmul` per
    /// weight).
    fn matmul_shared_float<W: fast::matmul::WElem>(
        &self,
        x: &[f32],
        m: usize,
        k: usize,
        parts: &mut [fast::matmul::Part<'_, W>],
    ) -> bool {
        match self.path {
            Path::Scalar => false,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2(s) => {
                fast::matmul::matmul_shared(s, x, m, k, parts);
                true
            }
            #[cfg(target_arch = "x86_64")]
            Path::Avx512(s) => {
                fast::matmul::matmul_shared(s, x, m, k, parts);
                true
            }
        }
    }

    /// [`matmul`] on a [`Mat::Q8`] weight with f32 activations: int8 widened
    /// to f32 in registers, f32 FMAs, the row scale applied to the finished
    /// dot (reference: [`reference::matmul_q8_widened`]). The alternative to
    /// the int16-activation kernel `matmul` runs, kept for comparison
    /// (benches, accuracy tests). Panics on other weight formats.
    pub fn matmul_q8_widened(
        &self,
        x: &[f32],
        m: usize,
        w: &Mat<'_>,
        bias: Option<&[f32]>,
        out: &mut [f32],
    ) {
        assert!(
            matches!(w, Mat::Q8 { .. }),
            "matmul_q8_widened: weight is not Q8"
        );
        dispatch!(
            self,
            reference::matmul_q8_widened(x, m, w, bias, out),
            |s| { fast::matmul::matmul(s, x, m, w, bias, out) }
        )
    }

    /// See [`rms_norm`].
    pub fn rms_norm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        dispatch!(self, reference::rms_norm(x, weight, eps, out), |s| {
            fast::elementwise::rms_norm(s, x, weight, eps, out)
        })
    }

    /// See [`layer_norm`] (reference on every path).
    pub fn layer_norm(&self, x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
        reference::layer_norm(x, weight, bias, eps, out)
    }

    /// See [`rope`] (reference on every path).
    pub fn rope(&self, x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
        reference::rope(x, head_dim, cos, sin)
    }

    /// See [`silu_mul`].
    pub fn silu_mul(&self, gate: &[f32], up: &[f32], out: &mut [f32]) {
        dispatch!(self, reference::silu_mul(gate, up, out), |s| {
            fast::elementwise::silu_mul(s, gate, up, out)
        })
    }

    /// See [`gelu`].
    pub fn gelu(&self, x: &mut [f32]) {
        dispatch!(self, reference::gelu(x), |s| fast::elementwise::gelu(s, x))
    }

    /// See [`snake_beta`].
    pub fn snake_beta(&self, x: &mut [f32], t: usize, alpha: &[f32], inv_beta: &[f32]) {
        dispatch!(self, reference::snake_beta(x, t, alpha, inv_beta), |s| {
            fast::elementwise::snake_beta(s, x, t, alpha, inv_beta)
        })
    }

    /// See [`snake_beta_concat`].
    #[allow(clippy::too_many_arguments)]
    pub fn snake_beta_concat(
        &self,
        head: &[f32],
        h: usize,
        x: &[f32],
        n: usize,
        alpha: &[f32],
        inv_beta: &[f32],
        out: &mut [f32],
    ) {
        dispatch!(
            self,
            reference::snake_beta_concat(head, h, x, n, alpha, inv_beta, out),
            |s| fast::elementwise::snake_beta_concat(s, head, h, x, n, alpha, inv_beta, out)
        )
    }

    /// See [`interleave_phases`].
    pub fn interleave_phases(
        &self,
        rows: &[f32],
        c_out: usize,
        stride: usize,
        n: usize,
        out: &mut [f32],
    ) {
        dispatch!(
            self,
            reference::interleave_phases(rows, c_out, stride, n, out),
            |s| fast::elementwise::interleave_phases(s, rows, c_out, stride, n, out)
        )
    }

    /// See [`add_assign`].
    pub fn add_assign(&self, acc: &mut [f32], x: &[f32]) {
        dispatch!(self, reference::add_assign(acc, x), |s| {
            fast::elementwise::add_assign(s, acc, x)
        })
    }

    /// See [`attention`].
    pub fn attention(
        &self,
        q: &[f32],
        n_q: usize,
        q_pos0: usize,
        kv: KvRows<'_>,
        shape: AttnShape,
        out: &mut [f32],
    ) {
        dispatch!(
            self,
            reference::attention(q, n_q, q_pos0, kv, shape, out),
            |s| { fast::attention::attention(s, q, n_q, q_pos0, kv, shape, out) }
        )
    }

    /// See [`attention_batch`].
    pub fn attention_batch(
        &self,
        q: &[f32],
        segments: &[AttnSegment<'_>],
        shape: AttnShape,
        out: &mut [f32],
    ) {
        dispatch!(
            self,
            reference::attention_batch(q, segments, shape, out),
            |s| { fast::attention::attention_batch(s, q, segments, shape, out) }
        )
    }

    /// See [`conv1d`].
    pub fn conv1d(
        &self,
        x: &[f32],
        t_in: usize,
        w: &[f32],
        bias: Option<&[f32]>,
        s: Conv1dShape,
        out: &mut [f32],
    ) {
        dispatch!(self, reference::conv1d(x, t_in, w, bias, s, out), |tok| {
            fast::conv::conv1d(tok, x, t_in, w, bias, s, out)
        })
    }

    /// See [`conv1d_strided`].
    pub fn conv1d_strided(
        &self,
        x: &[f32],
        t_in: usize,
        w: &[f32],
        bias: Option<&[f32]>,
        s: StridedConv1dShape,
        out: &mut [f32],
    ) {
        dispatch!(
            self,
            reference::conv1d_strided(x, t_in, w, bias, s, out),
            |tok| fast::conv_strided::conv1d_strided(tok, x, t_in, w, bias, s, out)
        )
    }

    /// These kernels with the bf16 convolutions on the portable f32-FMA
    /// emulation even where the CPU has avx512_bf16 (tests and benches
    /// compare the two; the bits are the same, see [`conv_bf16`]).
    pub fn with_emulated_bf16(mut self) -> Kernels {
        self.emulate_bf16 = true;
        self
    }

    /// These kernels with the bf16 convolutions on `vdpbf16ps` even where
    /// AMX tiles are usable: the path whose bits equal the scalar reference
    /// (the AMX path is within rounding of it, see `fast::conv_amx`).
    pub fn without_amx(mut self) -> Kernels {
        self.no_amx = true;
        self
    }

    /// How this path runs bf16 convolutions: `"amx_bf16"` (`tdpbf16ps`
    /// tiles), `"avx512_bf16"` (`vdpbf16ps`), `"f32-fma emulation"` or
    /// `"scalar reference"`.
    pub fn bf16_conv_path(&self) -> &'static str {
        match self.path {
            Path::Scalar => "scalar reference",
            #[cfg(target_arch = "x86_64")]
            Path::Avx512(_) if self.amx_tiles().is_some() => "amx_bf16",
            #[cfg(target_arch = "x86_64")]
            Path::Avx512(_) if !self.emulate_bf16 && native_bf16().is_some() => "avx512_bf16",
            #[cfg(target_arch = "x86_64")]
            _ => "f32-fma emulation",
        }
    }

    /// The AMX token where this path runs bf16 convolutions on AMX tiles.
    #[cfg(target_arch = "x86_64")]
    fn amx_tiles(&self) -> Option<fast::conv_amx::Amx> {
        match self.path {
            Path::Avx512(_) if !self.emulate_bf16 && !self.no_amx => amx(),
            _ => None,
        }
    }

    /// The layout this path's bf16 convolutions read their weights in:
    /// what a [`ConvBf16`] they will run should be built in (AMX tiles
    /// where this path runs `tdpbf16ps`, channel pairs elsewhere).
    pub fn bf16_layout(&self) -> Bf16Layout {
        #[cfg(target_arch = "x86_64")]
        if self.amx_tiles().is_some() {
            return Bf16Layout::AmxTiles;
        }
        Bf16Layout::Pairs
    }

    /// The bf16 tile for the token `s` of this path.
    #[cfg(target_arch = "x86_64")]
    fn bf16_kernel<S>(&self, s: S) -> fast::conv_bf16::Bf16Kernel<S> {
        use fast::conv_bf16::Bf16Kernel;
        if let Some(a) = self.amx_tiles() {
            return Bf16Kernel::Amx(a);
        }
        match (self.path, native_bf16()) {
            (Path::Avx512(_), Some(d)) if !self.emulate_bf16 => Bf16Kernel::Native(d),
            _ => Bf16Kernel::Emulated(s),
        }
    }

    /// See [`conv1d_bf16`].
    pub fn conv1d_bf16(
        &self,
        x: &[f32],
        t_in: usize,
        w: &ConvBf16,
        bias: Option<&[f32]>,
        dilation: usize,
        out: &mut [f32],
    ) {
        dispatch!(
            self,
            reference::conv1d_bf16(x, t_in, w, bias, dilation, out),
            |s| fast::conv_bf16::conv1d(self.bf16_kernel(s), x, t_in, w, bias, dilation, out)
        )
    }

    /// The int8 convolution's kernel on this path: `vpdpbusd` where the
    /// path is AVX-512 and the CPU has avx512vnni, `vpmaddwd` on AVX2
    /// (and on AVX-512 without VNNI), else the portable kernel (the same
    /// bits on every one).
    fn q8_conv_path(&self) -> fast::conv_q8::Q8ConvPath {
        use fast::conv_q8::Q8ConvPath;
        #[cfg(target_arch = "x86_64")]
        match self.path {
            Path::Avx512(_) => {
                static V: std::sync::OnceLock<Option<fast::conv_q8::vnni::Vnni>> =
                    std::sync::OnceLock::new();
                if let Some(v) = *V.get_or_init(fast::conv_q8::vnni::Vnni::new) {
                    return Q8ConvPath::Vnni(v);
                }
                if let Some(a) = Avx2::new() {
                    return Q8ConvPath::Avx2(a);
                }
            }
            Path::Avx2(a) => return Q8ConvPath::Avx2(a),
            Path::Scalar => {}
        }
        Q8ConvPath::Portable
    }

    /// How this path runs int8 convolutions (`avx512vnni`, `avx2` or
    /// `portable`).
    pub fn q8_conv_name(&self) -> &'static str {
        self.q8_conv_path().name()
    }

    /// See [`conv1d_q8`].
    pub fn conv1d_q8(
        &self,
        x: &[f32],
        t_in: usize,
        w: &ConvQ8,
        bias: Option<&[f32]>,
        dilation: usize,
        out: &mut [f32],
    ) {
        fast::conv_q8::conv1d(self.q8_conv_path(), x, t_in, w, bias, dilation, out)
    }

    /// `vdpbf16ps` on one lane: `acc + hi(a) * hi(b) + lo(a) * lo(b)` as
    /// this CPU computes it (`a`, `b`: bf16 pairs, low half = even element),
    /// or `None` without avx512_bf16. For the test that pins
    /// [`conv_bf16::dp_step`] to the instruction.
    pub fn dpbf16_lane(acc: f32, a: u32, b: u32) -> Option<f32> {
        #[cfg(target_arch = "x86_64")]
        return native_bf16().map(|d| fast::conv_bf16::dp_lane(d, acc, a, b));
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (acc, a, b);
            None
        }
    }

    /// See [`conv_transpose1d`].
    pub fn conv_transpose1d(
        &self,
        x: &[f32],
        t_in: usize,
        w: &[f32],
        bias: Option<&[f32]>,
        s: ConvTranspose1dShape,
        out: &mut [f32],
    ) {
        dispatch!(
            self,
            reference::conv_transpose1d(x, t_in, w, bias, s, out),
            |tok| fast::conv::conv_transpose1d(tok, x, t_in, w, bias, s, out)
        )
    }
}

/// `out[m, n] = sum_k x[m, k] * w[n, k] + bias[n]`: `y = x W^T + b` for a
/// row-major `x` of `m` rows and a weight `w` stored `[n, k]` (PyTorch Linear).
/// Accumulation is f32 whatever the weight storage.
pub fn matmul(x: &[f32], m: usize, w: &Mat<'_>, bias: Option<&[f32]>, out: &mut [f32]) {
    Kernels::selected().matmul(x, m, w, bias, out)
}

/// The parts of a [`matmul_shared`] call as the float kernel's, when every
/// weight is the one format `data` views (f32 or bf16) with `k` inputs.
fn float_parts<'p, 'w, W>(
    parts: &'p mut [(&Mat<'w>, &mut [f32])],
    k: usize,
    data: fn(&Mat<'w>) -> Option<&'w [W]>,
) -> Option<Vec<fast::matmul::Part<'p, W>>> {
    parts
        .iter_mut()
        .map(|(w, out)| {
            let d = data(w).filter(|_| w.cols() == k)?;
            Some(fast::matmul::Part {
                w: d,
                rows: w.rows(),
                out,
            })
        })
        .collect()
}

/// [`matmul`] (no bias) of one `x = [m, k]` against several weights that
/// all read it, each into its own `[m, n_i]` output: a decoder layer's
/// q, k and v projections, its MLP gate and up. Every output has the bits
/// a separate [`matmul`] gives it. Int8 weights run as one parallel region
/// over all their rows, with the activations quantized once (one fork-join
/// and one tail per step instead of one per weight); so do all-bf16 and
/// all-f32 weights on the SIMD paths, and weights of one group format. A
/// mix of formats, and f32/bf16/int8 on the scalar path, run one
/// [`matmul`] per weight.
///
/// # Panics
/// On shapes that do not match, as [`matmul`].
pub fn matmul_shared(x: &[f32], m: usize, parts: &mut [(&Mat<'_>, &mut [f32])]) {
    Kernels::selected().matmul_shared(x, m, parts)
}

/// Row-wise RMSNorm over rows of `weight.len()` features:
/// `out = x * rsqrt(mean(x^2) + eps) * weight`.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    Kernels::selected().rms_norm(x, weight, eps, out)
}

/// Row-wise LayerNorm with affine weight and bias.
pub fn layer_norm(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    Kernels::selected().layer_norm(x, weight, bias, eps, out)
}

/// Rotate-half RoPE applied in place to `x = [n_heads, head_dim]` for one
/// position, with `cos`/`sin` of length `head_dim / 2` for that position.
pub fn rope(x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    Kernels::selected().rope(x, head_dim, cos, sin)
}

/// SwiGLU gate: `out[i] = silu(gate[i]) * up[i]`.
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    Kernels::selected().silu_mul(gate, up, out)
}

/// Exact (erf) GELU in place.
pub fn gelu(x: &mut [f32]) {
    Kernels::selected().gelu(x)
}

/// SnakeBeta in place on channel-major `x = [channels, t]`:
/// `x + inv_beta[c] * sin(x * alpha[c])^2`, with `alpha = exp(log_alpha)` and
/// `inv_beta = 1 / (exp(log_beta) + 1e-9)` precomputed by the caller.
pub fn snake_beta(x: &mut [f32], t: usize, alpha: &[f32], inv_beta: &[f32]) {
    Kernels::selected().snake_beta(x, t, alpha, inv_beta)
}

/// [`snake_beta`] of each row of `[head | x]` (`head = [c, h]`,
/// `x = [c, n]`, channel-major) written to `out = [c, h + n]`: the
/// concatenation and the activation in one parallel pass, with the bits of
/// concatenating and then calling [`snake_beta`] on this path.
pub fn snake_beta_concat(
    head: &[f32],
    h: usize,
    x: &[f32],
    n: usize,
    alpha: &[f32],
    inv_beta: &[f32],
    out: &mut [f32],
) {
    Kernels::selected().snake_beta_concat(head, h, x, n, alpha, inv_beta, out)
}

/// A transposed convolution's phases into time: `rows = [c_out * stride,
/// n]` holds phase `r` of channel `co` in row `co * stride + r`; `out =
/// [c_out, n * stride]` gets `out[co, q * stride + r] = rows[co * stride +
/// r, q]` (in parallel over channels).
pub fn interleave_phases(rows: &[f32], c_out: usize, stride: usize, n: usize, out: &mut [f32]) {
    Kernels::selected().interleave_phases(rows, c_out, stride, n, out)
}

/// `acc += x` element by element (in parallel over large arrays; the
/// same sums as a serial loop).
pub fn add_assign(acc: &mut [f32], x: &[f32]) {
    Kernels::selected().add_assign(acc, x)
}

/// How this process runs bf16 convolutions ([`Kernels::bf16_conv_path`]
/// of [`Kernels::selected`]): reported beside [`isa()`].
pub fn bf16_conv_path() -> &'static str {
    Kernels::selected().bf16_conv_path()
}

/// The layout the bf16 convolution entry point ([`conv1d_bf16`]) reads
/// weights in: what a loader passes to [`ConvBf16::from_conv1d`] and
/// [`ConvBf16::from_transpose1d_phases`] ([`Kernels::bf16_layout`] of
/// [`Kernels::selected`]).
pub fn bf16_layout() -> Bf16Layout {
    Kernels::selected().bf16_layout()
}

/// The AMX token (detected and permitted once, `TTS_RT_AMX=off` refuses).
#[cfg(target_arch = "x86_64")]
fn amx() -> Option<fast::conv_amx::Amx> {
    fast::conv_amx::Amx::new()
}

/// The avx512_bf16 token, detected once.
#[cfg(target_arch = "x86_64")]
fn native_bf16() -> Option<fast::conv_bf16::DpBf16> {
    static D: std::sync::OnceLock<Option<fast::conv_bf16::DpBf16>> = std::sync::OnceLock::new();
    *D.get_or_init(fast::conv_bf16::DpBf16::new)
}

/// bf16 `conv1d` (groups 1, stride 1, "valid") with a weight packed by
/// [`ConvBf16::from_conv1d`]: `x = [c_in, t_in]` rounded to bf16,
/// `out = [c_out, t_in - (kernel - 1) * dilation]`, f32 accumulation. The
/// arithmetic (identical on every path) is in [`conv_bf16`].
pub fn conv1d_bf16(
    x: &[f32],
    t_in: usize,
    w: &ConvBf16,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &mut [f32],
) {
    Kernels::selected().conv1d_bf16(x, t_in, w, bias, dilation, out)
}

/// int8 `conv1d` (groups 1, stride 1, "valid") with a weight quantized by
/// [`ConvQ8::from_conv1d`]: `x = [c_in, t_in]` quantized per time column,
/// `out = [c_out, t_in - (kernel - 1) * dilation]`, exact i32 sums per
/// tap. The arithmetic (identical on every path) is in [`conv_q8`].
pub fn conv1d_q8(
    x: &[f32],
    t_in: usize,
    w: &ConvQ8,
    bias: Option<&[f32]>,
    dilation: usize,
    out: &mut [f32],
) {
    Kernels::selected().conv1d_q8(x, t_in, w, bias, dilation, out)
}

/// Causal attention of `n_q` new queries against a KV cache.
///
/// - `q`: `[n_q, n_heads, head_dim]`; query `i` is at absolute position
///   `q_pos0 + i`.
/// - `kv`: the cached keys and values ([`KvRows`]).
/// - `out`: `[n_q, n_heads, head_dim]`.
///
/// Query head `h` uses KV head `h / (n_heads / n_kv_heads)` (GQA). Softmax in
/// f32. A query sees keys with `pos_k <= pos_q` and, with a window `w`,
/// `pos_k > pos_q - w`.
pub fn attention(
    q: &[f32],
    n_q: usize,
    q_pos0: usize,
    kv: KvRows<'_>,
    shape: AttnShape,
    out: &mut [f32],
) {
    Kernels::selected().attention(q, n_q, q_pos0, kv, shape, out)
}

/// [`attention`] of several sequences in one call: `q` and `out` are
/// `[sum of n_q, n_heads, head_dim]`, the segments' rows one after the
/// other, and each segment's rows are what [`attention`] gives them alone
/// (the same bits). The fast paths run every segment's (query, head) tasks
/// in one parallel region, where one call per sequence paid a fork-join
/// each (a batched decode step: one per sequence and layer).
pub fn attention_batch(q: &[f32], segments: &[AttnSegment<'_>], shape: AttnShape, out: &mut [f32]) {
    Kernels::selected().attention_batch(q, segments, shape, out)
}

/// "Valid" 1-D convolution, stride 1, on channel-major `x = [c_in, t_in]`
/// with weight `[c_out, c_in / groups, kernel]` and optional bias:
/// `out = [c_out, t_in - (kernel - 1) * dilation]`. Causal padding and
/// streaming history are the caller's business (it prepends the left
/// context), which is what lets one kernel serve one-shot and streaming use.
pub fn conv1d(
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    s: Conv1dShape,
    out: &mut [f32],
) {
    Kernels::selected().conv1d(x, t_in, w, bias, s, out)
}

/// "Valid" strided 1-D convolution on channel-major `x = [c_in, t_in]` with
/// weight `[c_out, c_in / groups, kernel]` and optional bias:
/// `out[co, t] = bias[co] + sum_ci sum_k w[co, ci, k] * x[ci, t * stride + k
/// * dilation]`, `out = [c_out, s.t_out(t_in)]`. Padding is the caller's, as
/// for [`conv1d`].
///
/// The SIMD paths run dense (groups 1, dilation 1) shapes as a stride-1
/// [`conv1d`] over the input split into its `stride` phases (polyphase:
/// tap `k` reads phase `k % stride` at offset `k / stride`), so the one tuned
/// convolution tile serves both; other strided shapes use the reference.
pub fn conv1d_strided(
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    s: StridedConv1dShape,
    out: &mut [f32],
) {
    Kernels::selected().conv1d_strided(x, t_in, w, bias, s, out)
}

/// Full transposed 1-D convolution (PyTorch `ConvTranspose1d`, no padding)
/// on `x = [c_in, t_in]` with weight `[c_in, c_out, kernel]`:
/// `out = [c_out, (t_in - 1) * stride + kernel]`. Trimming is the caller's.
pub fn conv_transpose1d(
    x: &[f32],
    t_in: usize,
    w: &[f32],
    bias: Option<&[f32]>,
    s: ConvTranspose1dShape,
    out: &mut [f32],
) {
    Kernels::selected().conv_transpose1d(x, t_in, w, bias, s, out)
}
