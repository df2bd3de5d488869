//! tts-rt serving: the streaming engine (`tts-actors`) behind a realtime
//! WebSocket protocol and an OpenAI-compatible HTTP API, on one port.
//!
//! # Layout
//! - [`protocol`]: every WebSocket message, the binary audio header, parse
//!   errors; mirrored by `docs/protocol.md` (read it first).
//! - [`server`]: [`ServeConfig`], [`Server`] (listen, load the model in the
//!   background, routes, bearer-token auth, graceful drain), and
//!   [`run_blocking`] for the CLI.
//! - `session`: one WebSocket connection — contexts, segmentation,
//!   resampling, acks, cancel, barge-in — in a single task per connection.
//! - [`openai`]: `POST /v1/audio/speech`, `GET /v1/models`,
//!   `GET /v1/audio/voices`.
//! - [`segment`]: text segmentation at clause/sentence boundaries with a
//!   deadline. [`vad`]: the voice-activity seam and the energy detector.
//! - [`voices`]: OpenAI voice names → checkpoint speakers.
//! - [`web`]: the browser page at `/` (static files compiled in, no auth).
//! - [`metrics`]: Prometheus text for `/metrics`. `record`: METRICS.md
//!   figures for a context spanning several engine requests.
//!
//! Backpressure end to end: the engine's per-request channel is bounded;
//! a session reads the next event only after the previous frame was written
//! to the socket (with a timeout), and acknowledges audio on write or on the
//! client's `audio.ack`, so a slow client pauses only its own generation.
#![forbid(unsafe_code)]

pub mod error;
mod http_error;
pub mod openai;
pub mod prometheus;
pub mod protocol;
mod realtime;
mod record;
pub mod segment;
pub mod server;
pub mod state;
pub mod vad;
mod validate;
pub mod voices;
pub mod web;

pub use error::TransportError;
pub use server::{run_blocking, ServeConfig, Server};
pub use state::Drain;
