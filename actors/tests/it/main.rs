//! tts-actors' integration tests: one test binary, one module per area
//! (docs/architecture.md, "Tests"); `alone`: running a test in a process
//! of its own.

/// One file for every crate that needs it (the test binaries of actors,
/// audio and transport).
#[path = "../../../tests/support/alone.rs"]
mod alone;

mod engine;
mod live;
mod live_idle;
