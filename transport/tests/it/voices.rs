//! Stored and inline voices over loopback, on the tiny-base fixture (and
//! tiny-a / tiny-vd for the families that do not clone): upload (multipart
//! and JSON) → list → speak over HTTP and the realtime WebSocket → show →
//! delete → restart; and each bad input the voice routes must refuse, with
//! the other sessions and the stored voices untouched.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tts_transport::{ServeConfig, Server};

const WAIT: Duration = Duration::from_secs(120);
const REF_TEXT: &str =
    "The quick brown fox jumps over the lazy dog, then it rests under a tall green tree.";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn ref_clip() -> Vec<u8> {
    std::fs::read(fixtures().join("goldens/tiny-base/ref_a.wav")).expect("ref_a.wav")
}

/// A fresh voices directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "tts-rt-voices-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(model: &str, voices: Option<&Path>) -> ServeConfig {
    let mut c = ServeConfig::new(fixtures().join(model));
    c.addr = SocketAddr::from(([127, 0, 0, 1], 0));
    c.max_frames = Some(200);
    c.drain_timeout = Duration::from_secs(20);
    c.voices_dir = voices.map(Path::to_path_buf);
    c
}

async fn start(cfg: ServeConfig) -> Result<Server> {
    let s = Server::start(cfg).await?;
    tokio::time::timeout(WAIT, s.ready()).await??;
    Ok(s)
}

async fn stop(s: Server) -> Result<()> {
    s.shutdown();
    tokio::time::timeout(WAIT, s.wait()).await??;
    Ok(())
}

// ---------------------------------------------------------------- HTTP ---

struct Reply {
    status: u16,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The error message of an OpenAI-shaped error body.
    fn message(&self) -> String {
        self.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// One HTTP/1.1 request over raw TCP (`Connection: close`, chunked bodies
/// decoded).
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Reply> {
    let mut s = TcpStream::connect(addr).await?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(ct) = content_type {
        head.push_str(&format!(
            "Content-Type: {ct}\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await?;
    // A server may refuse before the whole body is sent (a 413): keep what
    // it answered even if the rest of the body could not be written.
    let _ = s.write_all(body).await;
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut raw)).await??;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
    let status: u16 = head.split(' ').nth(1).context("no status line")?.parse()?;
    let mut rest = &raw[split + 4..];
    let body = if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        loop {
            let eol = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .context("truncated chunk")?;
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..eol])?.trim(), 16)?;
            rest = &rest[eol + 2..];
            if n == 0 {
                break;
            }
            ensure!(rest.len() >= n + 2, "truncated chunk body");
            out.extend_from_slice(&rest[..n]);
            rest = &rest[n + 2..];
        }
        out
    } else {
        rest.to_vec()
    };
    Ok(Reply { status, body })
}

async fn post_json(addr: SocketAddr, path: &str, v: &Value) -> Result<Reply> {
    http(
        addr,
        "POST",
        path,
        Some("application/json"),
        v.to_string().as_bytes(),
    )
    .await
}

/// A multipart form: text fields, then the clip as `audio_sample`.
fn multipart(fields: &[(&str, &str)], file_name: &str, audio: &[u8]) -> (String, Vec<u8>) {
    let boundary = "----tts-rt-test-boundary-7f3a";
    let mut b = Vec::new();
    for (k, v) in fields {
        b.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    b.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"audio_sample\"; filename=\"{file_name}\"\r\nContent-Type: audio/wav\r\n\r\n"
        )
        .as_bytes(),
    );
    b.extend_from_slice(audio);
    b.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), b)
}

async fn upload_form(addr: SocketAddr, fields: &[(&str, &str)], audio: &[u8]) -> Result<Reply> {
    let (ct, body) = multipart(fields, "clip.wav", audio);
    http(addr, "POST", "/v1/audio/voices", Some(&ct), &body).await
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Speaks `extra` (voice, ref_audio, ...) over `/v1/audio/speech`, greedy
/// and short; the WAV body on success.
async fn speak(addr: SocketAddr, extra: Value) -> Result<Reply> {
    let mut req = json!({
        "model": "tts-1",
        "input": "Hello there.",
        "response_format": "wav",
        "greedy": true,
        "max_frames": 6,
    });
    for (k, v) in extra.as_object().context("object")? {
        req[k] = v.clone();
    }
    post_json(addr, "/v1/audio/speech", &req).await
}

fn assert_audio(r: &Reply, what: &str) {
    assert_eq!(
        r.status,
        200,
        "{what}: {}",
        String::from_utf8_lossy(&r.body)
    );
    assert!(
        r.body.len() > 44 + 100,
        "{what}: only {} bytes of WAV",
        r.body.len()
    );
    assert_eq!(&r.body[..4], b"RIFF", "{what}");
}

fn assert_refused(r: &Reply, status: u16, needle: &str, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", r.message());
    assert!(
        r.message().contains(needle),
        "{what}: the message {:?} does not say {needle:?}",
        r.message()
    );
}

/// 16-bit mono WAV of `samples` at `rate`.
fn wav(samples: &[f32], rate: u32) -> Vec<u8> {
    let mut cur = std::io::Cursor::new(Vec::new());
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::new(&mut cur, spec).expect("wav writer");
    for s in samples {
        w.write_sample((s.clamp(-1.0, 1.0) * 32767.0) as i16)
            .expect("sample");
    }
    w.finalize().expect("finalize");
    cur.into_inner()
}

/// The committed M4A tone with its stsc box's entry count set to `count`.
fn m4a_with_stsc_count(count: u32) -> Vec<u8> {
    let mut bytes =
        std::fs::read(fixtures().join("audio/tone440-44100-stereo.m4a")).expect("m4a fixture");
    // The count follows the box's size, type, version and flags.
    let stsc = bytes.windows(4).position(|w| w == b"stsc").expect("stsc") - 4;
    bytes[stsc + 12..stsc + 16].copy_from_slice(&count.to_be_bytes());
    bytes
}

fn tone(secs: f64, rate: u32) -> Vec<f32> {
    let n = (secs * rate as f64) as usize;
    (0..n)
        .map(|i| 0.3 * (i as f32 * 220.0 * std::f32::consts::TAU / rate as f32).sin())
        .collect()
}

// ----------------------------------------------------------- WebSocket ---

/// Speaks one context over the realtime WebSocket with `voice`; the audio
/// bytes it received, or the first error's message.
async fn realtime_speak(
    addr: SocketAddr,
    session: Value,
) -> Result<std::result::Result<usize, String>> {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/realtime")).await?;
    let mut session = session;
    session["greedy"] = true.into();
    session["max_frames"] = 6.into();
    ws.send(Message::text(
        json!({"type": "session.update", "session": session}).to_string(),
    ))
    .await?;
    let mut sent = false;
    let mut audio = 0usize;
    loop {
        let m = tokio::time::timeout(WAIT, ws.next())
            .await?
            .context("socket closed")??;
        match m {
            Message::Binary(b) => audio += b.len(),
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t)?;
                match v["type"].as_str().unwrap_or_default() {
                    "session.updated" if !sent => {
                        sent = true;
                        for m in [
                            json!({"type": "context.append", "context_id": "c", "text": "Hello there."}),
                            json!({"type": "context.end", "context_id": "c"}),
                        ] {
                            ws.send(Message::text(m.to_string())).await?;
                        }
                    }
                    "context.done" => return Ok(Ok(audio)),
                    "error" | "context.failed" => {
                        let msg = v["error"]["message"]
                            .as_str()
                            .or(v["message"].as_str())
                            .unwrap_or_default()
                            .to_string();
                        return Ok(Err(format!("{msg} {v}")));
                    }
                    _ => {}
                }
            }
            Message::Close(_) => bail!("closed"),
            _ => {}
        }
    }
}

// ---------------------------------------------------------------- tests ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_list_speak_show_delete_and_restart() -> Result<()> {
    let dir = TempDir::new("life");
    let s = start(config("tiny-base", Some(&dir.0))).await?;
    let addr = s.local_addr();
    let clip = ref_clip();

    // Multipart with a transcript: in-context cloning.
    let r = upload_form(
        addr,
        &[
            ("name", "Alice"),
            ("ref_text", REF_TEXT),
            ("consent", "yes"),
        ],
        &clip,
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.message());
    let v = r.json();
    assert_eq!(v["name"], "Alice");
    assert_eq!(v["mode"], "icl");
    assert_eq!(v["ref_frames"], 27);
    assert!(v["timings_ms"]["x_vector"].as_f64().unwrap() > 0.0);
    assert!(v["timings_ms"]["codes"].as_f64().unwrap() > 0.0);
    assert!(v["created"].is_string() && v["talker_size"].is_string());

    // JSON with a data URL and no transcript: x-vector only.
    let url = format!("data:audio/wav;base64,{}", b64(&clip));
    let r = post_json(
        addr,
        "/v1/audio/voices",
        &json!({"name": "bob", "audio": url, "speaker_description": "calm"}),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.message());
    assert_eq!(r.json()["mode"], "xvec");
    assert_eq!(r.json()["description"], "calm");

    let list = http(addr, "GET", "/v1/audio/voices", None, b"")
        .await?
        .json();
    let names: Vec<&str> = list["uploaded_voices"]
        .as_array()
        .context("uploaded_voices")?
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(names, ["Alice", "bob"]);
    // The stored voices are also entries of `voices` (id + name, as
    // voice pickers read them).
    let stored: Vec<(&str, &str)> = list["voices"]
        .as_array()
        .context("voices")?
        .iter()
        .filter(|v| v["kind"] == "stored")
        .filter_map(|v| Some((v["id"].as_str()?, v["name"].as_str()?)))
        .collect();
    assert_eq!(stored, [("Alice", "Alice"), ("bob", "bob")]);

    let show = http(addr, "GET", "/v1/audio/voices/alice", None, b"").await?;
    assert_eq!(show.status, 200);
    assert!(show.json().get("x_vector").is_none());
    let full = http(addr, "GET", "/v1/audio/voices/alice?full=true", None, b"").await?;
    assert!(full.json()["x_vector"]
        .as_array()
        .is_some_and(|x| !x.is_empty()));
    assert_eq!(full.json()["ref_codes"].as_array().map(Vec::len), Some(27));

    assert_audio(
        &speak(addr, json!({"voice": "alice"})).await?,
        "stored ICL voice",
    );
    assert_audio(
        &speak(
            addr,
            json!({"voice": {"id": "bob"}, "non_streaming_mode": true}),
        )
        .await?,
        "stored x-vector voice, prefill text",
    );
    assert_audio(
        &speak(addr, json!({"ref_audio": url, "ref_text": REF_TEXT})).await?,
        "inline ICL clone",
    );
    assert_audio(
        &speak(
            addr,
            json!({"ref_audio": b64(&clip), "x_vector_only_mode": true}),
        )
        .await?,
        "inline x-vector clone",
    );
    match realtime_speak(addr, json!({"voice": "Alice"})).await? {
        Ok(bytes) => assert!(bytes > 100, "realtime audio: {bytes} bytes"),
        Err(e) => panic!("realtime with a stored voice: {e}"),
    }
    let unknown = realtime_speak(addr, json!({"voice": "nobody"})).await?;
    assert!(
        unknown.as_ref().is_err_and(|e| e.contains("nobody")),
        "{unknown:?}"
    );

    // An existing name needs replace=true.
    let again = upload_form(addr, &[("name", "alice"), ("ref_text", REF_TEXT)], &clip).await?;
    assert_refused(&again, 409, "already exists", "a second alice");
    let replaced = upload_form(
        addr,
        &[
            ("name", "alice"),
            ("replace", "true"),
            ("x_vector_only_mode", "true"),
        ],
        &clip,
    )
    .await?;
    assert_eq!(replaced.status, 201, "{}", replaced.message());
    assert_eq!(replaced.json()["mode"], "xvec");

    let gone = http(addr, "DELETE", "/v1/audio/voices/alice", None, b"").await?;
    assert_eq!(gone.status, 200, "{}", gone.message());
    assert_eq!(gone.json()["deleted"], true);
    let again = http(addr, "DELETE", "/v1/audio/voices/alice", None, b"").await?;
    assert_refused(&again, 404, "alice", "deleting twice");
    let missing = http(addr, "GET", "/v1/audio/voices/alice", None, b"").await?;
    assert_eq!(missing.status, 404);
    assert_refused(
        &speak(addr, json!({"voice": "alice"})).await?,
        400,
        "stored voices: bob",
        "speaking a deleted voice",
    );
    stop(s).await?;

    // Restart on the same directory: the voice is still there.
    let s = start(config("tiny-base", Some(&dir.0))).await?;
    assert_audio(
        &speak(s.local_addr(), json!({"voice": "bob"})).await?,
        "after restart",
    );
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_clips_and_names_are_refused_and_nothing_else_changes() -> Result<()> {
    let dir = TempDir::new("bad");
    let s = start(config("tiny-base", Some(&dir.0))).await?;
    let addr = s.local_addr();
    let clip = ref_clip();
    let ok = upload_form(addr, &[("name", "keep"), ("ref_text", REF_TEXT)], &clip).await?;
    assert_eq!(ok.status, 201, "{}", ok.message());

    // A CustomVoice-free request on Base: speaking is in flight while the
    // refusals below come and go.
    let in_flight =
        tokio::spawn(async move { speak(addr, json!({"voice": "keep", "max_frames": 20})).await });

    let unreadable = upload_form(addr, &[("name", "x")], b"this is not audio at all").await?;
    assert_refused(
        &unreadable,
        400,
        "not in a supported format",
        "unreadable audio",
    );
    assert_eq!(unreadable.json()["error"]["param"], "audio_sample");

    let truncated = upload_form(addr, &[("name", "x")], &clip[..clip.len() / 2]).await?;
    assert_refused(&truncated, 400, "truncated", "truncated audio");

    let short = upload_form(addr, &[("name", "x")], &wav(&tone(0.02, 24_000), 24_000)).await?;
    assert_refused(&short, 400, "minimum", "a 0.02 s clip");

    // 10 minutes at 8 kHz fits under the 10 MB upload limit, past the
    // length limit.
    let long = upload_form(addr, &[("name", "x")], &wav(&tone(600.0, 8_000), 8_000)).await?;
    assert_refused(&long, 400, "maximum", "10 minutes of audio");

    let silent = upload_form(addr, &[("name", "x")], &wav(&vec![0.0; 48_000], 24_000)).await?;
    assert_refused(&silent, 400, "silent", "silence");

    // Crafted headers (issue 28): an M4A whose stsc table claims 2^32
    // entries made the server reserve 64 GiB and abort, dropping every
    // session; a WAV with a sample rate of 0 panicked in the decoder (a
    // 500). Each is a 400 naming the problem, uploaded or inline, while the
    // request above goes on speaking.
    let stsc = m4a_with_stsc_count(u32::MAX);
    let claims = "stsc box claims 4294967295 entries of 12 bytes but holds 12 bytes";
    let r = upload_form(addr, &[("name", "x")], &stsc).await?;
    assert_refused(
        &r,
        400,
        claims,
        "an uploaded M4A claiming 2^32 stsc entries",
    );
    let r = speak(addr, json!({"ref_audio": b64(&stsc), "ref_text": REF_TEXT})).await?;
    assert_refused(&r, 400, claims, "an inline M4A claiming 2^32 stsc entries");
    let mut rate0 = wav(&tone(1.0, 24_000), 24_000);
    assert_eq!(&rate0[12..16], b"fmt ");
    rate0[24..28].copy_from_slice(&0u32.to_le_bytes());
    let r = upload_form(addr, &[("name", "x")], &rate0).await?;
    assert_refused(&r, 400, "sample rate 0 Hz", "an uploaded WAV at 0 Hz");
    let r = speak(
        addr,
        json!({"ref_audio": b64(&rate0), "ref_text": REF_TEXT}),
    )
    .await?;
    assert_refused(&r, 400, "sample rate 0 Hz", "an inline WAV at 0 Hz");

    let big = post_json(
        addr,
        "/v1/audio/voices",
        &json!({"name": "x", "audio": b64(&vec![0u8; 11 * 1024 * 1024])}),
    )
    .await?;
    assert_refused(&big, 413, "upload limit", "an 11 MB clip");

    let icl = upload_form(
        addr,
        &[("name", "x"), ("x_vector_only_mode", "false")],
        &clip,
    )
    .await?;
    assert_refused(&icl, 400, "ref_text", "ICL upload without a transcript");
    let icl = speak(addr, json!({"ref_audio": b64(&clip)})).await?;
    assert_refused(&icl, 400, "ref_text", "inline ICL without ref_text");

    for name in ["../x", "..", "a/b", "..\\x"] {
        let r = upload_form(addr, &[("name", name)], &clip).await?;
        assert_refused(&r, 400, "voice name", &format!("name {name:?}"));
        assert_eq!(r.json()["error"]["param"], "name");
    }
    let url = speak(
        addr,
        json!({"ref_audio": "https://example.com/a.wav", "ref_text": "x"}),
    )
    .await?;
    assert_refused(&url, 400, "fetches no URLs", "a URL in ref_audio");
    let file = speak(
        addr,
        json!({"ref_audio": "file:///etc/passwd", "ref_text": "x"}),
    )
    .await?;
    assert_refused(&file, 400, "fetches no URLs", "a file:// path in ref_audio");
    let no_voice = speak(addr, json!({})).await?;
    assert_refused(&no_voice, 400, "Base checkpoint", "Base without a voice");

    // Two uploads of one name at once: one wins, the other is told.
    let (a, b) = tokio::join!(
        upload_form(addr, &[("name", "twin"), ("ref_text", REF_TEXT)], &clip),
        upload_form(addr, &[("name", "TWIN"), ("ref_text", REF_TEXT)], &clip),
    );
    let mut statuses = [a?.status, b?.status];
    statuses.sort();
    assert_eq!(statuses, [201, 409], "two uploads of one name");

    assert_audio(&in_flight.await??, "the request in flight");
    let list = http(addr, "GET", "/v1/audio/voices", None, b"")
        .await?
        .json();
    let names: Vec<&str> = list["uploaded_voices"]
        .as_array()
        .context("list")?
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"keep"), "{names:?}");
    stop(s).await?;

    // A corrupt voice file at startup is skipped (and named); the others
    // are still served.
    std::fs::write(dir.0.join("broken.safetensors"), b"garbage, not a voice")?;
    let s = start(config("tiny-base", Some(&dir.0))).await?;
    let loaded = s.state().loaded().context("loaded")?;
    assert_eq!(loaded.skipped_voices.len(), 1);
    assert!(loaded.skipped_voices[0]
        .path
        .ends_with("broken.safetensors"));
    assert_audio(
        &speak(s.local_addr(), json!({"voice": "keep"})).await?,
        "next to a corrupt file",
    );
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_library_refuses_a_new_voice_but_replaces_a_stored_one() -> Result<()> {
    let dir = TempDir::new("full");
    let mut cfg = config("tiny-base", Some(&dir.0));
    cfg.max_voices = Some(1);
    let s = start(cfg).await?;
    let addr = s.local_addr();
    let clip = ref_clip();
    let one = upload_form(addr, &[("name", "one")], &clip).await?;
    assert_eq!(one.status, 201, "{}", one.message());
    let two = upload_form(addr, &[("name", "two")], &clip).await?;
    assert_refused(&two, 507, "full", "a voice past --max-voices");
    let again = upload_form(addr, &[("name", "one"), ("replace", "true")], &clip).await?;
    assert_eq!(
        again.status,
        201,
        "replacing needs no room: {}",
        again.message()
    );
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_voice_routes_need_the_token() -> Result<()> {
    let dir = TempDir::new("auth");
    let mut cfg = config("tiny-base", Some(&dir.0));
    cfg.token = Some("s3cret".into());
    let s = start(cfg).await?;
    let addr = s.local_addr();
    let r = upload_form(addr, &[("name", "x")], &ref_clip()).await?;
    assert_refused(&r, 401, "token", "an upload without the token");
    for (method, path) in [
        ("GET", "/v1/audio/voices"),
        ("GET", "/v1/audio/voices/x"),
        ("DELETE", "/v1/audio/voices/x"),
    ] {
        let r = http(addr, method, path, None, b"").await?;
        assert_refused(&r, 401, "token", &format!("{method} {path}"));
    }
    // The token goes in the header: `?token=` opens the WebSocket only.
    let r = http(addr, "GET", "/v1/audio/voices?token=s3cret", None, b"").await?;
    assert_eq!(r.status, 401);
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_families_refuse_clones_and_voicedesign_speaks_without_instructions() -> Result<()> {
    let dir = TempDir::new("cv");
    let cv = start(config("tiny-a", Some(&dir.0))).await?;
    let addr = cv.local_addr();
    let clip = ref_clip();
    let r = upload_form(addr, &[("name", "x"), ("ref_text", REF_TEXT)], &clip).await?;
    assert_refused(
        &r,
        400,
        "CustomVoice checkpoint",
        "an upload on CustomVoice",
    );
    let r = speak(addr, json!({"ref_audio": b64(&clip), "ref_text": REF_TEXT})).await?;
    assert_refused(
        &r,
        400,
        "cloning a voice needs a Base checkpoint",
        "an inline clone on CustomVoice",
    );
    // Today's OpenAI names still map onto the preset speakers.
    assert_audio(
        &speak(addr, json!({"voice": "alloy"})).await?,
        "CustomVoice alloy",
    );
    let list = http(addr, "GET", "/v1/audio/voices", None, b"")
        .await?
        .json();
    assert_eq!(list["uploaded_voices"], json!([]));
    // Every entry has the `name` voice pickers show.
    let entries = list["voices"].as_array().context("voices")?;
    assert!(!entries.is_empty());
    for e in entries {
        assert!(e["name"].as_str().is_some_and(|n| !n.is_empty()), "{e}");
    }
    assert!(
        entries
            .iter()
            .any(|e| e["id"] == "alloy" && e["kind"] == "openai"),
        "{entries:?}"
    );
    stop(cv).await?;

    let vd = start(config("tiny-vd", None)).await?;
    let addr = vd.local_addr();
    // No instructions, or empty ones, speak as the official
    // generate_voice_design does (no instruct rows).
    for body in [json!({"voice": "alloy"}), json!({"instructions": ""})] {
        assert_audio(
            &speak(addr, body.clone()).await?,
            &format!("VoiceDesign without instructions: {body}"),
        );
    }
    assert_audio(
        &speak(
            addr,
            json!({"voice": "alloy", "instructions": "A warm, low voice."}),
        )
        .await?,
        "VoiceDesign with instructions",
    );
    match realtime_speak(addr, json!({"instructions": "A bright, fast voice."})).await? {
        Ok(bytes) => assert!(bytes > 100, "realtime VoiceDesign: {bytes} bytes"),
        Err(e) => panic!("realtime VoiceDesign: {e}"),
    }
    for settings in [json!({"language": "auto"}), json!({"instructions": ""})] {
        match realtime_speak(addr, settings.clone()).await? {
            Ok(bytes) => assert!(
                bytes > 100,
                "realtime VoiceDesign {settings}: {bytes} bytes"
            ),
            Err(e) => panic!("realtime VoiceDesign {settings}: {e}"),
        }
    }
    stop(vd).await
}

/// Issue 28: a form `ref_text` over the text-field limit was a 413 with
/// `param: null`; like the clip's 413 (`audio_sample`) it names its field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_form_ref_text_is_a_413_naming_ref_text() -> Result<()> {
    let dir = TempDir::new("long-ref-text");
    let s = start(config("tiny-base", Some(&dir.0))).await?;
    let addr = s.local_addr();
    let long = "a".repeat(64 * 1024 + 1);
    let r = upload_form(addr, &[("name", "x"), ("ref_text", &long)], &ref_clip()).await?;
    assert_refused(&r, 413, "ref_text", "a 64 KiB + 1 ref_text");
    assert_eq!(r.json()["error"]["param"], "ref_text", "{}", r.message());
    // Every text field is named the same way, an unknown one included.
    let r = upload_form(
        addr,
        &[("name", "x"), ("speaker_description", &long)],
        &ref_clip(),
    )
    .await?;
    assert_eq!(r.status, 413, "{}", r.message());
    assert_eq!(r.json()["error"]["param"], "speaker_description");
    let r = upload_form(addr, &[("name", "x"), ("notes", &long)], &ref_clip()).await?;
    assert_eq!(r.status, 413, "{}", r.message());
    assert_eq!(r.json()["error"]["param"], "notes");
    stop(s).await
}

/// The next JSON message of a realtime socket (binary audio skipped).
async fn next_event<S>(ws: &mut S) -> Result<Value>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await?
            .context("socket closed")??
        {
            Message::Text(t) => return Ok(serde_json::from_str(&t)?),
            Message::Close(c) => bail!("closed: {c:?}"),
            _ => {}
        }
    }
}

/// Issue 28: a session chose a stored voice, the voice was deleted
/// (`DELETE /v1/audio/voices/NAME`), and the session's next context failed
/// with the model's "the request names no voice to clone", which says
/// nothing of the voice. It must fail saying that voice was deleted; so
/// must an HTTP request naming it (same codes as before: `context.failed`
/// `synthesis_failed`, and a 400 about `voice`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_voice_fails_later_contexts_saying_it_was_deleted() -> Result<()> {
    let dir = TempDir::new("deleted");
    let s = start(config("tiny-base", Some(&dir.0))).await?;
    let addr = s.local_addr();
    for name in ["alice", "bob"] {
        let r = upload_form(addr, &[("name", name)], &ref_clip()).await?;
        assert_eq!(r.status, 201, "{}", r.message());
    }
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/realtime")).await?;
    let send = |v: Value| Message::text(v.to_string());
    ws.send(send(json!({"type": "session.update", "session": {"voice": "Alice", "greedy": true, "max_frames": 6}}))).await?;
    loop {
        let v = next_event(&mut ws).await?;
        if v["type"] == "session.updated" {
            break;
        }
        ensure!(v["type"] == "session.created", "{v}");
    }
    let gone = http(addr, "DELETE", "/v1/audio/voices/alice", None, b"").await?;
    assert_eq!(gone.status, 200, "{}", gone.message());
    ws.send(send(
        json!({"type": "context.append", "context_id": "c", "text": "Hello there."}),
    ))
    .await?;
    ws.send(send(json!({"type": "context.end", "context_id": "c"})))
        .await?;
    let end = loop {
        let v = next_event(&mut ws).await?;
        let kind = v["type"].as_str().unwrap_or_default();
        if kind == "error" || (kind.starts_with("context.") && kind != "context.started") {
            break v;
        }
    };
    assert_eq!(end["type"], "context.failed", "{end}");
    assert_eq!(end["code"], "synthesis_failed", "{end}");
    let message = end["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"alice\"") && message.contains("deleted"),
        "the context's failure names the deleted voice: {end}"
    );
    assert!(!message.contains("no voice to clone"), "{end}");

    // The same session on another stored voice speaks again.
    ws.send(send(
        json!({"type": "session.update", "session": {"voice": "bob"}}),
    ))
    .await?;
    ws.send(send(
        json!({"type": "context.append", "context_id": "d", "text": "Hello there."}),
    ))
    .await?;
    ws.send(send(json!({"type": "context.end", "context_id": "d"})))
        .await?;
    let end = loop {
        let v = next_event(&mut ws).await?;
        if v["context_id"] == "d" && v["type"] != "context.started" {
            break v;
        }
    };
    assert_eq!(end["type"], "context.done", "{end}");

    // HTTP: a 400 about `voice`, saying so.
    let r = speak(addr, json!({"voice": "alice"})).await?;
    assert_refused(&r, 400, "deleted", "speaking a deleted voice over HTTP");
    assert!(r.message().contains("\"alice\""), "{}", r.message());
    assert_eq!(r.json()["error"]["param"], "voice");
    // A name that never was one is not called deleted.
    let r = speak(addr, json!({"voice": "carol"})).await?;
    assert_refused(&r, 400, "\"carol\"", "an unknown voice");
    assert!(!r.message().contains("was deleted"), "{}", r.message());
    stop(s).await
}

/// Issue 31: a refused clip's message said "reference audio: the reference
/// audio is ...": the library's wrapper repeated what the clip's refusal
/// says. The message (uploaded or inline) says it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_audio_errors_print_their_cause_once() -> Result<()> {
    let dir = TempDir::new("cause-once");
    let s = start(config("tiny-base", Some(&dir.0))).await?;
    let addr = s.local_addr();
    let clip = ref_clip();
    let short = wav(&tone(0.02, 24_000), 24_000);
    for (what, r) in [
        (
            "an upload",
            upload_form(addr, &[("name", "x")], &clip[..clip.len() / 2]).await?,
        ),
        (
            "an inline clip",
            speak(
                addr,
                json!({"ref_audio": b64(&short), "x_vector_only_mode": true}),
            )
            .await?,
        ),
    ] {
        assert_eq!(r.status, 400, "{what}: {}", r.message());
        let m = r.message();
        assert_eq!(m.matches("reference audio").count(), 1, "{what}: {m}");
    }
    stop(s).await
}

/// Issue 31: a voice file that does not load (here truncated) was skipped
/// at start and then `DELETE /v1/audio/voices/{name}` answered 404: it
/// could not be removed over the API. It is deleted, the reply saying it was
/// corrupt; a second DELETE is the usual 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voice_rm_removes_a_corrupt_voice_file() -> Result<()> {
    let dir = TempDir::new("corrupt-rm");
    std::fs::create_dir_all(&dir.0)?;
    std::fs::write(dir.0.join("broken.safetensors"), b"\x10\x00\x00\x00garbage")?;
    let s = start(config("tiny-base", Some(&dir.0))).await?;
    let addr = s.local_addr();
    let gone = http(addr, "DELETE", "/v1/audio/voices/broken", None, b"").await?;
    assert_eq!(gone.status, 200, "{}", gone.message());
    assert_eq!(gone.json()["deleted"], true);
    assert_eq!(gone.json()["name"], "broken");
    let why = gone.json()["corrupt"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(why.contains("not a safetensors file"), "{why}");
    assert!(!dir.0.join("broken.safetensors").exists());
    let again = http(addr, "DELETE", "/v1/audio/voices/broken", None, b"").await?;
    assert_eq!(again.status, 404, "{}", again.message());
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_voices_are_elevenlabs_cloned_voices() -> Result<()> {
    let dir = TempDir::new("elevenlabs");
    let s = start(config("tiny-base", Some(&dir.0))).await?;
    let addr = s.local_addr();
    let url = format!("data:audio/wav;base64,{}", b64(&ref_clip()));
    let r = post_json(
        addr,
        "/v1/audio/voices",
        &json!({"name": "bob", "audio": url, "speaker_description": "calm"}),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.message());

    // GET /v1/voices: the stored voice, in ElevenLabs' Voice shape.
    let list = http(addr, "GET", "/v1/voices", None, b"").await?;
    assert_eq!(list.status, 200, "{}", list.message());
    let voices = list.json()["voices"].clone();
    let bob = voices
        .as_array()
        .context("voices")?
        .iter()
        .find(|v| v["voice_id"] == "bob")
        .cloned()
        .with_context(|| format!("bob not listed: {voices}"))?;
    assert_eq!(bob["name"], "bob");
    assert_eq!(bob["category"], "cloned");
    assert_eq!(bob["description"], "calm");
    assert_eq!(bob["labels"]["mode"], "xvec");
    assert!(bob["preview_url"].is_null() && bob["settings"].is_null());
    assert!(
        bob["created_at_unix"].as_i64().is_some_and(|t| t > 0),
        "{bob}"
    );
    // ... by id, and among the v2 search's cloned voices.
    let one = http(addr, "GET", "/v1/voices/bob", None, b"").await?;
    assert_eq!(one.status, 200);
    assert_eq!(one.json(), bob);
    let page = http(
        addr,
        "GET",
        "/v2/voices?category=cloned&search=CALM",
        None,
        b"",
    )
    .await?
    .json();
    assert_eq!(page["total_count"], 1, "{page}");
    assert_eq!(page["voices"][0]["voice_id"], "bob");
    // It speaks on the ElevenLabs speech route under that id.
    let r = http(
        addr,
        "POST",
        "/v1/text-to-speech/bob?output_format=pcm_24000",
        Some("application/json"),
        json!({"text": "Hi."}).to_string().as_bytes(),
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.message());
    // Deleted, it is a 404 in ElevenLabs' shape.
    let r = http(addr, "DELETE", "/v1/audio/voices/bob", None, b"").await?;
    assert_eq!(r.status, 200);
    let r = http(addr, "GET", "/v1/voices/bob", None, b"").await?;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json()["detail"]["status"],
        "voice_not_found",
        "{}",
        r.message()
    );
    stop(s).await
}
