//! Against the official reference path: `librosa.load(path, sr=None,
//! mono=True)` then `librosa.resample(y, orig_sr=sr, target_sr=24000)`
//! (soxr HQ), recorded by tools/make_audio_goldens.py into
//! tests/fixtures/audio/{official-*,soxr-hq-*}.wav. The lengths are equal.
//! The samples are not: the resamplers differ in their transition band
//! (ours: a 256-tap windowed sinc, cutoff 0.947 of Nyquist; soxr HQ: its
//! own design), so content near the lower Nyquist is filtered differently.
//! Observed: tones (all energy in band) match to rel-L2 ~1e-6 through every
//! decoder and the resampler; the speech-like signal, whose noise is flat to
//! the source's Nyquist, to rel-L2 3.5e-3..4.9e-3, all of that difference
//! in the top kHz of the band (a DFT of the difference: 7-8 kHz for a
//! 16 kHz source, 11-12 kHz for 44.1 kHz), where speech has little energy.

use std::f64::consts::PI;
use std::path::{Path, PathBuf};

use tts_audio::ReferenceAudio;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/audio")
        .join(name)
}

fn read_f32_wav(name: &str) -> Vec<f32> {
    let mut r = hound::WavReader::open(fixture(name)).unwrap();
    assert_eq!(r.spec().sample_rate, 24_000, "{name}");
    r.samples::<f32>().map(|s| s.unwrap()).collect()
}

/// ‖a − b‖ / ‖b‖ over `a[skip..len−skip]`, and the largest |a − b| there.
fn compare(a: &[f32], b: &[f32], skip: usize) -> (f64, f64) {
    let n = a.len();
    let (mut num, mut den, mut max) = (0.0f64, 0.0f64, 0.0f64);
    for j in skip..n - skip {
        let d = a[j] as f64 - b[j] as f64;
        num += d * d;
        den += (b[j] as f64).powi(2);
        max = max.max(d.abs());
    }
    ((num / den).sqrt(), max)
}

/// The signal tools/make_audio_goldens.py resamples (same arithmetic:
/// f64, rounded to f32).
fn speech_like(n: usize, rate: u32) -> Vec<f32> {
    let mut seed = 0x2545_f491_u32;
    (0..n)
        .map(|i| {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (seed >> 8) as f64 / (1u32 << 24) as f64 - 0.5;
            let t = i as f64 / rate as f64;
            (0.3 * (2.0 * PI * 180.0 * t).sin()
                + 0.2 * (2.0 * PI * 1_234.5 * t).sin()
                + 0.1 * (2.0 * PI * 3_300.0 * t).sin()
                + 0.05 * (2.0 * PI * 7_000.0 * t).sin()
                + 0.1 * noise) as f32
        })
        .collect()
}

#[test]
fn resampling_matches_soxr_hq_within_tolerance() {
    for rate in [16_000u32, 22_050, 44_100, 48_000] {
        let x = speech_like(rate as usize / 2, rate);
        let ours = ReferenceAudio::from_samples(x, rate, 1).unwrap().samples;
        let official = read_f32_wav(&format!("soxr-hq-{rate}.wav"));
        assert_eq!(ours.len(), official.len(), "{rate} Hz: length");
        let (rel, max) = compare(&ours, &official, 64);
        eprintln!("{rate} Hz: rel-L2 {rel:.2e}, max {max:.2e}");
        assert!(rel < 7e-3, "{rate} Hz: rel-L2 {rel}");
    }
}

#[test]
fn decoded_fixtures_match_the_official_load_and_resample() {
    for (file, golden) in [
        (
            "tone440-44100-stereo.flac",
            "official-tone440-44100-stereo-flac.wav",
        ),
        (
            "tone440-22050-mono.mp3",
            "official-tone440-22050-mono-mp3.wav",
        ),
        (
            "tone440-48000-stereo.ogg",
            "official-tone440-48000-stereo-ogg.wav",
        ),
    ] {
        let ours = ReferenceAudio::from_path(&fixture(file)).unwrap().samples;
        let official = read_f32_wav(golden);
        assert_eq!(ours.len(), official.len(), "{file}: length");
        let (rel, max) = compare(&ours, &official, 64);
        eprintln!("{file}: rel-L2 {rel:.2e}, max {max:.2e}");
        assert!(rel < 2e-5 && max < 2e-5, "{file}: rel-L2 {rel}, max {max}");
    }
}
