//! Live playback for `speak --play` and `client --play`: flags →
//! [`tts_audio::Player`], plus the end-of-stream report.
//! The player does the resampling (model or session rate → device rate), the
//! queueing and the underrun accounting; this file only wires it up.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use tts_audio::{PlaybackOptions, PlaybackStats, Player};

/// Playback flags shared by `speak` and `client`.
#[derive(Args, Clone, Debug, Default)]
pub struct PlayArgs {
    /// Play the audio on the local output device as it is synthesized
    /// (starts with the first chunk).
    #[arg(long)]
    pub play: bool,
    /// Output device for --play: an id or name from `tts-rt devices` (exact
    /// id, exact name, or a unique part of a name); default: the system's
    /// default output.
    #[arg(long, value_name = "NAME", requires = "play")]
    pub device: Option<String>,
    /// Device sample rate for --play (8000-48000 Hz); default: the device's
    /// own rate when usable. Audio is resampled from the model's rate.
    #[arg(long, value_name = "HZ", requires = "play")]
    pub device_rate: Option<u32>,
    /// Audio to queue before the device starts (--play). Default: measured —
    /// the first chunk waits for the second, and if synthesis turns out
    /// slower than real time, enough audio is buffered to play the expected
    /// length without a gap (said on stderr). 0 starts with the first chunk
    /// whatever the speed; more rides out slow synthesis at the cost of that
    /// much extra latency.
    #[arg(long, value_name = "MS", requires = "play")]
    pub prebuffer_ms: Option<u64>,
}

/// Longest prebuffer the measurement picks (the ring holds it plus 1 s).
const MAX_AUTO_PREBUFFER: Duration = Duration::from_secs(30);

/// Synthesis at least this many times real time needs no prebuffer: chunk
/// jitter is covered by the ring and the device's own buffer.
const FAST_ENOUGH: f64 = 1.1;

/// How long the device may take to play what is still queued when the
/// stream ends: the ring holds at most `queue` (4 s, or the prebuffer plus
/// 1 s) of audio, plus a generous margin for a slow start; the player
/// separately fails after `stall_timeout` (2 s) without progress.
fn drain_timeout(opts: &PlaybackOptions) -> Duration {
    opts.queue + Duration::from_secs(10)
}

/// Spoken length of `text`, roughly: ~14 characters a second for
/// alphabetic scripts, ~4 for CJK ideographs and kana (one syllable each).
/// Only used to size a measured prebuffer, so a rough figure is enough.
pub fn expected_speech(text: &str) -> Duration {
    let s: f64 = text
        .chars()
        .map(|c| {
            if (c as u32) >= 0x2E80 {
                0.25
            } else {
                1.0 / 14.0
            }
        })
        .sum();
    Duration::from_secs_f64(s.max(1.0))
}

/// The prebuffer that lets audio of length `total` produced at `speed` ×
/// real time play without a gap: starting once P is buffered, playback
/// reaches the end at P/speed + total while production does at
/// total/speed, so P ≥ total × (1 − speed); plus 20 % for the speed's
/// wobble; none when fast enough.
fn needed_prebuffer(total: Duration, speed: f64) -> Duration {
    if !(speed.is_finite() && speed > 0.0) || speed >= FAST_ENOUGH {
        return Duration::ZERO;
    }
    let s = total.as_secs_f64() * (1.0 - speed.min(1.0)) * 1.2;
    Duration::from_secs_f64(s).min(MAX_AUTO_PREBUFFER)
}

/// The measured prebuffer while it is being decided: audio held back from
/// the device.
struct Auto {
    held: Vec<f32>,
    /// When the first (non-empty) chunk arrived, and its length.
    first: Option<(Instant, usize)>,
    /// Samples to hold before releasing (decided after the second chunk).
    target: Option<usize>,
    expected: Duration,
}

/// An open device being fed chunk by chunk.
pub struct Playback {
    player: Player,
    timeout: Duration,
    source_rate: u32,
    auto: Option<Auto>,
    /// When the first samples reached the device.
    started: Option<Instant>,
}

impl Playback {
    /// Opens the device (`None` when `--play` was not given). `source_rate`
    /// is the rate of the samples passed to [`write`](Self::write);
    /// `expected` the rough length of the audio to come (sizes a measured
    /// prebuffer; see [`expected_speech`]). Failures name the device and
    /// the reason (on ALSA an absent card only shows here, when the stream
    /// is opened).
    pub fn open(args: &PlayArgs, source_rate: u32, expected: Duration) -> Result<Option<Playback>> {
        if !args.play {
            return Ok(None);
        }
        let fixed = args.prebuffer_ms.map(Duration::from_millis);
        let prebuffer = fixed.unwrap_or(Duration::ZERO);
        let defaults = PlaybackOptions::default();
        let opts = PlaybackOptions {
            device: args.device.clone(),
            sample_rate: args.device_rate,
            prebuffer,
            // The ring must hold the prebuffer, or the first write would
            // wait for a device that has not started; a measured one is
            // released into it at once.
            queue: defaults
                .queue
                .max(fixed.unwrap_or(MAX_AUTO_PREBUFFER) + Duration::from_secs(1)),
            ..defaults
        };
        let which = match &args.device {
            Some(d) => format!("audio device {d:?}"),
            None => "the default audio device".to_string(),
        };
        let player = Player::open(&opts, source_rate)
            .with_context(|| format!("--play: cannot open {which}"))?;
        eprintln!(
            "playing on {:?} at {} Hz, {} ch, {}{}",
            player.device(),
            player.device_rate(),
            player.channels(),
            format!("{:?}", player.format()).to_lowercase(),
            if player.device_rate() == source_rate {
                String::new()
            } else {
                format!(" (resampled from {source_rate} Hz)")
            }
        );
        Ok(Some(Playback {
            player,
            timeout: drain_timeout(&opts),
            source_rate,
            auto: fixed.is_none().then(|| Auto {
                held: Vec::new(),
                first: None,
                target: None,
                expected,
            }),
            started: None,
        }))
    }

    /// Queues samples (waits while the device is more than the queue
    /// behind: synthesis never runs unboundedly ahead of playback). With a
    /// measured prebuffer, holds them until it is decided and reached.
    pub fn write(&mut self, samples: &[f32]) -> Result<()> {
        let rate = self.source_rate as f64;
        let Some(auto) = &mut self.auto else {
            return self.send(samples);
        };
        auto.held.extend_from_slice(samples);
        if samples.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        let Some((t_first, first_len)) = auto.first else {
            auto.first = Some((now, samples.len()));
            return Ok(());
        };
        if auto.target.is_none() {
            // Audio produced since the first chunk over the time it took.
            let produced = (auto.held.len() - first_len) as f64 / rate;
            let speed = produced / now.duration_since(t_first).as_secs_f64().max(1e-6);
            let need = needed_prebuffer(auto.expected, speed);
            if !need.is_zero() {
                eprintln!(
                    "synthesis runs at {speed:.2}x real time here: buffering {:.1} s before playing so ~{:.0} s of audio plays without gaps (--prebuffer-ms sets it; 0 starts at once)",
                    need.as_secs_f64(),
                    auto.expected.as_secs_f64()
                );
            }
            auto.target = Some((need.as_secs_f64() * rate) as usize);
        }
        if auto.held.len() >= auto.target.unwrap_or(0) {
            let held = std::mem::take(&mut auto.held);
            self.auto = None;
            return self.send(&held);
        }
        Ok(())
    }

    fn send(&mut self, samples: &[f32]) -> Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        self.started.get_or_insert_with(Instant::now);
        let device = self.player.device().to_string();
        self.player
            .write(samples)
            .with_context(|| format!("playing on {device:?}"))
    }

    /// Ends the stream, waits (bounded) until the device has played
    /// everything, and reports frames played and underruns on stderr.
    pub fn finish(mut self) -> Result<PlaybackStats> {
        if let Some(auto) = self.auto.take() {
            self.send(&auto.held)?;
        }
        let device = self.player.device().to_string();
        let stats = self
            .player
            .wait_drained(self.timeout)
            .with_context(|| format!("waiting for {device:?} to play the rest"))?;
        let rate = self.player.device_rate();
        eprintln!(
            "played {} frames ({:.2} s at {rate} Hz) on {device:?}: {} underruns ({} frames of silence inserted), {} device xruns",
            stats.samples_played,
            stats.samples_played as f64 / rate as f64,
            stats.underruns,
            stats.underrun_samples,
            stats.device_xruns,
        );
        if let Some(t) = self.started {
            if let Some(note) = unpaced_note(&stats, rate, t.elapsed()) {
                eprintln!("{note}");
            }
        }
        Ok(stats)
    }
}

/// A device that consumed far more audio (played plus inserted silence)
/// than the wall time allowed is not paced in real time (ALSA `null`, a
/// `file` PCM over one): it starves between every chunk, so its underrun
/// count says nothing about the synthesis. Said instead of letting
/// millions of underruns alarm anyone.
fn unpaced_note(stats: &PlaybackStats, rate: u32, wall: Duration) -> Option<String> {
    let consumed = (stats.samples_played + stats.underrun_samples) as f64 / rate as f64;
    let wall = wall.as_secs_f64();
    (consumed > 2.0 * wall + 1.0).then(|| {
        format!(
            "note: the device consumed {consumed:.1} s of audio in {wall:.1} s: it is not paced in real time (a null or file device?), so its underrun count is not meaningful"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_synthesis_needs_no_prebuffer_and_slow_needs_the_gap_it_would_leave() {
        let ten = Duration::from_secs(10);
        assert_eq!(needed_prebuffer(ten, 3.0), Duration::ZERO);
        assert_eq!(needed_prebuffer(ten, FAST_ENOUGH), Duration::ZERO);
        // Half real time: half the audio is missing when playback would
        // reach it, plus the margin.
        let p = needed_prebuffer(ten, 0.5).as_secs_f64();
        assert!((p - 6.0).abs() < 1e-9, "{p}");
        assert_eq!(
            needed_prebuffer(Duration::from_secs(600), 0.1),
            MAX_AUTO_PREBUFFER
        );
        assert_eq!(needed_prebuffer(ten, f64::NAN), Duration::ZERO);
    }

    #[test]
    fn expected_speech_counts_cjk_slower_than_latin() {
        let latin = expected_speech(&"a".repeat(140)).as_secs_f64();
        assert!((latin - 10.0).abs() < 1e-9, "{latin}");
        let cjk = expected_speech(&"天".repeat(40)).as_secs_f64();
        assert!((cjk - 10.0).abs() < 1e-9, "{cjk}");
        assert_eq!(expected_speech("hi"), Duration::from_secs(1));
    }

    #[test]
    fn underrun_counts_into_an_unpaced_null_device_are_called_meaningless() {
        let stats = PlaybackStats {
            samples_played: 48_000,
            underruns: 6_978_373,
            underrun_samples: 48_000 * 600,
            ..PlaybackStats::default()
        };
        let note = unpaced_note(&stats, 48_000, Duration::from_secs(3)).unwrap();
        assert!(note.contains("not paced in real time"), "{note}");
        // A real device: 3 s of audio (with 0.2 s of gaps) in 3.3 s.
        let real = PlaybackStats {
            samples_played: 48_000 * 3,
            underruns: 2,
            underrun_samples: 9_600,
            ..PlaybackStats::default()
        };
        assert!(unpaced_note(&real, 48_000, Duration::from_millis(3300)).is_none());
    }
}
