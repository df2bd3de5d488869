//! Live text over the realtime socket (`chunking.mode: "live"`), end to end
//! on loopback with the tiny-a fixture: text sent a token at a time with
//! random gaps (some far longer than the audio already made) is one
//! utterance whose audio equals the streaming text mode's for the whole
//! text, greedy and sampled; the pauses are reported; a long context is cut
//! into several utterances; cancel works as for segmented contexts; the
//! option is refused where it cannot work. Timeouts only turn a hang into a
//! failure.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tts_actors::Request;
use tts_transport::protocol::{
    self, AudioHeader, ContextMetrics, ErrorCode, ServerMessage, TextPause,
};
use tts_transport::Server;

use crate::common;

use common::{start, WAIT};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Frames per request: enough for the whole test text, as the fixture's
/// random weights rarely end an utterance themselves.
const MAX_FRAMES: usize = 120;

/// What one context sent back.
#[derive(Debug, Default)]
struct Heard {
    samples: Vec<f32>,
    end: Option<ServerMessage>,
}

impl Heard {
    fn metrics(&self) -> Result<ContextMetrics> {
        match &self.end {
            Some(ServerMessage::ContextDone { metrics, .. }) => Ok(metrics.clone()),
            other => bail!("expected context.done, got {other:?}"),
        }
    }
}

async fn connect(server: &Server) -> Result<(SplitSink<Ws, Message>, SplitStream<Ws>)> {
    let url = format!("ws://{}/v1/realtime", server.local_addr());
    let (ws, _) = tokio_tungstenite::connect_async(url).await?;
    let (tx, mut rx) = ws.split();
    match next_json(&mut rx).await? {
        ServerMessage::SessionCreated { .. } => Ok((tx, rx)),
        m => bail!("first message: {m:?}"),
    }
}

async fn send(tx: &mut SplitSink<Ws, Message>, v: Value) -> Result<()> {
    tx.send(Message::text(v.to_string())).await?;
    Ok(())
}

/// The next message: JSON, or a binary audio frame (`None`).
async fn next(rx: &mut SplitStream<Ws>) -> Result<Option<ServerMessage>> {
    loop {
        let m = tokio::time::timeout(WAIT, rx.next())
            .await
            .context("timed out waiting for the server")?
            .context("closed")??;
        return match m {
            Message::Text(t) => Ok(Some(
                protocol::parse_server_text(t.as_str())
                    .map_err(|e| anyhow::anyhow!("unparsable {t}: {e:?}"))?,
            )),
            Message::Binary(_) => Ok(None),
            _ => continue,
        };
    }
}

async fn next_json(rx: &mut SplitStream<Ws>) -> Result<ServerMessage> {
    loop {
        if let Some(m) = next(rx).await? {
            return Ok(m);
        }
    }
}

/// Reads context `id` to its end (binary f32 frames).
async fn context(rx: &mut SplitStream<Ws>, id: &str) -> Result<Heard> {
    let mut h = Heard::default();
    loop {
        let m = tokio::time::timeout(WAIT, rx.next())
            .await
            .context("timed out waiting for the server")?
            .context("closed")??;
        match m {
            Message::Binary(b) => {
                let (hd, payload) = AudioHeader::parse(&b).map_err(|e| anyhow::anyhow!("{e:?}"))?;
                h.samples
                    .extend(protocol::decode_samples(payload, hd.format));
            }
            Message::Text(t) => {
                let m = protocol::parse_server_text(t.as_str())
                    .map_err(|e| anyhow::anyhow!("unparsable {t}: {e:?}"))?;
                match m {
                    ServerMessage::ContextDone { ref context_id, .. }
                    | ServerMessage::ContextCancelled { ref context_id, .. }
                    | ServerMessage::ContextFailed { ref context_id, .. }
                        if context_id == id =>
                    {
                        h.end = Some(m);
                        return Ok(h);
                    }
                    ServerMessage::Error { .. } => bail!("error while reading {id}: {m:?}"),
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

/// Live mode with the streaming text mode, f32 frames at the model's rate.
async fn live_session(
    tx: &mut SplitSink<Ws, Message>,
    rx: &mut SplitStream<Ws>,
    greedy: bool,
    seed: u64,
    extra: Value,
) -> Result<()> {
    let mut chunking = json!({"mode": "live"});
    if let (Some(c), Some(e)) = (chunking.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    send(
        tx,
        json!({"type": "session.update", "session": {
            "chunking": chunking, "text_mode": "streaming", "format": "f32",
            "greedy": greedy, "seed": seed, "max_frames": MAX_FRAMES, "voice": "ryan"}}),
    )
    .await?;
    match next_json(rx).await? {
        ServerMessage::SessionUpdated { .. } => Ok(()),
        m => bail!("expected session.updated, got {m:?}"),
    }
}

/// The engine's audio for `text` whole, in the streaming text mode.
async fn streaming_audio(server: &Server, text: &str, greedy: bool, seed: u64) -> Result<Vec<f32>> {
    let l = server.state().loaded().context("not loaded")?;
    let mut options = l.model.default_options();
    if greedy {
        options = options.greedy();
    }
    options.seed = seed;
    options.max_frames = MAX_FRAMES;
    let req = Request {
        text: text.into(),
        speaker: Some("ryan".into()),
        language: "auto".into(),
        instruct: None,
        voice_clone: None,
        text_streaming: true,
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
            Some(tts_actors::Event::Done { .. }) => return Ok(out),
            other => bail!("engine: {other:?}"),
        }
    }
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// LLM-like tokens: words with their leading space, now and then split.
fn tokens(text: &str, rng: &mut Rng) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, w) in text.split(' ').enumerate() {
        let w = if i == 0 {
            w.to_string()
        } else {
            format!(" {w}")
        };
        if w.len() > 4 && rng.below(3) == 0 {
            let cut = w.char_indices().nth(w.chars().count() / 2).unwrap().0;
            out.push(w[..cut].to_string());
            out.push(w[cut..].to_string());
        } else {
            out.push(w);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_text_token_by_token_equals_the_streaming_text_mode_output() -> Result<()> {
    let server = start(common::config(Duration::from_secs(20))).await?;
    let text = "Hello there, this reply arrives one token at a time.";
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (greedy, seed) in [(true, 0), (false, 7)] {
        let want = streaming_audio(&server, text, greedy, seed).await?;
        // Gaps of a few ms, and gaps far longer than the audio buffered
        // (the tiny model outruns real time: a 400 ms gap empties it).
        for delays in [vec![0u64, 2, 5], vec![0, 400, 10, 650]] {
            let (mut tx, mut rx) = connect(&server).await?;
            live_session(&mut tx, &mut rx, greedy, seed, json!({})).await?;
            let parts = tokens(text, &mut rng);
            let gaps = delays.clone();
            let sender = tokio::spawn(async move {
                for (i, p) in parts.iter().enumerate() {
                    tokio::time::sleep(Duration::from_millis(gaps[i % gaps.len()])).await;
                    send(
                        &mut tx,
                        json!({"type": "context.append", "context_id": "c", "text": p}),
                    )
                    .await?;
                }
                send(&mut tx, json!({"type": "context.end", "context_id": "c"})).await?;
                anyhow::Ok(tx)
            });
            let heard = context(&mut rx, "c").await?;
            let _tx = sender.await??;
            let m = heard.metrics()?;
            assert_eq!(m.complete, Some(true), "{m:?}");
            assert_eq!(m.utterances, Some(1), "one utterance: {m:?}");
            assert_eq!(
                heard.samples, want,
                "greedy={greedy} delays {delays:?}: live audio differs from the whole text's"
            );
            let pauses: Vec<TextPause> = m.pauses.clone().context("live pauses reported")?;
            let ttfp = m.ttfp_from_text_ms.context("ttfp from the first text")?;
            assert!(ttfp >= m.ttfp_ms.unwrap_or(0.0), "{m:?}");
            if delays.contains(&650) {
                assert!(
                    pauses.iter().any(|p| p.ms > 100.0),
                    "a long gap shows as a pause: {pauses:?}"
                );
            }
        }
    }
    // The pauses reach /metrics.
    let body = http_get(&server, "/metrics").await?;
    assert!(body.contains("tts_live_text_pauses_total"), "{body}");
    assert!(
        body.contains("tts_live_ttfp_from_text_seconds_count"),
        "{body}"
    );
    common::stop(server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_live_context_is_cut_into_utterances_at_sentence_ends() -> Result<()> {
    let server = start(common::config(Duration::from_secs(20))).await?;
    let (mut tx, mut rx) = connect(&server).await?;
    live_session(&mut tx, &mut rx, true, 0, json!({"live_max_tokens": 3})).await?;
    let text = "One two three four. Five six seven eight. Nine ten.";
    for t in tokens(text, &mut Rng(5)) {
        send(
            &mut tx,
            json!({"type": "context.append", "context_id": "long", "text": t}),
        )
        .await?;
    }
    send(
        &mut tx,
        json!({"type": "context.end", "context_id": "long"}),
    )
    .await?;
    let heard = context(&mut rx, "long").await?;
    let m = heard.metrics()?;
    assert_eq!(m.utterances, Some(3), "cut at each sentence end: {m:?}");
    assert_eq!(m.segments, 3, "{m:?}");
    // Each utterance is the streaming text mode's output for its sentence.
    let mut want = Vec::new();
    for s in ["One two three four.", "Five six seven eight.", "Nine ten."] {
        want.extend(streaming_audio(&server, s, true, 0).await?);
    }
    assert_eq!(heard.samples, want, "the cut lost, moved or repeated text");
    let body = http_get(&server, "/metrics").await?;
    assert!(body.contains("tts_live_text_cuts_total 2"), "{body}");
    common::stop(server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_contexts_cancel_like_segmented_ones_and_are_refused_with_prefill() -> Result<()> {
    let server = start(common::config(Duration::from_secs(20))).await?;
    let (mut tx, mut rx) = connect(&server).await?;
    // Refused with the prefill text mode, naming why; nothing changes.
    send(
        &mut tx,
        json!({"type": "session.update", "session": {"chunking": {"mode": "live"}, "text_mode": "prefill"}}),
    )
    .await?;
    match next_json(&mut rx).await? {
        ServerMessage::Error { code, message, .. } => {
            assert_eq!(code, ErrorCode::InvalidSetting);
            assert!(message.contains("text_mode streaming"), "{message}");
        }
        m => bail!("expected an error, got {m:?}"),
    }
    live_session(&mut tx, &mut rx, true, 0, json!({})).await?;
    // A context held open (no end) is cancelled mid-utterance.
    send(
        &mut tx,
        json!({"type": "context.append", "context_id": "a", "text": "Speak for a while and "}),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    send(
        &mut tx,
        json!({"type": "context.cancel", "context_id": "a"}),
    )
    .await?;
    let heard = context(&mut rx, "a").await?;
    match &heard.end {
        Some(ServerMessage::ContextCancelled { metrics, .. }) => {
            assert!(metrics.pauses.is_some(), "{metrics:?}")
        }
        other => bail!("expected context.cancelled, got {other:?}"),
    }
    // The next context runs whole.
    send(
        &mut tx,
        json!({"type": "context.append", "context_id": "b", "text": "Next one."}),
    )
    .await?;
    send(&mut tx, json!({"type": "context.end", "context_id": "b"})).await?;
    let b = context(&mut rx, "b").await?;
    assert_eq!(
        b.samples,
        streaming_audio(&server, "Next one.", true, 0).await?
    );
    common::stop(server).await
}

async fn http_get(server: &Server, path: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = TcpStream::connect(server.local_addr()).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut out)).await??;
    Ok(String::from_utf8_lossy(&out).into_owned())
}
