//! `tts-rt fidelity` end to end on the committed fixtures: the report's
//! shape (per-stage KL and top-1, end-of-speech shift, duration, bytes per
//! frame, rtf, a recommendation), the reference measuring zero against
//! itself, and refusals of bad arguments.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

fn fidelity(args: &[&str]) -> std::process::Output {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-a");
    Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .env_remove("TTS_RT_MODEL")
        .args(["--threads", "2", "fidelity", "--model"])
        .arg(fixture)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run tts-rt")
}

#[test]
fn fidelity_reports_every_stage_against_the_stored_weights() {
    let o = fidelity(&[
        "--seeds",
        "1",
        "--max-frames",
        "8",
        "--preset",
        "q4",
        "--text",
        "Hello there.",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["cases"], 1);
    let reference = &r["reference"];
    assert_eq!(reference["codebook0"]["mean_kl"], 0.0);
    assert_eq!(reference["codebook0"]["top1"], 1.0);
    let arms = r["arms"].as_array().unwrap();
    // The int8 anchor is measured even when not asked for.
    let names: Vec<&str> = arms
        .iter()
        .map(|a| a["precision"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["int8", "q4"]);
    for a in arms {
        for stage in ["codebook0", "predicted"] {
            let kl = a[stage]["mean_kl"].as_f64().unwrap();
            assert!(kl.is_finite() && kl >= 0.0, "{a}");
        }
        // One entry per predicted codebook (tiny-a: 8 code groups).
        assert_eq!(
            a["predicted_per_codebook_mean_kl"]
                .as_array()
                .unwrap()
                .len(),
            7
        );
        assert!(a["eos"]["mean_abs_logprob_shift"].as_f64().unwrap() >= 0.0);
        assert!(a["bytes_per_frame"].as_u64().unwrap() > 0);
        assert!(a["rtf_offline"].as_f64().unwrap() > 0.0);
    }
    // q4 is far from the anchor on these weights; int8 is the anchor.
    let q4 = &arms[1];
    assert!(
        q4["codebook0"]["mean_kl"].as_f64() > arms[0]["codebook0"]["mean_kl"].as_f64(),
        "{q4}"
    );
    assert!(r["recommended"].as_str().is_some());
}

#[test]
fn fidelity_refuses_bad_arguments_by_name() {
    let o = fidelity(&["--preset", "int3"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--preset \"int3\""), "{err}");
    let o = fidelity(&["--seeds", "0"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--seeds"));
}
