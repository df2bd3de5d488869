//! WAV (RIFF WAVE, 16-bit PCM mono) as a stream: a 44-byte header, then
//! the samples. While streaming the length is unknown, so the header's two
//! size fields say 0xFFFFFFFF (the streaming convention ffmpeg, browsers
//! and most players accept by reading to the end); the exact header from
//! [`Encoder::exact_header`] replaces it when the whole output is held.

use super::{to_i16, EncodeError, Encoder, Format};

/// Size of the header [`wav_header`] writes.
pub const WAV_HEADER_LEN: usize = 44;

/// The 44-byte header of a 16-bit PCM mono WAV of `samples` samples at
/// `rate` Hz; `None`: the length is unknown (sizes 0xFFFFFFFF). A length
/// whose sizes do not fit in 32 bits also gets 0xFFFFFFFF (4 GiB is ~25 h
/// at 24 kHz, past any request this server answers).
pub fn wav_header(rate: u32, samples: Option<u64>) -> Vec<u8> {
    let data = samples
        .and_then(|n| u32::try_from(n * 2).ok())
        .filter(|d| *d <= u32::MAX - 36);
    let (riff, data) = match data {
        Some(d) => (d + 36, d),
        None => (u32::MAX, u32::MAX),
    };
    let mut h = Vec::with_capacity(WAV_HEADER_LEN);
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&riff.to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes()); // PCM
    h.extend_from_slice(&1u16.to_le_bytes()); // mono
    h.extend_from_slice(&rate.to_le_bytes());
    h.extend_from_slice(&(rate * 2).to_le_bytes()); // bytes per second
    h.extend_from_slice(&2u16.to_le_bytes()); // block align
    h.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data.to_le_bytes());
    h
}

pub(super) struct WavEncoder {
    rate: u32,
    samples: u64,
    header_sent: bool,
    finished: bool,
    scratch: Vec<i16>,
}

impl WavEncoder {
    pub(super) fn new(rate: u32) -> Self {
        WavEncoder {
            rate,
            samples: 0,
            header_sent: false,
            finished: false,
            scratch: Vec::new(),
        }
    }

    fn header_once(&mut self, out: &mut Vec<u8>) {
        if !self.header_sent {
            out.extend_from_slice(&wav_header(self.rate, None));
            self.header_sent = true;
        }
    }
}

impl Encoder for WavEncoder {
    fn format(&self) -> Format {
        Format::Wav
    }
    fn sample_rate(&self) -> u32 {
        self.rate
    }
    fn push(&mut self, samples: &[f32], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: Format::Wav,
            });
        }
        self.header_once(out);
        self.scratch.clear();
        to_i16(samples, &mut self.scratch);
        out.reserve(self.scratch.len() * 2);
        for s in &self.scratch {
            out.extend_from_slice(&s.to_le_bytes());
        }
        self.samples += samples.len() as u64;
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: Format::Wav,
            });
        }
        self.header_once(out);
        self.finished = true;
        Ok(())
    }
    fn exact_header(&self) -> Option<Vec<u8>> {
        Some(wav_header(self.rate, Some(self.samples)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_header_states_the_true_length() {
        let h = wav_header(24000, Some(1000));
        assert_eq!(h.len(), WAV_HEADER_LEN);
        assert_eq!(u32::from_le_bytes(h[4..8].try_into().unwrap()), 2036);
        assert_eq!(u32::from_le_bytes(h[40..44].try_into().unwrap()), 2000);
        let s = wav_header(24000, None);
        assert_eq!(u32::from_le_bytes(s[40..44].try_into().unwrap()), u32::MAX);
        // Only the two sizes differ between the streamed and exact headers.
        assert_eq!(h[8..40], s[8..40]);
    }

    #[test]
    fn an_empty_stream_is_a_valid_empty_wav() {
        let bytes = super::super::encode_all(Format::Wav, 8000, &[]).unwrap();
        assert_eq!(bytes.len(), WAV_HEADER_LEN);
        let r = hound::WavReader::new(std::io::Cursor::new(bytes)).unwrap();
        assert_eq!(r.len(), 0);
    }
}
