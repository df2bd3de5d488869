//! tts-audio's integration tests: one test binary, one module per area
//! (docs/architecture.md, "Tests"); `alone`: running a test in a process
//! of its own.

/// One file for every crate that needs it (the test binaries of actors,
/// audio and transport).
#[path = "../../../tests/support/alone.rs"]
mod alone;

/// reference_fuzz's counting allocator: it bounds and measures the heap of
/// that file's tests (each alone in its process); elsewhere it only counts.
#[global_allocator]
static ALLOCATOR: reference_fuzz::Counting = reference_fuzz::Counting;

#[cfg(target_os = "linux")]
mod alsa_playback;
mod encode_formats;
mod reference_audio;
mod reference_fuzz;
mod reference_official;
mod resample;
mod ring_stress;
