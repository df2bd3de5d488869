//! The browser page (`transport/web/`): served at `/`, `/app.js`,
//! `/worklet.js` and `/style.css` with the right content types and a strict
//! CSP, without a token (a page load carries no `Authorization` header)
//! while every API route still needs one; and the page's script speaks only
//! message types the protocol knows. The page itself runs in headless
//! Chromium in `tests/python/test_browser.py`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tts_transport::protocol::CLIENT_TYPES;
use tts_transport::web;
use tts_transport::{ServeConfig, Server};

const WAIT: Duration = Duration::from_secs(60);

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request over raw TCP (`Connection: close`; the static files
/// are sent with a length, not chunked).
async fn get(addr: SocketAddr, method: &str, path: &str) -> Result<Reply> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut raw)).await??;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .context("no status line")?
        .parse()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let body = String::from_utf8(raw[split + 4..].to_vec())?;
    Ok(Reply {
        status,
        headers,
        body,
    })
}

async fn start_with_token() -> Result<Server> {
    let mut cfg = ServeConfig::new(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a"),
    );
    cfg.addr = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.token = Some("s3cret".into());
    let s = Server::start(cfg).await?;
    tokio::time::timeout(WAIT, s.ready()).await??;
    Ok(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_without_a_token_with_its_types_and_csp() -> Result<()> {
    let server = start_with_token().await?;
    let addr = server.local_addr();
    for (path, want_type, body) in [
        ("/", "text/html; charset=utf-8", web::INDEX_HTML),
        ("/app.js", "text/javascript; charset=utf-8", web::APP_JS),
        (
            "/worklet.js",
            "text/javascript; charset=utf-8",
            web::WORKLET_JS,
        ),
        ("/style.css", "text/css; charset=utf-8", web::STYLE_CSS),
    ] {
        let r = get(addr, "GET", path).await?;
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-type"), Some(want_type), "{path}");
        assert_eq!(r.body, body, "{path}");
        assert!(!r.body.is_empty(), "{path}");
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(csp.contains("default-src 'none'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe"), "{path}: {csp}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
        // HEAD answers the same headers with no body.
        let h = get(addr, "HEAD", path).await?;
        assert_eq!(h.status, 200, "HEAD {path}");
        assert_eq!(h.header("content-type"), Some(want_type));
        assert!(h.body.is_empty());
    }
    // The API stays behind the token, with or without the page.
    assert_eq!(get(addr, "GET", "/v1/audio/voices").await?.status, 401);
    assert_eq!(get(addr, "GET", "/metrics").await?.status, 401);
    // `?token=` opens the WebSocket only, not the HTTP API.
    assert_eq!(
        get(addr, "GET", "/v1/audio/voices?token=s3cret")
            .await?
            .status,
        401
    );
    assert_eq!(get(addr, "GET", "/nope.js").await?.status, 404);
    assert_eq!(get(addr, "POST", "/").await?.status, 405);
    server.shutdown();
    tokio::time::timeout(WAIT, server.wait()).await??;
    Ok(())
}

#[test]
fn the_page_loads_only_its_own_files_and_speaks_known_message_types() {
    // Every resource is relative to the page (works behind a path prefix)
    // and served here: nothing from the network.
    for needle in ["src=\"app.js\"", "href=\"style.css\""] {
        assert!(
            web::INDEX_HTML.contains(needle),
            "index.html lacks {needle}"
        );
    }
    for text in [
        web::INDEX_HTML,
        web::APP_JS,
        web::WORKLET_JS,
        web::STYLE_CSS,
    ] {
        assert!(!text.contains("http://") && !text.contains("https://"));
        assert!(!text.contains("//cdn") && !text.contains("@import"));
    }
    assert!(web::APP_JS.contains("addModule(new URL('worklet.js'"));
    assert!(web::WORKLET_JS.contains("registerProcessor('tts-jitter-buffer'"));
    assert!(web::APP_JS.contains("new AudioWorkletNode(ac, 'tts-jitter-buffer'"));
    // Every message the page sends is a client type of the protocol, and it
    // uses the ones the page is for.
    let sent: Vec<&str> = web::APP_JS
        .split("send({ type: '")
        .skip(1)
        .map(|rest| rest.split('\'').next().unwrap_or_default())
        .collect();
    for t in &sent {
        assert!(CLIENT_TYPES.contains(t), "app.js sends unknown type {t:?}");
    }
    for t in [
        "session.update",
        "context.append",
        "context.end",
        "context.cancel",
        "audio.ack",
    ] {
        assert!(sent.contains(&t), "app.js never sends {t}");
    }
}

/// Item 5 of "the first five minutes": the page showed an Instructions box
/// the loaded checkpoint refuses. What the page reads (`GET
/// /v1/audio/voices`) says what instructions do on the checkpoint — `none`
/// (0.6B CustomVoice, Base), `style` (1.7B CustomVoice), `voice` (the
/// VoiceDesign voice's description) — and the page hides the box
/// where they do nothing (the browser test sees it hidden and shown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_hides_instructions_the_checkpoint_cannot_follow() -> Result<()> {
    for (fixture, family, instructions) in [
        ("tiny-a", "CustomVoice", "none"),
        ("tiny-base", "Base", "none"),
        ("tiny-vd", "VoiceDesign", "voice"),
    ] {
        let mut cfg = ServeConfig::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures")
                .join(fixture),
        );
        cfg.addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let s = Server::start(cfg).await?;
        tokio::time::timeout(WAIT, s.ready()).await??;
        let r = get(s.local_addr(), "GET", "/v1/audio/voices").await?;
        assert_eq!(r.status, 200, "{fixture}");
        let v: serde_json::Value = serde_json::from_str(&r.body)?;
        assert_eq!(v["family"], family, "{fixture}");
        assert_eq!(v["instructions"], instructions, "{fixture}");
        s.shutdown();
        tokio::time::timeout(WAIT, s.wait()).await??;
    }
    // The page reads it and hides the box (and its label) when it is `none`.
    assert!(
        web::APP_JS.contains("v.instructions"),
        "app.js never reads it"
    );
    assert!(web::INDEX_HTML.contains("id=\"instruct-field\""));
    assert!(web::APP_JS.contains("$('instruct-field').hidden"));
    Ok(())
}
