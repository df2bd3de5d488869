//! tts-rt serving: the streaming engine (`tts-actors`) behind a realtime
//! WebSocket protocol and an OpenAI-compatible HTTP API, on one port.
//!
//! # Layout
//! Files import only files listed after them (no circles).
//! - [`server`]: [`ServeConfig`], [`Server`] (listen, load the model in the
//!   background, routes, graceful drain), and [`run_blocking`] for the CLI.
//! - `listener`: the accept loop — the connection cap and its 503, header
//!   and body read timeouts, each connection's graceful close;
//!   [`tls`]: the PEM files checked at startup and the acceptor each
//!   connection's TLS handshake goes through (`--tls-cert`/`--tls-key`);
//!   `write_timeout`: the socket wrapper that fails a write the peer takes
//!   no bytes of for 10 s (a client that stopped reading).
//! - [`dialects`]: ElevenLabs (`/v1/text-to-speech/{voice}/stream-input`,
//!   `multi-stream-input`) and Cartesia (`/tts/websocket`) sockets: thin
//!   translators, each a port of an ordinary realtime session (`port`, and
//!   the `Dialect` each implements), one file per dialect, `format` for
//!   their encodings; their one-shot HTTP routes answer through `openai`
//!   with typed requests.
//! - `realtime/`: the realtime session, one `RealtimeConnection` task per
//!   connection, talking to a `Port` (`port`; `/v1/realtime`'s WebSocket is
//!   `native`) — the loop and message routing (`connection`), settings
//!   (`settings`), the context queue (`queue`), live contexts fed to one
//!   live request and their long-context cut (`live`), barge-in
//!   (`barge_in`), frames and bounded sends (`output`).
//! - [`openai`]: `POST /v1/audio/speech`, `GET /v1/models`,
//!   `GET /v1/audio/voices`; `openai/voice.rs` chooses who speaks a
//!   request (preset speaker, stored or inline clone, designed voice).
//! - [`library`]: `POST /v1/audio/voices` (multipart or JSON upload),
//!   `GET`/`DELETE /v1/audio/voices/{name}`: stored voices of a Base
//!   checkpoint, made on a blocking thread; reference audio in JSON fields
//!   (`audio_field`), and the HTTP status of each voice refusal.
//! - `validate`: the request checks both of those share (voice, language,
//!   instructions, rate, frame cap), each rendered in its surface's own
//!   words.
//! - [`state`]: what every route and connection shares — [`AppState`](state::AppState)
//!   (limits, counters, the token check), [`Drain`], [`Loaded`](state::Loaded).
//! - [`body_budget`]: the process-wide budget of request-body bytes in
//!   memory (`--max-body-memory-mb`): bodies lease their bytes as they
//!   arrive, and a spent budget is a 503 with `Retry-After`.
//! - `http_error`: OpenAI's JSON error body, for every HTTP refusal
//!   (`Refusal`: status, message, field; the request id in each).
//! - `access_log`: request ids (`X-Request-Id` in or made, out in the
//!   header and error bodies) and the one `tracing` line per HTTP request.
//! - `cors`: `--cors-origin` (none by default): allowed origins' headers
//!   and preflights.
//! - [`prometheus`]: Prometheus text for `/metrics`. `record`: METRICS.md
//!   figures for a context spanning several engine requests.
//! - [`segment`]: text segmentation at clause/sentence boundaries with a
//!   deadline. [`vad`]: the voice-activity seam and the energy detector.
//! - [`speakers`]: the checkpoint's preset speakers and OpenAI voice names
//!   → those speakers (the built-in table, `--voice-map` overrides,
//!   `parse_voice_map`); the stored voices are [`library`]'s.
//! - [`web`]: the browser page at `/` (static files compiled in, no auth).
//! - [`protocol`]: every WebSocket message, the binary audio header, parse
//!   errors, one file each under `protocol/`; mirrored by
//!   `docs/protocol.md` (read it first).
//! - [`error`]: [`TransportError`], what starting or running a server fails
//!   with.
//!
//! Backpressure end to end: the engine's per-request channel is bounded;
//! a session reads the next event only after the previous frame was written
//! to the socket (with a timeout), and acknowledges audio on write or on the
//! client's `audio.ack`, so a slow client pauses only its own generation.
#![forbid(unsafe_code)]

mod access_log;
pub mod body_budget;
mod cors;
pub mod dialects;
pub mod error;
mod http_error;
pub mod library;
mod listener;
pub mod openai;
pub mod prometheus;
pub mod protocol;
mod realtime;
mod record;
pub mod segment;
pub mod server;
pub mod speakers;
pub mod state;
pub mod tls;
pub mod vad;
mod validate;
pub mod web;
mod write_timeout;
pub mod wyoming;

pub use error::TransportError;
pub use listener::{parse_nodelay, NODELAY_ENV};
pub use server::{run_blocking, ServeConfig, Server};
pub use state::Drain;
pub use tls::TlsFiles;
