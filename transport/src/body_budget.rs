//! One process-wide budget for request-body bytes held in memory.
//!
//! Each route caps its own body (`openai`: ~14.3 MiB, uploads: the clip
//! limit), but a cap per request is no cap in all: 200 connections each
//! sending a 14.5 MB speech body and holding its last byte took the process
//! from 94 MB to 3.95 GB (at the default connection cap, ~20 GB). Every
//! body read into memory therefore leases its bytes from this budget as they
//! arrive (the buffer's capacity, so a growing `Vec` is counted at its real
//! size), and gives them back when the request is done with its body. A
//! request that would overdraw it is refused with `503` and `Retry-After`
//! before its next chunk is buffered: the server stays up, and a balancer
//! retries elsewhere.
//!
//! Bytes are counted in KiB (a semaphore's permits are `u32` per
//! acquisition; KiB units keep a 4 GiB lease in range).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default: 256 MiB of request bodies in memory at once, about 18
/// maximal speech bodies (4/3 of the 10 MiB clip limit + 1 MiB each).
pub const DEFAULT_BODY_BUDGET: usize = 256 << 20;

const UNIT: usize = 1024;

fn units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT)
}

/// The budget (cheap to clone: one shared semaphore).
#[derive(Clone, Debug)]
pub struct BodyBudget {
    sem: Arc<Semaphore>,
    total: usize,
}

/// Bytes leased from the budget; returned when dropped.
#[derive(Debug)]
pub struct BodyLease {
    permit: Option<OwnedSemaphorePermit>,
    budget: BodyBudget,
}

/// The budget had too little left for a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exhausted {
    /// The whole budget, in bytes.
    pub total: usize,
}

impl Exhausted {
    /// What the client is told (the status is 503 with `Retry-After`).
    pub fn message(&self) -> String {
        format!(
            "the server is holding its limit of request bodies in memory ({} MiB in all, --max-body-memory-mb); retry shortly",
            self.total >> 20
        )
    }
}

impl BodyBudget {
    pub fn new(total_bytes: usize) -> Self {
        BodyBudget {
            sem: Arc::new(Semaphore::new(units(total_bytes).max(1))),
            total: total_bytes,
        }
    }

    /// Bytes not leased right now.
    pub fn available(&self) -> usize {
        self.sem.available_permits() * UNIT
    }

    /// An empty lease, to grow as a body arrives.
    pub fn lease(&self) -> BodyLease {
        BodyLease {
            permit: None,
            budget: self.clone(),
        }
    }
}

impl BodyLease {
    /// Bytes this lease holds.
    pub fn bytes(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits()) * UNIT
    }

    /// Makes the lease cover at least `bytes` in all, or refuses (the lease
    /// keeps what it had). Never waits: a full budget is a refusal, not a
    /// queue, so a flood cannot park the async workers.
    pub fn cover(&mut self, bytes: usize) -> Result<(), Exhausted> {
        let have = self.permit.as_ref().map_or(0, |p| p.num_permits());
        let want = units(bytes);
        if want <= have {
            return Ok(());
        }
        let more = u32::try_from(want - have).map_err(|_| self.exhausted())?;
        let p = self
            .budget
            .sem
            .clone()
            .try_acquire_many_owned(more)
            .map_err(|_| self.exhausted())?;
        match &mut self.permit {
            Some(held) => held.merge(p),
            None => self.permit = Some(p),
        }
        Ok(())
    }

    fn exhausted(&self) -> Exhausted {
        Exhausted {
            total: self.budget.total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_grow_and_return_their_bytes_when_dropped() {
        let b = BodyBudget::new(10 * UNIT);
        let mut a = b.lease();
        a.cover(1).unwrap();
        assert_eq!(a.bytes(), UNIT);
        a.cover(3 * UNIT + 1).unwrap();
        assert_eq!(a.bytes(), 4 * UNIT);
        // Covering less than is held takes nothing more.
        a.cover(2 * UNIT).unwrap();
        assert_eq!(b.available(), 6 * UNIT);
        let mut c = b.lease();
        assert_eq!(c.cover(7 * UNIT), Err(Exhausted { total: 10 * UNIT }));
        // A refused lease keeps what it had.
        c.cover(6 * UNIT).unwrap();
        assert_eq!(b.available(), 0);
        drop(a);
        assert_eq!(b.available(), 4 * UNIT);
        drop(c);
        assert_eq!(b.available(), 10 * UNIT);
    }

    #[test]
    fn an_absurd_request_is_refused_not_wrapped() {
        let b = BodyBudget::new(UNIT);
        let mut a = b.lease();
        assert!(a.cover(usize::MAX).is_err());
        assert_eq!(a.bytes(), 0);
        assert_eq!(b.available(), UNIT);
    }
}
