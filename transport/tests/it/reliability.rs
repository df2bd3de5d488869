//! The reliability probes that are not pinned elsewhere (issue 15, "The
//! probes as the project's own"), on loopback with tiny-a, each bounded to
//! seconds: malformed input, random message sequences, mid-stream
//! disconnects, slow readers and a burst. Each asserts what must hold — a
//! named error and the session kept, every started context ending exactly
//! once with contiguous audio, other clients' audio complete, open files
//! back to baseline (measured alone in a process of its own, `alone!`) —
//! and prints one summary line. `.ci/run` runs them
//! with the other probes (hardening.rs, floods.rs, the root signal and
//! corrupt-checkpoint tests) as its reliability step.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio_tungstenite::tungstenite::Message;
use tts_transport::protocol::ServerMessage;
use tts_transport::ServeConfig;

use crate::alone::alone;
use crate::common;

use common::ws::{self, Got, Ws};
use common::{start, stop};

const TEXT: &str = "Reliability probes speak this sentence.";
const FRAMES: usize = 8;

fn config() -> ServeConfig {
    common::config(Duration::from_secs(5))
}

fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// A session set to greedy decoding and at most `FRAMES` frames.
async fn session(addr: std::net::SocketAddr) -> Result<Ws> {
    let mut c = ws::connect(addr).await?;
    ws::send(
        &mut c,
        json!({"type": "session.update", "session": {"greedy": true, "max_frames": FRAMES}}),
    )
    .await?;
    Ok(c)
}

/// Sends a ping and reads up to its pong; returns what came before it.
async fn until_pong(c: &mut Ws, id: &str) -> Result<Vec<Got>> {
    ws::send(c, json!({"type": "ping", "id": id})).await?;
    let mut before = Vec::new();
    loop {
        match ws::next(c).await? {
            Got::Msg(ServerMessage::Pong { id: Some(p), .. }) if p == id => return Ok(before),
            Got::Closed(code) => bail!("closed ({code:?}) before pong {id}"),
            g => before.push(g),
        }
    }
}

// ------------------------------------------------------------ malformed

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_is_refused_by_name_and_the_session_kept() -> Result<()> {
    let s = start(config()).await?;
    let mut c = session(s.local_addr()).await?;
    let long_id = "x".repeat(10_000);
    let text: Vec<String> = vec![
        "".into(),
        "{".into(),
        "null".into(),
        "[]".into(),
        "42".into(),
        "\"context.append\"".into(),
        "{}".into(),
        json!({"type": "nope"}).to_string(),
        json!({"type": 5}).to_string(),
        json!({"type": "context.append"}).to_string(),
        json!({"type": "context.append", "context_id": "a"}).to_string(),
        json!({"type": "context.append", "context_id": 1, "text": "x"}).to_string(),
        json!({"type": "context.append", "context_id": "a", "text": 7}).to_string(),
        json!({"type": "context.append", "context_id": "a", "text": "x", "extra": 1}).to_string(),
        json!({"type": "context.append", "context_id": long_id, "text": "x"}).to_string(),
        json!({"type": "context.append", "context_id": "", "text": "x"}).to_string(),
        json!({"type": "context.append", "context_id": "a", "text": "x", "v": 99}).to_string(),
        json!({"type": "context.end"}).to_string(),
        json!({"type": "context.cancel", "context_id": null}).to_string(),
        json!({"type": "audio.ack", "context_id": "a", "seq": -1}).to_string(),
        json!({"type": "audio.ack", "context_id": "a", "seq": "one"}).to_string(),
        json!({"type": "session.update"}).to_string(),
        json!({"type": "session.update", "session": 3}).to_string(),
        json!({"type": "session.update", "session": {"sample_rate": 1}}).to_string(),
        json!({"type": "session.update", "session": {"sample_rate": 10_000_000}}).to_string(),
        json!({"type": "session.update", "session": {"max_frames": 0}}).to_string(),
        json!({"type": "session.update", "session": {"voice": "nobody-at-all"}}).to_string(),
        json!({"type": "session.update", "session": {"language": "klingon"}}).to_string(),
        json!({"type": "session.update", "session": {"format": "mp9"}}).to_string(),
        json!({"type": "session.update", "session": {"no_such_setting": true}}).to_string(),
        json!({"type": "input_audio.append", "audio": "!!!", "sample_rate": 16000}).to_string(),
        json!({"type": "input_audio.append", "audio": "AAAA", "sample_rate": 0}).to_string(),
        json!({"type": "ping", "id": 5}).to_string(),
        "\u{0}\u{1}\u{2}".into(),
        "{\"type\": \"context.append\", \"context_id\": \"a\", \"text\": \"\\ud800\"}".into(),
    ];
    let binary: Vec<Vec<u8>> = vec![vec![], vec![1, 2, 3], vec![9; 16], {
        // A valid-looking header of a wrong version.
        let mut h = vec![7u8, 0, 16, 0];
        h.extend_from_slice(&[0; 12]);
        h
    }];
    let kinds = text.len() + binary.len();
    let mut refused = 0;
    for (i, t) in text.iter().enumerate() {
        c.send(Message::text(t.clone())).await?;
        let before = until_pong(&mut c, &format!("m{i}"))
            .await
            .with_context(|| format!("after {t:.60}"))?;
        let errors = before
            .iter()
            .filter(|g| matches!(g, Got::Msg(ServerMessage::Error { .. })))
            .count();
        ensure!(errors == 1, "{t:.80}: {errors} errors: {before:?}");
        refused += 1;
    }
    for (i, b) in binary.iter().enumerate() {
        c.send(Message::binary(b.clone())).await?;
        let before = until_pong(&mut c, &format!("b{i}")).await?;
        ensure!(
            before
                .iter()
                .any(|g| matches!(g, Got::Msg(ServerMessage::Error { .. }))),
            "binary {b:?}: no error: {before:?}"
        );
        refused += 1;
    }
    // The session still speaks.
    let spoken = ws::speak(&mut c, "after", TEXT).await?;
    println!(
        "malformed-input: {kinds} kinds of malformed message, {refused} refused with a named error; session kept ({} samples spoken after)",
        spoken.samples
    );
    stop(s).await
}

// -------------------------------------------------------- sequence fuzz

/// xorshift64*: reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_message(r: &mut Rng) -> Value {
    let id = format!("c{}", r.below(3));
    let texts = [
        "Hello.",
        "",
        "  ",
        "One, two",
        " three.",
        "¿Qué tal?",
        "日本語",
        "a",
    ];
    match r.below(10) {
        0..=2 => {
            let text = texts[r.below(texts.len() as u64) as usize];
            json!({"type": "context.append", "context_id": id, "text": text})
        }
        3 => json!({"type": "context.flush", "context_id": id}),
        4 => json!({"type": "context.end", "context_id": id}),
        5 => json!({"type": "context.cancel", "context_id": id}),
        6 => json!({"type": "audio.ack", "context_id": id, "seq": r.below(5)}),
        7 => json!({"type": "session.update", "session": {"max_frames": r.below(6)}}),
        8 => json!({"type": "ping"}),
        _ => {
            let kind = ["nope", "context.append", "audio.ack"][r.below(3) as usize];
            json!({ "type": kind })
        }
    }
}

/// What the fuzz checks per stream: contiguous seqs, one end, nothing after.
#[derive(Default)]
struct StreamLog {
    next_seq: u32,
    ended: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_message_sequences_keep_every_context_whole() -> Result<()> {
    let s = start(config()).await?;
    let addr = s.local_addr();
    let mut r = Rng(0x5eed_1234_abcd_0001);
    let (mut sequences, mut messages, mut contexts) = (0, 0, 0);
    let t0 = Instant::now();
    for conn in 0..10 {
        let mut c = session(addr).await?;
        let mut streams: HashMap<u32, StreamLog> = HashMap::new();
        for seq in 0..20 {
            let n = 1 + r.below(12);
            for _ in 0..n {
                ws::send(&mut c, random_message(&mut r)).await?;
            }
            messages += n;
            // A quarter of the sequences let their contexts run to the
            // end; the rest cancel whatever they opened.
            let close = if r.below(4) == 0 {
                "context.end"
            } else {
                "context.cancel"
            };
            for id in 0..3 {
                ws::send(
                    &mut c,
                    json!({"type": close, "context_id": format!("c{id}")}),
                )
                .await?;
            }
            let tag = format!("s{conn}-{seq}");
            let mut got = until_pong(&mut c, &tag).await?;
            // Every started stream ends: read on until each has.
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                for g in got.drain(..) {
                    match g {
                        Got::Msg(ServerMessage::ContextStarted { stream_id, .. }) => {
                            ensure!(
                                streams.insert(stream_id, StreamLog::default()).is_none(),
                                "stream {stream_id} started twice"
                            );
                            contexts += 1;
                        }
                        Got::Audio(h, _) => {
                            let l = streams
                                .get_mut(&h.stream_id)
                                .context("audio of no stream")?;
                            ensure!(!l.ended, "audio after the end of stream {}", h.stream_id);
                            ensure!(
                                h.seq == l.next_seq,
                                "stream {}: seq {} after {}",
                                h.stream_id,
                                h.seq,
                                l.next_seq
                            );
                            l.next_seq += 1;
                        }
                        Got::Msg(
                            ServerMessage::ContextDone {
                                stream_id: Some(id),
                                ..
                            }
                            | ServerMessage::ContextCancelled {
                                stream_id: Some(id),
                                ..
                            }
                            | ServerMessage::ContextFailed {
                                stream_id: Some(id),
                                ..
                            },
                        ) => {
                            let l = streams.get_mut(&id).context("end of no stream")?;
                            ensure!(!l.ended, "stream {id} ended twice");
                            l.ended = true;
                        }
                        Got::Closed(code) => bail!("closed ({code:?}) in sequence {tag}"),
                        _ => {}
                    }
                }
                if streams.values().all(|l| l.ended) {
                    break;
                }
                ensure!(
                    Instant::now() < deadline,
                    "{tag}: a started context never ended"
                );
                got.push(ws::next(&mut c).await?);
            }
            sequences += 1;
        }
        // The session is still good for real work.
        ws::speak(&mut c, "check", TEXT)
            .await
            .with_context(|| format!("speaking after connection {conn}'s sequences"))?;
    }
    println!(
        "sequence-fuzz: {sequences} random sequences ({messages} messages, {contexts} contexts started) in {:.1} s; every context ended once with contiguous audio",
        t0.elapsed().as_secs_f64()
    );
    stop(s).await
}

// ------------------------------------------------------------ disconnect

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mid_stream_disconnects_leak_nothing_and_spare_other_clients() -> Result<()> {
    if !alone!(mid_stream_disconnects_leak_nothing_and_spare_other_clients) {
        return Ok(());
    }
    let s = start(config()).await?;
    let addr = s.local_addr();
    {
        let mut warm = session(addr).await?;
        ws::speak(&mut warm, "warm", TEXT).await?;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fd0 = open_files();
    let mut healthy = session(addr).await?;
    let reference = ws::speak(&mut healthy, "ref", TEXT).await?.samples;
    let t0 = Instant::now();
    let n = 100;
    for i in 0..n {
        if i % 2 == 0 {
            // WebSocket: gone after the first audio frame, without a close.
            let mut c = session(addr).await?;
            ws::send(
                &mut c,
                json!({"type": "context.append", "context_id": "d", "text": TEXT}),
            )
            .await?;
            ws::send(&mut c, json!({"type": "context.end", "context_id": "d"})).await?;
            loop {
                match ws::next(&mut c).await? {
                    Got::Audio(..) => break,
                    Got::Msg(ServerMessage::ContextDone { .. }) => break,
                    Got::Closed(code) => bail!("closed ({code:?})"),
                    _ => {}
                }
            }
            drop(c);
        } else {
            // HTTP: a streamed body dropped after its first bytes.
            let mut t = tokio::net::TcpStream::connect(addr).await?;
            let body = json!({"input": TEXT, "response_format": "pcm", "greedy": true, "max_frames": FRAMES}).to_string();
            let req = format!(
                "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            tokio::io::AsyncWriteExt::write_all(&mut t, req.as_bytes()).await?;
            let mut buf = [0u8; 256];
            let _ = tokio::time::timeout(common::WAIT, t.read(&mut buf)).await?;
            drop(t);
        }
        if i % 25 == 24 {
            let got = ws::speak(&mut healthy, &format!("h{i}"), TEXT).await?;
            ensure!(
                got.samples == reference,
                "healthy client: {} samples, not {reference}",
                got.samples
            );
        }
    }
    drop(healthy);
    let settle = Instant::now();
    let mut fd1 = open_files();
    while fd1 > fd0 + 4 && settle.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        fd1 = open_files();
    }
    ensure!(
        fd1 <= fd0 + 4,
        "open files {fd0} -> {fd1} after {n} disconnects"
    );
    let r = common::http::request(addr, "GET", "/health", &[], b"").await?;
    ensure!(r.status == 200, "/health {}", r.status);
    println!(
        "disconnect: {n} mid-stream disconnects (WebSocket and HTTP) in {:.1} s; healthy client complete throughout; open files {fd0} -> {fd1}",
        t0.elapsed().as_secs_f64()
    );
    stop(s).await
}

// ----------------------------------------------------------- slow reader

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_get_all_their_audio_and_hold_up_nobody() -> Result<()> {
    let s = start(config()).await?;
    let addr = s.local_addr();
    let mut fast = session(addr).await?;
    let reference = ws::speak(&mut fast, "ref", TEXT).await?;
    // A WebSocket reader taking 100 ms per message.
    let slow_ws = tokio::spawn(async move {
        let mut c = session(addr).await?;
        ws::send(
            &mut c,
            json!({"type": "context.append", "context_id": "s", "text": TEXT}),
        )
        .await?;
        ws::send(&mut c, json!({"type": "context.end", "context_id": "s"})).await?;
        let (mut samples, mut seq) = (0usize, 0u32);
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            match ws::next(&mut c).await? {
                Got::Audio(h, n) => {
                    ensure!(
                        h.seq == seq,
                        "slow reader: seq {} where {seq} was due",
                        h.seq
                    );
                    seq += 1;
                    samples += n;
                }
                Got::Msg(ServerMessage::ContextDone { .. }) => break,
                Got::Msg(
                    m @ (ServerMessage::ContextFailed { .. }
                    | ServerMessage::ContextCancelled { .. }),
                ) => {
                    bail!("slow reader's context ended {m:?}")
                }
                Got::Closed(code) => bail!("slow reader closed ({code:?})"),
                _ => {}
            }
        }
        anyhow::Ok(samples)
    });
    // An HTTP reader taking 512 bytes every 20 ms.
    let slow_http = tokio::spawn(async move {
        let mut t = tokio::net::TcpStream::connect(addr).await?;
        let body =
            json!({"input": TEXT, "response_format": "pcm", "greedy": true, "max_frames": FRAMES})
                .to_string();
        let req = format!(
            "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        tokio::io::AsyncWriteExt::write_all(&mut t, req.as_bytes()).await?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 512];
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            match tokio::time::timeout(common::WAIT, t.read(&mut buf)).await?? {
                0 => break,
                n => raw.extend_from_slice(&buf[..n]),
            }
        }
        let r = common::http::parse(&raw)?;
        ensure!(
            r.status == 200 && !r.cut,
            "slow HTTP reader: {} (cut: {})",
            r.status,
            r.cut
        );
        anyhow::Ok(r.body.len() / 2)
    });
    // Meanwhile the fast client is not held up.
    let t0 = Instant::now();
    let mut fast_contexts = 0;
    while !slow_ws.is_finished() || !slow_http.is_finished() {
        let got = ws::speak(&mut fast, &format!("f{fast_contexts}"), TEXT).await?;
        ensure!(
            got.samples == reference.samples,
            "fast client: {} samples, not {}",
            got.samples,
            reference.samples
        );
        fast_contexts += 1;
        ensure!(
            t0.elapsed() < Duration::from_secs(120),
            "slow readers never finished"
        );
    }
    let ws_samples = slow_ws.await??;
    let http_samples = slow_http.await??;
    ensure!(
        ws_samples == reference.samples,
        "slow WebSocket reader got {ws_samples} of {} samples",
        reference.samples
    );
    ensure!(
        http_samples == reference.samples,
        "slow HTTP reader got {http_samples} of {} samples",
        reference.samples
    );
    println!(
        "slow-reader: a slow WebSocket and a slow HTTP reader each got all {} samples, contiguous; a fast client finished {fast_contexts} contexts meanwhile",
        reference.samples
    );
    stop(s).await
}

// ----------------------------------------------------------------- burst

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_clients_is_served_or_refused_by_name() -> Result<()> {
    let s = start(config()).await?;
    let addr = s.local_addr();
    let reference = ws::speak(&mut session(addr).await?, "ref", TEXT)
        .await?
        .samples;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..24 {
        tasks.push(tokio::spawn(async move {
            let mut c = match session(addr).await {
                Ok(c) => c,
                // Refused at the upgrade (a JSON 503): counted as refused.
                Err(_) => return anyhow::Ok(None),
            };
            match ws::speak(&mut c, &format!("b{i}"), TEXT).await {
                Ok(got) => Ok(Some(got.samples)),
                Err(e) => {
                    let m = format!("{e:#}");
                    ensure!(
                        m.contains("AtCapacity") || m.contains("capacity"),
                        "burst client {i}: {m}"
                    );
                    Ok(None)
                }
            }
        }));
    }
    for i in 0..12 {
        tasks.push(tokio::spawn(async move {
            let body = json!({"input": TEXT, "response_format": "wav", "greedy": true, "max_frames": FRAMES, "seed": i});
            let r = common::http::post_json(addr, "/v1/audio/speech", &body).await?;
            match r.status {
                200 => Ok(Some(usize::MAX)),
                429 | 503 => {
                    r.error_message()?;
                    Ok(None)
                }
                s => bail!("burst HTTP request {i}: {s}: {}", r.body_str()),
            }
        }));
    }
    let (mut served, mut refused) = (0, 0);
    for t in tasks {
        match t.await?? {
            Some(n) => {
                ensure!(
                    n == usize::MAX || n == reference,
                    "a burst client got {n} samples, not {reference}"
                );
                served += 1;
            }
            None => refused += 1,
        }
    }
    ensure!(served > 0, "nobody in the burst was served");
    let r = common::http::request(addr, "GET", "/health", &[], b"").await?;
    ensure!(r.status == 200, "/health {}", r.status);
    println!(
        "burst: 24 WebSocket + 12 HTTP clients at once in {:.1} s: {served} served complete, {refused} refused by name",
        t0.elapsed().as_secs_f64()
    );
    stop(s).await
}
