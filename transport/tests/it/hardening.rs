//! The server's limits and refusals under hostile or careless clients, on
//! loopback with the tiny-a fixture: each test is named after the defect it
//! pins (issue 15) and asserts what a client sees at the bound — the close
//! code, the JSON error, the failed context — never a speed.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;
use tts_transport::protocol::{self, ErrorCode, ServerMessage};
use tts_transport::ServeConfig;

use crate::common;

use common::http::{parse as parse_response, request as http};
use common::ws::{close_code, next, Got, Ws};
use common::{finite_prefix, start, stop, BrokenCodec, LATE_CODE, LATE_FRAME, WAIT};

fn config() -> ServeConfig {
    common::config(Duration::from_secs(5))
}

async fn connect(addr: SocketAddr, query: &str, headers: &[(&str, &str)]) -> Result<Ws> {
    let mut req = format!("ws://{addr}/v1/realtime{query}").into_client_request()?;
    for (k, v) in headers {
        req.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes())?,
            v.parse()?,
        );
    }
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await?;
    match next(&mut ws).await? {
        Got::Msg(ServerMessage::SessionCreated { .. }) => Ok(ws),
        other => bail!("first message: {other:?}"),
    }
}

async fn send(ws: &mut Ws, v: Value) -> Result<()> {
    ws.send(Message::text(v.to_string())).await?;
    Ok(())
}

// ------------------------------------------------------ item 4: close codes

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_over_4_mib_closes_with_1009_not_a_reset() -> Result<()> {
    let s = start(config()).await?;
    let addr = s.local_addr();
    for binary in [true, false] {
        let mut ws = connect(addr, "", &[]).await?;
        let big = vec![b'a'; protocol::HARD_MESSAGE_BYTES + 1024];
        let msg = if binary {
            Message::binary(big)
        } else {
            Message::text(String::from_utf8(big)?)
        };
        // The whole message goes out: the server reads and discards the
        // part past the limit rather than resetting the connection.
        ws.send(msg)
            .await
            .context("sending the oversized message")?;
        assert_eq!(close_code(&mut ws).await?, Some(1009), "binary: {binary}");
    }
    // Other sessions are unaffected.
    let mut ws = connect(addr, "", &[]).await?;
    send(&mut ws, json!({"type": "ping", "id": "p"})).await?;
    assert!(matches!(
        next(&mut ws).await?,
        Got::Msg(ServerMessage::Pong { .. })
    ));
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_text_closes_with_1007() -> Result<()> {
    let s = start(config()).await?;
    let mut ws = connect(s.local_addr(), "", &[]).await?;
    let frame = Frame::message(vec![b'{', 0xff, 0xfe, b'}'], OpCode::Data(Data::Text), true);
    ws.send(Message::Frame(frame)).await?;
    assert_eq!(close_code(&mut ws).await?, Some(1007));
    stop(s).await
}

// ------------------------------------------- item 8: error shapes and auth

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_and_method_not_allowed_have_json_bodies() -> Result<()> {
    let s = start(config()).await?;
    let addr = s.local_addr();
    let r = http(addr, "GET", "/v1/nothing-here", &[], b"").await?;
    assert_eq!(r.status, 404);
    assert!(
        r.error_message()?.contains("/v1/nothing-here"),
        "{}",
        r.body_str()
    );
    let r = http(addr, "DELETE", "/v1/models", &[], b"").await?;
    assert_eq!(r.status, 405);
    r.error_message()?;
    let r = http(addr, "POST", "/", &[], b"").await?;
    assert_eq!(r.status, 405);
    r.error_message()?;
    // An unparsable query is axum's plain-text rejection underneath.
    let r = http(addr, "GET", "/v1/audio/voices/x?full=maybe", &[], b"").await?;
    assert_eq!(r.status, 400);
    r.error_message()?;
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_the_limit_is_a_json_413() -> Result<()> {
    let mut cfg = config();
    cfg.max_upload_bytes = 1024;
    let s = start(cfg).await?;
    let addr = s.local_addr();
    let json_ct = [("Content-Type", "application/json")];
    let big = vec![b' '; 3 << 20];
    let r = http(addr, "POST", "/v1/audio/speech", &json_ct, &big).await?;
    assert_eq!(r.status, 413, "{}", r.body_str());
    r.error_message()?;
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_limit_error_reads_once_and_names_input() -> Result<()> {
    let s = start(config()).await?;
    // 4000 characters (under the documented 4096) of a private-use symbol
    // the tokenizer spends a token per UTF-8 byte on: past the 8192 tokens.
    let input: String = "\u{10FFFD}".repeat(4000);
    let body = json!({"input": input, "voice": "alloy"}).to_string();
    let r = http(
        s.local_addr(),
        "POST",
        "/v1/audio/speech",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .await?;
    assert_eq!(r.status, 400, "{}", r.body_str());
    r.error_message()?;
    let j = r.json();
    let msg = j["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(msg.matches("invalid request").count(), 1, "{msg}");
    assert!(msg.contains("4096 characters"), "{msg}");
    assert_eq!(j["error"]["param"], "input");
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_scheme_is_case_insensitive_and_401_names_it() -> Result<()> {
    let mut cfg = config();
    cfg.token = Some("s3cret".into());
    let s = start(cfg).await?;
    let addr = s.local_addr();
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let auth = format!("{scheme} s3cret");
        let r = http(addr, "GET", "/v1/models", &[("Authorization", &auth)], b"").await?;
        assert_eq!(r.status, 200, "{scheme}");
    }
    let r = http(
        addr,
        "GET",
        "/v1/models",
        &[("Authorization", "Basic s3cret")],
        b"",
    )
    .await?;
    assert_eq!(r.status, 401);
    assert!(
        r.header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer")),
        "{:?}",
        r.headers
    );
    r.error_message()?;
    connect(addr, "", &[("Authorization", "bearer s3cret")]).await?;
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_token_is_accepted_only_on_the_websocket_and_the_page() -> Result<()> {
    let mut cfg = config();
    cfg.token = Some("s3cret".into());
    let s = start(cfg).await?;
    let addr = s.local_addr();
    for path in [
        "/metrics?token=s3cret",
        "/v1/models?token=s3cret",
        "/v1/audio/voices?token=s3cret",
    ] {
        let r = http(addr, "GET", path, &[], b"").await?;
        assert_eq!(r.status, 401, "{path}");
    }
    // The page needs no token at all; its URL carries one for its scripts.
    assert_eq!(
        http(addr, "GET", "/?token=s3cret", &[], b"").await?.status,
        200
    );
    connect(addr, "?token=s3cret", &[]).await?;
    assert!(connect(addr, "?token=wrong", &[]).await.is_err());
    stop(s).await
}

// ---------------------------- item 2: audio_acks bound across segments

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_acks_bound_holds_across_segments() -> Result<()> {
    let mut cfg = config();
    cfg.engine.soft_unacked_audio_s = 1.0;
    cfg.engine.hard_unacked_audio_s = 2.0;
    let s = start(cfg).await?;
    let mut ws = connect(s.local_addr(), "", &[]).await?;
    // Segments of at most 4 frames (0.32 s): each well under the pause bound,
    // which only a count over the whole context reaches.
    send(
        &mut ws,
        json!({"type": "session.update", "session": {
            "audio_acks": true, "max_frames": 4, "greedy": true,
            "chunking": {"mode": "sentence", "min_chars": 1, "max_chars": 24}}}),
    )
    .await?;
    assert!(matches!(
        next(&mut ws).await?,
        Got::Msg(ServerMessage::SessionUpdated { .. })
    ));
    let text: String = (0..40).map(|i| format!("Number {i} here. ")).collect();
    send(
        &mut ws,
        json!({"type": "context.append", "context_id": "c", "text": text}),
    )
    .await?;
    send(&mut ws, json!({"type": "context.end", "context_id": "c"})).await?;
    let t0 = Instant::now();
    let mut samples = 0usize;
    let mut rate = 0u32;
    let end = loop {
        match next(&mut ws).await? {
            Got::Audio(h, n) => {
                samples += n;
                rate = h.sample_rate;
            }
            Got::Msg(
                m @ (ServerMessage::ContextDone { .. } | ServerMessage::ContextFailed { .. }),
            ) => break m,
            Got::Msg(_) => {}
            Got::Closed(c) => bail!("closed ({c:?})"),
        }
    };
    let got_s = samples as f64 / rate.max(1) as f64;
    let ServerMessage::ContextFailed { code, message, .. } = &end else {
        bail!("a client that never acknowledges got {got_s:.2} s and then {end:?}");
    };
    assert_eq!(*code, ErrorCode::SlowConsumer, "{message}");
    // The pause bound plus at most one chunk beyond it.
    assert!(got_s < 1.0 + 0.7, "{got_s:.2} s delivered unacknowledged");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    stop(s).await
}

// ------------------------------------ item 6: non-finite audio is refused

/// What a context on a NaN-decoding codec delivered before it failed.
struct FailedContext {
    frames: usize,
    samples: usize,
    terminal: bool,
}

/// Speaks `text` as context `c` after `session` settings, expects it to
/// fail naming non-finite audio, and checks the session answers a ping
/// afterwards.
async fn speak_into_nan(
    model: std::path::PathBuf,
    session: Value,
    text: &str,
) -> Result<FailedContext> {
    let mut cfg = config();
    cfg.model_dir = model;
    let s = start(cfg).await?;
    let mut ws = connect(s.local_addr(), "", &[]).await?;
    send(
        &mut ws,
        json!({"type": "session.update", "session": session}),
    )
    .await?;
    send(
        &mut ws,
        json!({"type": "context.append", "context_id": "c", "text": text}),
    )
    .await?;
    send(&mut ws, json!({"type": "context.end", "context_id": "c"})).await?;
    let mut got = FailedContext {
        frames: 0,
        samples: 0,
        terminal: false,
    };
    let end = loop {
        match next(&mut ws).await? {
            Got::Audio(h, n) => {
                got.samples += n;
                got.frames += 1;
                got.terminal |= h.terminal;
            }
            Got::Msg(
                m @ (ServerMessage::ContextDone { .. } | ServerMessage::ContextFailed { .. }),
            ) => break m,
            Got::Msg(_) => {}
            Got::Closed(c) => bail!("closed ({c:?})"),
        }
    };
    let ServerMessage::ContextFailed { code, message, .. } = &end else {
        bail!("a NaN codec ended {end:?}");
    };
    assert_eq!(*code, ErrorCode::SynthesisFailed);
    assert!(message.contains("non-finite audio"), "{message}");
    // The session goes on.
    send(&mut ws, json!({"type": "ping", "id": "after"})).await?;
    loop {
        match next(&mut ws).await? {
            Got::Msg(ServerMessage::Pong { id }) => {
                assert_eq!(id.as_deref(), Some("after"));
                break;
            }
            Got::Closed(c) => bail!("closed after the failure ({c:?})"),
            _ => {}
        }
    }
    stop(s).await?;
    Ok(got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_finite_codec_output_fails_the_context_instead_of_done() -> Result<()> {
    let broken = BrokenCodec::new()?;
    let got = speak_into_nan(broken.dir(), json!({}), "Hello there.").await?;
    assert_eq!(got.samples, 0, "no NaN sample was delivered");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_finite_audio_mid_stream_fails_the_context_after_its_finite_audio() -> Result<()> {
    let broken = BrokenCodec::at_code(LATE_CODE)?;
    let session = json!({"voice": "ryan", "language": "English", "greedy": true});
    let got = speak_into_nan(broken.dir(), session, "Hello world.").await?;
    // The finite chunks went out as they were decoded; nothing after.
    assert_eq!(
        (got.frames, got.samples),
        finite_prefix(LATE_FRAME, 1920),
        "finite audio delivered"
    );
    assert!(
        !got.terminal,
        "no terminal frame: the context did not finish"
    );
    Ok(())
}

// ------------------------- item 3: pings, idle timeout, idle eviction

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_pings_and_closes_a_peer_that_never_answers() -> Result<()> {
    let mut cfg = config();
    cfg.ping_interval = Duration::from_millis(200);
    cfg.pong_timeout = Duration::from_millis(300);
    let s = start(cfg).await?;
    let mut ws = connect(s.local_addr(), "", &[]).await?;
    // Not reading means not answering the server's pings.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut pinged = false;
    let code = loop {
        match tokio::time::timeout(WAIT, ws.next()).await? {
            Some(Ok(Message::Ping(_))) => pinged = true,
            Some(Ok(Message::Close(f))) => {
                break f.map(|f| (u16::from(f.code), f.reason.to_string()))
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => bail!("error instead of a close frame: {e}"),
            None => break None,
        }
    };
    assert!(pinged, "the server pinged");
    let (code, reason) = code.context("a close frame")?;
    assert_eq!(code, 1001);
    assert!(reason.contains("ping"), "{reason}");
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_answers_pings_stays_and_an_idle_one_times_out() -> Result<()> {
    let mut cfg = config();
    cfg.ping_interval = Duration::from_millis(100);
    cfg.pong_timeout = Duration::from_millis(400);
    cfg.idle_timeout = Duration::from_millis(1200);
    let s = start(cfg).await?;
    let mut ws = connect(s.local_addr(), "", &[]).await?;
    let t0 = Instant::now();
    // Reading answers pings (tungstenite replies by itself); a ping message
    // every 300 ms keeps the session from idling.
    while t0.elapsed() < Duration::from_millis(1500) {
        send(&mut ws, json!({"type": "ping", "id": "k"})).await?;
        loop {
            match next(&mut ws).await? {
                Got::Msg(ServerMessage::Pong { .. }) => break,
                Got::Closed(c) => bail!("closed ({c:?}) while in use"),
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Now idle: closed within the idle timeout (plus slack), with 1001.
    let t1 = Instant::now();
    assert_eq!(close_code(&mut ws).await?, Some(1001));
    assert!(t1.elapsed() < Duration::from_secs(5), "{:?}", t1.elapsed());
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_cannot_hold_every_slot() -> Result<()> {
    let mut cfg = config();
    cfg.max_sessions = 2;
    let s = start(cfg).await?;
    let addr = s.local_addr();
    let mut first = connect(addr, "", &[]).await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut second = connect(addr, "", &[]).await?;
    // Full of idle sessions: a new client gets the longest-idle one's slot.
    let mut third = connect(addr, "", &[]).await?;
    assert_eq!(close_code(&mut first).await?, Some(1001));
    // A session with an open context is in use and is never evicted.
    for ws in [&mut second, &mut third] {
        send(
            ws,
            json!({"type": "context.append", "context_id": "c",
                   "text": "Still talking", "v": 1}),
        )
        .await?;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        connect(addr, "", &[]).await.is_err(),
        "both sessions in use: 503"
    );
    stop(s).await
}

// ------------------------- item 1: connection cap and read timeouts

/// A raw TCP request without reading the answer yet.
async fn raw(addr: SocketAddr, bytes: &[u8]) -> Result<TcpStream> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(bytes).await?;
    Ok(s)
}

async fn read_all(mut s: TcpStream, within: Duration) -> Result<Vec<u8>> {
    let mut raw = Vec::new();
    tokio::time::timeout(within, s.read_to_end(&mut raw))
        .await
        .context("the server held the connection")??;
    Ok(raw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_get_a_503_and_health_still_answers() -> Result<()> {
    let mut cfg = config();
    cfg.max_connections = 4;
    let s = start(cfg).await?;
    let addr = s.local_addr();
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(addr).await?);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = http(addr, "GET", "/v1/models", &[], b"").await?;
    assert_eq!(r.status, 503);
    r.error_message()?;
    let t0 = Instant::now();
    let r = http(addr, "GET", "/health", &[], b"").await?;
    assert_eq!(r.status, 200);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    drop(idle);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(http(addr, "GET", "/v1/models", &[], b"").await?.status, 200);
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_idle_connections_are_cut_at_the_header_timeout() -> Result<()> {
    let mut cfg = config();
    cfg.header_read_timeout = Duration::from_millis(300);
    let s = start(cfg).await?;
    let addr = s.local_addr();
    let half = raw(addr, b"GET /health HTTP/1.1\r\nHost: x\r\n").await?;
    read_all(half, Duration::from_secs(3)).await?;
    let silent = TcpStream::connect(addr).await?;
    read_all(silent, Duration::from_secs(3)).await?;
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_body_is_answered_408() -> Result<()> {
    let mut cfg = config();
    cfg.body_read_timeout = Duration::from_millis(300);
    let s = start(cfg).await?;
    let head = "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"input\":";
    let c = raw(s.local_addr(), head.as_bytes()).await?;
    let r = parse_response(&read_all(c, Duration::from_secs(5)).await?)?;
    assert_eq!(r.status, 408, "{}", r.body_str());
    r.error_message()?;
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_is_checked_before_the_body_is_read() -> Result<()> {
    let mut cfg = config();
    cfg.token = Some("s3cret".into());
    let s = start(cfg).await?;
    // Ten megabytes announced, none sent: the 401 comes at once.
    let head = "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n";
    let mut c = raw(s.local_addr(), head.as_bytes()).await?;
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .context("no answer before the body")??;
    let r = parse_response(&buf[..n])?;
    assert_eq!(r.status, 401);
    stop(s).await
}

// ------------------------------------------------ item 7: shutdown

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_reports_draining_once_shutdown_starts() -> Result<()> {
    let s = start(config()).await?;
    let addr = s.local_addr();
    let mut ws = connect(addr, "", &[]).await?;
    send(
        &mut ws,
        json!({"type": "context.append", "context_id": "c", "text": "Hold the drain open."}),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.shutdown();
    let r = http(addr, "GET", "/ready", &[], b"").await?;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["status"], "draining", "{}", r.body_str());
    assert_eq!(http(addr, "GET", "/health", &[], b"").await?.status, 200);
    send(&mut ws, json!({"type": "context.end", "context_id": "c"})).await?;
    let mut done = false;
    loop {
        match next(&mut ws).await? {
            Got::Msg(ServerMessage::ContextDone { .. }) => done = true,
            Got::Closed(code) => {
                assert_eq!(code, Some(1001));
                break;
            }
            _ => {}
        }
    }
    assert!(done, "the stream in flight finished");
    tokio::time::timeout(WAIT, s.wait()).await??;
    Ok(())
}
