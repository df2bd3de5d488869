//! TLS on the main port (`ServeConfig::tls`), end to end on loopback with
//! the tiny-a fixture and a self-signed certificate for 127.0.0.1
//! (tests/fixtures/tls, valid for a century): HTTPS and WSS (a
//! hand-upgraded dialect socket and `/v1/realtime`) through a rustls
//! client that trusts only that certificate; a plain-HTTP request and a
//! client that never handshakes cost one connection each and nothing
//! else; and every bad certificate or key file is refused at start,
//! naming the file. Timeouts only turn a hang into a failure.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::Message;
use tts_transport::{ServeConfig, TlsFiles, TransportError};

use crate::common;

use common::{start, stop, WAIT};

fn tls_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

fn files() -> TlsFiles {
    TlsFiles {
        cert: tls_fixture("cert.pem"),
        key: tls_fixture("key.pem"),
    }
}

fn config() -> ServeConfig {
    let mut c = common::config(Duration::from_secs(20));
    c.tls = Some(files());
    c
}

/// A client that trusts only the test certificate.
fn connector() -> Result<TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(tls_fixture("cert.pem"))? {
        roots.add(c?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

async fn tls_connect(addr: SocketAddr) -> Result<Tls> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::IpAddress(addr.ip().into());
    let s = tokio::time::timeout(WAIT, connector()?.connect(name, tcp))
        .await
        .context("TLS handshake hung")??;
    Ok(s)
}

/// After the handshake the server sends nothing until the client's first
/// request: no TLS 1.3 session tickets. A Python `websockets` sync client
/// (the ElevenLabs SDK's realtime socket) reads on a thread of its own
/// while its caller writes the upgrade; tickets arriving then made both
/// threads use one OpenSSL connection at once, and now and then the
/// request was lost (no 101; a timeout 10 s later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_says_nothing_between_the_handshake_and_the_first_request() -> Result<()> {
    let s = start(config()).await?;
    let addr = s.local_addr();
    let mut c = tls_connect(addr).await?;
    ensure!(
        c.get_ref().1.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3),
        "TLS 1.3 negotiated"
    );
    let mut b = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(500), c.get_ref().0.peek(&mut b)).await;
    ensure!(
        early.is_err(),
        "the server sent bytes after the handshake, before any request: {early:?}"
    );
    // The connection still serves.
    c.write_all(
        format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(WAIT, c.read_to_end(&mut raw)).await;
    ensure!(
        common::http::parse(&raw)?.status == 200,
        "health over the same connection"
    );
    stop(s).await
}

/// One HTTPS request (`Connection: close`); the whole answer, parsed.
async fn https(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<common::http::HttpResponse> {
    let mut s = tls_connect(addr).await?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(req.as_bytes()).await?;
    s.write_all(body).await?;
    let mut raw = Vec::new();
    // The server closes after its answer; a missing close_notify is not
    // our concern here (the body's length or chunks say it is whole).
    let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut raw))
        .await
        .context("the server held the connection")?;
    common::http::parse(&raw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_wss_on_one_port() -> Result<()> {
    let s = start(config()).await?;
    let addr = s.local_addr();

    let r = https(addr, "GET", "/health", &[], b"").await?;
    ensure!(r.status == 200, "{} {}", r.status, r.body_str());
    let r = https(addr, "GET", "/v1/voices", &[], b"").await?;
    ensure!(r.status == 200, "{} {}", r.status, r.body_str());
    ensure!(
        r.json()["voices"].as_array().is_some_and(|v| !v.is_empty()),
        "{}",
        r.body_str()
    );
    // Speech over HTTPS: the ElevenLabs one-shot route, raw PCM.
    let body = json!({"text": "Hello there."}).to_string();
    let r = https(
        addr,
        "POST",
        "/v1/text-to-speech/ryan?output_format=pcm_24000",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .await?;
    ensure!(
        r.status == 200 && !r.cut && r.body.len() > 2400,
        "{} {} bytes",
        r.status,
        r.body.len()
    );

    // WSS: ElevenLabs' stream-input, upgraded by hand over the TLS stream.
    let tls = tls_connect(addr).await?;
    let url = format!("wss://{addr}/v1/text-to-speech/ryan/stream-input?output_format=pcm_16000");
    let (mut ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::client_async(url, tls))
        .await
        .context("upgrade hung")??;
    for m in [
        json!({"text": " "}),
        json!({"text": "Hello over TLS. "}),
        json!({"text": ""}),
    ] {
        ws.send(Message::Text(m.to_string().into())).await?;
    }
    let mut audio = 0usize;
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await? {
            Some(Ok(Message::Text(t))) => {
                let m: Value = serde_json::from_str(t.as_str())?;
                if let Some(a) = m["audio"].as_str() {
                    audio += a.len();
                }
                if m["isFinal"] == json!(true) {
                    break;
                }
                ensure!(m.get("error").is_none(), "{m}");
            }
            Some(Ok(_)) => continue,
            other => bail!("socket ended before isFinal: {other:?}"),
        }
    }
    ensure!(audio > 0, "no audio over WSS");

    // And the native realtime socket: its first message.
    let tls = tls_connect(addr).await?;
    let (mut ws, _) = tokio::time::timeout(
        WAIT,
        tokio_tungstenite::client_async(format!("wss://{addr}/v1/realtime"), tls),
    )
    .await??;
    match tokio::time::timeout(WAIT, ws.next()).await? {
        Some(Ok(Message::Text(t))) => ensure!(t.as_str().contains("session.created"), "{t}"),
        other => bail!("first realtime message: {other:?}"),
    }
    drop(ws);
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_on_the_tls_port_is_told_to_use_https() -> Result<()> {
    let s = start(config()).await?;
    let addr = s.local_addr();
    let r = common::http::request(addr, "GET", "/health", &[], b"").await?;
    ensure!(r.status == 400, "{} {}", r.status, r.body_str());
    ensure!(r.body_str().contains("https://"), "{}", r.body_str());
    // A client that gives up at once, mid-hello, and one that sends junk.
    for junk in [&[0x16u8, 0x03][..], b"\x00\x01\x02\x03 not tls at all"] {
        let mut t = TcpStream::connect(addr).await?;
        t.write_all(junk).await?;
        if junk.len() == 2 {
            drop(t);
        } else {
            let mut sink = Vec::new();
            let _ = tokio::time::timeout(WAIT, t.read_to_end(&mut sink)).await?;
        }
    }
    // The server is none the worse.
    let r = https(addr, "GET", "/health", &[], b"").await?;
    ensure!(r.status == 200, "{}", r.status);
    stop(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_handshakes_blocks_nothing_and_is_closed() -> Result<()> {
    // Other connections are accepted while it waits ...
    let mut c = config();
    c.header_read_timeout = Duration::from_secs(30);
    let s = start(c).await?;
    let idle = TcpStream::connect(s.local_addr()).await?;
    let r = https(s.local_addr(), "GET", "/health", &[], b"").await?;
    ensure!(r.status == 200, "{}", r.status);
    drop(idle);
    stop(s).await?;

    // ... and with one connection allowed, its slot comes back once the
    // handshake deadline (the header timeout) has passed.
    let mut c = config();
    c.header_read_timeout = Duration::from_millis(300);
    c.max_connections = 1;
    let s = start(c).await?;
    let mut idle = TcpStream::connect(s.local_addr()).await?;
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(WAIT, idle.read(&mut buf))
        .await
        .context("the server never closed a silent connection")?
        .unwrap_or(0);
    ensure!(n == 0, "the silent connection got {n} bytes");
    // The slot is released just after the socket closes: retry until then.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match https(s.local_addr(), "GET", "/health", &[], b"").await {
            Ok(r) if r.status == 200 => break,
            other if tokio::time::Instant::now() > deadline => {
                bail!("the slot never came back: {:?}", other.map(|r| r.status))
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    stop(s).await
}

/// `Server::start`'s refusal of `files`, as text.
async fn refusal(files: TlsFiles) -> String {
    let mut c = common::config(Duration::from_secs(1));
    c.tls = Some(files);
    match tts_transport::Server::start(c).await {
        Ok(s) => {
            s.shutdown();
            "started".into()
        }
        Err(e) => {
            assert!(matches!(e, TransportError::Tls { .. }), "{e:?}");
            e.to_string()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_certificate_and_key_files_are_refused_naming_the_file() -> Result<()> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tls_bad_files");
    std::fs::create_dir_all(&dir)?;
    let path = |n: &str| dir.join(n);
    std::fs::write(path("junk.pem"), "this is not a certificate\n")?;
    std::fs::write(
        path("empty.pem"),
        "-----BEGIN SOMETHING ELSE-----\nAAAA\n-----END SOMETHING ELSE-----\n",
    )?;
    let cert = tls_fixture("cert.pem");
    let key = tls_fixture("key.pem");
    let other = tls_fixture("other-key.pem");
    let missing = path("missing.pem");
    let junk = path("junk.pem");
    // (cert, key, the file named, its flag, what is said of it)
    let cases = [
        (
            &cert,
            &other,
            &other,
            "--tls-key",
            "is not the private key of the certificate",
        ),
        (&missing, &key, &missing, "--tls-cert", "cannot be read"),
        (&cert, &missing, &missing, "--tls-key", "cannot be read"),
        (&junk, &key, &junk, "--tls-cert", "is not PEM"),
        (&cert, &junk, &junk, "--tls-key", "is not PEM"),
        // A key file given as the certificate, and the other way round.
        (&key, &key, &key, "--tls-cert", "holds no certificate"),
        (&cert, &cert, &cert, "--tls-key", "holds no private key"),
    ];
    for (c, k, named, flag, says) in cases {
        let e = refusal(TlsFiles {
            cert: c.clone(),
            key: k.clone(),
        })
        .await;
        ensure!(
            e.contains(&format!("{flag} {}", named.display())) && e.contains(says),
            "cert {c:?} key {k:?}: {e}"
        );
    }
    let e = refusal(TlsFiles {
        cert: path("empty.pem"),
        key,
    })
    .await;
    ensure!(e.contains("holds no certificate"), "{e}");
    Ok(())
}
