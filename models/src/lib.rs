//! Qwen3-TTS 12Hz in Rust: checkpoint loading, text tokenizer, talker,
//! code predictor, code2wav and the Base reference-clip encoders (speaker
//! encoder and codec encoder).
//!
//! # Layout
//! From the bottom up (each module imports only modules listed above it):
//! - [`kind`]: the model family ([`kind::ModelKind`]), named by the
//!   error type and made by the config parser.
//! - [`error`]: the crate's error type; [`sampling`]: the official
//!   logits-processor pipeline, a seedable RNG and the raw-logits hook;
//!   `mmap` (private): read-only file maps.
//! - [`weight`]: weight matrices as the kernels take them (mapped, owned,
//!   int8, q4); [`checkpoint`]: memory-mapped (sharded) safetensors with
//!   per-tensor name/shape/dtype checks.
//! - [`config`]: `config.json`, `generation_config.json`,
//!   `speech_tokenizer/config.json`, parsed and validated up front (the
//!   key reader, the speech tokenizer's part and the speaker encoder's in
//!   their own files).
//! - [`quant`]: weight precision ([`quant::Precision`]: stored
//!   bf16/f32, int8 per output channel, or 4-bit groups, converted at
//!   load time), chosen per tensor class of each stage by a
//!   [`PrecisionPlan`] (`quant/plan.rs`: the classes, the named presets,
//!   the `--precision` grammar, bytes per frame from shapes); [`wcache`]:
//!   the optional on-disk cache of converted LM weights, memory-mapped on
//!   later loads: the per-stage and per-plan converters and the per-load
//!   event list, with the file format in `wcache/file.rs`.
//! - [`tokenizer`]: Qwen2 byte-level BPE and the official chat templates.
//! - [`fidelity`]: how close a reduced precision is to the reference —
//!   teacher-forced KL and top-1 per stage (codebook 0, each predicted
//!   codebook, the end-of-speech logit apart) and free-running durations.
//! - [`live_text`]: text that arrives while it is spoken ([`live_text::LiveText`]:
//!   token ids committed only where later text cannot change them), fed to a
//!   streaming-text-mode talker that waits when it runs out
//!   (`Qwen3Tts::live_sessions`, `feed_live_text`).
//! - [`lm`]: the Qwen3 decoder stack shared by the talker and the code
//!   predictor, with an explicit per-session KV cache.
//! - [`request`]: the request vocabulary ([`Request`], [`GenOptions`],
//!   [`StopReason`]).
//! - One folder per stage, each with the stage's weights and forward pass
//!   and its per-request state: [`talker`] ([`Talker`](talker::Talker),
//!   [`TalkerState`], the [`Prompt`] it is fed, the [`PrefixCache`] of
//!   prompts' shared leading rows), [`code_predictor`]
//!   ([`PredictorState`]), [`codec`] (code2wav: one-shot, official 300/25
//!   chunked, and a stateful streaming decoder), [`codec_encoder`] (the
//!   speech tokenizer's encoder: reference audio to
//!   [`ReferenceCodes`](codec_encoder::ReferenceCodes) through the causal
//!   SEANet, the full-causal transformer, the replicate-padded downsample
//!   and the split RVQ), [`speaker_encoder`] (Base checkpoints: the
//!   official log-mel front end and the ECAPA-TDNN that turns 24 kHz
//!   reference audio into the x-vector, [`SpeakerEncoder`]).
//! - [`prompt`]: prompt construction, one [`prompt::PromptLayout`] per
//!   checkpoint family (CustomVoice, Base voice clone, VoiceDesign).
//! - [`model`]: the loaded checkpoint ([`Qwen3Tts`]) and how it is loaded
//!   ([`LoadOptions`]).
//! - [`generator`]: the offline generator ([`FrameGenerator`]), both LM
//!   stages of one request on the calling thread.
//!
//! Random-weight checkpoints in the hub layout are written by the
//! `tts-checkpoint-gen` crate, outside this one.
//!
//! Every size, id, rate and frame length comes from the checkpoint's configs.
#![deny(unsafe_code)]

pub mod checkpoint;
pub mod code_predictor;
pub mod codec;
pub mod codec_encoder;
pub mod config;
pub mod error;
pub mod fidelity;
pub mod generator;
pub mod kind;
pub mod live_text;
pub mod lm;
mod mmap;
pub mod model;
pub mod prompt;
pub mod quant;
pub mod request;
pub mod sampling;
pub mod speaker_encoder;
pub mod talker;
pub mod tokenizer;
pub mod wcache;
pub mod weight;

pub use code_predictor::PredictorState;
pub use codec_encoder::{CodecEncoder, ReferenceCodes};
pub use error::{ModelError, Result};
pub use generator::FrameGenerator;
pub use model::{CloneEncoders, CloneTimings, LoadOptions, Qwen3Tts};
pub use quant::{
    Code2WavLayers, Code2WavPrecision, KvFormat, Precision, PrecisionPlan, Preset, StagePlan,
    TensorClass,
};
pub use request::{CloneReference, GenOptions, Request, StopReason, VoiceClone};
pub use speaker_encoder::SpeakerEncoder;
pub use talker::{PrefixCache, PrefixCacheStats, Prompt, TalkerOutput, TalkerState, TalkerWork};
