//! A request whose client has gone stops costing anything (issue 15: a
//! soak found an HTTP request generating on with no connection left).
//! A complete body (`wav`'s default, or `"stream": false`) sends nothing
//! until the utterance is over, so only watching the receiving side notices
//! the client leaving; a streamed body notices at its next chunk. Either
//! way the engine must drop the request within a moment, not run it to its
//! frame cap. The same for the WebSocket routes (ours, ElevenLabs' and
//! Cartesia's shapes) left without a close frame. On loopback, with a
//! talker that never ends an utterance.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::common;

use common::http::request;
use common::{start, stop, EndlessTalker};

/// `tts_engine_active_requests` and `tts_http_streams_active` from /metrics.
async fn active(addr: SocketAddr) -> Result<(u64, u64)> {
    let r = request(addr, "GET", "/metrics", &[], b"").await?;
    let text = r.body_str().to_string();
    let value = |name: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .with_context(|| format!("{name} in /metrics"))
    };
    Ok((
        value("tts_engine_active_requests ")?,
        value("tts_http_streams_active ")?,
    ))
}

/// Sends a speech request, reads `read` bytes of the answer (0: none) and
/// closes the connection.
async fn leave_after(addr: SocketAddr, body: serde_json::Value, read: usize) -> Result<()> {
    let mut s = TcpStream::connect(addr).await?;
    let body = body.to_string();
    s.write_all(
        format!(
            "POST /v1/audio/speech HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await?;
    let mut got = vec![0u8; read];
    if read > 0 {
        s.read_exact(&mut got).await?;
    }
    // Wait until the engine holds the request, then go.
    let t0 = Instant::now();
    while active(addr).await?.0 == 0 {
        ensure!(t0.elapsed() < Duration::from_secs(10), "never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(s);
    Ok(())
}

/// Waits until the engine and the HTTP streams are idle again.
async fn dropped(addr: SocketAddr, what: &str) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let (engine, streams) = active(addr).await?;
        if engine == 0 && streams == 0 {
            println!("{what}: dropped {:?} after the client left", t0.elapsed());
            return Ok(());
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(5),
            "{what}: still {engine} engine request(s), {streams} HTTP stream(s) 5 s after the client left"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server on the endless talker, with a frame cap far beyond what the
/// tests wait for: only the client leaving can end their requests in time.
async fn endless_server() -> Result<(EndlessTalker, tts_transport::Server)> {
    let endless = EndlessTalker::new()?;
    let mut cfg = common::config(Duration::from_secs(5));
    cfg.model_dir = endless.dir();
    cfg.max_frames = Some(60_000);
    let s = start(cfg).await?;
    Ok((endless, s))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_client_left_stops_generating() -> Result<()> {
    let (_endless, s) = endless_server().await?;
    let addr = s.local_addr();
    let text = "A sentence that this talker will never finish speaking.";
    let cases = [
        (
            "complete wav, before any byte",
            json!({"response_format": "wav"}),
            0,
        ),
        (
            "complete pcm, before any byte",
            json!({"response_format": "pcm", "stream": false}),
            0,
        ),
        (
            "streamed pcm, mid-body",
            json!({"response_format": "pcm"}),
            4096,
        ),
        (
            "streamed mp3, mid-body",
            json!({"response_format": "mp3"}),
            512,
        ),
    ];
    for (what, extra, read) in cases {
        let mut body = json!({"model": "tts-1", "input": text, "voice": "alloy"});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        leave_after(addr, body, read).await?;
        dropped(addr, what).await?;
    }
    // The sockets: our realtime protocol and the vendors' shapes, each
    // left without a word (a TCP close, no close frame) mid-audio.
    let sockets = [
        (
            "realtime socket",
            format!("ws://{addr}/v1/realtime"),
            vec![
                json!({"type": "context.append", "context_id": "c", "text": text}),
                json!({"type": "context.end", "context_id": "c"}),
            ],
        ),
        (
            "ElevenLabs stream-input",
            format!("ws://{addr}/v1/text-to-speech/ryan/stream-input?output_format=pcm_24000"),
            vec![
                json!({"text": " "}),
                json!({"text": format!("{text} "), "flush": true}),
            ],
        ),
        (
            "Cartesia websocket",
            format!("ws://{addr}/tts/websocket"),
            vec![json!({
                "model_id": "sonic-2", "transcript": text, "continue": false, "context_id": "c",
                "voice": {"mode": "id", "id": "ryan"},
                "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
            })],
        ),
    ];
    for (what, url, msgs) in sockets {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await?;
        for m in msgs {
            ws.send(Message::text(m.to_string())).await?;
        }
        // Audio is flowing, then the client vanishes.
        loop {
            let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
                .await
                .with_context(|| format!("{what}: no audio"))?;
            match m {
                Some(Ok(Message::Binary(_))) => break,
                Some(Ok(Message::Text(t)))
                    if t.contains("\"audio\"") || t.contains("\"chunk\"") =>
                {
                    break
                }
                Some(Ok(_)) => {}
                other => anyhow::bail!("{what}: {other:?} before any audio"),
            }
        }
        ensure!(active(addr).await?.0 > 0, "{what}: not generating");
        drop(ws);
        dropped(addr, what).await?;
    }
    stop(s).await
}

/// A client that keeps its connection but stops reading a streamed body
/// must not hold its engine slot forever: past the send timeout (10 s, as
/// on the WebSocket) the request is dropped and the transfer aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_nobody_reads_is_dropped_after_the_send_timeout() -> Result<()> {
    let (_endless, s) = endless_server().await?;
    let addr = s.local_addr();
    let sock = tokio::net::TcpSocket::new_v4()?;
    // A small window: the server's writes stall soon.
    sock.set_recv_buffer_size(4096)?;
    let mut c = sock.connect(addr).await?;
    let body =
        json!({"input": "A sentence that never ends.", "voice": "alloy", "response_format": "pcm"})
            .to_string();
    c.write_all(
        format!(
            "POST /v1/audio/speech HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await?;
    let mut head = vec![0u8; 1024];
    c.read_exact(&mut head).await?;
    ensure!(
        head.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&head)
    );
    // Now it stops reading, and keeps the connection open.
    let t0 = Instant::now();
    loop {
        let (engine, streams) = active(addr).await?;
        if engine == 0 && streams == 0 {
            break;
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(30),
            "a stalled reader still holds {engine} engine request(s) after {:?}",
            t0.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "stalled reader: dropped {:?} after it stopped reading",
        t0.elapsed()
    );
    ensure!(
        t0.elapsed() >= Duration::from_secs(5),
        "dropped too early: {:?}",
        t0.elapsed()
    );
    // What is left of the body ends cut, not as a whole file.
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut rest)).await;
    ensure!(
        !rest.ends_with(b"0\r\n\r\n"),
        "the stalled body ended as if complete"
    );
    drop(c);
    stop(s).await
}
