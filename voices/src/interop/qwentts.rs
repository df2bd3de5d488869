//! qwentts.cpp's voice files: `<name>.spk` and `<name>.rvq`.
//!
//! - `.spk`: the x-vector as raw little-endian f32, no header; E is the file
//!   size / 4.
//! - `.rvq`: the reference codes, 11 bits each (2048-entry codebooks),
//!   packed LSB-first into a byte stream with no header, in `[K, T]`
//!   row-major order: all T codes of codebook 0, then codebook 1, and so on
//!   (K = 16). Code `i` of that order occupies stream bits `11i .. 11i+10`;
//!   stream bit `b` is bit `b % 8` of byte `b / 8`. The stream is
//!   `ceil(11·K·T / 8)` bytes with zero padding bits, which for K = 16 is
//!   exactly `22·T` bytes, so T is the size / 22 and any other size is
//!   refused.
//! - The reference text is not part of either file (qwentts takes it as
//!   `--ref-text FILE`); export writes it beside them as `<name>.txt`.

use std::path::{Path, PathBuf};

use super::{imported_provenance, read, ImportTarget, InteropError};
use crate::name::VoiceName;
use crate::record::{RecordError, RefCodes, VoiceRecord, CODE_GROUPS};
use crate::store::atomic::write_atomic;

/// Bits per packed code (log2 of the 2048-entry codebooks).
pub const CODE_BITS: usize = 11;

/// Packs `[T, G]` codes into qwentts.cpp's `.rvq` stream (`[G, T]` order,
/// 11 bits each, LSB-first). Every code must be below 2048.
pub fn pack_codes(codes: &RefCodes) -> Result<Vec<u8>, RecordError> {
    let (t_len, groups) = (codes.frames(), codes.groups());
    let mut out = vec![0u8; (codes.as_slice().len() * CODE_BITS).div_ceil(8)];
    let mut bit = 0usize;
    for k in 0..groups {
        for t in 0..t_len {
            let code = codes.as_slice()[t * groups + k];
            if code >> CODE_BITS != 0 {
                return Err(RecordError::CodeOutOfRange {
                    frame: t,
                    group: k,
                    code,
                    codebook_size: 1 << CODE_BITS,
                });
            }
            for j in 0..CODE_BITS {
                if code >> j & 1 == 1 {
                    out[(bit + j) / 8] |= 1 << ((bit + j) % 8);
                }
            }
            bit += CODE_BITS;
        }
    }
    Ok(out)
}

/// Unpacks a `.rvq` stream of `groups` codebooks into `[T, G]` codes; the
/// size must be exactly that of some T >= 1 frames, padding bits zero.
pub fn unpack_codes(bytes: &[u8], groups: usize) -> Result<RefCodes, String> {
    let bits_per_frame = groups * CODE_BITS;
    let t_len = bytes.len() * 8 / bits_per_frame.max(1);
    if groups == 0 || t_len == 0 || (t_len * bits_per_frame).div_ceil(8) != bytes.len() {
        return Err(format!(
            "{} bytes is not a whole number of frames of {groups} codes at {CODE_BITS} bits \
             (for {groups} codebooks the size is {}·T bytes rounded up)",
            bytes.len(),
            bits_per_frame as f64 / 8.0
        ));
    }
    let used = t_len * bits_per_frame;
    if (used..bytes.len() * 8).any(|b| bytes[b / 8] >> (b % 8) & 1 == 1) {
        return Err("the padding bits after the last code are not zero".into());
    }
    let mut codes = vec![0u32; t_len * groups];
    let mut bit = 0usize;
    for k in 0..groups {
        for t in 0..t_len {
            let mut code = 0u32;
            for j in 0..CODE_BITS {
                let b = bit + j;
                code |= u32::from(bytes[b / 8] >> (b % 8) & 1) << j;
            }
            codes[t * groups + k] = code;
            bit += CODE_BITS;
        }
    }
    RefCodes::new(groups, codes).map_err(|e| e.to_string())
}

/// Makes a voice called `name` from qwentts.cpp files: `spk` alone gives an
/// x-vector-only voice; `rvq` with `ref_text` an ICL voice (codes without
/// a transcript are refused: ICL needs both).
pub fn import_qwentts(
    name: VoiceName,
    spk: &Path,
    rvq: Option<&Path>,
    ref_text: Option<&str>,
    target: &ImportTarget,
) -> Result<VoiceRecord, InteropError> {
    let spk_bytes = read(spk)?;
    if spk_bytes.is_empty() || !spk_bytes.len().is_multiple_of(4) {
        return Err(InteropError::bad_file(
            spk,
            format!(
                "{} bytes is not a whole number of f32 values (a .spk is raw little-endian f32)",
                spk_bytes.len()
            ),
        ));
    }
    let x_vector: Vec<f32> = spk_bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if x_vector.len() != target.hidden_size {
        return Err(InteropError::HiddenSize {
            path: spk.to_owned(),
            expected: target.hidden_size,
            found: x_vector.len(),
        });
    }
    let origin = |p: &Path| {
        let file = p
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        format!("qwentts:{file}")
    };
    match (rvq, ref_text) {
        (None, None) => {
            let prov = imported_provenance(origin(spk), &[&spk_bytes], &target.model);
            Ok(VoiceRecord::x_vector_only(
                name,
                &target.talker_size,
                x_vector,
                prov,
            )?)
        }
        (Some(rvq), Some(text)) => {
            let rvq_bytes = read(rvq)?;
            let codes = unpack_codes(&rvq_bytes, CODE_GROUPS)
                .map_err(|p| InteropError::bad_file(rvq, p))?;
            let prov = imported_provenance(origin(rvq), &[&spk_bytes, &rvq_bytes], &target.model);
            Ok(VoiceRecord::icl(
                name,
                &target.talker_size,
                x_vector,
                codes,
                text,
                prov,
            )?)
        }
        (Some(rvq), None) => Err(InteropError::bad_file(
            rvq,
            "reference codes need the reference text (ICL); give it, or import the .spk alone",
        )),
        (None, Some(_)) => Err(InteropError::bad_file(
            spk,
            "a reference text needs the .rvq codes it transcribes (ICL)",
        )),
    }
}

/// The files [`export_qwentts`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QwenttsFiles {
    pub spk: PathBuf,
    /// ICL voices only.
    pub rvq: Option<PathBuf>,
    /// ICL voices only: the reference text, for `--ref-text`.
    pub txt: Option<PathBuf>,
}

/// Writes `<key>.spk` (and for ICL `<key>.rvq`, `<key>.txt`) into `dir`.
/// An ICL voice whose codes are not the released codec's 16 groups is
/// refused before anything is written: a `.rvq` has no header to say K,
/// and qwentts.cpp (like [`import_qwentts`]) reads it as 16 codebooks.
pub fn export_qwentts(dir: &Path, record: &VoiceRecord) -> Result<QwenttsFiles, InteropError> {
    if let Some(codes) = record
        .ref_codes
        .as_ref()
        .filter(|c| c.groups() != CODE_GROUPS)
    {
        return Err(InteropError::Export(format!(
            "voice {:?} has {} code groups per frame; a qwentts.cpp .rvq holds {CODE_GROUPS} \
             and does not say how many, so it cannot carry this voice (the vllm-omni layout can)",
            record.name.as_str(),
            codes.groups()
        )));
    }
    std::fs::create_dir_all(dir).map_err(InteropError::io(dir))?;
    let key = record.name.key();
    let write = |ext: &str, bytes: &[u8]| -> Result<PathBuf, InteropError> {
        let path = dir.join(format!("{key}.{ext}"));
        write_atomic(dir, &path, bytes).map_err(InteropError::io(&path))?;
        Ok(path)
    };
    let spk_bytes: Vec<u8> = record
        .x_vector
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let spk = write("spk", &spk_bytes)?;
    let (rvq, txt) = match (&record.ref_codes, &record.ref_text) {
        (Some(codes), Some(text)) => (
            Some(write("rvq", &pack_codes(codes)?)?),
            Some(write("txt", text.as_bytes())?),
        ),
        _ => (None, None),
    };
    Ok(QwenttsFiles { spk, rvq, txt })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-worked: K = 2 codebooks (the packing does not depend on K), T = 2,
    /// frames [[1, 2047], [1024, 5]]. Stream order [K, T]: codebook 0 is
    /// (1, 1024), codebook 1 is (2047, 5). Bits, LSB-first, 11 per code:
    ///   code 0 = 1    -> bits 0..11  : 1 0000000000
    ///   code 1 = 1024 -> bits 11..22 : 0000000000 1   (bit 21)
    ///   code 2 = 2047 -> bits 22..33 : all ones       (bits 22..=32)
    ///   code 3 = 5    -> bits 33..44 : 1 0 1 ...      (bits 33, 35)
    /// byte 0 = bit 0            = 0x01
    /// byte 1 = nothing          = 0x00
    /// byte 2 = bits 21, 22, 23  = 0b1110_0000 = 0xE0
    /// byte 3 = bits 24..=31     = 0xFF
    /// byte 4 = bits 32, 33, 35  = 0b0000_1011 = 0x0B
    /// byte 5 = padding (bits 40..43 unused) = 0x00; 44 bits -> 6 bytes.
    #[test]
    fn packs_a_hand_worked_example_bit_for_bit() {
        let codes = RefCodes::new(2, vec![1, 2047, 1024, 5]).unwrap();
        let packed = pack_codes(&codes).unwrap();
        assert_eq!(packed, [0x01, 0x00, 0xE0, 0xFF, 0x0B, 0x00]);
        assert_eq!(unpack_codes(&packed, 2).unwrap(), codes);
    }

    /// K = 16, T = 1, every code 0x7FF except codebook 3 = 0: 22 bytes, all
    /// 0xFF except bits 33..44 (bytes 4 and 5 partially).
    #[test]
    fn sixteen_codebooks_pack_to_22_bytes_per_frame() {
        let mut frame = vec![2047u32; 16];
        frame[3] = 0;
        let codes = RefCodes::new(16, frame).unwrap();
        let packed = pack_codes(&codes).unwrap();
        assert_eq!(packed.len(), 22);
        let mut expected = [0xFFu8; 22];
        // Bits 33..=43 clear: byte 4 keeps bit 32 only, byte 5 keeps bits 44..47.
        expected[4] = 0x01;
        expected[5] = 0xF0;
        assert_eq!(packed, expected);
        assert_eq!(unpack_codes(&packed, 16).unwrap(), codes);
    }

    #[test]
    fn refuses_sizes_that_are_not_whole_frames_and_oversized_codes() {
        for len in [0, 1, 21, 23, 43, 45] {
            assert!(unpack_codes(&vec![0; len], 16).is_err(), "{len}");
        }
        assert_eq!(unpack_codes(&[0; 44], 16).unwrap().frames(), 2);
        // K = 2, T = 2 leaves 4 padding bits: they must be zero.
        assert!(unpack_codes(&[0, 0, 0, 0, 0, 0x10], 2).is_err());
        let too_big = RefCodes::new(1, vec![2048]).unwrap();
        assert!(pack_codes(&too_big).is_err());
    }
}
