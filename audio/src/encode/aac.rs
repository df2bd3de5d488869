//! AAC-LC in ADTS frames with Fraunhofer FDK AAC (through the `fdk-aac`
//! crate, which builds the library from its bundled source): mono, at the
//! stream's rate, constant bit rate (64 kbit/s, less where the rate caps
//! it).
//!
//! ADTS is AAC's self-synchronising stream: every 1024-sample frame has
//! its own 7-byte header (rate, channels, frame length), so a stream can be
//! played from any frame and needs nothing at its start — exactly what a
//! body that leaves as it is encoded needs. The cost: no container field
//! states the encoder's delay or the last frame's padding, so decoders play
//! `delay` samples of near-silence first and up to one frame of silence at
//! the end (what ffmpeg's `-f adts` and every ADTS stream do).
//!
//! FDK encodes a frame once it holds 1024 input samples, so bytes leave
//! one frame (~43 ms at 24 kHz) behind the samples. The `fdk-aac` crate
//! offers no end-of-stream flush (FDK's `numInSamples = -1`), so
//! [`Encoder::finish`] pushes silence until every input sample has come
//! out of the encoder's delay line: the decoded stream is the input,
//! delayed by the encoder's delay, plus less than one frame of silence.

use fdk_aac::enc::{AudioObjectType, BitRate, ChannelMode, EncoderParams, Transport};

use super::{to_i16, EncodeError, Encoder, Format};

/// 64 kbit/s: the MP3 and Opus rate, transparent for speech at 24 kHz mono.
const BITRATE: u32 = 64_000;
/// AAC-LC frame: 1024 samples per channel (ISO/IEC 14496-3).
const FRAME: usize = 1024;

pub(super) struct AacEncoder {
    rate: u32,
    enc: fdk_aac::enc::Encoder,
    /// Codec delay in samples (`nDelay`): output sample `k + delay` is
    /// input sample `k`.
    delay: u64,
    /// Input samples pushed.
    input: u64,
    /// Samples given to FDK (input plus the end's silence).
    fed: u64,
    buf: Vec<u8>,
    finished: bool,
    scratch: Vec<i16>,
}

fn err(e: impl std::fmt::Display) -> EncodeError {
    EncodeError::codec(Format::Aac, e)
}

/// The highest constant bit rate FDK accepts for one channel at `rate`:
/// an AAC-LC frame holds at most 6144 bits per channel (ISO/IEC 14496-3,
/// 4.5.3.1), i.e. 6 bits per sample; below 10.7 kHz that is under 64 kbit/s.
fn bitrate(rate: u32) -> u32 {
    BITRATE.min(rate * 6144 / FRAME as u32 * 9 / 10)
}

impl AacEncoder {
    pub(super) fn new(rate: u32) -> Result<Self, EncodeError> {
        let enc = fdk_aac::enc::Encoder::new(EncoderParams {
            bit_rate: BitRate::Cbr(bitrate(rate)),
            sample_rate: rate,
            transport: Transport::Adts,
            channels: ChannelMode::Mono,
            audio_object_type: AudioObjectType::Mpeg4LowComplexity,
        })
        .map_err(err)?;
        let info = enc.info().map_err(err)?;
        let out_max = (info.maxOutBufBytes as usize).max(8192);
        Ok(AacEncoder {
            rate,
            enc,
            delay: u64::from(info.nDelay),
            input: 0,
            fed: 0,
            buf: vec![0; out_max],
            finished: false,
            scratch: Vec::new(),
        })
    }

    /// Gives `pcm` to FDK and appends every frame it completes. FDK takes
    /// at most what fits in its one-frame input buffer per call and emits
    /// at most one frame, so the call repeats until both stop.
    fn feed(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let mut pos = 0;
        loop {
            let info = self.enc.encode(&pcm[pos..], &mut self.buf).map_err(err)?;
            pos += info.input_consumed;
            out.extend_from_slice(&self.buf[..info.output_size]);
            if info.input_consumed == 0 && info.output_size == 0 {
                break;
            }
        }
        if pos != pcm.len() {
            return Err(err(format!(
                "the encoder took {pos} of {} samples",
                pcm.len()
            )));
        }
        self.fed += pcm.len() as u64;
        Ok(())
    }

    fn check_open(&self) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: Format::Aac,
            });
        }
        Ok(())
    }

    /// The codec delay in samples (what a decoder plays before the first
    /// input sample).
    #[cfg(test)]
    pub(super) fn delay(&self) -> u64 {
        self.delay
    }
}

impl Encoder for AacEncoder {
    fn format(&self) -> Format {
        Format::Aac
    }
    fn sample_rate(&self) -> u32 {
        self.rate
    }
    fn push(&mut self, samples: &[f32], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check_open()?;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        to_i16(samples, &mut scratch);
        let r = self.feed(&scratch, out);
        self.scratch = scratch;
        self.input += samples.len() as u64;
        r
    }
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check_open()?;
        self.finished = true;
        // Frames out = samples fed / 1024; the last input sample leaves in
        // output sample `input + delay - 1`. Feed silence up to the frame
        // that holds it (at least one frame, so an empty stream has one).
        let frame = FRAME as u64;
        let frames = (self.input + self.delay).div_ceil(frame).max(1);
        let pad = (frames * frame).saturating_sub(self.fed) as usize;
        self.feed(&vec![0; pad], out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_aac_rate_opens_and_the_delay_is_known() {
        for rate in super::super::AAC_RATES {
            let e = AacEncoder::new(rate).unwrap_or_else(|e| panic!("{rate}: {e}"));
            assert!(
                (1..=4 * FRAME as u64).contains(&e.delay()),
                "{rate}: {}",
                e.delay()
            );
        }
    }

    #[test]
    fn frames_are_adts_and_the_end_covers_the_delay() {
        let mut e = AacEncoder::new(24_000).unwrap();
        let mut out = Vec::new();
        e.push(&[0.25; 5000], &mut out).unwrap();
        e.finish(&mut out).unwrap();
        // Walk the ADTS frames: sync word, 13-bit frame length.
        let (mut pos, mut frames) = (0, 0u64);
        while pos < out.len() {
            assert_eq!(out[pos], 0xFF);
            assert_eq!(out[pos + 1] & 0xF6, 0xF0, "ADTS sync, layer 0");
            let len = ((out[pos + 3] as usize & 3) << 11)
                | ((out[pos + 4] as usize) << 3)
                | (out[pos + 5] as usize >> 5);
            pos += len;
            frames += 1;
        }
        assert_eq!(pos, out.len(), "whole frames");
        assert_eq!(frames, (5000 + e.delay()).div_ceil(1024));
    }
}
