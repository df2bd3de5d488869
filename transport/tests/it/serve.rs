//! `tts-rt serve` end to end on loopback (127.0.0.1:0) with the tiny-a
//! fixture: a Rust WebSocket client exercising every message type,
//! incremental text, cancel, duplex barge-in, malformed-message survival;
//! the OpenAI HTTP endpoints against the engine's own audio; readiness,
//! metrics, auth and the graceful drain. Assertions are on content and
//! lifecycle, never on speed; timeouts only turn a hang into a failure.
//!
//! (One module of ~1200 lines on purpose: every test shares one server
//! helper and client.)

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tts_actors::Request;
use tts_transport::protocol::{
    self, AudioFormat, AudioHeader, CancelReason, ErrorCode, ServerMessage, TextMode,
    PROTOCOL_VERSION,
};
use tts_transport::{ServeConfig, Server};

use crate::common;

use common::http::json_request as http;

use common::{start, WAIT};

fn config() -> ServeConfig {
    common::config(Duration::from_secs(20))
}

// ---------------------------------------------------------------- HTTP ---

// ----------------------------------------------------------- WebSocket ---

// Test-side messages: size does not matter, matching on them does.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum In {
    Msg(ServerMessage),
    Audio(AudioHeader, Vec<f32>),
    Closed(Option<u16>),
}

struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Client {
    async fn connect(addr: SocketAddr, query: &str) -> Result<(Client, ServerMessage)> {
        let url = format!("ws://{addr}/v1/realtime{query}");
        let (ws, _) = tokio_tungstenite::connect_async(url).await?;
        let mut c = Client { ws };
        let hello = c.msg().await?;
        ensure!(
            matches!(hello, ServerMessage::SessionCreated { .. }),
            "first message: {hello:?}"
        );
        Ok((c, hello))
    }

    async fn send(&mut self, v: Value) -> Result<()> {
        self.ws.send(Message::text(v.to_string())).await?;
        Ok(())
    }

    async fn send_text(&mut self, s: String) -> Result<()> {
        self.ws.send(Message::text(s)).await?;
        Ok(())
    }

    async fn send_binary(&mut self, b: Vec<u8>) -> Result<()> {
        self.ws.send(Message::binary(b)).await?;
        Ok(())
    }

    async fn recv(&mut self) -> Result<In> {
        loop {
            let m = tokio::time::timeout(WAIT, self.ws.next())
                .await
                .context("timed out waiting for the server")?;
            let m = match m {
                None => return Ok(In::Closed(None)),
                Some(Err(e)) => bail!("websocket error: {e}"),
                Some(Ok(m)) => m,
            };
            return Ok(match m {
                Message::Text(t) => {
                    let msg = protocol::parse_server_text(t.as_str())
                        .map_err(|e| anyhow::anyhow!("unparsable server message {t}: {e:?}"))?;
                    if let ServerMessage::Audio {
                        stream_id,
                        seq,
                        terminal,
                        sample_rate,
                        format,
                        audio,
                        ..
                    } = &msg
                    {
                        let bytes = protocol::base64_decode(audio).context("bad base64")?;
                        let h = AudioHeader {
                            stream_id: *stream_id,
                            seq: *seq as u32,
                            sample_rate: *sample_rate,
                            format: *format,
                            terminal: *terminal,
                        };
                        return Ok(In::Audio(h, protocol::decode_samples(&bytes, *format)));
                    }
                    In::Msg(msg)
                }
                Message::Binary(b) => {
                    let (h, payload) =
                        AudioHeader::parse(&b).map_err(|e| anyhow::anyhow!("{e:?}"))?;
                    In::Audio(h, protocol::decode_samples(payload, h.format))
                }
                Message::Close(f) => In::Closed(f.map(|f| u16::from(f.code))),
                _ => continue,
            });
        }
    }

    /// The next JSON message (audio is an error here).
    async fn msg(&mut self) -> Result<ServerMessage> {
        match self.recv().await? {
            In::Msg(m) => Ok(m),
            other => bail!("expected a JSON message, got {other:?}"),
        }
    }

    async fn expect_error(&mut self, code: ErrorCode) -> Result<ServerMessage> {
        let m = self.msg().await?;
        match &m {
            ServerMessage::Error { code: c, .. } if *c == code => Ok(m),
            _ => bail!("expected error {code:?}, got {m:?}"),
        }
    }

    /// Round trip a ping: everything the server sent before is now read.
    async fn sync(&mut self, id: &str) -> Result<Vec<In>> {
        self.send(json!({"type": "ping", "id": id})).await?;
        let mut before = Vec::new();
        loop {
            match self.recv().await? {
                In::Msg(ServerMessage::Pong { id: Some(i) }) if i == id => return Ok(before),
                other => before.push(other),
            }
        }
    }

    /// Reads one context to its end.
    async fn context(&mut self, id: &str) -> Result<Ctx> {
        let mut c = Ctx::default();
        loop {
            match self.recv().await? {
                In::Msg(ServerMessage::ContextStarted {
                    context_id,
                    stream_id,
                    sample_rate,
                    format,
                }) if context_id == id => {
                    c.started = Some((stream_id, sample_rate, format));
                }
                In::Audio(h, s) => {
                    ensure!(
                        Some(h.stream_id) == c.started.map(|s| s.0),
                        "frame of stream {} while reading {id}",
                        h.stream_id
                    );
                    ensure!(
                        h.seq as usize == c.frames.len(),
                        "seq {} after {} frames",
                        h.seq,
                        c.frames.len()
                    );
                    ensure!(
                        !c.frames
                            .last()
                            .is_some_and(|(h, _): &(AudioHeader, Vec<f32>)| h.terminal),
                        "frame after the terminal one"
                    );
                    c.frames.push((h, s));
                }
                In::Msg(
                    m @ (ServerMessage::ContextDone { .. }
                    | ServerMessage::ContextCancelled { .. }
                    | ServerMessage::ContextFailed { .. }),
                ) => {
                    c.end = Some(m);
                    return Ok(c);
                }
                In::Msg(m) => c.others.push(m),
                In::Closed(code) => bail!("closed ({code:?}) while reading context {id}"),
            }
        }
    }
}

#[derive(Default, Debug)]
struct Ctx {
    started: Option<(u32, u32, AudioFormat)>,
    frames: Vec<(AudioHeader, Vec<f32>)>,
    end: Option<ServerMessage>,
    others: Vec<ServerMessage>,
}

impl Ctx {
    fn samples(&self) -> Vec<f32> {
        self.frames
            .iter()
            .flat_map(|f| f.1.iter().copied())
            .collect()
    }

    fn done_metrics(&self) -> Result<protocol::ContextMetrics> {
        match &self.end {
            Some(ServerMessage::ContextDone { metrics, .. }) => Ok(metrics.clone()),
            other => bail!("expected context.done, got {other:?}"),
        }
    }
}

/// The engine's own audio for what the server should have asked it.
async fn engine_audio(
    server: &Server,
    text: &str,
    speaker: &str,
    max_frames: usize,
) -> Result<(Vec<f32>, usize)> {
    engine_audio_mode(server, text, speaker, max_frames, false).await
}

/// [`engine_audio`] with the text fed in the prompt (`false`) or one token
/// per frame (`true`, the `streaming` text mode).
async fn engine_audio_mode(
    server: &Server,
    text: &str,
    speaker: &str,
    max_frames: usize,
    text_streaming: bool,
) -> Result<(Vec<f32>, usize)> {
    let l = server.state().loaded().context("not loaded")?;
    let mut options = l.model.default_options().greedy();
    options.max_frames = max_frames;
    let req = Request {
        text: text.into(),
        speaker: Some(speaker.into()),
        language: "auto".into(),
        instruct: None,
        voice_clone: None,
        text_streaming,
        options,
    };
    let mut s = l.engine.open_session().synthesize(req).await?;
    let mut out = Vec::new();
    loop {
        match s.next().await {
            Some(tts_actors::Event::Audio(c)) => {
                out.extend_from_slice(&c.samples);
                s.ack(c.seq);
            }
            Some(tts_actors::Event::Started { .. }) => {}
            Some(tts_actors::Event::Done { metrics, .. }) => {
                return Ok((out, metrics.frames.unwrap_or(0) as usize))
            }
            other => bail!("engine: {other:?}"),
        }
    }
}

fn loud_tone(ms: usize, rate: u32) -> Vec<f32> {
    (0..ms * rate as usize / 1000)
        .map(|i| 0.3 * (i as f32 * 0.2).sin())
        .collect()
}

fn input_frame(samples: &[f32], rate: u32) -> Vec<u8> {
    protocol::audio_frame(
        &AudioHeader {
            stream_id: 0,
            seq: 0,
            sample_rate: rate,
            format: AudioFormat::Pcm16,
            terminal: false,
        },
        samples,
    )
}

// --------------------------------------------------------------- tests ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_503_until_the_model_loads_and_metrics_count_refusals() -> Result<()> {
    let (gate_tx, gate) = tokio::sync::oneshot::channel();
    let mut cfg = config();
    cfg.load_gate = Some(gate);
    let server = Server::start(cfg).await?;
    let addr = server.local_addr();
    assert_eq!(http(addr, "GET", "/health", &[], None).await?.status, 200);
    let r = http(addr, "GET", "/ready", &[], None).await?;
    assert_eq!(
        (r.status, r.json()["status"].as_str()),
        (503, Some("loading"))
    );
    let refused = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/realtime")).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 503),
        other => panic!("connect before ready: {:?}", other.map(|_| ())),
    }
    let r = http(
        addr,
        "POST",
        "/v1/audio/speech",
        &[],
        Some(&json!({"input": "hi"})),
    )
    .await?;
    assert_eq!(r.status, 503);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/ready"));
    let _ = gate_tx.send(());
    tokio::time::timeout(WAIT, server.ready()).await??;
    let r = http(addr, "GET", "/ready", &[], None).await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["model"], "tiny-a");

    // One context so the histograms have something.
    let (mut c, _) = Client::connect(addr, "").await?;
    c.send(json!({"type": "session.update", "session": {"max_frames": 4, "greedy": true}}))
        .await?;
    c.msg().await?;
    c.send(json!({"type": "context.append", "context_id": "a", "text": "Hi there."}))
        .await?;
    c.send(json!({"type": "context.end", "context_id": "a"}))
        .await?;
    c.context("a").await?.done_metrics()?;
    let m = http(addr, "GET", "/metrics", &[], None).await?;
    assert_eq!(m.status, 200);
    assert!(m.header("content-type").unwrap().starts_with("text/plain"));
    let text = String::from_utf8(m.body)?;
    for needle in [
        "tts_ready 1",
        "tts_refusals_total{reason=\"not_ready\"} 2",
        "tts_contexts_total{outcome=\"done\"} 1",
        "tts_ttfp_seconds_count 1",
        "tts_rtf_bucket{le=\"+Inf\"} 1",
        "tts_underruns_total",
        "tts_sessions_active 1",
        "tts_engine_active_requests",
        "tts_engine_held_states{stage=\"talker\"}",
        "tts_pending_segments 0",
        // The context's prompt prefix (role rows, the speaker's codec
        // prefix) was computed once and kept.
        "tts_prefix_cache_misses_total 1",
        "tts_prefix_cache_entries 1",
        "tts_prefix_cache_hits_total 0",
    ] {
        assert!(text.contains(needle), "{needle} missing from\n{text}");
    }
    server.shutdown();
    tokio::time::timeout(WAIT, server.wait()).await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_type_incremental_text_and_engine_equal_audio() -> Result<()> {
    let server = start(config()).await?;
    let addr = server.local_addr();
    let (mut c, hello) = Client::connect(addr, "").await?;
    let ServerMessage::SessionCreated {
        protocol_version,
        voices,
        openai_voices,
        session,
        ..
    } = hello
    else {
        unreachable!()
    };
    assert_eq!(protocol_version, PROTOCOL_VERSION);
    assert_eq!(voices, ["dylan", "eric", "ryan", "serena"]);
    assert!(openai_voices.contains(&"alloy".to_string()));
    let native = session.native_sample_rate;
    assert_eq!(session.sample_rate, native);

    // session.update: an OpenAI voice resolves to a speaker; f32 at the
    // native rate so the audio can be compared bit for bit.
    c.send(json!({"type": "session.update", "v": 1, "session": {
        "voice": "ash", "format": "f32", "greedy": true, "max_frames": 12,
        "audio_acks": true, "chunking": {"mode": "sentence"}}}))
        .await?;
    let ServerMessage::SessionUpdated { session } = c.msg().await? else {
        bail!("no session.updated")
    };
    assert_eq!(
        (session.voice.as_str(), session.sample_rate, session.format),
        ("ryan", native, AudioFormat::F32)
    );
    assert!(session.audio_acks);

    // ping / pong, input audio (silence: no speech event).
    c.send(json!({"type": "input_audio.append", "audio": protocol::base64_encode(&[0u8; 640]), "sample_rate": 16000})).await?;
    c.send_binary(input_frame(&[0.0; 320], 16000)).await?;
    assert!(c.sync("p1").await?.is_empty());

    // Incremental text, token by token: two sentences → two segments.
    for tok in ["Hel", "lo", " world", ".", " How", " are", " you", "?"] {
        c.send(json!({"type": "context.append", "context_id": "c1", "text": tok}))
            .await?;
    }
    c.send(json!({"type": "context.flush", "context_id": "c1"}))
        .await?;
    c.send(json!({"type": "context.end", "context_id": "c1"}))
        .await?;
    // Acknowledge frames as they come (as a player would).
    let mut ctx = Ctx::default();
    loop {
        match c.recv().await? {
            In::Msg(ServerMessage::ContextStarted {
                stream_id,
                sample_rate,
                format,
                ..
            }) => ctx.started = Some((stream_id, sample_rate, format)),
            In::Audio(h, s) => {
                assert_eq!(h.seq as usize, ctx.frames.len());
                assert_eq!(Some(h.stream_id), ctx.started.map(|s| s.0));
                assert_eq!((h.sample_rate, h.format), (native, AudioFormat::F32));
                c.send(json!({"type": "audio.ack", "context_id": "c1", "seq": h.seq}))
                    .await?;
                ctx.frames.push((h, s));
            }
            In::Msg(m @ ServerMessage::ContextDone { .. }) => {
                ctx.end = Some(m);
                break;
            }
            other => bail!("unexpected {other:?}"),
        }
    }
    let m = ctx.done_metrics()?;
    assert!(
        ctx.frames.last().unwrap().0.terminal,
        "last frame is terminal"
    );
    assert_eq!(m.segments, 2, "{m:?}");
    let audio = ctx.samples();
    assert_eq!(m.output_samples as usize, audio.len());
    assert_eq!(
        m.samples as usize,
        audio.len(),
        "native rate: output = model samples"
    );
    assert_eq!(m.complete, Some(true), "{m:?}");
    assert_eq!(m.samples, m.frames.unwrap() * m.samples_per_frame as u64);
    assert!(
        m.ttfp_ms.is_some()
            && m.rtf.is_some()
            && m.required_prebuffer_ms.is_some()
            && m.underruns.is_some()
    );
    assert!(m.continuity_ok.is_some() && m.text_wait_ms.is_some() && m.talker_ms.is_some());

    // The same audio as the engine gives for the two segments.
    let (a, _) = engine_audio(&server, "Hello world.", "ryan", 12).await?;
    let (b, _) = engine_audio(&server, "How are you?", "ryan", 12).await?;
    assert_eq!(
        audio,
        [a, b].concat(),
        "WebSocket audio differs from the engine's"
    );

    // Late acks of a finished context are fine (a player races the done);
    // appending to it is out of order; cancel of an unknown one is unknown.
    c.send(json!({"type": "audio.ack", "context_id": "c1", "seq": 999}))
        .await?;
    c.send(json!({"type": "context.append", "context_id": "c1", "text": "more"}))
        .await?;
    c.expect_error(ErrorCode::OutOfOrder).await?;
    c.send(json!({"type": "context.cancel", "context_id": "nope"}))
        .await?;
    c.expect_error(ErrorCode::UnknownContext).await?;

    // Resampled, base64 transport, pcm16: 8 kHz out.
    c.send(json!({"type": "session.update", "session": {"sample_rate": 8000, "format": "pcm16", "audio_transport": "base64", "audio_acks": false}})).await?;
    let ServerMessage::SessionUpdated { session } = c.msg().await? else {
        bail!("no session.updated")
    };
    assert_eq!(session.sample_rate, 8000);
    c.send(json!({"type": "context.append", "context_id": "c2", "text": "Hello world."}))
        .await?;
    // An ack for a frame that was never sent is out of order.
    c.send(json!({"type": "audio.ack", "context_id": "c2", "seq": 999}))
        .await?;
    c.send(json!({"type": "context.end", "context_id": "c2"}))
        .await?;
    let ctx = c.context("c2").await?;
    assert!(
        matches!(
            &ctx.others[..],
            [ServerMessage::Error {
                code: ErrorCode::OutOfOrder,
                ..
            }]
        ),
        "{:?}",
        ctx.others
    );
    let m = ctx.done_metrics()?;
    assert_eq!(ctx.started.unwrap().1, 8000);
    assert_eq!(ctx.samples().len() as u64, m.output_samples);
    assert_eq!(
        m.output_samples,
        (m.samples * 8000).div_ceil(native as u64),
        "resampled length"
    );
    let (a, _) = engine_audio(&server, "Hello world.", "ryan", 12).await?;
    let want = tts_audio::StreamResampler::new(native, 8000)?.process_all(&a);
    let err = ctx
        .samples()
        .iter()
        .zip(&want)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(
        err <= 2.0 / 32768.0 + 1e-6,
        "chunked resampling differs from one-shot by {err}"
    );
    Ok(())
}

/// A client declares the prebuffer its player holds: the session echoes
/// it, each context opened after counts its continuity at it (the server's
/// `--prebuffer-ms` before), and a value out of range is refused by name,
/// changing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_prebuffer_is_what_each_context_is_measured_at() -> Result<()> {
    let server = start(config()).await?;
    let (mut c, hello) = Client::connect(server.local_addr(), "").await?;
    let ServerMessage::SessionCreated { session, .. } = hello else {
        unreachable!()
    };
    assert_eq!(session.prebuffer_ms, 200.0, "the server's");
    for bad in [json!(-5), json!(60_000)] {
        c.send(json!({"type": "session.update", "session": {"prebuffer_ms": bad}}))
            .await?;
        let e = c.recv().await?;
        assert!(format!("{e:?}").contains("prebuffer_ms"), "{e:?}");
    }
    let mut done = Vec::new();
    for (id, ms) in [("p1", 1500.0), ("p2", 0.0)] {
        c.send(json!({"type": "session.update", "session": {
            "prebuffer_ms": ms, "greedy": true, "max_frames": 6}}))
            .await?;
        let ServerMessage::SessionUpdated { session } = c.msg().await? else {
            bail!("no session.updated")
        };
        assert_eq!(session.prebuffer_ms, ms);
        c.send(json!({"type": "context.append", "context_id": id, "text": "Hello there."}))
            .await?;
        c.send(json!({"type": "context.end", "context_id": id}))
            .await?;
        let ctx = c.context(id).await?;
        let m = ctx.done_metrics()?;
        assert_eq!(m.prebuffer_ms, ms, "{m:?}");
        assert!(m.continuity_ok_at_prebuffer.is_some(), "{m:?}");
        done.push(ctx.samples());
    }
    assert_eq!(done[0], done[1], "the prebuffer never changes the audio");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_text_mode_feeds_the_text_per_frame() -> Result<()> {
    let server = start(config()).await?;
    let (mut c, hello) = Client::connect(server.local_addr(), "").await?;
    let ServerMessage::SessionCreated { session, .. } = hello else {
        unreachable!()
    };
    assert_eq!(session.text_mode, TextMode::Prefill, "default");
    // A bad value is refused by name and changes nothing.
    c.send(json!({"type": "session.update", "session": {"text_mode": "fast"}}))
        .await?;
    let e = c.expect_error(ErrorCode::InvalidMessage).await?;
    assert!(format!("{e:?}").contains("fast"), "{e:?}");
    c.send(json!({"type": "session.update", "session": {
        "text_mode": "streaming", "format": "f32", "greedy": true, "max_frames": 12,
        "voice": "ryan"}}))
        .await?;
    let ServerMessage::SessionUpdated { session } = c.msg().await? else {
        bail!("no session.updated")
    };
    assert_eq!(session.text_mode, TextMode::Streaming);
    let text = "Hello world, how are you today?";
    c.send(json!({"type": "context.append", "context_id": "s1", "text": text}))
        .await?;
    c.send(json!({"type": "context.end", "context_id": "s1"}))
        .await?;
    let ctx = c.context("s1").await?;
    let m = ctx.done_metrics()?;
    assert_eq!(m.complete, Some(true), "{m:?}");
    let audio = ctx.samples();
    assert!(!audio.is_empty());
    // The engine's audio for the same request in streaming text mode, and
    // not the prefill mode's (the mode reached the model).
    let (streamed, _) = engine_audio_mode(&server, text, "ryan", 12, true).await?;
    let (prefilled, _) = engine_audio_mode(&server, text, "ryan", 12, false).await?;
    assert_eq!(audio, streamed, "WebSocket audio differs from the engine's");
    assert_ne!(streamed, prefilled, "the text mode made no difference");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_oversized_and_out_of_order_messages_leave_everything_running() -> Result<()> {
    let server = start(config()).await?;
    let addr = server.local_addr();
    let (mut bad, _) = Client::connect(addr, "").await?;
    let (mut good, _) = Client::connect(addr, "").await?;
    good.send(json!({"type": "session.update", "session": {"max_frames": 30}}))
        .await?;
    good.msg().await?;
    good.send(json!({"type": "context.append", "context_id": "g", "text": "A calm sentence that keeps going."})).await?;
    good.send(json!({"type": "context.end", "context_id": "g"}))
        .await?;

    bad.send_text("{nope".into()).await?;
    bad.expect_error(ErrorCode::MalformedJson).await?;
    bad.send(json!({"type": "context.apend", "context_id": "x", "text": "y"}))
        .await?;
    let ServerMessage::Error { valid, message, .. } =
        bad.expect_error(ErrorCode::UnknownType).await?
    else {
        unreachable!()
    };
    assert!(message.contains("context.apend") && valid.unwrap().contains(&"context.append".into()));
    bad.send(json!({"type": "context.append", "context_id": "x"}))
        .await?;
    let ServerMessage::Error { message, .. } = bad.expect_error(ErrorCode::InvalidMessage).await?
    else {
        unreachable!()
    };
    assert!(message.contains("text"), "{message}");
    bad.send_text(format!(
        r#"{{"type":"context.append","context_id":"x","text":"{}"}}"#,
        "a".repeat(300 * 1024)
    ))
    .await?;
    bad.expect_error(ErrorCode::MessageTooLarge).await?;
    bad.send_binary(vec![0u8; 2 << 20]).await?;
    bad.expect_error(ErrorCode::MessageTooLarge).await?;
    bad.send_binary(vec![9, 9, 9]).await?;
    bad.expect_error(ErrorCode::InvalidAudio).await?;
    bad.send(json!({"type": "ping", "v": 7})).await?;
    bad.expect_error(ErrorCode::UnsupportedVersion).await?;
    bad.send(json!({"type": "session.update", "session": {"voice": "bob"}}))
        .await?;
    let ServerMessage::Error { valid, .. } = bad.expect_error(ErrorCode::InvalidVoice).await?
    else {
        unreachable!()
    };
    let valid = valid.unwrap();
    assert!(valid.contains(&"ryan".into()) && valid.contains(&"alloy".into()));
    bad.send(json!({"type": "session.update", "session": {"language": "klingon"}}))
        .await?;
    bad.expect_error(ErrorCode::InvalidLanguage).await?;
    bad.send(json!({"type": "session.update", "session": {"sample_rate": 96000}}))
        .await?;
    let ServerMessage::Error { message, .. } = bad.expect_error(ErrorCode::InvalidSetting).await?
    else {
        unreachable!()
    };
    assert!(message.contains("8000..=48000"), "{message}");
    bad.send(json!({"type": "context.flush", "context_id": "ghost"}))
        .await?;
    bad.expect_error(ErrorCode::UnknownContext).await?;
    bad.send(json!({"type": "context.append", "context_id": "", "text": "x"}))
        .await?;
    bad.expect_error(ErrorCode::InvalidMessage).await?;
    // End twice; append after end.
    bad.send(json!({"type": "session.update", "session": {"max_frames": 3}}))
        .await?;
    bad.msg().await?;
    bad.send(json!({"type": "context.append", "context_id": "e", "text": "Hi."}))
        .await?;
    bad.send(json!({"type": "context.end", "context_id": "e"}))
        .await?;
    bad.send(json!({"type": "context.end", "context_id": "e"}))
        .await?;
    bad.send(json!({"type": "context.append", "context_id": "e", "text": "late"}))
        .await?;
    let mut codes = Vec::new();
    let ctx = loop {
        match bad.recv().await? {
            In::Msg(ServerMessage::Error { code, .. }) => codes.push(code),
            In::Msg(ServerMessage::ContextStarted { .. }) | In::Audio(..) => {}
            In::Msg(m @ ServerMessage::ContextDone { .. }) => break m,
            other => bail!("{other:?}"),
        }
    };
    assert!(matches!(ctx, ServerMessage::ContextDone { .. }));
    // Both refusals arrive (before or after the done, depending on timing).
    codes.extend(bad.sync("s").await?.into_iter().filter_map(|m| match m {
        In::Msg(ServerMessage::Error { code, .. }) => Some(code),
        _ => None,
    }));
    assert_eq!(codes, [ErrorCode::OutOfOrder, ErrorCode::OutOfOrder]);
    // Too many contexts.
    for i in 0..8 {
        bad.send(
            json!({"type": "context.append", "context_id": format!("m{i}"), "text": "waiting"}),
        )
        .await?;
    }
    bad.send(json!({"type": "context.append", "context_id": "m8", "text": "one too many"}))
        .await?;
    bad.expect_error(ErrorCode::TooManyContexts).await?;

    // The other session was never disturbed.
    let g = good.context("g").await?;
    assert!(g.done_metrics()?.samples > 0);
    assert!(bad.sync("alive").await?.is_empty());
    let m = String::from_utf8(http(addr, "GET", "/metrics", &[], None).await?.body)?;
    assert!(
        m.lines().any(|l| l == "tts_protocol_errors_total 15"),
        "{m}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_audio_and_the_next_context_runs() -> Result<()> {
    let server = start(config()).await?;
    let (mut c, _) = Client::connect(server.local_addr(), "").await?;
    c.send(json!({"type": "session.update", "session": {"max_frames": 400, "seed": 3, "audio_acks": true}})).await?;
    c.msg().await?;
    c.send(json!({"type": "context.append", "context_id": "long", "text": "This one will be cut short."})).await?;
    c.send(json!({"type": "context.end", "context_id": "long"}))
        .await?;
    // Queued behind it: cancelled before it ever starts.
    c.send(json!({"type": "context.append", "context_id": "queued", "text": "Never spoken."}))
        .await?;
    let stream_id = loop {
        match c.recv().await? {
            In::Msg(ServerMessage::ContextStarted { .. }) => {}
            In::Audio(h, _) => break h.stream_id,
            other => bail!("{other:?}"),
        }
    };
    c.send(json!({"type": "context.cancel", "context_id": "long"}))
        .await?;
    c.send(json!({"type": "context.cancel", "context_id": "queued"}))
        .await?;
    let mut cancelled = Vec::new();
    while cancelled.len() < 2 {
        match c.recv().await? {
            In::Audio(h, _) => {
                assert!(cancelled.is_empty(), "audio after context.cancelled");
                assert_eq!(h.stream_id, stream_id);
            }
            In::Msg(ServerMessage::ContextCancelled {
                context_id,
                stream_id,
                reason,
                late_audio_samples,
                cancel_ack_ms,
                interruption_ms,
                metrics,
                ..
            }) => {
                assert_eq!(reason, CancelReason::Client);
                assert_eq!(late_audio_samples, 0);
                assert!(cancel_ack_ms >= 0.0 && interruption_ms.is_none());
                if context_id == "long" {
                    assert!(
                        stream_id.is_some() && metrics.chunks > 0 && metrics.complete.is_none()
                    );
                } else {
                    assert_eq!(context_id, "queued");
                    assert!(stream_id.is_none() && metrics.ttfp_ms.is_none());
                }
                cancelled.push(context_id);
            }
            other => bail!("{other:?}"),
        }
    }
    assert!(
        c.sync("after").await?.is_empty(),
        "nothing after the cancel acks"
    );
    c.send(json!({"type": "context.cancel", "context_id": "long"}))
        .await?;
    c.expect_error(ErrorCode::OutOfOrder).await?;
    c.send(json!({"type": "session.update", "session": {"max_frames": 5}}))
        .await?;
    c.msg().await?;
    c.send(json!({"type": "context.append", "context_id": "next", "text": "Next."}))
        .await?;
    c.send(json!({"type": "context.end", "context_id": "next"}))
        .await?;
    let n = c.context("next").await?;
    assert_ne!(n.started.unwrap().0, stream_id);
    assert!(n.done_metrics()?.samples > 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn barge_in_cancels_the_speaking_context_with_no_late_audio() -> Result<()> {
    let server = start(config()).await?;
    let (mut c, _) = Client::connect(server.local_addr(), "").await?;
    c.send(json!({"type": "session.update", "session": {"max_frames": 400, "seed": 5, "audio_acks": true, "vad": {"min_speech_ms": 60}}})).await?;
    c.msg().await?;
    c.send(json!({"type": "context.append", "context_id": "agent", "text": "Let me tell you a long story about nothing."})).await?;
    c.send(json!({"type": "context.end", "context_id": "agent"}))
        .await?;
    loop {
        if let In::Audio(..) = c.recv().await? {
            break;
        }
    }
    // The user talks: 100 ms of room noise, then speech, in 20 ms pieces.
    let rate = 16000;
    let mut pieces: Vec<Vec<f32>> = vec![vec![0.0005; 320]; 5];
    pieces.extend(loud_tone(200, rate).chunks(320).map(|p| p.to_vec()));
    for p in &pieces {
        c.send_binary(input_frame(p, rate)).await?;
    }
    let mut started = None;
    let mut after_cancel = 0;
    let mut cancel = None;
    let got = c.sync("end").await?;
    for m in got {
        match m {
            In::Msg(ServerMessage::SpeechStarted {
                audio_start_ms,
                detection_ms,
            }) => {
                assert!(cancel.is_none(), "speech.started comes first");
                started = Some((audio_start_ms, detection_ms));
            }
            In::Msg(ServerMessage::ContextCancelled {
                context_id,
                reason,
                late_audio_samples,
                interruption_ms,
                ..
            }) => {
                assert_eq!(
                    (context_id.as_str(), reason),
                    ("agent", CancelReason::BargeIn)
                );
                assert_eq!(late_audio_samples, 0);
                cancel = Some(interruption_ms.expect("interruption_ms for the speaking context"));
            }
            In::Audio(..) if cancel.is_some() => after_cancel += 1,
            In::Audio(..) | In::Msg(ServerMessage::ContextDone { .. }) if started.is_none() => {}
            other => bail!("unexpected {other:?}"),
        }
    }
    let (onset, detection) = started.context("no speech.started")?;
    assert_eq!(
        (onset, detection),
        (100.0, 60.0),
        "onset at 100 ms of input, confirmed 60 ms later"
    );
    let interruption = cancel.context("no context.cancelled")?;
    assert!((0.0..60_000.0).contains(&interruption));
    assert_eq!(after_cancel, 0, "audio after context.cancelled");
    let m = String::from_utf8(
        http(server.local_addr(), "GET", "/metrics", &[], None)
            .await?
            .body,
    )?;
    assert!(m.contains("tts_barge_ins_total 1"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_speech_returns_the_engines_audio() -> Result<()> {
    let server = start(config()).await?;
    let addr = server.local_addr();
    let native = server.state().loaded().unwrap().native_rate;
    let (want, frames) = engine_audio(&server, "Hello from the HTTP API.", "ryan", 10).await?;
    assert!(frames > 0);
    let want16: Vec<i16> = want.iter().map(|&s| tts_audio::f32_to_i16(s)).collect();
    // "ash" is a male OpenAI voice → ryan (never a dialect speaker).
    let body = json!({"model": "tts-1", "input": "Hello from the HTTP API.", "voice": "ash",
        "response_format": "pcm", "greedy": true, "max_frames": 10});
    let r = http(addr, "POST", "/v1/audio/speech", &[], Some(&body)).await?;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("x-sample-rate"), Some(native.to_string().as_str()));
    assert_eq!(r.header("content-type"), Some("audio/pcm"));
    let got: Vec<i16> = r
        .body
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert_eq!(got, want16, "HTTP pcm differs from the engine's audio");

    // WAV: header with the rate, same samples after it.
    let mut wav = body.clone();
    wav["response_format"] = "wav".into();
    let r = http(addr, "POST", "/v1/audio/speech", &[], Some(&wav)).await?;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..4], b"RIFF");
    assert_eq!(u32::from_le_bytes(r.body[24..28].try_into()?), native);
    // Complete by default: exact sizes, so a saved file reports its length.
    assert_eq!(
        u32::from_le_bytes(r.body[40..44].try_into()?) as usize,
        r.body.len() - 44
    );
    let len = r.body.len().to_string();
    assert_eq!(r.header("content-length"), Some(len.as_str()));
    let got: Vec<i16> = r.body[44..]
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert_eq!(got, want16);

    // SSE: base64 pcm deltas, then done with usage; `wav` there is the
    // same headerless PCM (no RIFF header to click in a PCM player).
    for format in ["pcm", "wav"] {
        let mut sse = body.clone();
        sse["stream_format"] = "sse".into();
        sse["response_format"] = format.into();
        let r = http(addr, "POST", "/v1/audio/speech", &[], Some(&sse)).await?;
        assert_eq!(r.header("content-type"), Some("text/event-stream"));
        let text = String::from_utf8(r.body)?;
        let events: Vec<Value> = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?;
        let mut bytes = Vec::new();
        for e in &events[..events.len() - 1] {
            assert_eq!(e["type"], "speech.audio.delta");
            bytes.extend(protocol::base64_decode(e["audio"].as_str().unwrap()).unwrap());
        }
        let done = events.last().unwrap();
        assert_eq!(done["type"], "speech.audio.done");
        assert_eq!(done["usage"]["output_tokens"], frames);
        let got: Vec<i16> = bytes
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(got, want16, "{format}");
    }

    // Refusals in OpenAI's error shape, naming what is supported.
    for (patch, param, needle) in [
        (
            json!({"response_format": "ogg"}),
            "response_format",
            "\"mp3\", \"opus\"",
        ),
        (json!({"speed": 4.5}), "speed", "0.25 to 4.0"),
        (json!({"voice": "bob"}), "voice", "alloy"),
        (json!({"input": ""}), "input", "empty"),
        (json!({"stream_format": "ws"}), "stream_format", "sse"),
    ] {
        let mut b = body.clone();
        for (k, v) in patch.as_object().unwrap() {
            b[k] = v.clone();
        }
        let r = http(addr, "POST", "/v1/audio/speech", &[], Some(&b)).await?;
        assert_eq!(r.status, 400);
        let e = &r.json()["error"];
        assert_eq!(e["type"], "invalid_request_error");
        assert_eq!(e["param"], param);
        assert!(e["message"].as_str().unwrap().contains(needle), "{e}");
    }
    let mut one = body.clone();
    one["speed"] = 1.0.into();
    one["max_frames"] = 2.into();
    assert_eq!(
        http(addr, "POST", "/v1/audio/speech", &[], Some(&one))
            .await?
            .status,
        200
    );

    let models = http(addr, "GET", "/v1/models", &[], None).await?.json();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "tiny-a");
    let voices = http(addr, "GET", "/v1/audio/voices", &[], None)
        .await?
        .json();
    let ids: BTreeSet<&str> = voices["voices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    for v in ["ryan", "alloy", "shimmer", "verse"] {
        assert!(ids.contains(v), "{v}");
    }
    // No OpenAI voice speaks through a dialect speaker.
    for v in voices["voices"].as_array().unwrap() {
        if v["kind"] == "openai" {
            assert!(
                !["eric", "dylan"].contains(&v["speaker"].as_str().unwrap()),
                "{v}"
            );
        }
    }

    // ISO 639-1 codes and locale tags name the checkpoint's languages.
    for code in ["en", "en-US", "zh-CN"] {
        let mut b = one.clone();
        b["language"] = code.into();
        let r = http(addr, "POST", "/v1/audio/speech", &[], Some(&b)).await?;
        assert_eq!(
            r.status,
            200,
            "{code}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_guards_everything_but_health_and_ready() -> Result<()> {
    let mut cfg = config();
    cfg.token = Some("s3cret".into());
    let server = start(cfg).await?;
    let addr = server.local_addr();
    assert_eq!(http(addr, "GET", "/health", &[], None).await?.status, 200);
    assert_eq!(http(addr, "GET", "/ready", &[], None).await?.status, 200);
    let r = http(addr, "GET", "/v1/models", &[], None).await?;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    assert_eq!(
        http(
            addr,
            "GET",
            "/v1/models",
            &[("Authorization", "Bearer wrong")],
            None
        )
        .await?
        .status,
        401
    );
    assert_eq!(
        http(
            addr,
            "GET",
            "/v1/models",
            &[("Authorization", "Bearer s3cret")],
            None
        )
        .await?
        .status,
        200
    );
    assert_eq!(
        http(
            addr,
            "GET",
            "/metrics",
            &[("Authorization", "Bearer s3cret")],
            None
        )
        .await?
        .status,
        200
    );
    // `?token=` opens the WebSocket only.
    assert_eq!(
        http(addr, "GET", "/metrics?token=s3cret", &[], None)
            .await?
            .status,
        401
    );
    assert!(Client::connect(addr, "").await.is_err());
    let (mut c, _) = Client::connect(addr, "?token=s3cret").await?;
    assert!(c.sync("ok").await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_streams_then_closes() -> Result<()> {
    let server = start(config()).await?;
    let addr = server.local_addr();
    let (mut c, _) = Client::connect(addr, "").await?;
    c.send(json!({"type": "session.update", "session": {"max_frames": 30}}))
        .await?;
    c.msg().await?;
    c.send(json!({"type": "context.append", "context_id": "last", "text": "Finishing before shutdown."})).await?;
    loop {
        if let In::Msg(ServerMessage::ContextStarted { .. }) = c.recv().await? {
            break;
        }
    }
    server.shutdown();
    // Draining: no new contexts, no new connections; the open one finishes.
    c.send(json!({"type": "context.append", "context_id": "new", "text": "x"}))
        .await?;
    c.send(json!({"type": "context.end", "context_id": "last"}))
        .await?;
    let mut saw_refusal = false;
    let mut done = false;
    let close = loop {
        match c.recv().await? {
            In::Msg(ServerMessage::Error {
                code: ErrorCode::ShuttingDown,
                ..
            }) => saw_refusal = true,
            In::Msg(ServerMessage::ContextDone { .. }) => done = true,
            In::Closed(code) => break code,
            _ => {}
        }
    };
    assert!(saw_refusal && done);
    assert_eq!(close, Some(1001));
    tokio::time::timeout(WAIT, server.wait()).await??;
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_past_the_deadline_cancels_what_is_left() -> Result<()> {
    let mut cfg = config();
    cfg.drain_timeout = Duration::from_millis(100);
    let server = start(cfg).await?;
    let (mut c, _) = Client::connect(server.local_addr(), "").await?;
    // Never ended: it would wait for text forever.
    c.send(json!({"type": "context.append", "context_id": "open", "text": "Waiting for more"}))
        .await?;
    assert!(c.sync("x").await?.is_empty());
    server.shutdown();
    let mut reason = None;
    let close = loop {
        match c.recv().await? {
            In::Msg(ServerMessage::ContextCancelled { reason: r, .. }) => reason = Some(r),
            In::Closed(code) => break code,
            _ => {}
        }
    };
    assert_eq!(reason, Some(CancelReason::Shutdown));
    assert_eq!(close, Some(1001));
    tokio::time::timeout(WAIT, server.wait()).await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_session_keeps_flat_state() -> Result<()> {
    let server = start(config()).await?;
    let addr = server.local_addr();
    let (mut c, _) = Client::connect(addr, "").await?;
    c.send(json!({"type": "session.update", "session": {"max_frames": 2, "greedy": true}}))
        .await?;
    c.msg().await?;
    let retained = |text: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix("tts_session_retained_items "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(-1.0) as i64
    };
    let mut samples = Vec::new();
    for turn in 0..90 {
        let id = format!("t{turn}");
        c.send(json!({"type": "context.append", "context_id": id, "text": "Okay."}))
            .await?;
        c.send(json!({"type": "input_audio.append", "audio": protocol::base64_encode(&[0u8; 640]), "sample_rate": 16000})).await?;
        c.send(json!({"type": "context.end", "context_id": id}))
            .await?;
        c.context(&id).await?.done_metrics()?;
        if turn == 69 || turn == 89 {
            c.sync(&id).await?;
            samples.push(retained(&String::from_utf8(
                http(addr, "GET", "/metrics", &[], None).await?.body,
            )?));
        }
    }
    assert_eq!(
        samples[0], samples[1],
        "session state grew between turn 70 and turn 90"
    );
    assert!(samples[1] <= 64 + 16, "{samples:?}");
    Ok(())
}
