//! ElevenLabs' error shape on its HTTP routes: `{"detail": {"status",
//! "message"}}` (what its API answers and its SDK's `ApiError.body`
//! holds), with the HTTP status unchanged. The routes' refusals are made
//! in the server's (OpenAI) shape by the code they share with
//! `/v1/audio/speech`; this layer, on the ElevenLabs routes only, rewrites
//! each into ElevenLabs' shape: the message as is, `status` a code chosen
//! from the HTTP status and the field (`voice_not_found`,
//! `invalid_api_key`, ...), `param` and `request_id` kept beside them.
//! Answers already in ElevenLabs' shape, and successes, pass untouched.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// Largest error body rewritten (error bodies are a few hundred bytes).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// ElevenLabs' `detail.status` for a refusal with this HTTP status, about
/// this field (`param`), with this machine-readable code, if any.
pub(super) fn status_code_name(
    status: StatusCode,
    param: Option<&str>,
    code: Option<&str>,
) -> String {
    if let Some(c) = code.filter(|c| !c.is_empty()) {
        return c.to_string();
    }
    let name = match (status, param) {
        (StatusCode::UNAUTHORIZED, _) => "invalid_api_key",
        (StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND, Some("voice")) => "voice_not_found",
        (StatusCode::BAD_REQUEST, Some("output_format")) => "invalid_output_format",
        (StatusCode::BAD_REQUEST, Some("text" | "input")) => "invalid_text",
        (StatusCode::NOT_FOUND, _) => "not_found",
        (StatusCode::METHOD_NOT_ALLOWED, _) => "method_not_allowed",
        (StatusCode::REQUEST_TIMEOUT, _) => "request_timeout",
        (StatusCode::PAYLOAD_TOO_LARGE, _) => "request_too_large",
        (StatusCode::TOO_MANY_REQUESTS, _) => "too_many_concurrent_requests",
        (StatusCode::SERVICE_UNAVAILABLE, _) => "service_unavailable",
        (s, _) if s.is_client_error() => "invalid_request",
        _ => "internal_error",
    };
    name.to_string()
}

/// The OpenAI-shaped `error` object as ElevenLabs' `detail`.
pub(super) fn detail_of(status: StatusCode, error: &Value) -> Value {
    let message = error["message"].as_str().unwrap_or_default();
    let param = error["param"].as_str();
    let mut d = json!({
        "status": status_code_name(status, param, error["code"].as_str()),
        "message": message,
    });
    if let Some(p) = param {
        d["param"] = p.into();
    }
    if let Some(id) = error.get("request_id").filter(|v| !v.is_null()) {
        d["request_id"] = id.clone();
    }
    d
}

/// Middleware (`map_response`): an error answer of an ElevenLabs route in
/// ElevenLabs' shape.
pub(super) async fn reshape(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    // Plain-text rejections (axum's extractors) into the JSON shape first.
    let resp = crate::http_error::json_errors(resp).await;
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ERROR_BODY).await else {
        let d = json!({"status": status_code_name(status, None, None),
                       "message": status.canonical_reason().unwrap_or("error")});
        return (status, Json(json!({ "detail": d }))).into_response();
    };
    let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
    let detail = match &parsed {
        // Already ElevenLabs' shape: as it was.
        Some(v) if v.get("detail").is_some() => {
            return Response::from_parts(parts, axum::body::Body::from(bytes))
        }
        Some(v) if v["error"].is_object() => detail_of(status, &v["error"]),
        _ => json!({
            "status": status_code_name(status, None, None),
            "message": String::from_utf8_lossy(&bytes).trim(),
        }),
    };
    let mut out = (status, Json(json!({ "detail": detail }))).into_response();
    // Keep what the refusal said besides its body (Retry-After,
    // WWW-Authenticate, X-Request-Id, CORS).
    for (k, v) in parts.headers.iter() {
        if k != header::CONTENT_LENGTH
            && (k != header::CONTENT_TYPE || out.headers().get(k).is_none())
        {
            out.headers_mut().append(k.clone(), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_get_elevenlabs_status_names() {
        let s = |st, p, c| status_code_name(st, p, c);
        assert_eq!(s(StatusCode::UNAUTHORIZED, None, None), "invalid_api_key");
        assert_eq!(
            s(StatusCode::BAD_REQUEST, Some("voice"), None),
            "voice_not_found"
        );
        assert_eq!(
            s(StatusCode::BAD_REQUEST, Some("output_format"), None),
            "invalid_output_format"
        );
        assert_eq!(
            s(StatusCode::BAD_REQUEST, Some("body"), None),
            "invalid_request"
        );
        assert_eq!(
            s(StatusCode::BAD_REQUEST, None, Some("unknown_parameter")),
            "unknown_parameter"
        );
        assert_eq!(
            s(StatusCode::SERVICE_UNAVAILABLE, None, None),
            "service_unavailable"
        );
        assert_eq!(
            s(StatusCode::INTERNAL_SERVER_ERROR, None, None),
            "internal_error"
        );
    }

    #[tokio::test]
    async fn an_openai_shaped_refusal_becomes_a_detail() {
        let r = crate::http_error::error_response(
            StatusCode::BAD_REQUEST,
            "unknown voice \"x\"",
            "invalid_request_error",
            Some("voice"),
        );
        let r = reshape(r).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let b = axum::body::to_bytes(r.into_body(), 4096).await.unwrap();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["detail"]["status"], "voice_not_found");
        assert_eq!(v["detail"]["message"], "unknown voice \"x\"");
        assert_eq!(v["detail"]["param"], "voice");
        assert!(v.get("error").is_none(), "{v}");
    }

    #[tokio::test]
    async fn plain_text_rejections_and_successes() {
        let r = (StatusCode::BAD_REQUEST, "Invalid URL").into_response();
        let r = reshape(r).await;
        let b = axum::body::to_bytes(r.into_body(), 4096).await.unwrap();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["detail"]["message"], "Invalid URL");
        let already = super::super::elevenlabs_voices::detail(
            StatusCode::NOT_FOUND,
            "voice_not_found",
            "no such voice",
        );
        let r = reshape(already).await;
        assert_eq!(
            r.headers().get(header::CONTENT_TYPE).unwrap(),
            "application/json"
        );
        let b = axum::body::to_bytes(r.into_body(), 4096).await.unwrap();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["detail"]["status"], "voice_not_found");
        let ok = reshape((StatusCode::OK, "audio").into_response()).await;
        let b = axum::body::to_bytes(ok.into_body(), 4096).await.unwrap();
        assert_eq!(&b[..], b"audio");
    }
}
