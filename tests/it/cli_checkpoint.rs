//! Broken checkpoints fail at load, naming the key, in every subcommand
//! that loads one — `serve` included, which must exit instead of
//! reporting ready and then failing every request. Each case is a copy of
//! tests/fixtures/tiny-a (weights and tokenizer symlinked, so nothing large
//! is copied) with one key of config.json or generation_config.json edited.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-a")
}

/// A copy of tiny-a named `name` whose `file` (config.json or
/// generation_config.json) went through `edit`.
fn broken(name: &str, file: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("cli_checkpoint")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(fixture()).unwrap() {
        let e = e.unwrap();
        if e.file_name() != file {
            std::os::unix::fs::symlink(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
    let from = fixture().join(file);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(from).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(dir.join(file), serde_json::to_string_pretty(&v).unwrap()).unwrap();
    dir
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.env_remove("TTS_RT_MODEL").stdin(Stdio::null());
    c
}

/// `voices` and `speak` on `dir` fail with exit code 1 naming `needles`.
fn load_fails(dir: &Path, needles: &[&str]) {
    let out = dir.join("never.wav");
    for args in [
        vec!["voices", "--model", dir.to_str().unwrap()],
        vec![
            "speak",
            "Hello.",
            "--model",
            dir.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    ] {
        let o = bin().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        for n in needles {
            assert!(err.contains(n), "{args:?}: stderr lacks {n:?}: {err}");
        }
        assert!(!out.exists(), "a failed load wrote {}", out.display());
    }
}

#[test]
fn custom_voice_checkpoint_without_speakers_fails_at_load() {
    let dir = broken("no_spk_id", "config.json", |v| {
        let t = v["talker_config"].as_object_mut().unwrap();
        t.remove("spk_id");
        t.remove("spk_is_dialect");
    });
    load_fails(&dir, &["`talker_config.spk_id`", "names no speakers"]);
}

#[test]
fn serve_exits_on_a_checkpoint_without_speakers_instead_of_reporting_ready() {
    let dir = broken("serve_no_spk_id", "config.json", |v| {
        v["talker_config"]["spk_id"] = json!({});
        v["talker_config"]["spk_is_dialect"] = json!({});
    });
    let mut child = bin()
        .args(["serve", "--model", dir.to_str().unwrap(), "--port", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve kept running on a checkpoint without speakers");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains("spk_id"), "{err}");
}

#[test]
fn zero_max_position_embeddings_fails_at_load_naming_the_key() {
    let dir = broken("zero_positions", "config.json", |v| {
        v["talker_config"]["max_position_embeddings"] = json!(0);
    });
    load_fails(
        &dir,
        &[
            "`talker_config.max_position_embeddings`",
            "must be positive",
        ],
    );
}

#[test]
fn zero_max_new_tokens_fails_at_load_naming_the_key() {
    let dir = broken("zero_new_tokens", "generation_config.json", |v| {
        v["max_new_tokens"] = json!(0);
    });
    load_fails(&dir, &["generation_config.json", "`max_new_tokens`"]);
}
