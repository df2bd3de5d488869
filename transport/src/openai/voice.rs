//! Who speaks a `/v1/audio/speech` request, by the checkpoint's family:
//! CustomVoice maps `voice` onto its preset speakers (OpenAI's names too);
//! Base speaks a stored voice named by `voice`, or clones the request's own
//! `ref_audio` (vllm-omni's fields; made on a blocking thread); VoiceDesign
//! speaks the voice its `instructions` describe (without them, as the
//! official code, an undescribed voice) and ignores OpenAI's voice names,
//! which SDKs always send.

use std::sync::Arc;

use axum::http::StatusCode;
use tts_actors::{ModelKind, VoiceClone, VoiceError, VoiceLibrary};

use super::{invalid, voice_name, Invalid, SpeechRequest};
use crate::http_error::Refusal;
use crate::library;
use crate::state::Loaded;
use crate::validate;

/// A voice to clone from the request's own clip, made after validation on
/// a blocking thread.
pub(super) struct Inline {
    bytes: Vec<u8>,
    hint: Option<&'static str>,
    ref_text: Option<String>,
    x_vector_only: bool,
}

/// Who speaks: a preset speaker (CustomVoice), a stored or inline clone
/// (Base), or no one (VoiceDesign: its `instructions` describe the voice).
pub(super) struct VoiceChoice {
    pub(super) speaker: Option<String>,
    pub(super) clone: Option<Arc<VoiceClone>>,
    pub(super) inline: Option<Inline>,
    /// VoiceDesign: the request's OpenAI voice name, which means nothing
    /// there, was left out (named in `X-TTS-Ignored`).
    pub(super) ignored_voice: bool,
}

pub(super) fn choose(
    m: &Loaded,
    r: &SpeechRequest,
    max_upload: usize,
) -> Result<VoiceChoice, Invalid> {
    let voice = r.voice.as_ref().map(voice_name).transpose()?;
    let ref_audio = r.ref_audio.as_deref().filter(|a| !a.trim().is_empty());
    let mut choice = VoiceChoice {
        speaker: None,
        clone: None,
        inline: None,
        ignored_voice: false,
    };
    match m.kind() {
        ModelKind::Base => {
            if let Some(a) = ref_audio {
                let f = library::audio_field::decode(a, "ref_audio", max_upload)?;
                choice.inline = Some(Inline {
                    bytes: f.bytes,
                    hint: f.hint,
                    ref_text: r.ref_text.clone(),
                    x_vector_only: r.x_vector_only_mode.unwrap_or(false),
                });
            } else if let Some(v) = voice {
                choice.clone = Some(stored_voice(m, v)?);
            }
        }
        kind => {
            if ref_audio.is_some() {
                return Err(library::wrong_family(
                    m,
                    "the request has reference audio (ref_audio) to clone",
                )
                .into());
            }
            if kind == ModelKind::VoiceDesign {
                // SDKs always send a voice: OpenAI's names mean "any".
                if let Some(v) = voice {
                    if !is_openai_voice(v) {
                        return Err(library::wrong_family(
                            m,
                            &format!("the request names the voice {v:?}"),
                        )
                        .into());
                    }
                    choice.ignored_voice = true;
                }
            } else {
                choice.speaker = Some(match voice {
                    None => m.speakers.default_speaker().unwrap_or_default().to_string(),
                    Some(v) => validate::speaker(&m.speakers, v)?,
                });
            }
        }
    }
    Ok(choice)
}

fn is_openai_voice(v: &str) -> bool {
    crate::speakers::OPENAI_VOICES.contains(&v.trim().to_lowercase().as_str())
}

/// A stored voice by name (Base), or a 400 listing the stored ones.
fn stored_voice(m: &Loaded, name: &str) -> Result<Arc<VoiceClone>, Invalid> {
    let lib = library::library_of(m, "the request names a stored voice")?;
    match lib.resolve(name) {
        Ok(c) => Ok(c),
        Err(VoiceError::NotFound { known, deleted, .. }) => {
            let stored = if known.is_empty() {
                "no voices are stored yet".to_string()
            } else {
                format!("stored voices: {}", known.join(", "))
            };
            let message = if deleted {
                format!("voice {name:?} was deleted from the library: this Base checkpoint speaks stored voices ({stored}); upload one with POST /v1/audio/voices, or send ref_audio (with ref_text) in the request")
            } else if is_openai_voice(name) {
                // OpenAI's SDKs need a voice and apps default to one of its
                // names: say how to make that name speak here.
                format!("voice {name:?} is an OpenAI voice name, and this Base checkpoint has no preset voices: it speaks voices cloned from a clip ({stored}). Store one under that name (POST /v1/audio/voices with name \"{lower}\", or `tts-rt voice add {lower}`) and requests for {name:?} speak it; or name a stored voice, or send ref_audio (with ref_text) in the request", lower = name.trim().to_lowercase())
            } else {
                format!("unknown voice {name:?}: this Base checkpoint speaks stored voices ({stored}); upload one with POST /v1/audio/voices, or send ref_audio (with ref_text) in the request")
            };
            Err(invalid(message, "voice"))
        }
        Err(e) => Err(library::voice_refusal(&e, "voice").into()),
    }
}

/// Makes the request's own voice on a blocking thread (the encoders take
/// seconds of CPU for a long clip).
pub(super) async fn clone_inline(m: &Arc<Loaded>, i: Inline) -> Result<Arc<VoiceClone>, Refusal> {
    let m = m.clone();
    tokio::task::spawn_blocking(move || match &m.library {
        Some(lib) => lib.clone_inline(&i.bytes, i.hint, i.ref_text.as_deref(), i.x_vector_only),
        // No voices directory: the same two steps without a store.
        None => {
            let audio = VoiceLibrary::decode(&i.bytes, i.hint)?;
            let (c, _) =
                m.model
                    .clone_voice(&audio.samples, i.ref_text.as_deref(), i.x_vector_only)?;
            Ok(Arc::new(c))
        }
    })
    .await
    .map_err(|e| {
        Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cloning the voice failed: {e}"),
            None,
        )
    })?
    .map_err(|e| library::voice_refusal(&e, "ref_audio"))
}
