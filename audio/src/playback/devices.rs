//! Output devices: listing them for `tts-rt devices`, finding the one
//! `--device` names, and mapping open failures to errors that say what to do.

use cpal::traits::{DeviceTrait, HostTrait};
use cpal::SupportedStreamConfigRange;

use super::format::DeviceFormat;
use crate::AudioError;

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

/// The default host, with alsa-lib's own diagnostics silenced on this
/// thread first: on a machine without a sound card it prints eight lines
/// ("ALSA lib confmisc.c:… cannot find card '0'", …) before the error of
/// ours that says what to do. They go to a buffer instead (re-created on
/// each call, so it stays small), and our error is the one thing printed.
pub(super) fn host() -> cpal::Host {
    #[cfg(target_os = "linux")]
    {
        let _ = alsa::Output::local_error_handler();
    }
    cpal::default_host()
}

/// Lists the default host's output devices.
pub fn list_output_devices() -> Result<Vec<DeviceInfo>, AudioError> {
    let host = host();
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

/// Finds the device `--device` names, matched as
/// [`PlaybackOptions::device`](crate::PlaybackOptions::device) describes,
/// with its id; `None` picks the host's default output.
pub(super) fn find_device(
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
pub(super) fn open_error(requested: Option<&str>, device: &str, e: cpal::Error) -> AudioError {
    match e.kind() {
        cpal::ErrorKind::DeviceNotAvailable | cpal::ErrorKind::HostUnavailable => AudioError::NoDevice {
            wanted: requested.map(str::to_string),
            hint: format!("opening {device:?} failed ({e}); connect a device, pick another with --device (tts-rt devices lists them) or write a file with --out"),
        },
        _ => AudioError::StreamOpen { device: device.to_string(), reason: e.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cpal::SampleFormat;

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
}
