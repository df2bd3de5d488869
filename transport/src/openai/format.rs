//! The OpenAI route's audio formats: which encoder a `response_format`
//! names, at which rate, and how the body carries its bytes.
//!
//! - Streamed (the default, except for `wav`): each chunk's encoded bytes
//!   leave as soon as the engine decodes it. Every format is a valid stream
//!   when read to the end; `wav` then has 0xFFFFFFFF in its two size fields
//!   (the length is not known when the header leaves) and `flac` a
//!   STREAMINFO with the length and MD5 unknown (0), as the format allows.
//! - Complete (`"stream": false`, and `wav` unless `"stream": true`): the
//!   whole file is encoded first, so the header states the exact length
//!   (soxi, sox, Python `wave` and browsers read the true duration), the
//!   response has a `Content-Length`, and a synthesis failure is an error
//!   status instead of a cut-off body.
//! - SSE (`stream_format: "sse"`): base64 deltas of the encoded stream;
//!   `wav` (and the default there) is sent as raw PCM16 deltas with no RIFF
//!   header, as OpenAI sends them, so concatenated deltas play without a
//!   click.
//!
//! `speed` other than 1.0 time-stretches the stream (pitch kept,
//! [`tts_audio::Stretch`]) just before it is encoded, chunk by chunk.
//!
//! Encoding runs in the request's own task (never on the engine's
//! synthesis threads): one stream's encoder never waits on another's.

use tts_audio::{EncodeError, Encoder, Format, Stretch};

use super::{invalid, Invalid};

/// The format when `response_format` is absent: OpenAI's documented default.
pub(super) const DEFAULT_FORMAT: Format = Format::Mp3;

/// How a response's audio is encoded and delivered.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct ResponseAudio {
    pub format: Format,
    pub rate: u32,
    pub sse: bool,
    /// The whole file in one body with exact sizes (see the module docs).
    pub complete: bool,
    /// OpenAI's `speed` (0.25-4.0, validated by the caller): 1.0 plays the
    /// model's natural rate.
    pub speed: f32,
    /// The audio as JSON with its characters' timings (ElevenLabs'
    /// `with-timestamps` routes).
    pub timestamps: Option<Timestamps>,
}

/// How audio with timings is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timestamps {
    /// One JSON object: all the audio, all the characters.
    Whole,
    /// One JSON object per line, as the audio is made.
    Lines,
}

/// Resolves `response_format`, `stream_format`, `stream` and `sample_rate`.
pub(super) fn response_audio(
    response_format: Option<&str>,
    stream_format: Option<&str>,
    stream: Option<bool>,
    sample_rate: Option<u32>,
    native_rate: u32,
) -> Result<ResponseAudio, Invalid> {
    let format = match response_format {
        None => DEFAULT_FORMAT,
        Some(name) => name.parse::<Format>().map_err(|_| {
            let names: Vec<String> = Format::ALL
                .iter()
                .map(|f| format!("{:?}", f.name()))
                .collect();
            invalid(
                format!(
                    "response_format {name:?} is not supported; use one of {}",
                    names.join(", ")
                ),
                "response_format",
            )
        })?,
    };
    let sse = match stream_format {
        None | Some("audio") => false,
        Some("sse") => true,
        Some(other) => {
            return Err(invalid(
                format!("stream_format {other:?} is not supported; use \"audio\" or \"sse\""),
                "stream_format",
            ))
        }
    };
    if sse && stream == Some(false) {
        return Err(invalid(
            "stream false cannot be combined with stream_format \"sse\" (events are a stream); omit one".into(),
            "stream",
        ));
    }
    if let Some(r) = sample_rate {
        crate::validate::sample_rate(r)?;
    }
    let rate = format
        .output_rate(sample_rate, native_rate)
        .map_err(|e| invalid(e.to_string(), "sample_rate"))?;
    let complete = !sse && !stream.unwrap_or(format != Format::Wav);
    Ok(ResponseAudio {
        format,
        rate,
        sse,
        complete,
        speed: 1.0,
        timestamps: None,
    })
}

impl ResponseAudio {
    pub fn content_type(&self) -> &'static str {
        if self.timestamps.is_some() {
            "application/json"
        } else if self.sse {
            "text/event-stream"
        } else {
            self.format.content_type()
        }
    }

    /// The `X-Audio-Encoding` header: what the bytes are, for clients that
    /// read raw bodies.
    pub fn encoding(&self) -> &'static str {
        match self.wire_format() {
            Format::Wav | Format::Pcm => "pcm_s16le; channels=1",
            Format::Mulaw => "mulaw; channels=1",
            Format::Alaw => "alaw; channels=1",
            Format::Flac => "flac; channels=1",
            Format::Mp3 => "mp3; channels=1",
            Format::Opus => "opus; container=ogg; channels=1",
            Format::Aac => "aac; container=adts; channels=1",
        }
    }

    /// What is actually encoded: SSE deltas of `wav` are headerless PCM.
    fn wire_format(&self) -> Format {
        if self.sse && self.format == Format::Wav {
            Format::Pcm
        } else {
            self.format
        }
    }

    pub fn body_encoder(&self) -> Result<BodyEncoder, EncodeError> {
        let stretch = Stretch::new(self.rate, self.speed)?;
        Ok(BodyEncoder {
            enc: self.wire_format().encoder(self.rate)?,
            complete: self.complete,
            buf: Vec::new(),
            stretch,
            stretched: Vec::new(),
        })
    }
}

/// An encoder feeding a response body: streamed, it hands out the bytes
/// that are ready; complete, it keeps everything until [`finish`](Self::finish).
pub(super) struct BodyEncoder {
    enc: Box<dyn Encoder>,
    complete: bool,
    buf: Vec<u8>,
    stretch: Stretch,
    stretched: Vec<f32>,
}

impl BodyEncoder {
    /// Encodes `samples`; the bytes to send now (empty: none yet).
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<u8>, EncodeError> {
        if self.stretch.is_active() {
            self.stretched.clear();
            self.stretch.push(samples, &mut self.stretched);
            self.enc.push(&self.stretched, &mut self.buf)?;
        } else {
            self.enc.push(samples, &mut self.buf)?;
        }
        Ok(if self.complete {
            Vec::new()
        } else {
            std::mem::take(&mut self.buf)
        })
    }

    /// Ends the stream: the last bytes (complete: the whole file, its
    /// header stating the exact length).
    pub fn finish(&mut self) -> Result<Vec<u8>, EncodeError> {
        if self.stretch.is_active() {
            self.stretched.clear();
            self.stretch.finish(&mut self.stretched);
            self.enc.push(&self.stretched, &mut self.buf)?;
        }
        self.enc.finish(&mut self.buf)?;
        if self.complete {
            if let Some(h) = self.enc.exact_header() {
                self.buf[..h.len()].copy_from_slice(&h);
            }
        }
        Ok(std::mem::take(&mut self.buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(
        format: Option<&str>,
        sse: Option<&str>,
        stream: Option<bool>,
        rate: Option<u32>,
    ) -> Result<ResponseAudio, Invalid> {
        response_audio(format, sse, stream, rate, 24000)
    }

    #[test]
    fn the_default_is_openais_mp3_streamed() {
        let o = out(None, None, None, None).ok().unwrap();
        assert_eq!(
            (o.format, o.rate, o.complete, o.sse),
            (Format::Mp3, 24000, false, false)
        );
        assert_eq!(o.content_type(), "audio/mpeg");
    }

    #[test]
    fn wav_is_complete_unless_streaming_is_asked_for() {
        assert!(out(Some("wav"), None, None, None).ok().unwrap().complete);
        assert!(
            !out(Some("wav"), None, Some(true), None)
                .ok()
                .unwrap()
                .complete
        );
        assert!(
            out(Some("flac"), None, Some(false), None)
                .ok()
                .unwrap()
                .complete
        );
        assert!(!out(Some("flac"), None, None, None).ok().unwrap().complete);
    }

    #[test]
    fn sse_deltas_carry_no_riff_header() {
        let o = out(Some("wav"), Some("sse"), None, None).ok().unwrap();
        assert_eq!(o.wire_format(), Format::Pcm);
        assert_eq!(o.content_type(), "text/event-stream");
        let mut e = o.body_encoder().unwrap();
        let first = e.push(&[0.5; 10]).unwrap();
        assert_eq!(first.len(), 20, "no RIFF header in the first delta");
        let e = out(Some("wav"), Some("sse"), Some(false), None)
            .err()
            .unwrap();
        assert_eq!(e.param, "stream");
    }

    #[test]
    fn g711_is_8_khz_and_refuses_other_rates() {
        assert_eq!(
            out(Some("mulaw"), None, None, None).ok().unwrap().rate,
            8000
        );
        let e = out(Some("alaw"), None, None, Some(16000)).err().unwrap();
        assert_eq!(e.param, "sample_rate");
        assert!(e.message.contains("8000"), "{}", e.message);
    }

    #[test]
    fn unknown_formats_name_the_supported_ones() {
        let e = out(Some("ogg"), None, None, None).err().unwrap();
        assert_eq!(e.param, "response_format");
        for f in Format::ALL {
            assert!(e.message.contains(f.name()), "{}", e.message);
        }
    }

    #[test]
    fn aac_is_adts_and_refuses_rates_aac_lc_lacks() {
        let o = out(Some("aac"), None, None, None).ok().unwrap();
        assert_eq!((o.format, o.rate, o.complete), (Format::Aac, 24000, false));
        assert_eq!(o.content_type(), "audio/aac");
        assert!(o.encoding().contains("adts"));
        let e = out(Some("aac"), None, None, Some(20000)).err().unwrap();
        assert_eq!(e.param, "sample_rate");
        assert!(e.message.contains("22050"), "{}", e.message);
        let mut e = o.body_encoder().unwrap();
        let mut bytes = e.push(&[0.1; 3000]).unwrap();
        bytes.extend(e.finish().unwrap());
        assert_eq!(&bytes[..2], &[0xFF, 0xF1], "an ADTS frame, MPEG-4, no CRC");
    }

    #[test]
    fn speed_stretches_the_encoded_stream() {
        let mut o = out(Some("pcm"), None, None, None).ok().unwrap();
        o.speed = 2.0;
        let mut e = o.body_encoder().unwrap();
        let tone: Vec<f32> = (0..24000)
            .map(|i| (i as f32 * std::f32::consts::TAU * 200.0 / 24000.0).sin() * 0.5)
            .collect();
        let mut bytes = Vec::new();
        for c in tone.chunks(1920) {
            bytes.extend(e.push(c).unwrap());
        }
        bytes.extend(e.finish().unwrap());
        let samples = bytes.len() / 2;
        assert!(
            (samples as f32 / 12000.0 - 1.0).abs() < 0.02,
            "{samples} samples at speed 2 from 24000"
        );
    }

    #[test]
    fn a_saved_wav_reports_its_true_duration() {
        let o = out(Some("wav"), None, None, None).ok().unwrap();
        let mut e = o.body_encoder().unwrap();
        assert!(e.push(&[0.1; 100]).unwrap().is_empty());
        let file = e.finish().unwrap();
        assert_eq!(file.len(), 44 + 200);
        assert_eq!(u32::from_le_bytes(file[40..44].try_into().unwrap()), 200);
    }
}
