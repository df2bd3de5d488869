//! `/v1/audio/voices/...`: making, showing and removing stored voices (the
//! list itself is `openai::voices`, which adds them as `uploaded_voices`).
//! Only Base checkpoints make and speak stored voices; the routes say so on
//! the others.
//!
//! Making a voice runs both encoders (seconds of CPU for a long clip), so it
//! runs on a blocking thread, never on the async workers that move every
//! other session's audio.

pub mod audio_field;
mod refusal;
mod upload;

use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tts_actors::{ModelError, ModelKind, VoiceLibrary};
use tts_voices::VoiceName;

use crate::http_error::Refusal;
use crate::state::{AppState, Loaded};
pub use refusal::voice_refusal;

/// The voice library of a Base checkpoint, or the refusal that says why
/// there is none.
pub fn library_of(m: &Loaded, problem: &str) -> Result<Arc<VoiceLibrary>, Refusal> {
    if m.kind() != ModelKind::Base {
        return Err(wrong_family(m, problem));
    }
    m.library.clone().ok_or_else(|| {
        Refusal::bad(
            "this server keeps no voices: start it with --voices-dir DIR",
            "voice",
        )
    })
}

/// The model's own refusal for a request outside the checkpoint's family,
/// as a 400: it says what the checkpoint does.
pub fn wrong_family(m: &Loaded, problem: &str) -> Refusal {
    let e = ModelError::WrongFamily {
        family: m.kind(),
        problem: problem.to_string(),
    };
    Refusal::new(StatusCode::BAD_REQUEST, e.to_string(), None)
}

/// Stored voices' summaries (`uploaded_voices`); empty without a library.
pub fn summaries(m: &Loaded) -> Vec<serde_json::Value> {
    m.library
        .as_ref()
        .map(|l| l.list().iter().map(|r| r.summary_json()).collect())
        .unwrap_or_default()
}

/// The token, then the loaded model.
fn preamble(st: &AppState, headers: &HeaderMap) -> Result<Arc<Loaded>, Box<Response>> {
    st.authorize(headers)
        .map_err(|r| Box::new(r.into_response()))?;
    st.loaded().ok_or_else(|| {
        Box::new(
            Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                crate::state::NOT_READY,
                None,
            )
            .into_response(),
        )
    })
}

/// Removes a name from the uploads in progress when its upload ends.
struct Uploading<'a> {
    st: &'a AppState,
    key: String,
}

impl Drop for Uploading<'_> {
    fn drop(&mut self) {
        self.st
            .uploading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}

/// `POST /v1/audio/voices`: 201 with the new voice's summary and what each
/// encoder took.
pub async fn create(State(st): State<Arc<AppState>>, headers: HeaderMap, req: Request) -> Response {
    let m = match preamble(&st, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    match make(&st, &m, req).await {
        Ok(r) => r,
        Err(r) => {
            st.metrics.refused("invalid_voice");
            r.into_response()
        }
    }
}

async fn make(st: &Arc<AppState>, m: &Loaded, req: Request) -> Result<Response, Refusal> {
    let lib = library_of(m, "a voice was to be made from a reference clip")?;
    let up = upload::read(req, st.max_upload_bytes, &st.bodies).await?;
    // Named before any work is spent, and held while the clip encodes: a
    // second upload of the name is refused at once.
    let name = VoiceName::new(&up.new.name).map_err(|e| Refusal::bad(e.to_string(), "name"))?;
    let key = name.key().to_string();
    if !st
        .uploading
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone())
    {
        let e = tts_voices::StoreError::Busy {
            name: name.as_str().to_string(),
        };
        return Err(Refusal::new(
            StatusCode::CONFLICT,
            e.to_string(),
            Some("name"),
        ));
    }
    let _held = Uploading { st, key };
    let audio_param = up.audio_param;
    let made = tokio::task::spawn_blocking(move || lib.add(&up.new, &up.audio, &up.source_name))
        .await
        .map_err(|e| {
            Refusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("making the voice failed: {e}"),
                None,
            )
        })?
        .map_err(|e| voice_refusal(&e, audio_param))?;
    let mut body = made.record.summary_json();
    body["object"] = "voice".into();
    body["reference_s"] = made.reference_secs.into();
    body["timings_ms"] = serde_json::json!({
        "x_vector": made.timings.x_vector.as_secs_f64() * 1e3,
        "codes": made.timings.codes.as_secs_f64() * 1e3,
    });
    tracing::info!(
        voice = made.record.name.as_str(),
        mode = made.record.mode.as_str(),
        reference_s = made.reference_secs,
        x_vector_ms = made.timings.x_vector.as_secs_f64() * 1e3,
        codes_ms = made.timings.codes.as_secs_f64() * 1e3,
        "voice made"
    );
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

#[derive(serde::Deserialize)]
pub struct ShowQuery {
    /// Adds the x-vector and the reference codes.
    full: Option<bool>,
}

/// `GET /v1/audio/voices/{name}` (`?full=true`: with the x-vector and codes).
pub async fn show(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<ShowQuery>,
    Path(name): Path<String>,
) -> Response {
    let m = match preamble(&st, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let record = m.library.as_ref().and_then(|l| l.get(&name));
    match record {
        Some(r) if q.full == Some(true) => Json(r.to_json()).into_response(),
        Some(r) => Json(r.summary_json()).into_response(),
        None => not_found(&m, &name).into_response(),
    }
}

/// `DELETE /v1/audio/voices/{name}`: 200 naming what was removed, 404 when
/// there is no such voice.
pub async fn delete(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let m = match preamble(&st, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let Some(lib) = m.library.clone() else {
        return not_found(&m, &name).into_response();
    };
    match tokio::task::spawn_blocking(move || lib.remove(&name)).await {
        Ok(Ok(r)) => {
            let mut body = serde_json::json!({
                "object": "voice",
                "name": r.name(),
                "deleted": true,
            });
            // A voice file that did not load is removed by its name; the
            // reply says what it was.
            if let Some(reason) = r.corrupt_reason() {
                body["corrupt"] = reason.into();
            }
            Json(body).into_response()
        }
        Ok(Err(e)) => voice_refusal(&e, "name").into_response(),
        Err(e) => {
            Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string(), None).into_response()
        }
    }
}

fn not_found(m: &Loaded, name: &str) -> Refusal {
    let e = match &m.library {
        Some(lib) => lib.not_found(name),
        None => tts_actors::VoiceError::NotFound {
            name: name.to_string(),
            known: Vec::new(),
            deleted: false,
        },
    };
    Refusal::new(StatusCode::NOT_FOUND, e.to_string(), Some("name"))
}
