//! The streaming engine through the binary: `speak --stream` and `bench`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.env_remove("TTS_RT_MODEL");
    c
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn ok(c: &mut Command) -> Output {
    let o = c.stdin(Stdio::null()).output().expect("run tts-rt");
    assert!(
        o.status.success(),
        "tts-rt failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn read_wav_f32(path: &Path) -> Vec<f32> {
    hound::WavReader::open(path)
        .unwrap()
        .samples::<f32>()
        .map(|s| s.unwrap())
        .collect()
}

#[test]
fn speak_stream_runs_through_the_engine_and_matches_the_offline_path() {
    let tmp = tempfile::tempdir().unwrap();
    let mut outs = Vec::new();
    for stream in [false, true] {
        let wav = tmp.path().join(format!("s{stream}.wav"));
        let codes = tmp.path().join(format!("s{stream}.json"));
        let mut c = bin();
        c.args([
            "speak",
            "Streaming into the WAV writer.",
            "--greedy",
            "--max-frames",
            "17",
            "--wav-format",
            "f32",
            "--timings",
        ]);
        c.arg("--model")
            .arg(fixture("tiny-a"))
            .arg("--out")
            .arg(&wav)
            .arg("--codes-out")
            .arg(&codes);
        if stream {
            c.arg("--stream");
        }
        let o = ok(&mut c);
        let err = String::from_utf8_lossy(&o.stderr);
        if stream {
            // --timings prints the request's METRICS.md record.
            let line = err
                .lines()
                .rev()
                .find(|l| l.starts_with('{'))
                .expect("a timings line");
            let m: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(m["decode"], "streaming-engine");
            assert_eq!(m["complete"], true);
            for k in [
                "ttfp_ms",
                "rtf",
                "required_prebuffer_ms",
                "continuity_ok",
                "talker_ms",
                "handoff_ms",
            ] {
                assert!(!m[k].is_null(), "{k} missing: {m}");
            }
        }
        let codes: Vec<Vec<u32>> =
            serde_json::from_str(&std::fs::read_to_string(&codes).unwrap()).unwrap();
        outs.push((codes, read_wav_f32(&wav)));
    }
    let ((codes_a, wav_a), (codes_b, wav_b)) = (&outs[0], &outs[1]);
    assert_eq!(codes_a, codes_b, "same codes through the engine");
    assert_eq!(codes_a.len(), 17);
    assert_eq!(wav_a.len(), wav_b.len());
    // Official chunked decode vs the streaming decoder: identical up to 300
    // frames, up to float rounding (the codec's streaming tolerance).
    let worst = wav_a
        .iter()
        .zip(wav_b)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst <= 1e-5, "max |diff| {worst:e}");
}

#[test]
fn bench_reports_every_metric_with_provenance() {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = tmp.path().join("requests.jsonl");
    let mut c = bin();
    c.args([
        "bench",
        "--lengths",
        "short",
        "--concurrency",
        "1,2",
        "--repeats",
        "2",
        "--warmup",
        "1",
        "--frames",
        "4",
        "--json",
    ]);
    c.arg("--model")
        .arg(fixture("tiny-a"))
        .arg("--jsonl")
        .arg(&jsonl);
    let o = ok(&mut c);
    let doc: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("bench --json prints one JSON document");
    let p = &doc["provenance"];
    for k in [
        "git_commit",
        "cpu_model",
        "isa",
        "threads",
        "precision",
        "model",
        "run",
    ] {
        assert!(p.get(k).is_some(), "provenance lacks {k}");
    }
    // The host's class, measured: what bounds the model on it.
    let h = &p["host"];
    for k in ["read_gb_s", "int8_matmul_gmacs", "bf16_conv_gmacs"] {
        let r = &h[k];
        let (lo, mid, hi) = (
            r["min"].as_f64().unwrap_or(f64::NAN),
            r["median"].as_f64().unwrap_or(f64::NAN),
            r["max"].as_f64().unwrap_or(f64::NAN),
        );
        assert!(lo > 0.0 && lo <= mid && mid <= hi, "host {k}: {r}");
    }
    assert!(h["threads"].as_u64().is_some_and(|t| t >= 1), "{h}");
    assert!(h["bf16_conv_gmacs"]["path"].is_string(), "{h}");
    // Memory in detail: tests/it/memory.rs.
    let rss = &doc["rss_anon_kb"];
    for k in [
        "start",
        "after_load",
        "load_peak",
        "requests_peak",
        "peak",
        "end",
    ] {
        assert!(rss[k].as_u64().is_some_and(|v| v > 0), "{k}: {rss}");
    }
    assert_eq!(doc["provenance"]["run"]["text_streaming"], false);
    assert!(doc["cold_start_ms"].is_f64());
    assert_eq!(
        doc["engine"]["reserved_bytes"], 0,
        "ledger back to zero at shutdown"
    );
    let cells = doc["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2);
    for (cell, conc) in cells.iter().zip([1u64, 2]) {
        assert_eq!(cell["concurrency"], conc);
        let n = 2 * conc;
        assert_eq!(cell["n"], n, "warm-ups excluded");
        assert_eq!(cell["warmup"]["n"], conc);
        assert_eq!(cell["complete"], n);
        assert_eq!(cell["finite"], n);
        assert_eq!(
            cell["frames"],
            4 * n,
            "--frames forces fixed-length utterances"
        );
        for f in [
            "ttfp_ms",
            "e2el_ms",
            "rtf",
            "stream_rtf",
            "required_prebuffer_ms",
            "ttft_ms",
            "tpot_ms",
            "talker_ms",
            "code_predictor_ms",
            "code2wav_ms",
            "handoff_ms",
        ] {
            let s = &cell["summary"][f];
            assert_eq!(s["n"], n, "{f}: {s}");
            assert!(s["p50"].as_f64().unwrap() <= s["p95"].as_f64().unwrap());
            assert!(s["p95"].as_f64().unwrap() <= s["max"].as_f64().unwrap());
            assert!(s["argmax"]
                .as_str()
                .unwrap()
                .starts_with(&format!("short/c{conc}/r")));
        }
    }
    // One JSONL record per request, warm-ups marked.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3 + 6);
    assert_eq!(lines.iter().filter(|l| l["warmup"] == true).count(), 3);
    assert!(lines
        .iter()
        .all(|l| l["metrics"]["continuity_ok"].is_boolean()));
}

#[test]
fn bench_text_streaming_feeds_the_text_per_frame_and_says_so() {
    let mut prefill = Vec::new();
    for streaming in [false, true] {
        let mut c = bin();
        c.args([
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
            "2",
            "--json",
        ]);
        c.arg("--model").arg(fixture("tiny-b"));
        if streaming {
            c.arg("--text-streaming");
        }
        let o = ok(&mut c);
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(doc["provenance"]["run"]["text_streaming"], streaming);
        let cell = &doc["cells"][0];
        assert_eq!(cell["length"], "ten");
        assert_eq!(cell["complete"], 1);
        let rows = &cell["prompt_rows"];
        let trailing = rows["trailing_text"].as_u64().unwrap();
        // The ten words are > 1 token each side of the first: all but the
        // first trail the prefill, one per frame, when streaming.
        assert_eq!(trailing > 1, streaming, "{rows}");
        prefill.push(rows["prefill"].as_u64().unwrap());
    }
    assert!(
        prefill[1] + 10 <= prefill[0],
        "text streaming prefills fewer rows: {prefill:?}"
    );
}

#[test]
fn bench_scoreboard_offers_more_streams_until_admission_refuses_and_says_how_many_stay_continuous()
{
    let o = ok(bin()
        .args([
            "bench",
            "--scoreboard",
            "--json",
            "--lengths",
            "ten",
            "--max-streams",
            "3",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--frames",
            "24",
            "--calibrate-frames",
            "200",
        ])
        .arg("--model")
        .arg(fixture("tiny-a")));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    let sb = &doc["scoreboard"];
    assert_eq!(sb["frames"], 24);
    assert_eq!(sb["slack_order"], true);
    assert!(sb["admission"]
        .as_str()
        .unwrap()
        .starts_with("measured real-time capacity"));
    let levels = sb["levels"].as_array().unwrap();
    assert!(!levels.is_empty() && levels.len() <= 3);
    for (i, l) in levels.iter().enumerate() {
        assert_eq!(l["offered"], i + 1, "levels climb one stream at a time");
        let n = |k: &str| l[k][0].as_u64().unwrap();
        assert_eq!(n("admitted") + n("refused"), (i + 1) as u64);
        assert!(n("continuous") <= n("admitted"));
    }
    // The headline is measured (a number, possibly 0), never missing here.
    assert!(sb["continuous_streams"].is_u64(), "{sb}");
    assert!(doc["provenance"]["cpu_model"].is_string());
    assert!(
        doc["provenance"]["host"]["read_gb_s"]["median"]
            .as_f64()
            .is_some_and(|g| g > 0.0),
        "the scoreboard names its host's class: {}",
        doc["provenance"]["host"]
    );
}

#[test]
fn bench_scoreboard_refuses_bad_bounds_naming_the_flag() {
    for (flag, value) in [
        ("--max-streams", "0"),
        ("--realtime-load", "1.5"),
        ("--calibrate-frames", "20000"),
    ] {
        let o = bin()
            .args(["bench", "--scoreboard", flag, value])
            .arg("--model")
            .arg(fixture("tiny-a"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(flag), "{flag}: {err}");
    }
}
