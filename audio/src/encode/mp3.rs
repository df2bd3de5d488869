//! MP3 with LAME (through `mp3lame-encoder`, which builds LAME from its
//! bundled source): constant 64 kbit/s, mono, at the stream's rate (24 kHz
//! is MPEG-2 Layer III). No Xing/LAME tag: it would have to precede audio
//! that has already left, and a CBR stream's length follows from its size.
//! LAME emits a frame (576 samples at 24 kHz, 24 ms) once it has looked
//! ahead far enough, so bytes leave one or two frames behind the samples;
//! [`Encoder::finish`] flushes the rest. Decoders see LAME's usual leading
//! delay (~1105 samples) since no tag carries it.

use mp3lame_encoder::{Bitrate, Builder, FlushGap, Mode, MonoPcm, Quality};

use super::{to_i16, EncodeError, Encoder, Format};

/// 64 kbit/s: transparent for speech at 24 kHz mono and valid at every
/// MPEG rate (it is MPEG-2.5's highest, used at 8–12 kHz).
const BITRATE: Bitrate = Bitrate::Kbps64;

pub(super) struct Mp3Encoder {
    rate: u32,
    lame: mp3lame_encoder::Encoder,
    finished: bool,
    scratch: Vec<i16>,
}

fn err(e: impl std::fmt::Debug) -> EncodeError {
    EncodeError::codec(Format::Mp3, format!("{e:?}"))
}

impl Mp3Encoder {
    pub(super) fn new(rate: u32) -> Result<Self, EncodeError> {
        let mut b = Builder::new().ok_or_else(|| err("LAME could not allocate an encoder"))?;
        b.set_num_channels(1).map_err(err)?;
        b.set_sample_rate(rate).map_err(err)?;
        b.set_output_sample_rate(std::num::NonZeroU32::new(rate))
            .map_err(err)?;
        b.set_mode(Mode::Mono).map_err(err)?;
        b.set_brate(BITRATE).map_err(err)?;
        b.set_vbr_mode(mp3lame_encoder::VbrMode::Off).map_err(err)?;
        b.set_to_write_vbr_tag(false).map_err(err)?;
        // LAME's -q 2 ("near best"): ~2× the cost of the default -q 5 and
        // still ~100× faster than real time for one 24 kHz stream.
        b.set_quality(Quality::NearBest).map_err(err)?;
        Ok(Mp3Encoder {
            rate,
            lame: b.build().map_err(err)?,
            finished: false,
            scratch: Vec::new(),
        })
    }

    fn check_open(&self) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: Format::Mp3,
            });
        }
        Ok(())
    }
}

impl Encoder for Mp3Encoder {
    fn format(&self) -> Format {
        Format::Mp3
    }
    fn sample_rate(&self) -> u32 {
        self.rate
    }
    fn push(&mut self, samples: &[f32], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check_open()?;
        self.scratch.clear();
        to_i16(samples, &mut self.scratch);
        // LAME's input is an int count: feed long pushes in pieces.
        for piece in self.scratch.chunks(1 << 16) {
            out.reserve(mp3lame_encoder::max_required_buffer_size(piece.len()));
            self.lame.encode_to_vec(MonoPcm(piece), out).map_err(err)?;
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check_open()?;
        self.finished = true;
        // The flush writes at most one frame plus the look-ahead's frames
        // (LAME documents 7200 bytes as enough).
        out.reserve(7200);
        self.lame.flush_to_vec::<FlushGap>(out).map_err(err)?;
        Ok(())
    }
}
