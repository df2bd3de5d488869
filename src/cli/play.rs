//! Live playback for `speak --play` and `client --play`: flags →
//! [`tts_audio::Player`], plus the end-of-stream report.
//! The player does the resampling (model or session rate → device rate), the
//! queueing and the underrun accounting; this file only wires it up.

use std::time::Duration;

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
    /// Audio to queue before the device starts (--play): 0 starts with the
    /// first chunk; more rides out synthesis slower than real time at the
    /// cost of that much extra latency.
    #[arg(long, value_name = "MS", default_value_t = 0, requires = "play")]
    pub prebuffer_ms: u64,
}

/// How long the device may take to play what is still queued when the
/// stream ends: the ring holds at most `queue` (4 s, or the prebuffer plus
/// 1 s) of audio, plus a generous margin for a slow start; the player
/// separately fails after `stall_timeout` (2 s) without progress.
fn drain_timeout(opts: &PlaybackOptions) -> Duration {
    opts.queue + Duration::from_secs(10)
}

/// An open device being fed chunk by chunk.
pub struct Playback {
    player: Player,
    timeout: Duration,
}

impl Playback {
    /// Opens the device (`None` when `--play` was not given). `source_rate`
    /// is the rate of the samples passed to [`write`](Self::write). Failures
    /// name the device and the reason (on ALSA an absent card only shows
    /// here, when the stream is opened).
    pub fn open(args: &PlayArgs, source_rate: u32) -> Result<Option<Playback>> {
        if !args.play {
            return Ok(None);
        }
        let prebuffer = Duration::from_millis(args.prebuffer_ms);
        let defaults = PlaybackOptions::default();
        let opts = PlaybackOptions {
            device: args.device.clone(),
            sample_rate: args.device_rate,
            prebuffer,
            // The ring must hold the prebuffer, or the first write would
            // wait for a device that has not started.
            queue: defaults.queue.max(prebuffer + Duration::from_secs(1)),
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
        }))
    }

    /// Queues samples (waits while the device is more than the queue
    /// behind: synthesis never runs unboundedly ahead of playback).
    pub fn write(&mut self, samples: &[f32]) -> Result<()> {
        let device = self.player.device().to_string();
        self.player
            .write(samples)
            .with_context(|| format!("playing on {device:?}"))
    }

    /// Ends the stream, waits (bounded) until the device has played
    /// everything, and reports frames played and underruns on stderr.
    pub fn finish(mut self) -> Result<PlaybackStats> {
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
        Ok(stats)
    }
}
