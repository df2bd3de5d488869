//! Home Assistant's Wyoming protocol (`--wyoming-port`) against tiny-a:
//! describe/info, one-shot and streamed synthesis, malformed input and the
//! framing's bounds.

use crate::common;

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use common::WAIT;

/// One event as read by the test: type, data, payload.
#[derive(Debug)]
struct Ev {
    ty: String,
    data: Value,
    payload: Vec<u8>,
}

struct Client {
    r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: tokio::net::tcp::OwnedWriteHalf,
}

impl Client {
    async fn connect(s: &tts_transport::Server) -> Result<Client> {
        let tcp = TcpStream::connect(s.wyoming_addr().context("no Wyoming port")?).await?;
        let (r, w) = tcp.into_split();
        Ok(Client {
            r: BufReader::new(r),
            w,
        })
    }

    /// Writes an event as the `wyoming` package does (data after the
    /// header, `data_length` saying how long).
    async fn send(&mut self, ty: &str, data: Value) -> Result<()> {
        let d = data.to_string();
        let head = json!({"type": ty, "version": "1.10.2", "data_length": d.len()});
        self.raw(format!("{head}\n{d}").as_bytes()).await
    }

    async fn raw(&mut self, b: &[u8]) -> Result<()> {
        self.w.write_all(b).await?;
        Ok(())
    }

    /// The next event; `None` at EOF.
    async fn next(&mut self) -> Result<Option<Ev>> {
        tokio::time::timeout(WAIT, async {
            let mut line = String::new();
            if self.r.read_line(&mut line).await? == 0 {
                return Ok(None);
            }
            let h: Value = serde_json::from_str(&line).context("header")?;
            let mut data = h.get("data").cloned().unwrap_or(json!({}));
            let n = h["data_length"].as_u64().unwrap_or(0) as usize;
            if n > 0 {
                let mut b = vec![0; n];
                self.r.read_exact(&mut b).await?;
                let extra: Value = serde_json::from_slice(&b)?;
                for (k, v) in extra.as_object().context("data")? {
                    data[k] = v.clone();
                }
            }
            let n = h["payload_length"].as_u64().unwrap_or(0) as usize;
            let mut payload = vec![0; n];
            self.r.read_exact(&mut payload).await?;
            Ok(Some(Ev {
                ty: h["type"].as_str().context("type")?.to_string(),
                data,
                payload,
            }))
        })
        .await?
    }

    async fn expect(&mut self, ty: &str) -> Result<Ev> {
        match self.next().await? {
            Some(e) if e.ty == ty => Ok(e),
            other => bail!("expected {ty}, got {other:?}"),
        }
    }

    /// audio-start, audio-chunks, audio-stop: the PCM and its rate.
    async fn audio(&mut self) -> Result<(Vec<u8>, u64)> {
        let start = self.expect("audio-start").await?;
        assert_eq!(start.data["width"], 2, "{:?}", start.data);
        assert_eq!(start.data["channels"], 1);
        let rate = start.data["rate"].as_u64().context("rate")?;
        let mut pcm = Vec::new();
        loop {
            let e = self.next().await?.context("EOF inside audio")?;
            match e.ty.as_str() {
                "audio-chunk" => {
                    assert_eq!(e.data["rate"].as_u64(), Some(rate));
                    assert_eq!(e.data["width"], 2);
                    pcm.extend(e.payload);
                }
                "audio-stop" => return Ok((pcm, rate)),
                other => bail!("unexpected {other} inside audio: {:?}", e.data),
            }
        }
    }
}

fn config() -> tts_transport::ServeConfig {
    let mut c = common::config(Duration::from_secs(5));
    c.wyoming_addr = Some(([127, 0, 0, 1], 0).into());
    c
}

/// PCM16 of plausible length: whole samples, some audio, within the
/// server's frame cap (400 frames of 80 ms).
fn plausible(pcm: &[u8], rate: u64) {
    assert_eq!(pcm.len() % 2, 0);
    let seconds = pcm.len() as f64 / 2.0 / rate as f64;
    assert!(seconds > 0.05 && seconds <= 32.5, "{seconds} s of audio");
    assert!(pcm.iter().any(|&b| b != 0), "all silence");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_lists_the_voices_and_languages() -> Result<()> {
    let s = common::start(config()).await?;
    let mut c = Client::connect(&s).await?;
    c.send("describe", json!({})).await?;
    let info = c.expect("info").await?;
    let tts = &info.data["tts"][0];
    assert_eq!(tts["name"], "tts-rt");
    assert_eq!(tts["supports_synthesize_streaming"], true);
    assert_eq!(tts["installed"], true);
    let names: Vec<&str> = tts["voices"]
        .as_array()
        .context("voices")?
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(names, ["dylan", "eric", "ryan", "serena"]);
    let v = &tts["voices"][0];
    let langs = v["languages"].as_array().context("languages")?;
    assert!(
        langs.contains(&json!("en")) && langs.contains(&json!("zh")),
        "{langs:?}"
    );
    assert!(v["attribution"]["name"].is_string() && v["installed"] == true);
    // Ping answered; the connection stays usable.
    c.send("ping", json!({"text": "x"})).await?;
    assert_eq!(c.expect("pong").await?.data["text"], "x");
    drop(c);
    common::stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_and_streamed_synthesis_speak() -> Result<()> {
    let s = common::start(config()).await?;
    let mut c = Client::connect(&s).await?;
    c.send(
        "synthesize",
        json!({"text": "Hello world.", "voice": {"name": "ryan"}}),
    )
    .await?;
    let (pcm, rate) = c.audio().await?;
    assert_eq!(rate, 24000);
    plausible(&pcm, rate);

    // Without a voice, the default one; by language code.
    c.send(
        "synthesize",
        json!({"text": "Hi.", "voice": {"language": "en"}}),
    )
    .await?;
    let (pcm, rate) = c.audio().await?;
    plausible(&pcm, rate);

    // Streamed, as Home Assistant sends it: start, chunks, the whole text
    // again for servers without streaming (ignored), stop.
    c.send("synthesize-start", json!({"voice": {"name": "serena"}}))
        .await?;
    for t in ["Hello ", "there, ", "world."] {
        c.send("synthesize-chunk", json!({"text": t})).await?;
    }
    c.send("synthesize", json!({"text": "Hello there, world."}))
        .await?;
    c.send("synthesize-stop", json!({})).await?;
    let (pcm, rate) = c.audio().await?;
    plausible(&pcm, rate);
    c.expect("synthesize-stopped").await?;
    // Nothing came of the ignored synthesize: the next answer is info.
    c.send("describe", json!({})).await?;
    c.expect("info").await?;

    // A stream with no text ends at once.
    c.send("synthesize-start", json!({})).await?;
    c.send("synthesize-stop", json!({})).await?;
    c.expect("synthesize-stopped").await?;
    drop(c);
    common::stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_is_answered_and_the_connection_goes_on() -> Result<()> {
    let s = common::start(config()).await?;
    let mut c = Client::connect(&s).await?;
    let mut errors = Vec::new();
    c.raw(b"this is not json\n").await?;
    errors.push(c.expect("error").await?);
    c.raw(b"{\"type\":\"synthesize\",\"data_length\":5}\n[1,2]")
        .await?;
    errors.push(c.expect("error").await?);
    c.send("transcribe", json!({})).await?;
    errors.push(c.expect("error").await?);
    c.send("synthesize-chunk", json!({"text": "orphan"}))
        .await?;
    errors.push(c.expect("error").await?);
    c.send("synthesize", json!({"voice": {"name": "ryan"}}))
        .await?;
    errors.push(c.expect("error").await?);
    let codes: Vec<&str> = errors
        .iter()
        .map(|e| e.data["code"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        codes,
        [
            "malformed_json",
            "malformed_json",
            "unknown_type",
            "invalid_message",
            "invalid_message"
        ]
    );
    assert!(errors.iter().all(|e| e.data["text"].is_string()));
    assert!(errors[2].data["text"]
        .as_str()
        .unwrap()
        .contains("synthesize-start"));

    // An unknown voice names the voices, and nothing is spoken.
    c.send(
        "synthesize",
        json!({"text": "Hi.", "voice": {"name": "nobody"}}),
    )
    .await?;
    let e = c.expect("error").await?;
    let text = e.data["text"].as_str().context("text")?;
    assert!(text.contains("nobody") && text.contains("ryan"), "{text}");
    assert_eq!(e.data["code"], "invalid_voice");
    // ... also at a stream's start: its chunks are dropped, its stop
    // answered.
    c.send("synthesize-start", json!({"voice": {"name": "nobody"}}))
        .await?;
    c.expect("error").await?;
    c.send("synthesize-chunk", json!({"text": "dropped"}))
        .await?;
    c.send("synthesize-stop", json!({})).await?;
    c.expect("synthesize-stopped").await?;

    // The connection still speaks.
    c.send("synthesize", json!({"text": "Hi."})).await?;
    let (pcm, rate) = c.audio().await?;
    plausible(&pcm, rate);
    drop(c);
    common::stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_bounds_the_connection_is_closed_and_the_server_survives() -> Result<()> {
    let s = common::start(config()).await?;
    let big = tts_transport::wyoming::MAX_PAYLOAD_BYTES + 1;
    let long_line = vec![b'x'; tts_transport::wyoming::MAX_HEADER_BYTES + 100];
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (long_line, "message_too_large"),
        (
            format!("{{\"type\":\"synthesize\",\"payload_length\":{big}}}\n").into_bytes(),
            "message_too_large",
        ),
        (
            b"{\"type\":\"synthesize\",\"data_length\":99999999999999}\n".to_vec(),
            "message_too_large",
        ),
        (
            b"{\"type\":\"synthesize\",\"data_length\":\"ten\"}\n".to_vec(),
            "invalid_message",
        ),
    ];
    for (case, code) in cases {
        let mut c = Client::connect(&s).await?;
        c.raw(&case).await?;
        let e = c.expect("error").await?;
        assert_eq!(e.data["code"], code, "{:?}", e.data);
        assert!(c.next().await?.is_none(), "the connection must close");
    }
    let mut c = Client::connect(&s).await?;
    c.send("describe", json!({})).await?;
    c.expect("info").await?;
    drop(c);
    common::stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_slot_is_shared_and_the_drain_finishes_what_was_asked() -> Result<()> {
    let mut cfg = config();
    cfg.max_sessions = 1;
    let s = common::start(cfg).await?;
    // An idle Wyoming session gives its slot to the next client.
    let mut a = Client::connect(&s).await?;
    a.send("describe", json!({})).await?;
    a.expect("info").await?;
    let mut b = Client::connect(&s).await?;
    b.send("describe", json!({})).await?;
    b.expect("info").await?;
    let e = a.expect("error").await?;
    assert_eq!(e.data["code"], "closed", "{:?}", e.data);
    assert!(a.next().await?.is_none());

    // Shutdown while speaking: the request's audio is finished, then the
    // connection is closed saying why; a new connection is refused.
    b.send("synthesize", json!({"text": "Hello world."}))
        .await?;
    b.expect("audio-start").await?;
    s.shutdown();
    let mut pcm = Vec::new();
    loop {
        let e = b.next().await?.context("closed inside the audio")?;
        match e.ty.as_str() {
            "audio-chunk" => pcm.extend(e.payload),
            "audio-stop" => break,
            other => bail!("unexpected {other}"),
        }
    }
    assert!(!pcm.is_empty());
    let e = b.expect("error").await?;
    assert!(
        e.data["text"]
            .as_str()
            .unwrap_or("")
            .contains("shutting down"),
        "{:?}",
        e.data
    );
    assert!(b.next().await?.is_none());
    if let Ok(mut c) = Client::connect(&s).await {
        // Accepted before the listener stopped: refused with a reason.
        if let Some(e) = c.next().await? {
            assert_eq!(e.ty, "error");
            assert_eq!(e.data["code"], "shutting_down");
        }
    }
    common::stop(s).await
}

/// Streams `chunks` in `voice`: the audio, then `synthesize-stopped`.
async fn stream(c: &mut Client, voice: &str, chunks: &[&str]) -> Result<(Vec<u8>, u64)> {
    c.send("synthesize-start", json!({"voice": {"name": voice}}))
        .await?;
    for t in chunks {
        c.send("synthesize-chunk", json!({"text": t})).await?;
    }
    c.send("synthesize-stop", json!({})).await?;
    let audio = c.audio().await?;
    c.expect("synthesize-stopped").await?;
    Ok(audio)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_voices_are_listed_and_speak_even_cloned_in_context() -> Result<()> {
    use base64::Engine as _;
    let voices = std::env::temp_dir().join(format!("tts-rt-wyoming-voices-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&voices);
    let base = common::fixture().with_file_name("tiny-base");
    let mut cfg = config();
    cfg.model_dir = base.clone();
    cfg.voices_dir = Some(voices.clone());
    let s = common::start(cfg).await?;
    let clip = std::fs::read(base.join("../goldens/tiny-base/ref_a.wav"))?;
    let audio = base64::engine::general_purpose::STANDARD.encode(&clip);
    let text =
        "The quick brown fox jumps over the lazy dog, then it rests under a tall green tree.";
    for body in [
        json!({"name": "alice", "audio": audio, "ref_text": text}),
        json!({"name": "bob", "audio": audio, "speaker_description": "calm"}),
    ] {
        let r = common::http::post_json(s.local_addr(), "/v1/audio/voices", &body).await?;
        assert_eq!(r.status, 201, "{}", r.body_str());
    }
    let mut c = Client::connect(&s).await?;
    c.send("describe", json!({})).await?;
    let info = c.expect("info").await?;
    let v = &info.data["tts"][0]["voices"];
    let names: Vec<&str> = v
        .as_array()
        .context("voices")?
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(names, ["alice", "bob"]);
    assert_eq!(v[1]["description"], "calm");

    // Live text for the x-vector clone; the in-context clone, which live
    // text cannot take, segmented instead.
    for voice in ["bob", "alice"] {
        let (pcm, rate) = stream(&mut c, voice, &["Hello ", "there."]).await?;
        plausible(&pcm, rate);
    }
    c.send(
        "synthesize",
        json!({"text": "Hi.", "voice": {"name": "alice"}}),
    )
    .await?;
    let (pcm, rate) = c.audio().await?;
    plausible(&pcm, rate);
    drop(c);
    let r = common::stop(s).await;
    let _ = std::fs::remove_dir_all(&voices);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_without_named_voices_lists_and_speaks_its_default() -> Result<()> {
    let mut cfg = config();
    cfg.model_dir = common::fixture().with_file_name("tiny-vd");
    let s = common::start(cfg).await?;
    let mut c = Client::connect(&s).await?;
    c.send("describe", json!({})).await?;
    let info = c.expect("info").await?;
    let v = &info.data["tts"][0]["voices"];
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v[0]["name"], "default");
    assert!(!v[0]["languages"]
        .as_array()
        .context("languages")?
        .is_empty());
    c.send(
        "synthesize",
        json!({"text": "Hi.", "voice": {"name": "default"}}),
    )
    .await?;
    let (pcm, rate) = c.audio().await?;
    plausible(&pcm, rate);
    drop(c);
    common::stop(s).await
}
