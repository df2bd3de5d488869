//! `tts-rt serve` as a process: it prints where it listens, answers
//! /health and /ready on loopback, and on SIGTERM drains and exits 0.

mod common;

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
