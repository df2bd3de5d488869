//! Provenance: when, from what and with which model a voice was made.

use sha2::{Digest, Sha256};

use super::limits::FORMAT_VERSION;
use crate::time::Timestamp;

/// Lower-case hex sha256 of `bytes` (a clip's provenance fingerprint).
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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
