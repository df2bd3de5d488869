//! `tts-rt speak --ignore-eos`: a fixed frame count for benchmarks
//! (benches/side_by_side.sh), the `total_ms` field of `--timings`, and
//! `--floor`.

use crate::common;

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

/// `--timings --floor`: the host's read bandwidth measured after the run,
/// and each LM stage's floor per frame at it beside its measured time.
#[test]
fn floor_reports_each_lm_stage_against_the_measured_bandwidth() {
    let tmp = tempfile::tempdir().unwrap();
    let o = bin()
        .args(["speak", "Hello there.", "--model"])
        .arg(root().join("tiny-a"))
        .args(["--greedy", "--max-frames", "6", "--ignore-eos"])
        .args(["--timings", "--floor", "--out"])
        .arg(tmp.path().join("a.wav"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "tts-rt failed: {err}");
    let t: serde_json::Value = err
        .lines()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no timings line: {err}"));
    let f = &t["floor"];
    let bw = f["read_gb_s"].as_f64().unwrap();
    assert!(bw > 0.0, "{f}");
    let (b, a) = (
        f["read_gb_s_before"].as_f64().unwrap(),
        f["read_gb_s_after"].as_f64().unwrap(),
    );
    assert!((bw - (a + b) / 2.0).abs() <= bw * 1e-9, "{f}");
    assert_eq!(f["stable"], (a - b).abs() <= 0.15 * bw, "{f}");
    assert_eq!(f["probe_passes"], 5);
    for (stage, timed) in [
        ("talker", "talker_ms_per_frame"),
        ("code_predictor", "code_predictor_ms_per_frame"),
    ] {
        let s = &f[stage];
        let bytes = s["bytes_per_frame"].as_f64().unwrap();
        assert!(bytes > 0.0, "{stage}: {s}");
        let floor = s["floor_ms_per_frame"].as_f64().unwrap();
        let want = bytes / (bw * 1e9) * 1e3;
        assert!(
            (floor - want).abs() <= want * 1e-9,
            "{stage}: {floor} vs {want}"
        );
        let ms = t[timed].as_f64().unwrap();
        assert_eq!(s["ms_per_frame"].as_f64().unwrap(), ms, "{stage}");
        let of = s["of_floor"].as_f64().unwrap();
        assert!((of - floor / ms).abs() <= of * 1e-9, "{stage}: {s}");
    }
    // The code predictor streams its decoder once per predicted codebook.
    assert!(
        f["code_predictor"]["bytes_per_frame"].as_f64().unwrap()
            > f["talker"]["bytes_per_frame"].as_f64().unwrap(),
        "{f}"
    );

    // Only with --timings, and only offline.
    for (extra, needle) in [
        (&[][..], "--timings"),
        (&["--timings", "--stream"][..], "--floor"),
    ] {
        let o = bin()
            .args(["speak", "hi", "--floor", "--out", "/dev/null", "--model"])
            .arg(root().join("tiny-a"))
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{extra:?}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
}
