//! Streaming resampler: streaming == one-shot for many chunkings, exact
//! output length, time alignment against an analytic sine, latency as
//! documented, rate validation.

use std::f64::consts::PI;

use tts_audio::resample::{StreamResampler, MAX_CHUNK};
use tts_audio::AudioError;

/// Largest |streamed − one-shot| allowed. The only difference between the two
/// is float rounding of rubato's f64 read position when it is advanced in
/// different steps; observed ≤ 1e-7 on unit-amplitude signals.
const STREAM_TOL: f32 = 1e-6;
/// Largest |output − ideal band-limited sine| in the steady state: the
/// 128-tap filter's pass-band ripple and stop band are around -100 dB;
/// observed ~2e-5. A one-sample misalignment at these frequencies gives >0.05.
const SINE_TOL: f64 = 1e-4;

const RATE_PAIRS: [(u32, u32); 9] = [
    (24_000, 8_000),
    (24_000, 11_025),
    (24_000, 16_000),
    (24_000, 22_050),
    (24_000, 44_100),
    (24_000, 48_000),
    (24_000, 44_099), // coprime with 24 000: no short rational period
    (12_000, 48_000), // the tiny-b fixture's native rate
    (24_000, 24_000), // identity
];

/// Speech-like test signal: a few partials plus deterministic noise, peak < 1.
fn signal(n: usize, rate: u32) -> Vec<f32> {
    let mut seed = 0x2545_f491_u32;
    (0..n)
        .map(|i| {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (seed >> 8) as f64 / (1u32 << 24) as f64 - 0.5;
            let t = i as f64 / rate as f64;
            (0.3 * (2.0 * PI * 180.0 * t).sin()
                + 0.2 * (2.0 * PI * 1_234.5 * t).sin()
                + 0.1 * (2.0 * PI * 3_300.0 * t).sin()
                + 0.2 * noise) as f32
        })
        .collect()
}

fn stream(r: &mut StreamResampler, x: &[f32], sizes: &[usize]) -> Vec<f32> {
    let mut out = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    while pos < x.len() {
        let n = sizes[k % sizes.len()].min(x.len() - pos);
        let before = out.len();
        let got = r.step(&x[pos..pos + n], &mut out);
        assert_eq!(got, out.len() - before, "step returns what it appended");
        pos += n;
        k += 1;
    }
    r.flush(&mut out);
    out
}

fn chunkings() -> Vec<(&'static str, Vec<usize>)> {
    vec![
        ("1 sample", vec![1]),
        ("prime 7", vec![7]),
        ("prime 1931", vec![1931]),
        (
            "primes mixed",
            vec![
                2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 97, 389,
            ],
        ),
        ("one frame", vec![1920]),
        ("many frames", vec![1920 * 5]),
        ("beyond MAX_CHUNK", vec![MAX_CHUNK * 3 + 1]),
        ("with empty steps", vec![0, 480, 0, 0, 1]),
    ]
}

#[test]
fn streaming_equals_one_shot_for_every_chunking() {
    // 7.3 frames of 1920 samples at 24 kHz: ends mid-frame.
    for (fi, fo) in RATE_PAIRS {
        let x = signal(14_017 * fi as usize / 24_000, fi);
        let mut r = StreamResampler::new(fi, fo).unwrap();
        let reference = r.process_all(&x);
        assert_eq!(reference.len() as u64, r.output_len_for(x.len() as u64));
        for (name, sizes) in chunkings() {
            let y = stream(&mut r, &x, &sizes);
            assert_eq!(y.len(), reference.len(), "{fi}->{fo} {name}: length");
            let worst = y
                .iter()
                .zip(&reference)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(worst <= STREAM_TOL, "{fi}->{fo} {name}: max diff {worst}");
        }
    }
}

#[test]
fn output_length_is_ceil_of_input_times_ratio() {
    for (fi, fo) in RATE_PAIRS {
        let mut r = StreamResampler::new(fi, fo).unwrap();
        for n in [0usize, 1, 2, 3, 5, 79, 80, 81, 1919, 1920, 24_001] {
            let y = r.process_all(&signal(n, fi));
            let want = (n as u64 * fo as u64).div_ceil(fi as u64);
            assert_eq!(y.len() as u64, want, "{fi}->{fo} n_in={n}");
            assert_eq!(r.output_len_for(n as u64), want);
        }
    }
}

#[test]
fn identity_passes_samples_through_bit_exactly() {
    let mut r = StreamResampler::new(24_000, 24_000).unwrap();
    assert!(r.is_identity());
    assert_eq!(r.latency_input_samples(), 0);
    let x = signal(5_000, 24_000);
    let y = stream(&mut r, &x, &[7, 1920]);
    assert_eq!(
        x.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

/// Each output sample j must equal the ideal band-limited signal at input
/// time j·t + φ, whatever the chunking: this is what rules out clicks,
/// repeated or dropped samples at chunk boundaries, and a wrong delay.
#[test]
fn outputs_are_time_aligned_with_no_boundary_artifacts() {
    for (fi, fo) in RATE_PAIRS {
        let mut r = StreamResampler::new(fi, fo).unwrap();
        let t = fi as f64 / fo as f64;
        let phi = r.time_offset();
        assert!(
            phi.abs() <= t / 2.0 + 1e-9,
            "{fi}->{fo}: φ = {phi} exceeds half an output sample"
        );
        // Inside the pass band: 0.6 × the lower Nyquist (2.4 kHz at 8k).
        let freqs = [440.0, 0.6 * 0.5 * fi.min(fo) as f64];
        let n = fi as usize / 2;
        let x: Vec<f32> = (0..n)
            .map(|i| {
                freqs
                    .iter()
                    .map(|f| 0.45 * (2.0 * PI * f * i as f64 / fi as f64).sin())
                    .sum::<f64>() as f32
            })
            .collect();
        for (name, sizes) in [
            ("one-shot", vec![n]),
            ("1920", vec![1920]),
            ("primes", vec![1, 13, 389]),
        ] {
            let y = stream(&mut r, &x, &sizes);
            // Skip the on/off transients of the abrupt start and end: the
            // filter reaches 64 input samples either side.
            let margin = (80.0 / t).ceil() as usize;
            let mut worst = (0.0f64, 0usize);
            for (j, &v) in y.iter().enumerate().take(y.len() - margin).skip(margin) {
                let time = j as f64 * t + phi;
                let ideal: f64 = freqs
                    .iter()
                    .map(|f| 0.45 * (2.0 * PI * f * time / fi as f64).sin())
                    .sum();
                let e = (v as f64 - ideal).abs();
                if e > worst.0 {
                    worst = (e, j);
                }
            }
            assert!(
                worst.0 <= SINE_TOL,
                "{fi}->{fo} {name}: error {} at output {}",
                worst.0,
                worst.1
            );
        }
    }
}

/// Feeding one sample at a time, output j (at input time j·t + φ) must be out
/// by the time input sample j·t + φ + latency has arrived.
#[test]
fn latency_is_as_documented() {
    for (fi, fo) in RATE_PAIRS {
        let mut r = StreamResampler::new(fi, fo).unwrap();
        let t = fi as f64 / fo as f64;
        let phi = r.time_offset();
        let lat = r.latency_input_samples() as f64;
        assert!(lat <= 66.0, "{fi}->{fo}: latency {lat} input samples");
        let x = signal(3_000, fi);
        let mut out = Vec::new();
        let mut worst = 0.0f64;
        for (i, s) in x.iter().enumerate() {
            let before = out.len();
            r.step(std::slice::from_ref(s), &mut out);
            for j in before..out.len() {
                // Input sample i has just arrived when output j appears.
                let wait = i as f64 - (j as f64 * t + phi);
                worst = worst.max(wait);
            }
        }
        assert!(
            worst <= lat,
            "{fi}->{fo}: an output waited {worst} input samples, documented {lat}"
        );
        r.reset();
    }
    let r = StreamResampler::new(24_000, 48_000).unwrap();
    assert!(r.latency_secs() < 0.003, "{} s", r.latency_secs());
}

#[test]
fn reset_starts_a_fresh_stream() {
    let mut r = StreamResampler::new(24_000, 22_050).unwrap();
    let a = signal(3_000, 24_000);
    let b: Vec<f32> = signal(4_000, 24_000).iter().map(|v| -v).collect();
    let fresh_b = StreamResampler::new(24_000, 22_050)
        .unwrap()
        .process_all(&b);
    let mut out = Vec::new();
    r.step(&a, &mut out); // abandoned mid-stream
    r.reset();
    let again = stream(&mut r, &b, &[1920]);
    assert_eq!(again, fresh_b);
    // flush() also leaves the resampler ready for the next stream.
    let after_flush = stream(&mut r, &b, &[1920]);
    assert_eq!(after_flush, fresh_b);
}

#[test]
fn rejects_rates_out_of_range_with_a_useful_message() {
    for (fi, fo, which) in [
        (24_000, 7_999, "output"),
        (24_000, 48_001, "output"),
        (24_000, 0, "output"),
        (0, 24_000, "input"),
    ] {
        match StreamResampler::new(fi, fo) {
            Err(e @ AudioError::InvalidSampleRate { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(which) && msg.contains("8000..=48000") || which == "input",
                    "{msg}"
                );
            }
            Err(other) => panic!("{fi}->{fo}: wrong error {other}"),
            Ok(_) => panic!("{fi}->{fo} accepted"),
        }
    }
    for fo in [8_000, 48_000] {
        StreamResampler::new(24_000, fo).unwrap();
    }
}
