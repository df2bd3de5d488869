//! tts-transport's integration tests: one test binary, one module per area
//! (docs/architecture.md, "Tests"); `common`: the server they share;
//! `alone`: running a test in a process of its own.

/// One file for every crate that needs it (the test binaries of actors,
/// audio and transport).
#[path = "../../../tests/support/alone.rs"]
mod alone;
mod common;

mod abandoned;
mod dialects;
mod floods;
mod hardening;
mod http_formats;
mod live;
mod logs;
mod openai_compat;
mod openai_failures;
mod realtime_formats;
mod reliability;
mod serve;
mod timings;
mod tls;
mod voices;
mod web;
mod wyoming;
