//! An upload request (`POST /v1/audio/voices`) read into what making a voice
//! needs, from either shape a client sends:
//! - `multipart/form-data` as vllm-omni takes it: the file `audio_sample`,
//!   `name`, optional `ref_text` (present: in-context cloning; absent:
//!   x-vector only), `x_vector_only_mode`, `speaker_description`,
//!   `replace`; `consent` and unknown fields are accepted and ignored.
//! - `application/json`: `{name, audio (base64 or data URL), ref_text?,
//!   x_vector_only_mode?, speaker_description?, replace?}`.
//!
//! The clip is counted as it arrives, so an oversized one is refused (413)
//! without being held whole; a refused form is read on and dropped (bounded)
//! so the client reads the 413 instead of a reset.

use axum::extract::{FromRequest, Multipart, Request};
use axum::http::{header, StatusCode};
use tts_actors::NewVoice;

use super::audio_field::{self, too_large};
use crate::body_budget::{BodyBudget, BodyLease};
use crate::http_error::Refusal;

/// Longest text field (name, transcript, description) of a form.
const MAX_TEXT_FIELD: usize = 64 * 1024;

/// A parsed upload.
pub struct Upload {
    pub new: NewVoice,
    pub audio: Vec<u8>,
    /// The clip's file name (or "upload"), kept in the voice's provenance.
    pub source_name: String,
    /// The request field the clip came in, for refusals.
    pub audio_param: &'static str,
    /// The body's bytes in the server's body budget, held while the upload
    /// is (the clip is decoded and encoded from it).
    pub _lease: BodyLease,
}

/// Reads `req` by its content type.
pub async fn read(req: Request, max_audio: usize, budget: &BodyBudget) -> Result<Upload, Refusal> {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if ct.starts_with("multipart/form-data") {
        let mut mp = Multipart::from_request(req, &())
            .await
            .map_err(|e| Refusal::bad(format!("bad multipart body: {e}"), "body"))?;
        let read = read_multipart(&mut mp, max_audio, budget.lease()).await;
        if read.is_err() {
            // Like a JSON body's: a client still sending reads the refusal
            // instead of a reset from unread data.
            drain(mp).await;
        }
        read
    } else if ct.is_empty() || ct.starts_with("application/json") {
        // Base64 is 4/3 of the clip; the rest of the JSON is small.
        let limit = max_audio / 3 * 4 + MAX_TEXT_FIELD * 4;
        let length = crate::http_error::content_length(req.headers());
        let (body, lease) = crate::http_error::read_body(req.into_body(), limit, budget, length)
            .await
            .map_err(|e| e.into_refusal(|| too_large("audio", max_audio)))?;
        read_json(&body, max_audio, lease)
    } else {
        Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content type {ct:?}: send multipart/form-data (audio_sample, name, ref_text) or application/json (name, audio as base64)"),
            Some("body"),
        ))
    }
}

#[derive(serde::Deserialize)]
struct JsonUpload {
    name: Option<String>,
    #[serde(alias = "audio_sample", alias = "wav_b64")]
    audio: Option<String>,
    ref_text: Option<String>,
    x_vector_only_mode: Option<bool>,
    speaker_description: Option<String>,
    replace: Option<bool>,
}

fn read_json(body: &[u8], max_audio: usize, lease: BodyLease) -> Result<Upload, Refusal> {
    let j: JsonUpload = serde_json::from_slice(body)
        .map_err(|e| Refusal::bad(format!("invalid JSON body: {e}"), "body"))?;
    let audio = j.audio.ok_or_else(|| {
        Refusal::bad(
            "audio is missing: give the clip as base64 or a data URL",
            "audio",
        )
    })?;
    let field = audio_field::decode(&audio, "audio", max_audio)?;
    Ok(Upload {
        new: new_voice(
            j.name,
            j.ref_text,
            j.x_vector_only_mode,
            j.speaker_description,
            j.replace,
        )?,
        audio: field.bytes,
        source_name: field.hint.unwrap_or("upload").to_string(),
        audio_param: "audio",
        _lease: lease,
    })
}

/// Reads the rest of a refused form and drops it, within the same bounds
/// as an over-long JSON body (`http_error::read_body`).
async fn drain(mut mp: Multipart) {
    use crate::http_error::{DRAIN_BYTES, DRAIN_TIME};
    let rest = async {
        let mut dropped = 0usize;
        while let Ok(Some(mut field)) = mp.next_field().await {
            while let Ok(Some(chunk)) = field.chunk().await {
                dropped += chunk.len();
                if dropped > DRAIN_BYTES {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, rest).await;
}

/// Most text fields' bytes a form carries besides its clip (many small
/// fields add up too).
const MAX_FORM_TEXT: usize = 8 * MAX_TEXT_FIELD;

async fn read_multipart(
    mp: &mut Multipart,
    max_audio: usize,
    mut lease: BodyLease,
) -> Result<Upload, Refusal> {
    let bad_body = |e: axum::extract::multipart::MultipartError| {
        Refusal::bad(format!("bad multipart body: {e}"), "body")
    };
    let mut text_bytes = 0usize;
    let mut audio: Option<(Vec<u8>, String)> = None;
    let (mut name, mut ref_text, mut xvo, mut description, mut replace) =
        (None, None, None, None, None);
    while let Some(mut field) = mp.next_field().await.map_err(bad_body)? {
        let field_name = field.name().unwrap_or("").to_string();
        if field_name == "audio_sample" || field_name == "audio" || field_name == "file" {
            let file_name = field.file_name().unwrap_or("upload").to_string();
            let mut bytes = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(bad_body)? {
                if bytes.len() + chunk.len() > max_audio {
                    return Err(too_large("audio_sample", max_audio));
                }
                // Charged before it grows: a doubling Vec, at most the
                // clip limit (plus the form's text, counted below).
                if bytes.len() + chunk.len() > bytes.capacity() {
                    let cap = (bytes.len() + chunk.len())
                        .max(bytes.capacity() * 2)
                        .clamp(8 * 1024, max_audio);
                    lease
                        .cover(cap + text_bytes)
                        .map_err(|e| Refusal::busy(e.message()))?;
                    bytes.reserve_exact(cap - bytes.len());
                }
                bytes.extend_from_slice(&chunk);
            }
            audio = Some((bytes, file_name));
            continue;
        }
        let mut text = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(bad_body)? {
            if text.len() + chunk.len() > MAX_TEXT_FIELD {
                // Named as the clip's 413 is (`audio_sample`): the field
                // the client sent, e.g. `ref_text`.
                return Err(Refusal::about(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("form field {field_name:?} is over {MAX_TEXT_FIELD} bytes"),
                    field_name,
                ));
            }
            text_bytes += chunk.len();
            if text_bytes > MAX_FORM_TEXT {
                return Err(Refusal::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the form's text fields are over {MAX_FORM_TEXT} bytes in all"),
                    Some("body"),
                ));
            }
            text.extend_from_slice(&chunk);
        }
        let text = String::from_utf8(text)
            .map_err(|_| Refusal::bad(format!("form field {field_name:?} is not UTF-8"), "body"))?;
        match field_name.as_str() {
            "name" => name = Some(text),
            "ref_text" => ref_text = Some(text),
            "x_vector_only_mode" => xvo = Some(form_bool(&text, "x_vector_only_mode")?),
            "speaker_description" => description = Some(text),
            "replace" => replace = Some(form_bool(&text, "replace")?),
            // `consent` (vllm-omni's) and anything else: accepted, unused.
            _ => {}
        }
    }
    let Some((bytes, file_name)) = audio else {
        return Err(Refusal::bad(
            "audio_sample is missing: attach the clip as the form file audio_sample",
            "audio_sample",
        ));
    };
    if bytes.is_empty() {
        return Err(Refusal::bad("audio_sample is empty", "audio_sample"));
    }
    Ok(Upload {
        new: new_voice(name, ref_text, xvo, description, replace)?,
        audio: bytes,
        source_name: file_name,
        audio_param: "audio_sample",
        _lease: lease,
    })
}

/// The voice to make: a transcript means in-context cloning unless
/// `x_vector_only_mode` says otherwise; no transcript means x-vector only
/// (vllm-omni's rule), unless `x_vector_only_mode=false` asks for ICL —
/// which the encoders then refuse for want of the transcript.
fn new_voice(
    name: Option<String>,
    ref_text: Option<String>,
    x_vector_only: Option<bool>,
    description: Option<String>,
    replace: Option<bool>,
) -> Result<NewVoice, Refusal> {
    let name = name
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Refusal::bad("name is missing: give the voice a name", "name"))?;
    let ref_text = ref_text.filter(|t| !t.trim().is_empty());
    Ok(NewVoice {
        x_vector_only: x_vector_only.unwrap_or(ref_text.is_none()),
        name,
        ref_text,
        description: description.filter(|d| !d.trim().is_empty()),
        replace: replace.unwrap_or(false),
    })
}

/// A form's boolean: true/false, 1/0, yes/no, on/off.
fn form_bool(v: &str, param: &'static str) -> Result<bool, Refusal> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" | "" => Ok(false),
        other => Err(Refusal::bad(
            format!("{param} must be true or false, got {other:?}"),
            param,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_decides_the_mode_unless_told() {
        let v = new_voice(Some("a".into()), Some("hi".into()), None, None, None).unwrap();
        assert!(!v.x_vector_only);
        let v = new_voice(Some("a".into()), None, None, None, None).unwrap();
        assert!(v.x_vector_only);
        let v = new_voice(Some("a".into()), Some(" ".into()), Some(false), None, None).unwrap();
        assert!(!v.x_vector_only && v.ref_text.is_none());
        assert_eq!(
            new_voice(None, None, None, None, None)
                .unwrap_err()
                .param
                .as_deref(),
            Some("name")
        );
        assert!(form_bool("On", "x").unwrap());
        assert!(form_bool("maybe", "x").is_err());
    }
}
