//! Request ids and the one log line per HTTP request.
//!
//! Every HTTP request gets an id: the client's `X-Request-Id` when it sent
//! a usable one (1 to 128 visible ASCII characters), else a fresh
//! `req_<24 hex>`. The id is answered in the `X-Request-Id` response
//! header, put in every JSON error body (`error.request_id`, through a
//! task-local the error renderer reads), carried by the realtime session's
//! span, and logged.
//!
//! The log line (`tracing` event, target `tts_transport::http`) is written
//! when the response leaves, except for a speech response that streams: its
//! handler marks the response [`Deferred`] and logs the line itself when the
//! audio is finished (then it knows the audio seconds, ttfp and rtf). Its
//! `status` is the one the client was answered with: a stream that failed
//! before its first audio was answered 500 (503 when shutting down), one
//! that failed after it 200 with a cut body, and a client that left before
//! any answer is logged 499 (it got none).
//! Probes (`/health`, `/ready`, `/metrics`) log at debug, so a scraper does
//! not fill the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

/// The request's id (request extension, and task-local while the handler
/// runs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestId(pub String);

/// Response extension: the handler logs this request's line itself, later.
#[derive(Clone, Copy, Debug)]
pub struct Deferred;

/// The request id header, in and out.
pub const HEADER: &str = "x-request-id";
/// Longest client id kept.
const MAX_ID: usize = 128;

tokio::task_local! {
    static CURRENT: String;
}

/// The id of the request being handled on this task, if any.
pub fn current() -> Option<String> {
    CURRENT.try_with(|id| id.clone()).ok()
}

/// The client's id when usable, else a new one.
fn accept_or_make(sent: Option<&HeaderValue>) -> String {
    let usable = sent
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= MAX_ID && s.bytes().all(|b| b.is_ascii_graphic()));
    match usable {
        Some(s) => s.to_string(),
        None => new_id(),
    }
}

/// `req_` and 24 hex digits: a process-random seed (std's hasher keys) and a
/// counter, so ids never repeat within a process and rarely across them.
pub fn new_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static N: AtomicU64 = AtomicU64::new(0);
    static SEED: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let n = N.fetch_add(1, Ordering::Relaxed);
    let mut h = SEED.get_or_init(Default::default).build_hasher();
    h.write_u64(n);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    h.write_u64(t);
    format!("req_{:016x}{:08x}", h.finish(), (n as u32) ^ (t as u32))
}

fn is_probe(path: &str) -> bool {
    matches!(path, "/health" | "/ready" | "/metrics")
}

/// The middleware: id in, id out, the line logged.
pub async fn layer(mut req: Request, next: Next) -> Response {
    let id = accept_or_make(req.headers().get(HEADER));
    req.extensions_mut().insert(RequestId(id.clone()));
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let t0 = Instant::now();
    let mut resp = CURRENT.scope(id.clone(), next.run(req)).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(HEADER, v);
    }
    if resp.extensions().get::<Deferred>().is_some() {
        return resp;
    }
    let status = resp.status().as_u16();
    // `/ready` answering 503 (loading, draining) is its answer, not a
    // failure: an orchestrator polls it every second during a load.
    let not_ready = path == "/ready" && status == 503;
    let outcome = match status {
        _ if not_ready => "not_ready",
        101 => "upgraded",
        s if s < 400 => "ok",
        s if s < 500 => "refused",
        _ => "failed",
    };
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    if is_probe(&path) && (status < 500 || not_ready) {
        tracing::debug!(target: "tts_transport::http", request_id = %id, %method, route = %path, status, outcome, ms, "request");
    } else if status >= 500 {
        tracing::warn!(target: "tts_transport::http", request_id = %id, %method, route = %path, status, outcome, ms, "request");
    } else {
        tracing::info!(target: "tts_transport::http", request_id = %id, %method, route = %path, status, outcome, ms, "request");
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_id_is_kept_and_a_bad_one_replaced() {
        let ok = HeaderValue::from_static("abc-123");
        assert_eq!(accept_or_make(Some(&ok)), "abc-123");
        let spaced = HeaderValue::from_static("a b");
        let made = accept_or_make(Some(&spaced));
        assert!(made.starts_with("req_") && made.len() == 28, "{made}");
        let long = HeaderValue::from_str(&"x".repeat(129)).unwrap();
        assert_ne!(accept_or_make(Some(&long)), "x".repeat(129));
        assert_ne!(new_id(), new_id());
    }
}
