//! Word and character timings on the realtime socket (`timings: true`),
//! end to end on loopback with the tiny-a fixture: every character of the
//! text is timed exactly once, in order, monotonic, each timing sent no
//! later than the audio that carries it and never past the audio sent; a
//! cancelled context says which text was played. Without `timings` nothing
//! changes on the wire.

use std::collections::HashMap;

use anyhow::{bail, Result};
use serde_json::json;
use tts_transport::protocol::{ServerMessage, WordTimingMsg};

use crate::common;

use common::ws::{connect, next, send, Got};
use common::{config, start, stop};

/// What one context sent, in order.
#[derive(Default)]
struct Context {
    /// (seq, samples) of each audio frame, in arrival order.
    frames: Vec<(u32, usize)>,
    /// Each timing event with the samples received before it.
    timings: Vec<(u64, ServerMessage, usize)>,
    rate: u32,
    end: Option<ServerMessage>,
}

async fn hear(ws: &mut common::ws::Ws, id: &str) -> Result<Context> {
    let mut c = Context::default();
    let mut received = 0;
    loop {
        match next(ws).await? {
            Got::Audio(h, n) => {
                c.frames.push((h.seq, n));
                c.rate = h.sample_rate;
                received += n;
            }
            Got::Msg(m @ ServerMessage::Timings { .. }) => {
                let ServerMessage::Timings {
                    seq, context_id, ..
                } = &m
                else {
                    unreachable!()
                };
                assert_eq!(context_id, id);
                c.timings.push((*seq, m.clone(), received));
            }
            Got::Msg(
                m @ (ServerMessage::ContextDone { .. }
                | ServerMessage::ContextCancelled { .. }
                | ServerMessage::ContextFailed { .. }),
            ) => {
                c.end = Some(m);
                return Ok(c);
            }
            Got::Msg(_) => {}
            Got::Closed(code) => bail!("closed {code:?}"),
        }
    }
}

fn check(text: &str, c: &Context) -> Vec<WordTimingMsg> {
    let samples_through = |seq: u64| -> usize {
        c.frames
            .iter()
            .filter(|(s, _)| u64::from(*s) <= seq)
            .map(|(_, n)| n)
            .sum()
    };
    let mut chars = String::new();
    let mut next_index = 0;
    let mut last_end = 0.0f64;
    let mut words = Vec::new();
    for (seq, m, received) in &c.timings {
        let ServerMessage::Timings {
            words: w,
            chars: ch,
            ..
        } = m
        else {
            unreachable!()
        };
        // Never past the audio sent: what came before this event and the
        // frame it precedes.
        let bound = samples_through(*seq).max(*received) as f64 * 1000.0 / c.rate as f64;
        assert_eq!(ch.index, next_index, "characters in order, none twice");
        assert_eq!(ch.chars.len(), ch.start_ms.len());
        assert_eq!(ch.chars.len(), ch.end_ms.len());
        for k in 0..ch.chars.len() {
            assert!(ch.start_ms[k] >= last_end - 0.11, "monotonic");
            assert!(ch.end_ms[k] >= ch.start_ms[k]);
            assert!(
                ch.end_ms[k] <= bound + 0.11,
                "{} past the audio {bound}",
                ch.end_ms[k]
            );
            last_end = ch.end_ms[k];
            chars.push_str(&ch.chars[k]);
        }
        next_index += ch.chars.len();
        words.extend(w.iter().cloned());
    }
    assert_eq!(chars, text, "every character exactly once");
    let spoken: Vec<&str> = text.split_whitespace().collect();
    let timed: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
    assert_eq!(timed, spoken, "every word");
    for w in &words {
        let slice: String = text
            .chars()
            .skip(w.char_start)
            .take(w.char_end - w.char_start)
            .collect();
        assert_eq!(slice, w.text);
    }
    words
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_character_is_timed_once_and_never_past_the_audio() -> Result<()> {
    let server = start(config(std::time::Duration::from_secs(5))).await?;
    let mut ws = connect(server.local_addr()).await?;
    send(&mut ws, json!({"type": "session.update", "session": {"timings": true, "max_frames": 40, "sample_rate": 16000}})).await?;
    let text = "Hello there, my friend.  This is the second sentence! And a third one?";
    send(
        &mut ws,
        json!({"type": "context.append", "context_id": "a", "text": text}),
    )
    .await?;
    send(&mut ws, json!({"type": "context.end", "context_id": "a"})).await?;
    let c = hear(&mut ws, "a").await?;
    assert!(
        matches!(c.end, Some(ServerMessage::ContextDone { .. })),
        "{:?}",
        c.end
    );
    assert!(c.frames.len() > 1);
    let words = check(text, &c);
    assert!(words.windows(2).all(|w| w[1].start_ms >= w[0].start_ms));
    stop(server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_text_is_timed_as_it_arrives() -> Result<()> {
    let server = start(config(std::time::Duration::from_secs(5))).await?;
    let mut ws = connect(server.local_addr()).await?;
    send(&mut ws, json!({"type": "session.update", "session": {"timings": true, "max_frames": 60, "text_mode": "streaming", "chunking": {"mode": "live"}}})).await?;
    let text = "Live text arrives a few words at a time, and still every word is timed.";
    for piece in text.split_inclusive(' ') {
        send(
            &mut ws,
            json!({"type": "context.append", "context_id": "l", "text": piece}),
        )
        .await?;
    }
    send(&mut ws, json!({"type": "context.end", "context_id": "l"})).await?;
    let c = hear(&mut ws, "l").await?;
    assert!(
        matches!(c.end, Some(ServerMessage::ContextDone { .. })),
        "{:?}",
        c.end
    );
    check(text, &c);
    stop(server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_context_says_what_was_played() -> Result<()> {
    let server = start(config(std::time::Duration::from_secs(5))).await?;
    let mut ws = connect(server.local_addr()).await?;
    send(
        &mut ws,
        json!({"type": "session.update", "session": {"timings": true, "max_frames": 200}}),
    )
    .await?;
    let text = "One two three four five six seven eight nine ten eleven twelve.";
    send(
        &mut ws,
        json!({"type": "context.append", "context_id": "c", "text": text}),
    )
    .await?;
    send(&mut ws, json!({"type": "context.flush", "context_id": "c"})).await?;
    // Wait for some audio, then cancel.
    let mut received = 0usize;
    let mut rate = 0;
    while received < 3 {
        if let Got::Audio(h, _) = next(&mut ws).await? {
            received += 1;
            rate = h.sample_rate;
        }
    }
    send(
        &mut ws,
        json!({"type": "context.cancel", "context_id": "c"}),
    )
    .await?;
    let mut samples = HashMap::new();
    loop {
        match next(&mut ws).await? {
            Got::Audio(h, n) => {
                samples.insert(h.seq, n);
            }
            Got::Msg(ServerMessage::ContextCancelled {
                played_text,
                played_ms,
                ..
            }) => {
                let played = played_text.expect("played_text with timings");
                let ms = played_ms.expect("played_ms with timings");
                assert!(text.starts_with(&played), "{played:?}");
                assert!(
                    played.is_empty() || text[played.len()..].starts_with([' ', '.']),
                    "whole words: {played:?}"
                );
                assert!(ms > 0.0 && rate > 0);
                break;
            }
            Got::Msg(_) => {}
            Got::Closed(c) => bail!("closed {c:?}"),
        }
    }
    stop(server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_timings_nothing_changes() -> Result<()> {
    let server = start(config(std::time::Duration::from_secs(5))).await?;
    let mut ws = connect(server.local_addr()).await?;
    send(
        &mut ws,
        json!({"type": "session.update", "session": {"max_frames": 8}}),
    )
    .await?;
    send(
        &mut ws,
        json!({"type": "context.append", "context_id": "n", "text": "Plain."}),
    )
    .await?;
    send(&mut ws, json!({"type": "context.end", "context_id": "n"})).await?;
    let c = hear(&mut ws, "n").await?;
    assert!(c.timings.is_empty());
    stop(server).await
}

/// A vendor socket on the test server.
async fn vendor(url: String) -> Result<common::ws::Ws> {
    let (ws, _) = tokio_tungstenite::connect_async(url).await?;
    Ok(ws)
}

async fn vendor_next(ws: &mut common::ws::Ws) -> Result<serde_json::Value> {
    use futures_util::StreamExt;
    loop {
        match tokio::time::timeout(common::WAIT, ws.next()).await? {
            Some(Ok(tokio_tungstenite::tungstenite::Message::Text(t))) => {
                return Ok(serde_json::from_str(t.as_str())?)
            }
            Some(Ok(_)) => continue,
            other => bail!("socket ended: {other:?}"),
        }
    }
}

async fn vendor_send(ws: &mut common::ws::Ws, v: serde_json::Value) -> Result<()> {
    use futures_util::SinkExt;
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        v.to_string().into(),
    ))
    .await?;
    Ok(())
}

/// ElevenLabs messages of context `ctx` until its `isFinal`: (audio bytes,
/// alignments in order).
async fn elevenlabs_context(
    ws: &mut common::ws::Ws,
    ctx: &str,
) -> Result<(usize, Vec<serde_json::Value>)> {
    let mut bytes = 0;
    let mut alignments = Vec::new();
    loop {
        let m = vendor_next(ws).await?;
        if m["contextId"] != ctx {
            continue;
        }
        if m["isFinal"] == json!(true) {
            return Ok((bytes, alignments));
        }
        if let Some(a) = m["audio"].as_str() {
            use base64::Engine as _;
            bytes += base64::engine::general_purpose::STANDARD.decode(a)?.len();
        }
        assert_eq!(m["alignment"], m["normalizedAlignment"]);
        if !m["alignment"].is_null() {
            alignments.push(m["alignment"].clone());
        }
    }
}

fn ints(v: &serde_json::Value) -> Vec<i64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_i64().expect("integer ms"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elevenlabs_alignment_covers_the_text_as_pipecat_reads_it() -> Result<()> {
    let server = start(config(std::time::Duration::from_secs(5))).await?;
    let addr = server.local_addr();
    for (sync, ctx) in [(false, "a"), (true, "b")] {
        let q = if sync { "&sync_alignment=true" } else { "" };
        let mut ws = vendor(format!(
            "ws://{addr}/v1/text-to-speech/ryan/multi-stream-input?output_format=pcm_16000{q}"
        ))
        .await?;
        let text = "Hello there, my friend. How are you today?";
        vendor_send(&mut ws, json!({"text": " ", "context_id": ctx})).await?;
        vendor_send(&mut ws, json!({"text": text, "context_id": ctx})).await?;
        vendor_send(&mut ws, json!({"context_id": ctx, "flush": true})).await?;
        vendor_send(&mut ws, json!({"context_id": ctx, "close_context": true})).await?;
        let (bytes, alignments) = elevenlabs_context(&mut ws, ctx).await?;
        let audio_ms = bytes as f64 / 2.0 / 16.0;
        let mut chars = String::new();
        // Pipecat's clock: each message's times from the end of the last.
        let mut clock = 0i64;
        let mut last_start = -1i64;
        for a in &alignments {
            let c: Vec<String> = serde_json::from_value(a["chars"].clone())?;
            let starts = ints(&a["charStartTimesMs"]);
            let durs = ints(&a["charDurationsMs"]);
            assert!(c.len() == starts.len() && c.len() == durs.len() && !c.is_empty());
            for k in 0..c.len() {
                assert!(starts[k] >= 0 && durs[k] >= 0);
                let at = if sync { starts[k] } else { clock + starts[k] };
                assert!(at >= last_start, "monotonic");
                last_start = at;
                assert!(((at + durs[k]) as f64) <= audio_ms + 2.0, "past the audio");
            }
            if !sync {
                clock += starts.last().unwrap() + durs.last().unwrap();
            }
            chars.extend(c);
        }
        assert_eq!(chars, text, "every character once (sync_alignment={sync})");
    }
    stop(server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cartesia_add_timestamps_sends_every_word() -> Result<()> {
    let server = start(config(std::time::Duration::from_secs(5))).await?;
    let addr = server.local_addr();
    let mut ws = vendor(format!(
        "ws://{addr}/tts/websocket?cartesia_version=2025-04-16"
    ))
    .await?;
    let text = "Timestamps for each word, please.";
    for (ctx, stamps) in [("t", true), ("n", false)] {
        vendor_send(
            &mut ws,
            json!({
                "model_id": "sonic-2", "transcript": text, "continue": false, "context_id": ctx,
                "voice": {"mode": "id", "id": "ryan"},
                "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
                "add_timestamps": stamps,
            }),
        )
        .await?;
        let mut words = Vec::new();
        let mut last = -1.0f64;
        loop {
            let m = vendor_next(&mut ws).await?;
            assert_eq!(m["context_id"], ctx);
            match m["type"].as_str() {
                Some("timestamps") => {
                    let w = &m["word_timestamps"];
                    let ws_: Vec<String> = serde_json::from_value(w["words"].clone())?;
                    let s: Vec<f64> = serde_json::from_value(w["start"].clone())?;
                    let e: Vec<f64> = serde_json::from_value(w["end"].clone())?;
                    for k in 0..ws_.len() {
                        assert!(s[k] >= last && e[k] >= s[k]);
                        last = s[k];
                    }
                    words.extend(ws_);
                }
                Some("done") => break,
                Some("chunk") => {}
                other => bail!("unexpected {other:?}: {m}"),
            }
        }
        if stamps {
            let expected: Vec<&str> = text.split_whitespace().collect();
            assert_eq!(words, expected);
        } else {
            assert!(words.is_empty(), "no timestamps unless asked");
        }
    }
    stop(server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elevenlabs_http_with_timestamps_whole_and_streamed() -> Result<()> {
    use base64::Engine as _;
    let server = start(config(std::time::Duration::from_secs(5))).await?;
    let addr = server.local_addr();
    let text = "Timed over plain HTTP, word by word.";
    let body = json!({"text": text, "model_id": "eleven_flash_v2_5"}).to_string();
    let b64 = base64::engine::general_purpose::STANDARD;
    // One object.
    let r = common::http::request(
        addr,
        "POST",
        "/v1/text-to-speech/ryan/with-timestamps?output_format=pcm_16000",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.body_str());
    let v = r.json();
    let audio = b64.decode(v["audio_base64"].as_str().expect("audio"))?;
    let audio_s = audio.len() as f64 / 2.0 / 16000.0;
    assert!(audio_s > 0.0);
    let a = &v["alignment"];
    assert_eq!(a, &v["normalized_alignment"]);
    let chars: String = serde_json::from_value::<Vec<String>>(a["characters"].clone())?.concat();
    assert_eq!(chars, text);
    let ends: Vec<f64> = serde_json::from_value(a["character_end_times_seconds"].clone())?;
    assert!(ends.iter().all(|e| *e <= audio_s + 1e-3));
    // One object per line.
    let r = common::http::request(
        addr,
        "POST",
        "/v1/text-to-speech/ryan/stream/with-timestamps?output_format=pcm_16000",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.body_str());
    let mut chars = String::new();
    let mut bytes = 0;
    let mut last = 0.0f64;
    for line in r.body_str().lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)?;
        bytes += b64
            .decode(v["audio_base64"].as_str().expect("audio"))?
            .len();
        if v["alignment"].is_null() {
            continue;
        }
        let starts: Vec<f64> =
            serde_json::from_value(v["alignment"]["character_start_times_seconds"].clone())?;
        for s in starts {
            assert!(s >= last, "monotonic");
            last = s;
        }
        chars +=
            &serde_json::from_value::<Vec<String>>(v["alignment"]["characters"].clone())?.concat();
    }
    assert_eq!(chars, text);
    assert!(bytes > 0);
    stop(server).await
}

/// Every output format and rate (resampled or not, encoded or samples):
/// the same contract, bounded by the context's audio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timings_hold_in_every_output_format() -> Result<()> {
    let server = start(config(std::time::Duration::from_secs(5))).await?;
    let mut ws = connect(server.local_addr()).await?;
    let text = "Formats change the bytes, not the words.";
    for (i, (format, rate)) in [
        ("pcm16", 24000),
        ("f32", 22050),
        ("mp3", 44100),
        ("opus", 48000),
        ("opus_packets", 24000),
        ("flac", 16000),
        ("aac", 24000),
        ("mulaw", 8000),
        ("alaw", 8000),
    ]
    .into_iter()
    .enumerate()
    {
        send(
            &mut ws,
            json!({"type": "session.update", "session": {
            "timings": true, "max_frames": 30, "format": format, "sample_rate": rate}}),
        )
        .await?;
        let id = format!("f{i}");
        send(
            &mut ws,
            json!({"type": "context.append", "context_id": id, "text": text}),
        )
        .await?;
        send(&mut ws, json!({"type": "context.end", "context_id": id})).await?;
        let c = hear(&mut ws, &id).await?;
        let Some(ServerMessage::ContextDone { metrics, .. }) = &c.end else {
            bail!("{format}: {:?}", c.end);
        };
        let mut chars = String::new();
        let mut last = 0.0f64;
        for (_, m, _) in &c.timings {
            let ServerMessage::Timings { chars: ch, .. } = m else {
                unreachable!()
            };
            for k in 0..ch.chars.len() {
                assert!(
                    ch.start_ms[k] >= last - 0.11 && ch.end_ms[k] >= ch.start_ms[k],
                    "{format}"
                );
                // Within the context's audio (its length at the model's
                // rate; resampling keeps the duration).
                assert!(
                    ch.end_ms[k] <= metrics.audio_s * 1000.0 + 15.0,
                    "{format}: {} past {}",
                    ch.end_ms[k],
                    metrics.audio_s
                );
                last = ch.end_ms[k];
                chars.push_str(&ch.chars[k]);
            }
        }
        assert_eq!(chars, text, "{format}");
    }
    stop(server).await
}

/// ElevenLabs' single-stream socket (`stream-input`, what its SDK's
/// `convert_realtime` opens) carries the same alignment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elevenlabs_stream_input_carries_alignment() -> Result<()> {
    let server = start(config(std::time::Duration::from_secs(5))).await?;
    let addr = server.local_addr();
    let mut ws = vendor(format!(
        "ws://{addr}/v1/text-to-speech/serena/stream-input?output_format=ulaw_8000"
    ))
    .await?;
    let text = "One stream, one alignment. ";
    vendor_send(&mut ws, json!({"text": " "})).await?;
    vendor_send(&mut ws, json!({"text": text})).await?;
    vendor_send(&mut ws, json!({"text": ""})).await?;
    let mut chars = String::new();
    loop {
        let m = vendor_next(&mut ws).await?;
        if m["isFinal"] == json!(true) {
            break;
        }
        if !m["alignment"].is_null() {
            let c: Vec<String> = serde_json::from_value(m["alignment"]["chars"].clone())?;
            chars.extend(c);
        }
    }
    assert_eq!(chars, text);
    stop(server).await
}
