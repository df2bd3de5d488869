//! OpenAI's JSON error body, used by every HTTP route (the OpenAI ones, and
//! the refusals of `/v1/realtime` and `/metrics`), so one shape reaches every
//! HTTP client whatever route it called.

use std::borrow::Cow;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`,
/// plus `request_id` (the id of the request being answered, also in the
/// `X-Request-Id` header) so a user's bug report names its log line.
pub fn error_response(
    status: StatusCode,
    message: &str,
    kind: &str,
    param: Option<&str>,
) -> Response {
    error_with_code(status, message, kind, param, None)
}

/// [`error_response`] with OpenAI's machine-readable `code` (e.g.
/// `unknown_parameter`).
pub fn error_with_code(
    status: StatusCode,
    message: &str,
    kind: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Response {
    let mut error = serde_json::json!({
        "message": message,
        "type": kind,
        "param": param,
        "code": code,
    });
    if let Some(id) = crate::access_log::current() {
        error["request_id"] = id.into();
    }
    (status, Json(serde_json::json!({ "error": error }))).into_response()
}

/// OpenAI's error `type` for a status: the client's request (4xx) or the
/// server (5xx), with auth and rate limits named.
pub fn kind_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => "authentication_error",
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
        s if s.is_client_error() => "invalid_request_error",
        _ => "server_error",
    }
}

/// A refusal on its way to becoming [`error_response`]: the status, what
/// to say, and the request field it is about. The error type's `type` is
/// chosen from the status (4xx: the client's request, 5xx: the server).
#[derive(Debug)]
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
    /// Mostly one of the route's own field names; a form field's as the
    /// client named it (`Cow::Owned`) when the refusal is about that field.
    pub param: Option<Cow<'static, str>>,
    /// Seconds for a `Retry-After` header (a refusal that says "not now").
    pub retry_after: Option<u32>,
}

impl Refusal {
    pub fn new(
        status: StatusCode,
        message: impl Into<String>,
        param: Option<&'static str>,
    ) -> Self {
        Refusal {
            status,
            message: message.into(),
            param: param.map(Cow::Borrowed),
            retry_after: None,
        }
    }

    /// A 503 that says "not now": `Retry-After: 1`, so a client or a load
    /// balancer retries (elsewhere) shortly.
    pub fn busy(message: impl Into<String>) -> Self {
        Refusal {
            retry_after: Some(1),
            ..Refusal::new(StatusCode::SERVICE_UNAVAILABLE, message, None)
        }
    }

    /// A refusal about the field the client named `param`.
    pub fn about(status: StatusCode, message: impl Into<String>, param: String) -> Self {
        Refusal {
            status,
            message: message.into(),
            param: Some(Cow::Owned(param)),
            retry_after: None,
        }
    }

    /// A 400 about `param`.
    pub fn bad(message: impl Into<String>, param: &'static str) -> Self {
        Refusal::new(StatusCode::BAD_REQUEST, message, Some(param))
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut r = error_response(
            self.status,
            &self.message,
            kind_of(self.status),
            self.param.as_deref(),
        );
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, s.into());
        }
        r
    }
}

/// The route table's own answers in the same shape: 404 for a path no
/// route serves, naming it.
pub async fn not_found(uri: axum::http::Uri) -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        &format!("no route {}; docs/protocol.md lists the routes", uri.path()),
        "invalid_request_error",
        None,
    )
}

/// 405: the path exists but not with this method.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!(
            "{method} is not served on {}; docs/protocol.md lists each route's methods",
            uri.path()
        ),
        "invalid_request_error",
        None,
    )
}

/// Largest plain-text refusal body carried over into the JSON message.
const MAX_REJECTION_TEXT: usize = 4 * 1024;

/// Middleware: any error response that is not JSON yet (axum's extractor
/// rejections — a body over its limit, an unparsable query or path — are
/// plain text) leaves in OpenAI's error shape, its text as the message, so
/// every HTTP client parses one error body whatever went wrong.
pub async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, MAX_REJECTION_TEXT)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let mut out = error_response(status, &message, kind_of(status), None);
    // Keep what the refusal said besides its body (Allow, WWW-Authenticate).
    for (k, v) in parts.headers.iter() {
        if k != axum::http::header::CONTENT_TYPE && k != axum::http::header::CONTENT_LENGTH {
            out.headers_mut().append(k.clone(), v.clone());
        }
    }
    out
}

/// Most of an over-long body read and dropped after its refusal is decided.
pub(crate) const DRAIN_BYTES: usize = 64 << 20;
/// Longest wait for an over-long body's rest.
pub(crate) const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a body was not read.
#[derive(Debug)]
pub enum BodyRefused {
    /// Longer than the route's limit (413); the rest was read and dropped.
    TooLarge,
    /// The process-wide body budget is spent (503 with `Retry-After`).
    Busy(crate::body_budget::Exhausted),
    /// The body could not be read (the client went away, or its body
    /// timed out: `listener::timed_body` answers that 408 itself).
    Unreadable,
}

impl BodyRefused {
    /// The refusal in OpenAI's shape; `too_large` words the 413 for the
    /// route (it knows which field made the body long).
    pub fn into_refusal(self, too_large: impl FnOnce() -> Refusal) -> Refusal {
        match self {
            BodyRefused::TooLarge => too_large(),
            BodyRefused::Busy(e) => Refusal::busy(e.message()),
            BodyRefused::Unreadable => {
                Refusal::bad("the request body could not be read to its end", "body")
            }
        }
    }
}

/// Reads a request body of at most `limit` bytes into memory leased from
/// `budget` (the lease comes back with the bytes; drop it when done with
/// them). A longer body is read on and dropped (up to 64 MiB or 2 s more)
/// before the caller answers, so a client still sending gets the 413
/// instead of a connection reset from unread data. The buffer is sized from
/// `Content-Length` when the client sent one within the limit (one
/// allocation), else grown by doubling up to the limit; the budget is
/// charged for its capacity before it grows, never after.
pub async fn read_body(
    body: axum::body::Body,
    limit: usize,
    budget: &crate::body_budget::BodyBudget,
    content_length: Option<usize>,
) -> Result<(axum::body::Bytes, crate::body_budget::BodyLease), BodyRefused> {
    use futures_util::StreamExt;
    let mut lease = budget.lease();
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    if let Some(n) = content_length.filter(|&n| n <= limit) {
        lease.cover(n).map_err(BodyRefused::Busy)?;
        buf.reserve_exact(n);
    }
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| BodyRefused::Unreadable)?;
        let need = buf.len() + chunk.len();
        if need > limit {
            let drain = async {
                let mut dropped = chunk.len();
                while let Some(Ok(c)) = stream.next().await {
                    dropped += c.len();
                    if dropped > DRAIN_BYTES {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
            return Err(BodyRefused::TooLarge);
        }
        if need > buf.capacity() {
            let cap = need
                .max(buf.capacity().saturating_mul(2))
                .clamp(8 * 1024, limit);
            lease.cover(cap).map_err(BodyRefused::Busy)?;
            buf.reserve_exact(cap - buf.len());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((buf.into(), lease))
}

/// The request's `Content-Length`, if it sent a valid one.
pub fn content_length(headers: &axum::http::HeaderMap) -> Option<usize> {
    headers
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}
