//! Opus packets to mono samples at 48 kHz with libopus, for both
//! containers that carry Opus here: Ogg (`ogg_opus.rs`, RFC 7845) and
//! WebM/Matroska (`webm_opus.rs`). symphonia 0.5 has no Opus decoder.
//!
//! The identification header (`OpusHead`, RFC 7845 §5.1) is the same in
//! both: Ogg's first packet, Matroska's `CodecPrivate`. Each packet's frame
//! count is read from its TOC before decoding (at most 120 ms, 5,760
//! samples; at most [`MAX_PACKET_BYTES`]), decoding stops before the clip
//! would pass the length cap, and the first `pre-skip` samples are dropped.

use super::decoded::mean;
use super::{check_channels, ReferenceAudioError};

/// Opus always decodes at this rate here.
pub(super) const OPUS_RATE: u32 = 48_000;

/// The most samples (per channel) one Opus packet holds: 120 ms at 48 kHz.
const MAX_PACKET_FRAMES: usize = 5_760;

/// The largest Opus packet: 48 frames of at most 1,275 bytes plus the TOC
/// and frame lengths (RFC 6716 §3.2.5). Anything longer is not Opus.
pub(super) const MAX_PACKET_BYTES: usize = 48 * 1_275 + 2 * 48 + 2;

pub(super) fn damaged(detail: String) -> ReferenceAudioError {
    ReferenceAudioError::Corrupt { detail }
}

/// The fields of an `OpusHead` this decoder uses.
pub(super) struct Head {
    pub channels: u8,
    pub pre_skip: u64,
    gain: i16,
}

/// Parses an `OpusHead`; `format` names the container in refusals.
pub(super) fn parse_head(p: &[u8], format: &'static str) -> Result<Head, ReferenceAudioError> {
    if p.len() < 19 || &p[..8] != b"OpusHead" {
        return Err(damaged(format!(
            "its Opus identification header is {} bytes, under the 19 it needs",
            p.len()
        )));
    }
    // Major version 0; minor versions are compatible (RFC 7845 §5.1).
    if p[8] >> 4 != 0 {
        return Err(ReferenceAudioError::Unsupported {
            what: format!("{format} header version {}", p[8]),
        });
    }
    let channels = p[9];
    let pre_skip = u64::from(u16::from_le_bytes([p[10], p[11]]));
    let gain = i16::from_le_bytes([p[16], p[17]]);
    let family = p[18];
    check_channels(u16::from(channels))?;
    if family != 0 || channels > 2 {
        return Err(ReferenceAudioError::Unsupported {
            what: format!(
                "{format} with {channels} channels in channel mapping family {family} \
                 (only mono and stereo, family 0, are read)"
            ),
        });
    }
    Ok(Head {
        channels,
        pre_skip,
        gain,
    })
}

/// A libopus decoder fed one packet at a time, mixing to mono.
pub(super) struct Packets {
    decoder: opus::Decoder,
    channels: usize,
    pre_skip: u64,
    max_frames: u64,
    max_secs: f64,
    format: &'static str,
    pcm: Vec<f32>,
    /// The clip so far, the pre-skip dropped.
    pub mono: Vec<f32>,
    /// Frames decoded, including the pre-skip.
    pub decoded: u64,
}

impl Packets {
    pub(super) fn new(
        head: &Head,
        max_secs: f64,
        format: &'static str,
    ) -> Result<Self, ReferenceAudioError> {
        let channels = usize::from(head.channels);
        let opus_channels = if channels == 1 {
            opus::Channels::Mono
        } else {
            opus::Channels::Stereo
        };
        let mut decoder = opus::Decoder::new(OPUS_RATE, opus_channels).map_err(|e| {
            ReferenceAudioError::Unsupported {
                what: format!("an Opus decoder: {e}"),
            }
        })?;
        if head.gain != 0 {
            decoder
                .set_gain(i32::from(head.gain))
                .map_err(|e| damaged(format!("its output gain {} is refused: {e}", head.gain)))?;
        }
        Ok(Packets {
            decoder,
            channels,
            pre_skip: head.pre_skip,
            max_frames: (max_secs * f64::from(OPUS_RATE)) as u64,
            max_secs,
            format,
            pcm: vec![0f32; MAX_PACKET_FRAMES * channels],
            mono: Vec::new(),
            decoded: 0,
        })
    }

    /// Decodes packet number `index` (for messages); an empty packet is
    /// nothing (a DTX gap).
    pub(super) fn push(&mut self, data: &[u8], index: u64) -> Result<(), ReferenceAudioError> {
        if data.len() > MAX_PACKET_BYTES {
            return Err(ReferenceAudioError::BadField {
                format: self.format,
                field: format!("packet {index}'s size"),
                value: data.len() as u64,
                expected: format!("past the {MAX_PACKET_BYTES} bytes an Opus packet can hold"),
            });
        }
        if data.is_empty() {
            return Ok(());
        }
        let n = opus::packet::get_nb_samples(data, OPUS_RATE)
            .map_err(|e| damaged(format!("Opus packet {index} is malformed: {e}")))?;
        if n > MAX_PACKET_FRAMES {
            return Err(ReferenceAudioError::BadField {
                format: self.format,
                field: format!("packet {index}'s duration"),
                value: n as u64,
                expected: format!("past the {MAX_PACKET_FRAMES} samples (120 ms) Opus allows"),
            });
        }
        let kept_after = (self.decoded + n as u64).saturating_sub(self.pre_skip);
        if kept_after > self.max_frames {
            return Err(ReferenceAudioError::TooLong {
                secs: kept_after as f64 / f64::from(OPUS_RATE),
                max: self.max_secs,
            });
        }
        let got = self
            .decoder
            .decode_float(data, &mut self.pcm, false)
            .map_err(|e| damaged(format!("Opus packet {index} could not be decoded: {e}")))?;
        let c = self.channels;
        for (i, frame) in self.pcm[..got * c].chunks_exact(c).enumerate() {
            if self.decoded + (i as u64) < self.pre_skip {
                continue;
            }
            if let Some(bad) = frame.iter().find(|s| !s.is_finite()) {
                return Err(damaged(format!(
                    "Opus packet {index} decoded to {bad}, not a finite number"
                )));
            }
            self.mono.push(mean(frame));
        }
        self.decoded += got as u64;
        Ok(())
    }
}
