//! The `tts-rt` binary end to end: `speak`, `decode`, `voices`,
//! `gen-checkpoint`, and its error messages.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use safetensors::SafeTensors;

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

fn run(c: &mut Command) -> Output {
    c.stdin(Stdio::null()).output().expect("run tts-rt")
}

fn ok(c: &mut Command) -> Output {
    let o = run(c);
    assert!(
        o.status.success(),
        "tts-rt failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn fails_with(c: &mut Command, needles: &[&str]) {
    let o = run(c);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "expected failure, got success; stderr: {err}"
    );
    assert!(!err.contains("panicked"), "panicked: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr should mention {n:?}: {err}");
    }
}

fn read_wav_f32(path: &Path) -> (u32, Vec<f32>) {
    let mut r = hound::WavReader::open(path).unwrap();
    let rate = r.spec().sample_rate;
    (rate, r.samples::<f32>().map(|s| s.unwrap()).collect())
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let n: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let d: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (n / d).sqrt()
}

struct Case {
    args: Vec<String>,
    codes: Vec<Vec<u32>>,
    wav: Vec<f32>,
}

/// The first golden case of a fixture as CLI arguments plus its expected output.
fn golden_case(fx: &str, index: usize) -> Case {
    let dir = fixture("goldens").join(fx);
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    let c = &cases["cases"][index];
    let name = c["name"].as_str().unwrap();
    let bytes = std::fs::read(dir.join("goldens.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let codes_t = st.tensor(&format!("{name}.codes")).unwrap();
    let g = codes_t.shape()[1];
    let flat: Vec<u32> = codes_t
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
        .collect();
    let wav: Vec<f32> = st
        .tensor(&format!("{name}.wav"))
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let mut args = vec![
        "speak".to_string(),
        c["text"].as_str().unwrap().to_string(),
        "--model".into(),
        fixture(fx).display().to_string(),
        "--speaker".into(),
        c["speaker"].as_str().unwrap().into(),
        "--language".into(),
        c["language"].as_str().unwrap().into(),
        "--greedy".into(),
        "--max-frames".into(),
        (c["max_new_tokens"].as_u64().unwrap() - 1).to_string(),
    ];
    if let Some(i) = c["instruct"].as_str() {
        args.extend(["--instruct".into(), i.into()]);
    }
    if !c["non_streaming_mode"].as_bool().unwrap() {
        args.push("--text-streaming".into());
    }
    Case {
        args,
        codes: flat.chunks(g).map(|f| f.to_vec()).collect(),
        wav,
    }
}

#[test]
fn speak_reproduces_official_greedy_output_on_both_fixtures() {
    let tmp = tempfile::tempdir().unwrap();
    for (fx, idx) in [("tiny-a", 0), ("tiny-a", 2), ("tiny-b", 0)] {
        let case = golden_case(fx, idx);
        let wav = tmp.path().join(format!("{fx}-{idx}.wav"));
        let codes = tmp.path().join(format!("{fx}-{idx}.json"));
        ok(bin()
            .args(&case.args)
            .arg("--out")
            .arg(&wav)
            .arg("--wav-format")
            .arg("f32")
            .arg("--codes-out")
            .arg(&codes));
        let got: Vec<Vec<u32>> =
            serde_json::from_str(&std::fs::read_to_string(&codes).unwrap()).unwrap();
        assert_eq!(got, case.codes, "{fx}/{idx}: codes");
        let (_, samples) = read_wav_f32(&wav);
        let e = rel_l2(&samples, &case.wav);
        assert!(e <= 1e-4, "{fx}/{idx}: waveform rel-L2 {e:.2e}");

        // decode: the same codes give the same audio; --stream agrees too
        // (identical up to 300 frames).
        for stream in [false, true] {
            let out = tmp.path().join(format!("{fx}-{idx}-dec{stream}.wav"));
            let mut c = bin();
            c.args(["decode", "--model"])
                .arg(fixture(fx))
                .arg("--codes")
                .arg(&codes)
                .arg("--out")
                .arg(&out);
            c.args(["--wav-format", "f32"]);
            if stream {
                c.arg("--stream");
            }
            ok(&mut c);
            let (_, dec) = read_wav_f32(&out);
            let e = rel_l2(&dec, &case.wav);
            assert!(
                e <= 1e-4,
                "{fx}/{idx}: decode (stream={stream}) rel-L2 {e:.2e}"
            );
        }
    }
}

#[test]
fn speak_writes_pcm16_to_stdout_and_reads_text_from_stdin() {
    let mut c = bin();
    c.args(["speak", "--model"]).arg(fixture("tiny-a")).args([
        "--speaker",
        "ryan",
        "--max-frames",
        "3",
        "--out",
        "-",
    ]);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Hello from stdin.\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = hound::WavReader::new(std::io::Cursor::new(o.stdout)).unwrap();
    assert_eq!(r.spec().bits_per_sample, 16);
    assert_eq!(r.spec().sample_rate, 24000);
    assert!(
        r.len() > 0 && (r.len() as usize).is_multiple_of(1920),
        "{} samples",
        r.len()
    );
}

#[test]
fn int8_and_fast_precisions_speak_on_both_fixtures() {
    let tmp = tempfile::tempdir().unwrap();
    for (fx, prec, want) in [
        ("tiny-a", "int8", "int8,int8"),
        ("tiny-b", "int8,f32", "int8,f32"),
        ("tiny-b", "fast", "int8,int8,int8"),
    ] {
        let wav = tmp.path().join(format!("{fx}-{prec}.wav"));
        let o = ok(bin()
            .args([
                "speak",
                "Hello there.",
                "--max-frames",
                "4",
                "--timings",
                "--precision",
                prec,
                "--model",
            ])
            .arg(fixture(fx))
            .arg("--out")
            .arg(&wav));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(want),
            "timings should name the precision {want}: {err}"
        );
        let (_, s) = read_wav_f32_any(&wav);
        assert!(!s.is_empty() && s.iter().all(|v| v.is_finite()));
    }
}

fn read_wav_f32_any(path: &Path) -> (u32, Vec<f32>) {
    let mut r = hound::WavReader::open(path).unwrap();
    let rate = r.spec().sample_rate;
    (
        rate,
        r.samples::<i16>()
            .map(|s| s.unwrap() as f32 / 32767.0)
            .collect(),
    )
}

#[test]
fn voices_lists_speakers_and_languages() {
    let o = ok(bin().args(["voices", "--model"]).arg(fixture("tiny-b")));
    let s = String::from_utf8_lossy(&o.stdout);
    for w in [
        "aiden",
        "vivian",
        "dylan",
        "chinese",
        "english",
        "auto",
        "supported",
    ] {
        assert!(s.contains(w), "voices output lacks {w}: {s}");
    }
}

#[test]
fn gen_checkpoint_tiny_loads_and_speaks() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    ok(bin()
        .args(["gen-checkpoint", "--preset", "tiny", "--out"])
        .arg(&dir));
    let wav = tmp.path().join("x.wav");
    ok(bin()
        .args([
            "speak",
            "Hello world.",
            "--max-frames",
            "4",
            "--wav-format",
            "f32",
            "--model",
        ])
        .arg(&dir)
        .arg("--out")
        .arg(&wav));
    let (rate, s) = read_wav_f32(&wav);
    assert_eq!(rate, 24000);
    assert_eq!(s.len(), 4 * 1920);
    assert!(s.iter().all(|v| v.is_finite()));
    let (lo, hi) = s
        .iter()
        .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    assert!(hi - lo > 0.01, "random checkpoint audio is constant");
}

#[test]
fn user_errors_are_clear() {
    let a = fixture("tiny-a");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.wav");
    fails_with(
        bin()
            .args(["speak", "Hi", "--speaker", "nobody", "--model"])
            .arg(&a)
            .arg("--out")
            .arg(&out),
        &["nobody", "ryan"],
    );
    fails_with(
        bin()
            .args(["speak", "Hi", "--language", "elvish", "--model"])
            .arg(&a)
            .arg("--out")
            .arg(&out),
        &["elvish", "english"],
    );
    fails_with(
        bin()
            .args(["speak", "   ", "--model"])
            .arg(&a)
            .arg("--out")
            .arg(&out),
        &["empty"],
    );
    fails_with(
        bin()
            .args(["speak", "Hi", "--max-frames", "0", "--model"])
            .arg(&a)
            .arg("--out")
            .arg(&out),
        &["--max-frames"],
    );
    fails_with(
        bin()
            .args(["speak", "Hi", "--max-frames", "999999999", "--model"])
            .arg(&a)
            .arg("--out")
            .arg(&out),
        &["--max-frames"],
    );
    fails_with(
        bin()
            .args(["speak", "Hi", "--model"])
            .arg(&a)
            .args(["--out", "/nonexistent-dir/x.wav"]),
        &["/nonexistent-dir/x.wav"],
    );
    fails_with(
        bin()
            .args(["speak", "Hi", "--model", "/nonexistent-model", "--out"])
            .arg(&out),
        &["/nonexistent-model"],
    );
    fails_with(
        bin()
            .args(["speak", "Hi", "--wav-format", "mp3", "--model"])
            .arg(&a)
            .arg("--out")
            .arg(&out),
        &["mp3"],
    );
    fails_with(
        bin()
            .args(["speak", "Hi", "--precision", "int4", "--model"])
            .arg(&a)
            .arg("--out")
            .arg(&out),
        &["int4", "int8", "fast"],
    );
    // No model anywhere: the message says how to get one.
    let home = tempfile::tempdir().unwrap();
    fails_with(
        bin()
            .env("HOME", home.path())
            .env("HF_HUB_OFFLINE", "1")
            .env_remove("HF_HOME")
            .env_remove("HF_HUB_CACHE")
            .env_remove("XDG_CACHE_HOME")
            .args(["speak", "Hi", "--out"])
            .arg(&out),
        &[
            "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
            "hf download",
            "--model",
        ],
    );
    // decode: malformed and out-of-range codes.
    let codes = tmp.path().join("c.json");
    std::fs::write(&codes, "[[1,2,3]]").unwrap();
    fails_with(
        bin()
            .args(["decode", "--model"])
            .arg(&a)
            .arg("--codes")
            .arg(&codes)
            .arg("--out")
            .arg(&out),
        &["frame 0", "8"],
    );
    std::fs::write(&codes, format!("[{:?}]", vec![5000; 8])).unwrap();
    fails_with(
        bin()
            .args(["decode", "--model"])
            .arg(&a)
            .arg("--codes")
            .arg(&codes)
            .arg("--out")
            .arg(&out),
        &["5000"],
    );
    std::fs::write(&codes, "{oops").unwrap();
    fails_with(
        bin()
            .args(["decode", "--model"])
            .arg(&a)
            .arg("--codes")
            .arg(&codes)
            .arg("--out")
            .arg(&out),
        &["JSON array"],
    );
}

#[test]
fn gen_checkpoint_tokenizer_from_copies_a_real_vocabulary() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("tiny-b");
    let dir = tmp.path().join("ckpt");
    ok(bin()
        .args(["gen-checkpoint", "--preset", "tiny", "--tokenizer-from"])
        .arg(&src)
        .arg("--out")
        .arg(&dir));
    for f in ["vocab.json", "merges.txt", "tokenizer_config.json"] {
        assert_eq!(
            std::fs::read(dir.join(f)).unwrap(),
            std::fs::read(src.join(f)).unwrap(),
            "{f} not copied"
        );
    }
    // The checkpoint still speaks with the copied tokenizer.
    let wav = tmp.path().join("x.wav");
    ok(bin()
        .args(["speak", "Hello world.", "--max-frames", "2", "--model"])
        .arg(&dir)
        .arg("--out")
        .arg(&wav));
    // A source without a tokenizer is named before anything is written.
    let bad = tmp.path().join("empty");
    std::fs::create_dir(&bad).unwrap();
    let out = tmp.path().join("never");
    fails_with(
        bin()
            .args(["gen-checkpoint", "--preset", "tiny", "--tokenizer-from"])
            .arg(&bad)
            .arg("--out")
            .arg(&out),
        &["--tokenizer-from", "vocab.json"],
    );
    assert!(
        !out.exists(),
        "nothing is written for a bad --tokenizer-from"
    );
}
