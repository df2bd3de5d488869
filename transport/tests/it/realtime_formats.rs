//! Encoded formats on the realtime socket over loopback (127.0.0.1:0, the
//! tiny-a fixture): each format's concatenated frames decode, with decoders
//! that share no code with the server's encoders (symphonia for MP3, FLAC
//! and ADTS AAC; libopus's decoder over Ogg pages or raw packets; the G.711
//! tables), to the length and waveform of the pcm16 context of the same
//! greedy request; the binary header and `context.started` name the
//! format; a bad format is refused naming the valid ones; a cancel leaves
//! no late frames.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use tts_transport::protocol::{
    self, AudioFormat, AudioHeader, CancelReason, ErrorCode, ServerMessage,
};

use crate::common;

use common::audio::{
    best_lag, correlation, ogg_opus_decode, opus_packets_decode, pcm16, symphonia_decode,
};
use common::ws::Ws;
use common::{config, start, stop, WAIT};

const TEXT: &str = "The quick brown fox.";

async fn connect(addr: SocketAddr) -> Result<Ws> {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/realtime")).await?;
    match recv(&mut ws).await? {
        In::Msg(ServerMessage::SessionCreated { .. }) => Ok(ws),
        other => bail!("first message: {other:?}"),
    }
}

#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum In {
    Msg(ServerMessage),
    Audio(AudioHeader, Vec<u8>),
}

async fn recv(ws: &mut Ws) -> Result<In> {
    loop {
        let m = tokio::time::timeout(WAIT, ws.next())
            .await
            .context("timed out waiting for the server")?
            .context("closed")??;
        return Ok(match m {
            Message::Text(t) => In::Msg(
                protocol::parse_server_text(t.as_str()).map_err(|e| anyhow::anyhow!("{e:?}"))?,
            ),
            Message::Binary(b) => {
                let (h, p) = AudioHeader::parse(&b).map_err(|e| anyhow::anyhow!("{e:?}"))?;
                In::Audio(h, p.to_vec())
            }
            Message::Close(f) => bail!("closed: {f:?}"),
            _ => continue,
        });
    }
}

async fn send(ws: &mut Ws, v: Value) -> Result<()> {
    ws.send(Message::text(v.to_string())).await?;
    Ok(())
}

async fn update(ws: &mut Ws, session: Value) -> Result<()> {
    send(ws, json!({"type": "session.update", "session": session})).await?;
    match recv(ws).await? {
        In::Msg(ServerMessage::SessionUpdated { .. }) => Ok(()),
        other => bail!("session.update answered {other:?}"),
    }
}

/// A context's frames: their payloads in order and the rate.
struct Spoken {
    payloads: Vec<Vec<u8>>,
    rate: u32,
}

impl Spoken {
    fn bytes(&self) -> Vec<u8> {
        self.payloads.concat()
    }
}

/// Speaks `TEXT` as context `id` in `format` and checks the frames: the
/// format named in `context.started` and every header (or `audio`
/// message), sequence numbers without a gap, the terminal frame last.
async fn speak(ws: &mut Ws, id: &str, format: AudioFormat) -> Result<Spoken> {
    send(
        ws,
        json!({"type": "context.append", "context_id": id, "text": TEXT}),
    )
    .await?;
    send(ws, json!({"type": "context.end", "context_id": id})).await?;
    let mut payloads = Vec::new();
    let mut rate = 0;
    let mut terminal = false;
    loop {
        match recv(ws).await? {
            In::Msg(ServerMessage::ContextStarted {
                format: f,
                sample_rate,
                ..
            }) => {
                assert_eq!(f, format, "context.started names the format");
                rate = sample_rate;
            }
            In::Audio(h, p) => {
                assert_eq!(h.format, format, "the header names the format");
                assert_eq!(h.seq as usize, payloads.len(), "seq");
                assert!(!terminal, "a frame after the terminal one");
                terminal = h.terminal;
                payloads.push(p);
            }
            In::Msg(ServerMessage::Audio {
                format: f,
                seq,
                terminal: t,
                audio,
                ..
            }) => {
                assert_eq!(f, format, "the audio message names the format");
                assert_eq!(seq as usize, payloads.len(), "seq");
                assert!(!terminal, "a frame after the terminal one");
                terminal = t;
                payloads.push(protocol::base64_decode(&audio).context("base64")?);
            }
            In::Msg(ServerMessage::ContextDone { .. }) => break,
            In::Msg(other) => bail!("during {id}: {other:?}"),
        }
    }
    assert!(terminal, "no terminal frame");
    Ok(Spoken { payloads, rate })
}

/// The pcm16 reference and the `format` context of the same greedy
/// request, at `rate`.
async fn pair(addr: SocketAddr, format: AudioFormat, rate: u32) -> Result<(Vec<f32>, Spoken)> {
    let mut ws = connect(addr).await?;
    let base = json!({"greedy": true, "seed": 7, "max_frames": 12, "sample_rate": rate});
    let mut s = base.clone();
    s["format"] = json!("pcm16");
    update(&mut ws, s).await?;
    let reference = pcm16(&speak(&mut ws, "ref", AudioFormat::Pcm16).await?.bytes());
    let mut s = base;
    s["format"] = json!(format.name());
    update(&mut ws, s).await?;
    let spoken = speak(&mut ws, "enc", format).await?;
    assert_eq!(spoken.rate, rate);
    assert!(reference.len() > 2000, "{} samples", reference.len());
    Ok((reference, spoken))
}

/// Lines `decoded` up with `reference` (the codec's delay, at most
/// `max_lag`) and checks every sample came out, at most `slack` more, and
/// the correlation.
fn check_aligned(
    name: &str,
    reference: &[f32],
    decoded: &[f32],
    max_lag: usize,
    slack: usize,
    min_corr: f64,
) {
    let lag = best_lag(reference, decoded, max_lag);
    let r = correlation(reference, &decoded[lag.min(decoded.len())..]);
    eprintln!(
        "{name}: {} decoded for {} (lag {lag}), correlation {r:.3}",
        decoded.len(),
        reference.len()
    );
    assert!(
        decoded.len() >= lag + reference.len(),
        "{name}: {} < lag {lag} + {}",
        decoded.len(),
        reference.len()
    );
    assert!(
        decoded.len() <= lag + reference.len() + slack,
        "{name}: {} samples, more than lag {lag} + {} + {slack}",
        decoded.len(),
        reference.len()
    );
    assert!(r > min_corr, "{name}: correlation {r:.3}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_encoded_format_decodes_to_the_pcm16_context_of_the_same_request() -> Result<()> {
    let s = start(config(Duration::from_secs(5))).await?;
    let addr = s.local_addr();

    let (reference, flac) = pair(addr, AudioFormat::Flac, 24_000).await?;
    let (decoded, rate) = symphonia_decode(&flac.bytes(), "flac")?;
    assert_eq!(rate, 24_000);
    assert_eq!(decoded.len(), reference.len(), "flac: exact length");
    assert!(
        decoded
            .iter()
            .zip(&reference)
            .all(|(a, b)| (a - b).abs() < 1e-6),
        "flac: lossless"
    );

    let (reference, mp3) = pair(addr, AudioFormat::Mp3, 24_000).await?;
    let (decoded, rate) = symphonia_decode(&mp3.bytes(), "mp3")?;
    assert_eq!(rate, 24_000);
    // LAME's 1105-sample delay (+ the decoder's 529), frames of 576.
    check_aligned("mp3", &reference, &decoded, 3000, 2 * 576 + 1105, 0.6);

    let (reference, aac) = pair(addr, AudioFormat::Aac, 24_000).await?;
    let (decoded, rate) = symphonia_decode(&aac.bytes(), "aac")?;
    assert_eq!(rate, 24_000);
    // FDK's 2048-sample delay, then less than one 1024-sample frame.
    check_aligned("aac", &reference, &decoded, 2048, 1024, 0.9);

    let (reference, opus) = pair(addr, AudioFormat::Opus, 24_000).await?;
    let (decoded, rate) = ogg_opus_decode(&opus.bytes())?;
    assert_eq!(rate, 24_000);
    // Ogg Opus states pre-skip and the end: the exact length, aligned.
    assert_eq!(decoded.len(), reference.len(), "opus: exact length");
    let r = correlation(&reference, &decoded);
    assert!(r > 0.8, "opus: correlation {r:.3}");

    let (reference, packets) = pair(addr, AudioFormat::OpusPackets, 24_000).await?;
    let (last, frames) = packets.payloads.split_last().context("frames")?;
    // One 20 ms packet per message; the terminal one the flush's last.
    assert!(frames.iter().all(|p| !p.is_empty()), "an empty packet");
    let mut all = frames.to_vec();
    if !last.is_empty() {
        all.push(last.clone());
    }
    let decoded = opus_packets_decode(&all, 24_000)?;
    assert_eq!(decoded.len(), all.len() * 480, "20 ms each");
    // libopus's look-ahead (6.5 ms: 156 samples), < 1 packet after it.
    check_aligned("opus_packets", &reference, &decoded, 480, 480, 0.8);

    for (format, law) in [
        (
            AudioFormat::Mulaw,
            tts_audio::encode::ulaw_to_linear as fn(u8) -> i16,
        ),
        (AudioFormat::Alaw, tts_audio::encode::alaw_to_linear),
    ] {
        let (reference, g711) = pair(addr, format, 8000).await?;
        let bytes = g711.bytes();
        assert_eq!(bytes.len(), reference.len(), "{format}: a byte a sample");
        let decoded: Vec<f32> = bytes.iter().map(|&c| law(c) as f32 / 32768.0).collect();
        let r = correlation(&reference, &decoded);
        assert!(r > 0.99, "{format}: correlation {r:.3}");
    }
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base64_audio_messages_carry_the_same_encoded_bytes() -> Result<()> {
    let s = start(config(Duration::from_secs(5))).await?;
    let mut ws = connect(s.local_addr()).await?;
    update(
        &mut ws,
        json!({"greedy": true, "max_frames": 12, "format": "aac"}),
    )
    .await?;
    let binary = speak(&mut ws, "b", AudioFormat::Aac).await?.bytes();
    update(&mut ws, json!({"audio_transport": "base64"})).await?;
    let base64 = speak(&mut ws, "t", AudioFormat::Aac).await?.bytes();
    assert_eq!(binary, base64);
    assert_eq!(&binary[..2], &[0xFF, 0xF1], "ADTS");
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_format_or_a_rate_the_codec_lacks_is_refused_naming_the_valid_ones() -> Result<()> {
    let s = start(config(Duration::from_secs(5))).await?;
    let mut ws = connect(s.local_addr()).await?;
    send(
        &mut ws,
        json!({"type": "session.update", "session": {"format": "ogg"}}),
    )
    .await?;
    match recv(&mut ws).await? {
        In::Msg(ServerMessage::Error {
            code,
            message,
            valid,
            ..
        }) => {
            assert_eq!(code, ErrorCode::InvalidMessage);
            assert!(
                message.contains("ogg") && message.contains("opus_packets"),
                "{message}"
            );
            let valid = valid.context("valid formats")?;
            for f in AudioFormat::ALL {
                assert!(valid.iter().any(|v| v == f.name()), "{f} in {valid:?}");
            }
        }
        other => bail!("{other:?}"),
    }
    send(
        &mut ws,
        json!({"type": "session.update", "session": {"format": "mulaw", "sample_rate": 16000}}),
    )
    .await?;
    match recv(&mut ws).await? {
        In::Msg(ServerMessage::Error { code, message, .. }) => {
            assert_eq!(code, ErrorCode::InvalidSetting);
            assert!(message.contains("8000"), "{message}");
        }
        other => bail!("{other:?}"),
    }
    // mulaw alone switches to 8 kHz.
    send(
        &mut ws,
        json!({"type": "session.update", "session": {"format": "mulaw"}}),
    )
    .await?;
    match recv(&mut ws).await? {
        In::Msg(ServerMessage::SessionUpdated { session }) => {
            assert_eq!(
                (session.format, session.sample_rate),
                (AudioFormat::Mulaw, 8000)
            );
        }
        other => bail!("{other:?}"),
    }
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_context_in_an_encoded_format_leaves_no_late_frames() -> Result<()> {
    let s = start(config(Duration::from_secs(5))).await?;
    let mut ws = connect(s.local_addr()).await?;
    update(
        &mut ws,
        json!({"max_frames": 400, "seed": 3, "format": "opus_packets"}),
    )
    .await?;
    send(
        &mut ws,
        json!({"type": "context.append", "context_id": "long", "text": "This one will be cut short, well before its end."}),
    )
    .await?;
    send(
        &mut ws,
        json!({"type": "context.end", "context_id": "long"}),
    )
    .await?;
    let stream = loop {
        match recv(&mut ws).await? {
            In::Msg(ServerMessage::ContextStarted { .. }) => {}
            In::Audio(h, _) => break h.stream_id,
            other => bail!("{other:?}"),
        }
    };
    send(
        &mut ws,
        json!({"type": "context.cancel", "context_id": "long"}),
    )
    .await?;
    loop {
        match recv(&mut ws).await? {
            In::Audio(h, _) => {
                assert_eq!(h.stream_id, stream);
                assert!(!h.terminal, "a cancelled context has no terminal frame");
            }
            In::Msg(ServerMessage::ContextCancelled {
                reason,
                late_audio_samples,
                ..
            }) => {
                assert_eq!(reason, CancelReason::Client);
                assert_eq!(late_audio_samples, 0);
                break;
            }
            other => bail!("{other:?}"),
        }
    }
    // Everything the server sent before the pong is in: no frame of the
    // cancelled context (its encoder's flush included) follows.
    send(&mut ws, json!({"type": "ping", "id": "after"})).await?;
    match recv(&mut ws).await? {
        In::Msg(ServerMessage::Pong { id }) => assert_eq!(id.as_deref(), Some("after")),
        other => bail!("after the cancel: {other:?}"),
    }
    // The next context in the same format starts a fresh encoder.
    update(&mut ws, json!({"max_frames": 6, "greedy": true})).await?;
    let next = speak(&mut ws, "next", AudioFormat::OpusPackets).await?;
    let decoded = opus_packets_decode(
        &next
            .payloads
            .iter()
            .filter(|p| !p.is_empty())
            .cloned()
            .collect::<Vec<_>>(),
        24_000,
    )?;
    assert!(!decoded.is_empty());
    stop(s).await
}
