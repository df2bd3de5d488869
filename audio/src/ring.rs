//! A preallocated lock-free single-producer single-consumer ring of `f32`
//! samples: the hand-off between the synthesis thread and a device callback.
//!
//! Safe code only: samples are stored as the bits of `AtomicU32` cells with
//! relaxed loads and stores (on x86-64 and AArch64 those compile to plain
//! moves), and the two positions publish them with release/acquire. Neither
//! side ever locks, allocates or waits; "full" and "empty" are answered by
//! returning how many samples moved. Positions are monotonically increasing
//! `usize` counters (a 64-bit counter at 192 kHz wraps after ~3 million
//! years), the slot is `position & mask`.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

/// Keeps the two positions on separate cache lines so the producer's writes
/// to `head` do not invalidate the consumer's line holding `tail`.
#[repr(align(64))]
struct Padded(AtomicUsize);

struct Ring {
    slots: Box<[AtomicU32]>,
    mask: usize,
    /// Next position the producer writes (samples `< head` are published).
    head: Padded,
    /// Next position the consumer reads (slots `< tail` are free again).
    tail: Padded,
}

/// Creates a ring holding at least `capacity` samples (rounded up to a power
/// of two, minimum 2) and returns its two ends.
pub fn channel(capacity: usize) -> (Producer, Consumer) {
    let cap = capacity.max(2).next_power_of_two();
    let slots: Box<[AtomicU32]> = (0..cap).map(|_| AtomicU32::new(0)).collect();
    let ring = Arc::new(Ring {
        slots,
        mask: cap - 1,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
    });
    (Producer { ring: ring.clone() }, Consumer { ring })
}

/// The writing end. Not `Clone`: one producer.
pub struct Producer {
    ring: Arc<Ring>,
}

/// The reading end. Not `Clone`: one consumer.
pub struct Consumer {
    ring: Arc<Ring>,
}

impl Producer {
    /// Copies as many samples of `samples` as fit and publishes them; returns
    /// how many were taken (0 when full). Never blocks.
    pub fn push(&mut self, samples: &[f32]) -> usize {
        let r = &*self.ring;
        let head = r.head.0.load(Ordering::Relaxed);
        // Acquire: the consumer finished reading the slots below `tail`
        // before publishing it, so they may be overwritten.
        let tail = r.tail.0.load(Ordering::Acquire);
        let free = r.slots.len() - head.wrapping_sub(tail);
        let n = free.min(samples.len());
        for (i, &s) in samples[..n].iter().enumerate() {
            r.slots[head.wrapping_add(i) & r.mask].store(s.to_bits(), Ordering::Relaxed);
        }
        // Release: the stores above are visible to a consumer that sees the
        // new head.
        r.head.0.store(head.wrapping_add(n), Ordering::Release);
        n
    }

    /// Samples that can be pushed now.
    pub fn free(&self) -> usize {
        self.capacity() - self.len()
    }

    /// Samples queued and not yet consumed.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.ring.slots.len()
    }

    /// Total samples the consumer has taken since creation: progress seen
    /// from the producer side.
    pub fn consumed(&self) -> usize {
        self.ring.tail.0.load(Ordering::Acquire)
    }
}

impl Consumer {
    /// Takes up to `max` samples in order, handing each to `f`; returns how
    /// many were taken. Never blocks or allocates: meant for device callbacks
    /// (`f` converts and writes into the device buffer).
    #[inline]
    pub fn pop_each(&mut self, max: usize, mut f: impl FnMut(f32)) -> usize {
        let r = &*self.ring;
        let tail = r.tail.0.load(Ordering::Relaxed);
        // Acquire: pairs with the producer's release of `head`, so the slots
        // below it hold the published samples.
        let head = r.head.0.load(Ordering::Acquire);
        let n = head.wrapping_sub(tail).min(max);
        for i in 0..n {
            f(f32::from_bits(
                r.slots[tail.wrapping_add(i) & r.mask].load(Ordering::Relaxed),
            ));
        }
        // Release: our reads of these slots happen before the producer may
        // reuse them.
        r.tail.0.store(tail.wrapping_add(n), Ordering::Release);
        n
    }

    /// Copies up to `out.len()` samples into `out`; returns how many.
    pub fn pop_into(&mut self, out: &mut [f32]) -> usize {
        let mut i = 0;
        self.pop_each(out.len(), |s| {
            out[i] = s;
            i += 1;
        })
    }

    /// Samples available to read.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.ring.slots.len()
    }
}

impl Ring {
    fn len(&self) -> usize {
        // Tail before head: both only grow, so the difference never
        // underflows; if the consumer moved between the two loads it can
        // overstate, hence the clamp.
        let tail = self.tail.0.load(Ordering::Acquire);
        let head = self.head.0.load(Ordering::Acquire);
        head.wrapping_sub(tail).min(self.slots.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_rounds_up_to_power_of_two() {
        assert_eq!(channel(0).0.capacity(), 2);
        assert_eq!(channel(5).0.capacity(), 8);
        assert_eq!(channel(1024).1.capacity(), 1024);
    }

    #[test]
    fn push_reports_what_fit_and_pop_what_was_there() {
        let (mut p, mut c) = channel(8);
        let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
        assert_eq!(p.push(&x), 8);
        assert_eq!(p.push(&x[8..]), 0);
        assert_eq!(p.free(), 0);
        let mut out = [0.0; 5];
        assert_eq!(c.pop_into(&mut out), 5);
        assert_eq!(out, [0.0, 1.0, 2.0, 3.0, 4.0]);
        assert_eq!(p.push(&x[8..]), 4);
        let mut out = [0.0; 16];
        assert_eq!(c.pop_into(&mut out), 7);
        assert_eq!(&out[..7], &[5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]);
        assert_eq!(c.pop_into(&mut out), 0);
        assert!(c.is_empty());
        assert_eq!(p.consumed(), 12);
    }

    #[test]
    fn wraps_around_many_times_in_order() {
        let (mut p, mut c) = channel(8);
        let mut next_in = 0u32;
        let mut next_out = 0u32;
        // Sizes 1..=7 against a capacity of 8 cross the wrap point at every
        // offset.
        for round in 0..1000 {
            let k = 1 + round % 7;
            let chunk: Vec<f32> = (0..k).map(|i| (next_in + i as u32) as f32).collect();
            let n = p.push(&chunk);
            next_in += n as u32;
            let mut out = [0.0; 8];
            let m = c.pop_into(&mut out[..1 + (round * 3) % 8]);
            for &s in &out[..m] {
                assert_eq!(s, next_out as f32);
                next_out += 1;
            }
        }
        assert!(next_out > 2000, "the ring moved samples: {next_out}");
    }

    #[test]
    fn preserves_exact_bits() {
        let (mut p, mut c) = channel(4);
        let x = [f32::MIN_POSITIVE, -0.0, f32::INFINITY, 1.0 / 3.0];
        assert_eq!(p.push(&x), 4);
        let mut out = [0.0; 4];
        c.pop_into(&mut out);
        for (a, b) in x.iter().zip(&out) {
            assert_eq!(a.to_bits(), b.to_bits());
        }
    }
}
