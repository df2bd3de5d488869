//! tts-rt's streaming runtime: the talker, the code predictor and code2wav
//! as supervised actix actors, each on its own thread, behind a router that
//! owns sessions, request lifecycles, admission and delivery.
//!
//! # Layout
//! - [`engine`]: the public API — [`Engine::start`], [`Engine::open_session`],
//!   [`Session::synthesize`] → [`Stream`] of [`Event`]s, cancel, ack, stats.
//! - [`contract`]: the typed, versioned messages between stages (read this
//!   first: identity, staleness and ordering rules live there), including
//!   the one [`AudioChunk`] type that goes from code2wav to the consumer.
//! - `router`: the router actor — sessions, epochs, delivery to bounded
//!   per-request channels, slow-consumer bounds, cancel, watchdog and
//!   stage replacement; `admission`: the rules it applies, pure (a request's
//!   lifecycle state, admission and its ledger cost).
//! - `stage/`: one room per stage. `stage::actor` is the generic
//!   supervised stage actor (bounded mailbox, local work queue in rounds,
//!   panic boundary, health atomics, gathering of the partner stage's
//!   in-flight requests); `stage::wiring` addresses stages by the message
//!   they take (one recipient per contract message), so the generic actor
//!   knows no concrete stage; `stage::talker`, `stage::predictor` and
//!   `stage::code2wav` each hold one model stage's logic and the
//!   per-request state it owns — the talker and the code predictor step
//!   every ready request of a round in one batched forward.
//! - [`capacity`]: real-time capacity, pure — each kernel group's busy
//!   time, its cost per frame against the streams computing, and how many
//!   streams stay continuous (the admission rule and the load figure).
//! - [`slack`]: buffer slack, pure — each stream's audio in hand, and the
//!   order the stages take work in (the stream closest to underrun first;
//!   one far ahead held while another is close).
//! - `shared`: the figures every part reads lock-free (stage health, stale
//!   counters, ledger totals) and the kernel pools.
//! - [`voice_library`]: stored voices for the loaded checkpoint
//!   ([`VoiceLibrary`]): made from a clip with the checkpoint's encoders,
//!   kept in a `tts_voices::VoiceStore`, resolved by name into the
//!   [`VoiceClone`] a request carries (the CLI and the server share it).
//! - [`live`]: live text, the caller's side — one request whose text
//!   arrives while it is spoken ([`Session::live`] → [`LiveRequest`]).
//! - [`flow`]: what the consumer, the router and the stages share about one
//!   request, importing none of them: the flow gate (unacknowledged audio →
//!   pause) and, for live text, the [`flow::LiveFeed`] of text rows with the
//!   [`flow::StageWaker`] that resumes a request the talker parked for its
//!   text.
//! - [`metrics`]: METRICS.md figures as pure functions ([`ChunkLog`] of the
//!   chunks received, [`RequestMetrics`], nearest-rank [`Summary`]); the
//!   continuity simulation is `tts_audio::continuity`, re-exported.
//! - [`config`]: [`EngineConfig`], validated before anything starts.
//! - `fault` (feature `fault-injection`, tests only): panic, stall or
//!   delay a named stage at a given step.
//!
//! Heavy compute runs on the stage arbiters (one OS thread each, using the
//! kernels' rayon pool inside a step); the router thread only moves
//! messages, so it keeps delivering while the LMs and the vocoder compute.
#![forbid(unsafe_code)]

mod admission;
pub mod capacity;
pub mod config;
pub mod contract;
pub mod engine;
pub mod error;
#[cfg(feature = "fault-injection")]
mod fault;
pub mod flow;
pub mod live;
pub mod metrics;
mod router;
mod shared;
pub mod slack;
mod stage;
pub mod voice_library;

pub use config::{ChunkSchedule, EngineConfig, StageThreads, TeamHold};
#[cfg(feature = "fault-injection")]
pub use config::{Fault, FaultAction};
pub use contract::{AudioChunk, RequestKey, StageKind, CONTRACT_VERSION};
pub use engine::{CancelHandle, Engine, EngineStats, Event, Session, Stream};
pub use error::{EngineError, ErrorKind};
pub use flow::TextPause;
pub use live::LiveRequest;
pub use metrics::{ChunkLog, RequestMetrics, SlowRequestWarning, Summary};
pub use router::CancelAck;
pub use tts_models::config::ModelKind;
/// The model vocabulary the runtime's API takes and returns (the loaded
/// model, what a request asks for, why it stopped, what went wrong), so
/// the layers above speak to the runtime alone.
pub use tts_models::request::language_name;
pub use tts_models::{
    CloneReference, GenOptions, LoadOptions, ModelError, Qwen3Tts, Request, StopReason, VoiceClone,
};
pub use voice_library::{MadeVoice, NewVoice, VoiceError, VoiceLibrary};
