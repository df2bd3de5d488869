//! The OpenAI route when synthesis fails or a body is too big, on loopback:
//! a failure before any audio is an error answer naming the problem (never
//! a 200 with NaN, silence or a cut body), and an over-long upload is read
//! on and refused with a JSON 413 instead of a reset (issue 15, items 6, 8).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{ensure, Result};
use serde_json::json;

use crate::common;

use common::http::{post_json, request};
use common::{finite_prefix, start, stop, BrokenCodec, LATE_CODE, LATE_FRAME};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_finite_audio_over_http_is_a_json_500_before_any_audio() -> Result<()> {
    let broken = BrokenCodec::new()?;
    let mut cfg = common::config(Duration::from_secs(5));
    cfg.model_dir = broken.dir();
    let s = start(cfg).await?;
    let addr = s.local_addr();
    // Complete bodies (wav's default, and asked for) and streamed ones
    // (pcm, mp3, SSE), each failing on its first chunk.
    let cases = [
        json!({"response_format": "wav"}),
        json!({"response_format": "pcm", "stream": false}),
        json!({"response_format": "pcm"}),
        json!({"response_format": "mp3"}),
        json!({"response_format": "pcm", "stream_format": "sse"}),
        json!({"stream_format": "sse"}),
    ];
    for extra in cases {
        let mut body = json!({"model": "tts-1", "input": "Hello there.", "voice": "alloy"});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        let r = post_json(addr, "/v1/audio/speech", &body).await?;
        ensure!(
            r.status == 500,
            "{extra}: status {} ({} bytes, cut: {}) instead of a 500",
            r.status,
            r.body.len(),
            r.cut
        );
        let message = r.error_message()?;
        ensure!(message.contains("non-finite audio"), "{extra}: {message}");
        ensure!(
            r.json()["error"]["type"] == "server_error",
            "{extra}: {}",
            r.body_str()
        );
    }
    // The server is unharmed: /health answers, the next request is served.
    assert_eq!(request(addr, "GET", "/health", &[], b"").await?.status, 200);
    stop(s).await
}

/// pcm16 bytes of the chunks before the NaN frame ([`LATE_FRAME`]).
fn finite_pcm_bytes() -> usize {
    finite_prefix(LATE_FRAME, 1920).1 * 2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_finite_audio_mid_stream_cuts_the_body_after_its_finite_audio() -> Result<()> {
    let broken = BrokenCodec::at_code(LATE_CODE)?;
    let mut cfg = common::config(Duration::from_secs(5));
    cfg.model_dir = broken.dir();
    let s = start(cfg).await?;
    let addr = s.local_addr();
    let body = |extra: serde_json::Value| {
        let mut b = json!({"input": "Hello world.", "voice": "ryan", "language": "English", "greedy": true});
        for (k, v) in extra.as_object().expect("object") {
            b[k] = v.clone();
        }
        b
    };
    // Streamed: the finite chunks, then a cut transfer (no last chunk), so
    // no client takes it for a whole file.
    let r = post_json(
        addr,
        "/v1/audio/speech",
        &body(json!({"response_format": "pcm"})),
    )
    .await?;
    ensure!(r.status == 200, "streamed: status {}", r.status);
    ensure!(
        r.cut,
        "streamed: the body ended normally ({} bytes)",
        r.body.len()
    );
    ensure!(
        r.body.len() == finite_pcm_bytes(),
        "streamed: {} bytes where the finite audio is {}",
        r.body.len(),
        finite_pcm_bytes()
    );
    // SSE: the deltas, then an error event naming the cause, no done.
    let r = post_json(
        addr,
        "/v1/audio/speech",
        &body(json!({"response_format": "pcm", "stream_format": "sse"})),
    )
    .await?;
    let text = r.body_str();
    ensure!(text.contains("speech.audio.delta"), "sse: {text}");
    ensure!(
        text.contains("\"type\":\"error\"") && text.contains("non-finite audio"),
        "sse: no error event: {text}"
    );
    ensure!(
        !text.contains("speech.audio.done"),
        "sse: done after a failure"
    );
    // Complete: an error answer, never a short file.
    let r = post_json(
        addr,
        "/v1/audio/speech",
        &body(json!({"response_format": "wav"})),
    )
    .await?;
    ensure!(r.status == 500, "complete: status {}", r.status);
    ensure!(r.error_message()?.contains("non-finite audio"), "complete");
    assert_eq!(request(addr, "GET", "/health", &[], b"").await?.status, 200);
    stop(s).await
}

fn base_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-base")
}

/// A form with `name` and a clip of `audio_len` bytes.
fn form(audio_len: usize) -> (String, Vec<u8>) {
    let boundary = "----tts-rt-limits-boundary";
    let mut b = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nbig\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"audio_sample\"; filename=\"a.wav\"\r\n\
         Content-Type: audio/wav\r\n\r\n"
    )
    .into_bytes();
    b.resize(b.len() + audio_len, 0);
    b.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_upload_over_the_limit_is_a_drained_json_413() -> Result<()> {
    let voices = std::env::temp_dir().join(format!("tts-rt-limits-voices-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&voices);
    let mut cfg = tts_transport::ServeConfig::new(base_fixture());
    cfg.addr = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.voices_dir = Some(voices.clone());
    cfg.max_upload_bytes = 64 * 1024;
    let s = start(cfg).await?;
    let addr = s.local_addr();
    // 8 MB sent whole: the refusal must be read, not reset away.
    let (ct, body) = form(8 << 20);
    let r = request(
        addr,
        "POST",
        "/v1/audio/voices",
        &[("Content-Type", &ct)],
        &body,
    )
    .await?;
    assert_eq!(r.status, 413, "{}", r.body_str());
    let message = r.error_message()?;
    assert!(message.contains("upload limit"), "{message}");
    assert_eq!(r.json()["error"]["param"], "audio_sample");
    // Many small fields add up past the limit too.
    let boundary = "b0undary";
    let mut many = Vec::new();
    for i in 0..200 {
        many.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"f{i}\"\r\n\r\n{}\r\n",
                "x".repeat(60 * 1024)
            )
            .as_bytes(),
        );
    }
    many.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let ct = format!("multipart/form-data; boundary={boundary}");
    let r = request(
        addr,
        "POST",
        "/v1/audio/voices",
        &[("Content-Type", &ct)],
        &many,
    )
    .await?;
    assert_eq!(r.status, 413, "{}", r.body_str());
    r.error_message()?;
    stop(s).await?;
    let _ = std::fs::remove_dir_all(&voices);
    Ok(())
}

/// A full engine answers HTTP speech with `429` and `Retry-After`, so a
/// client or a load balancer knows to retry (elsewhere) shortly; the
/// refusal comes at once, not after a wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_engine_answers_429_with_retry_after() -> Result<()> {
    let mut cfg = common::config(Duration::from_secs(5));
    cfg.engine.max_active_requests = 1;
    let s = start(cfg).await?;
    let addr = s.local_addr();
    // One request held in flight (`hold_one_stream`).
    let holder = hold_one_stream(addr).await?;
    let t0 = std::time::Instant::now();
    let r = post_json(
        addr,
        "/v1/audio/speech",
        &json!({"input": "Refused while the engine is full.", "response_format": "wav"}),
    )
    .await?;
    let took = t0.elapsed();
    ensure!(r.status == 429, "got {} {}", r.status, r.body_str());
    ensure!(
        r.header("retry-after") == Some("1"),
        "Retry-After: {:?}",
        r.header("retry-after")
    );
    ensure!(took < Duration::from_secs(2), "the refusal took {took:?}");
    drop(holder);
    stop(s).await
}

/// With admission by real-time capacity, a replica whose measured
/// capacity is in use refuses a new WebSocket before the upgrade (429 with
/// `Retry-After`), so a balancer sends the caller to another replica
/// instead of opening a socket that could not speak; once the stream
/// ends, sockets are accepted again. (`realtime_load` 0.001: every
/// machine keeps exactly one stream here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_at_its_real_time_capacity_refuses_new_sockets_before_the_upgrade() -> Result<()>
{
    use common::{http, ws};
    let mut cfg = common::config(Duration::from_secs(5));
    cfg.engine.realtime_load = Some(0.001);
    cfg.calibrate_frames = 1000;
    let s = start(cfg).await?;
    let addr = s.local_addr();
    let holder = hold_one_stream(addr).await?;
    // Calibrated to one stream before ready (or, had the calibration been
    // too quick to time, measured on the held stream's first frames).
    let t0 = std::time::Instant::now();
    loop {
        let m = http::request(addr, "GET", "/metrics", &[], b"").await?;
        let body = m.body_str();
        if body.contains("\ntts_admission_limit 1\n") && body.contains("\ntts_load 1\n") {
            break;
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(30),
            "never at one stream, full: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let upgrade = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    let t0 = std::time::Instant::now();
    let r = http::request(addr, "GET", "/v1/realtime", &upgrade, b"").await?;
    let took = t0.elapsed();
    ensure!(r.status == 429, "got {} {}", r.status, r.body_str());
    ensure!(
        r.header("retry-after") == Some("1"),
        "{:?}",
        r.header("retry-after")
    );
    ensure!(
        r.body_str().contains("real-time streams"),
        "{}",
        r.body_str()
    );
    ensure!(took < Duration::from_secs(2), "the refusal took {took:?}");
    drop(holder);
    // The held stream is cancelled with its socket; then a socket fits.
    let t0 = std::time::Instant::now();
    loop {
        match ws::connect(addr).await {
            Ok(_) => break,
            Err(_) if t0.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.context("no socket accepted after the stream ended")),
        }
    }
    stop(s).await
}

/// A realtime session holding one request in flight: its client never
/// acknowledges, so its generation pauses at 4 s of audio and it stays
/// admitted. Seed 1: tiny-a samples this text to the frame cap (the
/// default seed, 0, ends it after 5 frames, and the slot with it). Returned once its first audio came (it was admitted);
/// dropping it ends the request.
async fn hold_one_stream(addr: std::net::SocketAddr) -> Result<common::ws::Ws> {
    use common::ws;
    let mut holder = ws::connect(addr).await?;
    ws::send(
        &mut holder,
        json!({"type": "session.update", "session": {"audio_acks": true, "max_frames": 400, "seed": 1}}),
    )
    .await?;
    ws::send(
        &mut holder,
        json!({"type": "context.append", "context_id": "held", "text": "A long text that keeps the only engine slot busy for a while."}),
    )
    .await?;
    ws::send(
        &mut holder,
        json!({"type": "context.end", "context_id": "held"}),
    )
    .await?;
    loop {
        if let ws::Got::Audio(..) = ws::next(&mut holder).await? {
            return Ok(holder);
        }
    }
}
