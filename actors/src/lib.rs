//! tts-rt's streaming runtime: the talker, the code predictor and code2wav
//! as supervised actix actors, each on its own thread, behind a router that
//! owns sessions, request lifecycles, admission and delivery.
//!
//! # Layout
//! - [`engine`]: the public API — [`Engine::start`], [`Engine::open_session`],
//!   [`Session::synthesize`] → [`Stream`] of [`Event`]s, cancel, ack, stats.
//! - [`contract`]: the typed, versioned messages between stages (read this
//!   first: identity, staleness and ordering rules live there).
//! - `router`: sessions, epochs, admission ledger, delivery to bounded
//!   per-request channels, slow-consumer bounds, cancel, watchdog.
//! - `stage`: the generic supervised stage actor (bounded mailbox, local
//!   work queue in rounds, panic boundary, health atomics, gathering of the
//!   partner stage's in-flight requests); `stages`: the three model stages
//!   and the per-request state each owns — the talker and the code
//!   predictor step every ready request of a round in one batched forward.
//! - [`flow`]: per-request flow gate (unacknowledged audio → pause).
//! - [`metrics`]: METRICS.md figures as pure functions (continuity
//!   simulation, nearest-rank summaries).
//! - [`config`]: [`EngineConfig`], validated before anything starts.
//!
//! Heavy compute runs on the stage arbiters (one OS thread each, using the
//! kernels' rayon pool inside a step); the router thread only moves
//! messages, so it keeps delivering while the LMs and the vocoder compute.
#![forbid(unsafe_code)]

pub mod config;
pub mod contract;
pub mod engine;
pub mod error;
#[cfg(feature = "fault-injection")]
mod fault;
pub mod flow;
pub mod metrics;
mod request;
mod router;
mod shared;
mod stage;

pub use config::{ChunkSchedule, EngineConfig, StageThreads};
#[cfg(feature = "fault-injection")]
pub use config::{Fault, FaultAction};
pub use contract::{RequestKey, StageKind, CONTRACT_VERSION};
pub use engine::{AudioChunk, CancelHandle, Engine, EngineStats, Event, Session, Stream};
pub use error::{EngineError, ErrorKind};
pub use metrics::{RequestMetrics, Summary};
pub use router::CancelAck;
