//! Records for the integration tests.
#![allow(dead_code)]

use tts_voices::{ModelInfo, Provenance, RefCodes, Source, Timestamp, VoiceName, VoiceRecord};

pub fn provenance() -> Provenance {
    Provenance {
        created: Timestamp::parse("2026-01-31T12:00:00Z").unwrap(),
        source: Source::from_bytes("ref clip.wav", b"RIFF....WAVE", 3.25, 44_100, 2),
        model: ModelInfo {
            checkpoint: "Qwen3-TTS-12Hz-0.6B-Base".into(),
            fingerprint: "a1b2c3d4".into(),
        },
        format_version: 1,
    }
}

/// A deterministic x-vector of `e` values; `seed` makes voices distinct.
pub fn x_vector(e: usize, seed: u32) -> Vec<f32> {
    // `black_box`: a call with constant arguments could otherwise be
    // folded at compile time, by a `sin` other than the run-time one,
    // and differ from another call in the last bit.
    (0..e)
        .map(|i| std::hint::black_box((i as f32) * 0.37 + seed as f32).sin() * 3.0)
        .collect()
}

/// `t` frames of 16 codes spread over the whole codebook (0 and 2047 included).
pub fn codes(t: usize) -> RefCodes {
    codes_of_groups(16, t)
}

/// `t` frames of `groups` codes, spread as [`codes`]'s: the codes of a
/// codec that keeps another number of groups than the released 16.
pub fn codes_of_groups(groups: usize, t: usize) -> RefCodes {
    let flat = (0..t * groups)
        .map(|i| if i == 1 { 2047 } else { (i as u32 * 97) % 2048 })
        .collect();
    RefCodes::new(groups, flat).unwrap()
}

pub fn icl(name: &str, e: usize, t: usize) -> VoiceRecord {
    let mut r = VoiceRecord::icl(
        VoiceName::new(name).unwrap(),
        "0b6",
        x_vector(e, 1),
        codes(t),
        "Hello there, this is the reference.",
        provenance(),
    )
    .unwrap();
    r.description = Some("warm narrator".into());
    r
}

pub fn xvec(name: &str, e: usize, seed: u32) -> VoiceRecord {
    VoiceRecord::x_vector_only(
        VoiceName::new(name).unwrap(),
        "0b6",
        x_vector(e, seed),
        provenance(),
    )
    .unwrap()
}
