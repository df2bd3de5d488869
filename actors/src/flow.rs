//! Per-request flow control between the router and the consumer.
//!
//! The router counts the samples it accepts for a request (`produced`); the
//! consumer counts what it has acknowledged (`consumed`: explicit `ack(seq)`
//! or, in auto-ack mode, every chunk it receives). The difference is the
//! request's undelivered/unacknowledged audio. The talker reads it before
//! each step and pauses only that request while it is above the soft bound;
//! the router fails the request past the hard bound. Lock-free on the read
//! side: two relaxed atomics per check.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Debug)]
pub struct FlowGate {
    produced: AtomicU64,
    consumed: AtomicU64,
    soft_limit: u64,
    /// Cumulative end sample of each chunk, by seq (for `ack(seq)`).
    ends: Mutex<Vec<u64>>,
}

impl FlowGate {
    pub fn new(soft_limit_samples: u64) -> Self {
        FlowGate {
            produced: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            soft_limit: soft_limit_samples,
            ends: Mutex::new(Vec::new()),
        }
    }

    /// Router: a chunk of `n` samples with sequence number `seq` was accepted.
    pub fn produced(&self, seq: u64, n: u64) {
        let end = self.produced.fetch_add(n, Ordering::AcqRel) + n;
        let mut ends = self.ends.lock().unwrap_or_else(|e| e.into_inner());
        debug_assert_eq!(ends.len() as u64, seq);
        ends.push(end);
    }

    /// Consumer: everything up to and including chunk `seq` is acknowledged.
    /// Acks may arrive out of order or twice; only the highest counts.
    pub fn ack(&self, seq: u64) {
        let end = {
            let ends = self.ends.lock().unwrap_or_else(|e| e.into_inner());
            match ends.get(seq as usize) {
                Some(&e) => e,
                None => return,
            }
        };
        self.consumed.fetch_max(end, Ordering::AcqRel);
    }

    /// Samples produced but not yet acknowledged.
    pub fn outstanding(&self) -> u64 {
        self.produced
            .load(Ordering::Acquire)
            .saturating_sub(self.consumed.load(Ordering::Acquire))
    }

    pub fn produced_samples(&self) -> u64 {
        self.produced.load(Ordering::Acquire)
    }

    /// The talker should not generate more frames for this request now.
    pub fn should_pause(&self) -> bool {
        self.outstanding() >= self.soft_limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outstanding_follows_produce_and_ack() {
        let g = FlowGate::new(100);
        g.produced(0, 60);
        assert!(!g.should_pause());
        g.produced(1, 60);
        assert_eq!(g.outstanding(), 120);
        assert!(g.should_pause());
        g.ack(0);
        assert_eq!(g.outstanding(), 60);
        g.ack(0); // duplicate
        g.ack(7); // unknown seq: ignored
        assert_eq!(g.outstanding(), 60);
        g.ack(1);
        assert_eq!(g.outstanding(), 0);
        g.ack(0); // late, lower ack does not move consumed back
        assert_eq!(g.outstanding(), 0);
    }
}
