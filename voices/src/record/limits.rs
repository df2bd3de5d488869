//! The record's constants: the codec's shape, the talker sizes, the
//! format version and the bounds a record is checked against. In a file of
//! their own so the record's parts (codes, errors, provenance) can name
//! them without importing the record that is built from those parts.

/// Codes per 80 ms frame in the Qwen3-TTS 12 Hz codec (1 semantic + 15 acoustic).
pub const CODE_GROUPS: usize = 16;
/// Entries per codebook in that codec: every code is below this.
pub const CODEBOOK_SIZE: u32 = 2048;
/// Most codes per frame a stored voice may have where no model says how
/// many (each record is then held to its own shape). A frame holds the
/// codes the speech tokenizer's encoder keeps: `encoder_valid_num_quantizers`
/// of its `encoder_config.num_quantizers` (the config loader refuses more),
/// and the released encoder has 32 quantizers (1 semantic + 31 acoustic),
/// of which it keeps 16; a trimmed checkpoint keeps fewer (8 in tiny-base8).
pub const MAX_CODE_GROUPS: usize = 32;
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
