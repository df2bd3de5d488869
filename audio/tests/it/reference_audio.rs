//! Reference audio in: every WAV sample format, mono and stereo, at common
//! rates (made here with hound) and the committed FLAC, MP3, OGG/Vorbis and
//! M4A/AAC tones (tests/fixtures/audio/, made by
//! tools/make_audio_fixtures.sh) decode to 24 kHz mono of the right length
//! with the tone intact; each refusal has its own named test.

use std::f64::consts::PI;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tts_audio::reference::{MAX_SOURCE_RATE, MIN_SOURCE_RATE, SILENCE_PEAK_DBFS};
use tts_audio::{
    ReferenceAudio, ReferenceAudioError, MAX_REFERENCE_SECONDS, MIN_REFERENCE_SECONDS,
    REFERENCE_RATE,
};

const TONE_HZ: f64 = 440.0;
/// Mono tones are 0.5·sin; stereo ones 0.6·sin left and 0.2·sin right, so
/// the channel mean is 0.4·sin (the fixtures use the same amplitudes).
const MONO_AMP: f64 = 0.5;
const STEREO_MEAN_AMP: f64 = 0.4;
/// Samples at each end of a resampled clip left out of waveform checks: the
/// filter sees silence past the clip's edges (half of 256 taps at the source
/// rate, at most 128 source samples, i.e. <= 192 output samples at 16 kHz).
const EDGE: usize = 400;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/audio")
        .join(name)
}

fn tone(rate: u32, secs: f64, channels: u16) -> Vec<f32> {
    let n = (rate as f64 * secs).round() as usize;
    let amps: &[f64] = if channels == 1 {
        &[MONO_AMP]
    } else {
        &[0.6, 0.2]
    };
    let mut out = Vec::with_capacity(n * amps.len());
    for i in 0..n {
        let s = (2.0 * PI * TONE_HZ * i as f64 / rate as f64).sin();
        for a in amps {
            out.push((a * s) as f32);
        }
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum WavKind {
    U8,
    I16,
    I24,
    F32,
}

/// A WAV file in memory, written with hound from interleaved floats.
fn wav(samples: &[f32], rate: u32, channels: u16, kind: WavKind) -> Vec<u8> {
    let (bits, format) = match kind {
        WavKind::U8 => (8, hound::SampleFormat::Int),
        WavKind::I16 => (16, hound::SampleFormat::Int),
        WavKind::I24 => (24, hound::SampleFormat::Int),
        WavKind::F32 => (32, hound::SampleFormat::Float),
    };
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: bits,
        sample_format: format,
    };
    let mut buf = Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut buf, spec).unwrap();
    for &s in samples {
        let s64 = s as f64;
        match kind {
            WavKind::U8 => w.write_sample((s64 * 128.0).round().clamp(-128.0, 127.0) as i8),
            WavKind::I16 => w.write_sample((s64 * 32768.0).round().clamp(-32768.0, 32767.0) as i16),
            WavKind::I24 => {
                w.write_sample((s64 * 8_388_608.0).round().clamp(-8_388_608.0, 8_388_607.0) as i32)
            }
            WavKind::F32 => w.write_sample(s),
        }
        .unwrap();
    }
    w.finalize().unwrap();
    buf.into_inner()
}

/// Largest |x[j] − amp·sin(2π·440·j/24000)| away from the edges.
fn sine_error(x: &[f32], amp: f64) -> f64 {
    x.iter()
        .enumerate()
        .skip(EDGE)
        .take(x.len().saturating_sub(2 * EDGE))
        .map(|(j, &s)| {
            let want = amp * (2.0 * PI * TONE_HZ * j as f64 / REFERENCE_RATE as f64).sin();
            (s as f64 - want).abs()
        })
        .fold(0.0, f64::max)
}

/// The tone's frequency from its rising zero crossings (linearly
/// interpolated) in the middle 80% of the clip (clear of edges and of an
/// AAC clip's leading priming silence): (crossings − 1) periods between the
/// first and the last.
fn frequency(x: &[f32], rate: u32) -> f64 {
    let mut first = None;
    let mut last = 0.0;
    let mut count = 0usize;
    for j in x.len() / 10..x.len() * 9 / 10 {
        let (a, b) = (x[j - 1] as f64, x[j] as f64);
        if a < 0.0 && b >= 0.0 {
            let t = (j - 1) as f64 + a / (a - b);
            first.get_or_insert(t);
            last = t;
            count += 1;
        }
    }
    let first = first.expect("the tone has zero crossings");
    (count - 1) as f64 / ((last - first) / rate as f64)
}

fn rms(x: &[f32]) -> f64 {
    let inner = &x[EDGE..x.len() - EDGE];
    (inner.iter().map(|&s| (s as f64).powi(2)).sum::<f64>() / inner.len() as f64).sqrt()
}

#[test]
fn wav_every_sample_format_rate_and_layout_decodes_to_the_same_24k_tone() {
    for kind in [WavKind::U8, WavKind::I16, WavKind::I24, WavKind::F32] {
        for channels in [1u16, 2] {
            for rate in [16_000u32, 22_050, 44_100, 48_000] {
                let bytes = wav(&tone(rate, 1.0, channels), rate, channels, kind);
                let what = format!("{kind:?} {channels} ch {rate} Hz");
                let r = ReferenceAudio::from_bytes(&bytes, Some("clip.wav"))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(r.source_rate, rate, "{what}");
                assert_eq!(r.source_channels, channels, "{what}");
                assert_eq!(r.source_format, "WAV/PCM", "{what}");
                assert_eq!(r.duration_secs, 1.0, "{what}");
                // librosa's length: 24,001 for 1 s at 22.05 and 44.1 kHz.
                let want = tts_audio::resample::offline_len(rate as usize, rate, REFERENCE_RATE);
                assert_eq!(r.samples.len(), want, "{what}");
                assert!(want == 24_000 || want == 24_001, "{what}");
                let amp = if channels == 1 {
                    MONO_AMP
                } else {
                    STEREO_MEAN_AMP
                };
                // Quantisation (8-bit: 1/256 of full scale per step,
                // 16-bit: 1/65536) plus the resampler's error, which is
                // below 3e-6 with exact time alignment (observed: 5.3e-3,
                // 2.4e-5, 2.9e-6, 2.9e-6). A misalignment of 1/128 of an
                // input sample alone would give ~1e-3 at 8-16 kHz.
                let tol = match kind {
                    WavKind::U8 => 8e-3,
                    WavKind::I16 => 5e-5,
                    WavKind::I24 | WavKind::F32 => 1e-5,
                };
                let err = sine_error(&r.samples, amp);
                assert!(err <= tol, "{what}: max error {err} > {tol}");
                let f = frequency(&r.samples, REFERENCE_RATE);
                assert!((f - TONE_HZ).abs() < 0.01, "{what}: tone at {f} Hz");
            }
        }
    }
}

#[test]
fn debug_summarises_the_samples() {
    let r = ReferenceAudio::from_samples(tone(24_000, 1.0, 1), 24_000, 1).unwrap();
    let d = format!("{r:?}");
    assert!(
        d.contains("[24000 samples at 24 kHz]") && d.len() < 200,
        "{d}"
    );
}

#[test]
fn more_channels_are_averaged() {
    // Four channels: 0.8, 0.4, 0.0 and -0.4 times the tone, mean 0.2.
    let gains = [0.8f32, 0.4, 0.0, -0.4];
    let mono = tone(48_000, 1.0, 1);
    let x: Vec<f32> = mono
        .iter()
        .flat_map(|&s| gains.map(|g| g * s / MONO_AMP as f32))
        .collect();
    let r = ReferenceAudio::from_bytes(&wav(&x, 48_000, 4, WavKind::F32), None).unwrap();
    assert_eq!(r.source_channels, 4);
    let err = sine_error(&r.samples, 0.2);
    assert!(err < 1e-5, "max error {err}");
}

#[test]
fn the_format_is_recognised_from_the_content_not_the_name() {
    let bytes = std::fs::read(fixture("tone440-44100-stereo.flac")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actually-flac.wav");
    std::fs::write(&path, &bytes).unwrap();
    let r = ReferenceAudio::from_path(&path).unwrap();
    assert_eq!(r.source_format, "FLAC");
    let r = ReferenceAudio::from_bytes(&bytes, Some("upload.mp3")).unwrap();
    assert_eq!(r.source_format, "FLAC");
}

#[test]
fn errors_can_cross_threads() {
    fn send_sync<T: Send + Sync + std::error::Error + 'static>() {}
    send_sync::<ReferenceAudioError>();
}

#[test]
fn a_24k_float_clip_passes_through_unchanged() {
    let x = tone(24_000, 1.0, 1);
    let bytes = wav(&x, 24_000, 1, WavKind::F32);
    let r = ReferenceAudio::from_bytes(&bytes, None).unwrap();
    assert_eq!(r.samples, x);
    let r = ReferenceAudio::from_samples(x.clone(), 24_000, 1).unwrap();
    assert_eq!(r.samples, x);
    assert_eq!(r.source_format, "samples");
}

#[test]
fn from_samples_means_interleaved_channels_and_resamples() {
    let r = ReferenceAudio::from_samples(tone(44_100, 1.0, 2), 44_100, 2).unwrap();
    assert_eq!(r.samples.len(), 24_001);
    assert_eq!(r.source_channels, 2);
    let err = sine_error(&r.samples, STEREO_MEAN_AMP);
    assert!(err < 1e-5, "max error {err}");
}

#[test]
fn eight_khz_and_192_khz_sources_are_converted() {
    for rate in [MIN_SOURCE_RATE, 96_000, MAX_SOURCE_RATE] {
        let r = ReferenceAudio::from_samples(tone(rate, 0.75, 1), rate, 1).unwrap();
        assert_eq!(r.samples.len(), 18_000, "{rate} Hz");
        let err = sine_error(&r.samples, MONO_AMP);
        assert!(err < 1e-5, "{rate} Hz: max error {err}");
    }
}

/// A tone of `hz` at `rate`, converted to 24 kHz: its RMS over the middle
/// (amplitude 1 gives 1/√2).
fn converted_rms(hz: f64, rate: u32) -> f64 {
    let x: Vec<f32> = (0..rate as usize)
        .map(|i| (2.0 * PI * hz * i as f64 / rate as f64).sin() as f32 * 0.5)
        .collect();
    let r = ReferenceAudio::from_samples(x, rate, 1).unwrap();
    rms(&r.samples) / 0.5
}

#[test]
fn pass_band_reaches_ten_khz_and_aliases_are_rejected() {
    // Flat to 10 kHz (0.83 of the 12 kHz Nyquist; soxr HQ, the official
    // resampler, is flat to ~0.95): within 0.1 dB.
    for rate in [44_100u32, 48_000, 96_000, 192_000] {
        for hz in [1_000.0, 5_000.0, 10_000.0] {
            let gain = converted_rms(hz, rate) * 2f64.sqrt();
            assert!(
                (20.0 * gain.log10()).abs() < 0.1,
                "{rate} Hz source, {hz} Hz tone: gain {gain}"
            );
        }
        // Above 12 kHz nothing may fold back into the band.
        for hz in [13_000.0, 16_000.0, 20_000.0] {
            let gain = converted_rms(hz, rate) * 2f64.sqrt();
            assert!(
                20.0 * gain.log10() < -60.0,
                "{rate} Hz source, {hz} Hz tone leaks: gain {gain}"
            );
        }
    }
}

struct Compressed {
    file: &'static str,
    rate: u32,
    channels: u16,
    format: &'static str,
    /// Allowed |decoded duration − 1 s|.
    duration_tol: f64,
}

const COMPRESSED: [Compressed; 4] = [
    Compressed {
        file: "tone440-44100-stereo.flac",
        rate: 44_100,
        channels: 2,
        format: "FLAC",
        duration_tol: 0.0,
    },
    // Gapless (LAME tag): the encoder delay and padding are trimmed.
    Compressed {
        file: "tone440-22050-mono.mp3",
        rate: 22_050,
        channels: 1,
        format: "MP3",
        duration_tol: 0.0,
    },
    Compressed {
        file: "tone440-48000-stereo.ogg",
        rate: 48_000,
        channels: 2,
        format: "OGG/Vorbis",
        duration_tol: 0.0,
    },
    // The edit list is not applied: the encoder's 1,024 priming samples
    // stay (see the module docs), so the clip runs 23 ms long.
    Compressed {
        file: "tone440-44100-stereo.m4a",
        rate: 44_100,
        channels: 2,
        format: "M4A/AAC",
        duration_tol: 1024.0 / 44_100.0 + 1e-9,
    },
];

#[test]
fn compressed_fixtures_decode_to_the_right_length_with_the_tone_intact() {
    for c in &COMPRESSED {
        let r = ReferenceAudio::from_path(&fixture(c.file))
            .unwrap_or_else(|e| panic!("{}: {e}", c.file));
        assert_eq!(r.source_rate, c.rate, "{}", c.file);
        assert_eq!(r.source_channels, c.channels, "{}", c.file);
        assert_eq!(r.source_format, c.format, "{}", c.file);
        assert!(
            (r.duration_secs - 1.0).abs() <= c.duration_tol,
            "{}: {} s",
            c.file,
            r.duration_secs
        );
        let frames = (r.duration_secs * c.rate as f64).round() as usize;
        let want_len = tts_audio::resample::offline_len(frames, c.rate, REFERENCE_RATE);
        assert_eq!(r.samples.len(), want_len, "{}", c.file);
        let f = frequency(&r.samples, REFERENCE_RATE);
        assert!((f - TONE_HZ).abs() < 0.2, "{}: tone at {f} Hz", c.file);
        let amp = if c.channels == 1 {
            MONO_AMP
        } else {
            STEREO_MEAN_AMP
        };
        // No normalisation: the level is the encoded one. The 64 kbit/s MP3
        // is 0.45 dB low (ffmpeg decodes it to the same level).
        let level = rms(&r.samples) * 2f64.sqrt() / amp;
        assert!(
            (level - 1.0).abs() < 0.06,
            "{}: level {level} of expected",
            c.file
        );
        // The same bytes from memory give the same clip.
        let bytes = std::fs::read(fixture(c.file)).unwrap();
        let m = ReferenceAudio::from_bytes(&bytes, Some(c.file)).unwrap();
        assert_eq!(m, r, "{}: from_bytes == from_path", c.file);
    }
}

/// A raw `.aac` (ADTS) clip, as `response_format: "aac"` writes one: its
/// length is symphonia's estimate from the first frames, not a declared
/// count, so a complete clip must not be refused as truncated.
#[test]
fn adts_aac_clip_is_read_whole_not_refused_as_truncated() {
    let rate = 24000;
    let x: Vec<f32> = (0..(2.5 * rate as f64) as usize)
        .map(|i| (0.3 * (2.0 * PI * TONE_HZ * i as f64 / rate as f64).sin()) as f32)
        .collect();
    let mut enc = tts_audio::Format::Aac.encoder(rate).expect("aac encoder");
    let mut bytes = Vec::new();
    enc.push(&x, &mut bytes).unwrap();
    enc.finish(&mut bytes).unwrap();
    let r = ReferenceAudio::from_bytes(&bytes, Some("clip.aac"))
        .unwrap_or_else(|e| panic!("a whole ADTS clip: {e}"));
    // The encoder's delay and last-frame padding come along (ADTS states
    // neither): at least the clip, at most ~0.2 s more.
    assert!(
        r.duration_secs >= 2.5 && r.duration_secs < 2.5 + 0.2,
        "{} s",
        r.duration_secs
    );
    let f = frequency(&r.samples, REFERENCE_RATE);
    assert!((f - TONE_HZ).abs() < 0.5, "tone at {f} Hz");
}

#[test]
fn lossless_fixture_matches_the_tone_sample_for_sample() {
    let r = ReferenceAudio::from_path(&fixture("tone440-44100-stereo.flac")).unwrap();
    let err = sine_error(&r.samples, STEREO_MEAN_AMP);
    assert!(err < 2e-4, "max error {err}");
}

// ---- refusals ------------------------------------------------------------

/// Deterministic pseudo-random bytes.
fn noise_bytes(n: usize, mut seed: u32) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 24) as u8
        })
        .collect()
}

#[test]
fn unreadable_file_random_bytes_is_refused() {
    for seed in [1u32, 2, 3, 4] {
        let err =
            ReferenceAudio::from_bytes(&noise_bytes(16_384, seed), Some("x.wav")).unwrap_err();
        assert!(
            matches!(
                err,
                ReferenceAudioError::Unsupported { .. } | ReferenceAudioError::Corrupt { .. }
            ),
            "seed {seed}: {err:?}"
        );
    }
    let text = b"this is a text file, not audio\n".repeat(100);
    let err = ReferenceAudio::from_bytes(&text, Some("notes.txt")).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::Unsupported { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("WAV, FLAC, MP3, OGG/Vorbis, OGG/Opus, WebM/Opus or M4A/AAC")
            && msg.contains(".txt"),
        "{msg}"
    );
}

fn assert_truncated(name: &str, bytes: &[u8]) {
    let half = &bytes[..bytes.len() / 2];
    match ReferenceAudio::from_bytes(half, Some(name)) {
        Err(ReferenceAudioError::Corrupt { detail }) => {
            assert!(!detail.is_empty(), "{name}");
        }
        other => panic!("{name} cut in half: expected Corrupt, got {other:?}"),
    }
}

#[test]
fn truncated_wav_is_corrupt() {
    let bytes = wav(&tone(16_000, 2.0, 1), 16_000, 1, WavKind::I16);
    assert_truncated("clip.wav", &bytes);
    // One sample short is still truncation.
    let err = ReferenceAudio::from_bytes(&bytes[..bytes.len() - 2], None).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::Corrupt { ref detail } if detail.contains("truncated")),
        "{err:?}"
    );
}

#[test]
fn truncated_flac_is_corrupt() {
    assert_truncated(
        "flac",
        &std::fs::read(fixture("tone440-44100-stereo.flac")).unwrap(),
    );
}

#[test]
fn truncated_mp3_is_corrupt() {
    // Detected through the Xing/Info header's frame count (LAME and ffmpeg
    // write one); a bare MP3 without it cannot tell (see the module docs).
    assert_truncated(
        "mp3",
        &std::fs::read(fixture("tone440-22050-mono.mp3")).unwrap(),
    );
}

#[test]
fn mp3_without_a_xing_header_decodes_and_truncation_cannot_be_told() {
    // No Xing/Info frame: symphonia only estimates the length, so it is
    // not trusted (a trailing ID3v1 tag would make the estimate one frame
    // long and a complete file look truncated), and the encoder's delay and
    // padding (1,105 + 461 samples here) are not trimmed.
    let bytes = std::fs::read(fixture("tone440-22050-mono-noxing.mp3")).unwrap();
    let full = ReferenceAudio::from_bytes(&bytes, Some("mp3")).unwrap();
    assert!(
        full.duration_secs > 1.0 && full.duration_secs < 1.1,
        "{}",
        full.duration_secs
    );
    let f = frequency(&full.samples, REFERENCE_RATE);
    assert!((f - TONE_HZ).abs() < 0.2, "tone at {f} Hz");
    let mut tagged = bytes.clone();
    let mut id3v1 = b"TAG".to_vec();
    id3v1.resize(128, b' ');
    tagged.extend_from_slice(&id3v1);
    let r = ReferenceAudio::from_bytes(&tagged, Some("mp3")).unwrap();
    assert_eq!(r.duration_secs, full.duration_secs);
    // Cut in half it looks complete: a shorter clip, the documented limit.
    let half = ReferenceAudio::from_bytes(&bytes[..bytes.len() / 2], Some("mp3")).unwrap();
    assert!(
        (half.duration_secs - full.duration_secs / 2.0).abs() < 0.1,
        "{}",
        half.duration_secs
    );
}

#[test]
fn flac_whose_header_leaves_the_length_unknown_decodes() {
    // STREAMINFO's 36-bit total-samples field set to 0 ("unknown", as a
    // streaming encoder writes it): decoded to the end, no truncation check.
    let mut bytes = std::fs::read(fixture("tone440-44100-stereo.flac")).unwrap();
    assert_eq!(&bytes[..4], b"fLaC");
    let mut word = u64::from_be_bytes(bytes[18..26].try_into().unwrap());
    assert_eq!(
        word & ((1 << 36) - 1),
        44_100,
        "total samples in STREAMINFO"
    );
    word &= !((1u64 << 36) - 1);
    bytes[18..26].copy_from_slice(&word.to_be_bytes());
    let r = ReferenceAudio::from_bytes(&bytes, Some("flac")).unwrap();
    assert_eq!(r.duration_secs, 1.0);
}

#[test]
fn truncated_ogg_is_corrupt() {
    let bytes = std::fs::read(fixture("tone440-48000-stereo.ogg")).unwrap();
    assert_truncated("ogg", &bytes);
    // Cut inside the last page: its granule position is gone.
    let err = ReferenceAudio::from_bytes(&bytes[..bytes.len() * 9 / 10], None).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::Corrupt { ref detail } if detail.contains("truncated")),
        "{err:?}"
    );
}

#[test]
fn truncated_m4a_is_refused_as_truncated() {
    // ffmpeg writes the index after the audio: half a file has none, and
    // the audio's mdat box runs past the end of the file.
    let bytes = std::fs::read(fixture("tone440-44100-stereo.m4a")).unwrap();
    let half = &bytes[..bytes.len() / 2];
    let err = ReferenceAudio::from_bytes(half, Some("m4a")).unwrap_err();
    match &err {
        ReferenceAudioError::Truncated {
            format,
            part,
            claimed,
            available,
        } => {
            assert_eq!((*format, part.as_str()), ("M4A", "mdat box"));
            assert_eq!(*claimed, 12_115, "the fixture's mdat");
            assert_eq!(*available, half.len() as u64 - 36, "from the mdat on");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[test]
fn empty_file_is_refused() {
    let err = ReferenceAudio::from_bytes(&[], None).unwrap_err();
    assert!(matches!(err, ReferenceAudioError::Empty), "{err:?}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.wav");
    std::fs::write(&path, b"").unwrap();
    let err = ReferenceAudio::from_path(&path).unwrap_err();
    assert!(matches!(err, ReferenceAudioError::Empty), "{err:?}");
}

#[test]
fn header_only_wav_is_too_short() {
    let bytes = wav(&[], 16_000, 1, WavKind::I16);
    let err = ReferenceAudio::from_bytes(&bytes, None).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::TooShort { secs, .. } if secs == 0.0),
        "{err:?}"
    );
}

#[test]
fn clip_of_two_hundredths_of_a_second_is_too_short() {
    let bytes = wav(&tone(16_000, 0.02, 1), 16_000, 1, WavKind::I16);
    let err = ReferenceAudio::from_bytes(&bytes, None).unwrap_err();
    match err {
        ReferenceAudioError::TooShort { secs, min } => {
            assert!((secs - 0.02).abs() < 1e-9, "{secs}");
            assert_eq!(min, MIN_REFERENCE_SECONDS);
        }
        other => panic!("{other:?}"),
    }
    // The minimum itself is accepted.
    let ok = ReferenceAudio::from_samples(tone(16_000, MIN_REFERENCE_SECONDS, 1), 16_000, 1);
    assert!(ok.is_ok(), "{ok:?}");
}

#[test]
fn ten_minutes_of_audio_is_too_long_and_refused_fast() {
    // A 10-minute 16 kHz WAV on disk (19 MB): refused from its header
    // without decoding, so `secs` is the declared length.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.wav");
    {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 16_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(&path, spec).unwrap();
        let mut w16 = w.get_i16_writer(16_000 * 600);
        for i in 0..16_000 * 600 {
            w16.write_sample(((i % 100) as i16 - 50) * 100);
        }
        w16.flush().unwrap();
        w.finalize().unwrap();
    }
    let start = Instant::now();
    let err = ReferenceAudio::from_path(&path).unwrap_err();
    let took = start.elapsed();
    match err {
        ReferenceAudioError::TooLong { secs, max } => {
            assert_eq!(secs, 600.0);
            assert_eq!(max, MAX_REFERENCE_SECONDS);
        }
        other => panic!("{other:?}"),
    }
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

/// A WAV as ffmpeg writes it to a pipe: RIFF and data sizes 0xFFFF_FFFF
/// ("unknown"), so only decoding can tell the length.
fn pipe_wav(samples: &[f32], rate: u32) -> Vec<u8> {
    let mut bytes = wav(samples, rate, 1, WavKind::I16);
    bytes[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    let data = bytes
        .windows(4)
        .position(|w| w == b"data")
        .expect("a data chunk");
    bytes[data + 4..data + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    bytes
}

#[test]
fn a_stream_without_a_declared_length_stops_decoding_at_the_limit() {
    let bytes = pipe_wav(&tone(16_000, 600.0, 1), 16_000);
    let start = Instant::now();
    let err = ReferenceAudio::from_bytes(&bytes, Some("long.wav")).unwrap_err();
    let took = start.elapsed();
    match err {
        ReferenceAudioError::TooLong { secs, max } => {
            // Stopped within a packet of the limit, not at 600 s.
            assert!(secs > max && secs < max + 1.0, "{secs}");
        }
        other => panic!("{other:?}"),
    }
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let long = ReferenceAudio::from_samples(vec![0.1; 16_000 * 61], 16_000, 1).unwrap_err();
    assert!(
        matches!(long, ReferenceAudioError::TooLong { .. }),
        "{long:?}"
    );
}

#[test]
fn a_pipe_wav_of_unknown_length_decodes() {
    let r = ReferenceAudio::from_bytes(&pipe_wav(&tone(16_000, 2.0, 1), 16_000), None).unwrap();
    // Symphonia drops the last partial packet of such a stream.
    assert!(
        r.duration_secs <= 2.0 && r.duration_secs > 1.9,
        "{}",
        r.duration_secs
    );
}

#[test]
fn silence_is_refused() {
    let zeros = vec![0.0f32; 16_000];
    let err = ReferenceAudio::from_bytes(&wav(&zeros, 16_000, 1, WavKind::I16), None).unwrap_err();
    match err {
        ReferenceAudioError::Silent {
            peak_dbfs,
            threshold,
        } => {
            assert_eq!(peak_dbfs, f64::NEG_INFINITY);
            assert_eq!(threshold, SILENCE_PEAK_DBFS);
        }
        other => panic!("{other:?}"),
    }
    // -70 dBFS: refused; -50 dBFS: accepted (no normalisation).
    let quiet = |dbfs: f64| -> Vec<f32> {
        let a = 10f64.powf(dbfs / 20.0) / MONO_AMP;
        tone(16_000, 1.0, 1)
            .iter()
            .map(|&s| (s as f64 * a) as f32)
            .collect()
    };
    let err = ReferenceAudio::from_samples(quiet(-70.0), 16_000, 1).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::Silent { peak_dbfs, .. } if (peak_dbfs + 70.0).abs() < 0.1),
        "{err:?}"
    );
    let ok = ReferenceAudio::from_samples(quiet(-50.0), 16_000, 1).unwrap();
    let peak = ok.samples.iter().fold(0f32, |m, s| m.max(s.abs())) as f64;
    assert!((20.0 * peak.log10() + 50.0).abs() < 0.1, "peak {peak}");
    // Stereo channels in antiphase average to silence, as mono=True does.
    let anti: Vec<f32> = tone(16_000, 1.0, 1).iter().flat_map(|&s| [s, -s]).collect();
    let err = ReferenceAudio::from_samples(anti, 16_000, 2).unwrap_err();
    assert!(matches!(err, ReferenceAudioError::Silent { .. }), "{err:?}");
}

#[test]
fn a_directory_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = ReferenceAudio::from_path(dir.path()).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::NotAFile { ref path } if path == dir.path()),
        "{err:?}"
    );
    assert!(err.to_string().contains("is not a file"), "{err}");
}

#[test]
fn a_missing_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.wav");
    let err = ReferenceAudio::from_path(&path).unwrap_err();
    match &err {
        ReferenceAudioError::Io { path: p, error } => {
            assert_eq!(p, &path);
            assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("nope.wav"), "{err}");
}

#[test]
fn non_finite_float_samples_are_corrupt() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut x = tone(16_000, 1.0, 2);
        x[2_001] = bad;
        let err = ReferenceAudio::from_bytes(&wav(&x, 16_000, 2, WavKind::F32), None).unwrap_err();
        assert!(
            matches!(err, ReferenceAudioError::Corrupt { ref detail } if detail.contains("frame 1000")),
            "{bad}: {err:?}"
        );
        let err = ReferenceAudio::from_samples(x, 16_000, 2).unwrap_err();
        assert!(
            matches!(err, ReferenceAudioError::Corrupt { ref detail } if detail.contains("frame 1000")),
            "{bad}: {err:?}"
        );
    }
}

#[test]
fn bad_rates_and_layouts_are_refused() {
    for rate in [0u32, 4_000, 7_999, 192_001, 1_000_000] {
        let err = ReferenceAudio::from_samples(vec![0.5; 16_000], rate, 1).unwrap_err();
        assert!(
            matches!(err, ReferenceAudioError::BadRate { rate: r, .. } if r == rate),
            "{rate}: {err:?}"
        );
    }
    // In a file header too.
    let bytes = wav(&tone(4_000, 1.0, 1), 4_000, 1, WavKind::I16);
    let err = ReferenceAudio::from_bytes(&bytes, None).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::BadRate { rate: 4_000, .. }),
        "{err:?}"
    );
    let err = ReferenceAudio::from_samples(vec![0.5; 16_001], 16_000, 2).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::Corrupt { .. }),
        "{err:?}"
    );
    let err = ReferenceAudio::from_samples(vec![0.5; 16_000], 16_000, 0).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::BadChannels { channels: 0, .. }),
        "{err:?}"
    );
}

// ---- crafted headers (issue 28): refused by name, never an abort ---------

/// The byte offset of the box at `path` (each step a child of the last,
/// from the top level) in an MP4 file: a test-side walker over the
/// committed fixture's plain 32-bit box sizes.
fn mp4_box(bytes: &[u8], path: &[&[u8; 4]]) -> usize {
    let (mut start, mut end) = (0usize, bytes.len());
    let mut found = 0;
    for (depth, want) in path.iter().enumerate() {
        let mut pos = start;
        loop {
            assert!(pos + 8 <= end, "no {:?} box", std::str::from_utf8(*want));
            let size = u32::from_be_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
            if &bytes[pos + 4..pos + 8] == *want {
                found = pos;
                // stsd's entries follow its 8-byte version/flags/count.
                start = pos + if *want == b"stsd" { 16 } else { 8 };
                end = pos + size;
                break;
            }
            pos += size;
        }
        let _ = depth;
    }
    found
}

const STBL: [&[u8; 4]; 5] = [b"moov", b"trak", b"mdia", b"minf", b"stbl"];

/// The M4A fixture with the big-endian u32 at `offset` bytes into the box
/// at `path` set to `value`.
fn m4a_with(path: &[&[u8; 4]], offset: usize, value: u32) -> Vec<u8> {
    let mut bytes = std::fs::read(fixture("tone440-44100-stereo.m4a")).unwrap();
    let at = mp4_box(&bytes, path) + offset;
    bytes[at..at + 4].copy_from_slice(&value.to_be_bytes());
    bytes
}

fn in_stbl(name: &'static [u8; 4]) -> Vec<&'static [u8; 4]> {
    let mut p = STBL.to_vec();
    p.push(name);
    p
}

#[test]
fn an_m4a_whose_stsc_claims_2_pow_32_entries_is_refused_not_aborted() {
    // Its entry count sits after the box header (8) and version/flags (4).
    // Trusted, it asks for 2^32 entries of 16 bytes: 64 GiB.
    let bytes = m4a_with(&in_stbl(b"stsc"), 12, u32::MAX);
    let err = ReferenceAudio::from_bytes(&bytes, Some("clip.m4a")).unwrap_err();
    match &err {
        ReferenceAudioError::TableOverrun {
            format,
            table,
            entries,
            entry_bytes,
            available,
        } => {
            assert_eq!(*format, "M4A");
            assert_eq!(*table, "stsc box");
            assert_eq!(*entries, u64::from(u32::MAX));
            assert_eq!(*entry_bytes, 12);
            assert_eq!(*available, 12, "the fixture's one 12-byte entry");
        }
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("stsc box claims 4294967295 entries") && msg.contains("holds 12 bytes"),
        "{msg}"
    );
}

#[test]
fn an_m4a_whose_stts_claims_2_pow_32_entries_is_refused_not_aborted() {
    // 2^32 entries of 8 bytes: 32 GiB.
    let bytes = m4a_with(&in_stbl(b"stts"), 12, u32::MAX);
    let err = ReferenceAudio::from_bytes(&bytes, Some("clip.m4a")).unwrap_err();
    assert!(
        matches!(
            err,
            ReferenceAudioError::TableOverrun {
                table: "stts box",
                entries: 4_294_967_295,
                entry_bytes: 8,
                available: 16,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn an_m4a_whose_stsz_stco_or_elst_overrun_their_boxes_is_refused() {
    // stsz: sample size 0 (a table follows) and 2^32 - 1 samples: 16 GiB.
    let bytes = m4a_with(&in_stbl(b"stsz"), 16, u32::MAX);
    let err = ReferenceAudio::from_bytes(&bytes, None).unwrap_err();
    assert!(
        matches!(
            err,
            ReferenceAudioError::TableOverrun {
                table: "stsz box",
                entry_bytes: 4,
                ..
            }
        ),
        "{err:?}"
    );
    let bytes = m4a_with(&in_stbl(b"stco"), 12, 0x7fff_ffff);
    let err = ReferenceAudio::from_bytes(&bytes, None).unwrap_err();
    assert!(
        matches!(
            err,
            ReferenceAudioError::TableOverrun {
                table: "stco box",
                entries: 0x7fff_ffff,
                ..
            }
        ),
        "{err:?}"
    );
    let bytes = m4a_with(&[b"moov", b"trak", b"edts", b"elst"], 12, u32::MAX);
    let err = ReferenceAudio::from_bytes(&bytes, None).unwrap_err();
    assert!(
        matches!(
            err,
            ReferenceAudioError::TableOverrun {
                table: "elst box",
                entry_bytes: 12,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn an_m4a_box_larger_than_its_parent_is_refused() {
    // stsc's size field says 1 MB inside a 448-byte stbl.
    let bytes = m4a_with(&in_stbl(b"stsc"), 0, 1 << 20);
    let err = ReferenceAudio::from_bytes(&bytes, None).unwrap_err();
    match &err {
        ReferenceAudioError::SizeOverrun {
            format,
            part,
            claimed,
            within,
            ..
        } => {
            assert_eq!(*format, "M4A");
            assert_eq!(part, "stsc box");
            assert_eq!(*claimed, 1 << 20);
            assert_eq!(within, "its stbl box");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_m4a_whose_mdhd_timescale_is_zero_is_refused_by_name() {
    // Version 0 mdhd: version/flags, creation and modification times, then
    // the timescale, which becomes the track's time base denominator.
    let bytes = m4a_with(&[b"moov", b"trak", b"mdia", b"mdhd"], 20, 0);
    let err = ReferenceAudio::from_bytes(&bytes, None).unwrap_err();
    match &err {
        ReferenceAudioError::BadField {
            format,
            field,
            value,
            ..
        } => {
            assert_eq!(*format, "M4A");
            assert_eq!(field, "mdhd timescale");
            assert_eq!(*value, 0);
        }
        other => panic!("{other:?}"),
    }
}

/// A 16-bit mono WAV of the tone with the u16/u32 fmt field at `offset`
/// bytes into the fmt chunk's body replaced.
fn wav_with_fmt(offset: usize, value: &[u8]) -> Vec<u8> {
    let mut bytes = wav(&tone(16_000, 1.0, 1), 16_000, 1, WavKind::I16);
    let fmt = bytes
        .windows(4)
        .position(|w| w == b"fmt ")
        .expect("a fmt chunk");
    let at = fmt + 8 + offset;
    bytes[at..at + value.len()].copy_from_slice(value);
    bytes
}

#[test]
fn a_wav_with_sample_rate_zero_is_refused_by_name() {
    let bytes = wav_with_fmt(4, &0u32.to_le_bytes());
    let err = ReferenceAudio::from_bytes(&bytes, Some("clip.wav")).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::BadRate { rate: 0, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("sample rate 0 Hz"), "{err}");
}

#[test]
fn a_wav_with_zero_or_absurd_channels_or_frame_size_is_refused_by_name() {
    for channels in [0u16, 33, 0xffff] {
        let bytes = wav_with_fmt(2, &channels.to_le_bytes());
        let err = ReferenceAudio::from_bytes(&bytes, None).unwrap_err();
        assert!(
            matches!(err, ReferenceAudioError::BadChannels { channels: c, .. } if c == channels),
            "{channels} channels: {err:?}"
        );
    }
    // block_align (bytes per frame) 0 and 65535 for one 16-bit channel.
    for align in [0u16, 0xffff] {
        let bytes = wav_with_fmt(12, &align.to_le_bytes());
        let err = ReferenceAudio::from_bytes(&bytes, None).unwrap_err();
        assert!(
            matches!(err, ReferenceAudioError::BadField { ref field, value, .. } if field == "fmt block_align" && value == u64::from(align)),
            "block_align {align}: {err:?}"
        );
    }
}

#[test]
fn a_decoder_panic_is_an_error_naming_the_file_not_a_crash() {
    // Whatever slips past the container checks and trips a consistency
    // check inside the decoder comes back as an error value.
    let err = ReferenceAudioError::DecoderFault {
        format: "M4A",
        detail: "attempt to subtract with overflow".into(),
    };
    let msg = err.to_string();
    assert!(msg.contains("M4A") && !msg.contains("overflow"), "{msg}");
}

#[test]
fn an_m4a_is_walked_from_the_first_byte_as_the_demuxer_rereads_it() {
    // The demuxer finds the audio's first box again from the start of the
    // file, not from the ftyp its probe found, and reads any fragment (moof)
    // it meets there: a fragment ahead of ftyp whose run claims 2^28
    // four-byte sample sizes in an empty box is refused like any other.
    let trun: &[u8] = &[
        0, 0, 0, 16, b't', b'r', b'u', b'n', 0, 0, 2, 0, 0x10, 0, 0, 0,
    ];
    let mut bytes = [&[0, 0, 0, 32][..], b"moof", &[0, 0, 0, 24], b"traf", trun].concat();
    bytes.extend_from_slice(&std::fs::read(fixture("tone440-44100-stereo.m4a")).unwrap());
    let err = ReferenceAudio::from_bytes(&bytes, Some("m4a")).unwrap_err();
    assert!(
        matches!(
            err,
            ReferenceAudioError::TableOverrun {
                table: "trun box",
                entries: 0x1000_0000,
                entry_bytes: 4,
                available: 0,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_file_past_the_size_limit_is_refused_before_it_is_read() {
    let max = tts_audio::reference::MAX_REFERENCE_FILE_BYTES;
    let err = ReferenceAudio::from_bytes(&vec![0u8; max as usize + 1], None).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::TooLarge { bytes, max: m } if bytes == max + 1 && m == max),
        "{err:?}"
    );
}

/// Issue 31: a refusal that wraps another error (a read failure) said the
/// cause in its message and again as its source, so every renderer that
/// walks the chain printed it twice. The message carries it; the chain
/// stops there.
#[test]
fn reference_audio_errors_print_their_cause_once() {
    use std::error::Error as _;
    let dir = tempfile::tempdir().unwrap();
    let err = ReferenceAudio::from_path(&dir.path().join("nope.wav")).unwrap_err();
    assert!(err.to_string().contains("os error"), "{err}");
    assert!(err.source().is_none(), "{err}: {:?}", err.source());
}

/// Issue 31: a clip in Ogg Opus (what phones and browsers record:
/// MediaRecorder's `audio/ogg;codecs=opus`) was refused as "codec 0x1005".
/// The fixture (1 s of the stereo tone at 48 kHz through libopus, made by
/// tools/make_audio_fixtures.sh) decodes to exactly its 48,000 samples
/// (pre-skip dropped, the end trimmed to the last granule position) and to
/// the tone of its WAV source: the same frequency, level and waveform
/// within the codec's loss. Cut short, or with a damaged page, it is a
/// clean refusal.
#[test]
fn ogg_opus_clips_decode_like_their_wav_source() {
    let bytes = std::fs::read(fixture("tone440-48000-stereo.opus")).unwrap();
    let r = ReferenceAudio::from_bytes(&bytes, Some("opus")).unwrap();
    assert_eq!(r.source_format, "OGG/Opus");
    assert_eq!((r.source_rate, r.source_channels), (48_000, 2));
    assert_eq!(r.duration_secs, 1.0, "{r:?}");
    let source = ReferenceAudio::from_samples(tone(48_000, 1.0, 2), 48_000, 2).unwrap();
    assert_eq!(r.samples.len(), source.samples.len());
    let f = frequency(&r.samples, REFERENCE_RATE);
    assert!((f - TONE_HZ).abs() < 0.2, "tone at {f} Hz");
    let level = rms(&r.samples) / rms(&source.samples);
    assert!((level - 1.0).abs() < 0.06, "level {level} of the source");
    // The waveform, not just its spectrum: aligned with the source (the
    // pre-skip is dropped), within a few percent of its amplitude.
    let err = sine_error(&r.samples, STEREO_MEAN_AMP);
    assert!(err < 0.05, "largest difference from the source {err}");
    assert_eq!(
        ReferenceAudio::from_path(&fixture("tone440-48000-stereo.opus")).unwrap(),
        r
    );

    assert_truncated("opus", &bytes);
    // Cut at a page boundary: no end-of-stream page.
    let last_page = bytes.windows(4).rposition(|w| w == b"OggS").unwrap();
    let err = ReferenceAudio::from_bytes(&bytes[..last_page], None).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::Corrupt { ref detail } if detail.contains("truncated")),
        "{err:?}"
    );
    // A flipped byte in an audio page: its checksum fails.
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    let err = ReferenceAudio::from_bytes(&flipped, None).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::Corrupt { .. }),
        "{err:?}"
    );
}

/// Issue 31, item 4: Opus in WebM (Chrome's and Firefox's MediaRecorder
/// default, `audio/webm;codecs=opus`) was refused as an unsupported
/// format. The fixture (the same 1 s stereo tone as the Ogg Opus one,
/// through libopus into ffmpeg's WebM muxer, made by
/// tools/make_audio_fixtures.sh) decodes to its 48,000 samples (pre-skip
/// dropped, the last block's DiscardPadding trimmed) and to the tone of its
/// WAV source; with the Segment and Cluster sizes unknown, as a recorder
/// writes them, the same; cut short, a clean refusal.
#[test]
fn webm_opus_clips_decode_like_their_wav_source() {
    let bytes = std::fs::read(fixture("tone440-48000-stereo.webm")).unwrap();
    let r = ReferenceAudio::from_bytes(&bytes, Some("webm")).unwrap();
    assert_eq!(r.source_format, "WebM/Opus");
    assert_eq!((r.source_rate, r.source_channels), (48_000, 2));
    assert_eq!(r.duration_secs, 1.0, "{r:?}");
    let source = ReferenceAudio::from_samples(tone(48_000, 1.0, 2), 48_000, 2).unwrap();
    assert_eq!(r.samples.len(), source.samples.len());
    let f = frequency(&r.samples, REFERENCE_RATE);
    assert!((f - TONE_HZ).abs() < 0.2, "tone at {f} Hz");
    let level = rms(&r.samples) / rms(&source.samples);
    assert!((level - 1.0).abs() < 0.06, "level {level} of the source");
    let err = sine_error(&r.samples, STEREO_MEAN_AMP);
    assert!(err < 0.05, "largest difference from the source {err}");
    // The same packets as the Ogg Opus fixture (one encoder run each, the
    // same input and settings): the same samples.
    let ogg = std::fs::read(fixture("tone440-48000-stereo.opus")).unwrap();
    let ogg = ReferenceAudio::from_bytes(&ogg, None).unwrap();
    assert_eq!(ogg.samples, r.samples);
    assert_eq!(
        ReferenceAudio::from_path(&fixture("tone440-48000-stereo.webm")).unwrap(),
        r
    );

    // Unknown sizes, as MediaRecorder streams them: every Segment and
    // Cluster size set to all ones of its own length (the reserved value).
    let mut live = bytes.clone();
    let mut unknown = 0;
    for id in [[0x18u8, 0x53, 0x80, 0x67], [0x1F, 0x43, 0xB6, 0x75]] {
        let mut at = 0;
        while let Some(i) = live[at..].windows(4).position(|w| w == id) {
            let size = at + i + 4;
            let len = live[size].leading_zeros() as usize + 1;
            live[size] = 0xFF >> (len - 1);
            live[size + 1..size + len].fill(0xFF);
            unknown += 1;
            at = size;
        }
    }
    assert!(unknown >= 2, "a Segment and its Clusters");
    let streamed = ReferenceAudio::from_bytes(&live, None).unwrap();
    assert_eq!(streamed.samples, r.samples);

    // Cut in half: inside a stated size.
    let err = ReferenceAudio::from_bytes(&bytes[..bytes.len() / 2], None).unwrap_err();
    assert!(
        matches!(
            err,
            ReferenceAudioError::Truncated {
                format: "WebM/Opus",
                ..
            }
        ),
        "{err:?}"
    );
    // A block stating 2^56 bytes is refused by its size, nothing reserved.
    let mut huge = bytes.clone();
    let cluster = huge
        .windows(4)
        .position(|w| w == [0x1F, 0x43, 0xB6, 0x75])
        .unwrap();
    // The cluster's id and size, its Timecode (E7 81 00), then the first
    // SimpleBlock.
    let block = cluster + 4 + huge[cluster + 4..].iter().position(|&b| b == 0xA3).unwrap();
    huge[block + 1..block + 9].copy_from_slice(&[0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE]);
    let err = ReferenceAudio::from_bytes(&huge, None).unwrap_err();
    assert!(
        matches!(
            err,
            ReferenceAudioError::Truncated { .. } | ReferenceAudioError::Corrupt { .. }
        ),
        "{err:?}"
    );
}
