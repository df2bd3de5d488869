//! `tts-rt serve --config FILE`: the file sets what the flags set, flags
//! override it, unknown keys are refused by name; `--log-format json`
//! writes JSON log lines; `--voice-map` shows in /v1/audio/voices.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::http_get as get;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-a");

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tts-rt serve")
}

/// The address from the "listening on" line, then waits for /ready.
fn ready(child: &mut Child) -> SocketAddr {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let t0 = Instant::now();
    while get(addr, "/ready").unwrap().0 != 200 {
        assert!(t0.elapsed() < Duration::from_secs(60), "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    addr
}

/// SIGTERM, wait, and the whole stderr.
fn stop(mut child: Child) -> String {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(30), "no exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    err
}

#[cfg(unix)]
#[test]
fn config_file_sets_the_server_and_flags_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    std::fs::write(
        &path,
        format!(
            "model = {FIXTURE:?}\nport = 0\nlog_format = \"text\"\ncors_origins = [\"http://app.test\"]\n\n[voice_map]\nalloy = \"serena\"\nnova = \"ryan\"\n"
        ),
    )
    .unwrap();
    let mut child = spawn(&[
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--voice-map",
        "alloy=ryan",
        "--log-format",
        "json",
    ]);
    let addr = ready(&mut child);
    let (status, body) = get(addr, "/v1/audio/voices").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let speaker = |id: &str| {
        v["voices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id && e["kind"] == "openai")
            .map(|e| e["speaker"].as_str().unwrap().to_string())
    };
    assert_eq!(speaker("alloy").as_deref(), Some("ryan"), "the flag wins");
    assert_eq!(
        speaker("nova").as_deref(),
        Some("ryan"),
        "the file's entry stays"
    );
    let err = stop(child);
    // --log-format json over the file's text: every log line is JSON.
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for l in &lines {
        let j: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(j["level"].is_string(), "{l}");
    }
    assert!(err.contains("model ready"), "{err}");
    assert!(err.contains("/v1/audio/voices"), "the request line: {err}");
}

#[test]
fn config_file_unknown_key_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, format!("model = {FIXTURE:?}\nmax_sesions = 3\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args(["serve", "--config", path.to_str().unwrap(), "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_sesions"), "{err}");
    assert!(err.contains("serve.toml"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // A value of the wrong kind is named too.
    std::fs::write(&path, "port = \"eighty\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args(["serve", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("port"), "{err}");

    // A bad --voice-map is a usage error naming the entry.
    let out = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args(["serve", "--model", FIXTURE, "--voice-map", "bob=ryan"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"bob\" is not an OpenAI voice"), "{err}");
}
