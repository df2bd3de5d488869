//! Long jobs and what they print (issue 31, item 2): a progress line
//! (audio seconds made, rtf) only on a terminal, nothing extra on a pipe;
//! and a random-weight checkpoint run without `--max-frames` (minutes of
//! noise that seldom ends) warned about before it starts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.env_remove("TTS_RT_MODEL").stdin(Stdio::null());
    c
}

fn run(c: &mut Command) -> (Output, String) {
    let o = c.output().expect("run tts-rt");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!err.contains("panicked"), "panicked: {err}");
    (o, err)
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-a")
}

/// On a pipe (as here: the test reads stderr), `speak` to a file and
/// `gen-checkpoint` print their start and end lines only: no progress line,
/// no carriage return.
#[test]
fn progress_on_long_jobs_prints_nothing_extra_on_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let (o, err) = run(bin()
        .args(["speak", "Hello there, a few words.", "--max-frames", "12"])
        .arg("--model")
        .arg(fixture())
        .arg("--out")
        .arg(dir.path().join("x.wav")));
    assert!(o.status.success(), "{err}");
    assert!(!err.contains('\r'), "{err:?}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "only the precision line: {err}");
    assert!(lines[0].starts_with("precision reference"), "{err}");
    assert!(
        !err.contains("generating") && !err.contains("of audio in"),
        "{err}"
    );
    let (o, err) = run(bin()
        .args(["gen-checkpoint", "--preset", "tiny", "--out"])
        .arg(dir.path().join("ckpt")));
    assert!(o.status.success(), "{err}");
    assert!(!err.contains('\r') && !err.contains("writing:"), "{err:?}");
}

/// `gen-checkpoint` marks its output as random weights (an extra
/// config.json key the official loader ignores); `speak` on it without
/// `--max-frames` says, before it runs, that it will run to the frame cap
/// and which flag to give; with the flag it says nothing. (The speaker is
/// unknown, so no run goes further than its checks.)
#[test]
fn progress_on_long_jobs_a_random_checkpoint_without_max_frames_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let (o, err) = run(bin()
        .args(["gen-checkpoint", "--preset", "tiny", "--seed", "3", "--out"])
        .arg(&ckpt));
    assert!(o.status.success(), "{err}");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["tts_rt_random_weights"]["seed"], 3, "{config}");
    assert_eq!(config["model_type"], "qwen3_tts", "the hub layout stays");
    let speak = |extra: &[&str]| {
        let mut c = bin();
        c.args(["speak", "Hello.", "--speaker", "nobody"])
            .args(extra)
            .arg("--model")
            .arg(&ckpt)
            .arg("--out")
            .arg(dir.path().join("x.wav"));
        run(&mut c)
    };
    let (o, err) = speak(&[]);
    assert!(!o.status.success(), "{err}");
    let warning = err
        .lines()
        .find(|l| l.starts_with("warning: "))
        .unwrap_or_else(|| panic!("no warning: {err}"));
    assert!(warning.contains("has random weights"), "{warning}");
    assert!(warning.contains("give --max-frames N"), "{warning}");
    let at_warning = err.find("has random weights").unwrap();
    let at_refusal = err.find("nobody").expect("the speaker refusal");
    assert!(at_warning < at_refusal, "warned before anything ran: {err}");
    let (_, err) = speak(&["--max-frames", "4"]);
    assert!(!err.contains("random weights"), "{err}");
    // The fixtures carry no marker: no warning.
    let (_, err) = run(bin()
        .args(["speak", "Hello.", "--speaker", "nobody", "--model"])
        .arg(fixture())
        .arg("--out")
        .arg(dir.path().join("y.wav")));
    assert!(!err.contains("random weights"), "{err}");
}
