//! When a chunk leaves early: the listener's deadline against the
//! schedule.
//!
//! The [`crate::ChunkSchedule`] grows chunks a frame or so at a time so the
//! decoder's per-call cost is paid over more audio. On a host where a
//! frame costs close to its 80 ms of audio, a chunk of the schedule's size
//! can take longer to make than the listener has left to play: a stream
//! with a 200 ms prebuffer ran dry whenever a frame cost ~63 ms or more,
//! most often at the end of the ramp (the 6 to 8 frame step;
//! docs/benchmarks.md, "The listener's deadline").
//!
//! [`Pace`] keeps, per request, what the decision needs: when its first
//! chunk left, how much audio has left since, and two running estimates
//! (the time between its frames reaching the decoder, the decoder's time
//! per frame). When a frame arrives, [`Pace::cut`] says whether waiting for
//! one more would bring the chunk to the listener after its buffer ran
//! dry: playback from the first chunk plus the prebuffer, in real time, as
//! the continuity figures count it (`METRICS.md`). Then the pending frames
//! leave now, short of the schedule's size; the schedule still caps a
//! chunk. A stream whose frames come slower than they play is never cut:
//! its listener runs dry whatever the chunks, and one-frame chunks only
//! add decode calls, which make it slower still (on a host at 2.5x real
//! time, ~20 ms more vocoder time a frame: docs/benchmarks.md, "The
//! listener's deadline"). Only a vocoder whose samples are the same
//! bits however a stream is cut is paced (below f32:
//! `Code2Wav::chunking_exact`), so the audio never depends on the timing,
//! only when it arrives.
//!
//! Pure: every call takes its time, so tests drive it with their own.

use std::time::{Duration, Instant};

/// Weight of the newest sample in the running estimates.
const ALPHA: f64 = 0.3;
/// Headroom on the predicted wait, as a share of a frame interval (the
/// estimates are averages; the next frame can come later).
const MARGIN: f64 = 0.25;

/// One request's pace: see the module doc.
#[derive(Clone, Debug, Default)]
pub struct Pace {
    /// When the first chunk left.
    first_out: Option<Instant>,
    /// Frames in the chunks that have left.
    out_frames: u64,
    /// When the last frame reached the decoder.
    last_frame: Option<Instant>,
    /// Seconds between frames (running mean).
    frame_s: Option<f64>,
    /// Decoder wall seconds per frame of its own chunks (running mean).
    decode_s: Option<f64>,
}

fn mix(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |o| o + ALPHA * (new - o))
}

impl Pace {
    /// A frame was produced at `at` (the LM stages' stamp).
    pub fn frame(&mut self, at: Instant) {
        if let Some(last) = self.last_frame {
            let gap = at.saturating_duration_since(last).as_secs_f64();
            self.frame_s = Some(mix(self.frame_s, gap));
        }
        self.last_frame = Some(at);
    }

    /// A chunk of `frames` left at `at`, after a decode step of `decode`
    /// (a batched step's whole wall time: the chunk waited for all of it).
    pub fn chunk(&mut self, at: Instant, frames: usize, decode: Duration) {
        if frames == 0 {
            return;
        }
        self.first_out.get_or_insert(at);
        self.out_frames += frames as u64;
        let per = decode.as_secs_f64() / frames as f64;
        self.decode_s = Some(mix(self.decode_s, per));
    }

    /// With `pending` frames waiting at `now`, waiting for one more would
    /// bring them to a listener (playing from the first chunk plus
    /// `prebuffer`, `frame` of audio per frame) after its buffer ran dry.
    /// False until a chunk has left and two frames were seen (nothing to
    /// estimate from: the schedule decides), and while frames come at
    /// least `frame` apart (slower than real time: cutting cannot keep the
    /// listener playing, only slow the stream down).
    pub fn cut(&self, now: Instant, pending: usize, prebuffer: Duration, frame: Duration) -> bool {
        let (Some(first), Some(frame_s), Some(decode_s)) =
            (self.first_out, self.frame_s, self.decode_s)
        else {
            return false;
        };
        if pending == 0 || frame_s >= frame.as_secs_f64() {
            return false;
        }
        let played_out = first + prebuffer + frame.mul_f64(self.out_frames as f64);
        let left = played_out.saturating_duration_since(now).as_secs_f64();
        let wait = frame_s * (1.0 + MARGIN) + decode_s * (pending + 1) as f64;
        wait > left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: Duration = Duration::from_millis(80);
    const P: Duration = Duration::from_millis(200);

    fn ms(t: Instant, ms: u64) -> Instant {
        t + Duration::from_millis(ms)
    }

    #[test]
    fn nothing_is_cut_before_there_is_anything_to_estimate_from() {
        let t = Instant::now();
        let mut p = Pace::default();
        assert!(!p.cut(ms(t, 10_000), 3, P, FRAME), "no chunk, no frames");
        p.frame(t);
        p.chunk(ms(t, 20), 1, Duration::from_millis(20));
        assert!(!p.cut(ms(t, 10_000), 3, P, FRAME), "one frame: no interval");
        p.frame(ms(t, 60));
        assert!(p.cut(ms(t, 10_000), 1, P, FRAME), "long past the deadline");
        assert!(!p.cut(ms(t, 10_000), 0, P, FRAME), "nothing pending");
    }

    /// The end of the ramp on a slow host: 6 frames out, 63 ms a frame,
    /// 10 ms of decoder a frame. The listener plays from the first chunk
    /// plus 200 ms; waiting for the 8th frame would miss it, for the 7th
    /// not yet.
    #[test]
    fn a_chunk_leaves_when_one_more_frame_would_be_late() {
        let t = Instant::now();
        let mut p = Pace::default();
        for i in 0..8 {
            p.frame(ms(t, 63 * i));
        }
        // Chunk 0 (1 frame) left at 0 ms; 5 more frames left since: the
        // listener has 6 x 80 + 200 = 680 ms from t.
        p.chunk(t, 1, Duration::from_millis(10));
        p.chunk(ms(t, 1), 5, Duration::from_millis(50));
        // At 500 ms with 5 pending: a wait of 63 x 1.25 + 10 x 6 = 139 ms,
        // 180 ms left: wait.
        assert!(!p.cut(ms(t, 500), 5, P, FRAME));
        // At 560 ms with 6 pending: 79 + 70 = 149 ms, 120 left: leave now.
        assert!(p.cut(ms(t, 560), 6, P, FRAME));
        // A longer prebuffer leaves room to wait.
        assert!(!p.cut(ms(t, 560), 6, Duration::from_millis(400), FRAME));
    }

    /// Frames 100 ms apart against 80 ms of audio: the listener is dry
    /// whatever the chunks, so nothing is cut (one-frame chunks would only
    /// cost decode calls); once frames come faster than they play again,
    /// the deadline decides as before.
    #[test]
    fn a_stream_slower_than_real_time_is_never_cut() {
        let t = Instant::now();
        let mut p = Pace::default();
        for i in 0..4 {
            p.frame(ms(t, 100 * i));
        }
        p.chunk(t, 1, Duration::from_millis(10));
        assert!(!p.cut(ms(t, 10_000), 3, P, FRAME), "long past the deadline");
        // Faster frames pull the running interval under 80 ms.
        for i in 0..6 {
            p.frame(ms(t, 300 + 30 * (i + 1)));
        }
        assert!(p.frame_s.unwrap() < 0.08);
        assert!(p.cut(ms(t, 10_000), 3, P, FRAME));
    }

    #[test]
    fn the_estimates_follow_the_stream() {
        let t = Instant::now();
        let mut p = Pace::default();
        p.frame(t);
        p.frame(ms(t, 100));
        assert_eq!(p.frame_s, Some(0.1));
        p.frame(ms(t, 150));
        // 0.1 + 0.3 x (0.05 - 0.1)
        assert!((p.frame_s.unwrap() - 0.085).abs() < 1e-12);
        p.chunk(t, 4, Duration::from_millis(40));
        assert_eq!(p.decode_s, Some(0.01));
        p.chunk(t, 0, Duration::from_millis(400));
        assert_eq!(p.decode_s, Some(0.01), "an empty chunk says nothing");
        assert_eq!(p.out_frames, 4);
    }
}
