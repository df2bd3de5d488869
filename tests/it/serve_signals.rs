//! `tts-rt serve` as a process under signals (issue 15, item 7): SIGTERM
//! interrupts a model load blocked on its weights (a FIFO in their place),
//! a second signal during the drain forces the exit, and SIGTERM mid-stream
//! lets the running context finish within the drain deadline. Loopback only.

use crate::common;

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::http_get as get;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{self, Message};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-a")
}

/// `tts-rt serve` on a free loopback port; returns it and its address.
fn serve(model: &Path, extra: &[&str]) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args(["serve", "--model", model.to_str().unwrap(), "--port", "0"])
        .args(extra)
        .env_remove("TTS_RT_MODEL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tts-rt serve");
    let addr = common::listening_addr(&mut child);
    (child, addr)
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

/// Waits up to `within` for the exit; kills and fails past it. Returns the
/// status and stderr.
fn exit_within(
    mut child: Child,
    within: Duration,
    what: &str,
) -> (std::process::ExitStatus, String) {
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!err.contains("panicked"), "{what}: {err}");
    (status, err)
}

fn wait_ready(addr: SocketAddr) {
    let t0 = Instant::now();
    while get(addr, "/ready").map(|r| r.0).unwrap_or(0) != 200 {
        assert!(t0.elapsed() < Duration::from_secs(60), "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

type Ws = tungstenite::WebSocket<TcpStream>;

fn ws(addr: SocketAddr) -> Ws {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let (ws, _) = tungstenite::client::client(format!("ws://{addr}/v1/realtime"), s).unwrap();
    ws
}

fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).unwrap();
}

/// The next text message's JSON (audio frames counted into `audio`), or
/// `None` once closed.
fn next_json(ws: &mut Ws, audio: &mut usize) -> Option<Value> {
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => return serde_json::from_str(t.as_str()).ok(),
            Ok(Message::Binary(_)) => *audio += 1,
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

#[test]
fn sigterm_during_a_model_load_blocked_on_a_fifo_exits_promptly() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve_signals_fifo");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(fixture()).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "model.safetensors" {
            std::os::unix::fs::symlink(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
    // Reading a FIFO nobody writes blocks forever: a hung mount's stand-in.
    let fifo = dir.join("model.safetensors");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let (child, addr) = serve(&dir, &[]);
    std::thread::sleep(Duration::from_millis(500));
    let (status, body) = get(addr, "/ready").unwrap();
    assert_eq!(status, 503, "still loading: {body}");
    signal(&child, "TERM");
    let t0 = Instant::now();
    let (status, err) = exit_within(child, Duration::from_secs(10), "SIGTERM during the load");
    println!(
        "SIGTERM during a blocked load: exited in {:?} ({status})",
        t0.elapsed()
    );
    assert!(err.contains("shutting down"), "a clear message: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn second_signal_during_the_drain_forces_the_exit() {
    for sig in ["TERM", "INT"] {
        let (child, addr) = serve(&fixture(), &["--drain-timeout-s", "60"]);
        wait_ready(addr);
        // An open context (never ended) holds the drain for its deadline.
        let mut c = ws(addr);
        let mut audio = 0;
        next_json(&mut c, &mut audio).expect("session.created");
        send(
            &mut c,
            json!({"type": "context.append", "context_id": "c", "text": "Hold the drain open"}),
        );
        std::thread::sleep(Duration::from_millis(300));
        signal(&child, "TERM");
        // The second signal only once the first one is being handled (the
        // kernel merges two pending signals of one kind into one).
        let t0 = Instant::now();
        while !get(addr, "/ready")
            .map(|r| r.1)
            .unwrap_or_default()
            .contains("draining")
        {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "/ready never said draining after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        signal(&child, sig);
        let t0 = Instant::now();
        let (status, err) = exit_within(child, Duration::from_secs(10), "a second signal");
        println!(
            "second SIG{sig} during a 60 s drain: exited in {:?} ({status})",
            t0.elapsed()
        );
        assert!(err.contains("shutting down"), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
}

#[test]
fn sigterm_mid_stream_lets_the_running_context_finish_within_the_drain_deadline() {
    let (child, addr) = serve(&fixture(), &["--drain-timeout-s", "30"]);
    wait_ready(addr);
    let mut c = ws(addr);
    let mut audio = 0;
    next_json(&mut c, &mut audio).expect("session.created");
    send(
        &mut c,
        json!({"type": "session.update", "session": {"greedy": true, "max_frames": 40}}),
    );
    send(
        &mut c,
        json!({"type": "context.append", "context_id": "c",
               "text": "A sentence that is still being spoken when the signal comes."}),
    );
    send(&mut c, json!({"type": "context.end", "context_id": "c"}));
    // SIGTERM right after the first audio frame.
    let mut signalled = false;
    let mut end = None;
    loop {
        match c.read() {
            Ok(Message::Binary(_)) if !signalled => {
                signal(&child, "TERM");
                signalled = true;
            }
            Ok(Message::Text(t)) => {
                let m: Value = serde_json::from_str(t.as_str()).unwrap();
                let kind = m["type"].as_str().unwrap_or("");
                if kind.starts_with("context.") && kind != "context.started" {
                    end = Some(m);
                    break;
                }
            }
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    assert!(signalled, "no audio came before the end");
    let end = end.expect("the context ended before the close");
    assert_eq!(end["type"], "context.done", "{end}");
    let t0 = Instant::now();
    let (status, err) = exit_within(child, Duration::from_secs(30), "the drain");
    println!(
        "SIGTERM mid-stream: context done, then exit in {:?}",
        t0.elapsed()
    );
    assert!(status.success(), "{status:?}: {err}");
}
