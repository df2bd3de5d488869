//! Live playback through cpal.
//!
//! ```text
//!  synthesis thread                               device thread (cpal)
//!  Player::write(native-rate samples)
//!    └ StreamResampler::step ─► ring::Producer ══► ring::Consumer ─► callback:
//!      (allocates, may wait: backpressure)           copy + convert + duplicate
//!                                                    to N channels, silence on
//!                                                    underrun, count in atomics
//! ```
//!
//! The device callback (`callback::fill`) never locks, allocates, logs or
//! blocks: it reads the preallocated ring, writes the device buffer and bumps
//! atomic counters. Everything that may wait or fail — resampling,
//! backpressure, stall detection, reporting device errors — happens on the
//! producer side.
//!
//! Playback starts as soon as the ring holds `prebuffer` samples (default:
//! the first chunk written) or the stream is finished, whichever comes first.
//! An *underrun* is a callback that found fewer samples than the device asked
//! for after playback started and before the stream was finished; the gap is
//! filled with silence and counted in [`PlaybackStats`].
//!
//! # Layout
//! - this file: the [`Player`] (the producer side) and [`PlaybackStats`]; the
//!   only file that imports the others.
//! - `format`: what to open and how, [`DeviceFormat`] and [`PlaybackOptions`];
//!   imported by `devices` and `negotiate`, importing neither.
//! - `callback`: the realtime side, the device callback, the atomics it
//!   shares with the producer and the [`DeviceSample`] conversions.
//! - `devices`: [`list_output_devices`], finding the device `--device`
//!   names, open errors.
//! - `negotiate`: choosing a (rate, channels, format) the device supports.

mod callback;
mod devices;
mod format;
mod negotiate;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cpal::traits::{DeviceTrait, StreamTrait};
use cpal::{StreamConfig, SupportedStreamConfigRange};

use self::callback::{build, error_text, Shared};
use self::devices::{find_device, open_error};
use self::negotiate::{describe_request, negotiate};
use crate::resample::StreamResampler;
use crate::ring::{self, Producer};
use crate::AudioError;

pub use self::callback::DeviceSample;
pub use self::devices::{list_output_devices, DeviceInfo};
pub use self::format::{DeviceFormat, PlaybackOptions};

/// Counters as seen by the producer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlaybackStats {
    /// Source-rate samples written by the caller.
    pub samples_written: u64,
    /// Device-rate mono samples handed to the device (each copied to every
    /// channel).
    pub samples_played: u64,
    /// Callbacks that ran short after playback started (device starved).
    pub underruns: u64,
    /// Device-rate samples of silence inserted by those underruns.
    pub underrun_samples: u64,
    /// Underruns/overruns the device itself reported (xruns).
    pub device_xruns: u64,
    /// Device callbacks so far.
    pub callbacks: u64,
}

/// A playing output stream fed from the calling (synthesis) thread.
///
/// ```no_run
/// # fn main() -> Result<(), tts_audio::AudioError> {
/// use tts_audio::{PlaybackOptions, Player};
/// let native_rate = 24_000; // from the model's config, never a literal
/// let mut player = Player::open(&PlaybackOptions::default(), native_rate)?;
/// # let chunks: Vec<Vec<f32>> = vec![];
/// for chunk in chunks {
///     player.write(&chunk)?; // resamples, queues, waits if far ahead
/// }
/// let stats = player.wait_drained(std::time::Duration::from_secs(30))?;
/// eprintln!("{} underruns", stats.underruns);
/// # Ok(()) }
/// ```
pub struct Player {
    // Dropping the stream stops the device; declared first so it goes first.
    _stream: cpal::Stream,
    shared: Arc<Shared>,
    producer: Producer,
    resampler: StreamResampler,
    scratch: Vec<f32>,
    device: String,
    rate: u32,
    channels: u16,
    format: DeviceFormat,
    device_buffer_frames: Option<u32>,
    stall_timeout: Duration,
    written: u64,
}

impl Player {
    /// Opens the device, negotiates its configuration and starts the stream
    /// (silent until the first chunk or the prebuffer arrives).
    /// `source_rate` is the rate of the samples given to [`write`](Self::write).
    pub fn open(opts: &PlaybackOptions, source_rate: u32) -> Result<Player, AudioError> {
        let host = devices::host();
        let (device, label) = find_device(&host, opts.device.as_deref())?;
        // On ALSA this opens the PCM: an absent card shows up here.
        let ranges: Vec<SupportedStreamConfigRange> = device
            .supported_output_configs()
            .map_err(|e| open_error(opts.device.as_deref(), &label, e))?
            .collect();
        let default = device
            .default_output_config()
            .ok()
            .map(|c| (c.sample_rate(), c.channels()));
        let (rate, channels, format) =
            negotiate(&ranges, default, opts, source_rate).ok_or_else(|| {
                AudioError::UnsupportedDevice {
                    device: label.clone(),
                    detail: describe_request(opts, &ranges),
                }
            })?;
        let resampler = StreamResampler::new(source_rate, rate)?;
        let ring_len = duration_samples(opts.queue, rate).max(1024);
        let (producer, consumer) = ring::channel(ring_len);
        let shared = Arc::new(Shared::new(duration_samples(opts.prebuffer, rate)));
        let config = StreamConfig {
            channels,
            sample_rate: rate,
            buffer_size: cpal::BufferSize::Default,
        };
        let stream = match format {
            DeviceFormat::F32 => build::<f32>(&device, config, consumer, shared.clone()),
            DeviceFormat::I16 => build::<i16>(&device, config, consumer, shared.clone()),
            DeviceFormat::U16 => build::<u16>(&device, config, consumer, shared.clone()),
            DeviceFormat::I32 => build::<i32>(&device, config, consumer, shared.clone()),
        }
        .map_err(|e| open_error(opts.device.as_deref(), &label, e))?;
        stream
            .play()
            .map_err(|e| open_error(opts.device.as_deref(), &label, e))?;
        let device_buffer_frames = stream.buffer_size().ok();
        Ok(Player {
            _stream: stream,
            shared,
            producer,
            resampler,
            scratch: Vec::new(),
            device: label,
            rate,
            channels,
            format,
            device_buffer_frames,
            stall_timeout: opts.stall_timeout,
            written: 0,
        })
    }

    /// The device id that was opened.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Device sample rate (the resampler's output rate).
    pub fn device_rate(&self) -> u32 {
        self.rate
    }

    pub fn channels(&self) -> u16 {
        self.channels
    }

    pub fn format(&self) -> DeviceFormat {
        self.format
    }

    /// The resampler in use (identity when the device runs at the source
    /// rate); for its latency and timing figures.
    pub fn resampler(&self) -> &StreamResampler {
        &self.resampler
    }

    /// Queues source-rate samples: resamples them to the device rate and
    /// pushes them into the ring, waiting while the ring is full
    /// (backpressure: synthesis runs at most `queue` ahead of the device).
    /// Fails if the device stops consuming for `stall_timeout` or reports a
    /// fatal error.
    pub fn write(&mut self, samples: &[f32]) -> Result<(), AudioError> {
        if self.shared.finished.load(Ordering::Relaxed) {
            return Err(AudioError::Finished);
        }
        self.written += samples.len() as u64;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        self.resampler.step(samples, &mut scratch);
        let r = self.push_all(&scratch);
        self.scratch = scratch;
        r
    }

    /// Ends the stream: emits the resampler's tail and lets the device drain
    /// the ring (after which the callback plays silence and counts no
    /// underruns). Idempotent.
    pub fn finish(&mut self) -> Result<(), AudioError> {
        if self.shared.finished.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        self.resampler.flush(&mut scratch);
        let r = self.push_all(&scratch);
        self.scratch = scratch;
        // Release: pairs with the callback's acquire, so a callback that sees
        // `finished` also sees every pushed sample.
        self.shared.finished.store(true, Ordering::Release);
        r
    }

    /// Finishes (if not yet) and waits until the device has taken every
    /// sample, plus one device buffer for it to reach the speaker. Returns
    /// the final counters.
    pub fn wait_drained(&mut self, timeout: Duration) -> Result<PlaybackStats, AudioError> {
        self.finish()?;
        let deadline = Instant::now() + timeout;
        let mut last = self.producer.consumed();
        let mut last_progress = Instant::now();
        while !self.shared.drained.load(Ordering::Acquire) {
            self.check_failed()?;
            let now = Instant::now();
            let consumed = self.producer.consumed();
            if consumed != last {
                last = consumed;
                last_progress = now;
            } else if now.duration_since(last_progress) > self.stall_timeout || now > deadline {
                return Err(AudioError::Stalled {
                    waited_ms: now.duration_since(last_progress).as_millis() as u64,
                    written: self.producer.consumed(),
                    requested: self.producer.consumed() + self.producer.len(),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        // The last samples left the ring but sit in the device buffer.
        let tail = self.device_buffer_frames.unwrap_or(0) as u64 * 1_000_000 / self.rate as u64;
        std::thread::sleep(Duration::from_micros(tail.min(500_000)));
        Ok(self.stats())
    }

    pub fn stats(&self) -> PlaybackStats {
        let s = &*self.shared;
        PlaybackStats {
            samples_written: self.written,
            samples_played: s.played.load(Ordering::Relaxed),
            underruns: s.underruns.load(Ordering::Relaxed),
            underrun_samples: s.underrun_samples.load(Ordering::Relaxed),
            device_xruns: s.xruns.load(Ordering::Relaxed),
            callbacks: s.callbacks.load(Ordering::Relaxed),
        }
    }

    fn check_failed(&self) -> Result<(), AudioError> {
        match self.shared.failed.load(Ordering::Acquire) {
            0 => Ok(()),
            code => Err(AudioError::StreamFailed {
                device: self.device.clone(),
                reason: error_text(code).into(),
            }),
        }
    }

    /// Pushes everything, sleeping while the ring is full.
    fn push_all(&mut self, mut samples: &[f32]) -> Result<(), AudioError> {
        let requested = samples.len();
        let mut last_progress = Instant::now();
        // Sleep a quarter of the free space we wait for, 1-10 ms: short
        // enough not to starve a 10 ms device period, long enough not to spin.
        let nap = Duration::from_millis(
            (self.producer.capacity() as u64 * 250 / self.rate as u64 / 4).clamp(1, 10),
        );
        loop {
            let n = self.producer.push(samples);
            samples = &samples[n..];
            if samples.is_empty() {
                return Ok(());
            }
            self.check_failed()?;
            let now = Instant::now();
            if n > 0 {
                last_progress = now;
            } else if now.duration_since(last_progress) > self.stall_timeout {
                return Err(AudioError::Stalled {
                    waited_ms: now.duration_since(last_progress).as_millis() as u64,
                    written: requested - samples.len(),
                    requested,
                });
            }
            std::thread::sleep(nap);
        }
    }
}

fn duration_samples(d: Duration, rate: u32) -> usize {
    (d.as_secs_f64() * rate as f64).round() as usize
}
