//! The record's constants: the codec's shape, the talker sizes, the
//! format version and the bounds a record is checked against. In a file of
//! their own so the record's parts (codes, errors, provenance) can name
//! them without importing the record that is built from those parts.

/// Codes per 80 ms frame in the Qwen3-TTS 12 Hz codec (1 semantic + 15 acoustic).
pub const CODE_GROUPS: usize = 16;
/// Entries per codebook in that codec: every code is below this.
pub const CODEBOOK_SIZE: u32 = 2048;
/// The talker-size label of the 0.6B checkpoints (E = 1024).
pub const TALKER_0B6: &str = "0b6";
/// The talker-size label of the 1.7B checkpoints (E = 2048).
pub const TALKER_1B7: &str = "1b7";
/// The on-disk format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Largest x-vector accepted (no released talker is wider than 2048).
pub const MAX_HIDDEN_SIZE: usize = 16_384;
/// Longest reference text or description, in bytes (a few minutes of speech).
pub const MAX_TEXT_BYTES: usize = 16_384;
