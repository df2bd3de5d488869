//! CORS for the HTTP routes (`--cors-origin`, `cors_origins` in the config
//! file): none by default, so a browser page from another origin cannot
//! call the server until the deployment says which origins may.
//!
//! An allowed origin's requests get `Access-Control-Allow-Origin` (the
//! origin itself, or `*` when `*` is configured) and the response headers a
//! client reads (`X-Request-Id`, `X-Sample-Rate`, `X-Audio-Encoding`)
//! exposed; its preflight (`OPTIONS` with `Access-Control-Request-Method`)
//! is answered here with 204, before the token check (browsers send no
//! credentials on a preflight). Other origins pass through untouched: the
//! browser then refuses the response itself. The WebSocket route is not
//! subject to CORS (browsers send `Origin` but do not enforce it there).

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Methods the routes serve, announced on a preflight.
const METHODS: &str = "GET, POST, DELETE, OPTIONS";
/// Headers a cross-origin client may read.
const EXPOSE: &str =
    "x-request-id, x-sample-rate, x-audio-encoding, x-tts-ignored, x-tts-queued-ms, content-length";
/// Headers allowed when a preflight asks for none in particular.
const DEFAULT_HEADERS: &str = "authorization, content-type, x-request-id";
/// How long a browser may cache a preflight answer, in seconds.
const MAX_AGE: &str = "600";

/// The allowed origins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cors {
    any: bool,
    /// Lower-case, without a trailing `/`.
    origins: Vec<String>,
}

/// Why an origin cannot be configured.
pub fn check_origin(o: &str) -> Result<(), String> {
    if o == "*" {
        return Ok(());
    }
    let rest = o
        .strip_prefix("http://")
        .or_else(|| o.strip_prefix("https://"))
        .ok_or_else(|| {
            format!("CORS origin {o:?} must be `*` or scheme://host[:port] (http or https)")
        })?;
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains('/') || host.contains(char::is_whitespace) {
        return Err(format!(
            "CORS origin {o:?} must be scheme://host[:port], with no path (e.g. https://app.example.com)"
        ));
    }
    Ok(())
}

impl Cors {
    /// From the configured origins (each checked by [`check_origin`]).
    pub fn new(origins: &[String]) -> Self {
        Cors {
            any: origins.iter().any(|o| o == "*"),
            origins: origins
                .iter()
                .filter(|o| *o != "*")
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.any || !self.origins.is_empty()
    }

    /// The `Access-Control-Allow-Origin` value for a request's `Origin`, or
    /// `None` when that origin is not allowed.
    fn allow(&self, origin: &str) -> Option<HeaderValue> {
        if self.any {
            return Some(HeaderValue::from_static("*"));
        }
        let o = origin.trim_end_matches('/').to_ascii_lowercase();
        if self.origins.contains(&o) {
            HeaderValue::from_str(origin).ok()
        } else {
            None
        }
    }
}

/// The middleware (mounted only when some origin is configured).
pub async fn layer(cors: Arc<Cors>, req: Request, next: Next) -> Response {
    let allow = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .and_then(|o| cors.allow(o));
    let Some(allow) = allow else {
        return next.run(req).await;
    };
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut resp = if preflight {
        let asked = req
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .cloned()
            .unwrap_or(HeaderValue::from_static(DEFAULT_HEADERS));
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(METHODS),
        );
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(MAX_AGE),
        );
        r
    } else {
        next.run(req).await
    };
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSE),
    );
    h.append(header::VARY, HeaderValue::from_static("origin"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_exactly_or_any() {
        let c = Cors::new(&["https://App.example.com/".into()]);
        assert!(c.is_enabled());
        assert_eq!(
            c.allow("https://app.example.com").unwrap(),
            "https://app.example.com"
        );
        assert!(c.allow("https://evil.example.com").is_none());
        assert!(c.allow("http://app.example.com").is_none());
        let any = Cors::new(&["*".into()]);
        assert_eq!(any.allow("http://x").unwrap(), "*");
        assert!(!Cors::new(&[]).is_enabled());
    }

    #[test]
    fn a_bad_origin_is_refused_with_the_shape_expected() {
        assert!(check_origin("*").is_ok());
        assert!(check_origin("http://localhost:3000").is_ok());
        assert!(check_origin("localhost:3000")
            .unwrap_err()
            .contains("scheme://host"));
        assert!(check_origin("https://a.b/path")
            .unwrap_err()
            .contains("no path"));
    }
}
