//! Optimised kernels, generic over a [`Simd`] token and compiled per ISA by
//! monomorphisation. Each has the same contract as its namesake in
//! [`crate::reference`] and a differential test against it.
//!
//! Determinism: every output element is reduced in an order fixed by the
//! problem shape alone (one lane-wise FMA chain, a fixed horizontal sum, then
//! the scalar tail). Blocking and rayon's splitting decide only *which thread*
//! computes an element, never how, so results are bit-identical run to run
//! and for any thread count.

pub(crate) mod attention;
pub(crate) mod conv;
#[cfg(target_arch = "x86_64")]
pub(crate) mod conv_amx;
pub(crate) mod conv_bf16;
pub(crate) mod conv_bf16_setup;
pub(crate) mod conv_q8;
pub(crate) mod conv_strided;
pub(crate) mod elementwise;
pub(crate) mod group;
pub(crate) mod group_formats;
pub(crate) mod iq4;
pub(crate) mod matmul;
pub(crate) mod q4;
pub(crate) mod q6;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q8;

use crate::settings::PrefetchLevel;
#[allow(unused_imports)]
pub(crate) use crate::simd::Simd;

/// Below this many multiply-adds a call runs on the calling thread: a rayon
/// fork-join costs a few microseconds, ~50k FMAs of one core.
pub(crate) const PAR_MIN_WORK: usize = 1 << 16;
/// Multiply-adds a rayon task should at least carry.
pub(crate) const TASK_MIN_WORK: usize = 1 << 15;

/// Runs `f(block_index, block)` over `out` split into blocks of `block`
/// elements (the last may be shorter), in parallel when the total work is
/// worth it. `work_per_block` is in multiply-adds.
pub(crate) fn for_blocks<F>(out: &mut [f32], block: usize, work_per_block: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync + Send,
{
    if out.is_empty() {
        return;
    }
    let (len, n_blocks) = (out.len(), out.len().div_ceil(block));
    let o = SharedOut::new(out);
    run_tasks(n_blocks, work_per_block, |i| {
        let start = i * block;
        // SAFETY: block i is `out[start..min(start + block, len)]`; blocks
        // are disjoint and `out` outlives the call.
        let b =
            unsafe { std::slice::from_raw_parts_mut(o.ptr().add(start), block.min(len - start)) };
        f(i, b)
    });
}

/// How far ahead of its read position a one-stream decode matvec prefetches
/// ([`Prefetch::ahead`]; docs/performance.md, "One stream per task").
pub(crate) const STREAM_AHEAD: usize = 8192;

/// Software prefetch of the weight block a kernel will read next.
///
/// A decode matvec walks its weight rows in blocks of a few rows; each row is
/// only 1-6 KB (k = 1024..3072 at 1-2 bytes), too short a stream for the
/// hardware prefetchers to ramp up before it ends, so every block started
/// with DRAM latency exposed. While a block is computed, the kernels touch
/// the *next* block (the contiguous bytes that follow, a `Prefetch`) at the
/// same relative pace, so it arrives in L2 before it is needed. A hint
/// only: it never faults, and the bytes it names need not be valid.
#[derive(Clone, Copy)]
pub(crate) struct Prefetch {
    base: *const u8,
    bytes: usize,
    t1: bool,
}

impl Prefetch {
    pub(crate) const NONE: Prefetch = Prefetch {
        base: core::ptr::null(),
        bytes: 0,
        t1: false,
    };

    /// The `bytes` after `p` (`p` itself need not be in bounds), prefetched
    /// into the cache level [`crate::KernelSettings::prefetch`] names
    /// (`TTS_RT_PREFETCH`: `l2`, the default, `prefetcht1`: the next block
    /// is up to 48 KB ahead, more than L1 holds; `l1`, `prefetcht0`; `off`,
    /// none: a measurement switch).
    #[inline(always)]
    pub(crate) fn new(p: *const u8, bytes: usize) -> Prefetch {
        match crate::settings::get().prefetch {
            PrefetchLevel::Off => Prefetch::NONE,
            level => Prefetch {
                base: p,
                bytes,
                t1: level == PrefetchLevel::L2,
            },
        }
    }

    /// [`Prefetch::new`] into L1 whatever level the setting names (unless
    /// it is `off`): for reads a few rows ahead that the core needs at
    /// once (attention's next keys), not a block up to 48 KB on.
    #[inline(always)]
    pub(crate) fn l1(p: *const u8, bytes: usize) -> Prefetch {
        Prefetch {
            t1: false,
            ..Prefetch::new(p, bytes)
        }
    }

    /// The look-ahead window of a task that reads the `bytes` from `p` as one
    /// forward stream: hinting offset `o` fetches the byte `STREAM_AHEAD`
    /// past it, never past the task's end.
    #[inline(always)]
    pub(crate) fn ahead(p: *const u8, bytes: usize) -> Prefetch {
        Prefetch::new(
            p.wrapping_add(STREAM_AHEAD),
            bytes.saturating_sub(STREAM_AHEAD),
        )
    }

    /// Hints the one line at `off` of the span, if `off` is inside it.
    #[inline(always)]
    pub(crate) fn line(self, off: usize) {
        if off < self.bytes {
            self.hint(off);
        }
    }

    /// Hints the lines of `[off, off + len)` of the span (clamped to it).
    #[inline(always)]
    pub(crate) fn touch(self, off: usize, len: usize) {
        if self.bytes == 0 || off >= self.bytes {
            return;
        }
        let end = (off + len).min(self.bytes);
        let mut o = off & !63;
        while o < end {
            self.hint(o);
            o += 64;
        }
    }

    /// One prefetch of the line holding byte `o` of the span.
    #[inline(always)]
    fn hint(self, o: usize) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: prefetch is a hint that never faults; the address is
        // computed with wrapping arithmetic and never dereferenced.
        unsafe {
            use core::arch::x86_64::*;
            let a = self.base.wrapping_add(o) as *const i8;
            if self.t1 {
                _mm_prefetch::<_MM_HINT_T1>(a);
            } else {
                _mm_prefetch::<_MM_HINT_T0>(a);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = o;
    }
}

/// Runs `task(0..n_tasks)`, in parallel when the total work is worth a
/// fork-join (`task_work` multiply-adds each): on the installed
/// [`crate::Team`], else rayon's pool (`crate::team::for_each`). Tasks
/// lighter than [`TASK_MIN_WORK`] run in consecutive groups.
pub(crate) fn run_tasks<F>(n_tasks: usize, task_work: usize, task: F)
where
    F: Fn(usize) + Sync + Send,
{
    if n_tasks == 1 || n_tasks.saturating_mul(task_work) < PAR_MIN_WORK {
        (0..n_tasks).for_each(task);
    } else {
        let group = TASK_MIN_WORK.div_ceil(task_work.max(1));
        crate::team::for_each(n_tasks.div_ceil(group), |g| {
            (g * group..((g + 1) * group).min(n_tasks)).for_each(&task)
        });
    }
}

/// Splits `n` output rows into tasks of whole `granule`s, about four per
/// thread of the current executor and each at least `min_rows`, and runs
/// `rows(j0, j1)` for each: the m = 1 matvecs' split.
pub(crate) fn par_rows(
    n: usize,
    granule: usize,
    min_rows: usize,
    rows: impl Fn(usize, usize) + Sync + Send,
) {
    let threads = crate::team::threads();
    let per = n
        .div_ceil(4 * threads)
        .max(min_rows)
        .next_multiple_of(granule);
    let tasks = n.div_ceil(per);
    crate::team::for_each(tasks, |t| rows(t * per, ((t + 1) * per).min(n)));
}

/// [`par_rows`] over the rows of several weights read as one: part `i`
/// has `rows[i]` output rows, the parts follow each other in one row range
/// that is split into tasks as one weight's would be, and `f(i, j0, j1)`
/// runs part `i`'s rows `j0..j1` of each task (a task may end one part and
/// start the next). `row_work` is the multiply-adds of one row (`m * k`);
/// too little work runs inline.
pub(crate) fn par_parts(
    rows: &[usize],
    granule: usize,
    row_work: usize,
    f: impl Fn(usize, usize, usize) + Sync + Send,
) {
    let total: usize = rows.iter().sum();
    let each = |j0: usize, j1: usize| {
        let mut r0 = 0;
        for (i, &n) in rows.iter().enumerate() {
            let (a, b) = (j0.max(r0), j1.min(r0 + n));
            if a < b {
                f(i, a - r0, b - r0);
            }
            r0 += n;
        }
    };
    if total.saturating_mul(row_work) < PAR_MIN_WORK || total <= granule {
        return each(0, total);
    }
    par_rows(
        total,
        granule,
        TASK_MIN_WORK.div_ceil(row_work.max(1)),
        each,
    );
}

/// A raw output pointer shared by tasks that write disjoint elements.
pub(crate) struct SharedOut<T = f32>(*mut T);

impl<T> Clone for SharedOut<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SharedOut<T> {}

// SAFETY: a `SharedOut` is only handed to tasks that write pairwise disjoint
// elements of one live `&mut [T]`, which outlives the parallel section.
unsafe impl<T: Send> Send for SharedOut<T> {}
// SAFETY: as above; no task reads what another writes.
unsafe impl<T: Send> Sync for SharedOut<T> {}

impl<T> SharedOut<T> {
    pub(crate) fn new(out: &mut [T]) -> Self {
        SharedOut(out.as_mut_ptr())
    }
    /// A method, not a field access, so closures capture the `Sync` wrapper.
    #[inline(always)]
    pub(crate) fn ptr(self) -> *mut T {
        self.0
    }
}
