//! OpenAI's JSON error body, used by every HTTP route (the OpenAI ones, and
//! the refusals of `/v1/realtime` and `/metrics`), so one shape reaches every
//! HTTP client whatever route it called.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`.
pub fn error_response(
    status: StatusCode,
    message: &str,
    kind: &str,
    param: Option<&str>,
) -> Response {
    (
        status,
        Json(serde_json::json!({
            "error": {
                "message": message,
                "type": kind,
                "param": param,
                "code": null,
            }
        })),
    )
        .into_response()
}

/// A refusal on its way to becoming [`error_response`]: the status, what
/// to say, and the request field it is about. The error type's `type` is
/// chosen from the status (4xx: the client's request, 5xx: the server).
#[derive(Debug)]
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<&'static str>,
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
            param,
        }
    }

    /// A 400 about `param`.
    pub fn bad(message: impl Into<String>, param: &'static str) -> Self {
        Refusal::new(StatusCode::BAD_REQUEST, message, Some(param))
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let kind = match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            s if s.is_client_error() => "invalid_request_error",
            _ => "server_error",
        };
        error_response(self.status, &self.message, kind, self.param)
    }
}
