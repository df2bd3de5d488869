//! tts-rt serving: the streaming engine behind a WebSocket protocol and an
//! OpenAI-compatible HTTP API.
#![forbid(unsafe_code)]

pub mod protocol;
