//! `--play` without `--prebuffer-ms` (the measured prebuffer) into an ALSA
//! `file` PCM over `null`, set up as in tests/it/play_cli.rs: the audio still
//! arrives whole, and the unpaced device's underrun count is called what it
//! is instead of being reported as millions of real underruns.

use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn underruns_into_a_null_device_are_reported_as_not_meaningful() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli_play_auto");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let raw = dir.join("auto.raw");
    let conf = format!(
        "pcm.cli_auto {{\n  type file\n  slave.pcm {{ type null }}\n  file \"{}\"\n  format \"raw\"\n  \
         hint {{ show on description \"tts-rt cli sink auto\" }}\n}}\n",
        raw.display()
    );
    std::fs::write(dir.join("asound.conf"), conf).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .env_remove("TTS_RT_MODEL")
        .env("ALSA_CONFIG_PATH", dir.join("asound.conf"))
        .args([
            "speak",
            "Playing this on a file device.",
            "--model",
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-a"),
            "--greedy",
            "--max-frames",
            "24",
            "--play",
            "--device",
            "cli_auto",
            "--device-rate",
            "24000",
            "--out",
        ])
        .arg(dir.join("auto.wav"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("not paced in real time"), "{err}");
    // Every sample of the utterance reached the device (played at the
    // model's own 24 kHz: as many as the --out file holds).
    let played = err
        .lines()
        .find_map(|l| l.strip_prefix("played "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no playback report: {err}"));
    let wav = hound::WavReader::open(dir.join("auto.wav")).unwrap();
    assert!(wav.duration() > 0);
    assert_eq!(played, u64::from(wav.duration()), "{err}");
}
