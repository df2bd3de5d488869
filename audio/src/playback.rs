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
//! The device callback (`fill`) never locks, allocates, logs or blocks: it
//! reads the preallocated ring, writes the device buffer and bumps atomic
//! counters. Everything that may wait or fail — resampling, backpressure,
//! stall detection, reporting device errors — happens on the producer side.
//!
//! Playback starts as soon as the ring holds `prebuffer` samples (default:
//! the first chunk written) or the stream is finished, whichever comes first.
//! An *underrun* is a callback that found fewer samples than the device asked
//! for after playback started and before the stream was finished; the gap is
//! filled with silence and counted in [`PlaybackStats`].

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};
use cpal::{SampleFormat, SizedSample, StreamConfig, SupportedStreamConfigRange};

use crate::resample::{StreamResampler, MAX_OUTPUT_RATE, MIN_OUTPUT_RATE};
use crate::ring::{self, Consumer, Producer};
use crate::{f32_to_i16, AudioError};

/// Device sample formats we write (the callback converts from f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceFormat {
    F32,
    I16,
    U16,
    I32,
}

impl DeviceFormat {
    /// Preference order when the caller does not choose: exact float first,
    /// then the formats hardware commonly has.
    const PREFERENCE: [DeviceFormat; 4] = [
        DeviceFormat::F32,
        DeviceFormat::I16,
        DeviceFormat::I32,
        DeviceFormat::U16,
    ];

    fn cpal(self) -> SampleFormat {
        match self {
            DeviceFormat::F32 => SampleFormat::F32,
            DeviceFormat::I16 => SampleFormat::I16,
            DeviceFormat::U16 => SampleFormat::U16,
            DeviceFormat::I32 => SampleFormat::I32,
        }
    }
}

impl std::str::FromStr for DeviceFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(DeviceFormat::F32),
            "i16" => Ok(DeviceFormat::I16),
            "u16" => Ok(DeviceFormat::U16),
            "i32" => Ok(DeviceFormat::I32),
            other => Err(format!(
                "unknown device format {other:?}; use f32, i16, u16 or i32"
            )),
        }
    }
}

/// What to open and how. `Default` = the default device, negotiated format,
/// start on the first chunk.
#[derive(Clone, Debug)]
pub struct PlaybackOptions {
    /// Device to open: an id or name as printed by [`list_output_devices`]
    /// (exact id, exact name, or a case-insensitive part of exactly one
    /// name). `None`: the host's default output device.
    pub device: Option<String>,
    /// Device sample rate (8 000–48 000, or the source rate). `None`: the
    /// device's default rate when usable, else the source rate, else a common
    /// rate the device supports.
    pub sample_rate: Option<u32>,
    /// Device channel count; the mono source is copied to every channel.
    /// `None`: the device default, else 2, else 1.
    pub channels: Option<u16>,
    /// Device sample format. `None`: f32, i16, i32, u16, first supported.
    pub format: Option<DeviceFormat>,
    /// Audio to queue before the device starts playing. Zero: play from the
    /// first chunk written.
    pub prebuffer: Duration,
    /// Ring capacity: how far synthesis may run ahead of the device before
    /// [`Player::write`] waits.
    pub queue: Duration,
    /// [`Player::write`] and [`Player::wait_drained`] fail with
    /// [`AudioError::Stalled`] when the device consumed nothing for this long.
    pub stall_timeout: Duration,
}

impl Default for PlaybackOptions {
    fn default() -> Self {
        PlaybackOptions {
            device: None,
            sample_rate: None,
            channels: None,
            format: None,
            prebuffer: Duration::ZERO,
            queue: Duration::from_secs(4),
            stall_timeout: Duration::from_secs(2),
        }
    }
}

/// One output device as listed for `tts-rt devices`.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Stable id (on ALSA the PCM name, e.g. `hw:CARD=PCH,DEV=0`); what
    /// `--device` matches first.
    pub id: String,
    /// Human-readable name.
    pub name: String,
    pub is_default: bool,
    /// Default output config as "48000 Hz, 2 ch, f32" when the device could
    /// be queried (on ALSA this opens it, so busy or absent devices show
    /// `None`).
    pub default_config: Option<String>,
    /// Supported output configurations in the formats playback can write,
    /// channel counts merged, as "8000-48000 Hz, 1-2 ch, f32" (empty when
    /// the device could not be queried).
    pub supported: Vec<String>,
}

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

/// State shared with the callback: atomics only.
struct Shared {
    prebuffer: usize,
    started: AtomicBool,
    finished: AtomicBool,
    drained: AtomicBool,
    played: AtomicU64,
    underruns: AtomicU64,
    underrun_samples: AtomicU64,
    callbacks: AtomicU64,
    xruns: AtomicU64,
    /// 0: healthy, else an [`error_code`] of a fatal stream error.
    failed: AtomicU8,
}

impl Shared {
    fn new(prebuffer: usize) -> Self {
        Shared {
            prebuffer,
            started: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            drained: AtomicBool::new(false),
            played: AtomicU64::new(0),
            underruns: AtomicU64::new(0),
            underrun_samples: AtomicU64::new(0),
            callbacks: AtomicU64::new(0),
            xruns: AtomicU64::new(0),
            failed: AtomicU8::new(0),
        }
    }

    /// The stream's error callback (not the realtime data callback, but it
    /// can run on the device thread, so it only stores a code).
    fn on_error(&self, kind: cpal::ErrorKind) {
        match kind {
            cpal::ErrorKind::Xrun => {
                self.xruns.fetch_add(1, Ordering::Relaxed);
            }
            // Informational: the stream keeps running.
            cpal::ErrorKind::DeviceChanged | cpal::ErrorKind::RealtimeDenied => {}
            other => self.failed.store(error_code(other), Ordering::Release),
        }
    }
}

fn error_code(kind: cpal::ErrorKind) -> u8 {
    match kind {
        cpal::ErrorKind::DeviceNotAvailable => 1,
        cpal::ErrorKind::StreamInvalidated => 2,
        cpal::ErrorKind::DeviceBusy => 3,
        cpal::ErrorKind::PermissionDenied => 4,
        cpal::ErrorKind::HostUnavailable => 5,
        _ => 255,
    }
}

fn error_text(code: u8) -> &'static str {
    match code {
        1 => "the device disappeared",
        2 => "the stream was invalidated (device configuration changed)",
        3 => "the device became busy",
        4 => "permission denied",
        5 => "the audio host went away",
        _ => "the audio backend reported an error",
    }
}

/// A sample type the device callback can write.
pub trait DeviceSample: SizedSample + Send + 'static {
    const SILENCE: Self;
    fn from_f32(s: f32) -> Self;
}

impl DeviceSample for f32 {
    const SILENCE: Self = 0.0;
    /// Clamped to [-1, 1], NaN to silence: a model glitch must not reach a
    /// speaker at full scale.
    #[inline]
    fn from_f32(s: f32) -> Self {
        if s.is_nan() {
            0.0
        } else {
            s.clamp(-1.0, 1.0)
        }
    }
}

impl DeviceSample for i16 {
    const SILENCE: Self = 0;
    /// Same mapping as the WAV writer (round to nearest, ±32767).
    #[inline]
    fn from_f32(s: f32) -> Self {
        f32_to_i16(s)
    }
}

impl DeviceSample for u16 {
    const SILENCE: Self = 32768;
    #[inline]
    fn from_f32(s: f32) -> Self {
        (f32_to_i16(s) as i32 + 32768) as u16
    }
}

impl DeviceSample for i32 {
    const SILENCE: Self = 0;
    #[inline]
    fn from_f32(s: f32) -> Self {
        let s = if s.is_nan() {
            0.0
        } else {
            s.clamp(-1.0, 1.0) as f64
        };
        (s * i32::MAX as f64).round() as i32
    }
}

/// The realtime callback body: fills one interleaved device buffer from the
/// ring. No locks, no allocation, no logging, no waiting.
fn fill<T: DeviceSample>(data: &mut [T], channels: usize, ring: &mut Consumer, shared: &Shared) {
    shared.callbacks.fetch_add(1, Ordering::Relaxed);
    let frames = data.len() / channels;
    if !shared.started.load(Ordering::Relaxed) {
        if ring.len() >= shared.prebuffer || shared.finished.load(Ordering::Acquire) {
            shared.started.store(true, Ordering::Relaxed);
        } else {
            data.fill(T::SILENCE);
            return;
        }
    }
    let mut frame = 0;
    let got = ring.pop_each(frames, |s| {
        data[frame * channels..(frame + 1) * channels].fill(T::from_f32(s));
        frame += 1;
    });
    data[got * channels..].fill(T::SILENCE);
    shared.played.fetch_add(got as u64, Ordering::Relaxed);
    if got < frames {
        // `finished` is set after the last push, so once it reads true an
        // empty ring means the stream is over, not starving.
        if shared.finished.load(Ordering::Acquire) && ring.is_empty() {
            shared.drained.store(true, Ordering::Release);
        } else {
            shared.underruns.fetch_add(1, Ordering::Relaxed);
            shared
                .underrun_samples
                .fetch_add((frames - got) as u64, Ordering::Relaxed);
        }
    }
}

/// Lists the default host's output devices.
pub fn list_output_devices() -> Result<Vec<DeviceInfo>, AudioError> {
    let host = cpal::default_host();
    let default_id = host.default_output_device().and_then(|d| d.id().ok());
    let devices = host
        .output_devices()
        .map_err(|e| AudioError::Devices(e.to_string()))?;
    let mut out = Vec::new();
    for d in devices {
        let Ok(id) = d.id() else { continue };
        let name = d
            .description()
            .map(|x| x.name().to_string())
            .unwrap_or_else(|_| id.id().to_string());
        let default_config = d.default_output_config().ok().map(|c| {
            format!(
                "{} Hz, {} ch, {}",
                c.sample_rate(),
                c.channels(),
                c.sample_format()
            )
        });
        let supported = d
            .supported_output_configs()
            .map(|r| summarize_ranges(&r.collect::<Vec<_>>()))
            .unwrap_or_default();
        out.push(DeviceInfo {
            is_default: default_id.as_ref() == Some(&id),
            id: id.id().to_string(),
            name,
            default_config,
            supported,
        });
    }
    Ok(out)
}

/// One line per (rate range, playable format) with its channel counts:
/// ALSA plugins list every channel count of every format separately
/// (hundreds of ranges for `null`).
fn summarize_ranges(ranges: &[SupportedStreamConfigRange]) -> Vec<String> {
    let mut groups: Vec<(u32, u32, DeviceFormat, Vec<u16>)> = Vec::new();
    for r in ranges {
        let Some(fmt) = DeviceFormat::PREFERENCE
            .into_iter()
            .find(|f| f.cpal() == r.sample_format())
        else {
            continue;
        };
        let key = (r.min_sample_rate(), r.max_sample_rate(), fmt);
        match groups.iter_mut().find(|g| (g.0, g.1, g.2) == key) {
            Some(g) => g.3.push(r.channels()),
            None => groups.push((key.0, key.1, key.2, vec![r.channels()])),
        }
    }
    groups
        .into_iter()
        .map(|(lo, hi, fmt, mut ch)| {
            ch.sort_unstable();
            ch.dedup();
            let contiguous = ch.windows(2).all(|w| w[1] == w[0] + 1);
            let ch = match (ch.first(), ch.last()) {
                (Some(a), Some(b)) if a == b => a.to_string(),
                (Some(a), Some(b)) if contiguous => format!("{a}-{b}"),
                _ => ch
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            };
            let rates = if lo == hi {
                format!("{lo} Hz")
            } else {
                format!("{lo}-{hi} Hz")
            };
            format!("{rates}, {ch} ch, {}", fmt.cpal())
        })
        .collect()
}

fn find_device(
    host: &cpal::Host,
    wanted: Option<&str>,
) -> Result<(cpal::Device, String), AudioError> {
    let Some(wanted) = wanted else {
        let d = host.default_output_device().ok_or_else(|| AudioError::NoDevice {
            wanted: None,
            hint: "the audio host has no default output; connect one, pick one with --device (tts-rt devices lists them) or write a file with --out".into(),
        })?;
        let label = d
            .id()
            .map(|i| i.id().to_string())
            .unwrap_or_else(|_| "default".into());
        return Ok((d, label));
    };
    let devices: Vec<(cpal::Device, String, String)> = host
        .output_devices()
        .map_err(|e| AudioError::Devices(e.to_string()))?
        .filter_map(|d| {
            let id = d.id().ok()?.id().to_string();
            let name = d
                .description()
                .map(|x| x.name().to_string())
                .unwrap_or_else(|_| id.clone());
            Some((d, id, name))
        })
        .collect();
    let lower = wanted.to_lowercase();
    let pick = devices
        .iter()
        .position(|(_, id, _)| id == wanted)
        .or_else(|| devices.iter().position(|(_, _, name)| name == wanted))
        .or_else(|| {
            let mut hits = devices
                .iter()
                .enumerate()
                .filter(|(_, (_, _, name))| name.to_lowercase().contains(&lower));
            match (hits.next(), hits.next()) {
                (Some((i, _)), None) => Some(i),
                _ => None,
            }
        });
    match pick {
        Some(i) => {
            let (d, id, _) = devices.into_iter().nth(i).expect("index from this list");
            Ok((d, id))
        }
        None => {
            let ids: Vec<&str> = devices.iter().map(|(_, id, _)| id.as_str()).collect();
            Err(AudioError::NoDevice {
                wanted: Some(wanted.to_string()),
                hint: if ids.is_empty() {
                    "the audio host lists no output devices".into()
                } else {
                    format!(
                        "available: {} (names also match; tts-rt devices lists them)",
                        ids.join(", ")
                    )
                },
            })
        }
    }
}

/// Maps a cpal error while opening: an absent device is "no device", the
/// rest is a failed open with cpal's reason.
/// `requested` is what the user asked for (`None`: the default device).
fn open_error(requested: Option<&str>, device: &str, e: cpal::Error) -> AudioError {
    match e.kind() {
        cpal::ErrorKind::DeviceNotAvailable | cpal::ErrorKind::HostUnavailable => AudioError::NoDevice {
            wanted: requested.map(str::to_string),
            hint: format!("opening {device:?} failed ({e}); connect a device, pick another with --device (tts-rt devices lists them) or write a file with --out"),
        },
        _ => AudioError::StreamOpen { device: device.to_string(), reason: e.to_string() },
    }
}

fn supports(ranges: &[SupportedStreamConfigRange], rate: u32, ch: u16, fmt: DeviceFormat) -> bool {
    ranges.iter().any(|r| {
        r.channels() == ch
            && r.sample_format() == fmt.cpal()
            && r.min_sample_rate() <= rate
            && rate <= r.max_sample_rate()
    })
}

/// Picks (rate, channels, format) from what the device supports; see
/// [`PlaybackOptions`] for the preference order.
fn negotiate(
    ranges: &[SupportedStreamConfigRange],
    default: Option<(u32, u16)>,
    opts: &PlaybackOptions,
    source_rate: u32,
) -> Option<(u32, u16, DeviceFormat)> {
    let usable = |r: u32| r == source_rate || (MIN_OUTPUT_RATE..=MAX_OUTPUT_RATE).contains(&r);
    let mut rates: Vec<u32> = match opts.sample_rate {
        Some(r) => vec![r],
        None => default
            .map(|d| d.0)
            .into_iter()
            .chain([
                source_rate,
                48_000,
                44_100,
                32_000,
                24_000,
                22_050,
                16_000,
                8_000,
            ])
            .filter(|&r| usable(r))
            .collect(),
    };
    rates.dedup();
    let channels: Vec<u16> = match opts.channels {
        Some(c) => vec![c],
        None => default.map(|d| d.1).into_iter().chain([2, 1]).collect(),
    };
    let formats: Vec<DeviceFormat> = match opts.format {
        Some(f) => vec![f],
        None => DeviceFormat::PREFERENCE.to_vec(),
    };
    for &rate in &rates {
        for &fmt in &formats {
            for &ch in &channels {
                if supports(ranges, rate, ch, fmt) {
                    return Some((rate, ch, fmt));
                }
            }
        }
    }
    None
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
        let host = cpal::default_host();
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

fn build<T: DeviceSample>(
    device: &cpal::Device,
    config: StreamConfig,
    mut consumer: Consumer,
    shared: Arc<Shared>,
) -> Result<cpal::Stream, cpal::Error> {
    let channels = config.channels as usize;
    let on_error = shared.clone();
    device.build_output_stream::<T, _, _>(
        config,
        move |data: &mut [T], _: &cpal::OutputCallbackInfo| {
            fill(data, channels, &mut consumer, &shared)
        },
        move |e: cpal::Error| on_error.on_error(e.kind()),
        None,
    )
}

fn duration_samples(d: Duration, rate: u32) -> usize {
    (d.as_secs_f64() * rate as f64).round() as usize
}

fn describe_request(opts: &PlaybackOptions, ranges: &[SupportedStreamConfigRange]) -> String {
    let offered: Vec<String> = ranges
        .iter()
        .map(|r| {
            format!(
                "{}-{} Hz {} ch {}",
                r.min_sample_rate(),
                r.max_sample_rate(),
                r.channels(),
                r.sample_format()
            )
        })
        .collect();
    format!(
        "asked for rate {:?}, channels {:?}, format {:?}; device offers [{}]",
        opts.sample_rate,
        opts.channels,
        opts.format,
        offered.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(prebuffer: usize) -> Shared {
        Shared::new(prebuffer)
    }

    #[test]
    fn callback_duplicates_mono_and_counts_underruns() {
        let (mut p, mut c) = ring::channel(16);
        let sh = shared(0);
        p.push(&[0.5, -0.5, 0.25]);
        let mut buf = [9.0f32; 8]; // 4 stereo frames
        fill(&mut buf, 2, &mut c, &sh);
        assert_eq!(buf, [0.5, 0.5, -0.5, -0.5, 0.25, 0.25, 0.0, 0.0]);
        assert_eq!(sh.underruns.load(Ordering::Relaxed), 1);
        assert_eq!(sh.underrun_samples.load(Ordering::Relaxed), 1);
        assert_eq!(sh.played.load(Ordering::Relaxed), 3);
        // Finished and empty: silence, no underrun, drained.
        sh.finished.store(true, Ordering::Release);
        fill(&mut buf, 2, &mut c, &sh);
        assert_eq!(buf, [0.0; 8]);
        assert_eq!(sh.underruns.load(Ordering::Relaxed), 1);
        assert!(sh.drained.load(Ordering::Acquire));
    }

    #[test]
    fn callback_waits_for_prebuffer_without_counting_underruns() {
        let (mut p, mut c) = ring::channel(64);
        let sh = shared(6);
        p.push(&[0.1; 4]);
        let mut buf = [1i16; 4];
        fill(&mut buf, 1, &mut c, &sh);
        assert_eq!(buf, [0; 4]);
        assert_eq!(sh.underruns.load(Ordering::Relaxed), 0);
        assert_eq!(c.len(), 4, "nothing consumed before the prebuffer filled");
        p.push(&[0.1; 2]);
        fill(&mut buf, 1, &mut c, &sh);
        assert_eq!(buf, [f32_to_i16(0.1); 4]);
        assert!(sh.started.load(Ordering::Relaxed));
    }

    #[test]
    fn finish_starts_a_stream_shorter_than_the_prebuffer() {
        let (mut p, mut c) = ring::channel(64);
        let sh = shared(100);
        p.push(&[0.5; 3]);
        sh.finished.store(true, Ordering::Release);
        let mut buf = [0u16; 4];
        fill(&mut buf, 1, &mut c, &sh);
        let v = u16::from_f32(0.5);
        assert_eq!(buf, [v, v, v, 32768]);
        assert!(sh.drained.load(Ordering::Acquire));
        assert_eq!(sh.underruns.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn sample_conversions_clamp_and_centre() {
        assert_eq!(u16::from_f32(0.0), 32768);
        assert_eq!(u16::from_f32(1.0), 65535);
        assert_eq!(u16::from_f32(-1.0), 1);
        assert_eq!(i16::from_f32(2.0), 32767);
        assert_eq!(f32::from_f32(f32::NAN), 0.0);
        assert_eq!(f32::from_f32(-3.0), -1.0);
        assert_eq!(i32::from_f32(1.0), i32::MAX);
        assert_eq!(i32::from_f32(0.0), 0);
    }

    #[test]
    fn device_listing_merges_channel_counts_of_playable_formats() {
        use cpal::SupportedBufferSize;
        let range = |ch, lo, hi, f| {
            SupportedStreamConfigRange::new(ch, lo, hi, SupportedBufferSize::Unknown, f)
        };
        let ranges = vec![
            range(1, 8_000, 48_000, SampleFormat::F32),
            range(2, 8_000, 48_000, SampleFormat::F32),
            range(2, 44_100, 44_100, SampleFormat::I16),
            range(6, 44_100, 44_100, SampleFormat::I16),
            range(2, 8_000, 48_000, SampleFormat::I8),
        ];
        assert_eq!(
            summarize_ranges(&ranges),
            ["8000-48000 Hz, 1-2 ch, f32", "44100 Hz, 2,6 ch, i16"]
        );
    }

    #[test]
    fn negotiation_prefers_default_rate_then_float() {
        use cpal::SupportedBufferSize;
        let range = |ch, lo, hi, f| {
            SupportedStreamConfigRange::new(ch, lo, hi, SupportedBufferSize::Unknown, f)
        };
        let ranges = vec![
            range(2, 8_000, 96_000, SampleFormat::I16),
            range(2, 8_000, 96_000, SampleFormat::F32),
        ];
        let opts = PlaybackOptions::default();
        assert_eq!(
            negotiate(&ranges, Some((44_100, 2)), &opts, 24_000),
            Some((44_100, 2, DeviceFormat::F32))
        );
        // A 96 kHz default is above the resampler's range: the source rate.
        assert_eq!(
            negotiate(&ranges, Some((96_000, 2)), &opts, 24_000),
            Some((24_000, 2, DeviceFormat::F32))
        );
        let mono = PlaybackOptions {
            channels: Some(1),
            ..Default::default()
        };
        assert_eq!(negotiate(&ranges, None, &mono, 24_000), None);
        let i16_only = PlaybackOptions {
            format: Some(DeviceFormat::I16),
            sample_rate: Some(16_000),
            ..Default::default()
        };
        assert_eq!(
            negotiate(&ranges, None, &i16_only, 24_000),
            Some((16_000, 2, DeviceFormat::I16))
        );
    }
}
