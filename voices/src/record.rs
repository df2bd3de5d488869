//! The voice record: what a cloned voice is, and the rules it must satisfy.
//!
//! A voice is made once from a reference clip with a Base checkpoint: its
//! speaker encoder gives the x-vector (`[E]`, E = the talker's hidden size:
//! 1024 for 0.6B, 2048 for 1.7B) and, for ICL voices, the codec encoder gives
//! the reference codes (`[T, 16]`, values below 2048) that are prompted
//! together with the reference text. The x-vector is specific to one talker
//! size (the two speaker encoders differ), so a record says which it belongs
//! to; the codes are not (the codec is shared). Provenance says when, from
//! what and with which model the voice was made.

use sha2::{Digest, Sha256};

use crate::name::VoiceName;
use crate::time::Timestamp;

/// Codes per 80 ms frame in the Qwen3-TTS 12 Hz codec (1 semantic + 15 acoustic).
pub const CODE_GROUPS: usize = 16;
/// Entries per codebook in that codec: every code is below this.
pub const CODEBOOK_SIZE: u32 = 2048;
/// The talker-size label of the 0.6B checkpoints (E = 1024).
pub const TALKER_0B6: &str = "0b6";
/// The talker-size label of the 1.7B checkpoints (E = 2048).
pub const TALKER_1B7: &str = "1b7";
/// The on-disk format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Largest x-vector accepted (no released talker is wider than 2048).
pub const MAX_HIDDEN_SIZE: usize = 16_384;
/// Longest reference text or description, in bytes (a few minutes of speech).
pub const MAX_TEXT_BYTES: usize = 16_384;

/// The talker-size label of a released checkpoint with this hidden size.
pub fn talker_size_for_hidden(hidden_size: usize) -> Option<&'static str> {
    match hidden_size {
        1024 => Some(TALKER_0B6),
        2048 => Some(TALKER_1B7),
        _ => None,
    }
}

/// Lower-case hex sha256 of `bytes` (a clip's provenance fingerprint).
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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

/// The codec a record's codes are checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodecShape {
    /// Codes per frame (G).
    pub groups: usize,
    /// Every code is below this.
    pub codebook_size: u32,
}

impl Default for CodecShape {
    /// The Qwen3-TTS 12 Hz codec: 16 groups of 2048 entries.
    fn default() -> Self {
        CodecShape {
            groups: CODE_GROUPS,
            codebook_size: CODEBOOK_SIZE,
        }
    }
}

/// Reference codes, row-major `[T, G]`: frame `t` is `codes[t*G..(t+1)*G]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefCodes {
    groups: usize,
    codes: Vec<u32>,
}

impl RefCodes {
    /// `codes` laid out `[T, groups]`; refused unless it holds whole frames.
    pub fn new(groups: usize, codes: Vec<u32>) -> Result<RefCodes, RecordError> {
        if groups == 0 || !codes.len().is_multiple_of(groups) {
            return Err(RecordError::CodesShape {
                len: codes.len(),
                groups,
            });
        }
        Ok(RefCodes { groups, codes })
    }

    /// From frames of `G` codes each (the shape the codec encoder returns).
    pub fn from_frames(frames: &[Vec<u32>]) -> Result<RefCodes, RecordError> {
        let groups = frames.first().map_or(CODE_GROUPS, Vec::len);
        if let Some(bad) = frames.iter().find(|f| f.len() != groups) {
            return Err(RecordError::CodesShape {
                len: bad.len(),
                groups,
            });
        }
        RefCodes::new(groups, frames.concat())
    }

    /// T, the number of 80 ms frames.
    pub fn frames(&self) -> usize {
        self.codes.len() / self.groups
    }

    /// G, codes per frame.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Frame `t`'s G codes; `None` past the end.
    pub fn frame(&self, t: usize) -> Option<&[u32]> {
        self.codes.get(t * self.groups..(t + 1) * self.groups)
    }

    /// All codes, row-major `[T, G]`.
    pub fn as_slice(&self) -> &[u32] {
        &self.codes
    }

    pub fn into_vec(self) -> Vec<u32> {
        self.codes
    }
}

/// What the voice was made from.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// The clip's file name (no directories), or `upload`, or for imports
    /// where it came from (`vllm-omni:alice.safetensors`).
    pub name: String,
    /// Length of the original clip in seconds, when known.
    pub duration_s: Option<f64>,
    /// Its sample rate before resampling to 24 kHz, when known.
    pub sample_rate: Option<u32>,
    /// Its channel count before down-mixing, when known.
    pub channels: Option<u16>,
    /// Lower-case hex sha256 of the original bytes (64 characters).
    pub sha256: String,
}

impl Source {
    /// The provenance of a clip whose original bytes are `bytes`.
    pub fn from_bytes(
        name: &str,
        bytes: &[u8],
        duration_s: f64,
        sample_rate: u32,
        channels: u16,
    ) -> Source {
        Source {
            name: name.to_owned(),
            duration_s: Some(duration_s),
            sample_rate: Some(sample_rate),
            channels: Some(channels),
            sha256: sha256_hex(bytes),
        }
    }
}

/// The model a voice was made with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    /// The checkpoint directory's name (e.g. `Qwen3-TTS-12Hz-0.6B-Base`).
    pub checkpoint: String,
    /// A caller-defined fingerprint of the weights the vectors came from.
    pub fingerprint: String,
}

/// When, from what and with which model a voice was made.
#[derive(Clone, Debug, PartialEq)]
pub struct Provenance {
    pub created: Timestamp,
    pub source: Source,
    pub model: ModelInfo,
    /// The file format version the record was read from or will be written as.
    pub format_version: u32,
}

impl Provenance {
    /// Made now, at the current format version.
    pub fn now(source: Source, model: ModelInfo) -> Provenance {
        Provenance {
            created: Timestamp::now(),
            source,
            model,
            format_version: FORMAT_VERSION,
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
    /// An ICL voice; validated against the default codec.
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
        record.validate(&CodecShape::default())?;
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
        record.validate(&CodecShape::default())?;
        Ok(record)
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
    pub fn validate(&self, codec: &CodecShape) -> Result<(), RecordError> {
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

fn check_codes(codes: &RefCodes, codec: &CodecShape) -> Result<(), RecordError> {
    if codes.groups() != codec.groups {
        return Err(RecordError::GroupsMismatch {
            expected: codec.groups,
            actual: codes.groups(),
        });
    }
    if let Some(i) = codes
        .as_slice()
        .iter()
        .position(|&c| c >= codec.codebook_size)
    {
        return Err(RecordError::CodeOutOfRange {
            frame: i / codes.groups(),
            group: i % codes.groups(),
            code: codes.as_slice()[i],
            codebook_size: codec.codebook_size,
        });
    }
    Ok(())
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

/// Why a record is not a valid voice.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error(
        "the x-vector has {len} values; expected 1..={MAX_HIDDEN_SIZE} (the talker hidden size)"
    )]
    XVectorSize { len: usize },
    #[error("hidden_size is {hidden_size} but the x-vector has {x_vector} values")]
    HiddenSizeMismatch { hidden_size: usize, x_vector: usize },
    #[error("x-vector value {index} is {value}; every value must be finite")]
    NonFinite { index: usize, value: f32 },
    #[error("{len} reference codes do not make whole frames of {groups} groups")]
    CodesShape { len: usize, groups: usize },
    #[error("reference codes have {actual} groups per frame; the codec has {expected}")]
    GroupsMismatch { expected: usize, actual: usize },
    #[error("reference code {code} at frame {frame}, group {group} is outside the codebook (size {codebook_size})")]
    CodeOutOfRange {
        frame: usize,
        group: usize,
        code: u32,
        codebook_size: u32,
    },
    #[error("an ICL voice needs reference codes (at least one frame)")]
    IclNeedsCodes,
    #[error("an ICL voice needs a non-empty reference text (the transcript of the clip); make it x-vector-only otherwise")]
    IclNeedsRefText,
    #[error("an x-vector-only voice must not carry {0}")]
    XVectorOnlyHas(&'static str),
    #[error("{field} is {len} bytes; at most {MAX_TEXT_BYTES} are allowed")]
    TextTooLong { field: &'static str, len: usize },
    #[error("{field}: {problem}")]
    BadField {
        field: &'static str,
        problem: String,
    },
    #[error("format version {found} is not supported (this build reads version {FORMAT_VERSION})")]
    FormatVersion { found: u32 },
    #[error("voice {voice:?} was made for the {voice_size} talker (hidden size {voice_hidden}); this model is {model_size} (hidden size {model_hidden}); make the voice again with this model")]
    WrongTalker {
        voice: String,
        voice_size: String,
        voice_hidden: usize,
        model_size: String,
        model_hidden: usize,
    },
}
