//! tts-kernels' integration tests: one test binary, one module per area
//! (docs/architecture.md, "Tests").

mod differential;
mod formats;
