//! Container and codec decoding with symphonia, down to one mono `f32`
//! signal at the source rate.
//!
//! Strict where a player would be lenient: a decoder error anywhere is
//! [`Corrupt`](ReferenceAudioError::Corrupt) (a player skips the packet; a
//! voice prompt must not silently lose audio), and so is a stream that ends
//! before the length its header declares (symphonia reports a cut-off file
//! as an ordinary end of stream). A stream that decodes to more than it
//! declares is cut to the declared length: the excess is the padding of the
//! codec's last frame (Vorbis, AAC), which the container's length leaves
//! out. Decoding stops before a packet would take the clip past the maximum
//! length, so the decoded signal stays bounded by that length, not by the
//! file's size.
//!
//! Untrusted bytes never reach an allocation they did not bound: before
//! symphonia sees the file, `preflight/` walks the headers it will trust
//! (MP4 sample tables, WAV chunks, FLAC blocks, Ogg comment packets, ID3v2
//! tags) against the bytes that hold them; before a decoder is made, its
//! parameters (rate, channels, frames per packet, a Vorbis setup's
//! codebooks) are checked against what real files use. Both run under
//! `catch_unwind`, as does the decode: a panic left in a decoder is a
//! [`DecoderFault`](ReferenceAudioError::DecoderFault) for this clip, not a
//! crash of the thread serving it.

use std::any::Any;
use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};

use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{self, CodecParameters, CodecType, DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::{MediaSource, MediaSourceStream};
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use super::decoded::{mean, Decoded};
use super::preflight::{self, Container};
use super::{check_channels, check_rate, ReferenceAudioError};

/// Most frames a codec pads its last frame with (Vorbis's largest block is
/// 8,192 samples; AAC's frame 1,024; observed: 832 and 956).
const MAX_PADDING_FRAMES: u64 = 8_192;

/// The containers symphonia was built with, for error messages.
const CONTAINERS: &str = "WAV, FLAC, MP3, OGG, MP4/M4A and ADTS AAC";

/// Most frames a decoder may be asked to put in one packet's buffer. FLAC's
/// largest block is 65,535 frames; every other codec here uses at most
/// 8,192 (Vorbis), and a WAV packet is 1,152. An MP4 PCM track states its
/// own (32 bits), which the PCM decoder would reserve, times the channels,
/// up front.
const MAX_FRAMES_PER_PACKET: u64 = 65_536;

/// Checks and decodes a whole file held in memory, mixing to mono. The
/// container checks may blank parts of `bytes` the decoder must not parse
/// (ID3v2 tags); a panic anywhere becomes a
/// [`DecoderFault`](ReferenceAudioError::DecoderFault) naming the format.
pub(super) fn decode_file(
    mut bytes: Vec<u8>,
    ext: Option<&str>,
    max_secs: f64,
) -> Result<Decoded, ReferenceAudioError> {
    // WebM/Matroska (browsers' MediaRecorder): walked and decoded here
    // (`webm_opus.rs`), before the probe's marker search could take a
    // sync pattern inside its audio for an MP3.
    if super::webm_opus::is_ebml(&bytes) {
        return guarded(Container::Matroska, "decoding", || {
            super::webm_opus::decode(&bytes, max_secs)
        });
    }
    let container = guarded(Container::Unknown, "checking the container", || {
        preflight::check(&mut bytes)
    })?;
    // Ogg Opus: symphonia has no Opus decoder; libopus decodes it.
    if container == Container::Ogg {
        if let Some(start) = super::ogg_opus::opus_start(&bytes) {
            return guarded(container, "decoding", || {
                super::ogg_opus::decode(&bytes, start, max_secs)
            });
        }
    }
    guarded(container, "decoding", || {
        decode(Box::new(Cursor::new(bytes)), ext, max_secs, container)
    })
}

/// Runs `f`, turning a panic into an error for this clip. The decoders'
/// state lives inside `f` and is dropped with it, so nothing observes it
/// half-updated after the unwind.
fn guarded<T>(
    container: Container,
    stage: &str,
    f: impl FnOnce() -> Result<T, ReferenceAudioError>,
) -> Result<T, ReferenceAudioError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        Err(ReferenceAudioError::DecoderFault {
            format: container.name(),
            detail: format!("{stage}: {}", panic_text(payload.as_ref())),
        })
    })
}

fn panic_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// Decodes a whole stream, mixing to mono (the mean over channels) as it
/// goes. `ext` is the file extension, if known (only used in messages: the
/// probe recognises streams by their content); `container` names the file's
/// format in refusals. Stops with [`TooLong`](ReferenceAudioError::TooLong)
/// before passing `max_secs`.
fn decode(
    source: Box<dyn MediaSource>,
    ext: Option<&str>,
    max_secs: f64,
    container: Container,
) -> Result<Decoded, ReferenceAudioError> {
    let mss = MediaSourceStream::new(source, Default::default());
    let mut hint = Hint::new();
    if let Some(ext) = ext {
        hint.with_extension(ext);
    }
    // Gapless: MP3 (LAME tag) and Vorbis trim encoder delay and padding, so
    // the decoded length is the length that was encoded.
    let format_opts = FormatOptions {
        enable_gapless: true,
        ..Default::default()
    };
    let probed = symphonia::default::get_probe()
        .format(&hint, mss, &format_opts, &MetadataOptions::default())
        .map_err(|e| probe_error(e, ext))?;
    let mut reader = probed.format;

    let track = reader
        .tracks()
        .iter()
        .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        .ok_or(ReferenceAudioError::NoAudioTrack)?;
    let track_id = track.id;
    let params = track.codec_params.clone();
    let declared = declared_frames(&params);
    let format = format_name(params.codec);
    if format == "unknown" {
        return Err(ReferenceAudioError::Unsupported {
            what: format!("codec {}", codec_name(params.codec)),
        });
    }
    // What the header says, when it says it, checked before a decoder is
    // made from it; the rate is checked again on every decoded buffer (a
    // stream may omit it, or lie).
    let mut rate = params.sample_rate;
    if let Some(r) = rate {
        check_rate(r)?;
    }
    if let Some(c) = params.channels {
        check_channels(u16::try_from(c.count()).unwrap_or(u16::MAX))?;
    }
    if let Some(n) = params.max_frames_per_packet {
        if n > MAX_FRAMES_PER_PACKET {
            return Err(ReferenceAudioError::BadField {
                format: container.name(),
                field: "frames per packet".into(),
                value: n,
                expected: format!("past the {MAX_FRAMES_PER_PACKET} any codec here uses"),
            });
        }
    }
    if params.codec == codecs::CODEC_TYPE_VORBIS {
        if let Some(extra) = &params.extra_data {
            preflight::check_vorbis_setup(extra)?;
        }
    }
    let mut decoder = symphonia::default::get_codecs()
        .make(&params, &DecoderOptions::default())
        .map_err(|e| ReferenceAudioError::Unsupported {
            what: format!("{} decoder: {e}", codec_name(params.codec)),
        })?;

    if let Some(r) = rate {
        if let Some(n) = declared {
            let secs = n as f64 / r as f64;
            if secs > max_secs {
                return Err(ReferenceAudioError::TooLong {
                    secs,
                    max: max_secs,
                });
            }
        }
    }
    let mut channels: Option<u16> = None;
    let mut mono: Vec<f32> = Vec::new();
    let mut frames: u64 = 0;
    let mut interleaved: Option<SampleBuffer<f32>> = None;

    loop {
        let packet = match reader.next_packet() {
            Ok(p) => p,
            Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(stream_error(e, frames)),
        };
        if packet.track_id() != track_id {
            continue;
        }
        let buf = decoder
            .decode(&packet)
            .map_err(|e| stream_error(e, frames))?;
        let spec = *buf.spec();
        let n = buf.frames();
        if n == 0 {
            continue;
        }
        match rate {
            None => {
                check_rate(spec.rate)?;
                rate = Some(spec.rate);
            }
            Some(r) if r != spec.rate => {
                return Err(ReferenceAudioError::Unsupported {
                    what: format!(
                        "a stream whose sample rate changes from {r} to {} Hz",
                        spec.rate
                    ),
                })
            }
            Some(_) => {}
        }
        let c = u16::try_from(spec.channels.count()).unwrap_or(u16::MAX);
        match channels {
            None => {
                check_channels(c)?;
                channels = Some(c);
            }
            Some(prev) if prev != c => {
                return Err(ReferenceAudioError::Unsupported {
                    what: format!("a stream whose channel count changes from {prev} to {c}"),
                })
            }
            Some(_) => {}
        }
        if interleaved
            .as_ref()
            .is_none_or(|sb| sb.capacity() < n * c as usize)
        {
            interleaved = Some(SampleBuffer::new(buf.capacity().max(n) as u64, spec));
        }
        let Some(sb) = interleaved.as_mut() else {
            continue; // set just above
        };
        // The cap is checked before the packet's samples are kept.
        let r = rate.unwrap_or(spec.rate);
        let secs = (frames + n as u64) as f64 / r as f64;
        if secs > max_secs {
            return Err(ReferenceAudioError::TooLong {
                secs,
                max: max_secs,
            });
        }
        sb.copy_interleaved_ref(buf);
        mix_into(sb.samples(), c as usize, frames, &mut mono)?;
        frames += n as u64;
    }

    let (Some(rate), Some(channels)) = (rate, channels) else {
        // Nothing decoded at all: a header with no audio after it.
        return match declared {
            Some(n) if n > 0 => Err(ReferenceAudioError::Corrupt {
                detail: format!(
                    "the header declares {n} samples but none could be read (truncated file?)"
                ),
            }),
            _ => Err(ReferenceAudioError::TooShort {
                secs: 0.0,
                min: super::MIN_REFERENCE_SECONDS,
            }),
        };
    };
    // An Ogg file's length is the granule position of its last page, which
    // symphonia finds by reading the end of the (seekable) file: a complete
    // file always has one, a file cut inside a page does not (and decodes
    // only up to its last complete page).
    if declared.is_none() && params.codec == codecs::CODEC_TYPE_VORBIS {
        return Err(ReferenceAudioError::Corrupt {
            detail: format!(
                "the last OGG page is missing or cut off after {:.3} s of audio; the file is truncated",
                frames as f64 / rate as f64
            ),
        });
    }
    if let Some(declared) = declared {
        // A little more than declared: the codec's padding of its last
        // frame (Vorbis, AAC), which the container's length excludes. Much
        // more: the declared length is wrong, so keep what decoded.
        if frames > declared && frames - declared <= MAX_PADDING_FRAMES {
            mono.truncate(declared as usize);
        }
        if frames < declared {
            return Err(ReferenceAudioError::Corrupt {
                detail: format!(
                    "the stream ends after {frames} of the {declared} samples its header declares \
                     ({:.3} of {:.3} s); the file is truncated",
                    frames as f64 / rate as f64,
                    declared as f64 / rate as f64
                ),
            });
        }
    }
    Ok(Decoded {
        mono,
        rate,
        channels,
        format,
    })
}

/// The length the header declares, in frames, when it is an exact count.
/// Not: zero (a header that leaves it unknown: FLAC's streamed STREAMINFO,
/// fragmented MP4); the placeholder of a WAV written to a pipe (ffmpeg,
/// sox: a data size of 0xFFFF_FFFF, the real length only known at the end);
/// an MP3 length without a LAME tag, which symphonia estimates from the
/// bitrate and the file size (a trailing ID3v1 tag alone would make a
/// complete file look one frame short); an ADTS (raw `.aac`) length, which
/// symphonia also estimates from the first frames' sizes (told from MP4's
/// AAC, whose length is exact, by its missing decoder config: ADTS carries
/// that in every frame header, MP4 in the sample description).
fn declared_frames(params: &CodecParameters) -> Option<u64> {
    let n = params.n_frames.filter(|&n| n > 0)?;
    if params.codec == codecs::CODEC_TYPE_AAC && params.extra_data.is_none() {
        return None;
    }
    let mp3 = [
        codecs::CODEC_TYPE_MP3,
        codecs::CODEC_TYPE_MP2,
        codecs::CODEC_TYPE_MP1,
    ];
    if mp3.contains(&params.codec) && params.delay.is_none() {
        return None;
    }
    if is_pcm(params.codec) {
        let bits = params
            .bits_per_coded_sample
            .or(params.bits_per_sample)
            .unwrap_or(8) as u64;
        let channels = params.channels.map_or(1, |c| c.count()) as u64;
        let block = (bits.div_ceil(8) * channels).max(1);
        if (n + 1) * block > u32::MAX as u64 {
            return None;
        }
    }
    Some(n)
}

/// Appends the per-frame channel mean of `interleaved` to `mono`, refusing
/// samples that are not finite. `first_frame` is only for the message.
fn mix_into(
    interleaved: &[f32],
    channels: usize,
    first_frame: u64,
    mono: &mut Vec<f32>,
) -> Result<(), ReferenceAudioError> {
    mono.reserve(interleaved.len() / channels);
    for (i, frame) in interleaved.chunks_exact(channels).enumerate() {
        if let Some(bad) = frame.iter().find(|s| !s.is_finite()) {
            return Err(ReferenceAudioError::Corrupt {
                detail: format!(
                    "sample frame {} holds {bad}, not a finite number",
                    first_frame + i as u64
                ),
            });
        }
        mono.push(mean(frame));
    }
    Ok(())
}

fn probe_error(e: SymError, ext: Option<&str>) -> ReferenceAudioError {
    let named = ext.map_or(String::new(), |x| format!(" (file extension .{x})"));
    match e {
        SymError::Unsupported(what) => ReferenceAudioError::Unsupported {
            what: format!("tried {CONTAINERS}{named}: {what}"),
        },
        SymError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            ReferenceAudioError::Corrupt {
                detail: format!(
                    "the file ends early, inside its header or index{named}; it is truncated"
                ),
            }
        }
        other => ReferenceAudioError::Corrupt {
            detail: format!("reading the container header{named}: {other}"),
        },
    }
}

fn stream_error(e: SymError, frames: u64) -> ReferenceAudioError {
    match e {
        SymError::ResetRequired => ReferenceAudioError::Unsupported {
            what: "a chained stream whose codec parameters change part-way".into(),
        },
        SymError::Unsupported(what) => ReferenceAudioError::Unsupported {
            what: format!("a stream feature: {what}"),
        },
        other => ReferenceAudioError::Corrupt {
            detail: format!("decoding failed after {frames} samples: {other}"),
        },
    }
}

/// The format a codec arrives in, named the way users call it.
fn format_name(codec: CodecType) -> &'static str {
    match codec {
        codecs::CODEC_TYPE_FLAC => "FLAC",
        codecs::CODEC_TYPE_MP3 | codecs::CODEC_TYPE_MP2 | codecs::CODEC_TYPE_MP1 => "MP3",
        codecs::CODEC_TYPE_VORBIS => "OGG/Vorbis",
        codecs::CODEC_TYPE_AAC => "M4A/AAC",
        c if is_pcm(c) => "WAV/PCM",
        _ => "unknown",
    }
}

fn is_pcm(c: CodecType) -> bool {
    use codecs::*;
    [
        CODEC_TYPE_PCM_S8,
        CODEC_TYPE_PCM_U8,
        CODEC_TYPE_PCM_S16LE,
        CODEC_TYPE_PCM_S16BE,
        CODEC_TYPE_PCM_U16LE,
        CODEC_TYPE_PCM_U16BE,
        CODEC_TYPE_PCM_S24LE,
        CODEC_TYPE_PCM_S24BE,
        CODEC_TYPE_PCM_U24LE,
        CODEC_TYPE_PCM_U24BE,
        CODEC_TYPE_PCM_S32LE,
        CODEC_TYPE_PCM_S32BE,
        CODEC_TYPE_PCM_U32LE,
        CODEC_TYPE_PCM_U32BE,
        CODEC_TYPE_PCM_F32LE,
        CODEC_TYPE_PCM_F32BE,
        CODEC_TYPE_PCM_F64LE,
        CODEC_TYPE_PCM_F64BE,
        CODEC_TYPE_PCM_ALAW,
        CODEC_TYPE_PCM_MULAW,
    ]
    .contains(&c)
}

fn codec_name(codec: CodecType) -> String {
    symphonia::default::get_codecs()
        .get_codec(codec)
        .map_or_else(|| format!("{codec}"), |d| d.long_name.to_string())
}
