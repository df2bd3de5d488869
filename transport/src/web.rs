//! The browser page served at `/`: a text box that streams over
//! `/v1/realtime` and plays the audio through an AudioWorklet jitter
//! buffer, with a Stop button that cancels the speaking context; on a Base
//! checkpoint it also records or reads a clip, sends it as WAV to
//! `POST /v1/audio/voices`, and speaks with the stored voice.
//!
//! The files live in `transport/web/` and are compiled into the binary
//! (`include_str!`), so the page needs nothing but this server: no build
//! step, no external resources, and a strict Content-Security-Policy.
//!
//! The static files are served **without** authentication: a browser's
//! page load cannot carry an `Authorization` header, and the files hold no
//! secret. The page reads `?token=` from its own URL and passes it on every
//! API call and on the WebSocket URL, so every API route stays protected.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The page (HTML).
pub const INDEX_HTML: &str = include_str!("../web/index.html");
/// The page's script (protocol client, UI).
pub const APP_JS: &str = include_str!("../web/app.js");
/// The AudioWorklet processor (ring buffer, prebuffer, underruns). Must be
/// served as JavaScript: `audioWorklet.addModule` refuses other types.
pub const WORKLET_JS: &str = include_str!("../web/worklet.js");
/// The page's style sheet (a separate file so the CSP needs no
/// `'unsafe-inline'`).
pub const STYLE_CSS: &str = include_str!("../web/style.css");

/// Everything from this origin only; the WebSocket is same-origin too
/// (`connect-src 'self'` covers `ws:`/`wss:` to the same host). `data:`
/// images only for the empty favicon that stops a `/favicon.ico` request.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// `(path, content type, body)` of every static file.
pub const FILES: [(&str, &str, &str); 4] = [
    ("/", "text/html; charset=utf-8", INDEX_HTML),
    ("/app.js", "text/javascript; charset=utf-8", APP_JS),
    ("/worklet.js", "text/javascript; charset=utf-8", WORKLET_JS),
    ("/style.css", "text/css; charset=utf-8", STYLE_CSS),
];

/// The routes of the page (merged into the server's router; no state).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut r = Router::new();
    for (path, content_type, body) in FILES {
        r = r.route(path, get(move || async move { file(content_type, body) }));
    }
    r
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            // The page URL carries `?token=`: never send it as a referrer.
            (header::REFERRER_POLICY, "no-referrer"),
            // Small files, compiled in: revalidate so an upgrade shows up.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
