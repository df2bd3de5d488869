//! Every output format decodes back to the PCM it was given, streamed in
//! chunks of awkward sizes: FLAC and WAV bit-exactly (after 16-bit
//! rounding), G.711, MP3, Opus and AAC within a stated SNR (the figures in
//! docs/architecture.md "Audio formats"). Decoders: symphonia for WAV, FLAC,
//! MP3 and ADTS AAC (independent of the encoders), libopus's own decoder over Ogg
//! pages read by the `ogg` crate for Opus, the G.711 tables for μ/A-law.

use std::io::Cursor;

use tts_audio::encode::{alaw_to_linear, ulaw_to_linear};
use tts_audio::{encode_all, f32_to_i16, Format};

const RATE: u32 = 24_000;

/// 1.5 s of a voiced-speech-like signal: a 140 Hz glottal fundamental with
/// 12 falling harmonics, a slow vibrato and a syllable-rate envelope, peak
/// ~0.6 of full scale.
fn speechlike(rate: u32, seconds: f32) -> Vec<f32> {
    let n = (rate as f32 * seconds) as usize;
    let mut phase = 0.0f64;
    (0..n)
        .map(|i| {
            let t = i as f64 / rate as f64;
            let f0 = 140.0 * (1.0 + 0.05 * (2.0 * std::f64::consts::PI * 5.0 * t).sin());
            phase += 2.0 * std::f64::consts::PI * f0 / rate as f64;
            let env = 0.5 - 0.5 * (2.0 * std::f64::consts::PI * 4.0 * t).cos();
            let s: f64 = (1..=12).map(|h| (h as f64 * phase).sin() / h as f64).sum();
            (0.25 * env * s) as f32
        })
        .collect()
}

/// The signal as a 16-bit stream carries it.
fn quantized(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&s| f32_to_i16(s) as f32 / 32767.0).collect()
}

fn snr_db(reference: &[f32], decoded: &[f32]) -> f64 {
    let n = reference.len().min(decoded.len());
    let sig: f64 = reference[..n].iter().map(|&s| (s as f64).powi(2)).sum();
    let err: f64 = reference[..n]
        .iter()
        .zip(&decoded[..n])
        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
        .sum();
    10.0 * (sig / err.max(1e-30)).log10()
}

/// The lag (decoded sample `k + lag` is input sample `k`) with the best
/// correlation, for codecs whose delay no container field states.
fn best_lag(reference: &[f32], decoded: &[f32], max_lag: usize) -> usize {
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
        .unwrap()
}

/// Pushes `x` in `chunk`-sized pieces and finishes, returning every byte
/// and the exact header (if the format has one).
fn streamed(format: Format, rate: u32, x: &[f32], chunk: usize) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut enc = format.encoder(rate).unwrap();
    let mut out = Vec::new();
    for c in x.chunks(chunk.max(1)) {
        enc.push(c, &mut out).unwrap();
    }
    enc.finish(&mut out).unwrap();
    (out, enc.exact_header())
}

/// Decodes a file with symphonia (mono), returning the samples and the
/// length the container declares.
fn symphonia_decode(bytes: Vec<u8>, ext: &str) -> (Vec<f32>, u32, Option<u64>) {
    use symphonia::core::audio::SampleBuffer;
    use symphonia::core::io::MediaSourceStream;
    let mss = MediaSourceStream::new(Box::new(Cursor::new(bytes)), Default::default());
    let mut hint = symphonia::core::probe::Hint::new();
    hint.with_extension(ext);
    let probed = symphonia::default::get_probe()
        .format(&hint, mss, &Default::default(), &Default::default())
        .unwrap();
    let mut format = probed.format;
    let track = format.default_track().unwrap().clone();
    let declared = track.codec_params.n_frames;
    let rate = track.codec_params.sample_rate.unwrap();
    let mut dec = symphonia::default::get_codecs()
        .make(&track.codec_params, &Default::default())
        .unwrap();
    let mut out = Vec::new();
    loop {
        let packet = match format.next_packet() {
            Ok(p) => p,
            Err(symphonia::core::errors::Error::IoError(e))
                if e.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                break
            }
            Err(e) => panic!("{ext}: {e}"),
        };
        let buf = dec.decode(&packet).unwrap();
        let mut s = SampleBuffer::<f32>::new(buf.capacity() as u64, *buf.spec());
        s.copy_interleaved_ref(buf);
        out.extend_from_slice(s.samples());
    }
    (out, rate, declared)
}

/// Chunk sizes of the streaming tests: one sample, a prime, one model
/// frame (80 ms), everything at once.
const CHUNKS: [usize; 4] = [1, 997, 1920, usize::MAX];

#[test]
fn wav_streamed_decodes_bit_exactly_and_the_exact_header_states_the_length() {
    let x = speechlike(RATE, 1.5);
    let whole = encode_all(Format::Wav, RATE, &x).unwrap();
    for chunk in CHUNKS {
        let (mut bytes, header) = streamed(Format::Wav, RATE, &x, chunk);
        // Streamed: sizes unknown.
        assert_eq!(&bytes[40..44], &u32::MAX.to_le_bytes());
        let h = header.unwrap();
        bytes[..h.len()].copy_from_slice(&h);
        assert_eq!(bytes, whole, "chunk {chunk}");
    }
    let r = hound::WavReader::new(Cursor::new(whole.clone())).unwrap();
    assert_eq!(r.duration() as usize, x.len());
    let (decoded, rate, declared) = symphonia_decode(whole, "wav");
    assert_eq!((rate, declared), (RATE, Some(x.len() as u64)));
    let q = quantized(&x);
    assert_eq!(decoded.len(), x.len());
    for (a, b) in q.iter().zip(&decoded) {
        // symphonia scales by 1/32768, we by 1/32767.
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
}

#[test]
fn flac_streamed_is_lossless_and_chunking_does_not_change_a_byte() {
    let x = speechlike(RATE, 1.5);
    let whole = encode_all(Format::Flac, RATE, &x).unwrap();
    let pcm: Vec<i16> = x.iter().map(|&s| f32_to_i16(s)).collect();
    for chunk in CHUNKS {
        let (mut bytes, header) = streamed(Format::Flac, RATE, &x, chunk);
        // The streamed header leaves the length unknown; still decodable.
        let (decoded, rate, _) = symphonia_decode(bytes.clone(), "flac");
        assert_eq!(rate, RATE);
        let back: Vec<i16> = decoded
            .iter()
            .map(|&s| (s * 32768.0).round() as i16)
            .collect();
        assert_eq!(back, pcm, "chunk {chunk}");
        let h = header.unwrap();
        bytes[..h.len()].copy_from_slice(&h);
        assert_eq!(bytes, whole, "chunk {chunk}");
    }
    let (_, _, declared) = symphonia_decode(whole.clone(), "flac");
    assert_eq!(declared, Some(x.len() as u64));
    // Compressed: a smooth harmonic signal takes well under half of PCM16.
    assert!(whole.len() < x.len(), "{} bytes", whole.len());
}

#[test]
fn mp3_streamed_decodes_within_its_snr() {
    let x = speechlike(RATE, 1.5);
    let whole = encode_all(Format::Mp3, RATE, &x).unwrap();
    for chunk in CHUNKS {
        let (bytes, header) = streamed(Format::Mp3, RATE, &x, chunk);
        assert!(header.is_none());
        assert_eq!(bytes, whole, "chunk {chunk}");
    }
    let (decoded, rate, _) = symphonia_decode(whole.clone(), "mp3");
    assert_eq!(rate, RATE);
    // LAME's delay (576 + 529) plus the decoder's, found by correlation.
    let lag = best_lag(&x, &decoded, 3000);
    let snr = snr_db(&x, &decoded[lag..]);
    eprintln!("mp3: {} bytes, lag {lag}, SNR {snr:.1} dB", whole.len());
    assert!(snr >= 20.0, "mp3 SNR {snr:.1} dB");
    // 64 kbit/s CBR: 1.5 s is ~12 kB.
    let kbps = whole.len() as f64 * 8.0 / 1.5 / 1000.0;
    assert!((55.0..80.0).contains(&kbps), "{kbps} kbit/s");
    // Nothing lost at the end: the decoded stream covers the input.
    assert!(decoded.len() >= lag + x.len());
}

#[test]
fn aac_adts_streamed_decodes_within_its_snr_and_its_length_is_the_input_plus_the_delay() {
    let x = speechlike(RATE, 1.5);
    let whole = encode_all(Format::Aac, RATE, &x).unwrap();
    for chunk in CHUNKS {
        let (bytes, header) = streamed(Format::Aac, RATE, &x, chunk);
        assert!(header.is_none());
        assert_eq!(bytes, whole, "chunk {chunk}");
    }
    let (decoded, rate, _) = symphonia_decode(whole.clone(), "aac");
    assert_eq!(rate, RATE);
    // FDK's delay (no ADTS field states it), found by correlation.
    let lag = best_lag(&x, &decoded, 4096);
    let snr = snr_db(&x, &decoded[lag..]);
    eprintln!("aac: {} bytes, lag {lag}, SNR {snr:.1} dB", whole.len());
    assert!(snr >= 20.0, "aac SNR {snr:.1} dB");
    // Every input sample comes out, followed by less than one frame of the
    // end's silence.
    assert!(
        decoded.len() >= lag + x.len(),
        "{} < {lag} + {}",
        decoded.len(),
        x.len()
    );
    assert!(
        decoded.len() < lag + x.len() + 1024,
        "{} samples",
        decoded.len()
    );
    let kbps = whole.len() as f64 * 8.0 / 1.5 / 1000.0;
    assert!((50.0..80.0).contains(&kbps), "{kbps} kbit/s");
}

#[test]
fn aac_encodes_at_every_rate_it_accepts() {
    for rate in tts_audio::encode::AAC_RATES {
        let x = speechlike(rate, 0.2);
        let bytes = encode_all(Format::Aac, rate, &x).unwrap();
        let (decoded, got, _) = symphonia_decode(bytes, "aac");
        assert_eq!(got, rate);
        assert!(
            decoded.len() >= x.len(),
            "{rate}: {} samples",
            decoded.len()
        );
    }
    let empty = encode_all(Format::Aac, RATE, &[]).unwrap();
    assert!(
        !empty.is_empty(),
        "an empty stream is still a valid ADTS frame"
    );
}

/// Reads an Ogg Opus stream: the pre-skip, and each page's packets with
/// the page's granule position.
fn ogg_opus(bytes: &[u8]) -> (u16, u32, Vec<(Vec<u8>, u64)>) {
    let mut r = ogg::PacketReader::new(Cursor::new(bytes.to_vec()));
    let head = r.read_packet_expected().unwrap();
    assert_eq!(&head.data[..8], b"OpusHead");
    assert!(head.first_in_stream());
    assert_eq!(head.data[9], 1, "mono");
    let pre_skip = u16::from_le_bytes([head.data[10], head.data[11]]);
    let input_rate = u32::from_le_bytes(head.data[12..16].try_into().unwrap());
    let tags = r.read_packet_expected().unwrap();
    assert_eq!(&tags.data[..8], b"OpusTags");
    let mut packets = Vec::new();
    let mut last = false;
    while let Some(p) = r.read_packet().unwrap() {
        assert!(!last, "packet after end of stream");
        last = p.last_in_stream();
        packets.push((p.data.clone(), p.absgp_page()));
    }
    assert!(last, "no end-of-stream page");
    (pre_skip, input_rate, packets)
}

#[test]
fn opus_in_ogg_has_correct_pre_skip_and_granules_and_decodes_within_its_snr() {
    let x = speechlike(RATE, 1.5);
    let (whole, _) = streamed(Format::Opus, RATE, &x, usize::MAX);
    let (pre_skip, input_rate, packets) = ogg_opus(&whole);
    assert_eq!(input_rate, RATE);
    assert!((100..=1000).contains(&pre_skip), "pre-skip {pre_skip}");
    // Granules rise page by page; the last is pre-skip + the input length
    // at 48 kHz (end trimming).
    let granules: Vec<u64> = packets.iter().map(|p| p.1).collect();
    assert!(granules.windows(2).all(|w| w[0] <= w[1]), "{granules:?}");
    let end = *granules.last().unwrap();
    assert_eq!(end, pre_skip as u64 + 2 * x.len() as u64);
    // Every packet is one 20 ms frame; together they cover the end.
    assert!(packets.len() as u64 * 960 >= end);
    assert!((packets.len() as u64 - 1) * 960 < end);

    let mut dec = opus::Decoder::new(RATE, opus::Channels::Mono).unwrap();
    let mut decoded = Vec::new();
    let mut buf = vec![0f32; 5760];
    for (p, _) in &packets {
        let n = dec.decode_float(p, &mut buf, false).unwrap();
        assert_eq!(n, 480, "20 ms at 24 kHz");
        decoded.extend_from_slice(&buf[..n]);
    }
    // What a player plays: skip pre-skip, stop at the last granule.
    let play = &decoded[pre_skip as usize / 2..(end as usize) / 2];
    assert_eq!(play.len(), x.len());
    let snr = snr_db(&x, play);
    eprintln!(
        "opus: {} bytes, pre-skip {pre_skip}, SNR {snr:.1} dB",
        whole.len()
    );
    assert!(snr >= 20.0, "opus SNR {snr:.1} dB");

    // Chunking changes where pages end, never the packets or the end.
    for chunk in CHUNKS {
        let (bytes, header) = streamed(Format::Opus, RATE, &x, chunk);
        assert!(header.is_none());
        let (ps, _, p) = ogg_opus(&bytes);
        assert_eq!(ps, pre_skip);
        let data: Vec<&Vec<u8>> = p.iter().map(|p| &p.0).collect();
        let want: Vec<&Vec<u8>> = packets.iter().map(|p| &p.0).collect();
        assert_eq!(data, want, "chunk {chunk}");
        assert_eq!(p.last().unwrap().1, end, "chunk {chunk}");
    }
}

#[test]
fn raw_opus_packets_are_20_ms_each_and_decode_to_the_input_after_the_look_ahead() {
    let x = speechlike(RATE, 1.5);
    let mut whole: Option<Vec<Vec<u8>>> = None;
    for chunk in CHUNKS {
        let mut e = tts_audio::encode::OpusPacketEncoder::new(RATE).unwrap();
        let mut packets = Vec::new();
        for c in x.chunks(chunk.max(1)) {
            e.push(c, &mut packets).unwrap();
        }
        e.finish(&mut packets).unwrap();
        let la = e.lookahead();
        assert_eq!(e.frame_samples(), 480);
        // Every input sample leaves the look-ahead, with < 1 packet more.
        let decoded_len = packets.len() * 480;
        assert!(decoded_len >= x.len() + la && decoded_len < x.len() + la + 480);
        let mut dec = opus::Decoder::new(RATE, opus::Channels::Mono).unwrap();
        let mut decoded = Vec::new();
        let mut buf = vec![0f32; 5760];
        for p in &packets {
            let n = dec.decode_float(p, &mut buf, false).unwrap();
            assert_eq!(n, 480, "20 ms at 24 kHz");
            decoded.extend_from_slice(&buf[..n]);
        }
        let snr = snr_db(&x, &decoded[la..]);
        assert!(snr >= 20.0, "opus packets SNR {snr:.1} dB, chunk {chunk}");
        match &whole {
            None => whole = Some(packets),
            Some(w) => assert_eq!(w, &packets, "chunk {chunk}"),
        }
    }
    let mut e = tts_audio::encode::OpusPacketEncoder::new(RATE).unwrap();
    let mut p = Vec::new();
    e.finish(&mut p).unwrap();
    assert!(e.push(&[0.0], &mut p).is_err(), "push after finish");
    assert!(tts_audio::encode::OpusPacketEncoder::new(44100).is_err());
}

#[test]
fn opus_of_an_empty_stream_is_a_valid_stream_of_no_samples() {
    let bytes = encode_all(Format::Opus, RATE, &[]).unwrap();
    let (pre_skip, _, packets) = ogg_opus(&bytes);
    assert_eq!(packets.len(), 1);
    assert_eq!(packets[0].1, pre_skip as u64);
}

#[test]
fn g711_decodes_within_its_snr_at_8_khz() {
    let x = speechlike(8000, 1.5);
    for (format, decode, min_snr) in [
        (Format::Mulaw, ulaw_to_linear as fn(u8) -> i16, 33.0),
        (Format::Alaw, alaw_to_linear as fn(u8) -> i16, 33.0),
    ] {
        let whole = encode_all(format, 8000, &x).unwrap();
        assert_eq!(whole.len(), x.len(), "one byte per sample");
        for chunk in CHUNKS {
            assert_eq!(streamed(format, 8000, &x, chunk).0, whole);
        }
        let decoded: Vec<f32> = whole.iter().map(|&c| decode(c) as f32 / 32767.0).collect();
        let snr = snr_db(&x, &decoded);
        eprintln!("{format}: SNR {snr:.1} dB");
        assert!(snr >= min_snr, "{format} SNR {snr:.1} dB");
    }
}

#[test]
fn pcm_is_the_16_bit_samples_and_nothing_else() {
    let x = speechlike(RATE, 0.1);
    let bytes = encode_all(Format::Pcm, RATE, &x).unwrap();
    let back: Vec<i16> = bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let want: Vec<i16> = x.iter().map(|&s| f32_to_i16(s)).collect();
    assert_eq!(back, want);
}
