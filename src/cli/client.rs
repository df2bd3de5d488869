//! `tts-rt client`: speaks through a running `tts-rt serve` over the
//! realtime WebSocket (docs/protocol.md, `tts_transport::protocol`).
//!
//! One context per run: `session.update` with the flags, the whole text in
//! one `context.append`, `context.end`; audio frames are played and/or
//! written as they arrive, and the `context.done` metrics go to stderr.
//! The socket is driven from this thread with a single-threaded tokio
//! runtime, one `block_on` per message, so feeding the player (which waits
//! while the device is a queue behind) simply pauses reading: TCP
//! backpressure then paces the server, as the protocol intends.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::runtime::Runtime;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tts_audio::WavFormat;
use tts_transport::protocol::{
    self, AudioFormat, AudioHeader, ChunkingMode, ChunkingUpdate, ClientMessage, ContextMetrics,
    ServerMessage, SessionSettings, SessionUpdate,
};

use super::client_encoded::{check_format, out_format, parse_format, BytesWriter};
use super::io::{check_out, AudioWriter, Container, Destination};
use super::play::{expected_speech, PlayArgs, Playback};
use super::subtitles;

/// The one context this client opens.
const CONTEXT_ID: &str = "c1";

#[derive(Args)]
pub struct ClientArgs {
    /// Server address: `ws://HOST:PORT/v1/realtime`, or `http://HOST:PORT`
    /// / `HOST:PORT` (the realtime path is added).
    url: String,
    /// Text to speak; omitted or `-`: read stdin.
    text: Option<String>,
    #[command(flatten)]
    play: PlayArgs,
    /// Also write the audio to this file (`-`: stdout), at the session's
    /// rate, in the format its extension names unless --format says it: a
    /// .wav of pcm16 / f32 samples, or the server's encoded stream itself
    /// (.mp3, .opus / .ogg, .flac, .aac, .pcm / .raw, .ulaw, .alaw).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Voice: a checkpoint speaker or an OpenAI voice name (alloy, ash, ...);
    /// default: the server's first speaker.
    #[arg(long)]
    voice: Option<String>,
    /// Language (a checkpoint language or auto); default: the server's.
    #[arg(long)]
    language: Option<String>,
    /// Style instruction (1.7B checkpoints).
    #[arg(long)]
    instruct: Option<String>,
    /// Bearer token of a server started with --token.
    #[arg(long, env = "TTS_RT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Audio rate to ask the server for (8000-48000); default: the model's.
    #[arg(long)]
    sample_rate: Option<u32>,
    /// Wire format: pcm16 or f32 samples (played, or --out as WAV), or
    /// encoded by the server: mp3, opus (Ogg), flac, aac (ADTS), mulaw or
    /// alaw (8 kHz), opus_packets (raw packets: no --out, no --play).
    /// Default: what --out's extension names, else pcm16.
    #[arg(long, value_parser = parse_format)]
    format: Option<AudioFormat>,
    /// Where the server cuts the text into synthesis requests: clause,
    /// sentence, manual (cut only at --max-chars), or live (no cuts: one
    /// utterance whose text reaches the model as it comes; implies
    /// --text-mode streaming); default: the server's (clause).
    #[arg(long, value_parser = parse_chunking)]
    chunking: Option<ChunkingMode>,
    /// Longest segment in characters; longer text is cut at its last space
    /// (the session's chunking.max_chars; below 24, the clause minimum
    /// follows it); default: the server's (300).
    #[arg(long)]
    max_chars: Option<usize>,
    /// How each segment's text reaches the model: prefill (all of it in the
    /// prompt; the server's default) or streaming (one token per frame, a
    /// ~10-row prompt: an earlier first packet; what --chunking live
    /// needs). docs/protocol.md.
    #[arg(long, value_parser = parse_text_mode)]
    text_mode: Option<protocol::TextMode>,
    /// Greedy decoding (reproducible).
    #[arg(long)]
    greedy: bool,
    /// Sampling seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Codec frames per segment at most (capped by the server).
    #[arg(long)]
    max_frames: Option<usize>,
    /// Seconds to wait for any message from the server before giving up.
    #[arg(long, default_value_t = 60.0)]
    timeout_s: f64,
    /// Print the server's full `context.done` metrics as one JSON line on
    /// stdout (on stderr, prefixed `metrics: `, when --out is `-`).
    #[arg(long)]
    json: bool,
    /// Also write when each word (and character) is heard, from the
    /// server's `timings` events: `.json`, `.srt` or `.vtt` by extension.
    #[arg(long, value_name = "FILE")]
    timings_out: Option<PathBuf>,
}

/// The prebuffer to tell the server when playing with a fixed one: the
/// server paces the chunks for it and counts continuity at it (capped at
/// the most a server takes; a deeper buffer only has more slack). A measured
/// prebuffer is not known in advance: the server's then.
fn declared_prebuffer(play: &PlayArgs) -> Option<f64> {
    play.prebuffer_ms
        .filter(|_| play.play)
        .map(|ms| (ms as f64).min(protocol::MAX_PREBUFFER_MS))
}

fn parse_text_mode(s: &str) -> std::result::Result<protocol::TextMode, String> {
    match s {
        "prefill" => Ok(protocol::TextMode::Prefill),
        "streaming" => Ok(protocol::TextMode::Streaming),
        other => Err(format!(
            "unknown text mode {other:?}; use prefill or streaming"
        )),
    }
}

/// The `text_mode` to ask for: live chunking takes text one token per frame
/// as it arrives, so it implies the streaming text mode (the server refuses
/// live with prefill); an explicit `--text-mode prefill` is refused.
fn text_mode_for(
    chunking: Option<ChunkingMode>,
    text_mode: Option<protocol::TextMode>,
) -> Result<Option<protocol::TextMode>> {
    match (chunking, text_mode) {
        (Some(ChunkingMode::Live), Some(protocol::TextMode::Prefill)) => bail!(
            "--chunking live feeds the text to the model as it arrives, which --text-mode \
             prefill cannot (it needs the whole text before the first frame); drop \
             --text-mode prefill (live implies streaming) or choose another --chunking"
        ),
        (Some(ChunkingMode::Live), None) => Ok(Some(protocol::TextMode::Streaming)),
        (_, m) => Ok(m),
    }
}

fn parse_chunking(s: &str) -> std::result::Result<ChunkingMode, String> {
    match s {
        "clause" => Ok(ChunkingMode::Clause),
        "sentence" => Ok(ChunkingMode::Sentence),
        "manual" => Ok(ChunkingMode::Manual),
        "live" => Ok(ChunkingMode::Live),
        other => Err(format!(
            "unknown chunking {other:?}; use clause, sentence, manual or live"
        )),
    }
}

/// The WebSocket URL for what the user typed: `http(s)` becomes `ws(s)`, a
/// bare `HOST:PORT` gets `ws://`, and an empty path becomes `/v1/realtime`
/// (a query such as `?token=T` is kept).
pub(crate) fn realtime_url(input: &str) -> Result<String> {
    let input = input.trim();
    let (scheme, rest) = match input.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => ("ws".to_string(), input),
    };
    let scheme = match scheme.as_str() {
        "ws" | "http" => "ws",
        "wss" | "https" => bail!(
            "{input}: TLS (wss://, https://) is not supported by this client; connect to the server with ws:// or http:// (e.g. through a local TLS-terminating proxy)"
        ),
        other => bail!("{input}: unsupported scheme {other:?}; use ws://HOST:PORT/v1/realtime or http://HOST:PORT"),
    };
    let cut = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(cut);
    if authority.is_empty() {
        bail!("{input}: no host; use ws://HOST:PORT/v1/realtime or http://HOST:PORT");
    }
    let tail = tail.split('#').next().unwrap_or("");
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    let path = if path.is_empty() || path == "/" {
        "/v1/realtime"
    } else {
        path
    };
    Ok(match query {
        Some(q) => format!("{scheme}://{authority}{path}?{q}"),
        None => format!("{scheme}://{authority}{path}"),
    })
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The connection, driven one message at a time from this thread.
struct Conn {
    rt: Runtime,
    ws: Ws,
    url: String,
    timeout: Duration,
}

/// One thing the server said.
enum Incoming {
    Msg(Box<ServerMessage>),
    /// A frame: its header and payload (samples or codec bytes).
    Audio(AudioHeader, Vec<u8>),
    Closed(String),
}

impl Conn {
    fn connect(url: &str, token: Option<&str>, timeout: Duration) -> Result<Conn> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the client's I/O runtime")?;
        let mut req = url
            .into_client_request()
            .with_context(|| format!("{url} is not a valid WebSocket URL"))?;
        if let Some(t) = token {
            let v = HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                anyhow!("--token contains characters not allowed in an HTTP header")
            })?;
            req.headers_mut().insert("authorization", v);
        }
        let connected = rt.block_on(async {
            tokio::time::timeout(
                timeout, // `true`: TCP_NODELAY, so small frames are not held back by Nagle.
                tokio_tungstenite::connect_async_with_config(req, None, true),
            )
            .await
        });
        let ws = match connected {
            Err(_) => bail!(
                "connecting to {url}: no answer within {:.0} s",
                timeout.as_secs_f64()
            ),
            Ok(Err(e)) => return Err(connect_error(url, e)),
            Ok(Ok((ws, _))) => ws,
        };
        Ok(Conn {
            rt,
            ws,
            url: url.to_string(),
            timeout,
        })
    }

    fn send(&mut self, m: &ClientMessage) -> Result<()> {
        let text = serde_json::to_string(m).expect("client messages serialize");
        let ws = &mut self.ws;
        self.rt
            .block_on(ws.send(Message::text(text)))
            .with_context(|| format!("sending to {}", self.url))
    }

    fn recv(&mut self) -> Result<Incoming> {
        let ws = &mut self.ws;
        let timeout = self.timeout;
        loop {
            let next = self
                .rt
                .block_on(async { tokio::time::timeout(timeout, ws.next()).await });
            let m = match next {
                Err(_) => bail!(
                    "the server at {} sent nothing for {:.0} s (--timeout-s)",
                    self.url,
                    timeout.as_secs_f64()
                ),
                Ok(None) => return Ok(Incoming::Closed("connection closed".into())),
                Ok(Some(Err(e))) => {
                    return Ok(Incoming::Closed(format!("connection lost: {e}")));
                }
                Ok(Some(Ok(m))) => m,
            };
            return Ok(match m {
                Message::Text(t) => {
                    let msg = protocol::parse_server_text(t.as_str()).map_err(|e| {
                        anyhow!(
                            "the server sent a message this client does not understand ({}): {}",
                            e.message,
                            t.as_str()
                        )
                    })?;
                    if let ServerMessage::Audio {
                        stream_id,
                        seq,
                        terminal,
                        sample_rate,
                        format,
                        audio,
                        ..
                    } = &msg
                    {
                        let bytes = protocol::base64_decode(audio)
                            .context("bad base64 audio from the server")?;
                        let h = AudioHeader {
                            stream_id: *stream_id,
                            seq: *seq as u32,
                            sample_rate: *sample_rate,
                            format: *format,
                            terminal: *terminal,
                        };
                        return Ok(Incoming::Audio(h, bytes));
                    }
                    Incoming::Msg(Box::new(msg))
                }
                Message::Binary(b) => {
                    let (h, payload) = AudioHeader::parse(&b).map_err(|e| {
                        anyhow!("malformed audio frame from the server: {}", e.message)
                    })?;
                    Incoming::Audio(h, payload.to_vec())
                }
                Message::Close(f) => Incoming::Closed(match f {
                    Some(f) if !f.reason.is_empty() => {
                        format!("closed by the server ({}: {})", u16::from(f.code), f.reason)
                    }
                    Some(f) => format!("closed by the server ({})", u16::from(f.code)),
                    None => "closed by the server".into(),
                }),
                _ => continue,
            });
        }
    }

    fn close(mut self) {
        // Best effort: the audio is already in hand.
        let ws = &mut self.ws;
        let _ = self
            .rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await });
    }
}

/// Wire samples to f32. pcm16 maps through /32767, the inverse of
/// `tts_audio::f32_to_i16`, so a pcm16 WAV written from them holds exactly
/// the server's integers. An encoded payload has no samples.
fn samples(bytes: &[u8], format: AudioFormat) -> Vec<f32> {
    match format {
        AudioFormat::Pcm16 => bytes
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 / 32767.0)
            .collect(),
        AudioFormat::F32 => protocol::decode_samples(bytes, AudioFormat::F32),
        _ => Vec::new(),
    }
}

/// Where `--out` goes: a WAV of the samples, or the encoded bytes.
enum Writer {
    Wav(AudioWriter),
    Bytes(BytesWriter),
}

/// A failed WebSocket handshake in words: the HTTP status the server gave,
/// with its error message, or the network reason.
fn connect_error(url: &str, e: tungstenite::Error) -> anyhow::Error {
    match e {
        tungstenite::Error::Http(resp) => {
            let status = resp.status();
            let body = resp
                .body()
                .as_deref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            let detail = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .unwrap_or(body);
            let hint = match status.as_u16() {
                401 | 403 => "; pass the server's token with --token (or TTS_RT_TOKEN)",
                404 => "; is this a tts-rt serve address? the realtime path is /v1/realtime",
                503 => "; the server is still loading, draining or full: retry shortly",
                _ => "",
            };
            anyhow!("{url} refused the connection: HTTP {status}: {detail}{hint}")
        }
        other => anyhow!("cannot connect to {url}: {other}"),
    }
}

fn server_error(m: &ServerMessage) -> Option<anyhow::Error> {
    Some(match m {
        ServerMessage::Error {
            code,
            message,
            valid,
            ..
        } => {
            let valid = match valid {
                Some(v) => format!(" (valid: {})", v.join(", ")),
                None => String::new(),
            };
            anyhow!("server error {}: {message}{valid}", code_name(code))
        }
        ServerMessage::ContextFailed { code, message, .. } => {
            anyhow!(
                "synthesis failed on the server ({}): {message}",
                code_name(code)
            )
        }
        ServerMessage::ContextCancelled { reason, .. } => {
            anyhow!("the server cancelled the request ({})", code_name(reason))
        }
        _ => return None,
    })
}

/// The wire name of an error code or cancel reason (`invalid_voice`).
fn code_name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

pub fn client(a: ClientArgs) -> Result<()> {
    let text = super::io::read_text(a.text.clone())?;
    let url = realtime_url(&a.url)?;
    anyhow::ensure!(
        a.timeout_s.is_finite() && a.timeout_s > 0.0,
        "--timeout-s must be a positive number of seconds"
    );
    let (format, raw_out) = out_format(a.format, a.out.as_deref())?;
    check_format(format, a.play.play, a.out.is_some())?;
    let text_mode = text_mode_for(a.chunking, a.text_mode)?;
    anyhow::ensure!(a.max_chars != Some(0), "--max-chars must be at least 1");
    // Checked first, so an unusable path fails before any network work;
    // opened (staged) once the server accepted the settings, so a refusal
    // or a dead server leaves an existing file as it was.
    match &a.out {
        Some(p) => check_out(p, "--out")?,
        None if a.play.play => {}
        None => bail!(
            "nothing to do: give --out FILE (or - for stdout) and/or --play; the audio would be discarded"
        ),
    }
    if let Some(p) = &a.timings_out {
        subtitles::Kind::of(p)?;
        super::outfile::check_target(p, "--timings-out")?;
    }
    // A signal while connecting ends the run too, --out as it was.
    super::outfile::catch_interrupts();
    let mut conn = Conn::connect(
        &url,
        a.token.as_deref(),
        Duration::from_secs_f64(a.timeout_s),
    )?;
    match conn.recv()? {
        Incoming::Msg(m) if matches!(*m, ServerMessage::SessionCreated { .. }) => {}
        Incoming::Msg(m) => match server_error(&m) {
            Some(e) => return Err(e),
            None => bail!("expected session.created from {url}, got {}", m.to_json()),
        },
        Incoming::Audio(..) => bail!("expected session.created from {url}, got audio"),
        Incoming::Closed(why) => bail!("{url}: {why} before the session started"),
    }
    conn.send(&ClientMessage::SessionUpdate {
        session: Box::new(SessionUpdate {
            voice: a.voice.clone(),
            language: a.language.clone(),
            instruct: a.instruct.clone(),
            sample_rate: a.sample_rate,
            format: Some(format),
            audio_transport: Some(protocol::AudioTransport::Binary),
            chunking: (a.chunking.is_some() || a.max_chars.is_some()).then(|| ChunkingUpdate {
                mode: a.chunking,
                max_chars: a.max_chars,
                // The clause minimum may not exceed it (the server's check).
                min_chars: a
                    .max_chars
                    .filter(|&n| n < protocol::Chunking::default().min_chars),
                ..ChunkingUpdate::default()
            }),
            greedy: a.greedy.then_some(true),
            seed: a.seed,
            max_frames: a.max_frames,
            text_mode,
            timings: a.timings_out.is_some().then_some(true),
            prebuffer_ms: declared_prebuffer(&a.play),
            ..SessionUpdate::default()
        }),
    })?;
    let session: SessionSettings = loop {
        match conn.recv()? {
            Incoming::Msg(m) => match *m {
                ServerMessage::SessionUpdated { session } => break session,
                ref other => {
                    if let Some(e) = server_error(other) {
                        return Err(e.context("the server refused the session settings"));
                    }
                }
            },
            Incoming::Audio(..) => bail!("audio from {url} before any text was sent"),
            Incoming::Closed(why) => bail!("{url}: {why} while setting up the session"),
        }
    };
    let rate = session.sample_rate;
    let encoded = session.format.is_encoded();
    let mut writer = match a.out.as_deref().map(Destination::open).transpose()? {
        None => None,
        Some(o) if encoded || raw_out => Some(Writer::Bytes(BytesWriter::open(o))),
        Some(o) => {
            let wav = if session.format == AudioFormat::F32 {
                WavFormat::F32
            } else {
                WavFormat::Pcm16
            };
            Some(Writer::Wav(AudioWriter::open(
                o,
                rate,
                Container::Wav(wav),
            )?))
        }
    };
    eprintln!(
        "session: voice {}, language {}, {} Hz {} (model {} Hz)",
        session.voice,
        session.language,
        rate,
        code_name(&session.format),
        session.native_sample_rate
    );
    // Before the text goes out, so the first frame plays at once.
    let mut player = Playback::open(&a.play, rate, expected_speech(&text))?;

    let t_send = Instant::now();
    let mut timed = subtitles::Timed::default();
    let spoken_text = text.clone();
    conn.send(&ClientMessage::ContextAppend {
        context_id: CONTEXT_ID.into(),
        text,
    })?;
    conn.send(&ClientMessage::ContextEnd {
        context_id: CONTEXT_ID.into(),
    })?;
    let mut stream_id = None;
    let mut next_seq = 0u32;
    let mut first_audio = None;
    let mut received = 0u64;
    let metrics: ContextMetrics = loop {
        match conn.recv()? {
            Incoming::Msg(m) => match *m {
                ServerMessage::ContextStarted {
                    context_id,
                    stream_id: id,
                    ..
                } if context_id == CONTEXT_ID => stream_id = Some(id),
                ServerMessage::ContextDone {
                    context_id,
                    metrics,
                    ..
                } if context_id == CONTEXT_ID => break metrics,
                ServerMessage::Timings {
                    context_id,
                    words,
                    chars,
                    ..
                } if context_id == CONTEXT_ID => timed.add_message(&words, &chars),
                ref other => {
                    if let Some(e) = server_error(other) {
                        return Err(e);
                    }
                }
            },
            Incoming::Audio(h, payload) => {
                if Some(h.stream_id) != stream_id {
                    bail!(
                        "audio for stream {} but this context is stream {stream_id:?}",
                        h.stream_id
                    );
                }
                if h.seq != next_seq {
                    bail!("audio frame {} arrived where {next_seq} was due", h.seq);
                }
                if h.sample_rate != rate {
                    bail!("audio at {} Hz in a session at {rate} Hz", h.sample_rate);
                }
                if h.format != session.format {
                    bail!("{} audio in a {} session", h.format, session.format);
                }
                next_seq += 1;
                if first_audio.is_none() && !payload.is_empty() {
                    first_audio = Some(t_send.elapsed());
                }
                let s = samples(&payload, h.format);
                received += if encoded {
                    payload.len() as u64
                } else {
                    s.len() as u64
                };
                match &mut writer {
                    Some(Writer::Wav(w)) => w.write(&s)?,
                    Some(Writer::Bytes(w)) => w.write(&payload)?,
                    None => {}
                }
                if let Some(p) = &mut player {
                    p.write(&s)?;
                }
            }
            Incoming::Closed(why) => bail!("{url}: {why} before the audio was complete"),
        }
    };
    conn.close();
    if let Some(p) = player {
        p.finish()?;
    }
    match writer {
        Some(Writer::Wav(w)) => w.finish()?,
        Some(Writer::Bytes(w)) => w.finish()?,
        None => {}
    }
    if let Some(p) = &a.timings_out {
        subtitles::write(p, &spoken_text, metrics.audio_s, &timed)?;
    }
    let unit = if encoded {
        format!("{} bytes", session.format)
    } else {
        "samples".to_string()
    };
    eprintln!(
        "{}",
        summary(&metrics, received, &unit, rate, next_seq, first_audio)
    );
    for w in warnings(&metrics) {
        eprintln!("{w}");
    }
    if a.json {
        let line = serde_json::to_string(&metrics)?;
        if a.out.as_deref() == Some(std::path::Path::new("-")) {
            eprintln!("metrics: {line}");
        } else {
            println!("{line}");
        }
    }
    Ok(())
}

/// The one-line human report of a finished context.
fn summary(
    m: &ContextMetrics,
    received: u64,
    unit: &str,
    rate: u32,
    messages: u32,
    first_audio: Option<Duration>,
) -> String {
    let ms = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0} ms"));
    format!(
        "done: {:.2} s of audio ({received} {unit} at {rate} Hz in {messages} messages, {} segment(s)); server: ttfp {}, e2el {}, rtf {}; client: first audio after {}",
        m.audio_s,
        m.segments,
        ms(m.ttfp_ms),
        ms(m.e2el_ms),
        m.rtf.map_or("n/a".to_string(), |v| format!("{v:.3}")),
        first_audio.map_or("n/a".to_string(), |d| format!("{:.0} ms", d.as_secs_f64() * 1e3)),
    )
}

/// What in the metrics a user must not miss: audio that would stutter when
/// played at the server's pace, an incomplete or non-finite stream.
fn warnings(m: &ContextMetrics) -> Vec<String> {
    let mut out = Vec::new();
    if m.continuity_ok == Some(false) {
        let need = m.required_prebuffer_ms.map_or(String::new(), |p| {
            format!("; about {p:.0} ms of prebuffer (--prebuffer-ms) would have hidden it")
        });
        out.push(format!(
            "WARNING: continuity_ok: false — the server produced audio slower than real time: played as it arrived it stutters ({} underruns, {} stalled){need}",
            m.underruns.map_or("?".to_string(), |u| u.to_string()),
            m.stall_ms.map_or("?".to_string(), |s| format!("{s:.0} ms")),
        ));
    }
    if m.complete == Some(false) {
        out.push("WARNING: complete: false — the server reports the audio as incomplete".into());
    }
    if !m.finite {
        out.push("WARNING: finite: false — the server's audio held non-finite samples".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{declared_prebuffer, realtime_url, warnings, ContextMetrics, PlayArgs};

    #[test]
    fn a_fixed_playback_prebuffer_is_declared_to_the_server() {
        let play = |play, prebuffer_ms| PlayArgs {
            play,
            prebuffer_ms,
            ..PlayArgs::default()
        };
        assert_eq!(declared_prebuffer(&play(true, Some(400))), Some(400.0));
        assert_eq!(
            declared_prebuffer(&play(true, Some(60_000))),
            Some(10_000.0)
        );
        assert_eq!(declared_prebuffer(&play(true, None)), None, "measured");
        assert_eq!(
            declared_prebuffer(&play(false, Some(400))),
            None,
            "not played"
        );
    }

    #[test]
    fn continuity_ok_false_is_a_loud_warning_and_a_clean_stream_none() {
        let clean = ContextMetrics {
            continuity_ok: Some(true),
            complete: Some(true),
            finite: true,
            ..ContextMetrics::default()
        };
        assert!(warnings(&clean).is_empty());
        let stutter = ContextMetrics {
            continuity_ok: Some(false),
            underruns: Some(3),
            stall_ms: Some(420.0),
            required_prebuffer_ms: Some(510.0),
            ..clean
        };
        let w = warnings(&stutter);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("WARNING: continuity_ok: false"),
            "{}",
            w[0]
        );
        assert!(
            w[0].contains("3 underruns") && w[0].contains("510 ms"),
            "{}",
            w[0]
        );
    }

    #[test]
    fn urls_get_the_realtime_path_and_a_ws_scheme() {
        for (input, want) in [
            (
                "ws://127.0.0.1:8080/v1/realtime",
                "ws://127.0.0.1:8080/v1/realtime",
            ),
            ("http://127.0.0.1:8080", "ws://127.0.0.1:8080/v1/realtime"),
            ("http://127.0.0.1:8080/", "ws://127.0.0.1:8080/v1/realtime"),
            ("HTTP://localhost:9", "ws://localhost:9/v1/realtime"),
            ("127.0.0.1:8080", "ws://127.0.0.1:8080/v1/realtime"),
            ("http://h:1?token=x", "ws://h:1/v1/realtime?token=x"),
            ("ws://h:1/custom/path?a=b#frag", "ws://h:1/custom/path?a=b"),
            ("ws://[::1]:8080", "ws://[::1]:8080/v1/realtime"),
        ] {
            assert_eq!(realtime_url(input).unwrap(), want, "{input}");
        }
        for (bad, needle) in [
            ("wss://h:1", "TLS"),
            ("https://h:1", "TLS"),
            ("ftp://h:1", "unsupported scheme"),
            ("http://", "no host"),
            ("http:///v1/realtime", "no host"),
        ] {
            let e = realtime_url(bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }
}
