//! The realtime WebSocket protocol, message by message. `docs/protocol.md`
//! is the prose version of this module: change both together.
//!
//! Text messages are JSON objects with a `type` tag; audio travels in binary
//! messages with a fixed 16-byte header ([`AudioHeader`]) or, when the
//! session asks for it, base64 inside JSON ([`ServerMessage::Audio`]).
//! Parsing never panics on any input (a proptest feeds it arbitrary bytes)
//! and every failure is a [`ProtocolError`] whose code and message name the
//! problem, so the server can answer with an `error` event and keep going.
//!
//! Files, each importing only those listed before it; everything is
//! re-exported here, so `tts_transport::protocol::X` names every item:
//! - `limits`: version, message size limits, output rates.
//! - `session_settings`: `session.update`, the effective settings, audio
//!   format, chunking, VAD, announced limits.
//! - `errors`: error codes and [`ProtocolError`].
//! - `client_messages`: client messages and [`parse_client_text`].
//! - `server_messages`: server messages, [`ContextMetrics`],
//!   [`parse_server_text`].
//! - `audio_frames`: the binary header, sample codecs, input audio, base64.

mod audio_frames;
mod client_messages;
mod errors;
mod limits;
mod server_messages;
mod session_settings;
#[cfg(test)]
mod tests;

pub use audio_frames::*;
pub use client_messages::*;
pub use errors::*;
pub use limits::*;
pub use server_messages::*;
pub use session_settings::*;
