//! `tts-rt bench` on the other families: a Base checkpoint's cloned-voice
//! cell (ICL and x-vector only, with the one-time cost of making the voice),
//! a VoiceDesign checkpoint's described voice, and `--clone-cost`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// `tts-rt ARGS --model FIXTURE` that must succeed; its stdout as JSON.
fn run_json(model: &str, args: &[&str]) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .env_remove("TTS_RT_MODEL")
        .args(args)
        .arg("--model")
        .arg(fixture(model))
        .stdin(Stdio::null())
        .output()
        .expect("run tts-rt");
    assert!(
        o.status.success(),
        "tts-rt failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("one JSON document")
}

const CELL: [&str; 12] = [
    "bench",
    "--lengths",
    "ten",
    "--concurrency",
    "1",
    "--repeats",
    "1",
    "--warmup",
    "0",
    "--frames",
    "3",
    "--json",
];

fn prefill_rows(doc: &Value) -> u64 {
    doc["cells"][0]["prompt_rows"]["prefill"].as_u64().unwrap()
}

#[test]
fn base_bench_speaks_with_a_voice_made_once_icl_and_x_vector_only() {
    let mut args = CELL.to_vec();
    args.extend(["--ref-seconds", "2"]);
    let icl = run_json("tiny-base", &args);
    let v = &icl["voice"];
    assert_eq!(v["mode"], "ICL");
    assert_eq!(v["ref_frames"], 25, "ceil(48000 / 1920)");
    let m = &v["make_once"];
    assert!(m["x_vector_ms"].as_f64().unwrap() > 0.0);
    assert!(m["codes_ms"].as_f64().unwrap() > 0.0);
    assert!(m["codes_ms_per_s"].as_f64().unwrap() > 0.0);
    let cell = &icl["cells"][0];
    assert_eq!(cell["complete"], 1);
    assert!(cell["summary"]["ttfp_ms"]["p50"].as_f64().unwrap() > 0.0);

    args.push("--x-vector-only");
    let xv = run_json("tiny-base", &args);
    assert_eq!(xv["voice"]["mode"], "x-vector only");
    assert!(xv["voice"]["make_once"]["codes_ms"].is_null());
    assert_eq!(xv["cells"][0]["complete"], 1);
    // ICL puts the reference codes and transcript in the prompt.
    assert!(prefill_rows(&icl) > prefill_rows(&xv) + 25);
}

#[test]
fn custom_voice_and_voice_design_bench_name_their_voice() {
    let cv = run_json("tiny-a", &CELL);
    assert_eq!(cv["voice"]["kind"], "preset speaker");
    assert!(cv["voice"]["speaker"].is_string());
    let vd = run_json("tiny-vd", &CELL);
    assert!(vd["voice"]["kind"]
        .as_str()
        .unwrap()
        .contains("VoiceDesign"));
    assert_eq!(vd["cells"][0]["complete"], 1);
}

#[test]
fn clone_cost_times_both_encoders_per_length() {
    let doc = run_json(
        "tiny-base",
        &[
            "bench",
            "--clone-cost",
            "--clone-seconds",
            "1,2",
            "--clone-runs",
            "3",
            "--json",
        ],
    );
    let rows = doc["clone_cost"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (r, s) in rows.iter().zip([1.0, 2.0]) {
        assert_eq!(r["seconds"], s);
        for k in ["x_vector_ms", "codes_ms"] {
            assert_eq!(r[k]["n"], 3);
            let (lo, med, hi) = (
                r[k]["min"].as_f64().unwrap(),
                r[k]["median"].as_f64().unwrap(),
                r[k]["max"].as_f64().unwrap(),
            );
            assert!(0.0 < lo && lo <= med && med <= hi, "{k}: {lo} {med} {hi}");
        }
    }
}

#[test]
fn clone_cost_on_custom_voice_says_what_the_checkpoint_does() {
    let o = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .env_remove("TTS_RT_MODEL")
        .args(["bench", "--clone-cost", "--model"])
        .arg(fixture("tiny-a"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--clone-cost needs a Base checkpoint") && err.contains("CustomVoice"),
        "{err}"
    );
}

#[test]
fn base_bench_clones_from_a_given_clip() {
    let clip = fixture("goldens/tiny-base/ref_a.wav");
    let mut args = CELL.to_vec();
    let clip_arg = clip.to_str().unwrap();
    args.extend(["--ref-audio", clip_arg, "--ref-text", "A reference clip."]);
    let doc = run_json("tiny-base", &args);
    let v = &doc["voice"];
    assert_eq!(v["source"], clip_arg);
    assert_eq!(v["ref_text"], "A reference clip.");
    let frames = v["ref_frames"].as_u64().unwrap();
    let seconds = v["ref_seconds"].as_f64().unwrap();
    assert_eq!(frames, (seconds * 24_000.0 / 1920.0).ceil() as u64);
    assert_eq!(doc["cells"][0]["complete"], 1);
}
