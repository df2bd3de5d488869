//! The `info` event's `tts` program: tts-rt and its voices — the
//! checkpoint's preset speakers (CustomVoice) and the voice library's
//! stored voices (Base with a voices directory), each with the
//! checkpoint's languages as the language codes Wyoming clients (Home
//! Assistant) use.

use serde_json::{json, Value};

use crate::state::Loaded;

/// The program's name in `info`.
pub const PROGRAM: &str = "tts-rt";

/// The one voice listed for a checkpoint with neither preset speakers nor
/// stored voices (VoiceDesign: its voice is described by instructions),
/// so clients that pick a voice (and learn the languages from it) have
/// one; a request naming it speaks the checkpoint's default.
pub const DEFAULT_VOICE: &str = "default";

/// Whether `info` lists only [`DEFAULT_VOICE`].
pub fn only_default(m: &Loaded) -> bool {
    m.speakers.names().is_empty() && m.library.as_ref().is_none_or(|l| l.list().is_empty())
}

/// The code of a checkpoint language (its dialects are Chinese); `None`
/// for `auto`, a name kept as it is when it has no code here.
fn code(language: &str) -> Option<String> {
    let c = match language {
        "auto" => return None,
        "chinese" | "beijing_dialect" | "sichuan_dialect" => "zh",
        "english" => "en",
        "german" => "de",
        "italian" => "it",
        "portuguese" => "pt",
        "spanish" => "es",
        "japanese" => "ja",
        "korean" => "ko",
        "french" => "fr",
        "russian" => "ru",
        other => other,
    };
    Some(c.to_string())
}

/// The checkpoint's languages as codes, each once, in the checkpoint's
/// order.
pub fn languages(m: &Loaded) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in m.languages.iter().filter_map(|l| code(l)) {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

fn attribution() -> Value {
    json!({"name": "Qwen3-TTS (tts-rt)", "url": "https://github.com/QwenLM/Qwen3-TTS"})
}

fn voice(name: &str, description: String, languages: &[String]) -> Value {
    json!({
        "name": name,
        "description": description,
        "attribution": attribution(),
        "installed": true,
        "version": null,
        "languages": languages,
        "speakers": null,
    })
}

/// The `info` event's data.
pub fn info(m: &Loaded) -> Value {
    let langs = languages(m);
    let speakers = &m.model.config.talker.speakers;
    let mut voices: Vec<Value> = m
        .speakers
        .names()
        .iter()
        .map(|s| {
            let d = match speakers.get(s).and_then(|c| c.dialect.as_deref()) {
                Some(d) => format!("preset speaker ({d})"),
                None => "preset speaker".to_string(),
            };
            voice(s, d, &langs)
        })
        .collect();
    if let Some(lib) = &m.library {
        voices.extend(lib.list().iter().map(|r| {
            let d = r
                .description
                .clone()
                .unwrap_or_else(|| "stored voice".to_string());
            voice(r.name.as_str(), d, &langs)
        }));
    }
    if voices.is_empty() {
        voices.push(voice(
            DEFAULT_VOICE,
            "the checkpoint's own voice".to_string(),
            &langs,
        ));
    }
    json!({
        "asr": [], "handle": [], "intent": [], "wake": [], "mic": [], "snd": [],
        "tts": [{
            "name": PROGRAM,
            "description": format!("Qwen3-TTS on CPU ({})", m.model_id),
            "attribution": attribution(),
            "installed": true,
            "version": env!("CARGO_PKG_VERSION"),
            "voices": voices,
            "supports_synthesize_streaming": true,
        }],
    })
}
