//! `tts-rt fidelity` end to end on the committed fixtures: the report's
//! shape (per-stage KL and top-1, end-of-speech shift, duration, bytes per
//! frame, rtf, a recommendation), the reference measuring zero against
//! itself, and refusals of bad arguments.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

fn fidelity(args: &[&str]) -> std::process::Output {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-a");
    fidelity_on(&fixture, args)
}

fn fidelity_on(model: &Path, args: &[&str]) -> std::process::Output {
    let fixture = model;
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
    // The anchors are measured even when not asked for.
    let names: Vec<&str> = arms
        .iter()
        .map(|a| a["precision"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["int8", "q4"]);
    assert!(arms[0]["role"].as_str().unwrap().contains("anchor"));
    assert_eq!(arms[0]["kl_vs_int8"]["codebook0"], 1.0);
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
    let o = fidelity(&["--timing-passes", "0"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--timing-passes"));
}

fn arm<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["arms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["precision"] == name)
        .unwrap_or_else(|| panic!("no arm {name}: {r}"))
}

fn kl(a: &Value, stage: &str) -> f64 {
    a[stage]["mean_kl"].as_f64().unwrap()
}

/// The ranking every harness must show whatever the weights: the stored
/// weights (zero) below int8 below q4 in each stage's KL, and `balanced`
/// (the code predictor's down projection stored) no worse than int8 in the
/// code predictor and equal to `fast` in the talker (the same talker: int8,
/// its KV cache bf16).
fn assert_sane_ranking(r: &Value) {
    let (reference, int8, q4, balanced) = (
        &r["reference"],
        arm(r, "int8"),
        arm(r, "q4"),
        arm(r, "balanced"),
    );
    for stage in ["codebook0", "predicted"] {
        assert_eq!(kl(reference, stage), 0.0);
        assert!(kl(int8, stage) > 0.0, "{stage}: {int8}");
        assert!(
            kl(int8, stage) < kl(q4, stage),
            "{stage}: int8 {int8} q4 {q4}"
        );
    }
    assert_eq!(kl(balanced, "codebook0"), kl(arm(r, "fast"), "codebook0"));
    assert!(
        kl(balanced, "predicted") <= kl(int8, "predicted"),
        "balanced {balanced} int8 {int8}"
    );
    // Fewer bytes per frame down the list (not q4 here: the tiny rows of 64
    // inputs pad to one 512-input block, more bytes than int8).
    let bytes = |a: &Value| a["bytes_per_frame"].as_u64().unwrap();
    assert!(bytes(int8) < bytes(balanced));
    assert!(bytes(balanced) < bytes(reference));
}

/// By default every preset and every format is measured beside the
/// anchors, each with its full plan spelled out.
#[test]
fn fidelity_lists_every_preset_and_format_by_default() {
    let o = fidelity(&[
        "--seeds",
        "1",
        "--max-frames",
        "6",
        "--text",
        "Hi.",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = r["arms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["precision"].as_str().unwrap())
        .collect();
    let mut want = vec!["balanced".to_string(), "fast".to_string()];
    want.extend(
        tts_models::Precision::ALL
            .iter()
            .filter(|p| **p != tts_models::Precision::F32)
            .map(|p| p.name().to_string()),
    );
    assert_eq!(names, want);
    assert_eq!(arm(&r, "fast")["plan"], "int8,int8,int8,talker.kv=bf16");
    assert!(arm(&r, "balanced")["plan"]
        .as_str()
        .unwrap()
        .contains("cp.mlp_down=f32"));
    assert_sane_ranking(&r);
}

/// The same ranking on a tiny trained-like proxy (heavy tails, massive
/// channels, the code predictor's FFN spike), generated here.
#[test]
fn fidelity_ranks_precisions_sanely_on_a_trained_like_proxy() {
    let dir = std::env::temp_dir().join(format!("tts-rt-proxy-fidelity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let g = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args([
            "gen-checkpoint",
            "--preset",
            "tiny",
            "--proxy",
            "trained",
            "--seed",
            "3",
            "--out",
        ])
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("run tts-rt");
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let o = fidelity_on(
        &dir,
        &[
            "--seeds",
            "1",
            "--max-frames",
            "6",
            "--text",
            "Hello there.",
            "--preset",
            "balanced",
            "--preset",
            "fast",
            "--json",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_sane_ranking(&r);
}

#[test]
fn gen_checkpoint_refuses_an_unknown_proxy_by_name() {
    let dir = std::env::temp_dir().join(format!("tts-rt-proxy-bad-{}", std::process::id()));
    let g = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args([
            "gen-checkpoint",
            "--preset",
            "tiny",
            "--proxy",
            "gaussian",
            "--out",
        ])
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("run tts-rt");
    assert!(!g.status.success());
    let err = String::from_utf8_lossy(&g.stderr);
    assert!(err.contains("--proxy") && err.contains("trained"), "{err}");
    assert!(!dir.exists());
}
