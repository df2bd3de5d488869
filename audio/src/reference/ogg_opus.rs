//! Ogg Opus (RFC 7845), what phones and browsers record (MediaRecorder's
//! `audio/ogg;codecs=opus`): symphonia 0.5 has no Opus decoder, so the
//! pages are demuxed here and each packet decoded with libopus, at 48 kHz.
//!
//! - The first packet is the `OpusHead`: version 0 (any minor version),
//!   1 or 2 channels with channel mapping family 0 (the only layout a
//!   recorder writes; surround mappings are refused by name), the pre-skip
//!   and the output gain (applied by the decoder). The input rate it states
//!   is informational: Opus always decodes at 48 kHz here, and the clip
//!   goes through the same resampling to 24 kHz as every other.
//! - The second is `OpusTags` (already bounded by the container checks,
//!   `preflight/ogg.rs`), skipped.
//! - Every later packet of that stream is audio: its frame count is read
//!   from its TOC before decoding (at most 120 ms, 5,760 samples; at most
//!   [`MAX_PACKET_BYTES`]), and decoding stops before the clip would pass
//!   the length cap. The first `pre-skip` samples are dropped, and the end
//!   is trimmed to the last page's granule position (RFC 7845 §4.4; a
//!   stream whose first granule position is not 0, cut from a longer one,
//!   counts from where it starts).
//! - A stream without its end-of-stream page (cut off at a page boundary)
//!   or that decodes to less than its last granule position says is
//!   truncated; a page the Ogg reader cannot parse (cut inside a page, a bad
//!   checksum) or a packet libopus refuses is damaged. Each is a clean
//!   refusal naming the packet, never a panic (and the caller's
//!   `catch_unwind` stands behind this too).
//!
//! Out of scope: Opus in WebM/Matroska (Chrome's MediaRecorder default,
//! `audio/webm;codecs=opus`) is a different container and is refused as an
//! unsupported format, as before.

use std::io::Cursor;

use super::decoded::{mean, Decoded};
use super::{check_channels, ReferenceAudioError};

/// Opus always decodes at this rate here.
const OPUS_RATE: u32 = 48_000;

/// The most samples (per channel) one Opus packet holds: 120 ms at 48 kHz.
const MAX_PACKET_FRAMES: usize = 5_760;

/// The largest Opus packet: 48 frames of at most 1,275 bytes plus the TOC
/// and frame lengths (RFC 6716 §3.2.5). Anything longer is not Opus.
const MAX_PACKET_BYTES: usize = 48 * 1_275 + 2 * 48 + 2;

const FORMAT: &str = "OGG/Opus";

/// Whether `bytes` is an Ogg stream whose first page starts an `OpusHead`
/// packet; if so, where that page starts.
pub(super) fn opus_start(bytes: &[u8]) -> Option<usize> {
    let at = bytes.windows(4).position(|w| w == b"OggS")?;
    let segments = usize::from(*bytes.get(at + 26)?);
    let body = at + 27 + segments;
    (bytes.get(body..body + 8)? == b"OpusHead").then_some(at)
}

fn damaged(detail: String) -> ReferenceAudioError {
    ReferenceAudioError::Corrupt { detail }
}

/// The fields of an `OpusHead` packet this decoder uses.
struct Head {
    channels: u8,
    pre_skip: u64,
    gain: i16,
}

fn parse_head(p: &[u8]) -> Result<Head, ReferenceAudioError> {
    if p.len() < 19 || &p[..8] != b"OpusHead" {
        return Err(damaged(format!(
            "its Opus identification header is {} bytes, under the 19 it needs",
            p.len()
        )));
    }
    // Major version 0; minor versions are compatible (RFC 7845 §5.1).
    if p[8] >> 4 != 0 {
        return Err(ReferenceAudioError::Unsupported {
            what: format!("Ogg Opus header version {}", p[8]),
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
                "Ogg Opus with {channels} channels in channel mapping family {family} \
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

/// Decodes an Ogg Opus file that starts (its first page) at `start`, mixing
/// to mono at 48 kHz. Stops with [`TooLong`](ReferenceAudioError::TooLong)
/// before passing `max_secs`.
pub(super) fn decode(
    bytes: &[u8],
    start: usize,
    max_secs: f64,
) -> Result<Decoded, ReferenceAudioError> {
    let ogg_error = |packet: u64, e: ogg::OggReadError| {
        damaged(format!("reading Ogg page for packet {packet}: {e}"))
    };
    let mut reader = ogg::PacketReader::new(Cursor::new(&bytes[start..]));
    let head_packet = reader
        .read_packet()
        .map_err(|e| ogg_error(0, e))?
        .ok_or_else(|| damaged("the Ogg stream has no packets".into()))?;
    let serial = head_packet.stream_serial();
    let head = parse_head(&head_packet.data)?;
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
    let max_frames = (max_secs * f64::from(OPUS_RATE)) as u64;
    let mut pcm = vec![0f32; MAX_PACKET_FRAMES * channels];
    let mut mono: Vec<f32> = Vec::new();
    // Frames decoded, including the pre-skip still to drop.
    let mut decoded: u64 = 0;
    let mut index: u64 = 0;
    let mut last_granule: Option<u64> = None;
    // The granule position the stream starts at (0 unless it was cut from
    // a longer one): the first audio page's, less what decoded up to it.
    let mut start_granule: Option<u64> = None;
    let mut ended = false;
    while let Some(packet) = reader.read_packet().map_err(|e| ogg_error(index + 1, e))? {
        if packet.stream_serial() != serial {
            continue;
        }
        index += 1;
        if index == 1 {
            if !packet.data.starts_with(b"OpusTags") {
                return Err(damaged(
                    "its second packet is not the Opus comment header (OpusTags)".into(),
                ));
            }
            continue;
        }
        let data = &packet.data;
        if data.len() > MAX_PACKET_BYTES {
            return Err(ReferenceAudioError::BadField {
                format: FORMAT,
                field: format!("packet {index}'s size"),
                value: data.len() as u64,
                expected: format!("past the {MAX_PACKET_BYTES} bytes an Opus packet can hold"),
            });
        }
        if !data.is_empty() {
            let n = opus::packet::get_nb_samples(data, OPUS_RATE)
                .map_err(|e| damaged(format!("Opus packet {index} is malformed: {e}")))?;
            if n > MAX_PACKET_FRAMES {
                return Err(ReferenceAudioError::BadField {
                    format: FORMAT,
                    field: format!("packet {index}'s duration"),
                    value: n as u64,
                    expected: format!("past the {MAX_PACKET_FRAMES} samples (120 ms) Opus allows"),
                });
            }
            let kept_after = (decoded + n as u64).saturating_sub(head.pre_skip);
            if kept_after > max_frames {
                return Err(ReferenceAudioError::TooLong {
                    secs: kept_after as f64 / f64::from(OPUS_RATE),
                    max: max_secs,
                });
            }
            let got = decoder
                .decode_float(data, &mut pcm, false)
                .map_err(|e| damaged(format!("Opus packet {index} could not be decoded: {e}")))?;
            for (i, frame) in pcm[..got * channels].chunks_exact(channels).enumerate() {
                if decoded + (i as u64) < head.pre_skip {
                    continue;
                }
                if let Some(bad) = frame.iter().find(|s| !s.is_finite()) {
                    return Err(damaged(format!(
                        "Opus packet {index} decoded to {bad}, not a finite number"
                    )));
                }
                mono.push(mean(frame));
            }
            decoded += got as u64;
        }
        if packet.last_in_page() {
            let g = packet.absgp_page();
            start_granule.get_or_insert(g.saturating_sub(decoded));
            last_granule = Some(g);
        }
        if packet.last_in_stream() {
            ended = true;
            break;
        }
    }
    if index < 1 {
        return Err(damaged(
            "the Ogg stream ends after its Opus identification header".into(),
        ));
    }
    if !ended {
        return Err(damaged(format!(
            "the last OGG page (end of stream) is missing or cut off after {:.3} s of audio; \
             the file is truncated",
            mono.len() as f64 / f64::from(OPUS_RATE)
        )));
    }
    // The last granule position counts the pre-skip: the clip's length is
    // what it says less the pre-skip; the decoder's excess is the padding of
    // the last packet.
    if let Some(g) = last_granule.filter(|&g| g != u64::MAX) {
        let declared = g
            .saturating_sub(start_granule.unwrap_or(0))
            .saturating_sub(head.pre_skip);
        if (mono.len() as u64) < declared {
            return Err(damaged(format!(
                "the stream ends after {} of the {declared} samples its last page declares; \
                 the file is truncated",
                mono.len()
            )));
        }
        mono.truncate(declared as usize);
    }
    Ok(Decoded {
        mono,
        rate: OPUS_RATE,
        channels: u16::from(head.channels),
        format: FORMAT,
    })
}
