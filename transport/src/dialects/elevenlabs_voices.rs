//! ElevenLabs' voice routes, as its SDK calls them (`client.voices.get_all`,
//! `search`, `get`, `settings.get_default`):
//!
//! - `GET /v1/voices`: `{"voices": [Voice, ...]}`, every voice.
//! - `GET /v2/voices`: `{"voices", "has_more", "total_count",
//!   "next_page_token"}`, a page of them: `page_size` (default 10, at most
//!   100), `next_page_token` (from the previous page), `search` (in the
//!   name, description and labels, case-insensitive), `category`
//!   (`premade`, `cloned`), `voice_type` (`default`: the premade ones;
//!   `personal`, `workspace`, `non-default`, `non-community`, `saved`: the
//!   cloned ones; `community`: none), `voice_ids` (repeatable). Other
//!   filters (gender, age, accent, language, ...) are accepted and ignored.
//! - `GET /v1/voices/{voice_id}`: one voice; `404` `voice_not_found` in
//!   ElevenLabs' error shape for an id that is none of them.
//! - `GET /v1/voices/settings/default` and `GET /v1/voices/{voice_id}/settings`:
//!   ElevenLabs' default voice settings (accepted and ignored by the speech
//!   routes; no voice here has settings of its own).
//!
//! The voices are the checkpoint's preset speakers (CustomVoice;
//! `category: "premade"`, labelled with their dialect when they have one)
//! and the stored voices of the voice library (Base with a voices
//! directory; `category: "cloned"`, their description and creation time).
//! `voice_id` and `name` are what a speech request names the voice by.
//! Auth as the other ElevenLabs routes: `xi-api-key` or
//! `Authorization: Bearer`.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::state::{AppState, Loaded};

/// Largest `page_size` (ElevenLabs' own limit).
const MAX_PAGE: usize = 100;
/// `page_size` when none is given (ElevenLabs' default).
const DEFAULT_PAGE: usize = 10;

/// ElevenLabs' error body: `{"detail": {"status", "message"}}`.
pub(super) fn detail(status: StatusCode, code: &str, message: &str) -> Response {
    let mut d = json!({"status": code, "message": message});
    if let Some(id) = crate::access_log::current() {
        d["request_id"] = id.into();
    }
    (status, Json(json!({ "detail": d }))).into_response()
}

/// Auth, then the loaded model.
fn model(st: &AppState, headers: &HeaderMap) -> Result<Arc<Loaded>, Box<Response>> {
    st.authorize(&super::vendor_key_as_bearer(headers, None))
        .map_err(|r| Box::new(r.into_response()))?;
    st.loaded().ok_or_else(|| {
        Box::new(detail(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            crate::state::NOT_READY,
        ))
    })
}

/// One voice in ElevenLabs' `Voice` shape (the SDK's model: every field
/// but `voice_id` optional).
fn voice(id: &str, category: &str, labels: Value, description: Option<&str>) -> Value {
    json!({
        "voice_id": id,
        "name": id,
        "category": category,
        "labels": labels,
        "description": description,
        "preview_url": null,
        "samples": null,
        "fine_tuning": null,
        "available_for_tiers": [],
        "settings": null,
        "sharing": null,
        "high_quality_base_model_ids": [],
        "verified_languages": [],
        "is_owner": category == "cloned",
        "is_legacy": false,
        "is_mixed": false,
    })
}

/// Every voice: the preset speakers, then the stored voices (by name).
fn all(m: &Loaded) -> Vec<Value> {
    let speakers = &m.model.config.talker.speakers;
    let mut out: Vec<Value> = m
        .speakers
        .names()
        .iter()
        .map(|s| {
            let mut labels = json!({"source": "checkpoint"});
            if let Some(d) = speakers.get(s).and_then(|c| c.dialect.as_deref()) {
                labels["dialect"] = d.into();
            }
            voice(s, "premade", labels, None)
        })
        .collect();
    if let Some(lib) = &m.library {
        out.extend(lib.list().iter().map(|r| {
            let mut v = voice(
                r.name.as_str(),
                "cloned",
                json!({"source": "library", "mode": r.mode.as_str()}),
                r.description.as_deref(),
            );
            v["created_at_unix"] = r.provenance.created.unix_seconds().into();
            v
        }));
    }
    out
}

/// The voice named `id` (a speaker, case-insensitive, or a stored voice).
fn find(m: &Loaded, id: &str) -> Option<Value> {
    let key = id.trim().to_lowercase();
    all(m).into_iter().find(|v| {
        v["voice_id"]
            .as_str()
            .is_some_and(|n| n == id || n.to_lowercase() == key)
    })
}

/// `GET /v1/voices`.
pub(super) async fn list(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    match model(&st, &headers) {
        Ok(m) => Json(json!({ "voices": all(&m) })).into_response(),
        Err(r) => *r,
    }
}

/// `GET /v2/voices`: a page of the voices that match the filters.
pub(super) async fn search(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let m = match model(&st, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let one = |k: &str| {
        q.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    let page = match one("page_size").map(str::parse::<usize>) {
        None => DEFAULT_PAGE,
        Some(Ok(n)) if (1..=MAX_PAGE).contains(&n) => n,
        Some(_) => {
            return detail(
                StatusCode::BAD_REQUEST,
                "invalid_page_size",
                &format!("page_size must be a whole number from 1 to {MAX_PAGE}"),
            )
        }
    };
    let start = match one("next_page_token").map(str::parse::<usize>) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            return detail(
                StatusCode::BAD_REQUEST,
                "invalid_next_page_token",
                "next_page_token is not one this server gave",
            )
        }
    };
    let ids: Vec<&str> = q
        .iter()
        .filter(|(n, _)| n == "voice_ids")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    let needle = one("search").map(|s| s.trim().to_lowercase());
    let category = one("category");
    let voice_type = one("voice_type");
    let matching: Vec<Value> = all(&m)
        .into_iter()
        .filter(|v| {
            let cat = v["category"].as_str().unwrap_or_default();
            let id = v["voice_id"].as_str().unwrap_or_default();
            let of_type = match voice_type {
                None | Some("") => true,
                Some("default") => cat == "premade",
                Some("community") => false,
                Some(_) => cat == "cloned",
            };
            let found = needle.as_deref().is_none_or(|n| {
                n.is_empty()
                    || id.to_lowercase().contains(n)
                    || v["description"]
                        .as_str()
                        .is_some_and(|d| d.to_lowercase().contains(n))
                    || v["labels"].to_string().to_lowercase().contains(n)
                    || cat.contains(n)
            });
            category.is_none_or(|c| c.is_empty() || c == cat)
                && of_type
                && found
                && (ids.is_empty() || ids.contains(&id))
        })
        .collect();
    let total = matching.len();
    let end = start.saturating_add(page).min(total);
    let voices: Vec<Value> = matching.into_iter().skip(start).take(page).collect();
    let has_more = end < total;
    Json(json!({
        "voices": voices,
        "has_more": has_more,
        "total_count": total,
        "next_page_token": has_more.then(|| end.to_string()),
    }))
    .into_response()
}

/// `GET /v1/voices/{voice_id}`.
pub(super) async fn show(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let m = match model(&st, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    match find(&m, &id) {
        Some(v) => Json(v).into_response(),
        None => not_found(&m, &id),
    }
}

/// `404 voice_not_found`, naming the voices there are.
fn not_found(m: &Loaded, id: &str) -> Response {
    let names: Vec<String> = all(m)
        .iter()
        .filter_map(|v| v["voice_id"].as_str().map(str::to_owned))
        .collect();
    let there = if names.is_empty() {
        "this server has no voices to list (GET /v1/voices)".to_string()
    } else {
        format!("the voices are: {}", names.join(", "))
    };
    detail(
        StatusCode::NOT_FOUND,
        "voice_not_found",
        &format!("a voice with the voice_id {id:?} was not found; {there}"),
    )
}

/// ElevenLabs' default voice settings.
fn default_settings() -> Value {
    json!({
        "stability": 0.5,
        "similarity_boost": 0.75,
        "style": 0.0,
        "use_speaker_boost": true,
        "speed": 1.0,
    })
}

/// `GET /v1/voices/settings/default`.
pub(super) async fn settings_default(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = st.authorize(&super::vendor_key_as_bearer(&headers, None)) {
        return r.into_response();
    }
    Json(default_settings()).into_response()
}

/// `GET /v1/voices/{voice_id}/settings`: the defaults, for a voice there is.
pub(super) async fn settings(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let m = match model(&st, &headers) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    match find(&m, &id) {
        Some(_) => Json(default_settings()).into_response(),
        None => not_found(&m, &id),
    }
}
