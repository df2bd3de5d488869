//! vllm-omni's precomputed voices (`custom_voice_dir`).
//!
//! The directory holds `custom_voice_manifest.json`:
//!
//! ```json
//! {"model": "Qwen3-TTS", "hidden_size": 2048,
//!  "voices": {"alice": {"file": "alice.safetensors", "mode": "icl",
//!                       "ref_text": "...", "speaker_description": "..."}}}
//! ```
//!
//! and one safetensors per voice with `speaker_embedding` (f32 `[E]`; bf16
//! is accepted too) and, for `icl`, `ref_code` (int32 `[T, G]`, G = 16 for
//! the released codec; int64 is accepted too). Codes are read in their own
//! shape; the store they go into checks them against its codec. Other
//! manifest fields (`ref_code_length`, `embedding_dim`, `name`, ...) are
//! read where useful and otherwise ignored. A missing `mode` means `icl` when the file has codes and the
//! entry a `ref_text`, `xvec` otherwise.
//!
//! Export writes the same layout, with each voice's file in the tts-rt voice
//! format (whose tensor names are vllm-omni's, so vllm-omni reads it as is)
//! — importing that export again gives back the records with their
//! provenance.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{imported_provenance, plain_file_name, read, ImportTarget, InteropError};
use crate::format::{self, FormatProblem, FORMAT_NAME, VOICE_EXT};
use crate::name::VoiceName;
use crate::record::{VoiceMode, VoiceRecord};
use crate::store::atomic::write_atomic;
use crate::store::SkippedVoice;

/// The manifest's file name.
pub const MANIFEST_FILE: &str = "custom_voice_manifest.json";

#[derive(Serialize, Deserialize)]
struct Manifest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hidden_size: Option<usize>,
    #[serde(default)]
    voices: BTreeMap<String, Entry>,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ref_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    speaker_description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ref_code_length: Option<usize>,
}

/// Imports every voice of the vllm-omni directory `dir` for `target`.
/// A manifest that cannot be read, or whose `hidden_size` is not the
/// target's, fails the import; a single bad voice is skipped with its reason.
pub fn import_vllm_omni(
    dir: &Path,
    target: &ImportTarget,
) -> Result<(Vec<VoiceRecord>, Vec<SkippedVoice>), InteropError> {
    let manifest_path = dir.join(MANIFEST_FILE);
    let text = read(&manifest_path)?;
    let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| InteropError::Manifest {
        path: manifest_path.clone(),
        problem: e.to_string(),
    })?;
    if let Some(h) = manifest.hidden_size {
        if h != target.hidden_size {
            return Err(InteropError::HiddenSize {
                path: manifest_path,
                expected: target.hidden_size,
                found: h,
            });
        }
    }
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (name, entry) in &manifest.voices {
        let path = dir.join(&entry.file);
        let result = import_entry(dir, name, entry, target).and_then(|r| {
            if seen.insert(r.name.key().to_owned()) {
                Ok(r)
            } else {
                Err(format!(
                    "another voice in the manifest is also called {name:?} (names ignore case)"
                ))
            }
        });
        match result {
            Ok(r) => records.push(r),
            Err(reason) => skipped.push(SkippedVoice {
                path,
                reason: format!("voice {name:?}: {reason}"),
            }),
        }
    }
    Ok((records, skipped))
}

fn import_entry(
    dir: &Path,
    name: &str,
    entry: &Entry,
    target: &ImportTarget,
) -> Result<VoiceRecord, String> {
    let name = VoiceName::new(name).map_err(|e| e.to_string())?;
    if !plain_file_name(&entry.file) {
        return Err(format!(
            "file {:?} is not a plain file name inside the voice directory",
            entry.file
        ));
    }
    let path = dir.join(&entry.file);
    let bytes = format::read_bounded(&path).map_err(|p| p.to_string())?;
    let (st, meta) = format::parse_safetensors(&bytes).map_err(|p| p.to_string())?;
    // A tts-rt voice file (e.g. our own export): read it whole, provenance
    // included, and hold it to the same checks as a store without a model.
    if meta.get("format").map(String::as_str) == Some(FORMAT_NAME) {
        let record = format::from_bytes(&bytes, None).map_err(|p| p.to_string())?;
        if record.name.key() != name.key() {
            return Err(format!(
                "the file holds the voice {:?}",
                record.name.as_str()
            ));
        }
        record
            .check_talker(&target.talker_size, target.hidden_size)
            .map_err(|e| e.to_string())?;
        return Ok(record);
    }
    let x_vector = format::read_embedding(&st, None, true).map_err(|p| p.to_string())?;
    if x_vector.len() != target.hidden_size {
        return Err(format!(
            "its speaker_embedding has {} values; this model's hidden size is {}",
            x_vector.len(),
            target.hidden_size
        ));
    }
    let codes = format::read_codes(&st, None, true).map_err(|p| p.to_string())?;
    let ref_text = entry.ref_text.as_deref().filter(|t| !t.trim().is_empty());
    let mode = match entry.mode.as_deref() {
        Some(m) => VoiceMode::parse(m)
            .ok_or_else(|| format!("mode {m:?} is neither \"icl\" nor \"xvec\""))?,
        None if codes.is_some() && ref_text.is_some() => VoiceMode::Icl,
        None => VoiceMode::XVectorOnly,
    };
    let origin = format!("vllm-omni:{}", entry.file);
    let provenance = imported_provenance(origin, &[&bytes], &target.model);
    let mut record = match mode {
        VoiceMode::Icl => {
            let codes =
                codes.ok_or_else(|| FormatProblem::MissingTensor(format::REF_CODE).to_string())?;
            if let Some(n) = entry.ref_code_length {
                if n != codes.frames() {
                    return Err(format!(
                        "ref_code_length is {n} but ref_code has {} frames",
                        codes.frames()
                    ));
                }
            }
            let text = ref_text.ok_or("an icl voice needs a ref_text in the manifest")?;
            VoiceRecord::icl(name, &target.talker_size, x_vector, codes, text, provenance)
        }
        VoiceMode::XVectorOnly => {
            VoiceRecord::x_vector_only(name, &target.talker_size, x_vector, provenance)
        }
    }
    .map_err(|e| e.to_string())?;
    record.description = entry.speaker_description.clone().filter(|d| !d.is_empty());
    record.validate(None).map_err(|e| e.to_string())?;
    Ok(record)
}

/// Writes `records` as a vllm-omni voice directory `dir` (created if
/// absent): one `<key>.safetensors` each plus the manifest, which names
/// `model`. All records must share one hidden size (vllm-omni checks the
/// manifest's against its model).
pub fn export_vllm_omni(
    dir: &Path,
    records: &[&VoiceRecord],
    model: &str,
) -> Result<(), InteropError> {
    let hidden_size = match records.first() {
        Some(r) => r.hidden_size,
        None => return Err(InteropError::Export("no voices to export".into())),
    };
    if let Some(r) = records.iter().find(|r| r.hidden_size != hidden_size) {
        return Err(InteropError::Export(format!(
            "voice {:?} has hidden size {} but {:?} has {hidden_size}; a vllm-omni directory holds one talker size",
            r.name.as_str(),
            r.hidden_size,
            records[0].name.as_str()
        )));
    }
    std::fs::create_dir_all(dir).map_err(InteropError::io(dir))?;
    let mut voices = BTreeMap::new();
    let mut keys = std::collections::HashSet::new();
    for r in records {
        if !keys.insert(r.name.key()) {
            return Err(InteropError::Export(format!(
                "voice {:?} is given twice (names ignore case)",
                r.name.as_str()
            )));
        }
        let file = format!("{}.{VOICE_EXT}", r.name.key());
        let bytes = format::to_bytes(r)?;
        let path = dir.join(&file);
        write_atomic(dir, &path, &bytes).map_err(InteropError::io(&path))?;
        let entry = Entry {
            file,
            mode: Some(r.mode.as_str().to_owned()),
            ref_text: r.ref_text.clone(),
            speaker_description: r.description.clone(),
            ref_code_length: r.ref_codes.as_ref().map(|c| c.frames()),
        };
        voices.insert(r.name.as_str().to_owned(), entry);
    }
    let manifest = Manifest {
        model: Some(model.to_owned()),
        hidden_size: Some(hidden_size),
        voices,
    };
    let json = serde_json::to_vec_pretty(&manifest).expect("a manifest serialises");
    let path = dir.join(MANIFEST_FILE);
    write_atomic(dir, &path, &json).map_err(InteropError::io(&path))
}
