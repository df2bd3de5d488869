//! `tts-rt serve` as a process: it prints where it listens, answers
//! /health and /ready on loopback, and on SIGTERM drains and exits 0.

use crate::common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::http_get as get;

#[cfg(unix)]
#[test]
fn serve_starts_reports_ready_and_drains_on_sigterm() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-a");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args([
            "serve",
            "--model",
            fixture,
            "--port",
            "0",
            "--drain-timeout-s",
            "5",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tts-rt serve");
    let addr = common::listening_addr(&mut child);
    assert_eq!(get(addr, "/health").unwrap().0, 200);
    let t0 = Instant::now();
    loop {
        let (status, body) = get(addr, "/ready").unwrap();
        if status == 200 {
            assert!(body.contains("tiny-a"), "{body}");
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(t0.elapsed() < Duration::from_secs(60), "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "exit {status:?}; stderr:\n{err}");
    assert!(err.contains("shutting down"), "{err}");
}

/// Issue 31, item 1: without `--precision`, `serve` runs `fast` (int8 LMs,
/// int8/bf16 vocoder: real time on 2 cores at 0.6B) and says so at start, in one
/// line with what it costs; `--precision f32` is one flag away.
#[cfg(unix)]
#[test]
fn real_time_by_default_serve_runs_fast_and_says_so_at_start() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-a");
    for (extra, line, label) in [
        (
            None,
            "precision fast (int8 LMs, bf16 talker KV cache, int8/bf16 vocoder, the default for live audio): ",
            "precision=\"int8,int8,int8,talker.kv=bf16\"",
        ),
        (
            Some("f32"),
            "precision reference (stored weights, f32 vocoder): ",
            "precision=\"f32,f32,f32\"",
        ),
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
        c.args(["serve", "--model", fixture, "--port", "0"])
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(p) = extra {
            c.args(["--precision", p]);
        }
        let mut child = c.spawn().expect("spawn tts-rt serve");
        let addr = common::listening_addr(&mut child);
        let (_, metrics) = get(addr, "/metrics").unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(
            metrics.contains(label),
            "{label} in tts_build_info: {metrics}"
        );
        let found: Vec<&str> = err.lines().filter(|l| l.contains("precision ")).collect();
        assert_eq!(found.len(), 1, "one line: {err}");
        assert!(found[0].contains(line), "{line:?} in {err}");
        assert!(found[0].contains("real time"), "{err}");
    }
}

/// `--tls-cert`/`--tls-key` (or `tls_cert`/`tls_key` in the config file,
/// relative to it): the startup line says https and wss; one file without
/// the other, and a file that cannot serve, stop the start with exit 1 and
/// a message naming the file, never a panic.
#[cfg(unix)]
#[test]
fn serve_tls_files_are_checked_at_start() {
    use std::io::BufRead;
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-a");
    let tls = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("transport/tests/fixtures/tls");
    let dir = tempfile::tempdir().unwrap();
    for f in ["cert.pem", "key.pem", "other-key.pem"] {
        std::fs::copy(tls.join(f), dir.path().join(f)).unwrap();
    }
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not PEM at all\n").unwrap();
    let p = |f: &str| dir.path().join(f).display().to_string();

    // Refusals: (flags, what stderr must say).
    let cases: [(Vec<String>, Vec<String>); 4] = [
        (
            vec!["--tls-cert".into(), p("cert.pem")],
            vec!["--tls-cert needs --tls-key".into()],
        ),
        (
            vec!["--tls-key".into(), p("key.pem")],
            vec!["--tls-key needs --tls-cert".into()],
        ),
        (
            vec![
                "--tls-cert".into(),
                p("cert.pem"),
                "--tls-key".into(),
                p("other-key.pem"),
            ],
            vec![
                format!("--tls-key {}", p("other-key.pem")),
                "is not the private key of the certificate".into(),
            ],
        ),
        (
            vec![
                "--tls-cert".into(),
                p("junk.pem"),
                "--tls-key".into(),
                p("key.pem"),
            ],
            vec![format!("--tls-cert {}", p("junk.pem")), "is not PEM".into()],
        ),
    ];
    for (flags, says) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
            .args(["serve", "--model", fixture, "--port", "0"])
            .args(&flags)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        for s in &says {
            assert!(err.contains(s.as_str()), "{flags:?}: {s:?} in {err}");
        }
        assert!(out.stdout.is_empty(), "{flags:?}: it listened");
    }

    // From the config file, relative to it: served over TLS.
    let config = dir.path().join("serve.toml");
    std::fs::write(&config, "tls_cert = \"cert.pem\"\ntls_key = \"key.pem\"\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args(["serve", "--model", fixture, "--port", "0", "--config"])
        .arg(&config)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tts-rt serve");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.starts_with("listening on https://127.0.0.1:") && line.contains("wss://127.0.0.1:"),
        "{line:?}"
    );
}

/// Admission by real-time capacity is on by default: before it says it is
/// ready, `serve` runs its short calibration, logs the capacity it found
/// in one line, and `/metrics` carries the load figure an autoscaler
/// scales on with the capacity behind it. At a target no machine meets
/// (`--realtime-load 0.001`) the capacity is the one stream every machine
/// still serves.
#[cfg(unix)]
#[test]
fn serve_measures_its_real_time_capacity_before_ready_and_exports_the_load() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-a");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args(["serve", "--model", fixture, "--port", "0"])
        .args(["--realtime-load", "0.001"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tts-rt serve");
    let addr = common::listening_addr(&mut child);
    let t0 = Instant::now();
    while get(addr, "/ready").unwrap().0 != 200 {
        assert!(t0.elapsed() < Duration::from_secs(120), "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, metrics) = get(addr, "/metrics").unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let value = |name: &str| -> Option<f64> {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
    };
    assert_eq!(value("tts_capacity_streams"), Some(1.0), "{metrics}");
    assert_eq!(value("tts_admission_limit"), Some(1.0), "{metrics}");
    assert_eq!(value("tts_load"), Some(0.0), "{metrics}");
    assert!(
        value("tts_one_stream_load").is_some_and(|u| u > 0.01),
        "{metrics}"
    );
    let found: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("real-time capacity: 1 stream(s) stay continuous here"))
        .collect();
    assert_eq!(found.len(), 1, "one line: {err}");
}

/// `--realtime-load` is a share of the cores' time: anything else stops
/// the start naming the flag.
#[test]
fn serve_refuses_a_real_time_load_outside_zero_to_one() {
    for bad in ["1.5", "-0.1", "NaN"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
            .args(["serve", "--model", "/nonexistent", "--port", "0"])
            .arg(format!("--realtime-load={bad}"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad}: {err}");
        assert!(err.contains("--realtime-load"), "{bad}: {err}");
    }
}
