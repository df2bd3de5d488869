//! The playout continuity simulation `METRICS.md` defines: whether audio
//! arriving in chunks plays without gaps after a given prebuffer, and the
//! smallest prebuffer that would have sufficed.
//!
//! Pure functions of arrival times and chunk durations (no clock, no
//! device), so the runtime's per-request figures and any other measurement
//! point (a socket, a player) compute them the same way.

/// Playback simulation result at one prebuffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Continuity {
    pub prebuffer_ms: f64,
    pub underruns: u32,
    pub stall_ms: f64,
    pub continuity_ok: bool,
}

/// Simulates playback starting `prebuffer_ms` after the first chunk and
/// playing in real time. `arrivals_ms[i]` is chunk i's arrival time (any
/// origin; only differences from chunk 0 matter) and `durations_ms[i]` its
/// audio length. Whenever the player reaches the end of received audio
/// before the stream is over it stalls until the next chunk: each stall is
/// one underrun. The stream is over after the last chunk, so running out
/// there is the end, not an underrun. `None` without chunks.
pub fn continuity(
    arrivals_ms: &[f64],
    durations_ms: &[f64],
    prebuffer_ms: f64,
) -> Option<Continuity> {
    assert_eq!(arrivals_ms.len(), durations_ms.len());
    let t0 = *arrivals_ms.first()?;
    let mut play_end = prebuffer_ms + durations_ms[0];
    let (mut underruns, mut stall_ms) = (0u32, 0f64);
    for (&a, &d) in arrivals_ms.iter().zip(durations_ms).skip(1) {
        let a = a - t0;
        if a > play_end {
            underruns += 1;
            stall_ms += a - play_end;
            play_end = a;
        }
        play_end += d;
    }
    Some(Continuity {
        prebuffer_ms,
        underruns,
        stall_ms,
        continuity_ok: underruns == 0,
    })
}

/// `max_i (t_i - t_0 - A_i)` floored at 0, where `A_i` is the audio received
/// before chunk i: the smallest prebuffer with no underrun.
pub fn required_prebuffer_ms(arrivals_ms: &[f64], durations_ms: &[f64]) -> Option<f64> {
    let t0 = *arrivals_ms.first()?;
    let mut before = 0.0;
    let mut worst = 0f64;
    for (&a, &d) in arrivals_ms.iter().zip(durations_ms) {
        worst = worst.max(a - t0 - before);
        before += d;
    }
    Some(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuity_counts_stalls_after_the_prebuffer() {
        // Three 80 ms chunks arriving at 0, 100, 300 ms.
        let (a, d) = ([0.0, 100.0, 300.0], [80.0, 80.0, 80.0]);
        // P = 0: plays 0-80, waits to 100 (stall 20), plays to 180, waits to 300 (stall 120).
        let c = continuity(&a, &d, 0.0).unwrap();
        assert_eq!(
            (c.underruns, c.stall_ms, c.continuity_ok),
            (2, 140.0, false)
        );
        // P = 50: plays 50-130, chunk 1 arrived at 100: 130-210, waits to 300 (stall 90).
        let c = continuity(&a, &d, 50.0).unwrap();
        assert_eq!((c.underruns, c.stall_ms), (1, 90.0));
        // The required prebuffer is max(0, 100-80, 300-160) = 140, and it suffices.
        let req = required_prebuffer_ms(&a, &d).unwrap();
        assert_eq!(req, 140.0);
        assert_eq!(continuity(&a, &d, req).unwrap().underruns, 0);
        assert_eq!(continuity(&a, &d, req - 1.0).unwrap().underruns, 1);
    }

    #[test]
    fn continuity_is_relative_to_the_first_chunk_and_ends_with_the_stream() {
        // Faster than real time after a late first chunk: no underrun at P = 0.
        let (a, d) = ([500.0, 520.0, 560.0], [80.0, 320.0, 640.0]);
        let c = continuity(&a, &d, 0.0).unwrap();
        assert_eq!(c.underruns, 0);
        assert_eq!(required_prebuffer_ms(&a, &d), Some(0.0));
        // A single chunk never underruns; no chunks: missing.
        assert_eq!(continuity(&[10.0], &[80.0], 0.0).unwrap().underruns, 0);
        assert_eq!(continuity(&[], &[], 0.0), None);
        assert_eq!(required_prebuffer_ms(&[], &[]), None);
    }
}
