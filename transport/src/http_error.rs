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
