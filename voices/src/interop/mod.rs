//! Import and export of the precomputed-voice layouts other servers use, so
//! a user can bring voices along (and take them away).
//!
//! - [`vllm_omni`]: a `custom_voice_dir` — `custom_voice_manifest.json` plus
//!   one safetensors per voice with `speaker_embedding` and `ref_code`.
//! - [`qwentts`]: qwentts.cpp's `<name>.spk` (raw f32 x-vector) and
//!   `<name>.rvq` (codes packed 11 bits each).
//!
//! Neither layout records which talker a voice was made with beyond its
//! width, so an import is made *for* a model: [`ImportTarget`] names it, and
//! a voice whose x-vector does not have that model's hidden size is refused.

pub mod qwentts;
pub mod vllm_omni;

use std::io;
use std::path::{Path, PathBuf};

use crate::format::FormatError;
use crate::name::NameError;
use crate::record::{sha256_hex, ModelInfo, Provenance, RecordError, Source};

pub use qwentts::{export_qwentts, import_qwentts, pack_codes, unpack_codes, QwenttsFiles};
pub use vllm_omni::{export_vllm_omni, import_vllm_omni, MANIFEST_FILE};

/// The model imported voices will be used with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportTarget {
    /// Its talker-size label (`0b6`, `1b7`, ...).
    pub talker_size: String,
    /// Its talker hidden size: every imported x-vector must have this length.
    pub hidden_size: usize,
    /// Recorded as the model the voice belongs to.
    pub model: ModelInfo,
}

/// Why an import or export failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InteropError {
    /// (`error` is in the message, not the error's source: one cause per
    /// line where a chain is printed.)
    #[error("{}: {error}", path.display())]
    Io { path: PathBuf, error: io::Error },
    #[error("manifest {}: {problem}", path.display())]
    Manifest { path: PathBuf, problem: String },
    #[error(transparent)]
    Format(#[from] FormatError),
    /// (The record's refusal is in the message, not the error's source.)
    #[error("invalid voice: {0}")]
    Record(RecordError),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("{}: x-vectors have {found} values but this model's hidden size is {expected}; these voices were made for another talker size", path.display())]
    HiddenSize {
        path: PathBuf,
        expected: usize,
        found: usize,
    },
    #[error("{}: {problem}", path.display())]
    BadFile { path: PathBuf, problem: String },
    #[error("cannot export: {0}")]
    Export(String),
}

impl From<RecordError> for InteropError {
    fn from(e: RecordError) -> Self {
        InteropError::Record(e)
    }
}

impl InteropError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(io::Error) -> InteropError + '_ {
        move |error| InteropError::Io {
            path: path.to_owned(),
            error,
        }
    }

    pub(crate) fn bad_file(path: &Path, problem: impl Into<String>) -> InteropError {
        InteropError::BadFile {
            path: path.to_owned(),
            problem: problem.into(),
        }
    }
}

/// Provenance of a voice imported now from `origin`, whose files' bytes
/// are `bytes` (hashed together, in order).
pub(crate) fn imported_provenance(
    origin: String,
    bytes: &[&[u8]],
    model: &ModelInfo,
) -> Provenance {
    let joined: Vec<u8> = bytes.concat();
    Provenance::now(
        Source {
            name: origin,
            duration_s: None,
            sample_rate: None,
            channels: None,
            sha256: sha256_hex(&joined),
        },
        model.clone(),
    )
}

/// Reads a whole file, naming it on failure.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, InteropError> {
    std::fs::read(path).map_err(InteropError::io(path))
}

/// A bare file name from a manifest: no directories, no `..`, nothing
/// hidden — a manifest must not make an import read outside its directory.
pub(crate) fn plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0', ':'])
}
