//! Opus in Ogg (RFC 7845): libopus through the `opus` crate, 20 ms frames
//! at the stream's rate (libopus takes 8/12/16/24/48 kHz directly, so the
//! model's 24 kHz needs no resampling), 64 kbit/s VBR, pages written by the
//! pure-Rust `ogg` crate.
//!
//! Stream layout: a page with `OpusHead` (pre-skip = the encoder's
//! look-ahead in 48 kHz samples, input rate), a page with `OpusTags`, then
//! audio pages. Each push ends a page after its last packet, so a page
//! leaves with every pushed chunk (one page per 20 ms would cost 28 bytes
//! of page header per packet, 11 kbit/s). Granule positions count 48 kHz
//! samples from the start, pre-skip included, as the RFC defines them; the
//! last page's granule is pre-skip + the true input length, so decoders
//! trim the final frame's padding and the output has the input's length.

use std::borrow::Cow;

use ogg::writing::{PacketWriteEndInfo, PacketWriter};

use super::{to_i16, EncodeError, Encoder, Format};

/// Ogg Opus timestamps are always at 48 kHz (RFC 7845 §4).
const GRANULE_RATE: u32 = 48_000;
/// 20 ms: Opus's default and best-tested frame.
const FRAME_MS: u32 = 20;
const BITRATE: i32 = 64_000;
/// The largest packet libopus can emit (RFC 6716 §3.4: 1275 bytes per
/// frame; 4000 is libopus's own recommended buffer).
const MAX_PACKET: usize = 4000;
/// Ogg stream serial number (one logical stream per file).
const SERIAL: u32 = 0x7474_7274;

pub(super) struct OpusEncoder {
    rate: u32,
    enc: opus::Encoder,
    /// Samples per frame at `rate`.
    frame: usize,
    /// 48 kHz samples per input sample.
    scale: u64,
    pre_skip: u16,
    pending: Vec<i16>,
    packet: Vec<u8>,
    ogg: PacketWriter<'static, Vec<u8>>,
    /// Input samples pushed.
    input: u64,
    /// 48 kHz samples the packets written so far decode to (pre-skip
    /// included): the granule position of the page that ends after them.
    granule: u64,
    header_sent: bool,
    finished: bool,
    scratch: Vec<i16>,
}

fn err(e: impl std::fmt::Display) -> EncodeError {
    EncodeError::codec(Format::Opus, e)
}

impl OpusEncoder {
    pub(super) fn new(rate: u32) -> Result<Self, EncodeError> {
        let mut enc = opus::Encoder::new(rate, opus::Channels::Mono, opus::Application::Audio)
            .map_err(err)?;
        enc.set_bitrate(opus::Bitrate::Bits(BITRATE)).map_err(err)?;
        let scale = u64::from(GRANULE_RATE / rate);
        let lookahead = enc.get_lookahead().map_err(err)?;
        let pre_skip = u16::try_from(lookahead as u64 * scale).map_err(err)?;
        Ok(OpusEncoder {
            rate,
            enc,
            frame: (rate * FRAME_MS / 1000) as usize,
            scale,
            pre_skip,
            pending: Vec::new(),
            packet: vec![0; MAX_PACKET],
            ogg: PacketWriter::new(Vec::new()),
            input: 0,
            granule: 0,
            header_sent: false,
            finished: false,
            scratch: Vec::new(),
        })
    }

    /// `OpusHead` (RFC 7845 §5.1): version 1, mono, pre-skip, input rate,
    /// gain 0, mapping family 0.
    fn opus_head(&self) -> Vec<u8> {
        let mut h = Vec::with_capacity(19);
        h.extend_from_slice(b"OpusHead");
        h.push(1);
        h.push(1);
        h.extend_from_slice(&self.pre_skip.to_le_bytes());
        h.extend_from_slice(&self.rate.to_le_bytes());
        h.extend_from_slice(&0i16.to_le_bytes());
        h.push(0);
        h
    }

    /// `OpusTags` (RFC 7845 §5.2): the vendor string, no comments.
    fn opus_tags() -> Vec<u8> {
        let vendor = format!("tts-rt {}", opus::version());
        let mut t = Vec::with_capacity(16 + vendor.len());
        t.extend_from_slice(b"OpusTags");
        t.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
        t.extend_from_slice(vendor.as_bytes());
        t.extend_from_slice(&0u32.to_le_bytes());
        t
    }

    fn headers_once(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if self.header_sent {
            return Ok(());
        }
        self.header_sent = true;
        let head = self.opus_head();
        self.ogg
            .write_packet(Cow::Owned(head), SERIAL, PacketWriteEndInfo::EndPage, 0)
            .map_err(err)?;
        self.ogg
            .write_packet(
                Cow::Owned(Self::opus_tags()),
                SERIAL,
                PacketWriteEndInfo::EndPage,
                0,
            )
            .map_err(err)?;
        self.drain(out);
        Ok(())
    }

    /// Encodes the first `frame` pending samples as one packet.
    fn packet(&mut self, end: PacketWriteEndInfo, granule: u64) -> Result<(), EncodeError> {
        let n = self
            .enc
            .encode(&self.pending[..self.frame], &mut self.packet)
            .map_err(err)?;
        self.pending.drain(..self.frame);
        self.ogg
            .write_packet(Cow::Owned(self.packet[..n].to_vec()), SERIAL, end, granule)
            .map_err(err)?;
        Ok(())
    }

    fn drain(&mut self, out: &mut Vec<u8>) {
        out.append(self.ogg.inner_mut());
    }

    fn check_open(&self) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: Format::Opus,
            });
        }
        Ok(())
    }

    fn frame_granule(&self) -> u64 {
        self.frame as u64 * self.scale
    }
}

impl Encoder for OpusEncoder {
    fn format(&self) -> Format {
        Format::Opus
    }
    fn sample_rate(&self) -> u32 {
        self.rate
    }
    fn push(&mut self, samples: &[f32], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check_open()?;
        self.headers_once(out)?;
        self.scratch.clear();
        to_i16(samples, &mut self.scratch);
        self.pending.extend_from_slice(&self.scratch);
        self.input += samples.len() as u64;
        while self.pending.len() >= self.frame {
            self.granule += self.frame_granule();
            let end = if self.pending.len() < 2 * self.frame {
                PacketWriteEndInfo::EndPage
            } else {
                PacketWriteEndInfo::NormalPacket
            };
            self.packet(end, self.granule)?;
        }
        self.drain(out);
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.check_open()?;
        self.headers_once(out)?;
        self.finished = true;
        // Pad with silence until the packets decode to pre-skip plus every
        // input sample (the look-ahead delays the last ones by pre-skip),
        // with at least one packet so the stream has an end.
        let step = self.frame_granule();
        let end_granule = u64::from(self.pre_skip) + self.input * self.scale;
        let written = self.granule / step;
        let packets = end_granule.div_ceil(step).max(written + 1) - written;
        self.pending.resize(packets as usize * self.frame, 0);
        for i in 0..packets {
            self.granule += step;
            if i + 1 == packets {
                // The last page's granule is the true end (RFC 7845 §4, end
                // trimming): decoders drop the padding after it.
                self.packet(PacketWriteEndInfo::EndStream, end_granule)?;
            } else {
                self.packet(PacketWriteEndInfo::NormalPacket, self.granule)?;
            }
        }
        self.drain(out);
        Ok(())
    }
}

/// Raw Opus packets, 20 ms each, no container: what an RTP/WebRTC or
/// telephony bridge carries (one packet per RTP payload, RFC 7587). The
/// same libopus settings as the Ogg stream; a receiver decodes each packet
/// to 20 ms. With no container to state the encoder's look-ahead, the
/// decoded stream is the input delayed by [`lookahead`](Self::lookahead)
/// samples; [`finish`](Self::finish) pads with silence until every input
/// sample has come out, so the packets decode to the input plus less than
/// one packet after the look-ahead.
pub struct OpusPacketEncoder {
    enc: opus::Encoder,
    rate: u32,
    frame: usize,
    lookahead: usize,
    pending: Vec<i16>,
    packet: Vec<u8>,
    /// Input samples pushed.
    input: u64,
    /// Packets emitted.
    packets: u64,
    finished: bool,
}

impl OpusPacketEncoder {
    /// An encoder for mono samples at `rate` (one of [`super::OPUS_RATES`]).
    pub fn new(rate: u32) -> Result<Self, EncodeError> {
        Format::Opus.check_rate(rate)?;
        let mut enc = opus::Encoder::new(rate, opus::Channels::Mono, opus::Application::Audio)
            .map_err(err)?;
        enc.set_bitrate(opus::Bitrate::Bits(BITRATE)).map_err(err)?;
        let lookahead = enc.get_lookahead().map_err(err)? as usize;
        Ok(OpusPacketEncoder {
            enc,
            rate,
            frame: (rate * FRAME_MS / 1000) as usize,
            lookahead,
            pending: Vec::new(),
            packet: vec![0; MAX_PACKET],
            input: 0,
            packets: 0,
            finished: false,
        })
    }

    pub fn sample_rate(&self) -> u32 {
        self.rate
    }

    /// Samples per packet (20 ms at the rate).
    pub fn frame_samples(&self) -> usize {
        self.frame
    }

    /// The encoder's look-ahead in samples at the rate: decoded sample
    /// `k + lookahead` is input sample `k`.
    pub fn lookahead(&self) -> usize {
        self.lookahead
    }

    fn encode_pending(&mut self, packets: &mut Vec<Vec<u8>>) -> Result<(), EncodeError> {
        while self.pending.len() >= self.frame {
            let n = self
                .enc
                .encode(&self.pending[..self.frame], &mut self.packet)
                .map_err(err)?;
            self.pending.drain(..self.frame);
            packets.push(self.packet[..n].to_vec());
            self.packets += 1;
        }
        Ok(())
    }

    /// Encodes `samples` and appends each packet completed (a 20 ms frame
    /// each; the remainder waits for the next push).
    pub fn push(&mut self, samples: &[f32], packets: &mut Vec<Vec<u8>>) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: Format::Opus,
            });
        }
        to_i16(samples, &mut self.pending);
        self.input += samples.len() as u64;
        self.encode_pending(packets)
    }

    /// Pads with silence so the last input sample leaves the look-ahead,
    /// and appends the last packets; pushing after this is an error.
    pub fn finish(&mut self, packets: &mut Vec<Vec<u8>>) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished {
                format: Format::Opus,
            });
        }
        self.finished = true;
        let frame = self.frame as u64;
        let total = (self.input + self.lookahead as u64).div_ceil(frame);
        let more = total.saturating_sub(self.packets) as usize * self.frame;
        let have = self.pending.len();
        self.pending.resize(more.max(have), 0);
        self.encode_pending(packets)
    }
}
