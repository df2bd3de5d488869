//! The server's log lines, captured as the CLI renders them with
//! `--log-format json` (a JSON object per line): one line per HTTP request
//! with the request id the client sees, and for speech the voice, text
//! length, audio seconds, ttfp, rtf and outcome; one per realtime context
//! the same way; probes only at debug.
//! (Each test alone in a process of its own, `alone!`: it installs the
//! process's global subscriber.)

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::alone::alone;
use crate::common;

/// Every line the subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<Value> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The line whose `request_id` is `id`, waiting for it a while (a
    /// streamed request logs when its audio is done).
    async fn wait_for(&self, id: &str) -> Result<Value> {
        for _ in 0..400 {
            if let Some(l) = self
                .lines()
                .into_iter()
                .find(|l| l["fields"]["request_id"] == id)
            {
                return Ok(l);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        anyhow::bail!("no log line with request_id {id}")
    }
}

/// The process's subscriber, installed by the first test that asks (each
/// test runs alone in its process; each looks for its own ids).
fn captured() -> Captured {
    static OUT: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    OUT.get_or_init(|| {
        let out = Captured::default();
        let w = out.clone();
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(move || w.clone())
            .try_init()
            .expect("the only subscriber of this binary");
        out
    })
    .clone()
}

/// POST (or GET) on loopback, `Connection: close`, the whole answer read.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    id: &str,
    body: &str,
) -> Result<String> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nX-Request-Id: {id}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(common::WAIT, s.read_to_end(&mut raw)).await??;
    Ok(String::from_utf8_lossy(&raw).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_line_per_request_with_its_id_and_figures() -> Result<()> {
    if !alone!(one_line_per_request_with_its_id_and_figures) {
        return Ok(());
    }
    let out = captured();
    let s = common::start(common::config(Duration::from_secs(5))).await?;
    let addr = s.local_addr();

    let answer = request(
        addr,
        "POST",
        "/v1/audio/speech",
        "speech-1",
        r#"{"input":"Hello there.","voice":"alloy","response_format":"pcm","max_frames":6}"#,
    )
    .await?;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:.200}");
    assert!(answer
        .to_ascii_lowercase()
        .contains("x-request-id: speech-1"));
    let l = out.wait_for("speech-1").await?;
    let f = &l["fields"];
    assert_eq!(l["target"], "tts_transport::http", "{l}");
    assert_eq!(l["level"], "INFO", "{l}");
    assert_eq!(f["route"], "/v1/audio/speech", "{l}");
    assert_eq!(f["status"], 200, "{l}");
    assert_eq!(f["voice"], "serena", "alloy is serena on tiny-a: {l}");
    assert_eq!(f["text_chars"], 12, "{l}");
    assert_eq!(f["outcome"], "done", "{l}");
    assert!(f["audio_s"].as_f64().is_some_and(|a| a > 0.0), "{l}");
    assert!(f["ttfp_ms"].as_f64().is_some(), "{l}");
    assert!(f["rtf"].as_f64().is_some(), "{l}");

    // A refusal: one line, the status and outcome.
    let answer = request(
        addr,
        "POST",
        "/v1/audio/speech",
        "bad-1",
        r#"{"input":"x","langauge":"en"}"#,
    )
    .await?;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:.200}");
    let l = out.wait_for("bad-1").await?;
    assert_eq!(l["fields"]["status"], 400, "{l}");
    assert_eq!(l["fields"]["outcome"], "refused", "{l}");

    // Probes are debug: not at info.
    let _ = request(addr, "GET", "/health", "probe-1", "").await?;
    let _ = request(addr, "GET", "/v1/models", "models-1", "").await?;
    out.wait_for("models-1").await?;
    assert!(
        !out.lines()
            .iter()
            .any(|l| l["fields"]["request_id"] == "probe-1"),
        "a /health probe logged at info"
    );
    // Exactly one line per request.
    let n = out
        .lines()
        .iter()
        .filter(|l| l["fields"]["request_id"] == "speech-1")
        .count();
    assert_eq!(n, 1);

    // A realtime context: one line at its end, with its text length, in
    // the session's span (the upgrade request's id).
    let mut ws = common::ws::connect(addr).await?;
    common::ws::speak(&mut ws, "ctx-1", "Hello there, you.").await?;
    let mut line = None;
    for _ in 0..400 {
        line = out
            .lines()
            .into_iter()
            .find(|l| l["fields"]["context"] == "ctx-1");
        if line.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let l = line.context("no log line for the realtime context")?;
    let f = &l["fields"];
    assert_eq!(l["target"], "tts_transport::realtime", "{l}");
    assert_eq!(f["text_chars"], 17, "{l}");
    assert_eq!(f["outcome"], "done", "{l}");
    assert!(f["audio_s"].as_f64().is_some_and(|a| a > 0.0), "{l}");
    assert!(
        l["span"]["request_id"]
            .as_str()
            .is_some_and(|r| r.starts_with("req_")),
        "{l}"
    );
    common::stop(s).await.context("stop")
}

/// Issue 28, defect 7b: the vendor sockets' log lines carry the upgrade
/// request's id in the session's span, as `/v1/realtime`'s do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vendor_socket_lines_carry_the_request_id_span() -> Result<()> {
    if !alone!(vendor_socket_lines_carry_the_request_id_span) {
        return Ok(());
    }
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let out = captured();
    let s = common::start(common::config(Duration::from_secs(5))).await?;
    let addr = s.local_addr();
    let sockets = [
        (
            "el-socket-1",
            format!("ws://{addr}/v1/text-to-speech/ryan/stream-input?output_format=pcm_16000"),
            vec![
                serde_json::json!({"text": "Hello there. "}),
                serde_json::json!({"text": ""}),
            ],
        ),
        (
            "ca-socket-1",
            format!("ws://{addr}/tts/websocket"),
            vec![serde_json::json!({
                "context_id": "c", "transcript": "Hello there. ", "continue": false,
                "voice": {"mode": "id", "id": "ryan"},
                "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
            })],
        ),
    ];
    for (id, url, msgs) in sockets {
        let mut req = url.into_client_request()?;
        req.headers_mut().insert("x-request-id", id.parse()?);
        let (mut ws, _) =
            tokio::time::timeout(common::WAIT, tokio_tungstenite::connect_async(req)).await??;
        for m in msgs {
            ws.send(Message::Text(m.to_string().into())).await?;
        }
        // Until the context's end marker (isFinal / done).
        loop {
            let m = tokio::time::timeout(common::WAIT, ws.next())
                .await?
                .context("closed early")??;
            if let Message::Text(t) = m {
                let v: Value = serde_json::from_str(t.as_str())?;
                anyhow::ensure!(v.get("error").is_none(), "{v}");
                if v["isFinal"] == true || v["type"] == "done" {
                    break;
                }
            }
        }
        drop(ws);
        // The context's line, in a span with the upgrade's id.
        let mut line = None;
        for _ in 0..400 {
            line = out.lines().into_iter().find(|l| {
                l["target"] == "tts_transport::realtime"
                    && l["fields"]["outcome"] == "done"
                    && l["span"]["request_id"] == id
            });
            if line.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let l = line.with_context(|| format!("no context line in the span of {id}"))?;
        assert_eq!(l["fields"]["text_chars"], 13, "{l}");
    }
    common::stop(s).await.context("stop")
}

/// Issue 28: a streamed speech response whose synthesis fails before its
/// first audio reaches the client as a JSON 500 (docs/limits.md, "non-finite
/// audio"), and its log line must say 500 too, not the 200 it would have
/// been; a failure after audio has left was a 200 on the wire, cut, and is
/// logged so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_fails_before_audio_is_logged_with_the_500_the_client_got() -> Result<()> {
    if !alone!(a_stream_that_fails_before_audio_is_logged_with_the_500_the_client_got) {
        return Ok(());
    }
    let out = captured();
    let broken = common::BrokenCodec::new()?;
    let mut cfg = common::config(Duration::from_secs(5));
    cfg.model_dir = broken.dir();
    let s = common::start(cfg).await?;
    let addr = s.local_addr();
    let cases = [
        ("nan-pcm", r#""response_format":"pcm""#),
        ("nan-mp3", r#""response_format":"mp3""#),
        (
            "nan-sse",
            r#""response_format":"pcm","stream_format":"sse""#,
        ),
        ("nan-wav", r#""response_format":"wav""#),
    ];
    for (id, extra) in cases {
        let body = format!(r#"{{"input":"Hello there.","voice":"alloy",{extra}}}"#);
        let r = post_with_id(addr, id, &body).await?;
        assert_eq!(r.status, 500, "{id}: {}", r.body_str());
        let l = out.wait_for(id).await?;
        assert_eq!(l["fields"]["status"], 500, "{id}: the client got 500: {l}");
        assert_eq!(l["fields"]["outcome"], "failed", "{id}: {l}");
        assert_eq!(l["level"], "WARN", "{id}: {l}");
    }
    common::stop(s).await?;

    // After audio has left, the client's status was 200 (then a cut body).
    let late = common::BrokenCodec::at_code(common::LATE_CODE)?;
    let mut cfg = common::config(Duration::from_secs(5));
    cfg.model_dir = late.dir();
    let s = common::start(cfg).await?;
    let r = post_with_id(
        s.local_addr(),
        "nan-late",
        r#"{"input":"Hello world.","voice":"ryan","language":"English","greedy":true,"response_format":"pcm"}"#,
    )
    .await?;
    assert!(r.status == 200 && r.cut, "{} cut: {}", r.status, r.cut);
    let l = out.wait_for("nan-late").await?;
    assert_eq!(l["fields"]["status"], 200, "{l}");
    assert_eq!(l["fields"]["outcome"], "failed", "{l}");
    common::stop(s).await
}

/// A speech POST with its request id, read by the raw client that reports a
/// cut body rather than failing on it.
async fn post_with_id(
    addr: SocketAddr,
    id: &str,
    body: &str,
) -> Result<common::http::HttpResponse> {
    common::http::request(
        addr,
        "POST",
        "/v1/audio/speech",
        &[("Content-Type", "application/json"), ("X-Request-Id", id)],
        body.as_bytes(),
    )
    .await
}
