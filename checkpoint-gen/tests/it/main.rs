//! tts-checkpoint-gen's integration tests: one test binary, one module per
//! area (docs/architecture.md, "Tests").

mod base;
