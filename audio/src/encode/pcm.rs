//! Raw 16-bit little-endian mono PCM: no header, no framing; the rate
//! travels beside it (HTTP `X-Sample-Rate`, the session settings).

use super::{to_i16, EncodeError, Encoder, Format};

pub(super) struct PcmEncoder {
    rate: u32,
    finished: bool,
    scratch: Vec<i16>,
}

impl PcmEncoder {
    pub(super) fn new(rate: u32) -> Self {
        PcmEncoder {
            rate,
            finished: false,
            scratch: Vec::new(),
        }
    }
}

impl Encoder for PcmEncoder {
    fn format(&self) -> Format {
        Format::Pcm
    }
    fn sample_rate(&self) -> u32 {
        self.rate
    }
    fn push(&mut self, samples: &[f32], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: Format::Pcm,
            });
        }
        self.scratch.clear();
        to_i16(samples, &mut self.scratch);
        out.reserve(self.scratch.len() * 2);
        for s in &self.scratch {
            out.extend_from_slice(&s.to_le_bytes());
        }
        Ok(())
    }
    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: Format::Pcm,
            });
        }
        self.finished = true;
        Ok(())
    }
}
