//! tts-actors' integration tests: one test binary, one module per area
//! (docs/architecture.md, "Tests"); `alone`: running a test in a process
//! of its own.

mod alone;

mod engine;
mod live;
mod live_idle;
