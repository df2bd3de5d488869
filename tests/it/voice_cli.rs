//! The voice surfaces of the `tts-rt` binary on the tiny-base and tiny-vd
//! fixtures: `speak --ref-audio/--ref-text/--x-vector-only`, `speak
//! --instruct` on VoiceDesign, and `voice add|list|show|rm|import|export`
//! with `speak --voice`, against the official goldens; and their refusals.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{clone_root, rel_l2, root, Golden};
use serde_json::Value;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.env_remove("TTS_RT_MODEL").env_remove("TTS_RT_VOICES_DIR");
    c
}

fn run(c: &mut Command) -> Output {
    c.stdin(Stdio::null()).output().expect("run tts-rt")
}

fn ok(c: &mut Command) -> String {
    let o = run(c);
    assert!(
        o.status.success(),
        "tts-rt failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails_with(c: &mut Command, needles: &[&str]) {
    let o = run(c);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "expected failure; stderr: {err}");
    assert!(!err.contains("panicked"), "panicked: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr should mention {n:?}: {err}");
    }
}

fn clip(name: &str) -> PathBuf {
    clone_root()
        .join("goldens/tiny-base")
        .join(format!("{name}.wav"))
}

fn read_codes(p: &Path) -> Vec<u32> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .flat_map(|f| {
            f.as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_u64().unwrap() as u32)
        })
        .collect()
}

fn read_wav(p: &Path) -> Vec<f32> {
    hound::WavReader::open(p)
        .unwrap()
        .samples::<f32>()
        .map(|s| s.unwrap())
        .collect()
}

/// `speak` for one golden case with `extra` voice flags, checking codes and
/// the official waveform (after the ICL cut).
fn speak_case(fx: &str, case: &Value, extra: &[&str], dir: &Path) {
    let g = Golden::load(fx);
    let name = case["name"].as_str().unwrap();
    let (codes, wav) = (
        dir.join(format!("{name}.json")),
        dir.join(format!("{name}.wav")),
    );
    let max_frames = (case["max_new_tokens"].as_u64().unwrap() - 1).to_string();
    let mode = if case["non_streaming_mode"].as_bool().unwrap() {
        "prefill"
    } else {
        "streaming"
    };
    let mut c = bin();
    c.args(["speak", case["text"].as_str().unwrap(), "--greedy"])
        .arg("--model")
        .arg(fixture_dir(fx))
        .args(["--language", case["language"].as_str().unwrap()])
        .args(["--max-frames", &max_frames, "--text-mode", mode])
        .args(["--wav-format", "f32"])
        .arg("--codes-out")
        .arg(&codes)
        .arg("--out")
        .arg(&wav)
        .args(extra);
    ok(&mut c);
    assert_eq!(
        read_codes(&codes),
        g.codes(&format!("{name}.codes")).0,
        "{name}: codes"
    );
    let e = rel_l2(&read_wav(&wav), &g.f32(&format!("{name}.wav")).0);
    assert!(e <= 1e-4, "{name}: waveform rel-L2 {e:.2e}");
}

/// tiny-base and tiny-vd from [`clone_root`]; the others committed.
fn fixture_dir(fx: &str) -> PathBuf {
    match fx {
        "tiny-base" | "tiny-vd" => clone_root().join(fx),
        _ => root().join(fx),
    }
}

fn cases(fx: &str) -> Vec<Value> {
    Golden::load(fx).cases["cases"].as_array().unwrap().clone()
}

fn ref_text(clip: &str) -> String {
    let g = Golden::load("tiny-base");
    g.cases["ref_clips"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == clip)
        .unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn speak_clones_from_a_reference_clip_like_the_official() {
    let dir = tempfile::tempdir().unwrap();
    for case in cases("tiny-base") {
        let clip_name = case["ref_audio"].as_str().unwrap();
        let path = clip(clip_name).to_string_lossy().into_owned();
        let text = ref_text(clip_name);
        let mut extra = vec!["--ref-audio", &path];
        if case["x_vector_only"].as_bool().unwrap() {
            extra.push("--x-vector-only");
        } else {
            extra.extend(["--ref-text", &text]);
        }
        speak_case("tiny-base", &case, &extra, dir.path());
    }
}

#[test]
fn speak_designs_a_voice_from_its_description_like_the_official() {
    let dir = tempfile::tempdir().unwrap();
    for case in cases("tiny-vd") {
        let instruct = case["instruct"].as_str().unwrap();
        speak_case("tiny-vd", &case, &["--instruct", instruct], dir.path());
        if instruct.is_empty() {
            // No --instruct at all is the same request.
            speak_case("tiny-vd", &case, &[], dir.path());
        }
    }
}

/// A Base checkpoint whose codec keeps 8 code groups (8 of its encoder's 16
/// levels; the released codec keeps 16): `voice add` refused it ("reference
/// codes have 8 groups per frame; the codec has 16") while `speak
/// --ref-audio` spoke the official codes, because the voice record was
/// checked against the released codec instead of the checkpoint's encoder.
/// Now the voice is stored and speaks what `speak --ref-audio` and the
/// official code speak.
#[test]
fn voice_add_reads_the_code_groups_where_speak_does() {
    let fx = "tiny-base8";
    let g = Golden::load(fx);
    let clip = &g.cases["ref_clips"][0];
    let clip_path = root()
        .join("goldens")
        .join(fx)
        .join(clip["file"].as_str().unwrap());
    let text = clip["text"].as_str().unwrap();
    let voices = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    for case in cases(fx) {
        let name = case["name"].as_str().unwrap();
        let mut add = bin();
        add.args(["voice", "add", name, "--audio"])
            .arg(&clip_path)
            .arg("--model")
            .arg(fixture_dir(fx))
            .arg("--voices-dir")
            .arg(voices.path());
        let mut direct = vec!["--ref-audio".to_string(), clip_path.display().to_string()];
        if case["x_vector_only"].as_bool().unwrap() {
            add.arg("--x-vector-only");
            direct.push("--x-vector-only".into());
        } else {
            add.args(["--text", text]);
            direct.extend(["--ref-text".into(), text.into()]);
        }
        let made = ok(&mut add);
        if !case["x_vector_only"].as_bool().unwrap() {
            let frames = clip["ref_frames"].as_u64().unwrap();
            assert!(
                made.contains(&format!("{frames} reference frames")),
                "{made}"
            );
        }
        let direct: Vec<&str> = direct.iter().map(String::as_str).collect();
        speak_case(fx, &case, &direct, out.path());
        let voices_dir = voices.path().to_string_lossy().into_owned();
        speak_case(
            fx,
            &case,
            &["--voice", name, "--voices-dir", &voices_dir],
            out.path(),
        );
    }
}

/// A Base checkpoint whose codec keeps 8 code groups (tiny-base8) stores
/// voices with `ref_code` `[T, 8]`; the commands that load no model (`voice
/// list|show|export|rm`) checked every voice against the released codec's
/// 16 groups and called it corrupt. Without a model each voice is read in
/// its own shape.
#[test]
fn voices_of_a_codec_keeping_8_groups_are_not_corrupt_without_a_model() {
    let fx = "tiny-base8";
    let g = Golden::load(fx);
    let clip = &g.cases["ref_clips"][0];
    let clip_path = root()
        .join("goldens")
        .join(fx)
        .join(clip["file"].as_str().unwrap());
    let (text, frames) = (
        clip["text"].as_str().unwrap(),
        clip["ref_frames"].as_u64().unwrap(),
    );
    let voices = tempfile::tempdir().unwrap();
    let vd = voices.path().to_string_lossy().into_owned();
    ok(bin()
        .args(["voice", "add", "eight", "--audio"])
        .arg(&clip_path)
        .args(["--text", text, "--voices-dir", &vd])
        .arg("--model")
        .arg(fixture_dir(fx)));
    // Succeeds, and neither output speaks of a corrupt or skipped file.
    let clean = |c: &mut Command| {
        let o = run(c);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(o.status.success(), "tts-rt failed: {err}");
        for text in [out.as_str(), &err] {
            assert!(
                !text.contains("corrupt") && !text.contains("skipped"),
                "{out}{err}"
            );
        }
        out
    };
    let listed = clean(bin().args(["voice", "list", "--voices-dir", &vd]));
    assert!(listed.starts_with("eight  icl"), "{listed}");
    let shown = clean(bin().args(["voice", "show", "eight", "--voices-dir", &vd]));
    assert!(
        shown.contains(&format!("reference frames: {frames}")),
        "{shown}"
    );
    let json: Value = serde_json::from_str(&clean(bin().args([
        "voice",
        "show",
        "eight",
        "--json",
        "--voices-dir",
        &vd,
    ])))
    .unwrap();
    let codes = json["ref_codes"].as_array().unwrap();
    assert_eq!(codes.len() as u64, frames);
    assert!(codes.iter().all(|f| f.as_array().unwrap().len() == 8));

    let out = tempfile::tempdir().unwrap();
    let exported = clean(
        bin()
            .args(["voice", "export", "eight", "--format", "vllm-omni"])
            .args(["--voices-dir", &vd, "--out"])
            .arg(out.path()),
    );
    assert!(exported.contains("exported voice \"eight\""), "{exported}");
    assert_eq!(
        std::fs::read(out.path().join("eight.safetensors")).unwrap(),
        std::fs::read(voices.path().join("eight.safetensors")).unwrap()
    );
    // qwentts.cpp's .rvq holds 16 codebooks and cannot say otherwise.
    fails_with(
        bin()
            .args(["voice", "export", "eight", "--format", "qwentts"])
            .args(["--voices-dir", &vd, "--out"])
            .arg(out.path().join("qwentts")),
        &["8 code groups", "16"],
    );

    let removed = clean(bin().args(["voice", "rm", "eight", "--voices-dir", &vd]));
    assert_eq!(removed.trim(), "removed voice \"eight\"");
    let listed = clean(bin().args(["voice", "list", "--voices-dir", &vd]));
    assert!(listed.starts_with("no voices"), "{listed}");
}

#[test]
fn stored_voices_are_made_listed_shown_spoken_and_removed() {
    let voices = tempfile::tempdir().unwrap();
    let vd = voices.path().to_string_lossy().into_owned();
    let model = clone_root().join("tiny-base");
    let text = ref_text("ref_a");
    let out = ok(bin()
        .args(["voice", "add", "Alice", "--audio"])
        .arg(clip("ref_a"))
        .args(["--text", &text, "--voices-dir", &vd])
        .arg("--model")
        .arg(&model));
    assert!(
        out.contains("icl") && out.contains("27 reference frames"),
        "{out}"
    );
    ok(bin()
        .args(["voice", "add", "bob", "--x-vector-only", "--audio"])
        .arg(clip("ref_b"))
        .args(["--voices-dir", &vd])
        .arg("--model")
        .arg(&model));
    let list = ok(bin().args(["voice", "list", "--voices-dir", &vd]));
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(
        lines[0].starts_with("Alice  icl") && lines[1].starts_with("bob  xvec"),
        "{list}"
    );

    // show --json carries the official x-vector and reference codes.
    let json: Value = serde_json::from_str(&ok(bin().args([
        "voice",
        "show",
        "alice",
        "--json",
        "--voices-dir",
        &vd,
    ])))
    .unwrap();
    let enc = std::fs::read(clone_root().join("goldens/tiny-base/encoders.safetensors")).unwrap();
    let enc = safetensors::SafeTensors::deserialize(&enc).unwrap();
    let want: Vec<f32> = enc
        .tensor("ref_a.xvector")
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let got: Vec<f32> = json["x_vector"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    assert!(rel_l2(&got, &want) <= 1e-4);
    let want_codes: Vec<u64> = enc
        .tensor("ref_a.ref_codes")
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u64)
        .collect();
    let got_codes: Vec<u64> = json["ref_codes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f.as_array().unwrap().iter().map(|c| c.as_u64().unwrap()))
        .collect();
    assert_eq!(got_codes, want_codes);

    // speak --voice gives the official codes of the same clone.
    let dir = tempfile::tempdir().unwrap();
    for case in cases("tiny-base") {
        let voice = match (case["ref_audio"].as_str(), case["x_vector_only"].as_bool()) {
            (Some("ref_a"), Some(false)) => "alice",
            (Some("ref_b"), Some(true)) => "BOB",
            _ => continue,
        };
        speak_case(
            "tiny-base",
            &case,
            &["--voice", voice, "--voices-dir", &vd],
            dir.path(),
        );
    }

    // Export and import round trips through the other servers' layouts.
    let out = tempfile::tempdir().unwrap();
    let od = out.path().to_string_lossy().into_owned();
    ok(bin().args([
        "voice",
        "export",
        "alice",
        "--format",
        "vllm-omni",
        "--out",
        &od,
        "--voices-dir",
        &vd,
    ]));
    ok(bin().args([
        "voice",
        "export",
        "bob",
        "--format",
        "qwentts",
        "--out",
        &od,
        "--voices-dir",
        &vd,
    ]));
    let other = tempfile::tempdir().unwrap();
    let other_d = other.path().to_string_lossy().into_owned();
    // Tiny voices fit no released talker (1024 or 2048 values): refused by
    // name.
    fails_with(
        bin().args(["voice", "import", &od, "--voices-dir", &other_d]),
        &["values fits no released talker"],
    );

    ok(bin().args(["voice", "rm", "alice", "--voices-dir", &vd]));
    let list = ok(bin().args(["voice", "list", "--voices-dir", &vd]));
    assert!(!list.contains("Alice"), "{list}");
    fails_with(
        bin().args(["voice", "rm", "alice", "--voices-dir", &vd]),
        &["no voice named \"alice\"", "bob"],
    );
}

#[test]
fn voice_and_clone_refusals_name_the_problem() {
    let voices = tempfile::tempdir().unwrap();
    let vd = voices.path().to_string_lossy().into_owned();
    let base = clone_root().join("tiny-base");
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("x.wav");
    let speak = |model: &str| {
        let mut c = bin();
        c.args(["speak", "Hello there."])
            .arg("--model")
            .arg(match model {
                "tiny-a" => common::root().join(model),
                _ => clone_root().join(model),
            })
            .arg("--out")
            .arg(&out)
            .args(["--max-frames", "3"]);
        c
    };
    // A path trick in a name.
    fails_with(
        bin()
            .args([
                "voice",
                "add",
                "../evil",
                "--x-vector-only",
                "--voices-dir",
                &vd,
            ])
            .arg("--audio")
            .arg(clip("ref_a"))
            .arg("--model")
            .arg(&base),
        &["voice name \"../evil\"", "'/'"],
    );
    // Unreadable and too-short audio.
    let junk = scratch.path().join("junk.wav");
    std::fs::write(&junk, b"this is not audio at all, just text").unwrap();
    fails_with(
        speak("tiny-base")
            .arg("--ref-audio")
            .arg(&junk)
            .arg("--x-vector-only"),
        &["junk.wav"],
    );
    let short = scratch.path().join("short.wav");
    let mut w = hound::WavWriter::create(
        &short,
        hound::WavSpec {
            channels: 1,
            sample_rate: 24_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        },
    )
    .unwrap();
    for i in 0..480 {
        w.write_sample(((i as f32 * 0.3).sin() * 8000.0) as i16)
            .unwrap();
    }
    w.finalize().unwrap();
    fails_with(
        speak("tiny-base")
            .arg("--ref-audio")
            .arg(&short)
            .arg("--x-vector-only"),
        &["0.02", "0.5"],
    );
    // ICL without the transcript.
    fails_with(
        speak("tiny-base").arg("--ref-audio").arg(clip("ref_a")),
        &["transcript", "x-vector only"],
    );
    // Family mismatches.
    fails_with(
        speak("tiny-a")
            .arg("--ref-audio")
            .arg(clip("ref_a"))
            .arg("--x-vector-only"),
        &["CustomVoice checkpoint", "Base checkpoint"],
    );
    fails_with(
        &mut speak("tiny-base"),
        &["no voice to clone", "Base checkpoint"],
    );
    fails_with(
        speak("tiny-base").args(["--speaker", "ryan"]),
        &["preset speaker", "Base"],
    );
    // A corrupt voice file is named and skipped; the others stay usable.
    ok(bin()
        .args([
            "voice",
            "add",
            "good",
            "--x-vector-only",
            "--voices-dir",
            &vd,
        ])
        .arg("--audio")
        .arg(clip("ref_b"))
        .arg("--model")
        .arg(&base));
    std::fs::write(
        voices.path().join("broken.safetensors"),
        b"\x10\x00\x00\x00garbage",
    )
    .unwrap();
    let o = run(bin().args(["voice", "list", "--voices-dir", &vd]));
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("broken.safetensors"), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("good"));
    fails_with(
        speak("tiny-base").args(["--voice", "nobody", "--voices-dir", &vd]),
        &["no voice named \"nobody\"", "good"],
    );
}

/// Issue 28: speaking a voice removed with `tts-rt voice rm` said only that
/// no voice has that name; the refusal names it and says it may have been
/// deleted (another process removed it: this one cannot know more).
#[test]
fn a_voice_removed_with_voice_rm_is_refused_as_maybe_deleted() {
    let voices = tempfile::tempdir().unwrap();
    let vd = voices.path().to_string_lossy().into_owned();
    let model = clone_root().join("tiny-base");
    for name in ["carol", "dave"] {
        ok(bin()
            .args(["voice", "add", name, "--x-vector-only", "--audio"])
            .arg(clip("ref_b"))
            .args(["--voices-dir", &vd])
            .arg("--model")
            .arg(&model));
    }
    ok(bin().args(["voice", "rm", "carol", "--voices-dir", &vd]));
    let out = tempfile::tempdir().unwrap();
    fails_with(
        bin()
            .args(["speak", "Hello.", "--voice", "carol", "--voices-dir", &vd])
            .arg("--model")
            .arg(&model)
            .arg("--out")
            .arg(out.path().join("x.wav")),
        &[
            "no voice named \"carol\" in the library (it may have been deleted)",
            "stored voices: dave",
        ],
    );
}

/// The lines of a failed run's stderr that carry `needle`.
fn lines_with(stderr: &str, needle: &str) -> usize {
    stderr.matches(needle).count()
}

/// Issue 31: every reference-audio refusal printed its cause twice (the
/// wrapper's message included its cause, and the cause was printed again as
/// the next "caused by"). Each cause is said once, by `voice add` and by
/// `speak --ref-audio`.
#[test]
fn reference_audio_errors_print_their_cause_once() {
    let voices = tempfile::tempdir().unwrap();
    let vd = voices.path().to_string_lossy().into_owned();
    let base = clone_root().join("tiny-base");
    let scratch = tempfile::tempdir().unwrap();
    let junk = scratch.path().join("junk.wav");
    std::fs::write(
        &junk,
        b"RIFF\x24\x00\x00\x00WAVEjunk-that-is-not-a-fmt-chunk",
    )
    .unwrap();
    let empty = scratch.path().join("empty.wav");
    std::fs::write(&empty, b"").unwrap();
    let missing = scratch.path().join("missing.wav");
    let out = scratch.path().join("x.wav");
    for (clip, cause) in [
        (&junk, "the reference audio is"),
        (&empty, "the reference audio is empty"),
    ] {
        let o = run(bin()
            .args(["voice", "add", "v", "--x-vector-only", "--voices-dir", &vd])
            .arg("--audio")
            .arg(clip)
            .arg("--model")
            .arg(&base));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{err}");
        assert_eq!(lines_with(&err, cause), 1, "voice add: {err}");
        assert!(
            !err.contains("reference audio: the reference audio"),
            "{err}"
        );
    }
    for (clip, cause) in [
        (&junk, "the reference audio is"),
        (&empty, "the reference audio is empty"),
        (&missing, "os error 2"),
    ] {
        let o = run(bin()
            .args(["speak", "Hello.", "--x-vector-only", "--max-frames", "3"])
            .arg("--ref-audio")
            .arg(clip)
            .arg("--model")
            .arg(&base)
            .arg("--out")
            .arg(&out));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{err}");
        assert_eq!(lines_with(&err, cause), 1, "speak --ref-audio: {err}");
    }
}

/// Issue 31: a voice whose file is corrupt (truncated, bad JSON, a version
/// this build does not read) was skipped by every command, and `voice rm
/// NAME` refused it as "no voice named": the only way out was deleting the
/// file by hand. `voice list` shows it as corrupt; `voice rm` removes it,
/// saying what it removed.
#[test]
fn voice_rm_removes_a_corrupt_voice_file() {
    let voices = tempfile::tempdir().unwrap();
    let vd = voices.path().to_string_lossy().into_owned();
    ok(bin()
        .args([
            "voice",
            "add",
            "good",
            "--x-vector-only",
            "--voices-dir",
            &vd,
        ])
        .arg("--audio")
        .arg(clip("ref_b"))
        .arg("--model")
        .arg(clone_root().join("tiny-base")));
    let good = std::fs::read(voices.path().join("good.safetensors")).unwrap();
    let mut version = good.clone();
    let tag = b"\"version\":\"";
    let at = version.windows(tag.len()).position(|w| w == tag).unwrap() + tag.len();
    version[at] = b'9';
    let mut badjson = 12u64.to_le_bytes().to_vec();
    badjson.extend_from_slice(b"{not json!!}");
    for (name, bytes) in [
        ("truncated", good[..good.len() / 2].to_vec()),
        ("badjson", badjson),
        ("version", version),
    ] {
        std::fs::write(voices.path().join(format!("{name}.safetensors")), bytes).unwrap();
    }
    let listed = ok(bin().args(["voice", "list", "--voices-dir", &vd]));
    assert!(listed.contains("good"), "{listed}");
    for name in ["truncated", "badjson", "version"] {
        assert!(
            listed.contains(&format!("{name}  corrupt")),
            "{name}: {listed}"
        );
        let said = ok(bin().args(["voice", "rm", name, "--voices-dir", &vd]));
        assert!(
            said.contains(&format!("removed voice \"{name}\"")) && said.contains("corrupt"),
            "{name}: {said}"
        );
        assert!(!voices.path().join(format!("{name}.safetensors")).exists());
    }
    fails_with(
        bin().args(["voice", "rm", "truncated", "--voices-dir", &vd]),
        &["no voice named \"truncated\"", "good"],
    );
    let listed = ok(bin().args(["voice", "list", "--voices-dir", &vd]));
    assert!(!listed.contains("corrupt"), "{listed}");
}

/// Copies `fixture` into a Hugging Face cache under `repo` (as `hf
/// download` leaves it: refs/main and a snapshot), for runs with
/// `HF_HUB_OFFLINE=1` that resolve a repo id without the network.
fn cache_with(cache: &Path, repo: &str, fixture: &Path) {
    let base = cache.join(format!("models--{}", repo.replace('/', "--")));
    let snap = base.join("snapshots/0123456789abcdef");
    copy_dir(fixture, &snap);
    std::fs::create_dir_all(base.join("refs")).unwrap();
    std::fs::write(base.join("refs/main"), "0123456789abcdef").unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Issue 31, item 4: `voice add` without `--model` took the general
/// default, the 0.6B CustomVoice checkpoint (a 2.3 GB download on a fresh
/// machine), and then refused: CustomVoice cannot make voices. It takes the
/// 0.6B Base checkpoint; a checkpoint of another family named by
/// `$TTS_RT_MODEL` or `--model` is refused before it loads (a hub id before
/// it downloads), with advice that works.
#[test]
fn voice_add_without_model_picks_a_base_checkpoint() {
    let cache = tempfile::tempdir().unwrap();
    let voices = tempfile::tempdir().unwrap();
    // The Base checkpoint is cached; the CustomVoice one is not, and the
    // hub is off limits: the old default failed here.
    cache_with(
        cache.path(),
        "Qwen/Qwen3-TTS-12Hz-0.6B-Base",
        &clone_root().join("tiny-base"),
    );
    let add = || {
        let mut c = bin();
        c.args(["voice", "add", "alice", "--x-vector-only"])
            .arg("--audio")
            .arg(clip("ref_a"))
            .arg("--voices-dir")
            .arg(voices.path())
            .env("HF_HUB_CACHE", cache.path())
            .env("HF_HUB_OFFLINE", "1");
        c
    };
    let out = ok(&mut add());
    assert!(out.contains("voice \"alice\""), "{out}");
    assert!(voices.path().join("alice.safetensors").is_file());
    // A CustomVoice directory in $TTS_RT_MODEL: refused before it loads.
    fails_with(
        add().env("TTS_RT_MODEL", common::root().join("tiny-a")),
        &[
            "is a CustomVoice checkpoint, which cannot make voices",
            "--model Qwen/Qwen3-TTS-12Hz-0.6B-Base",
        ],
    );
    // A CustomVoice repo id: refused before it is looked for or downloaded.
    fails_with(
        add().args(["--model", "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"]),
        &[
            "--model = Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice is a CustomVoice checkpoint",
            "--model Qwen/Qwen3-TTS-12Hz-0.6B-Base",
        ],
    );
}

/// Issue 31, item 4: `speak --voice NAME` on a CustomVoice checkpoint
/// compared the stored voice's talker with one that takes no clone ("made
/// for the 0b6 talker ...; this checkpoint is 0b6 ...: make the voice again
/// with this checkpoint", advice that cannot work). It names the
/// checkpoint's speakers and the real fix.
#[test]
fn custom_voice_voice_flag_names_the_speakers_and_the_fix() {
    let voices = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    ok(bin()
        .args(["voice", "add", "alice", "--x-vector-only"])
        .arg("--audio")
        .arg(clip("ref_a"))
        .arg("--model")
        .arg(clone_root().join("tiny-base"))
        .arg("--voices-dir")
        .arg(voices.path()));
    let speak = |voice: &str| {
        let mut c = bin();
        c.args(["speak", "Hello.", "--max-frames", "3", "--voice", voice])
            .arg("--model")
            .arg(common::root().join("tiny-a"))
            .arg("--voices-dir")
            .arg(voices.path())
            .arg("--out")
            .arg(scratch.path().join("x.wav"));
        c
    };
    let o = run(&mut speak("alice"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    for n in [
        "this checkpoint is CustomVoice",
        "dylan, eric, ryan, serena",
        "--speaker NAME",
        "--model Qwen/Qwen3-TTS-12Hz-0.6B-Base",
    ] {
        assert!(err.contains(n), "{n:?} in {err}");
    }
    assert!(!err.contains("0b6"), "{err}");
    assert!(!scratch.path().join("x.wav").exists());
    // A speaker's name given as --voice: the flag to use.
    fails_with(
        &mut speak("ryan"),
        &["\"ryan\" is one of its preset speakers: give --speaker ryan"],
    );
}

/// Issue 31, item 4: the voice library's errors said their cause in their
/// message and again as the next "caused by" line. One cause per line.
#[test]
fn one_cause_per_error_line_from_the_voice_library() {
    let scratch = tempfile::tempdir().unwrap();
    let not_a_dir = scratch.path().join("voices-file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let o = run(bin()
        .args(["voice", "list", "--voices-dir"])
        .arg(&not_a_dir));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.len() >= 2, "{err}");
    for w in lines.windows(2) {
        let cause = w[1].trim_start().trim_start_matches("caused by: ");
        assert!(!w[0].contains(cause), "said twice: {err}");
    }
    assert_eq!(lines_with(&err, "os error"), 1, "{err}");
}

/// Several `tts-rt serve` processes (replicas) on one voice directory, on
/// loopback: a voice added, replaced or removed through one is what the
/// others serve, with no restart; replicas adding one name at once leave
/// one whole voice.
#[cfg(unix)]
mod replicas {
    use super::*;
    use std::io::{Read, Write};
    use std::net::SocketAddr;
    use std::process::Child;
    use std::time::{Duration, Instant};

    /// A `serve` child, killed when dropped (a failed assertion must not
    /// leave it running).
    struct Server {
        child: Child,
        addr: SocketAddr,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn serve(voices: &Path, log: &Path) -> Server {
        let mut child = bin()
            .args(["serve", "--port", "0", "--voices-dir"])
            .arg(voices)
            .arg("--model")
            .arg(clone_root().join("tiny-base"))
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // To a file: a pipe nobody reads could fill and stall the server.
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("spawn tts-rt serve");
        let addr = common::listening_addr(&mut child);
        let server = Server { child, addr };
        let t0 = Instant::now();
        while request(addr, "GET", "/ready", None, b"").0 != 200 {
            assert!(t0.elapsed() < Duration::from_secs(120), "never ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// One HTTP/1.1 request on a fresh connection: the status and the body
    /// (chunked bodies de-chunked).
    fn request(
        addr: SocketAddr,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let ct = content_type
            .map(|c| format!("Content-Type: {c}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{ct}Content-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        s.write_all(body).unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a response head");
        let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let mut rest = &raw[split + 4..];
        let body = if head.contains("transfer-encoding: chunked") {
            let mut out = Vec::new();
            loop {
                let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
                let size = std::str::from_utf8(&rest[..eol]).unwrap();
                let n = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&rest[eol + 2..eol + 2 + n]);
                rest = &rest[eol + 4 + n..];
            }
            out
        } else {
            rest.to_vec()
        };
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// `POST /v1/audio/voices` as a multipart form with `clip`'s audio.
    fn add(addr: SocketAddr, fields: &[(&str, &str)], clip_name: &str) -> (u16, String) {
        let boundary = "----tts-rt-replicas-3b9c";
        let mut b = Vec::new();
        for (k, v) in fields {
            b.extend_from_slice(
                format!(
                    "--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
                )
                .as_bytes(),
            );
        }
        b.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"audio_sample\"; filename=\"{clip_name}.wav\"\r\nContent-Type: audio/wav\r\n\r\n")
                .as_bytes(),
        );
        b.extend_from_slice(&std::fs::read(clip(clip_name)).unwrap());
        b.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let ct = format!("multipart/form-data; boundary={boundary}");
        request(addr, "POST", "/v1/audio/voices", Some(&ct), &b)
    }

    fn speak(addr: SocketAddr, voice: &str) -> (u16, String) {
        let req = serde_json::json!({
            "model": "tts-1",
            "input": "Hello there.",
            "voice": voice,
            "response_format": "wav",
            "greedy": true,
            "max_frames": 6,
        });
        request(
            addr,
            "POST",
            "/v1/audio/speech",
            Some("application/json"),
            req.to_string().as_bytes(),
        )
    }

    fn json(body: &str) -> Value {
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
    }

    #[test]
    fn a_voice_added_by_one_server_is_served_by_another() {
        let tmp = tempfile::tempdir().unwrap();
        let vd = tmp.path().join("voices");
        let a = serve(&vd, &tmp.path().join("a.log"));
        let b = serve(&vd, &tmp.path().join("b.log"));
        let (a, b) = (a.addr, b.addr);
        assert_eq!(
            request(b, "GET", "/v1/audio/voices/alice", None, b"").0,
            404
        );

        let text = ref_text("ref_a");
        let (status, body) = add(a, &[("name", "Alice"), ("ref_text", &text)], "ref_a");
        assert_eq!(status, 201, "{body}");
        // Listed, shown and spoken by the other server, which was not told.
        let (status, body) = request(b, "GET", "/v1/audio/voices", None, b"");
        assert_eq!(status, 200, "{body}");
        let listed = json(&body);
        assert!(
            listed["uploaded_voices"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["name"] == "Alice"),
            "{body}"
        );
        let (status, body) = request(b, "GET", "/v1/audio/voices/alice", None, b"");
        assert_eq!(
            (status, json(&body)["mode"].as_str()),
            (200, Some("icl")),
            "{body}"
        );
        let (status, body) = speak(b, "alice");
        assert_eq!(status, 200, "{body}");
        assert!(body.starts_with("RIFF"), "a WAV body");

        // Replaced through b: a serves the new one.
        let (status, body) = add(
            b,
            &[
                ("name", "alice"),
                ("replace", "true"),
                ("x_vector_only_mode", "true"),
            ],
            "ref_b",
        );
        assert_eq!(status, 201, "{body}");
        let (status, body) = request(a, "GET", "/v1/audio/voices/alice", None, b"");
        assert_eq!(
            (status, json(&body)["mode"].as_str()),
            (200, Some("xvec")),
            "{body}"
        );
        assert_eq!(speak(a, "alice").0, 200);

        // Removed through a: b no longer has it, and says which voices it has.
        let (status, body) = request(a, "DELETE", "/v1/audio/voices/alice", None, b"");
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            request(b, "GET", "/v1/audio/voices/alice", None, b"").0,
            404
        );
        let (status, body) = speak(b, "alice");
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("alice"), "{body}");
        let (status, body) = request(b, "DELETE", "/v1/audio/voices/alice", None, b"");
        assert_eq!(status, 404, "{body}");
    }

    /// Two `tts-rt voice add` processes of one name at once: one stores
    /// it, the other fails saying the name exists or is being written, and
    /// never panics; the voice that is stored is whole.
    #[test]
    fn two_voice_add_processes_of_one_name_leave_one_whole_voice() {
        let tmp = tempfile::tempdir().unwrap();
        let vd = tmp.path().join("voices");
        let model = clone_root().join("tiny-base");
        let text = ref_text("ref_a");
        for round in 0..3 {
            let name = format!("same{round}");
            let children: Vec<_> = ["ref_a", "ref_b"]
                .into_iter()
                .map(|c| {
                    bin()
                        .args(["voice", "add", &name, "--text", &text, "--audio"])
                        .arg(clip(c))
                        .arg("--voices-dir")
                        .arg(&vd)
                        .arg("--model")
                        .arg(&model)
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            let outs: Vec<Output> = children
                .into_iter()
                .map(|c| c.wait_with_output().unwrap())
                .collect();
            let ok = outs.iter().filter(|o| o.status.success()).count();
            let errs: Vec<String> = outs
                .iter()
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .collect();
            assert_eq!(ok, 1, "{errs:?}");
            let refused = &errs[outs.iter().position(|o| !o.status.success()).unwrap()];
            assert!(!refused.contains("panicked"), "{refused}");
            assert!(
                refused.contains(&format!("\"{name}\""))
                    && (refused.contains("already exists") || refused.contains("being written")),
                "{refused}"
            );
        }
        let list = ok(bin().args(["voice", "list", "--voices-dir"]).arg(&vd));
        assert_eq!(list.lines().count(), 3, "{list}");
        assert!(!list.contains("corrupt"), "{list}");
    }

    /// Both replicas are asked to add one name at the same moment, over
    /// several names: each time one stores it (201) and the other is
    /// refused (409, naming the voice); the library then holds every
    /// voice whole, as both replicas and `voice list` see it.
    #[test]
    fn two_replicas_adding_one_name_at_once_leave_one_whole_voice() {
        let tmp = tempfile::tempdir().unwrap();
        let vd = tmp.path().join("voices");
        let a = serve(&vd, &tmp.path().join("a.log"));
        let b = serve(&vd, &tmp.path().join("b.log"));
        let text = ref_text("ref_a");
        let rounds = 4;
        for round in 0..rounds {
            let name = format!("same{round}");
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
            let replies: Vec<(u16, String)> = [(a.addr, "ref_a"), (b.addr, "ref_b")]
                .into_iter()
                .map(|(addr, clip_name)| {
                    let (barrier, name, text) = (barrier.clone(), name.clone(), text.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        add(addr, &[("name", &name), ("ref_text", &text)], clip_name)
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect();
            let mut statuses: Vec<u16> = replies.iter().map(|r| r.0).collect();
            statuses.sort();
            assert_eq!(statuses, [201, 409], "{replies:?}");
            let refused = &replies.iter().find(|r| r.0 == 409).unwrap().1;
            assert!(
                json(refused)["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&format!("\"{name}\"")))
                    && (refused.contains("already exists") || refused.contains("being written")),
                "{refused}"
            );
            for server in [&a, &b] {
                let (status, body) = request(
                    server.addr,
                    "GET",
                    &format!("/v1/audio/voices/{name}"),
                    None,
                    b"",
                );
                assert_eq!(status, 200, "{body}");
            }
        }
        drop((a, b));
        let list = ok(bin().args(["voice", "list", "--voices-dir"]).arg(&vd));
        assert_eq!(list.lines().count(), rounds, "{list}");
        assert!(!list.contains("corrupt"), "{list}");
        let left: Vec<String> = std::fs::read_dir(&vd)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(left.iter().all(|f| f.ends_with(".safetensors")), "{left:?}");
    }
}
