//! Whether a connection is alive and in use: the server's pings, the pong
//! deadline, and the idle timeout. Pure (no socket, no clock of its own):
//! the connection reports what it heard and asks what is due.
//!
//! - Every `ping_every` the server sends a WebSocket ping (unless one is
//!   already out); a peer that sends nothing at all — no pong, no message —
//!   for `pong_within` after a ping is gone (a half-open TCP connection, a
//!   suspended laptop) and is closed.
//! - A session with no open context that receives no client message (text
//!   or binary; pongs do not count, a browser sends those by itself) for
//!   `idle_after` is closed, so parked sockets give their slot back.

use std::time::Duration;

use tokio::time::Instant;

/// The timeouts (from `ServeConfig`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timeouts {
    pub ping_every: Duration,
    pub pong_within: Duration,
    pub idle_after: Duration,
}

/// What is due now.
#[derive(Debug, PartialEq, Eq)]
pub enum Due {
    Nothing,
    /// Send a ping with this payload.
    Ping(Vec<u8>),
    /// No answer to the last ping in time: close.
    DeadPeer,
    /// Idle past the timeout: close.
    Idle,
}

#[derive(Debug)]
pub struct Liveness {
    t: Timeouts,
    next_ping: Instant,
    /// The ping awaiting an answer: when it went out.
    ping_out: Option<Instant>,
    pings: u64,
    /// When the session became idle (no context, no message since), if it is.
    idle_since: Option<Instant>,
}

impl Liveness {
    pub fn new(t: Timeouts, now: Instant) -> Self {
        Liveness {
            t,
            next_ping: now + t.ping_every,
            ping_out: None,
            pings: 0,
            idle_since: Some(now),
        }
    }

    /// Anything arrived from the peer (a pong, a message, a ping): it is
    /// alive.
    pub fn heard(&mut self, now: Instant) {
        if self.ping_out.take().is_some() {
            self.next_ping = now + self.t.ping_every;
        }
    }

    /// A client message arrived, or contexts are open (`busy`): not idle.
    /// Called after every turn of the connection loop.
    pub fn activity(&mut self, busy: bool, message: bool, now: Instant) {
        if busy || message {
            self.idle_since = if busy { None } else { Some(now) };
        } else if self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
    }

    /// Since when the session has been idle (`None`: in use).
    pub fn idle_since(&self) -> Option<Instant> {
        self.idle_since
    }

    /// The next instant something may be due.
    pub fn next_wake(&self) -> Instant {
        let ping = match self.ping_out {
            Some(sent) => sent + self.t.pong_within,
            None => self.next_ping,
        };
        match self.idle_since {
            Some(i) => ping.min(i + self.t.idle_after),
            None => ping,
        }
    }

    /// What is due at `now`.
    pub fn poll(&mut self, now: Instant) -> Due {
        if let Some(sent) = self.ping_out {
            if now >= sent + self.t.pong_within {
                return Due::DeadPeer;
            }
        }
        if self
            .idle_since
            .is_some_and(|i| now >= i + self.t.idle_after)
        {
            return Due::Idle;
        }
        if self.ping_out.is_none() && now >= self.next_ping {
            self.ping_out = Some(now);
            self.pings += 1;
            return Due::Ping(self.pings.to_be_bytes().to_vec());
        }
        Due::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        ping_every: Duration::from_secs(10),
        pong_within: Duration::from_secs(5),
        idle_after: Duration::from_secs(60),
    };

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn pings_on_schedule_and_a_silent_peer_is_dead() {
        let t0 = Instant::now();
        let mut l = Liveness::new(T, t0);
        l.activity(true, false, t0);
        assert_eq!(l.poll(t0 + s(9)), Due::Nothing);
        assert_eq!(l.next_wake(), t0 + s(10));
        assert!(matches!(l.poll(t0 + s(10)), Due::Ping(_)));
        assert_eq!(l.next_wake(), t0 + s(15), "the pong deadline");
        assert_eq!(l.poll(t0 + s(14)), Due::Nothing, "one ping at a time");
        assert_eq!(l.poll(t0 + s(15)), Due::DeadPeer);
    }

    #[test]
    fn an_answer_resets_the_ping_schedule() {
        let t0 = Instant::now();
        let mut l = Liveness::new(T, t0);
        l.activity(true, false, t0);
        assert!(matches!(l.poll(t0 + s(10)), Due::Ping(_)));
        l.heard(t0 + s(11));
        assert_eq!(l.next_wake(), t0 + s(21));
        assert_eq!(l.poll(t0 + s(16)), Due::Nothing);
    }

    #[test]
    fn idle_counts_from_the_last_message_with_no_context_open() {
        let t0 = Instant::now();
        let mut l = Liveness::new(T, t0);
        // Pongs keep it alive but do not make it busy.
        for k in 1..6 {
            let now = t0 + s(10 * k);
            if let Due::Ping(_) = l.poll(now) {
                l.heard(now);
            }
        }
        assert_eq!(l.poll(t0 + s(60)), Due::Idle);
        let mut l = Liveness::new(T, t0);
        l.activity(false, true, t0 + s(50));
        assert_eq!(l.idle_since(), Some(t0 + s(50)));
        l.heard(t0 + s(50));
        l.activity(true, false, t0 + s(51));
        assert_eq!(l.idle_since(), None, "a context is open");
        l.activity(false, false, t0 + s(200));
        assert_eq!(l.idle_since(), Some(t0 + s(200)), "idle from when it ended");
    }
}
