#![forbid(unsafe_code)]
//! The tts-rt voice library: cloned voices as stored records.
//!
//! A voice is made once from a reference clip with a Qwen3-TTS Base
//! checkpoint and then reused by name: its x-vector (and, for ICL voices, the
//! clip's codec codes and transcript) is what every later request needs, so
//! keeping it saves the speaker and codec encoders on each request. This
//! crate is pure data and storage: it depends on no other tts crate, sits
//! beside `audio` in the layer order, and is used by the model layer (which
//! makes records and fills the derived caches), the server and the CLI.
//!
//! # Layout
//! - [`name`]: [`VoiceName`], the name rules (1..=64 of `[A-Za-z0-9_.-]`,
//!   starting alphanumeric, no `..`, no Windows device names) and the
//!   lower-case key that makes names unique regardless of case.
//! - [`record`]: [`VoiceRecord`], [`VoiceMode`] and every rule a stored
//!   voice obeys ([`VoiceRecord::validate`]) in `record/mod.rs`; [`RefCodes`]
//!   and [`CodecShape`] in `codes.rs`; [`Provenance`], [`Source`],
//!   [`ModelInfo`], [`sha256_hex`] in `provenance.rs`; [`RecordError`] in
//!   `error.rs`; the JSON view ([`VoiceRecord::to_json`]) in `json.rs`.
//! - [`format`](mod@format): the on-disk format, one `<key>.safetensors` per voice with
//!   vllm-omni's tensor names and a documented `__metadata__`; strict reading
//!   with a [`FormatError`] that names the file and the problem.
//! - [`store`]: [`VoiceStore`], a directory of voices: skips and names corrupt
//!   files on open, `max_voices`, readers holding `Arc`s, reads that see
//!   other processes' writes at the next look (`store/mod.rs`); atomic
//!   writes — temp file, fsync, rename (replace) or hard link (new, never
//!   overwriting), directory fsync (`atomic.rs`); per-name write guards
//!   in-process and across processes with a kernel-held lock on
//!   `<key>.lock` (`lock.rs`).
//!   Watchers ([`VoiceWatcher`]) hear of replaced and removed voices. The
//!   state computed from a voice (the talker's KV prefix, the primed
//!   decoder) is cached by the model layer, keyed by the voice's content
//!   (rows and codes compared in full), so a replaced voice can never be
//!   served stale state and needs no invalidation here.
//! - [`interop`]: import and export of vllm-omni's `custom_voice_dir`
//!   (manifest plus per-voice safetensors, `vllm_omni.rs`) and qwentts.cpp's
//!   `.spk`/`.rvq` (11-bit packed codes, `qwentts.rs`), for an
//!   [`interop::ImportTarget`] model.
//! - [`time`]: [`Timestamp`], RFC 3339 UTC without a date crate.
//!
//! # On-disk format (version 1)
//! See [`format`](mod@format) for the tensor and metadata tables. In short: a voice
//! `Alice` lives in `alice.safetensors` holding `speaker_embedding` (F32
//! `[E]`) and, for ICL, `ref_code` (I32 `[T, G]`, G = 16 for the released
//! codec, fewer where a checkpoint's encoder keeps fewer; a store opened
//! for a model checks G and the codes against its codec, one opened without
//! checks each file against its own shape); `__metadata__` carries
//! `format = "tts-rt-voice"`, `version = "1"`, the name, mode (`icl` /
//! `xvec`), reference text, talker size and hidden size, and the provenance
//! (`created`, `source_*`, `model`, `model_fingerprint`). The directory may
//! also hold `<key>.lock` (a write in progress) and `.tmp-*` files (an
//! interrupted write); neither is a voice.

pub mod format;
pub mod interop;
pub mod name;
pub mod record;
pub mod store;
pub mod time;

pub use format::{FormatError, FormatProblem};
pub use name::{NameError, VoiceName};
pub use record::{
    sha256_hex, talker_size_for_hidden, CodecShape, ModelInfo, Provenance, RecordError, RefCodes,
    Source, VoiceMode, VoiceRecord,
};
pub use store::{Removed, SkippedVoice, StoreError, StoreOptions, VoiceStore, VoiceWatcher};
pub use time::Timestamp;
