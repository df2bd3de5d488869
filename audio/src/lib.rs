#![forbid(unsafe_code)]
//! Audio output for tts-rt.
