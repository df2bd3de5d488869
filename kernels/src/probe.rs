//! What bounds this host, measured the way the model's steps use it:
//!
//! - [`read_bandwidth`]: the memory read rate, a sum over a buffer far past
//!   the last-level cache, split into tasks on the installed kernel team
//!   (else rayon's pool). The LMs' decode steps at batch 1 are bound by it:
//!   a stage's *floor* per frame is the weight bytes it streams divided by
//!   it, and `speak --timings --floor` reports each stage's time against it.
//! - [`q8_matmul_rate`] and [`bf16_conv_rate`]: the multiply-add rate of the
//!   two kernels that bound the rest, on weights that stay in cache: the
//!   LMs' int8 matmul at a batched step's 4 rows (what caps batching once
//!   the weights' bytes are shared) and the vocoder's bf16 convolution
//!   (compute-bound at every step size but the first). A kernel's rate in
//!   the model, over these, is the fraction of this host's own peak it
//!   reaches.
//!
//! Shared hosts move all three by a third from one minute to the next, so
//! a figure is only meaningful beside the run it judges.

use std::hint::black_box;
use std::time::Instant;

/// One measurement: the median and the range over its passes, in bytes per
/// second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bandwidth {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Bytes read per pass.
    pub bytes: usize,
    pub passes: usize,
}

/// Bytes one task sums (1 MiB): small enough for an even split, large
/// enough that a task's start costs nothing against its reads.
const TASK_BYTES: usize = 1 << 20;

/// Sums `buf` (wrapping) in 8 independent lanes, so the adds never bound
/// the reads: the read probe's task (and the `bandwidth` bench's).
pub fn sum_u64(buf: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    for c in buf.chunks_exact(8) {
        for (a, v) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(*v);
        }
    }
    acc.iter().fold(0, |a, v| a.wrapping_add(*v))
}

/// Reads a `bytes` buffer (rounded up to whole MiB, at least 1 MiB) once
/// untimed, then `passes` timed times (at least 1), each split into 1 MiB
/// tasks over the installed team's threads. Allocates and touches the
/// buffer first (page faults are not timed).
pub fn read_bandwidth(bytes: usize, passes: usize) -> Bandwidth {
    let words_per_task = TASK_BYTES / 8;
    let tasks = bytes.div_ceil(TASK_BYTES).max(1);
    let buf: Vec<u64> = (0..tasks * words_per_task).map(|i| i as u64).collect();
    let total = std::sync::atomic::AtomicU64::new(0);
    let pass = || {
        crate::team::for_each(tasks, |t| {
            let s = sum_u64(black_box(
                &buf[t * words_per_task..(t + 1) * words_per_task],
            ));
            total.fetch_add(s, std::sync::atomic::Ordering::Relaxed);
        })
    };
    pass();
    let passes = passes.max(1);
    let mut rates: Vec<f64> = (0..passes)
        .map(|_| {
            let t = Instant::now();
            pass();
            (buf.len() * 8) as f64 / t.elapsed().as_secs_f64()
        })
        .collect();
    black_box(total.into_inner());
    rates.sort_by(f64::total_cmp);
    Bandwidth {
        median: rates[rates.len() / 2],
        min: rates[0],
        max: rates[rates.len() - 1],
        bytes: buf.len() * 8,
        passes,
    }
}

/// A compute rate: multiply-adds per second over a fixed in-cache
/// workload, the median and range over its passes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MacRate {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Multiply-adds per pass.
    pub macs: u64,
    /// Calls of the kernel per pass.
    pub calls: usize,
    pub passes: usize,
}

/// Times `passes` passes of `calls` calls of `work` (after two untimed
/// calls), each call `macs` multiply-adds. `calls == 0`: as many as take
/// about [`PASS_TARGET`] by the untimed call's time (at least one).
fn mac_rate(calls: usize, passes: usize, macs: u64, mut work: impl FnMut()) -> MacRate {
    // A cold first call (page faults, caches, clocks) would size the
    // passes too short: the call count comes from a warm one.
    work();
    let t = Instant::now();
    work();
    let calls = match calls {
        0 => (PASS_TARGET.as_secs_f64() / t.elapsed().as_secs_f64().max(1e-9)).clamp(1.0, 1e6)
            as usize,
        n => n,
    };
    let macs = macs * calls as u64;
    let pass = |work: &mut dyn FnMut()| {
        for _ in 0..calls {
            work();
        }
    };
    let passes = passes.max(1);
    let mut rates: Vec<f64> = (0..passes)
        .map(|_| {
            let t = Instant::now();
            pass(&mut work);
            macs as f64 / t.elapsed().as_secs_f64()
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    MacRate {
        median: rates[rates.len() / 2],
        min: rates[0],
        max: rates[rates.len() - 1],
        macs,
        calls,
        passes,
    }
}

/// About how long a compute probe's pass takes when it picks its own call
/// count: long enough that a pass is not one scheduler tick.
pub const PASS_TARGET: std::time::Duration = std::time::Duration::from_millis(10);

/// `n` values in [-1, 1) from a xorshift stream seeded by `seed` (the same
/// data for the same seed on every run and host): the probes' inputs, and
/// the kernel examples' and benches'.
pub fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

/// The int8 LM matmul's multiply-add rate on this path ([`Kernels::selected`]),
/// weights in cache: `x [4, 1024] * W [1024, 1024]^T` (1 MiB of int8 split
/// over the team, so each task's rows stay in its core's L2), `calls` calls
/// a pass (0: about [`PASS_TARGET`]'s worth). 4 rows: a batched step of
/// four streams.
///
/// [`Kernels::selected`]: crate::Kernels::selected
pub fn q8_matmul_rate(calls: usize, passes: usize) -> MacRate {
    let (m, n, k) = (4, 1024, 1024);
    let (q, scales) = crate::quantize_q8_rows(&data(n * k, 1), n, k);
    let w = crate::Mat::Q8 {
        data: &q,
        scales: &scales,
        rows: n,
        cols: k,
    };
    let x = data(m * k, 2);
    let mut out = vec![0f32; m * n];
    let kern = crate::Kernels::selected();
    mac_rate(calls, passes, (m * n * k) as u64, || {
        kern.matmul(black_box(&x), m, &w, None, &mut out);
        black_box(&out);
    })
}

/// The vocoder's bf16 convolution rate on this path (`vdpbf16ps`, AMX
/// tiles or the f32 emulation, as [`crate::bf16_conv_path`] names it): a
/// k7 conv of 192 channels (the decoder's third block) over `t` samples,
/// `calls` calls a pass (0: about [`PASS_TARGET`]'s worth).
pub fn bf16_conv_rate(t: usize, calls: usize, passes: usize) -> MacRate {
    let (c, kernel) = (192, 7);
    let kern = crate::Kernels::selected();
    let w =
        crate::ConvBf16::from_conv1d(&data(c * c * kernel, 3), c, c, kernel, kern.bf16_layout());
    let t = t.max(kernel);
    let x = data(c * t, 4);
    let t_out = t - kernel + 1;
    let mut out = vec![0f32; c * t_out];
    mac_rate(calls, passes, (c * c * kernel * t_out) as u64, || {
        kern.conv1d_bf16(black_box(&x), t, &w, None, 1, &mut out);
        black_box(&out);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_buffer_is_measured_in_whole_tasks() {
        let b = read_bandwidth(3 << 20, 3);
        assert_eq!(b.bytes, 3 << 20);
        assert_eq!(b.passes, 3);
        assert!(
            b.min > 0.0 && b.min <= b.median && b.median <= b.max,
            "{b:?}"
        );
    }

    #[test]
    fn the_lane_sum_is_the_plain_sum() {
        let v: Vec<u64> = (0..64).collect();
        assert_eq!(sum_u64(&v), v.iter().sum::<u64>());
    }

    #[test]
    fn the_compute_rates_count_their_multiply_adds() {
        let q = q8_matmul_rate(2, 2);
        assert_eq!((q.macs, q.calls), (2 * 4 * 1024 * 1024, 2));
        let c = bf16_conv_rate(64, 1, 2);
        assert_eq!((c.macs, c.calls), ((192 * 192 * 7 * (64 - 6)) as u64, 1));
        let auto = bf16_conv_rate(64, 0, 1);
        assert!(
            auto.calls >= 1 && auto.macs == c.macs * auto.calls as u64,
            "{auto:?}"
        );
        for r in [q, c, auto] {
            assert!(r.passes >= 1);
            assert!(
                r.min > 0.0 && r.min <= r.median && r.median <= r.max && r.max.is_finite(),
                "{r:?}"
            );
        }
    }
}
