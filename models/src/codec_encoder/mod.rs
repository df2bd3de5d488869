//! The speech tokenizer's encoder: 24 kHz mono audio -> `groups` (16) codes
//! per 80 ms frame, the reference codes of a voice-clone prompt.
//!
//! Graph (official `Qwen3TTSTokenizerV2Encoder`, a `MimiModel` without its
//! decoder, run on one clip):
//! 1. [`seanet`]: causal SEANet, 960 samples per column (25 Hz), run in
//!    10 s chunks with per-conv histories so memory stays bounded.
//! 2. [`transformer`]: full-causal transformer over the whole clip.
//! 3. the downsample: a causal `MimiConv1d` (kernel 4, stride 2) whose
//!    padding *replicates* the edge columns (12.5 Hz).
//! 4. [`quantizer`]: split RVQ, the semantic code then the acoustic ones,
//!    only the first `encoder_valid_num_quantizers` kept (and run).
//!
//! Frames: `ceil(n / 1920)` for `n` samples, as the official trim (the
//! convs already give `ceil(ceil(n / 960) / 2)`, the same number). The
//! clip is encoded alone: the official batch path right-pads shorter clips
//! with zeros, which the replicate pad then sees (spec §3.1), so only
//! single-clip encodes are reproduced.
//!
//! Weights ([`weights`]) are read from `speech_tokenizer/model.safetensors`
//! independently of the decoder ([`crate::codec`]), which skips `encoder.*`.

use std::path::Path;

use crate::checkpoint::TensorStore;
use crate::config::CodecEncoderConfig;
use crate::error::{ModelError, Result};

mod quantizer;
mod seanet;
#[cfg(test)]
mod tests;
mod transformer;
mod weights;

/// Reference codes of one clip: `[frames, groups]`, row-major (frame `t`'s
/// codes are `codes[t * groups..(t + 1) * groups]`, semantic code first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferenceCodes {
    pub frames: usize,
    pub groups: usize,
    pub codes: Vec<u32>,
}

impl ReferenceCodes {
    /// The `groups` codes of frame `t`.
    pub fn frame(&self, t: usize) -> &[u32] {
        &self.codes[t * self.groups..(t + 1) * self.groups]
    }
}

/// Every intermediate of one encode, for golden tests: each
/// `[channels, time]` (the official tensors' layout without the batch).
#[doc(hidden)]
pub struct EncoderStages {
    /// `[hidden, t25]`.
    pub seanet: Vec<f32>,
    /// `[hidden, t25]`.
    pub transformer: Vec<f32>,
    pub t25: usize,
    /// `[hidden, t12]`.
    pub downsample: Vec<f32>,
    pub codes: ReferenceCodes,
}

/// The loaded encoder (weights mapped from the file; immutable, shareable).
pub struct CodecEncoder {
    cfg: CodecEncoderConfig,
    w: weights::Weights,
}

impl std::fmt::Debug for CodecEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodecEncoder")
            .field("config", &self.cfg.path)
            .field("num_quantizers", &self.cfg.valid_quantizers)
            .finish_non_exhaustive()
    }
}

impl CodecEncoder {
    /// Loads `dir/config.json` (its `encoder_config`) and the `encoder.*`
    /// tensors of `dir/model.safetensors` (the checkpoint's
    /// `speech_tokenizer/` directory), each checked by name and shape. The
    /// decoder's `decoder.*` tensors are skipped; anything else is an error.
    pub fn load(speech_tokenizer_dir: &Path) -> Result<Self> {
        let cfg = CodecEncoderConfig::load(&speech_tokenizer_dir.join("config.json"))?;
        let store = TensorStore::open_dir(speech_tokenizer_dir, "model")?;
        let enc = Self::from_store(cfg, &store)?;
        store.ignore_prefix("decoder.");
        store.finish()?;
        Ok(enc)
    }

    /// Takes the `encoder.*` tensors from an open store without calling
    /// [`TensorStore::finish`], for loaders that own the store's other parts.
    pub fn from_store(cfg: CodecEncoderConfig, store: &TensorStore) -> Result<Self> {
        let w = weights::Weights::load(&cfg, store)?;
        Ok(CodecEncoder { cfg, w })
    }

    pub fn config(&self) -> &CodecEncoderConfig {
        &self.cfg
    }

    /// Codes per frame (`encoder_valid_num_quantizers`, 16).
    pub fn num_quantizers(&self) -> usize {
        self.cfg.valid_quantizers
    }

    /// Samples per code frame (`encode_downsample_rate`, 1920).
    pub fn samples_per_frame(&self) -> usize {
        self.cfg.samples_per_frame
    }

    /// The rate `encode` expects its samples at (24000).
    pub fn sample_rate(&self) -> u32 {
        self.cfg.sample_rate
    }

    /// Code frames for `n` samples: `ceil(n / samples_per_frame)`.
    pub fn frames_for(&self, n: usize) -> usize {
        n.div_ceil(self.cfg.samples_per_frame)
    }

    /// Encodes one mono clip at [`Self::sample_rate`] (no normalisation, as
    /// the official encoder): `ceil(n / 1920)` frames of
    /// [`Self::num_quantizers`] codes. Runs on the kernel pool.
    ///
    /// Errors: an empty clip ([`ModelError::EmptyAudio`]) or a NaN/infinite
    /// sample ([`ModelError::NonFiniteAudio`]).
    pub fn encode(&self, samples_24k: &[f32]) -> Result<ReferenceCodes> {
        Ok(self.stages(samples_24k)?.codes)
    }

    /// [`Self::encode`] keeping every intermediate (golden tests).
    #[doc(hidden)]
    pub fn stages(&self, samples: &[f32]) -> Result<EncoderStages> {
        if samples.is_empty() {
            return Err(ModelError::EmptyAudio {
                sample_rate: self.cfg.sample_rate,
            });
        }
        if let Some((index, &value)) = samples.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(ModelError::NonFiniteAudio { index, value });
        }
        Ok(tts_kernels::on_pool(|| self.run(samples)))
    }

    fn run(&self, samples: &[f32]) -> EncoderStages {
        let (cfg, w) = (&self.cfg, &self.w);
        let hs = cfg.hidden_size;
        let (seanet, t25) = seanet::forward(&w.seanet, samples, cfg.hop);
        let transformer = transformer::forward(&w.transformer, cfg, &seanet, t25);
        let mut downsample = Vec::new();
        let t12 = seanet::causal_conv(&w.downsample, &transformer, t25, &mut downsample);
        debug_assert_eq!(t12, self.frames_for(samples.len()));
        let codes = quantizer::encode(&w.quantizer, &downsample, hs, t12);
        let groups = cfg.valid_quantizers;
        debug_assert_eq!(codes.len(), t12 * groups);
        EncoderStages {
            seanet,
            transformer,
            t25,
            downsample,
            codes: ReferenceCodes {
                frames: t12,
                groups,
                codes,
            },
        }
    }
}
