//! Qwen3-TTS 12Hz in Rust: checkpoint loading, text tokenizer, talker,
//! code predictor and code2wav.
//!
//! # Layout
//! - [`config`]: `config.json`, `generation_config.json`,
//!   `speech_tokenizer/config.json`, parsed and validated up front.
//! - [`checkpoint`]: memory-mapped (sharded) safetensors with per-tensor
//!   name/shape/dtype checks.
//! - [`tokenizer`]: Qwen2 byte-level BPE and the official chat templates.
//! - [`lm`]: the Qwen3 decoder stack shared by the talker and the code
//!   predictor, with an explicit per-session KV cache.
//! - [`talker`], [`code_predictor`]: the two LMs; [`sampling`]: the official
//!   logits-processor pipeline and a seedable RNG.
//! - [`codec`]: code2wav (one-shot, official 300/25 chunked, and a stateful
//!   streaming decoder).
//! - [`quant`]: per-stage weight precision ([`quant::Precision`]: stored
//!   bf16/f32, int8 per output channel, or 4-bit groups, converted at
//!   load time).
//! - [`wcache`]: optional on-disk cache of the converted (int8/q4) LM
//!   weights, memory-mapped on later loads.
//! - [`synth`]: prompt construction and the per-frame generation loop.
//! - [`gen`]: random-weight checkpoints in the hub layout.
//!
//! Every size, id, rate and frame length comes from the checkpoint's configs.
#![deny(unsafe_code)]
#![recursion_limit = "256"]

pub mod checkpoint;
pub mod config;
pub mod error;
mod mmap;

pub use error::{ModelError, Result};
pub mod code_predictor;
pub mod codec;
pub mod gen;
pub mod lm;
pub mod quant;
pub mod sampling;
pub mod synth;
pub mod talker;
pub mod tokenizer;
pub mod wcache;

pub use quant::{Code2WavPrecision, Precision};
pub use synth::{FrameGenerator, GenOptions, LoadOptions, Qwen3Tts, Request};
