//! Playback through the real cpal → ALSA path, into ALSA `file` PCMs that
//! this test defines: the samples that reached the "device" are read back
//! and compared with the resampled input.
//!
//! Setup: `ALSA_CONFIG_PATH` points at a config written here (so the
//! machine's ALSA setup and sound cards play no part). Each PCM is
//! `type file` over `type null`: alsa-lib writes every period the device
//! consumes to a raw file, interleaved in the negotiated format, and the
//! null slave accepts any rate, channel count and format without pacing (the
//! stream runs as fast as the callback fills it). Both plugins are built
//! into libasound2, so only that library is needed at run time.
//!
//! Linux only (cpal's ALSA host).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use tts_audio::playback::DeviceFormat;
use tts_audio::{
    f32_to_i16, list_output_devices, AudioError, PlaybackOptions, Player, StreamResampler,
};

const NATIVE_RATE: u32 = 24_000; // the test's stand-in for the model config rate
/// Allowed |device − expected| for float output: the player resamples chunk
/// by chunk, the expectation is one-shot (see tests/it/resample.rs, 1e-6).
const F32_TOL: f32 = 1e-6;

struct Alsa {
    dir: PathBuf,
}

const PCMS: [&str; 4] = ["tts_f32", "tts_i16", "tts_u16", "tts_gaps"];

/// Writes the ALSA config once and points alsa-lib at it before any ALSA call
/// (alsa-lib reads the variable when it first loads its configuration).
fn alsa() -> &'static Alsa {
    static ALSA: OnceLock<Alsa> = OnceLock::new();
    ALSA.get_or_init(|| {
        // Under target/: cargo provides the directory, nothing to clean up.
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("alsa_playback");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut conf = String::new();
        for name in PCMS {
            conf += &format!(
                "pcm.{name} {{\n  type file\n  slave.pcm {{ type null }}\n  file \"{}\"\n  format \"raw\"\n  \
                 hint {{ show on description \"tts-rt test sink {name}\" }}\n}}\n",
                dir.join(format!("{name}.raw")).display()
            );
        }
        // A PCM whose card does not exist: opening it fails like an absent device.
        conf += "pcm.tts_missing {\n  type hw\n  card 31\n  hint { show on description \"tts-rt missing card\" }\n}\n";
        let path = dir.join("asound.conf");
        std::fs::write(&path, conf).unwrap();
        std::env::set_var("ALSA_CONFIG_PATH", &path);
        Alsa { dir }
    })
}

/// Mono test signal that is never zero (0.45 ± 0.35), so leading and
/// inserted device silence can be told from the signal.
fn signal(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let t = i as f64 / NATIVE_RATE as f64;
            (0.45
                + 0.25 * (2.0 * std::f64::consts::PI * 300.0 * t).sin()
                + 0.1 * (2.0 * std::f64::consts::PI * 2_100.0 * t).sin()) as f32
        })
        .collect()
}

/// Plays `x` (native rate) in 80 ms chunks through PCM `pcm` and waits for
/// the drain; returns the final stats and the (still open) player.
fn play(
    pcm: &str,
    opts: PlaybackOptions,
    x: &[f32],
    pause_between_chunks: Duration,
) -> (tts_audio::PlaybackStats, Player) {
    let path = alsa().dir.join(format!("{pcm}.raw"));
    let _ = std::fs::remove_file(&path);
    let mut player = Player::open(
        &PlaybackOptions {
            device: Some(pcm.into()),
            ..opts
        },
        NATIVE_RATE,
    )
    .unwrap();
    for chunk in x.chunks(1920) {
        player.write(chunk).unwrap();
        std::thread::sleep(pause_between_chunks);
    }
    let stats = player.wait_drained(Duration::from_secs(20)).unwrap();
    (stats, player)
}

/// Stops the stream (closing the PCM flushes the file plugin) and reads the
/// file back.
fn close_and_read(pcm: &str, player: Player) -> Vec<u8> {
    drop(player);
    std::fs::read(alsa().dir.join(format!("{pcm}.raw"))).unwrap()
}

/// Splits interleaved frames, checks every channel carries the same mono
/// signal, and returns that signal.
fn mono<T: Copy + PartialEq + std::fmt::Debug>(samples: &[T], channels: usize) -> Vec<T> {
    assert_eq!(samples.len() % channels, 0, "whole frames");
    samples
        .chunks(channels)
        .map(|f| {
            assert!(
                f.iter().all(|s| *s == f[0]),
                "channels differ in frame {f:?}"
            );
            f[0]
        })
        .collect()
}

/// Strips leading silence (the device ran before the prebuffer filled) and
/// trailing silence (after the drain), asserting both are exact silence.
fn trim<T: Copy + PartialEq + std::fmt::Debug>(v: &[T], silence: T) -> &[T] {
    let start = v
        .iter()
        .position(|s| *s != silence)
        .expect("the device received the signal");
    let end = v.iter().rposition(|s| *s != silence).unwrap() + 1;
    &v[start..end]
}

fn expected(x: &[f32], device_rate: u32) -> Vec<f32> {
    StreamResampler::new(NATIVE_RATE, device_rate)
        .unwrap()
        .process_all(x)
}

#[test]
fn f32_stereo_48k_reaches_the_device_resampled_and_duplicated() {
    let x = signal(1920 * 12 + 700); // ~1 s, ends mid-frame
    let opts = PlaybackOptions {
        sample_rate: Some(48_000),
        channels: Some(2),
        format: Some(DeviceFormat::F32),
        // Whole signal queued before the (unpaced) null device starts, so
        // it cannot starve mid-stream.
        prebuffer: Duration::from_secs(2),
        ..Default::default()
    };
    let (stats, player) = play("tts_f32", opts, &x, Duration::ZERO);
    assert_eq!(
        (player.device_rate(), player.channels(), player.format()),
        (48_000, 2, DeviceFormat::F32)
    );
    let want = expected(&x, 48_000);
    let bytes = close_and_read("tts_f32", player);
    let raw: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let got = mono(&raw, 2);
    let got = trim(&got, 0.0);
    assert_eq!(
        got.len(),
        want.len(),
        "every resampled sample reached the device, once"
    );
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(worst <= F32_TOL, "max |device - resampled| = {worst}");
    assert_eq!(stats.samples_played, want.len() as u64);
    assert_eq!(stats.samples_written, x.len() as u64);
    assert_eq!(stats.underruns, 0, "{stats:?}");
}

#[test]
fn i16_mono_16k_reaches_the_device() {
    let x = signal(1920 * 6 + 1);
    let opts = PlaybackOptions {
        sample_rate: Some(16_000),
        channels: Some(1),
        format: Some(DeviceFormat::I16),
        prebuffer: Duration::from_secs(2),
        ..Default::default()
    };
    let (stats, player) = play("tts_i16", opts, &x, Duration::ZERO);
    let want: Vec<i16> = expected(&x, 16_000)
        .iter()
        .map(|&s| f32_to_i16(s))
        .collect();
    let bytes = close_and_read("tts_i16", player);
    let raw: Vec<i16> = bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let got = trim(&raw, 0);
    assert_eq!(got.len(), want.len());
    // ±1 LSB: chunked vs one-shot resampling can straddle a rounding edge.
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(
            (*a as i32 - *b as i32).abs() <= 1,
            "sample {i}: device {a}, expected {b}"
        );
    }
    assert_eq!(stats.underruns, 0);
}

#[test]
fn u16_stereo_at_the_native_rate_is_passed_through() {
    let x = signal(1920 * 4 + 5);
    let opts = PlaybackOptions {
        sample_rate: Some(NATIVE_RATE),
        channels: Some(2),
        format: Some(DeviceFormat::U16),
        prebuffer: Duration::from_secs(2),
        ..Default::default()
    };
    let (_, player) = play("tts_u16", opts, &x, Duration::ZERO);
    assert!(player.resampler().is_identity());
    let bytes = close_and_read("tts_u16", player);
    let raw: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    let got = mono(&raw, 2);
    let got = trim(&got, 32768);
    let want: Vec<u16> = x
        .iter()
        .map(|&s| (f32_to_i16(s) as i32 + 32768) as u16)
        .collect();
    assert_eq!(got, &want[..], "identity path is exact");
}

/// No prebuffer and a producer slower than the (unpaced) device: the device
/// starves between chunks. The callback must fill silence, count it, and
/// lose or repeat nothing: with the silence removed the device received
/// exactly the resampled signal.
#[test]
fn underruns_insert_counted_silence_and_lose_nothing() {
    let x = signal(1920 * 5);
    let opts = PlaybackOptions {
        sample_rate: Some(22_050),
        channels: Some(1),
        format: Some(DeviceFormat::F32),
        ..Default::default()
    };
    let (stats, player) = play("tts_gaps", opts, &x, Duration::from_millis(20));
    let bytes = close_and_read("tts_gaps", player);
    let raw: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let got = trim(&raw, 0.0);
    let gaps = got.iter().filter(|s| **s == 0.0).count();
    let played: Vec<f32> = got.iter().copied().filter(|s| *s != 0.0).collect();
    let want = expected(&x, 22_050);
    assert_eq!(played.len(), want.len());
    let worst = played
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(worst <= F32_TOL, "max diff {worst}");
    assert!(
        stats.underruns >= 4,
        "the device starved between the 5 chunks: {stats:?}"
    );
    assert!(gaps > 0, "silence was inserted between chunks");
    // Silence inside the signal is all counted; the count also holds the
    // starved periods after the last chunk, before finish().
    assert!(
        stats.underrun_samples >= gaps as u64,
        "{gaps} inserted, {stats:?} counted"
    );
}

#[test]
fn devices_are_listed_and_matched_by_name() {
    alsa();
    let devices = list_output_devices().unwrap();
    let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
    for pcm in PCMS {
        assert!(ids.contains(&pcm), "{pcm} missing from {ids:?}");
    }
    let d = devices.iter().find(|d| d.id == "tts_f32").unwrap();
    assert_eq!(d.name, "tts-rt test sink tts_f32");
    // A unique part of the description selects the device.
    let player = Player::open(
        &PlaybackOptions {
            device: Some("SINK TTS_I16".into()),
            sample_rate: Some(24_000),
            ..Default::default()
        },
        NATIVE_RATE,
    )
    .unwrap();
    assert_eq!(player.device(), "tts_i16");
}

#[test]
fn unknown_or_absent_devices_give_clear_errors() {
    alsa();
    let err = Player::open(
        &PlaybackOptions {
            device: Some("no-such-device".into()),
            ..Default::default()
        },
        NATIVE_RATE,
    )
    .err()
    .expect("unknown name rejected");
    let msg = err.to_string();
    assert!(matches!(err, AudioError::NoDevice { .. }), "{msg}");
    assert!(
        msg.contains("no-such-device") && msg.contains("tts_f32"),
        "names the request and the choices: {msg}"
    );
    // Ambiguous part of a name: not guessed.
    let err = Player::open(
        &PlaybackOptions {
            device: Some("test sink".into()),
            ..Default::default()
        },
        NATIVE_RATE,
    )
    .err()
    .expect("ambiguous name rejected");
    assert!(matches!(err, AudioError::NoDevice { .. }), "{err}");
    // Listed, but the card is absent: ALSA only tells when it is opened.
    let err = Player::open(
        &PlaybackOptions {
            device: Some("tts_missing".into()),
            ..Default::default()
        },
        NATIVE_RATE,
    )
    .err()
    .expect("absent card rejected");
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            AudioError::NoDevice { .. } | AudioError::StreamOpen { .. }
        ),
        "{msg}"
    );
    assert!(msg.contains("tts_missing"), "{msg}");
}
