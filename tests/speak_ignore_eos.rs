//! `tts-rt speak --ignore-eos`: a fixed frame count for benchmarks
//! (benches/side_by_side.sh), and the `total_ms` field of `--timings`.

mod common;

use std::process::{Command, Stdio};

use common::{root, Golden};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.env_remove("TTS_RT_MODEL").stdin(Stdio::null());
    c
}

/// tiny-a's `en_ryan` case stops on EOS after 22 frames under greedy
/// decoding; with --ignore-eos it runs on to --max-frames, and the frames
/// before the EOS point are the official ones.
#[test]
fn ignore_eos_runs_to_max_frames_past_the_official_stop() {
    let g = Golden::load("tiny-a");
    let case = &g.cases["cases"][0];
    assert_eq!(case["name"], "en_ryan");
    assert_eq!(case["hit_eos"], true);
    let eos_frames = case["num_frames"].as_u64().unwrap() as usize;
    let (want, shape) = g.codes("en_ryan.codes");
    let groups = shape[1];
    let frames = eos_frames + 6;
    let spf = g.cases["samples_per_frame"].as_u64().unwrap() as usize;

    let tmp = tempfile::tempdir().unwrap();
    let speak = |extra: &[&str], tag: &str| {
        let wav = tmp.path().join(format!("{tag}.wav"));
        let codes = tmp.path().join(format!("{tag}.json"));
        let mut c = bin();
        c.args(["speak", case["text"].as_str().unwrap(), "--model"])
            .arg(root().join("tiny-a"))
            .args(["--speaker", "ryan", "--language", "English", "--greedy"])
            .args(["--max-frames", &frames.to_string(), "--timings", "--out"])
            .arg(&wav)
            .arg("--codes-out")
            .arg(&codes)
            .args(extra);
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "tts-rt failed: {err}");
        let got: Vec<Vec<u32>> =
            serde_json::from_str(&std::fs::read_to_string(&codes).unwrap()).unwrap();
        let samples = hound::WavReader::open(&wav).unwrap().len() as usize;
        let timings: serde_json::Value = err
            .lines()
            .find(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .unwrap_or_else(|| panic!("no timings line: {err}"));
        (got, samples, timings)
    };

    let (stopped, samples, t) = speak(&[], "eos");
    assert_eq!(
        stopped.len(),
        eos_frames,
        "without --ignore-eos: stops on EOS"
    );
    assert_eq!(samples, eos_frames * spf);
    assert_eq!(t["frames"], eos_frames);
    assert!(t["total_ms"].as_f64().unwrap() > 0.0, "{t}");

    let (forced, samples, t) = speak(&["--ignore-eos"], "forced");
    assert_eq!(forced.len(), frames, "--ignore-eos: exactly --max-frames");
    assert_eq!(samples, frames * spf);
    assert_eq!(t["frames"], frames);
    let total = t["total_ms"].as_f64().unwrap();
    let parts = t["prefill_ms"].as_f64().unwrap()
        + t["talker_ms_per_frame"].as_f64().unwrap() * (frames - 1) as f64
        + t["code_predictor_ms_per_frame"].as_f64().unwrap() * frames as f64
        + t["code2wav_ms_per_frame"].as_f64().unwrap() * frames as f64;
    assert!(total >= parts * 0.999, "total {total} < stage sum {parts}");
    for (i, f) in forced.iter().take(eos_frames).enumerate() {
        assert_eq!(f.len(), groups);
        assert_eq!(f[..], want[i * groups..(i + 1) * groups], "frame {i}");
    }
    assert_eq!(forced[..eos_frames], stopped[..]);
}

#[test]
fn ignore_eos_needs_max_frames() {
    let o = bin()
        .args([
            "speak",
            "hi",
            "--ignore-eos",
            "--out",
            "/dev/null",
            "--model",
        ])
        .arg(root().join("tiny-a"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("--max-frames"), "{err}");
}
