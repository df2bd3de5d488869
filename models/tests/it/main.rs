//! tts-models' integration tests: one test binary, one module per area
//! (docs/architecture.md, "Tests").

mod batch;
mod codec_batch;
mod kv_cache;
mod live_text;
mod prefix_cache;
mod speaker_encoder_cost;
mod speaker_encoder_golden;
