//! The vendors' one-shot HTTP routes, so their clients' non-streaming calls
//! work as well as their sockets (LiveKit Agents' `synthesize()` posts to
//! these; its `stream()` uses the sockets):
//!
//! - ElevenLabs `POST /v1/text-to-speech/{voice_id}` and
//!   `POST /v1/text-to-speech/{voice_id}/stream`: a JSON body with `text`
//!   (`model_id`, `voice_settings`, `language_code`, ... accepted and
//!   ignored, as on the socket), `?output_format=` as on the socket
//!   (`pcm_<rate>`, `ulaw_8000`, `alaw_8000`, `mp3_<rate>_<kbps>`; default
//!   `mp3_44100_128`).
//! - Cartesia `POST /tts/bytes`: a JSON body with `transcript`, `voice`
//!   (`{"mode": "id", "id"}`) and `output_format` (`raw` with `pcm_s16le`,
//!   `pcm_mulaw` or `pcm_alaw`; `mp3`; `wav` with `pcm_s16le`);
//!   `model_id`, `language`, ... accepted and ignored.
//!
//! Each request is translated into a typed `POST /v1/audio/speech` request
//! and answered by that route's own code ([`crate::openai::speak_request`]): the same
//! voice names, validation, engine path, streamed body, metrics and log
//! line. Errors have a 4xx status (the vendors' clients raise on the
//! status; the message names the field): ElevenLabs' routes answer them in
//! ElevenLabs' `{"detail": {"status", "message"}}` shape
//! (`elevenlabs_errors`), Cartesia's in the server's JSON error shape.
//! Auth (with `--token T`): `Authorization: Bearer T`, or the vendor's
//! header (`xi-api-key: T`, `X-API-Key: T`); no query-string tokens.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use super::format::Encoding;
use super::{cartesia, elevenlabs, VendorError};
use crate::http_error::error_response;
use crate::openai::{SpeechRequest, Timestamps};
use crate::state::AppState;

/// Largest vendor request body (text and a few settings; the text itself
/// is held to the speech route's limit).
const MAX_BODY: usize = 256 * 1024;

/// A refusal of the vendor request: the message and the field it is about.
#[derive(Debug, PartialEq)]
pub struct BadRequest {
    pub message: String,
    pub param: &'static str,
}

fn bad(message: impl Into<String>, param: &'static str) -> BadRequest {
    BadRequest {
        message: message.into(),
        param,
    }
}

/// The request as a JSON object, or why not.
fn object(body: &[u8]) -> Result<Map<String, Value>, BadRequest> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(v) => Err(bad(
            format!("the body must be a JSON object, got {v}"),
            "body",
        )),
        Err(e) => Err(bad(format!("invalid JSON body: {e}"), "body")),
    }
}

/// A required, non-blank string field.
fn text_field(o: &Map<String, Value>, name: &'static str) -> Result<String, BadRequest> {
    match o.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(bad(format!("`{name}` is empty"), name)),
        Some(v) => Err(bad(format!("`{name}` must be a string, got {v}"), name)),
        None => Err(bad(format!("`{name}` is required"), name)),
    }
}

/// A speech request for `text` in `voice`, as `response_format` at `rate`.
fn speech(text: String, voice: String, format: &str, rate: u32) -> SpeechRequest {
    SpeechRequest {
        input: text,
        voice: Some(Value::String(voice)),
        response_format: Some(format.to_string()),
        sample_rate: Some(rate),
        ..SpeechRequest::default()
    }
}

/// The speech route's `response_format` for a vendor encoding.
fn speech_format(encoding: Encoding, param: &'static str) -> Result<&'static str, BadRequest> {
    let name = match encoding {
        Encoding::Pcm16 => "pcm",
        Encoding::Mulaw => "mulaw",
        Encoding::Alaw => "alaw",
        Encoding::Mp3 => "mp3",
        Encoding::F32 => {
            return Err(bad(
                "pcm_f32le is not offered over HTTP here; use pcm_s16le (or the WebSocket \
                 /tts/websocket, which sends pcm_f32le)",
                param,
            ))
        }
    };
    Ok(name)
}

/// An ElevenLabs `text-to-speech` request as a speech request.
pub fn elevenlabs_body(
    voice: &str,
    q: &HashMap<String, String>,
    body: &[u8],
) -> Result<SpeechRequest, BadRequest> {
    let o = object(body)?;
    let text = text_field(&o, "text")?;
    let format = q
        .get("output_format")
        .map_or(elevenlabs::DEFAULT_FORMAT, String::as_str);
    let f = elevenlabs::output_format(format).map_err(|e| bad(e.to_string(), "output_format"))?;
    let name = speech_format(f.encoding, "output_format")?;
    Ok(speech(text, voice.to_string(), name, f.sample_rate))
}

/// A Cartesia `/tts/bytes` request as a speech request.
pub fn cartesia_body(body: &[u8]) -> Result<SpeechRequest, BadRequest> {
    let o = object(body)?;
    let text = text_field(&o, "transcript")?;
    if o.get("add_timestamps") == Some(&Value::Bool(true)) {
        // Raw audio bytes have no place for them: refused rather than
        // silently dropped.
        return Err(bad(
            "add_timestamps is not available on /tts/bytes (the answer is audio bytes only);              use the WebSocket /tts/websocket, which sends `timestamps` messages",
            "add_timestamps",
        ));
    }
    let voice: cartesia::CartesiaVoice = match o.get("voice") {
        Some(v) => {
            serde_json::from_value(v.clone()).map_err(|e| bad(format!("`voice`: {e}"), "voice"))?
        }
        None => {
            return Err(bad(
                "`voice` is required ({\"mode\": \"id\", \"id\"})",
                "voice",
            ))
        }
    };
    let voice = voice
        .id_for_http()
        .map_err(|e: VendorError| bad(e.to_string(), "voice"))?;
    let spec: cartesia::OutputFormatSpec = match o.get("output_format") {
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| bad(format!("`output_format`: {e}"), "output_format"))?,
        None => {
            return Err(bad(
                "`output_format` is required (e.g. {\"container\": \"raw\", \"encoding\": \
                 \"pcm_s16le\", \"sample_rate\": 24000})",
                "output_format",
            ))
        }
    };
    let (name, rate) = if spec.container == "wav" {
        match spec.encoding.as_deref() {
            None | Some("pcm_s16le") => ("wav", spec.sample_rate),
            Some(e) => {
                return Err(bad(
                    format!(
                        "output_format.encoding {e:?} is not offered in wav here; use pcm_s16le"
                    ),
                    "output_format",
                ))
            }
        }
    } else {
        let f = spec
            .resolve()
            .map_err(|e| bad(e.to_string(), "output_format"))?;
        (speech_format(f.encoding, "output_format")?, f.sample_rate)
    };
    Ok(speech(text, voice, name, rate))
}

/// Auth, readiness, the body, the translation, then the speech route.
async fn answer(
    st: Arc<AppState>,
    headers: HeaderMap,
    body: Body,
    translate: impl FnOnce(&[u8]) -> Result<SpeechRequest, BadRequest>,
) -> Response {
    // `Authorization: Bearer`, or the vendor's key header (no query keys).
    if let Err(r) = st.authorize(&super::vendor_key_as_bearer(&headers, None)) {
        return r.into_response();
    }
    let m = match st.ready_for_work("the server is shutting down") {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let (body, lease) = match crate::http_error::read_body(
        body,
        MAX_BODY,
        &st.bodies,
        crate::http_error::content_length(&headers),
    )
    .await
    {
        Ok(b) => b,
        Err(e) => {
            st.metrics.refused("invalid_request");
            return e
                .into_refusal(|| {
                    crate::http_error::Refusal::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("the request body is over {MAX_BODY} bytes"),
                        Some("body"),
                    )
                })
                .into_response();
        }
    };
    let req = match translate(&body) {
        Ok(r) => r,
        Err(b) => {
            st.metrics.refused("invalid_request");
            return error_response(
                StatusCode::BAD_REQUEST,
                &b.message,
                "invalid_request_error",
                Some(b.param),
            );
        }
    };
    crate::openai::speak_request(st, m, req, lease).await
}

pub(super) async fn elevenlabs_speech(
    State(st): State<Arc<AppState>>,
    Path(voice): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(st, headers, body, |b| elevenlabs_body(&voice, &q, b)).await
}

/// `POST /v1/text-to-speech/{voice_id}/with-timestamps`: one JSON object,
/// the audio with its characters' timings.
pub(super) async fn elevenlabs_with_timestamps(
    State(st): State<Arc<AppState>>,
    Path(voice): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    timed(st, &voice, &q, headers, body, Timestamps::Whole).await
}

/// `.../stream/with-timestamps`: one such object per line, as the audio is
/// made.
pub(super) async fn elevenlabs_stream_with_timestamps(
    State(st): State<Arc<AppState>>,
    Path(voice): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    timed(st, &voice, &q, headers, body, Timestamps::Lines).await
}

async fn timed(
    st: Arc<AppState>,
    voice: &str,
    q: &HashMap<String, String>,
    headers: HeaderMap,
    body: Body,
    mode: Timestamps,
) -> Response {
    answer(st, headers, body, |b| {
        let mut r = elevenlabs_body(voice, q, b)?;
        r.with_timestamps = Some(mode);
        Ok(r)
    })
    .await
}

pub(super) async fn cartesia_bytes(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(st, headers, body, cartesia_body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields a translation sets: text, voice, format, rate.
    fn fields(r: &SpeechRequest) -> (String, String, String, u32) {
        (
            r.input.clone(),
            r.voice
                .as_ref()
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            r.response_format.clone().unwrap_or_default(),
            r.sample_rate.unwrap_or_default(),
        )
    }

    fn expect(text: &str, voice: &str, format: &str, rate: u32) -> (String, String, String, u32) {
        (text.into(), voice.into(), format.into(), rate)
    }

    fn q(format: Option<&str>) -> HashMap<String, String> {
        format
            .map(|f| HashMap::from([("output_format".to_string(), f.to_string())]))
            .unwrap_or_default()
    }

    #[test]
    fn elevenlabs_requests_become_speech_bodies() {
        let b = br#"{"text": "Hello.", "model_id": "eleven_turbo_v2_5", "voice_settings": {"stability": 0.5}}"#;
        let r = elevenlabs_body("ryan", &q(Some("pcm_24000")), b).unwrap();
        assert_eq!(fields(&r), expect("Hello.", "ryan", "pcm", 24000));
        let r = elevenlabs_body("ryan", &q(None), b).unwrap();
        assert_eq!(fields(&r), expect("Hello.", "ryan", "mp3", 44100));
        let r = elevenlabs_body("alloy", &q(Some("ulaw_8000")), b).unwrap();
        assert_eq!(fields(&r), expect("Hello.", "alloy", "mulaw", 8000));
    }

    #[test]
    fn elevenlabs_bad_requests_name_the_field() {
        let e =
            elevenlabs_body("ryan", &q(Some("opus_48000_64")), br#"{"text": "x"}"#).unwrap_err();
        assert_eq!(e.param, "output_format");
        assert!(e.message.contains("opus_48000_64"), "{}", e.message);
        for (body, param) in [
            (&br#"{"model_id": "m"}"#[..], "text"),
            (br#"{"text": "  "}"#, "text"),
            (br#"{"text": 3}"#, "text"),
            (br#"[1]"#, "body"),
            (br#"{not json"#, "body"),
            (b"", "body"),
        ] {
            let e = elevenlabs_body("ryan", &q(None), body).unwrap_err();
            assert_eq!(e.param, param, "{}", e.message);
        }
    }

    #[test]
    fn cartesia_requests_become_speech_bodies() {
        let b = br#"{"model_id": "sonic-2", "transcript": "Hi there.", "voice": {"mode": "id", "id": "serena"},
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}, "language": null}"#;
        assert_eq!(
            fields(&cartesia_body(b).unwrap()),
            expect("Hi there.", "serena", "pcm", 24000)
        );
        let b = br#"{"transcript": "Hi.", "voice": {"mode": "id", "id": "ryan"},
            "output_format": {"container": "wav", "encoding": "pcm_s16le", "sample_rate": 16000}}"#;
        assert_eq!(
            fields(&cartesia_body(b).unwrap()),
            expect("Hi.", "ryan", "wav", 16000)
        );
        let b = br#"{"transcript": "Hi.", "voice": {"mode": "id", "id": "ryan"},
            "output_format": {"container": "mp3", "sample_rate": 22050, "bit_rate": 128000}}"#;
        assert_eq!(
            fields(&cartesia_body(b).unwrap()),
            expect("Hi.", "ryan", "mp3", 22050)
        );
    }

    #[test]
    fn cartesia_bytes_refuse_timestamps_they_cannot_carry() {
        let body = br#"{"transcript": "hi", "voice": {"mode": "id", "id": "ryan"},
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
            "add_timestamps": true}"#;
        let e = cartesia_body(body).expect_err("refused");
        assert_eq!(e.param, "add_timestamps");
        assert!(e.message.contains("/tts/websocket"), "{}", e.message);
        let ok = br#"{"transcript": "hi", "voice": {"mode": "id", "id": "ryan"},
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
            "add_timestamps": false}"#;
        assert!(cartesia_body(ok).is_ok());
    }

    #[test]
    fn cartesia_bad_requests_name_the_field() {
        let fmt = r#""output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}"#;
        for (body, param) in [
            (format!(r#"{{"voice": {{"mode": "id", "id": "ryan"}}, {fmt}}}"#), "transcript"),
            (format!(r#"{{"transcript": "x", {fmt}}}"#), "voice"),
            (format!(r#"{{"transcript": "x", "voice": {{"mode": "embedding", "embedding": [0.1]}}, {fmt}}}"#), "voice"),
            (format!(r#"{{"transcript": "x", "voice": "ryan", {fmt}}}"#), "voice"),
            (r#"{"transcript": "x", "voice": {"mode": "id", "id": "ryan"}}"#.to_string(), "output_format"),
            (r#"{"transcript": "x", "voice": {"mode": "id", "id": "ryan"}, "output_format": {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 24000}}"#.to_string(), "output_format"),
            (r#"{"transcript": "x", "voice": {"mode": "id", "id": "ryan"}, "output_format": {"container": "ogg", "sample_rate": 24000}}"#.to_string(), "output_format"),
            (r#"{"transcript": "x", "voice": {"mode": "id", "id": "ryan"}, "output_format": {"container": "wav", "encoding": "pcm_mulaw", "sample_rate": 8000}}"#.to_string(), "output_format"),
            (r#"{"transcript": "x", "voice": {"mode": "id", "id": "ryan"}, "output_format": {"container": "raw"}}"#.to_string(), "output_format"),
        ] {
            let e = cartesia_body(body.as_bytes()).unwrap_err();
            assert_eq!(e.param, param, "{body}: {}", e.message);
            assert!(!e.message.is_empty());
        }
    }
}
