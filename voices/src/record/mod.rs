//! The voice record: what a cloned voice is, and the rules it must satisfy.
//!
//! A voice is made once from a reference clip with a Base checkpoint: its
//! speaker encoder gives the x-vector (`[E]`, E = the talker's hidden size:
//! 1024 for 0.6B, 2048 for 1.7B) and, for ICL voices, the codec encoder gives
//! the reference codes (`[T, G]`, G the code groups its encoder keeps: 16
//! for the released codec; values below 2048) that are prompted together
//! with the reference text. The x-vector is specific to one talker size (the
//! two speaker encoders differ), so a record says which it belongs to; the
//! codes are not (the released checkpoints share one codec), and are checked
//! against the codec of the model at hand, or, with none, against their own
//! shape ([`VoiceRecord::validate`]). Provenance says when, from what and
//! with which model the voice was made.

mod codes;
mod error;
mod json;
mod limits;
mod provenance;

pub use codes::{CodecShape, RefCodes};
pub use error::RecordError;
pub use limits::{
    CODEBOOK_SIZE, CODE_GROUPS, FORMAT_VERSION, MAX_CODE_GROUPS, MAX_HIDDEN_SIZE, MAX_TEXT_BYTES,
    TALKER_0B6, TALKER_1B7,
};
pub use provenance::{sha256_hex, ModelInfo, Provenance, Source};

use crate::name::VoiceName;
use codes::check_codes;

/// The talker-size label of a released checkpoint with this hidden size.
pub fn talker_size_for_hidden(hidden_size: usize) -> Option<&'static str> {
    match hidden_size {
        1024 => Some(TALKER_0B6),
        2048 => Some(TALKER_1B7),
        _ => None,
    }
}

/// How the voice is prompted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VoiceMode {
    /// In-context learning: x-vector plus reference codes and reference text.
    Icl,
    /// The x-vector alone (`x_vector_only_mode`).
    XVectorOnly,
}

impl VoiceMode {
    /// The word on disk and in manifests: `icl` or `xvec` (vllm-omni's words).
    pub fn as_str(self) -> &'static str {
        match self {
            VoiceMode::Icl => "icl",
            VoiceMode::XVectorOnly => "xvec",
        }
    }

    /// `icl`, or `xvec` / `x_vector_only`.
    pub fn parse(s: &str) -> Option<VoiceMode> {
        match s {
            "icl" => Some(VoiceMode::Icl),
            "xvec" | "x_vector_only" => Some(VoiceMode::XVectorOnly),
            _ => None,
        }
    }
}

/// One stored voice.
#[derive(Clone, Debug, PartialEq)]
pub struct VoiceRecord {
    pub name: VoiceName,
    pub mode: VoiceMode,
    /// The speaker embedding, `[hidden_size]`.
    pub x_vector: Vec<f32>,
    /// ICL only: the reference clip's codes.
    pub ref_codes: Option<RefCodes>,
    /// ICL only: the transcript of the reference clip.
    pub ref_text: Option<String>,
    /// The talker size the x-vector belongs to ([`TALKER_0B6`], [`TALKER_1B7`],
    /// or another short label for non-release checkpoints).
    pub talker_size: String,
    /// E, the talker hidden size (= `x_vector.len()`).
    pub hidden_size: usize,
    /// Free text about the voice (vllm-omni's `speaker_description`).
    pub description: Option<String>,
    pub provenance: Provenance,
}

impl VoiceRecord {
    /// An ICL voice, validated as a record: codes of whole frames, each
    /// frame as wide as its codes say. Which codec they must fit is the
    /// holder's to check (the store, with its options): a checkpoint's
    /// encoder may keep fewer than the released codec's 16 groups.
    pub fn icl(
        name: VoiceName,
        talker_size: &str,
        x_vector: Vec<f32>,
        ref_codes: RefCodes,
        ref_text: &str,
        provenance: Provenance,
    ) -> Result<VoiceRecord, RecordError> {
        let record = VoiceRecord {
            name,
            mode: VoiceMode::Icl,
            hidden_size: x_vector.len(),
            x_vector,
            ref_codes: Some(ref_codes),
            ref_text: Some(ref_text.to_owned()),
            talker_size: talker_size.to_owned(),
            description: None,
            provenance,
        };
        record.validate(Some(&record.own_codec()))?;
        Ok(record)
    }

    /// An x-vector-only voice.
    pub fn x_vector_only(
        name: VoiceName,
        talker_size: &str,
        x_vector: Vec<f32>,
        provenance: Provenance,
    ) -> Result<VoiceRecord, RecordError> {
        let record = VoiceRecord {
            name,
            mode: VoiceMode::XVectorOnly,
            hidden_size: x_vector.len(),
            x_vector,
            ref_codes: None,
            ref_text: None,
            talker_size: talker_size.to_owned(),
            description: None,
            provenance,
        };
        record.validate(Some(&record.own_codec()))?;
        Ok(record)
    }

    /// The codec shape the record's own codes have: their groups per frame
    /// (the released codec's when it has none), any code an I32 holds.
    pub(crate) fn own_codec(&self) -> CodecShape {
        CodecShape {
            groups: self
                .ref_codes
                .as_ref()
                .map_or(CodecShape::default().groups, RefCodes::groups),
            codebook_size: i32::MAX as u32,
        }
    }

    /// Reference frames (0 for x-vector-only voices).
    pub fn ref_frames(&self) -> usize {
        self.ref_codes.as_ref().map_or(0, RefCodes::frames)
    }

    /// Bytes this record holds in memory (roughly; for budgets and listings).
    pub fn approx_bytes(&self) -> usize {
        self.x_vector.len() * 4
            + self
                .ref_codes
                .as_ref()
                .map_or(0, |c| c.as_slice().len() * 4)
            + self.ref_text.as_ref().map_or(0, String::len)
            + 256
    }

    /// Every rule a stored voice obeys; the first broken one is returned.
    ///
    /// `codec`: the codec of the model the voice is for, whose groups and
    /// codebook the codes must match exactly. `None` where no model is at
    /// hand (listing, showing, removing, exporting): the codes are held to
    /// their own shape, within what a Qwen3-TTS codec makes: 1 to
    /// [`MAX_CODE_GROUPS`] groups per frame, every code below
    /// [`CODEBOOK_SIZE`].
    pub fn validate(&self, codec: Option<&CodecShape>) -> Result<(), RecordError> {
        let e = self.x_vector.len();
        if e == 0 || e > MAX_HIDDEN_SIZE {
            return Err(RecordError::XVectorSize { len: e });
        }
        if e != self.hidden_size {
            return Err(RecordError::HiddenSizeMismatch {
                hidden_size: self.hidden_size,
                x_vector: e,
            });
        }
        if let Some((index, &value)) = self
            .x_vector
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite())
        {
            return Err(RecordError::NonFinite { index, value });
        }
        check_label("talker_size", &self.talker_size)?;
        match self.mode {
            VoiceMode::Icl => {
                let codes = self.ref_codes.as_ref().ok_or(RecordError::IclNeedsCodes)?;
                if codes.frames() == 0 {
                    return Err(RecordError::IclNeedsCodes);
                }
                check_codes(codes, codec)?;
                match &self.ref_text {
                    Some(t) if !t.trim().is_empty() => check_text("ref_text", t)?,
                    _ => return Err(RecordError::IclNeedsRefText),
                }
            }
            VoiceMode::XVectorOnly => {
                if self.ref_codes.is_some() {
                    return Err(RecordError::XVectorOnlyHas("reference codes"));
                }
                if self.ref_text.is_some() {
                    return Err(RecordError::XVectorOnlyHas("a reference text"));
                }
            }
        }
        if let Some(d) = &self.description {
            check_text("description", d)?;
        }
        self.check_provenance()
    }

    /// Refuses a voice made for another talker than the one about to use it.
    pub fn check_talker(&self, talker_size: &str, hidden_size: usize) -> Result<(), RecordError> {
        if self.talker_size != talker_size || self.hidden_size != hidden_size {
            return Err(RecordError::WrongTalker {
                voice: self.name.to_string(),
                voice_size: self.talker_size.clone(),
                voice_hidden: self.hidden_size,
                model_size: talker_size.to_owned(),
                model_hidden: hidden_size,
            });
        }
        Ok(())
    }

    fn check_provenance(&self) -> Result<(), RecordError> {
        let p = &self.provenance;
        if p.format_version != FORMAT_VERSION {
            return Err(RecordError::FormatVersion {
                found: p.format_version,
            });
        }
        let s = &p.source;
        let bad = |field: &'static str, problem: &str| RecordError::BadField {
            field,
            problem: problem.to_owned(),
        };
        if s.name.is_empty() || s.name.len() > 255 {
            return Err(bad("source_name", "must be 1..=255 bytes"));
        }
        if s.name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control())
        {
            return Err(bad(
                "source_name",
                "must be a file name, without directories or control characters",
            ));
        }
        if let Some(d) = s.duration_s {
            if !d.is_finite() || d < 0.0 {
                return Err(bad("source_duration_s", "must be a finite number >= 0"));
            }
        }
        if s.sample_rate == Some(0) {
            return Err(bad("source_sample_rate", "must be > 0"));
        }
        if s.channels == Some(0) {
            return Err(bad("source_channels", "must be > 0"));
        }
        if s.sha256.len() != 64
            || !s
                .sha256
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(bad("source_sha256", "must be 64 lower-case hex digits"));
        }
        check_text("model", &p.model.checkpoint)?;
        check_text("model_fingerprint", &p.model.fingerprint)?;
        if p.model.checkpoint.is_empty() {
            return Err(bad(
                "model",
                "must name the checkpoint the voice was made with",
            ));
        }
        Ok(())
    }
}

fn check_text(field: &'static str, text: &str) -> Result<(), RecordError> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(RecordError::TextTooLong {
            field,
            len: text.len(),
        });
    }
    Ok(())
}

/// A short machine label: 1..=32 of `[a-z0-9._-]`.
fn check_label(field: &'static str, label: &str) -> Result<(), RecordError> {
    let ok = (1..=32).contains(&label.len())
        && label
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(RecordError::BadField {
            field,
            problem: format!("{label:?} must be 1..=32 of a-z 0-9 . _ -"),
        })
    }
}
