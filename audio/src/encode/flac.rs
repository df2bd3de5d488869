//! FLAC (16-bit mono, lossless) with the pure-Rust `flacenc` crate, one
//! fixed-size block at a time: `fLaC` and a STREAMINFO whose total length
//! and MD5 say "unknown" (both 0, which the format allows for streams) go
//! out first, then each block as soon as it is full; [`finish`] encodes the
//! short last block. [`exact_header`] is the same STREAMINFO with the total
//! samples, MD5 and frame sizes filled in, for a caller that holds the
//! whole output.
//!
//! [`finish`]: Encoder::finish
//! [`exact_header`]: Encoder::exact_header

use flacenc::bitsink::ByteSink;
use flacenc::component::{BitRepr, Stream, StreamInfo};
use flacenc::error::Verify;
use flacenc::source::{Context, Fill, FrameBuf};

use super::{to_i16, EncodeError, Encoder, Format};

/// Samples per block: 2048 at 24 kHz is 85 ms, about one codec frame of
/// the model (80 ms), so a block leaves with each decoded chunk; longer
/// blocks compress ~1% better and add their length to the latency.
const BLOCK: usize = 2048;
const BITS: usize = 16;

pub(super) struct FlacEncoder {
    rate: u32,
    config: flacenc::error::Verified<flacenc::config::Encoder>,
    info: StreamInfo,
    fb: FrameBuf,
    ctx: Context,
    pending: Vec<i32>,
    header_sent: bool,
    finished: bool,
    scratch: Vec<i16>,
}

fn err(e: impl std::fmt::Debug) -> EncodeError {
    EncodeError::codec(Format::Flac, format!("{e:?}"))
}

impl FlacEncoder {
    pub(super) fn new(rate: u32) -> Result<Self, EncodeError> {
        let config = flacenc::config::Encoder::default()
            .into_verified()
            .map_err(|(_, e)| err(e))?;
        let mut info = StreamInfo::new(rate as usize, 1, BITS).map_err(err)?;
        info.set_block_sizes(BLOCK, BLOCK).map_err(err)?;
        info.set_frame_sizes(0, 0).map_err(err)?;
        Ok(FlacEncoder {
            rate,
            config,
            info,
            fb: FrameBuf::with_size(1, BLOCK).map_err(err)?,
            ctx: Context::new(BITS, 1),
            pending: Vec::with_capacity(BLOCK),
            header_sent: false,
            finished: false,
            scratch: Vec::new(),
        })
    }

    fn header(info: &StreamInfo) -> Result<Vec<u8>, EncodeError> {
        let mut sink = ByteSink::new();
        Stream::with_stream_info(info.clone())
            .write(&mut sink)
            .map_err(err)?;
        Ok(sink.into_inner())
    }

    fn header_once(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if !self.header_sent {
            out.extend_from_slice(&Self::header(&self.info)?);
            self.header_sent = true;
        }
        Ok(())
    }

    /// Encodes `pending` (at most one block) as the next frame.
    fn block(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        (&mut self.fb, &mut self.ctx)
            .fill_interleaved(&self.pending)
            .map_err(err)?;
        self.pending.clear();
        let n = self.ctx.current_frame_number().unwrap_or(0);
        let frame =
            flacenc::encode_fixed_size_frame(&self.config, &self.fb, n, &self.info).map_err(err)?;
        // Frame sizes and total samples for the exact header; the streamed
        // header already left with them unknown.
        self.info.update_frame_info(&frame);
        let mut sink = ByteSink::new();
        frame.write(&mut sink).map_err(err)?;
        out.extend_from_slice(sink.as_slice());
        Ok(())
    }

    fn check_open(&self) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: Format::Flac,
            });
        }
        Ok(())
    }
}

impl Encoder for FlacEncoder {
    fn format(&self) -> Format {
        Format::Flac
    }
    fn sample_rate(&self) -> u32 {
        self.rate
    }
    fn push(&mut self, samples: &[f32], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check_open()?;
        self.header_once(out)?;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        to_i16(samples, &mut scratch);
        let mut result = Ok(());
        let mut i = 0;
        while i < scratch.len() {
            let take = (BLOCK - self.pending.len()).min(scratch.len() - i);
            self.pending
                .extend(scratch[i..i + take].iter().map(|&s| s as i32));
            i += take;
            if self.pending.len() == BLOCK {
                result = self.block(out);
                if result.is_err() {
                    break;
                }
            }
        }
        self.scratch = scratch;
        result
    }
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check_open()?;
        self.header_once(out)?;
        self.block(out)?;
        self.finished = true;
        Ok(())
    }
    fn exact_header(&self) -> Option<Vec<u8>> {
        let mut info = self.info.clone();
        info.set_md5_digest(&self.ctx.md5_digest());
        info.set_total_samples(self.ctx.total_samples());
        // Fixed blocking is min == max: the short last block must not pull
        // the minimum down (decoders would read the stream as variable-size
        // blocks and reject its frame-numbered headers, as symphonia does).
        info.set_block_sizes(BLOCK, BLOCK).ok()?;
        if self.ctx.total_samples() == 0 {
            // No frame: the min/max frame sizes stay "unknown".
            info.set_frame_sizes(0, 0).ok()?;
        }
        Self::header(&info).ok()
    }
}
