//! `tts-rt speak --play` and `tts-rt devices` as processes, playing into
//! ALSA `file` PCMs this test defines (as audio/tests/it/alsa_playback.rs
//! does): the samples that reached the "device" are read back and compared
//! with the audio the same run wrote with `--out`, resampled to the device
//! rate.
//!
//! Setup: the child gets `ALSA_CONFIG_PATH` pointing at a config written
//! here, so the machine's ALSA setup and sound cards play no part. Each PCM
//! is `type file` over `type null`: alsa-lib writes every period the device
//! consumes to a raw file, interleaved in the negotiated format, and the null
//! slave accepts any rate, channel count and format without pacing. The
//! stream therefore runs faster than synthesis and starves between chunks:
//! every starved callback is an underrun, filled with exact silence (0.0 in
//! f32), which the comparison skips. The model never emits exact 0.0 on
//! these inputs (asserted), so the skipped zeros are all inserted ones.
//!
//! Linux only (cpal's ALSA host).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use tts_audio::StreamResampler;

/// Sinks, one per test (tests run in parallel).
const PCMS: [&str; 5] = [
    "cli_f32_48k",
    "cli_pcm16_16k",
    "cli_native",
    "cli_prebuffer",
    "cli_precision",
];

fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("play_cli");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut conf = String::new();
        for name in PCMS {
            conf += &format!(
                "pcm.{name} {{\n  type file\n  slave.pcm {{ type null }}\n  file \"{}\"\n  format \"raw\"\n  \
                 hint {{ show on description \"tts-rt cli sink {name}\" }}\n}}\n",
                dir.join(format!("{name}.raw")).display()
            );
        }
        // Listed, but its card does not exist: only opening it fails.
        conf += "pcm.cli_missing {\n  type hw\n  card 31\n  hint { show on description \"tts-rt missing card\" }\n}\n";
        std::fs::write(dir.join("asound.conf"), conf).unwrap();
        dir
    })
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.env_remove("TTS_RT_MODEL")
        .env("ALSA_CONFIG_PATH", dir().join("asound.conf"))
        .stdin(Stdio::null());
    c
}

fn fixture() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-a").to_string()
}

fn run(c: &mut Command) -> (Output, String) {
    let o = c.output().expect("run tts-rt");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!err.contains("panicked"), "panicked: {err}");
    (o, err)
}

fn speak(pcm: &str, out: &Path, extra: &[&str]) -> String {
    let _ = std::fs::remove_file(dir().join(format!("{pcm}.raw")));
    let fixture = fixture();
    let mut args = vec![
        "speak",
        "Playing this on a file device.",
        "--model",
        &fixture,
        "--greedy",
        "--max-frames",
        "24",
        "--play",
        "--device",
        pcm,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (o, err) = run(bin().args(&args));
    assert!(o.status.success(), "speak --play failed: {err}");
    err
}

/// `playing on "ID" at RATE Hz, CH ch, FORMAT` → (rate, channels, format).
fn device_config(stderr: &str) -> (u32, usize, String) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("playing on "))
        .unwrap_or_else(|| panic!("no 'playing on' line: {stderr}"));
    let after = line.split(" at ").nth(1).unwrap();
    let mut parts = after.split(", ");
    let rate = parts
        .next()
        .unwrap()
        .trim_end_matches(" Hz")
        .parse()
        .unwrap();
    let ch = parts
        .next()
        .unwrap()
        .trim_end_matches(" ch")
        .parse()
        .unwrap();
    let fmt = parts.next().unwrap().split(' ').next().unwrap().to_string();
    (rate, ch, fmt)
}

/// The end-of-playback report: (frames played, underruns).
fn report(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("played "))
        .unwrap_or_else(|| panic!("no playback report: {stderr}"));
    let num = |after: &str| -> u64 {
        let i = line
            .find(after)
            .unwrap_or_else(|| panic!("{after:?} in {line}"));
        line[..i]
            .rsplit(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    (num(" frames ("), num(" underruns"))
}

fn read_wav(path: &Path) -> (u32, Vec<f32>, hound::SampleFormat) {
    let mut r = hound::WavReader::open(path).unwrap();
    let spec = r.spec();
    let x = match spec.sample_format {
        hound::SampleFormat::Float => r.samples::<f32>().map(|s| s.unwrap()).collect(),
        hound::SampleFormat::Int => r
            .samples::<i16>()
            .map(|s| s.unwrap() as f32 / 32767.0)
            .collect(),
    };
    (spec.sample_rate, x, spec.sample_format)
}

/// The device's mono signal: f32 frames, every channel equal, with the
/// inserted (exact-zero) silence removed.
fn device_signal(pcm: &str, channels: usize) -> (Vec<f32>, usize) {
    let bytes = std::fs::read(dir().join(format!("{pcm}.raw"))).unwrap();
    let raw: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(raw.len() % channels, 0, "whole frames");
    let mono: Vec<f32> = raw
        .chunks(channels)
        .map(|f| {
            assert!(f.iter().all(|s| *s == f[0]), "channels differ: {f:?}");
            f[0]
        })
        .collect();
    let zeros = mono.iter().filter(|s| **s == 0.0).count();
    (mono.into_iter().filter(|s| *s != 0.0).collect(), zeros)
}

/// The `--out` audio as the device must have received it: resampled to the
/// device rate, clamped like the f32 device path.
fn expected_at(out: &[f32], out_rate: u32, device_rate: u32) -> Vec<f32> {
    StreamResampler::new(out_rate, device_rate)
        .unwrap()
        .process_all(out)
        .into_iter()
        .map(|s| s.clamp(-1.0, 1.0))
        .collect()
}

fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(
        got.len(),
        want.len(),
        "every sample of --out reached the device, once"
    );
    let (worst, at) = got
        .iter()
        .zip(want)
        .enumerate()
        .map(|(i, (a, b))| ((a - b).abs(), i))
        .fold((0.0f32, 0), |m, x| if x.0 > m.0 { x } else { m });
    assert!(worst <= tol, "max |device - expected| = {worst} at {at}");
}

#[test]
fn speak_play_resampled_to_48k_equals_the_f32_out_file() {
    let pcm = "cli_f32_48k";
    let out = dir().join("f32_48k.wav");
    let err = speak(
        pcm,
        &out,
        &["--wav-format", "f32", "--device-rate", "48000"],
    );
    let (rate, ch, fmt) = device_config(&err);
    assert_eq!((rate, fmt.as_str()), (48_000, "f32"), "{err}");
    assert!(err.contains("resampled from"), "{err}");
    let (native, x, _) = read_wav(&out);
    assert!(!x.is_empty());
    assert!(
        x.iter().all(|s| *s != 0.0),
        "the comparison relies on the model emitting no exact zeros"
    );
    let want = expected_at(&x, native, rate);
    let (got, inserted) = device_signal(pcm, ch);
    // Chunked vs one-shot resampling: float rounding of the read position
    // (audio/tests/it/resample.rs pins 1e-6).
    assert_close(&got, &want, 1e-6);
    let (played, underruns) = report(&err);
    assert_eq!(played, want.len() as u64, "{err}");
    // The unpaced sink usually outruns synthesis, so silence is inserted
    // between chunks, and counted. Not always: on a loaded machine the
    // sink's thread may run only after synthesis is done (0 and 0, seen
    // once), so the check is that silence and underruns come together.
    assert_eq!(inserted > 0, underruns > 0, "{err}");
}

#[test]
fn speak_play_equals_the_pcm16_out_file_within_quantisation() {
    let pcm = "cli_pcm16_16k";
    let out = dir().join("pcm16_16k.wav");
    let err = speak(pcm, &out, &["--device-rate", "16000"]);
    let (rate, ch, fmt) = device_config(&err);
    assert_eq!((rate, fmt.as_str()), (16_000, "f32"), "{err}");
    let (native, x, format) = read_wav(&out);
    assert_eq!(format, hound::SampleFormat::Int, "pcm16 is the default");
    let want = expected_at(&x, native, rate);
    let (got, _) = device_signal(pcm, ch);
    // The file holds the model output rounded to 16 bits (±0.5 LSB); the
    // device got it unrounded. Through the resampler those rounding errors
    // add up by at most the filter's L1 gain (sum of |taps|: ~1.5 measured
    // at 24 → 16 kHz); 4× leaves margin and still fails on any misaligned
    // or lost sample (errors ~0.1).
    assert_close(&got, &want, 4.0 * 0.5 / 32767.0);
    let (played, _) = report(&err);
    assert_eq!(played, want.len() as u64);
}

/// A prebuffer longer than the utterance: the device starts only when the
/// stream is finished, so it never starves — no underruns, and the audio
/// arrives in one contiguous run (only leading and trailing silence).
#[test]
fn prebuffer_longer_than_the_audio_plays_it_without_underruns() {
    let pcm = "cli_prebuffer";
    let out = dir().join("prebuffer.wav");
    let err = speak(
        pcm,
        &out,
        &["--wav-format", "f32", "--prebuffer-ms", "10000"],
    );
    let (rate, ch, _) = device_config(&err);
    let (native, x, _) = read_wav(&out);
    let want = expected_at(&x, native, rate);
    let bytes = std::fs::read(dir().join(format!("{pcm}.raw"))).unwrap();
    let mono: Vec<f32> = bytes
        .chunks_exact(4 * ch)
        .map(|f| f32::from_le_bytes(f[..4].try_into().unwrap()))
        .collect();
    let start = mono.iter().position(|s| *s != 0.0).expect("audio arrived");
    let end = mono.iter().rposition(|s| *s != 0.0).unwrap() + 1;
    assert_close(&mono[start..end], &want, 1e-6);
    assert_eq!(report(&err), (want.len() as u64, 0), "{err}");
}

#[test]
fn speak_play_at_the_device_default_rate_and_without_out() {
    let pcm = "cli_native";
    let _ = std::fs::remove_file(dir().join(format!("{pcm}.raw")));
    let fixture = fixture();
    // No --out: playing is enough.
    let (o, err) = run(bin().args([
        "speak",
        "Playing this on a file device.",
        "--model",
        &fixture,
        "--greedy",
        "--max-frames",
        "24",
        "--play",
        "--device",
        "CLI SINK CLI_NATIVE", // a unique part of the name
    ]));
    assert!(o.status.success(), "{err}");
    assert!(o.stdout.is_empty(), "nothing on stdout without --out");
    let (rate, ch, _) = device_config(&err);
    let (played, _) = report(&err);
    let (got, _) = device_signal(pcm, ch);
    assert_eq!(got.len() as u64, played);
    assert!(played > 0 && rate > 0);
}

#[test]
fn unknown_or_absent_devices_fail_naming_the_device() {
    let fixture = fixture();
    for (device, needles) in [
        (
            "does-not-exist",
            &["does-not-exist", "cli_f32_48k", "tts-rt devices"][..],
        ),
        // Listed, but its card is absent: shows when the stream opens.
        ("cli_missing", &["cli_missing"][..]),
    ] {
        let out = dir().join(format!("{device}.wav"));
        let (o, err) = run(bin().args([
            "speak",
            "Hello.",
            "--model",
            &fixture,
            "--max-frames",
            "4",
            "--play",
            "--device",
            device,
            "--out",
            out.to_str().unwrap(),
        ]));
        assert!(!o.status.success(), "{device}: expected failure: {err}");
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("error: --play: cannot open"), "{err}");
        for n in needles {
            assert!(err.contains(n), "{device}: stderr should name {n:?}: {err}");
        }
    }
    // --device without --play is a usage error, not silently ignored.
    let (o, err) = run(bin().args(["speak", "Hello.", "--device", "x", "--out", "-"]));
    assert!(!o.status.success() && err.contains("--play"), "{err}");
    // Neither --out nor --play: nothing to do.
    let (o, err) = run(bin().args(["speak", "Hello.", "--model", &fixture]));
    assert!(
        !o.status.success() && err.contains("nothing to do"),
        "{err}"
    );
}

#[test]
fn devices_lists_the_test_sinks() {
    let (o, err) = run(bin().arg("devices"));
    assert!(o.status.success(), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    for pcm in PCMS {
        assert!(out.contains(pcm), "{pcm} missing: {out}");
    }
    assert!(out.contains("tts-rt cli sink cli_f32_48k"), "{out}");
    // The null slave takes any rate and channel count; the listing shows
    // the playable formats with channel counts merged.
    assert!(out.contains("ch, f32"), "{out}");
}

/// With no device at all (an ALSA config defining none), `devices` says so
/// and `--play` fails with the reason instead of panicking.
#[test]
fn no_devices_is_a_clear_message() {
    let empty = dir().join("empty.conf");
    std::fs::write(&empty, "# no PCMs\n").unwrap();
    let (o, err) = run(bin().env("ALSA_CONFIG_PATH", &empty).arg("devices"));
    assert!(o.status.success(), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("no audio output devices"), "{out}");
    let fixture = fixture();
    let (o, err) = run(bin().env("ALSA_CONFIG_PATH", &empty).args([
        "speak",
        "Hello.",
        "--model",
        &fixture,
        "--max-frames",
        "4",
        "--play",
    ]));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot open the default audio device")
            && err.contains("no audio output device"),
        "{err}"
    );
}

/// Issue 31, item 1: `speak --play` runs `fast` unless told otherwise (real
/// time on 2 cores at 0.6B) and `speak --out` alone the reference; each says
/// at start, in one line, which precision runs and what it costs.
#[test]
fn real_time_by_default_speak_play_runs_fast_and_a_file_the_reference() {
    let precision_lines = |err: &str| -> Vec<String> {
        err.lines()
            .filter(|l| l.starts_with("precision "))
            .map(str::to_string)
            .collect()
    };
    let out = dir().join("precision.wav");
    let err = speak("cli_precision", &out, &[]);
    let lines = precision_lines(&err);
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with(
            "precision fast (int8 LMs, bf16 talker KV cache, int8/bf16 vocoder, the default for live audio): "
        ),
        "{err}"
    );
    assert!(lines[0].contains("--precision f32"), "{err}");
    let fixture = fixture();
    let (o, err) = run(bin().args([
        "speak",
        "A file.",
        "--model",
        &fixture,
        "--max-frames",
        "2",
        "--out",
        dir().join("precision-file.wav").to_str().unwrap(),
    ]));
    assert!(o.status.success(), "{err}");
    let lines = precision_lines(&err);
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with(
            "precision reference (stored weights, f32 vocoder, the default for files): "
        ),
        "{err}"
    );
    assert!(lines[0].contains("--precision fast"), "{err}");
}
