//! Reference codes and the codec shape they are checked against.

use super::error::RecordError;
use super::limits::{CODEBOOK_SIZE, CODE_GROUPS, MAX_CODE_GROUPS};

/// The codec a record's codes are checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodecShape {
    /// Codes per frame (G).
    pub groups: usize,
    /// Every code is below this.
    pub codebook_size: u32,
}

impl Default for CodecShape {
    /// The Qwen3-TTS 12 Hz codec: 16 groups of 2048 entries.
    fn default() -> Self {
        CodecShape {
            groups: CODE_GROUPS,
            codebook_size: CODEBOOK_SIZE,
        }
    }
}

/// Reference codes, row-major `[T, G]`: frame `t` is `codes[t*G..(t+1)*G]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefCodes {
    groups: usize,
    codes: Vec<u32>,
}

impl RefCodes {
    /// `codes` laid out `[T, groups]`; refused unless it holds whole frames.
    pub fn new(groups: usize, codes: Vec<u32>) -> Result<RefCodes, RecordError> {
        if groups == 0 || !codes.len().is_multiple_of(groups) {
            return Err(RecordError::CodesShape {
                len: codes.len(),
                groups,
            });
        }
        Ok(RefCodes { groups, codes })
    }

    /// From frames of `G` codes each (the shape the codec encoder returns).
    pub fn from_frames(frames: &[Vec<u32>]) -> Result<RefCodes, RecordError> {
        let groups = frames.first().map_or(CODE_GROUPS, Vec::len);
        if let Some(bad) = frames.iter().find(|f| f.len() != groups) {
            return Err(RecordError::CodesShape {
                len: bad.len(),
                groups,
            });
        }
        RefCodes::new(groups, frames.concat())
    }

    /// T, the number of 80 ms frames.
    pub fn frames(&self) -> usize {
        self.codes.len() / self.groups
    }

    /// G, codes per frame.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Frame `t`'s G codes; `None` past the end.
    pub fn frame(&self, t: usize) -> Option<&[u32]> {
        self.codes.get(t * self.groups..(t + 1) * self.groups)
    }

    /// All codes, row-major `[T, G]`.
    pub fn as_slice(&self) -> &[u32] {
        &self.codes
    }

    pub fn into_vec(self) -> Vec<u32> {
        self.codes
    }
}

/// `codes` against `codec` (its groups exactly, its codebook), or with none
/// against their own shape: at most [`MAX_CODE_GROUPS`] groups (a
/// [`RefCodes`] has at least one), every code below [`CODEBOOK_SIZE`].
pub(super) fn check_codes(codes: &RefCodes, codec: Option<&CodecShape>) -> Result<(), RecordError> {
    let codebook_size = match codec {
        Some(c) if codes.groups() != c.groups => {
            return Err(RecordError::GroupsMismatch {
                expected: c.groups,
                actual: codes.groups(),
            })
        }
        Some(c) => c.codebook_size,
        None if codes.groups() > MAX_CODE_GROUPS => {
            return Err(RecordError::TooManyGroups {
                groups: codes.groups(),
            })
        }
        None => CODEBOOK_SIZE,
    };
    if let Some(i) = codes.as_slice().iter().position(|&c| c >= codebook_size) {
        return Err(RecordError::CodeOutOfRange {
            frame: i / codes.groups(),
            group: i % codes.groups(),
            code: codes.as_slice()[i],
            codebook_size,
        });
    }
    Ok(())
}
