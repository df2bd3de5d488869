//! What playback opens and in which sample format: [`DeviceFormat`] and
//! [`PlaybackOptions`], shared by device listing, format negotiation and the
//! [`Player`](crate::Player), so those files import this one and not each
//! other.

use std::time::Duration;

use cpal::SampleFormat;

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
    pub(super) const PREFERENCE: [DeviceFormat; 4] = [
        DeviceFormat::F32,
        DeviceFormat::I16,
        DeviceFormat::I32,
        DeviceFormat::U16,
    ];

    pub(super) fn cpal(self) -> SampleFormat {
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
    /// Device to open: an id or name as printed by
    /// [`list_output_devices`](crate::list_output_devices) (exact id, exact
    /// name, or a case-insensitive part of exactly one name). `None`: the
    /// host's default output device.
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
    /// [`Player::write`](crate::Player::write) waits.
    pub queue: Duration,
    /// [`Player::write`](crate::Player::write) and
    /// [`Player::wait_drained`](crate::Player::wait_drained) fail with
    /// [`AudioError::Stalled`](crate::AudioError::Stalled) when the device
    /// consumed nothing for this long.
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
