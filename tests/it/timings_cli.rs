//! `tts-rt speak --timings-out FILE`: the words of the text and when they
//! are heard, beside the audio, as JSON, SubRip or WebVTT by extension,
//! offline and streamed; a name without a known extension is refused
//! before anything is written. The tiny-a fixture's random weights make
//! noise, so this checks the contract (every word once, in order, within
//! the audio), not the accuracy (benches/timings_accuracy.sh).

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.env_remove("TTS_RT_MODEL").env_remove("TTS_RT_TOKEN");
    c
}

fn fixture() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-a").to_string()
}

fn dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("timings_cli")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const TEXT: &str = "Hello there, my friend. Subtitles come with the audio!";

fn speak(d: &Path, timings: &str, extra: &[&str]) -> std::process::Output {
    bin()
        .args([
            "speak",
            "--model",
            &fixture(),
            "--max-frames",
            "40",
            "--seed",
            "3",
        ])
        .args(["--out", d.join("a.wav").to_str().unwrap()])
        .args(["--timings-out", d.join(timings).to_str().unwrap()])
        .args(extra)
        .arg(TEXT)
        .output()
        .expect("run tts-rt")
}

fn check_json(d: &Path, name: &str) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join(name)).unwrap()).unwrap();
    assert_eq!(v["text"], TEXT);
    let audio = v["audio_seconds"].as_f64().unwrap();
    let wav = hound::WavReader::open(d.join("a.wav")).unwrap();
    let wav_s = wav.duration() as f64 / wav.spec().sample_rate as f64;
    assert!(
        (audio - wav_s).abs() < 0.011,
        "timed {audio} s of {wav_s} s"
    );
    let words: Vec<&str> = v["words"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["text"].as_str().unwrap())
        .collect();
    assert_eq!(words, TEXT.split_whitespace().collect::<Vec<_>>());
    let mut last = 0.0;
    for w in v["words"].as_array().unwrap() {
        let (s, e) = (w["start"].as_f64().unwrap(), w["end"].as_f64().unwrap());
        assert!(s >= last && e >= s && e <= audio + 1e-3, "{w}");
        last = s;
    }
    let chars: String = v["characters"]["chars"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(chars, TEXT);
}

#[test]
fn json_timings_beside_the_audio_offline_and_streamed() {
    let d = dir("json");
    let o = speak(&d, "a.json", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    check_json(&d, "a.json");
    let o = speak(&d, "b.json", &["--stream"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    check_json(&d, "b.json");
}

#[test]
fn srt_and_vtt_subtitles() {
    let d = dir("subs");
    for (name, head) in [("a.srt", "1\n"), ("a.vtt", "WEBVTT\n\n")] {
        let o = speak(&d, name, &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s = std::fs::read_to_string(d.join(name)).unwrap();
        assert!(s.starts_with(head), "{s}");
        assert!(s.contains(" --> "), "{s}");
        let spoken: Vec<&str> = s
            .lines()
            .filter(|l| {
                !l.is_empty() && !l.contains("-->") && *l != "WEBVTT" && l.parse::<u32>().is_err()
            })
            .flat_map(|l| l.split(' '))
            .collect();
        assert_eq!(spoken, TEXT.split_whitespace().collect::<Vec<_>>(), "{s}");
    }
}

#[test]
fn an_unknown_extension_is_refused_before_anything_is_written() {
    let d = dir("bad");
    let o = speak(&d, "a.txt", &[]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--timings-out") && err.contains(".srt"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(&d).unwrap().next().is_none(),
        "nothing written"
    );
}
