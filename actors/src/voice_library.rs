//! The voice library as the runtime serves it: stored voices
//! ([`tts_voices::VoiceStore`]) made with, checked against and resolved for
//! one loaded checkpoint. The CLI's `voice` commands and the server's
//! `/v1/audio/voices` routes both go through [`VoiceLibrary`], so a voice
//! made by one is spoken by the other.
//!
//! - Making a voice: decode the clip (any common format and rate, to 24 kHz
//!   mono, [`tts_audio::ReferenceAudio`]), run the checkpoint's encoders
//!   ([`Qwen3Tts::clone_voice`]), store the record atomically, and prime the
//!   ICL decoder so the voice's first request starts as fast as a preset
//!   speaker's.
//! - Speaking with one: [`VoiceLibrary::resolve`] turns a name into the
//!   shared [`VoiceClone`] a request carries, converted once per stored
//!   record and kept while the record is unchanged.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use tts_audio::{ReferenceAudio, ReferenceAudioError};
use tts_models::config::ModelKind;
use tts_models::model::CloneTimings;
use tts_models::{CloneReference, ModelError, Qwen3Tts, VoiceClone};
use tts_voices::{
    CodecShape, ModelInfo, Provenance, RecordError, RefCodes, Removed, SkippedVoice, Source,
    StoreError, StoreOptions, VoiceName, VoiceRecord, VoiceStore, VoiceWatcher,
};

/// Why a voice could not be made, found or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VoiceError {
    /// The reference clip could not be used (unreadable, too short, silent...).
    /// Its message is the clip's refusal as it stands (each names the
    /// reference audio), so a chain of causes says it once.
    #[error(transparent)]
    Audio(#[from] ReferenceAudioError),
    /// The checkpoint refused: not a Base checkpoint, no transcript for ICL,
    /// a clip the encoders cannot take.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The store refused: a bad name, an existing voice, a write in
    /// progress, a full library, a disk error.
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Record(#[from] RecordError),
    /// No stored voice of that name. `deleted`: this library removed a
    /// voice of that name (and none was made again since), so the message
    /// says so; otherwise it may have been removed by another process, or
    /// never have been.
    #[error("{}; stored voices: {}", if *.deleted { format!("voice {name:?} was deleted from the library") } else { format!("no voice named {name:?} in the library (it may have been deleted)") }, if .known.is_empty() { "none".to_string() } else { .known.join(", ") })]
    NotFound {
        name: String,
        known: Vec<String>,
        deleted: bool,
    },
    /// A voice made for another talker size.
    #[error("voice {name:?} was made for the {voice_size} talker (x-vector of {voice_hidden}); this checkpoint is {model_size} ({model_hidden}): make the voice again with this checkpoint")]
    WrongTalker {
        name: String,
        voice_size: String,
        voice_hidden: usize,
        model_size: String,
        model_hidden: usize,
    },
}

impl VoiceError {
    /// The client's fault (a 4xx), as opposed to the server's (disk errors).
    pub fn is_client_error(&self) -> bool {
        !matches!(self, VoiceError::Store(StoreError::Io { .. }))
    }
}

/// How to make a voice from a clip.
#[derive(Clone, Debug, Default)]
pub struct NewVoice {
    pub name: String,
    /// The clip's transcript: ICL when given (unless `x_vector_only`).
    pub ref_text: Option<String>,
    pub x_vector_only: bool,
    /// Free text kept with the voice (vllm-omni's `speaker_description`).
    pub description: Option<String>,
    /// Overwrite a stored voice of the same name.
    pub replace: bool,
}

/// A voice just made: the stored record and what each encoder cost.
#[derive(Clone, Debug)]
pub struct MadeVoice {
    pub record: Arc<VoiceRecord>,
    pub timings: CloneTimings,
    /// Seconds of reference audio the voice was made from.
    pub reference_secs: f64,
}

/// The codec a library's voices are checked against. Every released
/// checkpoint shares one codec (16 codebooks of 2048), so a checkpoint that
/// makes no voices checks against it; a Base checkpoint checks against
/// what its own encoder makes, read where `speak --ref-audio` gets its
/// reference codes ([`Qwen3Tts::reference_code_groups`]), so a codec that
/// keeps fewer groups (8 of its encoder's 16, say) stores the voices it
/// speaks. A voice made for another talker is not corrupt: it loads, and
/// `resolve` says which talker it belongs to. (Commands that load no model
/// open the store with no codec, and hold each voice to its own shape.)
fn codec_of(model: &Qwen3Tts) -> CodecShape {
    match model.reference_code_groups() {
        Some(groups) if model.config.kind == ModelKind::Base => CodecShape {
            groups,
            codebook_size: model.code2wav.codebook_size() as u32,
        },
        _ => CodecShape::default(),
    }
}

/// Stored voices for one loaded checkpoint. `Send + Sync`: one per server.
pub struct VoiceLibrary {
    model: Arc<Qwen3Tts>,
    store: VoiceStore,
    /// Converted voices, keyed by name key; valid while the stored record is
    /// the same `Arc`. The store's watcher: a voice replaced or removed by
    /// any process (seen when the store next looks at its directory) drops
    /// its conversion, so the map holds no voice the library no longer has.
    clones: Arc<Converted>,
    /// Keys of the voices removed through this library (newest last, at
    /// most [`REMEMBERED_REMOVALS`]), so a later request for one is told it
    /// was deleted rather than that it names no voice.
    removed: Mutex<VecDeque<String>>,
}

/// Removed names remembered for the "was deleted" message: enough for any
/// session still holding a deleted voice's name, bounded whatever a client
/// deletes.
const REMEMBERED_REMOVALS: usize = 1024;

/// Name key → (the stored record converted, the voice made from it).
type ConvertedMap = HashMap<String, (Arc<VoiceRecord>, Arc<VoiceClone>)>;

#[derive(Default)]
struct Converted(Mutex<ConvertedMap>);

impl VoiceWatcher for Converted {
    fn voice_changed(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

impl VoiceLibrary {
    /// Opens (creating) the voice directory. Corrupt voice files are named
    /// in the returned list and skipped.
    pub fn open(
        model: Arc<Qwen3Tts>,
        dir: &Path,
        max_voices: Option<usize>,
    ) -> Result<(Self, Vec<SkippedVoice>), VoiceError> {
        let mut options = StoreOptions {
            codec: Some(codec_of(&model)),
            ..StoreOptions::default()
        };
        if let Some(n) = max_voices {
            options.max_voices = n;
        }
        let (store, skipped) = VoiceStore::open_with(dir, options)?;
        let clones = Arc::new(Converted::default());
        store.watch(&clones);
        Ok((
            VoiceLibrary {
                model,
                store,
                clones,
                removed: Mutex::new(VecDeque::new()),
            },
            skipped,
        ))
    }

    pub fn model(&self) -> &Arc<Qwen3Tts> {
        &self.model
    }

    pub fn store(&self) -> &VoiceStore {
        &self.store
    }

    /// The stored voices, sorted by name.
    pub fn list(&self) -> Vec<Arc<VoiceRecord>> {
        let mut v = self.store.list();
        v.sort_by(|a, b| a.name.key().cmp(b.name.key()));
        v
    }

    pub fn get(&self, name: &str) -> Option<Arc<VoiceRecord>> {
        self.store.get(name)
    }

    /// A clip as this checkpoint's encoders take it: decoded, 24 kHz mono,
    /// inside the length limits.
    pub fn decode(bytes: &[u8], name_hint: Option<&str>) -> Result<ReferenceAudio, VoiceError> {
        Ok(ReferenceAudio::from_bytes(bytes, name_hint)?)
    }

    /// Makes a voice from a clip's file bytes (any supported format) and
    /// stores it. `source_name`: the file name or "upload".
    pub fn add(
        &self,
        new: &NewVoice,
        bytes: &[u8],
        source_name: &str,
    ) -> Result<MadeVoice, VoiceError> {
        // The name is checked before any work is spent on the clip.
        let name = VoiceName::new(&new.name).map_err(StoreError::from)?;
        if !new.replace && self.store.get(name.as_str()).is_some() {
            return Err(StoreError::AlreadyExists {
                name: name.as_str().to_string(),
            }
            .into());
        }
        let audio = ReferenceAudio::from_bytes(bytes, Some(source_name))?;
        let (clone, timings) =
            self.model
                .clone_voice(&audio.samples, new.ref_text.as_deref(), new.x_vector_only)?;
        let source = Source::from_bytes(
            source_name,
            bytes,
            audio.duration_secs,
            audio.source_rate,
            audio.source_channels,
        );
        let provenance = Provenance::now(source, self.model_info());
        let size = self.model.config.size.clone();
        let mut record = match &clone.reference {
            Some(r) => VoiceRecord::icl(
                name,
                &size,
                clone.x_vector.clone(),
                RefCodes::new(codec_of(&self.model).groups, r.codes.clone())?,
                &r.text,
                provenance,
            )?,
            None => VoiceRecord::x_vector_only(name, &size, clone.x_vector.clone(), provenance)?,
        };
        record.description = new.description.clone().filter(|d| !d.trim().is_empty());
        let record = self.store.insert(record, new.replace)?;
        self.removed_keys().retain(|k| k != record.name.key());
        let clone = Arc::new(clone);
        self.warm(&clone);
        self.lock()
            .insert(record.name.key().to_string(), (record.clone(), clone));
        Ok(MadeVoice {
            record,
            timings,
            reference_secs: audio.samples.len() as f64 / tts_audio::REFERENCE_RATE as f64,
        })
    }

    /// Removes a stored voice, or the file of one that did not load
    /// ([`Removed::Corrupt`]).
    pub fn remove(&self, name: &str) -> Result<Removed, VoiceError> {
        let r = self.store.remove(name).map_err(|e| match e {
            StoreError::NotFound { name } => self.not_found(&name),
            e => e.into(),
        })?;
        self.lock().remove(r.key());
        let mut removed = self.removed_keys();
        removed.retain(|k| k != r.key());
        if removed.len() == REMEMBERED_REMOVALS {
            removed.pop_front();
        }
        removed.push_back(r.key().to_string());
        Ok(r)
    }

    /// The voice a request speaks with, by stored name (case-insensitive).
    pub fn resolve(&self, name: &str) -> Result<Arc<VoiceClone>, VoiceError> {
        let Some(record) = self.store.get(name) else {
            return Err(self.not_found(name));
        };
        let key = record.name.key().to_string();
        if let Some((r, c)) = self.lock().get(&key) {
            if Arc::ptr_eq(r, &record) {
                return Ok(c.clone());
            }
        }
        let clone = Arc::new(self.clone_of(&record)?);
        self.lock().insert(key, (record, clone.clone()));
        Ok(clone)
    }

    /// A voice made for this request only (vllm-omni's inline `ref_audio`),
    /// not stored.
    pub fn clone_inline(
        &self,
        bytes: &[u8],
        name_hint: Option<&str>,
        ref_text: Option<&str>,
        x_vector_only: bool,
    ) -> Result<Arc<VoiceClone>, VoiceError> {
        let audio = ReferenceAudio::from_bytes(bytes, name_hint)?;
        let (clone, _) = self
            .model
            .clone_voice(&audio.samples, ref_text, x_vector_only)?;
        Ok(Arc::new(clone))
    }

    /// A stored record as the request-side voice, checked against this
    /// checkpoint's talker.
    fn clone_of(&self, r: &VoiceRecord) -> Result<VoiceClone, VoiceError> {
        let (size, hidden) = (&self.model.config.size, self.model.talker.hidden_size());
        if r.hidden_size != hidden || !r.talker_size.eq_ignore_ascii_case(size) {
            return Err(VoiceError::WrongTalker {
                name: r.name.as_str().to_string(),
                voice_size: r.talker_size.clone(),
                voice_hidden: r.hidden_size,
                model_size: size.clone(),
                model_hidden: hidden,
            });
        }
        let reference = match (&r.ref_codes, &r.ref_text) {
            (Some(codes), Some(text)) => Some(CloneReference {
                text: text.clone(),
                frames: codes.frames(),
                codes: codes.as_slice().to_vec(),
            }),
            _ => None,
        };
        Ok(VoiceClone {
            x_vector: r.x_vector.clone(),
            reference,
        })
    }

    /// Primes the ICL decoder of a voice (best effort: a failure here shows
    /// again, with its cause, on the voice's first request).
    fn warm(&self, clone: &VoiceClone) {
        if let Some(r) = &clone.reference {
            let _ =
                self.model
                    .primed_decoders
                    .get_or_prime(&self.model.code2wav, &r.codes, r.frames);
        }
    }

    fn model_info(&self) -> ModelInfo {
        let m = &self.model;
        let checkpoint = m
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        ModelInfo {
            checkpoint,
            fingerprint: format!(
                "qwen3-tts-12hz/{}/{}/hidden{}",
                m.config.kind.name().to_lowercase(),
                m.config.size,
                m.talker.hidden_size()
            ),
        }
    }

    /// The refusal for a name no stored voice has: naming the stored ones,
    /// and saying the voice was deleted when this library removed it.
    pub fn not_found(&self, name: &str) -> VoiceError {
        let deleted = VoiceName::new(name)
            .map(|n| self.removed_keys().iter().any(|k| k == n.key()))
            .unwrap_or(false);
        VoiceError::NotFound {
            name: name.to_string(),
            known: self
                .list()
                .iter()
                .map(|r| r.name.as_str().to_string())
                .collect(),
            deleted,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ConvertedMap> {
        self.clones.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn removed_keys(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        self.removed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True when this checkpoint can make voices (Base).
    pub fn can_make_voices(&self) -> bool {
        self.model.config.kind == ModelKind::Base
    }
}
