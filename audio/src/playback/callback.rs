//! The realtime side of playback: the device callback (`fill`), the atomics
//! it shares with the producer (`Shared`), the sample types it writes
//! ([`DeviceSample`]) and the stream that installs it (`build`).
//!
//! Nothing here that runs on the device thread locks, allocates, logs or
//! blocks: it reads the preallocated ring, writes the device buffer and bumps
//! atomic counters. A fatal stream error is stored as a one-byte code and
//! turned into text (`error_text`) on the producer side.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use cpal::traits::DeviceTrait;
use cpal::{SizedSample, StreamConfig};

use crate::f32_to_i16;
use crate::ring::Consumer;

/// State shared with the callback: atomics only.
pub(super) struct Shared {
    prebuffer: usize,
    started: AtomicBool,
    pub(super) finished: AtomicBool,
    pub(super) drained: AtomicBool,
    pub(super) played: AtomicU64,
    pub(super) underruns: AtomicU64,
    pub(super) underrun_samples: AtomicU64,
    pub(super) callbacks: AtomicU64,
    pub(super) xruns: AtomicU64,
    /// 0: healthy, else an [`error_code`] of a fatal stream error.
    pub(super) failed: AtomicU8,
}

impl Shared {
    pub(super) fn new(prebuffer: usize) -> Self {
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

pub(super) fn error_text(code: u8) -> &'static str {
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

/// Opens an output stream on `device` whose data callback is [`fill`].
pub(super) fn build<T: DeviceSample>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring;

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
}
