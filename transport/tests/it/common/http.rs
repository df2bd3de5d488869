//! A raw HTTP/1.1 client over loopback TCP (`Connection: close`, chunked
//! bodies decoded, a cut chunked body reported as such): what the server
//! must speak, with nothing in between.

use std::net::SocketAddr;

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::WAIT;

pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// A chunked body that ended without its last (empty) chunk: the
    /// server cut the transfer.
    pub cut: bool,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn body_str(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap_or("")
    }

    /// `error.message` of OpenAI's JSON error shape, or why it is not one.
    pub fn error_message(&self) -> Result<String> {
        anyhow::ensure!(
            self.header("content-type")
                .is_some_and(|c| c.starts_with("application/json")),
            "status {}: not JSON: {:?}",
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        let j = self.json();
        j["error"]["message"]
            .as_str()
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .with_context(|| format!("not the OpenAI error shape: {j}"))
    }
}

/// One request; `body` sent as is with its length (and `content_type`).
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<HttpResponse> {
    let mut s = TcpStream::connect(addr).await?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await?;
    // The server may answer (and close) before the whole body is in.
    let _ = s.write_all(body).await;
    let mut raw = Vec::new();
    // A reset after the answer still leaves the answer read so far.
    tokio::time::timeout(WAIT, read_until_closed(&mut s, &mut raw))
        .await
        .context("the server held the connection")?;
    parse(&raw)
}

async fn read_until_closed(s: &mut TcpStream, raw: &mut Vec<u8>) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = s.read(&mut buf).await {
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

/// One request with an optional JSON body (its `Content-Type` set when
/// given); a cut chunked body is an error, for callers that expect whole
/// answers.
pub async fn json_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Result<HttpResponse> {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut h = headers.to_vec();
    if !body.is_empty() {
        h.push(("Content-Type", "application/json"));
    }
    let r = request(addr, method, path, &h, body.as_bytes()).await?;
    ensure!(!r.cut, "{method} {path}: the chunked body was cut");
    Ok(r)
}

/// A JSON POST.
pub async fn post_json(addr: SocketAddr, path: &str, body: &Value) -> Result<HttpResponse> {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
    .await
}

pub fn parse(raw: &[u8]) -> Result<HttpResponse> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .context("no status line")?
        .parse()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let (body, cut) = if chunked {
        dechunk(rest)
    } else {
        (rest.to_vec(), false)
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
        cut,
    })
}

/// The chunks' data, and whether the last chunk never came.
fn dechunk(mut rest: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (out, true);
        };
        let Some(n) = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.trim(), 16).ok())
        else {
            return (out, true);
        };
        rest = &rest[eol + 2..];
        if n == 0 {
            return (out, false);
        }
        if rest.len() < n + 2 {
            out.extend_from_slice(&rest[..rest.len().min(n)]);
            return (out, true);
        }
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n + 2..];
    }
}
