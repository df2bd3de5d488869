//! OpenAI compatibility on loopback (127.0.0.1:0, the tiny-a fixture: a
//! 0.6B CustomVoice checkpoint with speakers ryan, serena, eric, dylan):
//! unknown request fields refused as OpenAI refuses them, `instructions`
//! refused where the checkpoint cannot follow them, the voice map
//! overridable and listed, CORS only where configured, request ids in
//! headers and error bodies, and the build-info metric.

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use crate::common;

use common::http::json_request as http;

use common::{start, stop};
use tts_transport::protocol::{ErrorCode, ServerMessage};

fn config() -> tts_transport::ServeConfig {
    common::config(Duration::from_secs(5))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_field_is_refused_as_openai_refuses_it() -> Result<()> {
    let s = start(config()).await?;
    let addr = s.local_addr();
    let r = http(
        addr,
        "POST",
        "/v1/audio/speech",
        &[("X-Request-Id", "client-id-7")],
        Some(&json!({"model": "tts-1", "input": "Hello.", "voice": "alloy", "langauge": "en"})),
    )
    .await?;
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    let e = &r.json()["error"];
    assert_eq!(e["type"], "invalid_request_error");
    assert_eq!(e["param"], "langauge");
    assert_eq!(e["code"], "unknown_parameter");
    let msg = e["message"].as_str().unwrap_or_default();
    assert!(msg.contains("Unknown parameter: 'langauge'"), "{msg}");
    assert!(msg.contains("Did you mean 'language'?"), "{msg}");
    // The client's request id, answered in the header and the body.
    assert_eq!(r.header("x-request-id"), Some("client-id-7"));
    assert_eq!(e["request_id"], "client-id-7");
    // Without one, the server makes one, the same in both places.
    let r = http(
        addr,
        "POST",
        "/v1/audio/speech",
        &[],
        Some(&json!({"input": "Hello.", "speeed": 1.0})),
    )
    .await?;
    assert_eq!(r.status, 400);
    let id = r.header("x-request-id").context("an id")?.to_string();
    assert!(id.starts_with("req_"), "{id}");
    assert_eq!(r.json()["error"]["request_id"], id.as_str());
    // Known fields still work.
    let ok = http(
        addr,
        "POST",
        "/v1/audio/speech",
        &[],
        Some(&json!({"input": "Hi.", "voice": "ryan", "response_format": "pcm", "max_frames": 4})),
    )
    .await?;
    assert_eq!(ok.status, 200);
    assert!(ok.header("x-request-id").is_some());
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instructions_on_a_0_6b_custom_voice_checkpoint_are_refused_clearly_on_http_and_realtime(
) -> Result<()> {
    let s = start(config()).await?;
    let r = http(
        s.local_addr(),
        "POST",
        "/v1/audio/speech",
        &[],
        Some(&json!({"input": "Hello.", "voice": "ryan", "instructions": "Speak softly."})),
    )
    .await?;
    assert_eq!(r.status, 400);
    let e = &r.json()["error"];
    assert_eq!(e["param"], "instructions");
    let msg = e["message"].as_str().unwrap_or_default();
    assert!(msg.contains("0.6B CustomVoice"), "{msg}");
    assert!(msg.contains("VoiceDesign and 1.7B CustomVoice"), "{msg}");
    // An empty instruction is no instruction.
    let ok = http(
        s.local_addr(),
        "POST",
        "/v1/audio/speech",
        &[],
        Some(&json!({"input": "Hi.", "voice": "ryan", "instructions": "", "response_format": "pcm", "max_frames": 4})),
    )
    .await?;
    assert_eq!(ok.status, 200);
    // The realtime socket refuses them the same way, at `session.update`.
    let mut ws = common::ws::connect(s.local_addr()).await?;
    let update =
        |instruct: &str| json!({"type": "session.update", "session": {"instruct": instruct}});
    common::ws::send(&mut ws, update("Speak softly.")).await?;
    match common::ws::next(&mut ws).await? {
        common::ws::Got::Msg(ServerMessage::Error { code, message, .. }) => {
            assert_eq!(code, ErrorCode::InvalidSetting);
            assert!(message.contains("0.6B CustomVoice"), "{message}");
        }
        other => anyhow::bail!("instruct on 0.6B over realtime: {other:?}"),
    }
    common::ws::send(&mut ws, update("")).await?;
    match common::ws::next(&mut ws).await? {
        common::ws::Got::Msg(ServerMessage::SessionUpdated { .. }) => {}
        other => anyhow::bail!("a blank instruct: {other:?}"),
    }
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_voice_map_is_overridable_and_listed_and_ready_reports_a_failed_load() -> Result<()> {
    let mut c = config();
    c.voice_map = vec![("alloy".into(), "ryan".into())];
    let s = start(c).await?;
    let r = http(s.local_addr(), "GET", "/v1/audio/voices", &[], None).await?;
    assert_eq!(r.status, 200);
    let voices = r.json()["voices"].as_array().cloned().unwrap_or_default();
    let entry = |id: &str| {
        voices
            .iter()
            .find(|v| v["id"] == id && v["kind"] == "openai")
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(entry("alloy")["speaker"], "ryan");
    assert_eq!(entry("alloy")["mapped"], "config");
    assert_eq!(entry("nova")["speaker"], "serena");
    assert_eq!(entry("nova")["mapped"], "default");
    stop(s).await?;

    // A speaker the checkpoint lacks fails the load, naming its speakers
    // (and `ready` reports it even once the stopped server has returned:
    // it used to wait forever).
    let mut c = config();
    c.voice_map = vec![("alloy".into(), "vivian".into())];
    let s = tts_transport::Server::start(c).await?;
    let e = tokio::time::timeout(common::WAIT, s.ready())
        .await?
        .expect_err("load refused");
    let m = e.to_string();
    assert!(m.contains("no speaker \"vivian\""), "{m}");
    assert!(m.contains("ryan"), "{m}");
    let _ = tokio::time::timeout(common::WAIT, s.wait()).await?;

    // A name that is not OpenAI's is refused before anything starts.
    let mut c = config();
    c.voice_map = vec![("bob".into(), "ryan".into())];
    let e = tts_transport::Server::start(c)
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("not an OpenAI voice"), "{e}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_answers_only_the_configured_origins() -> Result<()> {
    // None by default: no CORS headers, and OPTIONS is not served.
    let s = start(config()).await?;
    let addr = s.local_addr();
    let r = http(
        addr,
        "GET",
        "/v1/models",
        &[("Origin", "http://app.test")],
        None,
    )
    .await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), None);
    let pre = http(
        addr,
        "OPTIONS",
        "/v1/audio/speech",
        &[
            ("Origin", "http://app.test"),
            ("Access-Control-Request-Method", "POST"),
        ],
        None,
    )
    .await?;
    assert_eq!(pre.status, 405);
    stop(s).await?;

    let mut c = config();
    c.cors_origins = vec!["http://app.test".into()];
    c.token = Some("sesame".into());
    let s = start(c).await?;
    let addr = s.local_addr();
    // The preflight is answered before the token check.
    let pre = http(
        addr,
        "OPTIONS",
        "/v1/audio/speech",
        &[
            ("Origin", "http://app.test"),
            ("Access-Control-Request-Method", "POST"),
            (
                "Access-Control-Request-Headers",
                "authorization, content-type",
            ),
        ],
        None,
    )
    .await?;
    assert_eq!(pre.status, 204);
    assert_eq!(
        pre.header("access-control-allow-origin"),
        Some("http://app.test")
    );
    assert!(pre
        .header("access-control-allow-methods")
        .is_some_and(|m| m.contains("POST")));
    assert_eq!(
        pre.header("access-control-allow-headers"),
        Some("authorization, content-type")
    );
    let r = http(
        addr,
        "GET",
        "/v1/models",
        &[
            ("Origin", "http://app.test"),
            ("Authorization", "Bearer sesame"),
        ],
        None,
    )
    .await?;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.test")
    );
    assert!(r
        .header("access-control-expose-headers")
        .is_some_and(|h| h.contains("x-request-id")));
    // A refusal carries them too, so the page can read why.
    let r = http(
        addr,
        "GET",
        "/v1/models",
        &[("Origin", "http://app.test")],
        None,
    )
    .await?;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.test")
    );
    // Another origin gets nothing.
    let r = http(
        addr,
        "GET",
        "/v1/models",
        &[
            ("Origin", "http://evil.test"),
            ("Authorization", "Bearer sesame"),
        ],
        None,
    )
    .await?;
    assert_eq!(r.header("access-control-allow-origin"), None);
    stop(s).await?;

    // `*`: any origin.
    let mut c = config();
    c.cors_origins = vec!["*".into()];
    let s = start(c).await?;
    let r = http(
        s.local_addr(),
        "GET",
        "/health",
        &[("Origin", "http://x.test")],
        None,
    )
    .await?;
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    stop(s).await?;

    let mut c = config();
    c.cors_origins = vec!["app.test".into()];
    let e = tts_transport::Server::start(c)
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("scheme://host"), "{e}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_carry_the_build_info() -> Result<()> {
    let mut c = config();
    c.git_revision = Some("abc123".into());
    let s = start(c).await?;
    let r = http(s.local_addr(), "GET", "/metrics", &[], None).await?;
    let text = String::from_utf8_lossy(&r.body);
    let line = text
        .lines()
        .find(|l| l.starts_with("tts_build_info{"))
        .context("tts_build_info")?;
    assert!(line.contains("git=\"abc123\""), "{line}");
    assert!(line.contains("precision=\"f32,f32,f32\""), "{line}");
    assert!(line.contains("model=\"tiny-a\""), "{line}");
    assert!(line.ends_with("} 1"), "{line}");

    // A scraper asking for OpenMetrics gets the request ids as exemplars.
    let ok = http(
        s.local_addr(),
        "POST",
        "/v1/audio/speech",
        &[("X-Request-Id", "exemplar-1")],
        Some(&json!({"input": "Hi.", "voice": "ryan", "response_format": "pcm", "max_frames": 4, "stream": false})),
    )
    .await?;
    assert_eq!(ok.status, 200);
    let om = http(
        s.local_addr(),
        "GET",
        "/metrics",
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
        )],
        None,
    )
    .await?;
    assert!(om
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/openmetrics-text")));
    let text = String::from_utf8_lossy(&om.body);
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("tts_ttfp_seconds_bucket")
                && l.contains("# {request_id=\"exemplar-1\"}")),
        "{text}"
    );
    stop(s).await
}

/// Item 3 of "the first five minutes": `/v1/models` listed only the
/// checkpoint, and `GET /v1/models/tts-1` was a 404. OpenAI's model names
/// are listed as aliases of the loaded checkpoint, each retrievable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_the_openai_model_names_as_aliases_of_the_checkpoint() -> Result<()> {
    let s = start(config()).await?;
    let addr = s.local_addr();
    let r = http(addr, "GET", "/v1/models", &[], None).await?;
    assert_eq!(r.status, 200);
    let list = r.json();
    assert_eq!(list["object"], "list");
    let data = list["data"].as_array().context("data")?;
    let ids: Vec<&str> = data.iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["tiny-a", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]);
    for m in data {
        assert_eq!(m["object"], "model", "{m}");
        assert!(m["created"].is_u64(), "{m}");
        assert_eq!(m["owned_by"], "tts-rt", "{m}");
        // Each names the checkpoint that answers it.
        assert_eq!(m["root"], "tiny-a", "{m}");
    }
    for id in ["tiny-a", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"] {
        let r = http(addr, "GET", &format!("/v1/models/{id}"), &[], None).await?;
        assert_eq!(r.status, 200, "{id}");
        let m = r.json();
        assert_eq!(m["id"], id);
        assert_eq!(m["object"], "model");
        assert_eq!(m["root"], "tiny-a");
    }
    let r = http(addr, "GET", "/v1/models/gpt-4o", &[], None).await?;
    assert_eq!(r.status, 404);
    let e = &r.json()["error"];
    assert_eq!(e["type"], "invalid_request_error");
    assert_eq!(e["code"], "model_not_found");
    assert_eq!(e["param"], "model");
    let msg = e["message"].as_str().unwrap_or_default();
    assert!(msg.contains("'gpt-4o'") && msg.contains("tts-1"), "{msg}");
    stop(s).await
}

/// Item 4 of "the first five minutes": what OpenAI clients send by default
/// and this checkpoint cannot honour is accepted, and the response says
/// what was ignored. `instructions` from a `gpt-4o-mini-tts` client on a
/// checkpoint that cannot follow them are ignored (`X-TTS-Ignored:
/// instructions`); an explicit instruction to another model is still
/// refused. On a Base checkpoint an OpenAI voice name speaks the stored
/// voice of that name, and without one is refused saying how to make it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_defaults_the_checkpoint_cannot_honour_are_accepted_and_named() -> Result<()> {
    let mini = |extra: Value| {
        let mut b = json!({
            "model": "gpt-4o-mini-tts",
            "input": "Hello.",
            "voice": "alloy",
            "instructions": "Speak in a cheerful and positive tone.",
            "response_format": "pcm",
            "max_frames": 4,
        });
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    // 0.6B CustomVoice: cannot follow instructions.
    let s = start(config()).await?;
    let addr = s.local_addr();
    let r = http(
        addr,
        "POST",
        "/v1/audio/speech",
        &[],
        Some(&mini(json!({}))),
    )
    .await?;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("x-tts-ignored"), Some("instructions"));
    assert!(!r.body.is_empty());
    // Nothing ignored, no header.
    let r = http(
        addr,
        "POST",
        "/v1/audio/speech",
        &[],
        Some(&mini(json!({"instructions": ""}))),
    )
    .await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-tts-ignored"), None);
    // Instructions sent to a model that has none are the caller's choice:
    // still refused, as with no model at all.
    for model in ["tts-1", "tiny-a"] {
        let r = http(
            addr,
            "POST",
            "/v1/audio/speech",
            &[],
            Some(&mini(json!({"model": model}))),
        )
        .await?;
        assert_eq!(r.status, 400, "{model}");
        assert_eq!(r.json()["error"]["param"], "instructions");
    }
    stop(s).await?;

    // Base: no preset speakers, and instructions it cannot follow.
    let voices = std::env::temp_dir().join(format!("tts-rt-first5-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&voices);
    let mut c = config();
    c.model_dir = common::fixture().with_file_name("tiny-base");
    c.voices_dir = Some(voices.clone());
    let s = start(c).await?;
    let addr = s.local_addr();
    let r = http(
        addr,
        "POST",
        "/v1/audio/speech",
        &[],
        Some(&mini(json!({}))),
    )
    .await?;
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    let e = &r.json()["error"];
    assert_eq!(e["param"], "voice");
    let msg = e["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("OpenAI voice") && msg.contains("no preset voices"),
        "{msg}"
    );
    assert!(
        msg.contains("POST /v1/audio/voices") && msg.contains("name \"alloy\""),
        "says how to make alloy speak: {msg}"
    );
    // Once a voice named alloy is stored, the default request speaks it.
    let clip = std::fs::read(common::fixture().with_file_name("goldens/tiny-base/ref_a.wav"))?;
    use base64::Engine as _;
    let url = format!(
        "data:audio/wav;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&clip)
    );
    let r = http(
        addr,
        "POST",
        "/v1/audio/voices",
        &[],
        Some(&json!({"name": "Alloy", "audio": url})),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = http(
        addr,
        "POST",
        "/v1/audio/speech",
        &[],
        Some(&mini(json!({}))),
    )
    .await?;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("x-tts-ignored"), Some("instructions"));
    stop(s).await?;
    let _ = std::fs::remove_dir_all(&voices);

    // VoiceDesign: an OpenAI voice name means nothing there, and is named.
    let mut c = config();
    c.model_dir = common::fixture().with_file_name("tiny-vd");
    let s = start(c).await?;
    let r = http(
        s.local_addr(),
        "POST",
        "/v1/audio/speech",
        &[],
        Some(&mini(json!({"instructions": "A warm, low voice."}))),
    )
    .await?;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("x-tts-ignored"), Some("voice"));
    stop(s).await
}
