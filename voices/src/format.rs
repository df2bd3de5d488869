//! The on-disk voice format: one safetensors file per voice.
//!
//! The tensors are named as in vllm-omni's per-voice files, so a tts-rt voice
//! file is also a valid vllm-omni `custom_voice_dir` entry:
//!
//! | tensor | dtype | shape | present |
//! |---|---|---|---|
//! | `speaker_embedding` | F32 | `[E]` | always |
//! | `ref_code` | I32 | `[T, G]` | ICL voices only |
//!
//! G is the code groups per frame of the codec the voice was made with: 16
//! for the released checkpoints, fewer for a checkpoint whose encoder keeps
//! fewer. A reader given a model's codec ([`CodecShape`]) wants exactly its
//! G; a reader without one takes the file's own, 1 to [`MAX_CODE_GROUPS`].
//!
//! `__metadata__` (all values are strings, as safetensors requires):
//!
//! | key | value |
//! |---|---|
//! | `format` | `tts-rt-voice` |
//! | `version` | `1` |
//! | `name` | the display name (its lower-case form is the file stem) |
//! | `mode` | `icl` or `xvec` |
//! | `ref_text` | the reference transcript (ICL); empty for `xvec` |
//! | `talker_size` | `0b6`, `1b7` (or a short label for other checkpoints) |
//! | `hidden_size` | E, decimal |
//! | `created` | RFC 3339 UTC, e.g. `2026-01-31T12:00:00Z` |
//! | `source_name` | clip file name, `upload`, or the import origin |
//! | `source_duration_s` | seconds, decimal (absent when unknown) |
//! | `source_sample_rate` | Hz (absent when unknown) |
//! | `source_channels` | count (absent when unknown) |
//! | `source_sha256` | sha256 of the original bytes, 64 lower-case hex |
//! | `model` | checkpoint directory name the voice was made with |
//! | `model_fingerprint` | the caller's fingerprint of those weights |
//! | `description` | optional free text |
//!
//! Files are at most [`MAX_FILE_BYTES`]. Reading checks every item above and
//! the record rules of [`crate::record`]; a failure is a [`FormatError`] that
//! names the file and the problem.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensorError, SafeTensors};
use serde_json::json;

use crate::name::VoiceName;
use crate::record::{
    CodecShape, ModelInfo, Provenance, RecordError, RefCodes, Source, VoiceMode, VoiceRecord,
    FORMAT_VERSION, MAX_CODE_GROUPS,
};
use crate::time::Timestamp;

/// The `format` metadata value of a tts-rt voice file.
pub const FORMAT_NAME: &str = "tts-rt-voice";
/// File extension of a voice file.
pub const VOICE_EXT: &str = "safetensors";
/// Tensor holding the x-vector.
pub const SPEAKER_EMBEDDING: &str = "speaker_embedding";
/// Tensor holding the reference codes.
pub const REF_CODE: &str = "ref_code";
/// Largest voice file read: a 10-minute ICL reference is 7,500 frames of
/// 16 i32 codes (480 KB; 960 KB at [`MAX_CODE_GROUPS`]); this leaves room
/// and refuses stray huge files.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A voice file that could not be read, naming the file and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("voice file {}: {problem}", path.display())]
pub struct FormatError {
    pub path: PathBuf,
    pub problem: FormatProblem,
}

/// What is wrong with a voice file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatProblem {
    /// (The read error is in the message, not the error's source.)
    #[error("cannot read it: {0}")]
    Io(std::io::Error),
    #[error("it is {len} bytes; a voice file is at most {MAX_FILE_BYTES}")]
    TooLarge { len: u64 },
    #[error("it is truncated ({detail})")]
    Truncated { detail: String },
    #[error("it is not a safetensors file ({detail})")]
    NotSafetensors { detail: String },
    #[error("it is not a tts-rt voice (metadata format is {found:?}, expected {FORMAT_NAME:?})")]
    NotAVoice { found: Option<String> },
    #[error(
        "format version {found:?} is not supported (this build reads version {FORMAT_VERSION})"
    )]
    Version { found: String },
    #[error("tensor {0:?} is missing")]
    MissingTensor(&'static str),
    #[error("unexpected tensor {0:?}")]
    UnexpectedTensor(String),
    #[error("tensor {tensor:?} is {found}; expected {expected}")]
    Tensor {
        tensor: &'static str,
        expected: String,
        found: String,
    },
    #[error("metadata {key:?} {problem}")]
    Metadata { key: &'static str, problem: String },
    #[error(transparent)]
    Record(#[from] RecordError),
}

impl From<std::io::Error> for FormatProblem {
    fn from(e: std::io::Error) -> Self {
        FormatProblem::Io(e)
    }
}

impl FormatProblem {
    pub(crate) fn at(self, path: &Path) -> FormatError {
        FormatError {
            path: path.to_owned(),
            problem: self,
        }
    }
}

/// Serialises a (valid) record into the bytes of its voice file.
pub fn to_bytes(record: &VoiceRecord) -> Result<Vec<u8>, RecordError> {
    // Codes are checked against a codec by whoever holds one (the store,
    // with its options); the file itself needs a valid record whose codes
    // fit I32.
    record.validate(Some(&record.own_codec()))?;
    let mut meta = BTreeMap::new();
    let mut put = |k: &'static str, v: String| {
        meta.insert(k, v);
    };
    put("format", FORMAT_NAME.to_owned());
    put("version", FORMAT_VERSION.to_string());
    put("name", record.name.as_str().to_owned());
    put("mode", record.mode.as_str().to_owned());
    put("ref_text", record.ref_text.clone().unwrap_or_default());
    put("talker_size", record.talker_size.clone());
    put("hidden_size", record.hidden_size.to_string());
    let p = &record.provenance;
    put("created", p.created.to_string());
    put("source_name", p.source.name.clone());
    if let Some(d) = p.source.duration_s {
        put("source_duration_s", format!("{d}"));
    }
    if let Some(r) = p.source.sample_rate {
        put("source_sample_rate", r.to_string());
    }
    if let Some(c) = p.source.channels {
        put("source_channels", c.to_string());
    }
    put("source_sha256", p.source.sha256.clone());
    put("model", p.model.checkpoint.clone());
    put("model_fingerprint", p.model.fingerprint.clone());
    if let Some(d) = &record.description {
        put("description", d.clone());
    }
    Ok(tensors_to_bytes(
        &record.x_vector,
        record.ref_codes.as_ref(),
        &meta,
    ))
}

/// `speaker_embedding` (+ `ref_code`) as a safetensors file with `meta`.
///
/// Written here rather than with `safetensors::serialize`, which takes the
/// metadata as a `HashMap` and so orders it differently from run to run;
/// with a sorted map the bytes are a function of the record alone. The
/// layout is safetensors': u64 LE header length, the JSON header padded with
/// spaces to a multiple of 8, then the tensors' bytes at their offsets.
fn tensors_to_bytes(
    x_vector: &[f32],
    codes: Option<&RefCodes>,
    meta: &BTreeMap<&'static str, String>,
) -> Vec<u8> {
    let mut data: Vec<u8> = x_vector.iter().flat_map(|v| v.to_le_bytes()).collect();
    let emb_end = data.len();
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!(meta));
    header.insert(
        SPEAKER_EMBEDDING.into(),
        json!({"dtype": "F32", "shape": [x_vector.len()], "data_offsets": [0, emb_end]}),
    );
    if let Some(c) = codes {
        data.extend(c.as_slice().iter().flat_map(|&v| (v as i32).to_le_bytes()));
        header.insert(
            REF_CODE.into(),
            json!({"dtype": "I32", "shape": [c.frames(), c.groups()], "data_offsets": [emb_end, data.len()]}),
        );
    }
    let mut json = serde_json::to_vec(&serde_json::Value::Object(header))
        .expect("a JSON object of strings and numbers serialises");
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + json.len() + data.len());
    out.extend((json.len() as u64).to_le_bytes());
    out.extend(json);
    out.extend(data);
    out
}

/// Reads and checks the voice file at `path`: its codes against `codec`,
/// or with `None` against their own shape ([`VoiceRecord::validate`]).
pub fn read_file(path: &Path, codec: Option<&CodecShape>) -> Result<VoiceRecord, FormatError> {
    let bytes = read_bounded(path).map_err(|p| p.at(path))?;
    from_bytes(&bytes, codec).map_err(|p| p.at(path))
}

/// Reads a whole file of at most [`MAX_FILE_BYTES`].
pub(crate) fn read_bounded(path: &Path) -> Result<Vec<u8>, FormatProblem> {
    let len = std::fs::metadata(path)?.len();
    if len > MAX_FILE_BYTES {
        return Err(FormatProblem::TooLarge { len });
    }
    Ok(std::fs::read(path)?)
}

/// Parses and checks the bytes of a voice file (`codec` as in [`read_file`]).
pub fn from_bytes(bytes: &[u8], codec: Option<&CodecShape>) -> Result<VoiceRecord, FormatProblem> {
    let st = parse_safetensors(bytes)?;
    let meta = st.1;
    let tensors = st.0;
    let get = |key: &'static str| meta.get(key).map(String::as_str);
    match get("format") {
        Some(FORMAT_NAME) => {}
        other => {
            return Err(FormatProblem::NotAVoice {
                found: other.map(str::to_owned),
            })
        }
    }
    match get("version") {
        Some(v) if v == FORMAT_VERSION.to_string() => {}
        other => {
            return Err(FormatProblem::Version {
                found: other.unwrap_or("(absent)").to_owned(),
            })
        }
    }
    let need = |key: &'static str| {
        get(key).ok_or(FormatProblem::Metadata {
            key,
            problem: "is missing".into(),
        })
    };
    let bad = |key: &'static str, problem: String| FormatProblem::Metadata { key, problem };
    let name = VoiceName::new(need("name")?).map_err(|e| bad("name", e.to_string()))?;
    let mode = VoiceMode::parse(need("mode")?).ok_or_else(|| {
        bad(
            "mode",
            format!("is {:?}; expected \"icl\" or \"xvec\"", get("mode")),
        )
    })?;
    let hidden_size = parse_num::<usize>("hidden_size", need("hidden_size")?)?;
    let created = Timestamp::parse(need("created")?).map_err(|e| bad("created", e.to_string()))?;
    let opt_num = |key: &'static str| -> Result<Option<f64>, FormatProblem> {
        get(key).map(|v| parse_num::<f64>(key, v)).transpose()
    };
    let source = Source {
        name: need("source_name")?.to_owned(),
        duration_s: opt_num("source_duration_s")?,
        sample_rate: get("source_sample_rate")
            .map(|v| parse_num("source_sample_rate", v))
            .transpose()?,
        channels: get("source_channels")
            .map(|v| parse_num("source_channels", v))
            .transpose()?,
        sha256: need("source_sha256")?.to_owned(),
    };
    let model = ModelInfo {
        checkpoint: need("model")?.to_owned(),
        fingerprint: need("model_fingerprint")?.to_owned(),
    };
    let ref_text = match (mode, get("ref_text").unwrap_or("")) {
        (VoiceMode::XVectorOnly, "") => None,
        (VoiceMode::XVectorOnly, _) => {
            return Err(bad("ref_text", "must be empty for an xvec voice".into()))
        }
        (VoiceMode::Icl, t) => Some(t.to_owned()),
    };
    let x_vector = read_embedding(&tensors, Some(hidden_size), false)?;
    let ref_codes = match mode {
        VoiceMode::Icl => Some(
            read_codes(&tensors, codec.map(|c| c.groups), false)?
                .ok_or(FormatProblem::MissingTensor(REF_CODE))?,
        ),
        VoiceMode::XVectorOnly => {
            if tensors.tensor(REF_CODE).is_ok() {
                return Err(FormatProblem::UnexpectedTensor(REF_CODE.to_owned()));
            }
            None
        }
    };
    if let Some(extra) = tensors
        .names()
        .into_iter()
        .find(|n| n.as_str() != SPEAKER_EMBEDDING && n.as_str() != REF_CODE)
    {
        return Err(FormatProblem::UnexpectedTensor(extra.clone()));
    }
    let record = VoiceRecord {
        name,
        mode,
        x_vector,
        ref_codes,
        ref_text,
        talker_size: need("talker_size")?.to_owned(),
        hidden_size,
        description: get("description").map(str::to_owned),
        provenance: Provenance {
            created,
            source,
            model,
            format_version: FORMAT_VERSION,
        },
    };
    record.validate(codec)?;
    Ok(record)
}

fn parse_num<T: std::str::FromStr>(key: &'static str, v: &str) -> Result<T, FormatProblem> {
    v.parse().map_err(|_| FormatProblem::Metadata {
        key,
        problem: format!("is {v:?}, not a number of the expected kind"),
    })
}

/// Parses the container, telling a truncated file from a foreign one.
pub(crate) fn parse_safetensors(
    bytes: &[u8],
) -> Result<(SafeTensors<'_>, HashMap<String, String>), FormatProblem> {
    if bytes.len() < 8 {
        return Err(FormatProblem::Truncated {
            detail: format!(
                "{} bytes, shorter than the 8-byte header length",
                bytes.len()
            ),
        });
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    // safetensors caps headers at 100 MB; anything near that is not ours.
    if n > 100_000_000 || bytes.get(8).is_some_and(|&b| b != b'{') {
        return Err(FormatProblem::NotSafetensors {
            detail: "no safetensors header at the start".into(),
        });
    }
    if 8 + n > bytes.len() as u64 {
        return Err(FormatProblem::Truncated {
            detail: format!(
                "the header declares {n} bytes but only {} follow",
                bytes.len() - 8
            ),
        });
    }
    let st = SafeTensors::deserialize(bytes).map_err(|e| match e {
        SafeTensorError::MetadataIncompleteBuffer => FormatProblem::Truncated {
            detail: "the tensor data does not match the header's offsets".into(),
        },
        other => FormatProblem::NotSafetensors {
            detail: other.to_string(),
        },
    })?;
    let (_, header) =
        SafeTensors::read_metadata(bytes).map_err(|e| FormatProblem::NotSafetensors {
            detail: e.to_string(),
        })?;
    let meta = header.metadata().clone().unwrap_or_default();
    Ok((st, meta))
}

/// `speaker_embedding` as f32. `lenient` also takes BF16 (vllm-omni computes
/// it in bf16) and checks the length only when `expect` is given.
pub(crate) fn read_embedding(
    st: &SafeTensors<'_>,
    expect: Option<usize>,
    lenient: bool,
) -> Result<Vec<f32>, FormatProblem> {
    let t = st
        .tensor(SPEAKER_EMBEDDING)
        .map_err(|_| FormatProblem::MissingTensor(SPEAKER_EMBEDDING))?;
    let shape = t.shape().to_vec();
    let shape_ok = shape.len() == 1 && expect.is_none_or(|e| shape[0] == e);
    let dtype_ok = t.dtype() == Dtype::F32 || (lenient && t.dtype() == Dtype::BF16);
    if !shape_ok || !dtype_ok {
        let e = expect.map_or("E".to_owned(), |e| e.to_string());
        return Err(FormatProblem::Tensor {
            tensor: SPEAKER_EMBEDDING,
            expected: format!("F32 [{e}]"),
            found: format!("{:?} {shape:?}", t.dtype()),
        });
    }
    let data = t.data();
    Ok(match t.dtype() {
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
            .collect(),
        _ => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    })
}

/// `ref_code` `[T, groups]` if present; with `groups` `None`, `[T, G]` with
/// the file's own G, 1 to [`MAX_CODE_GROUPS`]. `lenient` also takes I64
/// (what `torch.save` of the official prompt holds). Negative codes are
/// refused.
pub(crate) fn read_codes(
    st: &SafeTensors<'_>,
    groups: Option<usize>,
    lenient: bool,
) -> Result<Option<RefCodes>, FormatProblem> {
    let Ok(t) = st.tensor(REF_CODE) else {
        return Ok(None);
    };
    let shape = t.shape().to_vec();
    let dtype_ok = t.dtype() == Dtype::I32 || (lenient && t.dtype() == Dtype::I64);
    let groups_ok = |g: usize| groups.map_or((1..=MAX_CODE_GROUPS).contains(&g), |want| g == want);
    if shape.len() != 2 || shape[0] == 0 || !groups_ok(shape[1]) || !dtype_ok {
        let expected = match groups {
            Some(g) => format!("I32 [T, {g}] with T >= 1"),
            None => format!("I32 [T, G] with T >= 1 and G in 1..={MAX_CODE_GROUPS}"),
        };
        return Err(FormatProblem::Tensor {
            tensor: REF_CODE,
            expected,
            found: format!("{:?} {shape:?}", t.dtype()),
        });
    }
    let groups = shape[1];
    let values: Vec<i64> = match t.dtype() {
        Dtype::I64 => t
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect(),
        _ => t
            .data()
            .chunks_exact(4)
            .map(|b| i64::from(i32::from_le_bytes(b.try_into().expect("4 bytes"))))
            .collect(),
    };
    let mut codes = Vec::with_capacity(values.len());
    for (i, v) in values.into_iter().enumerate() {
        let c = u32::try_from(v).map_err(|_| FormatProblem::Tensor {
            tensor: REF_CODE,
            expected: "codes >= 0".into(),
            found: format!("{v} at frame {}, group {}", i / groups, i % groups),
        })?;
        codes.push(c);
    }
    Ok(Some(RefCodes::new(groups, codes)?))
}
