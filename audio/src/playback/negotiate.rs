//! Format negotiation: picking a (rate, channels, format) the device
//! supports, in the preference order [`PlaybackOptions`] documents, and
//! describing the mismatch when there is none.

use cpal::SupportedStreamConfigRange;

use super::format::{DeviceFormat, PlaybackOptions};
use crate::resample::{MAX_OUTPUT_RATE, MIN_OUTPUT_RATE};

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
pub(super) fn negotiate(
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

/// What was asked for and every range the device offers: the detail of
/// [`AudioError::UnsupportedDevice`](crate::AudioError::UnsupportedDevice).
pub(super) fn describe_request(
    opts: &PlaybackOptions,
    ranges: &[SupportedStreamConfigRange],
) -> String {
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
    use cpal::SampleFormat;

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
