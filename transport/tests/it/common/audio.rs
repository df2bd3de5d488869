//! Decoding what the server sent, independently of its encoders: symphonia
//! for MP3, FLAC, ADTS AAC and Ogg (Opus pages read by the `ogg` crate and
//! decoded by libopus), and how well two signals line up.

use std::io::Cursor;

use anyhow::{anyhow, Context, Result};

/// Decodes a whole file with symphonia: mono samples and the rate.
pub fn symphonia_decode(bytes: &[u8], ext: &str) -> Result<(Vec<f32>, u32)> {
    use symphonia::core::audio::SampleBuffer;
    use symphonia::core::io::MediaSourceStream;
    let mss = MediaSourceStream::new(Box::new(Cursor::new(bytes.to_vec())), Default::default());
    let mut hint = symphonia::core::probe::Hint::new();
    hint.with_extension(ext);
    let probed = symphonia::default::get_probe()
        .format(&hint, mss, &Default::default(), &Default::default())
        .map_err(|e| anyhow!("{ext}: probe: {e}"))?;
    let mut format = probed.format;
    let track = format.default_track().context("no track")?.clone();
    let rate = track.codec_params.sample_rate.context("no rate")?;
    let mut dec = symphonia::default::get_codecs()
        .make(&track.codec_params, &Default::default())
        .map_err(|e| anyhow!("{ext}: decoder: {e}"))?;
    let mut out = Vec::new();
    loop {
        let packet = match format.next_packet() {
            Ok(p) => p,
            Err(symphonia::core::errors::Error::IoError(e))
                if e.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                break
            }
            Err(e) => return Err(anyhow!("{ext}: {e}")),
        };
        let buf = dec.decode(&packet).map_err(|e| anyhow!("{ext}: {e}"))?;
        let mut s = SampleBuffer::<f32>::new(buf.capacity() as u64, *buf.spec());
        s.copy_interleaved_ref(buf);
        out.extend_from_slice(s.samples());
    }
    Ok((out, rate))
}

/// Decodes raw Opus packets (20 ms each) with libopus at `rate`.
pub fn opus_packets_decode(packets: &[Vec<u8>], rate: u32) -> Result<Vec<f32>> {
    let mut dec = opus::Decoder::new(rate, opus::Channels::Mono)?;
    let mut out = Vec::new();
    let mut buf = vec![0f32; 5760];
    for p in packets {
        let n = dec.decode_float(p, &mut buf, false)?;
        out.extend_from_slice(&buf[..n]);
    }
    Ok(out)
}

/// Decodes an Ogg Opus stream as a player does: pre-skip dropped, the end
/// trimmed to the last page's granule (RFC 7845). At the OpusHead's rate.
pub fn ogg_opus_decode(bytes: &[u8]) -> Result<(Vec<f32>, u32)> {
    let mut r = ogg::PacketReader::new(Cursor::new(bytes.to_vec()));
    let head = r.read_packet_expected()?;
    anyhow::ensure!(&head.data[..8] == b"OpusHead", "no OpusHead");
    let pre_skip = u16::from_le_bytes([head.data[10], head.data[11]]) as u64;
    let rate = u32::from_le_bytes(head.data[12..16].try_into()?);
    let tags = r.read_packet_expected()?;
    anyhow::ensure!(&tags.data[..8] == b"OpusTags", "no OpusTags");
    let mut packets = Vec::new();
    let mut end = 0;
    while let Some(p) = r.read_packet()? {
        end = p.absgp_page();
        packets.push(p.data);
    }
    let decoded = opus_packets_decode(&packets, rate)?;
    let per48 = u64::from(48_000 / rate);
    let (from, to) = ((pre_skip / per48) as usize, (end / per48) as usize);
    anyhow::ensure!(
        from <= to && to <= decoded.len(),
        "granules {pre_skip}..{end} past the packets"
    );
    Ok((decoded[from..to].to_vec(), rate))
}

/// The lag (decoded sample `k + lag` is reference sample `k`) with the
/// highest correlation, for codecs whose delay no field states.
pub fn best_lag(reference: &[f32], decoded: &[f32], max_lag: usize) -> usize {
    let n = reference.len().min(decoded.len().saturating_sub(max_lag));
    (0..=max_lag)
        .max_by(|&a, &b| {
            let c = |lag: usize| -> f64 {
                (0..n)
                    .map(|k| reference[k] as f64 * decoded[k + lag] as f64)
                    .sum()
            };
            c(a).total_cmp(&c(b))
        })
        .unwrap_or(0)
}

/// Normalised correlation of the overlap of two signals (1: the same
/// waveform up to a gain).
pub fn correlation(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len().min(b.len());
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for k in 0..n {
        let (x, y) = (a[k] as f64, b[k] as f64);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa * bb).sqrt().max(1e-30)
}

/// 16-bit little-endian PCM bytes to samples.
pub fn pcm16(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 / 32768.0)
        .collect()
}
