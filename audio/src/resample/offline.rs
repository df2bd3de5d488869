//! Offline conversion of a whole clip (reference audio), where latency does
//! not matter but alignment and pass band do.
//!
//! # How
//! The streaming resampler with a longer filter ([`OFFLINE_TAPS`] per output
//! sample period: rubato's cutoff rises from 0.895 of the lower Nyquist at
//! 128 taps to 0.947, close to the ~0.95 pass band of soxr's HQ preset that
//! the official code resamples reference clips with). Filter length counts
//! input samples, so when downsampling by `t = in/out` the filter gets
//! `⌈t⌉` times the taps (at most 1,024) and keeps the cutoff of
//! `taps / ⌈t⌉`: the same transition band in output terms, so a 96 kHz clip
//! is filtered as well as a 24 kHz one. Two changes make output sample `j` sit
//! at input time `j · in/out` exactly, as soxr's does, rather than within
//! half an output sample ([`StreamResampler::time_offset`]):
//! - when the rates' ratio has a denominator `q = out / gcd(in, out)` of at
//!   most [`MAX_EXACT_TABLE`] (every common rate: 3 for 8/16/32 kHz, 80 for
//!   44.1 kHz, 160 for 22.05 kHz, 1 for 48/96/192 kHz), the table has `q`
//!   points per input sample and the nearest one is taken: every output
//!   instant falls exactly on a table point, so this is a polyphase filter
//!   with no interpolation error, and rubato's fixed one-table-step offset
//!   is a whole number of output steps;
//! - the remaining fractional offset is cancelled by prepending `d` zeros
//!   and dropping the first `m` outputs, with `m · in/out + φ = d` exactly
//!   (or, for other ratios, to within `1/(2q)` input samples).

use rubato::{calculate_cutoff, WindowFunction};

use super::{SincFilter, StreamResampler};
use crate::AudioError;

/// Filter length for offline conversion, per output sample period (so
/// input samples when upsampling).
pub const OFFLINE_TAPS: usize = 256;
/// Longest offline filter, in input samples.
const MAX_TAPS: usize = 1024;
/// Largest table (points per input sample) used for exact alignment; ratios
/// with a larger denominator use the cubic 128-point table.
pub const MAX_EXACT_TABLE: usize = 2048;

/// The filter [`resample_offline`] uses for a rate pair.
pub fn offline_filter(in_rate: u32, out_rate: u32) -> SincFilter {
    let q = denominator(in_rate, out_rate);
    let stretch = in_rate.div_ceil(out_rate).max(1) as usize;
    let taps = (OFFLINE_TAPS * stretch).min(MAX_TAPS);
    let cutoff = (stretch > 1)
        .then(|| calculate_cutoff::<f32>(taps / stretch, WindowFunction::BlackmanHarris2));
    if q <= MAX_EXACT_TABLE as u64 {
        SincFilter {
            taps,
            oversampling: q as usize,
            nearest: true,
            cutoff,
        }
    } else {
        SincFilter {
            taps,
            cutoff,
            ..SincFilter::STREAMING
        }
    }
}

/// Converts a whole mono signal from `in_rate` to `out_rate` (equal rates:
/// a copy). Sample `j` of the output is the band-limited input at time
/// `j · in / out` input samples. The length is [`offline_len`].
pub fn resample_offline(
    input: &[f32],
    in_rate: u32,
    out_rate: u32,
) -> Result<Vec<f32>, AudioError> {
    let mut rs =
        StreamResampler::with_filter(in_rate, out_rate, offline_filter(in_rate, out_rate))?;
    if rs.is_identity() {
        return Ok(input.to_vec());
    }
    let n_out = offline_len(input.len(), in_rate, out_rate);
    let (pad, drop) = alignment(in_rate, out_rate, rs.time_offset());
    // Enough trailing zeros that `drop + n_out` outputs exist (one more
    // than the exact count, for `offline_len`'s rounding).
    let t = in_rate as f64 / out_rate as f64;
    let tail = 2 * t.ceil() as usize + 4;
    let mut padded = Vec::with_capacity(pad + input.len() + tail);
    padded.resize(pad, 0.0);
    padded.extend_from_slice(input);
    padded.resize(pad + input.len() + tail, 0.0);
    let out = rs.process_all(&padded);
    debug_assert!(out.len() >= drop + n_out);
    Ok(out.into_iter().skip(drop).take(n_out).collect())
}

/// Output length for `n` input samples: `ceil(n · (out / in))` evaluated in
/// f64 as `librosa.resample` does (the official reference path), which is
/// one more than the exact `ceil(n · out / in)` when the float ratio rounds
/// up (e.g. 11,025 samples at 22.05 kHz give 12,001 at 24 kHz, not 12,000).
/// Matching it keeps codec frame counts (`ceil(n / 1920)`) and mel frame
/// counts (`floor(n / 256)`) equal to the official ones.
pub fn offline_len(n: usize, in_rate: u32, out_rate: u32) -> usize {
    if in_rate == out_rate {
        return n;
    }
    (n as f64 * (out_rate as f64 / in_rate as f64)).ceil() as usize
}

/// `(d, m)`: prepend `d` zeros and drop `m` outputs so that output `j` sits
/// at input time `j·t` (the streaming resampler puts output `j` at
/// `j·t + φ`; after the shift it is at `(j + m)·t + φ − d`). Searches one
/// period of the ratio for the `m` that brings `m·t + φ` closest to an
/// integer `d ≥ 0`, in exact integer arithmetic where `φ` is on the grid.
fn alignment(in_rate: u32, out_rate: u32, phi: f64) -> (usize, usize) {
    let q = denominator(in_rate, out_rate);
    let t = in_rate as f64 / out_rate as f64;
    let mut best = (0usize, 0usize, f64::INFINITY);
    for m in 0..q.min(1 << 16) {
        let x = m as f64 * t + phi;
        let d = x.round();
        if d < 0.0 {
            continue;
        }
        let err = (x - d).abs();
        if err < best.2 - 1e-9 {
            best = (d as usize, m as usize, err);
            if err < 1e-9 {
                break;
            }
        }
    }
    (best.0, best.1)
}

/// `out / gcd(in, out)`: the denominator of `in / out` in lowest terms, the
/// number of distinct output phases per input sample.
fn denominator(in_rate: u32, out_rate: u32) -> u64 {
    let (mut a, mut b) = (in_rate as u64, out_rate as u64);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    out_rate as u64 / a.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_rates_get_an_exact_table() {
        for (rate, q) in [
            (8_000, 3),
            (16_000, 3),
            (22_050, 160),
            (44_100, 80),
            (48_000, 1),
            (11_025, 320),
        ] {
            let f = offline_filter(rate, 24_000);
            assert_eq!((f.oversampling, f.nearest), (q, true), "{rate}");
        }
        assert!(!offline_filter(44_099, 24_000).nearest);
    }

    #[test]
    fn length_rounds_like_librosa() {
        // ceil(n * (out / in)) in f64, as librosa.resample computes it.
        assert_eq!(offline_len(11_025, 22_050, 24_000), 12_001);
        assert_eq!(offline_len(22_050, 44_100, 24_000), 12_001);
        assert_eq!(offline_len(8_000, 16_000, 24_000), 12_000);
        assert_eq!(offline_len(24_000, 48_000, 24_000), 12_000);
        assert_eq!(offline_len(1, 48_000, 24_000), 1);
        assert_eq!(offline_len(0, 44_100, 24_000), 0);
        assert_eq!(offline_len(777, 24_000, 24_000), 777);
    }

    #[test]
    fn alignment_cancels_the_offset() {
        for rate in [8_000u32, 16_000, 22_050, 44_100, 48_000, 96_000, 44_099] {
            let rs =
                StreamResampler::with_filter(rate, 24_000, offline_filter(rate, 24_000)).unwrap();
            let phi = rs.time_offset();
            let (d, m) = alignment(rate, 24_000, phi);
            let t = rate as f64 / 24_000.0;
            let residual = m as f64 * t + phi - d as f64;
            let q = denominator(rate, 24_000) as f64;
            assert!(
                residual.abs() <= 0.5 / q + 1e-9,
                "{rate}: residual {residual}"
            );
        }
    }
}
