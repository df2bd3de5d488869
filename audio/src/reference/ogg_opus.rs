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
//!   `opus::MAX_PACKET_BYTES`), and decoding stops before the clip would pass
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
//! The packets go to `opus.rs`, shared with Opus in WebM (`webm_opus.rs`,
//! Chrome's MediaRecorder default).

use std::io::Cursor;

use super::decoded::Decoded;
use super::opus::{damaged, parse_head, Packets, OPUS_RATE};
use super::ReferenceAudioError;

const FORMAT: &str = "OGG/Opus";

/// Whether `bytes` is an Ogg stream whose first page starts an `OpusHead`
/// packet; if so, where that page starts.
pub(super) fn opus_start(bytes: &[u8]) -> Option<usize> {
    let at = bytes.windows(4).position(|w| w == b"OggS")?;
    let segments = usize::from(*bytes.get(at + 26)?);
    let body = at + 27 + segments;
    (bytes.get(body..body + 8)? == b"OpusHead").then_some(at)
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
    let head = parse_head(&head_packet.data, "Ogg Opus")?;
    let mut packets = Packets::new(&head, max_secs, FORMAT)?;
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
        packets.push(&packet.data, index)?;
        let decoded = packets.decoded;
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
    let mut mono = packets.mono;
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
