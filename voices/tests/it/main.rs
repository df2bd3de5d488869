//! tts-voices' integration tests: one test binary, one module per area
//! (docs/architecture.md, "Tests"); `common`: the records they share.

mod common;

mod format;
mod golden;
mod interop;
mod store;
