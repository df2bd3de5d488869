//! The host's memory read bandwidth, measured the way the decode steps
//! read their weights: a sum over a buffer far past the last-level cache,
//! split into tasks on the installed kernel team (else rayon's pool).
//!
//! The LMs' decode steps at batch 1 are bound by this rate: a stage's
//! *floor* per frame is the weight bytes it streams divided by it, and
//! `speak --timings --floor` reports each stage's time against it. Shared
//! hosts move it by a third from one minute to the next, so a floor is only
//! meaningful beside the run it judges.

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
}
