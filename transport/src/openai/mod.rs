//! OpenAI-compatible HTTP: `POST /v1/audio/speech`, `GET /v1/models`,
//! `GET /v1/audio/voices`, with OpenAI's JSON error shape so the official
//! SDKs (and the frameworks built on them) work unmodified.
//!
//! Who speaks a request (preset speaker, stored or inline clone, designed
//! voice) is chosen in `voice.rs`.
//!
//! Formats (`response_format`: mp3 by default, as OpenAI's, and opus, flac,
//! wav, pcm, mulaw, alaw) and how the body carries them (streamed as each
//! chunk is encoded, or complete with exact sizes) are chosen in
//! `format.rs`. The sample rate is in the `X-Sample-Rate` header.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tokio::sync::{mpsc, oneshot};
use tts_actors::{ErrorKind, Event, Stream};
use tts_actors::{ModelError, Request};
use tts_audio::StreamResampler;

mod format;
pub(crate) use format::Timestamps;
mod timestamps;
mod voice;

use crate::access_log::{self, Deferred};
pub use crate::http_error::error_response;
use crate::http_error::{error_with_code, kind_of, Refusal};
use crate::library;
use crate::protocol;
use crate::state::{AppState, Drain, Loaded};
use crate::validate::{self, Rejected};

/// OpenAI's own input limit.
pub const MAX_INPUT_CHARS: usize = 4096;
/// Chunks buffered between the synthesis task and the response body: a
/// client that stops reading stalls the task, which stops acknowledging, which
/// pauses the engine (its slow-consumer bound) — no unbounded queue anywhere.
const BODY_CHUNKS: usize = 8;

/// A refusal naming the offending parameter (400 unless said otherwise).
struct Invalid {
    status: StatusCode,
    message: String,
    /// `""`: about no one field.
    param: Cow<'static, str>,
    /// OpenAI's machine-readable `code`, where it has one.
    code: Option<&'static str>,
}

fn invalid(message: String, param: &'static str) -> Invalid {
    Invalid {
        status: StatusCode::BAD_REQUEST,
        message,
        param: Cow::Borrowed(param),
        code: None,
    }
}

impl From<Refusal> for Invalid {
    fn from(r: Refusal) -> Self {
        Invalid {
            status: r.status,
            message: r.message,
            param: r.param.unwrap_or(Cow::Borrowed("")),
            code: None,
        }
    }
}

/// The OpenAI route's words for a shared check's refusal.
impl From<Rejected> for Invalid {
    fn from(r: Rejected) -> Self {
        match r {
            Rejected::UnknownVoice { voice, valid } => invalid(
                format!("unknown voice {voice:?}; use one of: {}", valid.join(", ")),
                "voice",
            ),
            Rejected::UnknownLanguage { language, valid } => invalid(
                format!(
                    "unknown language {language:?}; use one of: {}",
                    valid.join(", ")
                ),
                "language",
            ),
            Rejected::SampleRate { rate } => invalid(
                format!(
                    "sample_rate {rate} is out of range; use {}..={}",
                    protocol::MIN_SAMPLE_RATE,
                    protocol::MAX_SAMPLE_RATE
                ),
                "sample_rate",
            ),
            Rejected::MaxFrames { frames, max } => invalid(
                format!("max_frames {frames} must be 1..={max}"),
                "max_frames",
            ),
            Rejected::Instructions { checkpoint } => {
                invalid(Rejected::instructions_message(&checkpoint), "instructions")
            }
        }
    }
}

impl IntoResponse for Invalid {
    fn into_response(self) -> Response {
        let param = (!self.param.is_empty()).then_some(&*self.param);
        error_with_code(
            self.status,
            &self.message,
            kind_of(self.status),
            param,
            self.code,
        )
    }
}

/// Every field [`SpeechRequest`] takes: any other is refused as OpenAI
/// refuses one (400, `unknown_parameter`, the field as `param`), so a
/// misspelt `langauge` is an error rather than silently ignored.
const FIELDS: [&str; 17] = [
    "model",
    "input",
    "voice",
    "instructions",
    "response_format",
    "speed",
    "stream_format",
    "stream",
    "sample_rate",
    "language",
    "seed",
    "greedy",
    "max_frames",
    "ref_audio",
    "ref_text",
    "x_vector_only_mode",
    "non_streaming_mode",
];

/// OpenAI's refusal of a field it does not know, with the nearest known
/// field suggested when the name looks like a misspelling of it.
fn unknown_field(name: &str) -> Invalid {
    let near = FIELDS
        .iter()
        .map(|f| (edit_distance(name, f), *f))
        .min()
        .filter(|(d, _)| *d <= 2)
        .map(|(_, f)| format!(" Did you mean '{f}'?"))
        .unwrap_or_default();
    Invalid {
        status: StatusCode::BAD_REQUEST,
        message: format!(
            "Unknown parameter: '{name}'.{near} (POST /v1/audio/speech takes: {})",
            FIELDS.join(", ")
        ),
        param: Cow::Owned(name.to_string()),
        code: Some("unknown_parameter"),
    }
}

/// Levenshtein distance (field names are short; ASCII in practice).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// A `POST /v1/audio/speech` request, as parsed from its body or made by
/// the dialects' HTTP routes (`crate::dialects`) from theirs.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpeechRequest {
    /// Any value is accepted (clients send `tts-1`, `gpt-4o-mini-tts`, ...):
    /// the server has one model. It says what the client was written for
    /// ([`sends_instructions_by_default`]).
    pub(crate) model: Option<String>,
    pub(crate) input: String,
    /// A name, or the SDK's custom-voice object `{"id": name}`.
    #[serde(default, deserialize_with = "voice_field")]
    pub(crate) voice: Option<serde_json::Value>,
    pub(crate) instructions: Option<String>,
    pub(crate) response_format: Option<String>,
    pub(crate) speed: Option<f64>,
    pub(crate) stream_format: Option<String>,
    // Extensions (not in OpenAI's API).
    /// `false`: the whole file in one body with exact sizes; `true`: bytes
    /// as they are encoded. Default: streamed, except `wav` (format.rs).
    pub(crate) stream: Option<bool>,
    pub(crate) sample_rate: Option<u32>,
    pub(crate) language: Option<String>,
    pub(crate) seed: Option<u64>,
    pub(crate) greedy: Option<bool>,
    pub(crate) max_frames: Option<usize>,
    // vllm-omni's fields (Base: clone from a clip in the request).
    /// The reference clip, base64 or a data URL (never fetched from a URL).
    pub(crate) ref_audio: Option<String>,
    /// Its transcript (in-context cloning).
    pub(crate) ref_text: Option<String>,
    /// Clone from the x-vector only (default false: ICL, needs `ref_text`).
    pub(crate) x_vector_only_mode: Option<bool>,
    /// `true`: all text in the prompt first; `false`: streamed in; absent
    /// or null: the family's official default (Base streams).
    pub(crate) non_streaming_mode: Option<bool>,
    /// Set by the dialects' routes, never by a client: the audio comes as
    /// JSON with its characters' timings (ElevenLabs' `with-timestamps`).
    #[serde(skip)]
    pub(crate) with_timestamps: Option<format::Timestamps>,
}

/// Everything a valid request resolved to.
struct Plan {
    req: Request,
    output: format::ResponseAudio,
    inline: Option<voice::Inline>,
    /// The voice as the request named it (for the log line).
    voice: String,
    /// What the client sent by default and the checkpoint cannot honour,
    /// left out (`X-TTS-Ignored`): `instructions`, `voice`.
    ignored: Vec<&'static str>,
}

/// The response header naming what a request sent by default and the
/// checkpoint could not honour, so it was left out (comma-separated).
pub const IGNORED_HEADER: &str = "x-tts-ignored";

/// Whether a client asking for `model` sends `instructions` as a matter of
/// course: `gpt-4o-mini-tts` (and its dated snapshots) is OpenAI's model
/// that follows them, and apps written for it send a style with every
/// request. Instructions sent to any other model (`tts-1`, the
/// checkpoint's own name, none) are the caller's explicit choice.
fn sends_instructions_by_default(model: Option<&str>) -> bool {
    model.is_some_and(|m| m.trim().to_ascii_lowercase().starts_with("gpt-4o-mini-tts"))
}

/// Largest non-object body echoed back in its refusal.
const ECHO_BYTES: usize = 256;

/// The body straight into [`SpeechRequest`]: no generic JSON value is built
/// first, so an unknown field is refused when its name is read, before its
/// value (a 14 MB array once cost 226 MB as a `serde_json::Value`) is
/// looked at, and every known field is parsed into its own type.
fn parse_request(body: &[u8]) -> Result<SpeechRequest, Invalid> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{') {
        let what = match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Err(e) => return Err(invalid(format!("invalid JSON body: {e}"), "body")),
            Ok(_) if body.len() <= ECHO_BYTES => String::from_utf8_lossy(body).trim().to_string(),
            Ok(_) => format!("{} bytes of JSON that is not an object", body.len()),
        };
        return Err(invalid(
            format!("the body must be a JSON object, got {what}"),
            "body",
        ));
    }
    serde_json::from_slice(body).map_err(|e| match unknown_field_of(&e) {
        Some(name) => unknown_field(&name),
        None => invalid(format!("invalid JSON body: {e}"), "body"),
    })
}

/// The field serde's `deny_unknown_fields` refused, from its message
/// ("unknown field `x`, expected one of ...").
fn unknown_field_of(e: &serde_json::Error) -> Option<String> {
    if !e.is_data() {
        return None;
    }
    let msg = e.to_string();
    let rest = msg.strip_prefix("unknown field `")?;
    Some(rest[..rest.find("`, expected")?].to_string())
}

fn plan(m: &Loaded, body: &[u8], max_upload: usize) -> Result<Plan, Invalid> {
    plan_request(m, parse_request(body)?, max_upload)
}

fn plan_request(m: &Loaded, mut r: SpeechRequest, max_upload: usize) -> Result<Plan, Invalid> {
    let mut ignored = Vec::new();
    if let Err(e) = validate::instructions(m, r.instructions.as_deref()) {
        // A gpt-4o-mini-tts client's style: spoken without it, and said so.
        if !sends_instructions_by_default(r.model.as_deref()) {
            return Err(e.into());
        }
        r.instructions = None;
        ignored.push("instructions");
    }
    if r.input.trim().is_empty() {
        return Err(invalid("input is empty".into(), "input"));
    }
    let n = r.input.chars().count();
    if n > MAX_INPUT_CHARS {
        return Err(invalid(
            format!("input has {n} characters; the limit is {MAX_INPUT_CHARS} (split the text, or use the WebSocket API for long text)"),
            "input",
        ));
    }
    let voice = voice::choose(m, &r, max_upload)?;
    if voice.ignored_voice {
        ignored.push("voice");
    }
    let speed = match r.speed {
        None => 1.0,
        Some(s) if (0.25..=4.0).contains(&s) => s as f32,
        Some(s) => {
            return Err(invalid(
                format!("speed {s} is out of range: give a number from 0.25 to 4.0 (1.0 is the natural rate)"),
                "speed",
            ))
        }
    };
    let mut output = format::response_audio(
        r.response_format.as_deref(),
        r.stream_format.as_deref(),
        r.stream,
        r.sample_rate,
        m.native_rate,
    )?;
    output.speed = speed;
    if let Some(t) = r.with_timestamps {
        output.timestamps = Some(t);
        output.sse = false;
        output.complete = t == format::Timestamps::Whole;
    }
    let language = validate::language(&m.languages, r.language.as_deref().unwrap_or("auto"))?;
    let max_frames = match r.max_frames {
        Some(f) => validate::max_frames(f, m.max_frames)?,
        None => m.max_frames,
    };
    let options = validate::gen_options(m, r.greedy == Some(true), r.seed.unwrap_or(0), max_frames);
    let text_streaming = match r.non_streaming_mode {
        Some(prefill) => !prefill,
        None => m.kind().default_text_streaming(),
    };
    let voice_label = match (&voice.speaker, &r.voice) {
        (Some(s), _) => s.clone(),
        (None, Some(v)) => voice_name(v).unwrap_or("").to_string(),
        (None, None) => String::new(),
    };
    Ok(Plan {
        voice: voice_label,
        ignored,
        req: Request {
            text: r.input,
            speaker: voice.speaker,
            language,
            // As given: the model takes only "" as no instruction, as
            // the official code does.
            instruct: r.instructions,
            voice_clone: voice.clone,
            text_streaming,
            options,
        },
        output,
        inline: voice.inline,
    })
}

/// The request field a model refusal is about, in OpenAI's names: the
/// model keeps its cause typed through the engine, and this layer renders
/// it. `None` for causes that are not one field.
fn model_param(cause: &ModelError) -> Option<&'static str> {
    match cause {
        ModelError::UnknownSpeaker { .. } => Some("voice"),
        ModelError::UnknownLanguage { .. } => Some("language"),
        ModelError::EmptyText | ModelError::TextTooLong { .. } => Some("input"),
        _ => None,
    }
}

/// `voice` as a JSON value without materialising what no voice can be: a
/// string, or an object whose string members are kept (other members, and
/// any other shape, are reduced to a stand-in that [`voice_name`] refuses),
/// so a huge array in `voice` costs no memory beyond the body.
fn voice_field<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde_json::Value;
    struct Member(Value);
    impl<'de> serde::Deserialize<'de> for Member {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(V).map(Member)
        }
    }
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Value;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a voice name or {\"id\": name}")
        }
        fn visit_str<E>(self, v: &str) -> Result<Value, E> {
            Ok(Value::String(v.to_string()))
        }
        fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
            while a.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Value::Array(Vec::new()))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
            let mut o = serde_json::Map::new();
            while let Some(k) = a.next_key::<String>()? {
                let Member(v) = a.next_value()?;
                o.insert(k, v);
            }
            Ok(Value::Object(o))
        }
    }
    d.deserialize_any(V).map(|v| (!v.is_null()).then_some(v))
}

/// The voice name in OpenAI's `voice`: a string (`"alloy"`), or the
/// custom-voice object newer SDKs send (`{"id": "alloy"}`), whose id names a
/// voice here like a string does.
fn voice_name(v: &serde_json::Value) -> Result<&str, Invalid> {
    let bad = || {
        invalid(
            format!("voice must be a voice name or {{\"id\": name}}, got {v}"),
            "voice",
        )
    };
    match v {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Object(o) if o.len() == 1 => {
            o.get("id").and_then(|id| id.as_str()).ok_or_else(bad)
        }
        _ => Err(bad()),
    }
}

pub async fn speech(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    if let Err(r) = st.authorize(&headers) {
        return r.into_response();
    }
    let m = match st.ready_for_work("the server is shutting down") {
        Ok(m) => m,
        Err(r) => return *r,
    };
    // An inline clip is base64 (4/3 of the clip) inside the JSON.
    let limit = st.max_upload_bytes / 3 * 4 + 1024 * 1024;
    let read = crate::http_error::read_body(
        body,
        limit,
        &st.bodies,
        crate::http_error::content_length(&headers),
    )
    .await;
    let (body, lease) = match read {
        Ok(b) => b,
        Err(e) => {
            st.metrics.refused("invalid_request");
            return e
                .into_refusal(|| library::audio_field::too_large("the request body", limit))
                .into_response();
        }
    };
    speak(st, m, body, lease).await
}

/// Bodies up to this size are parsed on the async worker; larger ones (an
/// inline clip: up to ~14 MB of base64) on a blocking thread, so a burst of
/// them cannot stall every connection's I/O (64 of them once held `/health`
/// for 3.3 s).
const PARSE_INLINE_BYTES: usize = 64 * 1024;

/// `POST /v1/audio/speech` past auth and readiness, for a body in its
/// shape. `lease` holds the body's bytes in the server's body budget until
/// the request is planned and its inline clip (if any) decoded.
async fn speak(
    st: Arc<AppState>,
    m: Arc<Loaded>,
    body: Bytes,
    lease: crate::body_budget::BodyLease,
) -> Response {
    let max_upload = st.max_upload_bytes;
    let planned = if body.len() <= PARSE_INLINE_BYTES {
        plan(&m, &body, max_upload)
    } else {
        let m = m.clone();
        match tokio::task::spawn_blocking(move || plan(&m, &body, max_upload)).await {
            Ok(p) => p,
            Err(_) => Err(Invalid {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: "the request could not be parsed (the parser stopped unexpectedly)".into(),
                param: Cow::Borrowed("body"),
                code: None,
            }),
        }
    };
    answer(st, m, planned, lease).await
}

/// A request the dialects' HTTP routes (`crate::dialects`) made from
/// theirs, answered as `POST /v1/audio/speech` answers its own: the same
/// voice names, validation, engine path, streamed body, metrics and log
/// line.
pub(crate) async fn speak_request(
    st: Arc<AppState>,
    m: Arc<Loaded>,
    req: SpeechRequest,
    lease: crate::body_budget::BodyLease,
) -> Response {
    let planned = plan_request(&m, req, st.max_upload_bytes);
    answer(st, m, planned, lease).await
}

/// A planned (or refused) speech request, synthesized and answered.
async fn answer(
    st: Arc<AppState>,
    m: Arc<Loaded>,
    planned: Result<Plan, Invalid>,
    lease: crate::body_budget::BodyLease,
) -> Response {
    let mut plan = match planned {
        Ok(p) => p,
        Err(r) => {
            st.metrics.refused("invalid_request");
            return r.into_response();
        }
    };
    if let Some(inline) = plan.inline.take() {
        match voice::clone_inline(&m, inline).await {
            Ok(c) => plan.req.voice_clone = Some(c),
            Err(r) => {
                st.metrics.refused("invalid_request");
                return r.into_response();
            }
        }
    }
    // The body, and an inline clip decoded from it, are done with.
    drop(lease);
    // Made before synthesis starts, so a codec that cannot start is a
    // clean error response, not a cut body.
    let enc = match plan.output.body_encoder() {
        Ok(e) => e,
        Err(e) => {
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &e.to_string(),
                "server_error",
                None,
            )
        }
    };
    let session = m.engine.open_session();
    // A whole file is offline work: at real-time capacity it waits in
    // line for a stream to end rather than being refused, and says so
    // (`X-TTS-Queued-Ms`); a streamed body is a listener, refused at once.
    let offline = plan.output.complete;
    let asked = std::time::Instant::now();
    let started = if offline {
        session.synthesize_offline(plan.req.clone()).await
    } else {
        session.synthesize(plan.req.clone()).await
    };
    let queued_ms = offline
        .then(|| asked.elapsed().as_millis() as u64)
        .filter(|&ms| ms >= QUEUED_NOTE_MS);
    let stream = match started {
        Ok(s) => s,
        Err(e) => {
            let (status, kind) = match e.kind() {
                ErrorKind::AtCapacity => {
                    st.metrics.refused("at_capacity");
                    (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error")
                }
                ErrorKind::InvalidRequest => {
                    st.metrics.refused("invalid_request");
                    (StatusCode::BAD_REQUEST, "invalid_request_error")
                }
                _ => (StatusCode::SERVICE_UNAVAILABLE, "server_error"),
            };
            let param = e.model_cause().and_then(model_param);
            let mut message = validate::engine_message(&e);
            if let Some(ModelError::TextTooLong { max, .. }) = e.model_cause() {
                message.push_str(&format!(
                    " (`input` takes 1 to {MAX_INPUT_CHARS} characters, and at most {max} tokens on this checkpoint)"
                ));
            }
            let mut r = error_response(status, &message, kind, param);
            if status == StatusCode::TOO_MANY_REQUESTS {
                // Full: a client or balancer may retry (elsewhere) shortly.
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            return r;
        }
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(BODY_CHUNKS);
    let output = plan.output;
    let id = access_log::current().unwrap_or_default();
    let ignored = plan.ignored.join(", ");
    if !ignored.is_empty() {
        tracing::info!(
            target: "tts_transport::http",
            request_id = %id,
            ignored = %ignored,
            family = m.kind().name(),
            "ignored what the client sent by default and this checkpoint cannot honour"
        );
    }
    if let Some(ms) = queued_ms {
        tracing::info!(
            target: "tts_transport::http",
            request_id = %id,
            queued_ms = ms,
            "a whole-file request waited in line for real-time capacity"
        );
    }
    let (answered, answer) = oneshot::channel();
    tokio::spawn(produce(
        st.clone(),
        m.clone(),
        stream,
        plan,
        enc,
        tx,
        Logged { id, answer },
    ));
    let mut resp = body_response(output, rx).await;
    if let Some(ms) = queued_ms {
        resp.headers_mut()
            .insert(QUEUED_HEADER, HeaderValue::from(ms));
    }
    if !ignored.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&ignored) {
            resp.headers_mut().insert(IGNORED_HEADER, v);
        }
    }
    // The synthesis task logs this request's line when the audio is done,
    // with the status this answer carries (a stream that failed before its
    // first audio is a 500 here, not the 200 it would have been).
    let _ = answered.send(resp.status().as_u16());
    resp.extensions_mut().insert(Deferred);
    resp
}

/// On a whole-file answer that waited in line for real-time capacity: the
/// milliseconds it waited (from [`QUEUED_NOTE_MS`] up).
pub const QUEUED_HEADER: &str = "x-tts-queued-ms";

/// A wait shorter than this is admission's own time, not a queue.
const QUEUED_NOTE_MS: u64 = 20;

/// What the synthesis task needs for the request's log line: its id, and
/// the status the client was answered with, sent by the handler once
/// `body_response` has chosen it (dropped unsent when the client left
/// before any answer).
struct Logged {
    id: String,
    answer: oneshot::Receiver<u16>,
}

/// The status logged for a client that closed its connection before it
/// was answered (nginx's "client closed request"): it got none.
const NO_ANSWER: u16 = 499;

/// The response for a started synthesis: the whole file (complete) or the
/// streamed body, with the audio headers.
async fn body_response(
    output: format::ResponseAudio,
    mut rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> Response {
    let mut resp = if output.complete {
        // The whole file first: exact sizes, a Content-Length, and a
        // failure answered with an error status instead of a cut body.
        let mut file = Vec::new();
        while let Some(item) = rx.recv().await {
            match item {
                Ok(b) => file.extend_from_slice(&b),
                Err(e) => return failed_before_audio(&e),
            }
        }
        Response::new(Body::from(file))
    } else {
        // The headers wait for the first item: a request that fails before
        // any audio (a codec emitting non-finite samples from the start)
        // is an error answer naming the problem, not a 200 cut at once.
        let first = match rx.recv().await {
            Some(Ok(b)) => Some(Ok(b)),
            Some(Err(e)) => return failed_before_audio(&e),
            None => None,
        };
        let rest = futures_util::stream::unfold(rx, |mut rx| async move {
            let item = rx.recv().await?;
            if item.is_err() {
                // A failure cuts the body (the connection is aborted): let
                // the server write what it already took first, or the
                // finite audio before the failure dies in its buffer.
                tokio::time::sleep(CUT_GRACE).await;
            }
            Some((item, rx))
        });
        Response::new(Body::from_stream(futures_util::StreamExt::chain(
            futures_util::stream::iter(first),
            rest,
        )))
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(output.content_type()),
    );
    h.insert("x-sample-rate", HeaderValue::from(output.rate));
    h.insert(
        "x-audio-encoding",
        HeaderValue::from_static(output.encoding()),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// How long a streamed body that fails after some audio waits before it is
/// cut, so the audio already handed to the connection reaches the socket:
/// the connection is aborted at the cut, and what it still buffers is lost.
const CUT_GRACE: Duration = Duration::from_millis(50);

/// The answer for a request that failed before any audio left: 503 when
/// the server is shutting down (`Interrupted`), else 500, with the cause.
fn failed_before_audio(e: &std::io::Error) -> Response {
    let status = if e.kind() == std::io::ErrorKind::Interrupted {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    error_response(status, &e.to_string(), "server_error", None)
}

/// Reads the engine stream, resamples, encodes and feeds the body: an
/// `Err` item before any audio becomes the error answer (see `speech`),
/// one after it cuts the body.
async fn produce(
    st: Arc<AppState>,
    m: Arc<Loaded>,
    mut stream: Stream,
    plan: Plan,
    mut enc: format::BodyEncoder,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    logged: Logged,
) {
    let request_id = logged.id;
    let _live = st.track();
    st.metrics
        .http_streams_active
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut drain = st.drain.subscribe();
    let out = plan.output;
    let mut rs = StreamResampler::new(m.native_rate, out.rate).expect("rate validated");
    let t0 = Instant::now();
    // Encoded bytes as a body item: raw, or one SSE delta.
    let item = |bytes: Vec<u8>| -> Bytes {
        if out.sse {
            let ev = serde_json::json!({
                "type": "speech.audio.delta",
                "audio": protocol::base64_encode(&bytes),
            });
            Bytes::from(format!("data: {ev}\n\n"))
        } else {
            Bytes::from(bytes)
        }
    };
    // ElevenLabs' `with-timestamps`: the audio as JSON, with the timings
    // of the characters it carries (`timestamps.rs`).
    let mut stamped = out
        .timestamps
        .map(|t| timestamps::Stamped::new(t, &plan.req.text, out.rate, out.speed));
    let mut samples = Vec::new();
    let mut out_samples = 0u64;
    let mut figures: (Option<f64>, Option<f64>) = (None, None);
    // Whether any audio has left (before it, a failure is an error answer).
    let mut sent = false;
    let outcome = loop {
        let ev = tokio::select! {
            ev = stream.next() => ev,
            // The client went away. A complete body sends nothing until
            // the end, so only this notices it; a streamed one would at
            // its next chunk. Dropping the stream cancels the request.
            _ = tx.closed() => break "abandoned",
            _ = async { let _ = drain.wait_for(|d| *d == Drain::Force).await; } => {
                let _ = tx.send(Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "server shutting down"))).await;
                break "cancelled";
            }
        };
        match ev {
            Some(Event::Audio(chunk)) => {
                samples.clear();
                rs.step(&chunk.samples, &mut samples);
                if chunk.terminal {
                    rs.flush(&mut samples);
                }
                out_samples += samples.len() as u64;
                let bytes = match enc.push(&samples) {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                        break "failed";
                    }
                };
                let bytes = match &mut stamped {
                    Some(st) => st.chunk(&samples, bytes),
                    None => bytes,
                };
                // Nothing ready (a codec holding a partial frame, or a
                // complete body): nothing to send yet.
                if !bytes.is_empty() {
                    if tx.send(Ok(item(bytes))).await.is_err() {
                        // The client went away: dropping the stream cancels.
                        break "abandoned";
                    }
                    sent = true;
                }
                stream.ack(chunk.seq);
            }
            Some(Event::Started { .. }) => {}
            Some(Event::Done { metrics, stop, .. }) => {
                let finished = match (enc.finish(), &mut stamped) {
                    (Ok(bytes), Some(st)) => Ok(st.finish(bytes)),
                    (r, _) => r,
                };
                match finished {
                    Ok(bytes) if bytes.is_empty() => {}
                    Ok(bytes) => {
                        if tx.send(Ok(item(bytes))).await.is_err() {
                            break "abandoned";
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                        break "failed";
                    }
                }
                figures = (metrics.ttfp_ms, metrics.rtf);
                st.metrics.finished_request(
                    true,
                    "done",
                    metrics.ttfp_ms,
                    metrics.rtf,
                    metrics.underruns,
                    Some(&request_id),
                );
                if out.sse {
                    let ev = serde_json::json!({
                        "type": "speech.audio.done",
                        "usage": {
                            "input_tokens": plan.req.text.chars().count(),
                            "output_tokens": metrics.frames,
                            "total_tokens": plan.req.text.chars().count() as u64 + metrics.frames.unwrap_or(0),
                        },
                        "stop": format!("{stop:?}").to_lowercase(),
                        "sample_rate": out.rate,
                        "elapsed_ms": t0.elapsed().as_secs_f64() * 1e3,
                    });
                    let _ = tx.send(Ok(Bytes::from(format!("data: {ev}\n\n")))).await;
                }
                break "done";
            }
            Some(Event::Error { error, .. }) => {
                if out.sse && sent {
                    let ev = serde_json::json!({"type": "error", "error": {"message": error.to_string(), "type": "server_error"}});
                    let _ = tx.send(Ok(Bytes::from(format!("data: {ev}\n\n")))).await;
                } else {
                    // Headers are gone: abort the body so the client sees a
                    // truncated transfer, not a short "complete" file.
                    let _ = tx.send(Err(std::io::Error::other(error.to_string()))).await;
                }
                break "failed";
            }
            Some(Event::Cancelled { .. }) | None => break "cancelled",
        }
    };
    if outcome != "done" {
        if out.complete || !sent {
            // A complete body is all or nothing: never a short file; a
            // stream that ends before any audio is an error answer.
            let _ = tx
                .send(Err(std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    format!("synthesis ended early ({outcome})"),
                )))
                .await;
        }
        st.metrics.finished(true, outcome, None, None, None);
    }
    st.metrics
        .http_streams_active
        .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    let audio_s = out_samples as f64 / out.rate as f64;
    let text_chars = plan.req.text.chars().count();
    let (ttfp_ms, rtf) = figures;
    // The handler answers once it has the first item (a stream) or the
    // whole file (a complete body): every item is sent by now, and with the
    // sender dropped a complete body's answer can be made.
    drop(tx);
    let status = logged.answer.await.unwrap_or(NO_ANSWER);
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                target: "tts_transport::http",
                request_id = %request_id,
                method = "POST",
                route = "/v1/audio/speech",
                status,
                voice = %plan.voice,
                format = out.encoding(),
                text_chars,
                audio_s,
                ttfp_ms,
                rtf,
                outcome,
                ms,
                "request"
            )
        };
    }
    match outcome {
        "done" | "abandoned" => line!(info),
        _ => line!(warn),
    }
}

/// The read-only routes' preamble: the token, then the loaded model (503
/// while loading).
fn authorized_model(st: &AppState, headers: &HeaderMap) -> Result<Arc<Loaded>, Box<Response>> {
    st.authorize(headers)
        .map_err(|r| Box::new(r.into_response()))?;
    st.loaded().ok_or_else(|| {
        Box::new(error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "the model is still loading",
            "server_error",
            None,
        ))
    })
}

/// OpenAI's speech model names, which its SDKs and the apps built on them
/// send by default: each is an alias of the loaded checkpoint (a speech
/// request's `model` is accepted whatever it says, since the server has one
/// model; these are the names a client may look up before it speaks).
pub const MODEL_ALIASES: [&str; 3] = ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"];

/// `GET /v1/models`: the checkpoint (under its directory's name), then
/// OpenAI's model names as its aliases.
pub async fn models(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let m = match authorized_model(&st, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let data: Vec<serde_json::Value> = std::iter::once(m.model_id.as_str())
        .chain(MODEL_ALIASES)
        .map(|id| model_object(id, &m.model_id))
        .collect();
    Json(serde_json::json!({
        "object": "list",
        "data": data,
    }))
    .into_response()
}

/// OpenAI's model object (`id`, `object`, `created`, `owned_by`), with
/// `root`: the checkpoint that answers to `id` (as vLLM's model cards say).
fn model_object(id: &str, checkpoint: &str) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "object": "model",
        "created": 0,
        "owned_by": "tts-rt",
        "root": checkpoint,
    })
}

/// `GET /v1/models/{id}` (the SDK's `models.retrieve`): the checkpoint or
/// one of its aliases ([`MODEL_ALIASES`]); any other id is OpenAI's 404
/// (`model_not_found`), naming the ids this server answers to.
pub async fn model(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let m = match authorized_model(&st, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    if id != m.model_id && !MODEL_ALIASES.contains(&id.as_str()) {
        return error_with_code(
            StatusCode::NOT_FOUND,
            &format!(
                "The model '{id}' does not exist: this server serves '{}' (also as '{}')",
                m.model_id,
                MODEL_ALIASES.join("', '")
            ),
            "invalid_request_error",
            Some("model"),
            Some("model_not_found"),
        );
    }
    Json(model_object(&id, &m.model_id)).into_response()
}

pub async fn voices(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let m = match authorized_model(&st, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let voices_of = &m.speakers;
    let mut voices: Vec<serde_json::Value> = m
        .speakers
        .names()
        .iter()
        .map(|s| serde_json::json!({"id": s, "name": s, "speaker": s, "kind": "speaker"}))
        .collect();
    voices.extend(m.speakers.openai_mapping().into_iter().map(|(v, s)| {
        // `mapped`: the deployment's --voice-map, or the built-in table.
        let mapped = if voices_of.is_overridden(v) {
            "config"
        } else {
            "default"
        };
        serde_json::json!({
            "id": v,
            "name": format!("{v} ({s})"),
            "speaker": s,
            "kind": "openai",
            "mapped": mapped,
        })
    }));
    // A Base checkpoint's stored voices, under the names a request gives.
    // `name` on every entry is what pickers show (Open WebUI reads
    // `{voices: [{id, name}]}` from a custom OpenAI endpoint).
    voices.extend(
        library::summaries(&m)
            .into_iter()
            .filter_map(|v| v["name"].as_str().map(str::to_owned))
            .map(|n| serde_json::json!({"id": n, "name": n, "kind": "stored"})),
    );
    Json(serde_json::json!({
        "voices": voices,
        // vllm-omni's list of stored voices (summaries).
        "uploaded_voices": library::summaries(&m),
        // What the checkpoint speaks: CustomVoice, Base or VoiceDesign.
        "family": m.kind().name(),
        // What `instructions` do here: `voice`, `style` or `none`.
        "instructions": validate::instructions_role(&m),
        "languages": m.languages,
        "sample_rate": m.native_rate,
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_refusal_names_the_openai_field_it_is_about() {
        let speaker = ModelError::UnknownSpeaker {
            name: "bob".into(),
            valid: vec![],
        };
        let language = ModelError::UnknownLanguage {
            name: "klingon".into(),
            valid: vec![],
        };
        let long = ModelError::TextTooLong {
            tokens: 9000,
            max: 8192,
        };
        assert_eq!(model_param(&speaker), Some("voice"));
        assert_eq!(model_param(&language), Some("language"));
        assert_eq!(model_param(&ModelError::EmptyText), Some("input"));
        assert_eq!(model_param(&long), Some("input"));
        assert_eq!(
            model_param(&ModelError::InvalidRequest("top_k".into())),
            None
        );
    }

    #[test]
    fn every_listed_field_is_a_speech_request_field() {
        let mut body = serde_json::Map::new();
        for f in FIELDS {
            body.insert(f.into(), serde_json::Value::Null);
        }
        body.insert("input".into(), "hi".into());
        let r: Result<SpeechRequest, _> = serde_json::from_value(body.into());
        assert!(r.is_ok(), "{:?}", r.err());
    }

    #[test]
    fn an_unknown_field_is_refused_naming_it_and_the_near_one() {
        let e = unknown_field("langauge");
        assert_eq!(e.param, "langauge");
        assert_eq!(e.code, Some("unknown_parameter"));
        assert!(
            e.message
                .starts_with("Unknown parameter: 'langauge'. Did you mean 'language'?"),
            "{}",
            e.message
        );
        let far = unknown_field("temperature");
        assert!(!far.message.contains("Did you mean"), "{}", far.message);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn voice_is_a_name_or_an_id_object() {
        use serde_json::json;
        assert_eq!(voice_name(&json!("alloy")).ok(), Some("alloy"));
        assert_eq!(voice_name(&json!({"id": "eric"})).ok(), Some("eric"));
        for bad in [
            json!(5),
            json!(null),
            json!({}),
            json!({"id": 3}),
            json!({"id": "a", "x": 1}),
            json!(["alloy"]),
        ] {
            let e = voice_name(&bad).expect_err("refused");
            assert_eq!(e.param, "voice");
            assert!(e.message.contains("voice name"), "{}", e.message);
        }
    }

    #[test]
    fn shared_check_refusals_keep_the_openai_route_wording() {
        let voice = Invalid::from(Rejected::UnknownVoice {
            voice: "Nobody".into(),
            valid: vec!["ryan".into(), "alloy".into()],
        });
        assert_eq!(voice.param, "voice");
        assert_eq!(
            voice.message,
            "unknown voice \"Nobody\"; use one of: ryan, alloy"
        );
        let lang = Invalid::from(Rejected::UnknownLanguage {
            language: "klingon".into(),
            valid: vec!["auto".into(), "english".into()],
        });
        assert_eq!(lang.param, "language");
        assert_eq!(
            lang.message,
            "unknown language \"klingon\"; use one of: auto, english"
        );
        let rate = Invalid::from(Rejected::SampleRate { rate: 1 });
        assert_eq!(rate.param, "sample_rate");
        assert_eq!(
            rate.message,
            format!(
                "sample_rate 1 is out of range; use {}..={}",
                protocol::MIN_SAMPLE_RATE,
                protocol::MAX_SAMPLE_RATE
            )
        );
        let frames = Invalid::from(Rejected::MaxFrames { frames: 0, max: 5 });
        assert_eq!(frames.param, "max_frames");
        assert_eq!(frames.message, "max_frames 0 must be 1..=5");
    }
}
