//! The smaller CLI defects, one test each: flags that did nothing, limits
//! that were missing, inputs that were not read.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.env_remove("TTS_RT_MODEL").env_remove("RAYON_NUM_THREADS");
    c
}

fn run(c: &mut Command) -> (Output, String) {
    let o = c.stdin(Stdio::null()).output().expect("run tts-rt");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    (o, err)
}

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("cli_flags")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn threads_far_beyond_the_cores_are_refused_at_once() {
    let t0 = std::time::Instant::now();
    let out = scratch("threads").join("x.wav");
    let (o, err) = run(bin()
        .args(["--threads", "100000", "speak", "Hi.", "--model"])
        .arg(fixture("tiny-a"))
        .arg("--out")
        .arg(&out));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--threads 100000") && err.contains("per available core"),
        "{err}"
    );
    assert!(t0.elapsed().as_secs() < 30, "took {:?}", t0.elapsed());
    assert!(!out.exists());
}

#[test]
fn voices_and_devices_refuse_flags_that_do_nothing() {
    let (o, err) = run(bin()
        .args(["voices", "--threads", "2", "--model"])
        .arg(fixture("tiny-a")));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--threads does nothing for `voices`"), "{err}");
    let (o, err) = run(bin().args(["devices", "--threads", "2"]));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--threads does nothing for `devices`"),
        "{err}"
    );
    // A listing loads no weights, so load flags are not accepted.
    for flag in [["--precision", "int8"], ["--weights-cache", "/tmp"]] {
        let (o, err) = run(bin()
            .arg("voices")
            .args(flag)
            .arg("--model")
            .arg(fixture("tiny-a")));
        assert_eq!(o.status.code(), Some(2), "{flag:?}: {err}");
        assert!(err.contains(flag[0]), "{err}");
    }
}

#[test]
fn voices_marks_the_default_speaker() {
    let (o, err) = run(bin().args(["voices", "--model"]).arg(fixture("tiny-a")));
    assert!(o.status.success(), "{err}");
    let s = String::from_utf8_lossy(&o.stdout);
    let marked: Vec<&str> = s.lines().filter(|l| l.starts_with("* ")).collect();
    // The first in sorted order, which `speak` uses without --speaker.
    assert_eq!(
        marked,
        ["* dylan (speaks beijing_dialect when the language is chinese or auto)"],
        "{s}"
    );
    assert!(s.contains("  ryan"), "{s}");
}

#[test]
fn decode_codes_dash_reads_stdin() {
    let d = scratch("decode_stdin");
    let frame: Vec<String> = (0..8).map(|q| (q * 101 % 2048).to_string()).collect();
    let json = format!("[{}]", vec![format!("[{}]", frame.join(",")); 6].join(","));
    let decode = |codes: &str, out: &Path, stdin: Option<&str>| {
        let mut c = bin();
        c.args(["decode", "--model"])
            .arg(fixture("tiny-a"))
            .args(["--codes", codes, "--wav-format", "f32", "--out"])
            .arg(out)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut sin = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            sin.write_all(s.as_bytes()).unwrap();
        }
        drop(sin);
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read(out).unwrap()
    };
    let file = d.join("codes.json");
    std::fs::write(&file, &json).unwrap();
    let from_file = decode(file.to_str().unwrap(), &d.join("a.wav"), None);
    let from_stdin = decode("-", &d.join("b.wav"), Some(&json));
    assert!(from_file.len() > 44);
    assert_eq!(from_stdin, from_file);
}

#[test]
fn gen_checkpoint_refuses_a_non_empty_out_without_force() {
    let d = scratch("gen_non_empty");
    let keep = d.join("notes.txt");
    std::fs::write(&keep, b"mine").unwrap();
    let (o, err) = run(bin()
        .args(["gen-checkpoint", "--preset", "tiny", "--out"])
        .arg(&d));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is not empty") && err.contains("--force"),
        "{err}"
    );
    let names: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
    assert_eq!(
        names.len(),
        1,
        "files were written into a refused directory"
    );
    let (o, err) = run(bin()
        .args(["gen-checkpoint", "--preset", "tiny", "--force", "--out"])
        .arg(&d));
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("writing a random-weight tiny checkpoint"),
        "{err}"
    );
    assert!(d.join("config.json").exists());
    assert_eq!(std::fs::read(&keep).unwrap(), b"mine");
}

#[test]
fn serve_accepts_host_localhost() {
    // `--help`-level check would not bind; bind port 0 on loopback and stop
    // at once with a model that fails to resolve, after the host parsed.
    let (o, err) = run(bin().args([
        "serve",
        "--host",
        "localhost",
        "--port",
        "0",
        "--model",
        "/nonexistent/tts-rt-model",
    ]));
    assert!(!o.status.success());
    assert!(!err.contains("--host"), "localhost was refused: {err}");
    let (o, err) = run(bin().args(["serve", "--host", "example.com", "--port", "0"]));
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("localhost"), "{err}");
}

#[test]
fn every_sampling_flag_has_help() {
    let o = bin().args(["speak", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--temperature",
        "--top-k",
        "--top-p",
        "--repetition-penalty",
        "--cp-temperature",
        "--cp-top-k",
        "--cp-top-p",
        "--seed",
        "--greedy",
    ] {
        let lines: Vec<&str> = help.lines().map(str::trim).collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with(flag))
            .unwrap_or_else(|| panic!("{flag} not in help: {help}"));
        // The flag's own line after its value name, then its indented
        // description lines up to the next flag.
        let first = lines[at].trim_start_matches(flag);
        let first = first.split_once('>').map_or(first, |(_, r)| r);
        let rest = lines[at + 1..]
            .iter()
            .take_while(|l| !l.is_empty() && !l.starts_with('-'))
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        let text = format!("{first} {rest}");
        assert!(text.trim().len() > 10, "{flag} has no help: {text:?}");
    }
}

/// The `TTS_RT_*` switches of the kernels, the engine and the server.
const SWITCHES: [&str; 8] = [
    "TTS_RT_ISA",
    "TTS_RT_ON_POOL",
    "TTS_RT_TEAMS",
    "TTS_RT_TEAM_SPIN_US",
    "TTS_RT_AMX",
    "TTS_RT_PREFETCH",
    "TTS_RT_TEAM_HOLD",
    "TTS_RT_NODELAY",
];

/// `bin()` with none of the switches set (whatever the caller's shell has).
fn bin_without_switches() -> Command {
    let mut c = bin();
    for k in SWITCHES {
        c.env_remove(k);
    }
    c
}

#[test]
fn a_malformed_environment_switch_refuses_to_start_naming_it() {
    // Read once at start by the binary, before any command runs: a typo is
    // refused with the variable and its accepted values, not ignored.
    let dir = scratch("switches");
    for (key, bad) in [
        ("TTS_RT_ISA", "avx3"),
        ("TTS_RT_ON_POOL", "of"),
        ("TTS_RT_TEAMS", "disabled"),
        ("TTS_RT_TEAM_SPIN_US", "200us"),
        ("TTS_RT_AMX", "nope"),
        ("TTS_RT_PREFETCH", "l3"),
        ("TTS_RT_TEAM_HOLD", "lnd"),
        ("TTS_RT_NODELAY", "maybe"),
    ] {
        let out = dir.join(format!("{key}.wav"));
        let (o, err) = run(bin_without_switches()
            .env(key, bad)
            .args(["speak", "Hi.", "--max-frames", "2", "--model"])
            .arg(fixture("tiny-a"))
            .arg("--out")
            .arg(&out));
        assert_eq!(o.status.code(), Some(1), "{key}: {err}");
        assert!(
            err.contains(&format!("{key}={bad:?} is not understood")),
            "{key}: {err}"
        );
        assert!(!out.exists(), "{key}");
    }
    // `serve` as well, before it looks for its model.
    let (o, err) = run(bin_without_switches().env("TTS_RT_TEAM_HOLD", "lnd").args([
        "serve",
        "--port",
        "0",
        "--model",
        "/nonexistent/tts-rt-model",
    ]));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "TTS_RT_TEAM_HOLD=\"lnd\" is not understood; use one of: c2w (the default), lend, off, all"
        ),
        "{err}"
    );
}

#[test]
fn accepted_switches_run_and_reach_the_engine() {
    let dir = scratch("switches_ok");
    let out = dir.join("x.wav");
    let (o, err) = run(bin_without_switches()
        .envs([
            ("TTS_RT_ON_POOL", "off"),
            ("TTS_RT_TEAM_SPIN_US", "50"),
            ("TTS_RT_AMX", "OFF"),
            ("TTS_RT_PREFETCH", "l1"),
            ("TTS_RT_TEAM_HOLD", "all"),
            ("TTS_RT_NODELAY", ""),
        ])
        .args(["speak", "Hi.", "--max-frames", "2", "--stream", "--model"])
        .arg(fixture("tiny-a"))
        .arg("--out")
        .arg(&out));
    assert!(o.status.success(), "{err}");
    assert!(out.exists());
    // bench records the switches as read, and the team hold it ran with.
    let doc = tiny_bench_json(
        bin_without_switches()
            .env("TTS_RT_TEAM_HOLD", "lend")
            .env("TTS_RT_TEAMS", "on"),
        &["--lend-core"],
    );
    let p = &doc["provenance"];
    assert_eq!(p["team_hold"], "lend");
    assert_eq!(p["lend_core"], "on");
    assert_eq!(p["env"]["TTS_RT_TEAM_HOLD"], "lend");
    assert_eq!(p["env"]["TTS_RT_TEAMS"], "on");
    assert!(p["env"]["TTS_RT_AMX"].is_null());
    // `auto` lends where measured cheaper; the provenance names it.
    let doc = tiny_bench_json(&mut bin_without_switches(), &["--lend-core", "auto"]);
    assert_eq!(doc["provenance"]["lend_core"], "auto");
}

/// `bench --json` of two frames of one session on tiny-a, with `extra`
/// flags: its report.
fn tiny_bench_json(cmd: &mut Command, extra: &[&str]) -> serde_json::Value {
    let (o, err) = run(cmd
        .args([
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
        ])
        .args(extra)
        .arg("--model")
        .arg(fixture("tiny-a")));
    assert!(o.status.success(), "{err}");
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn a_team_hold_that_never_lends_beside_lend_core_is_refused_naming_both() {
    // Neither overrides the other: the contradiction is refused before the
    // model is looked for.
    for hold in ["c2w", "off", "all"] {
        for cmd in [
            &["serve", "--port", "0", "--lend-core"][..],
            &["bench", "--lend-core"][..],
        ] {
            let t0 = std::time::Instant::now();
            let (o, err) = run(bin_without_switches()
                .env("TTS_RT_TEAM_HOLD", hold)
                .args(cmd)
                .args(["--model", "/nonexistent/tts-rt-model"]));
            assert_eq!(o.status.code(), Some(1), "{hold} {cmd:?}: {err}");
            for name in ["team_hold", "TTS_RT_TEAM_HOLD", "lend_core", "--lend-core"] {
                assert!(err.contains(name), "{hold} {cmd:?}: {err}");
            }
            assert!(err.contains(&format!("`{hold}`")), "{err}");
            assert!(!err.contains("nonexistent"), "checked first: {err}");
            assert!(t0.elapsed().as_secs() < 30);
        }
    }
}

#[test]
fn serve_refuses_a_prebuffer_out_of_range_before_looking_for_the_model() {
    for bad in ["-5", "NaN", "1e9"] {
        let (o, err) = run(bin_without_switches().args([
            "serve",
            "--port",
            "0",
            &format!("--prebuffer-ms={bad}"),
            "--model",
            "/nonexistent/tts-rt-model",
        ]));
        assert_eq!(o.status.code(), Some(1), "{bad}: {err}");
        assert!(err.contains("--prebuffer-ms"), "{bad}: {err}");
        assert!(!err.contains("nonexistent"), "checked first: {err}");
    }
}
