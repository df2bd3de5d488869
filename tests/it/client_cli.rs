//! `tts-rt client` against a `tts-rt serve` this test starts (tiny-a fixture,
//! loopback, port 0, a token): its `--out` WAV equals what `speak` writes
//! for the same greedy request and what `POST /v1/audio/speech` returns;
//! `--play` reaches an ALSA file device (set up as in tests/it/play_cli.rs);
//! a wrong token, a bad voice and a dead address fail with clear errors.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const TOKEN: &str = "client-test-token";
const TEXT: &str = "Hello from the client test.";
const FRAMES: &str = "16";

fn fixture() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-a").to_string()
}

fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("client_cli");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let conf = format!(
            "pcm.client_sink {{\n  type file\n  slave.pcm {{ type null }}\n  file \"{}\"\n  format \"raw\"\n  hint {{ show on description \"tts-rt client sink\" }}\n}}\n",
            dir.join("client_sink.raw").display()
        );
        std::fs::write(dir.join("asound.conf"), conf).unwrap();
        dir
    })
}

/// Kills the server when the test ends, pass or fail.
struct Serve {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    common::http_get(addr, path).map(|(status, _)| status)
}

/// A ready server for one test (each test owns its own: a static one would
/// never be dropped, leaving the process running after the tests).
fn server() -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args([
            "serve",
            "--model",
            &fixture(),
            "--port",
            "0",
            "--token",
            TOKEN,
            // speak's default for a file, so the two outputs compare
            // sample for sample (serve's own default is `fast`).
            "--precision",
            "f32",
        ])
        .env_remove("TTS_RT_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tts-rt serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // From here on the guard kills the server if an assertion fails.
    let mut s = Serve {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    s.addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let t0 = Instant::now();
    while get(s.addr, "/ready").unwrap_or(0) != 200 {
        assert!(t0.elapsed() < Duration::from_secs(60), "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    s
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.env_remove("TTS_RT_MODEL")
        .env_remove("TTS_RT_TOKEN")
        .env("ALSA_CONFIG_PATH", dir().join("asound.conf"))
        .stdin(Stdio::null());
    c
}

fn run(c: &mut Command) -> (Output, String) {
    let o = c.output().expect("run tts-rt");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!err.contains("panicked"), "panicked: {err}");
    (o, err)
}

/// `client URL TEXT` with the token and the greedy request of `speak`
/// (voice ryan unless `extra` names one).
fn client(url: &str, extra: &[&str]) -> (Output, String) {
    let mut args = vec![
        "client",
        url,
        TEXT,
        "--token",
        TOKEN,
        "--greedy",
        "--max-frames",
        FRAMES,
    ];
    if !extra.contains(&"--voice") {
        args.extend_from_slice(&["--voice", "ryan"]);
    }
    args.extend_from_slice(extra);
    run(bin().args(&args))
}

fn wav_i16(path: &Path) -> (u32, Vec<i16>) {
    let mut r = hound::WavReader::open(path).unwrap();
    assert_eq!(r.spec().sample_format, hound::SampleFormat::Int);
    let rate = r.spec().sample_rate;
    (rate, r.samples::<i16>().map(|s| s.unwrap()).collect())
}

fn wav_f32(path: &Path) -> (u32, Vec<f32>) {
    let mut r = hound::WavReader::open(path).unwrap();
    assert_eq!(r.spec().sample_format, hound::SampleFormat::Float);
    let rate = r.spec().sample_rate;
    (rate, r.samples::<f32>().map(|s| s.unwrap()).collect())
}

/// `speak` through the streaming engine, same request, written as `format`.
fn speak(out: &Path, format: &str) {
    speak_with(out, format, &[]);
}

/// [`speak`] with more `speak` flags (e.g. `--text-streaming`).
fn speak_with(out: &Path, format: &str, extra: &[&str]) {
    let (o, err) = run(bin()
        .args([
            "speak",
            TEXT,
            "--model",
            &fixture(),
            "--speaker",
            "ryan",
            "--greedy",
            "--max-frames",
            FRAMES,
            "--stream",
            "--wav-format",
            format,
            "--out",
            out.to_str().unwrap(),
        ])
        .args(extra));
    assert!(o.status.success(), "speak: {err}");
}

/// `POST /v1/audio/speech` with `response_format: pcm`: raw i16 samples.
fn http_pcm(addr: SocketAddr) -> Vec<i16> {
    let body = format!(
        r#"{{"input":"{TEXT}","voice":"ryan","response_format":"pcm","greedy":true,"max_frames":{FRAMES}}}"#
    );
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "POST /v1/audio/speech HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = Vec::new();
    s.read_to_end(&mut r).unwrap();
    let split = r.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&r[..split]).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let mut body = &r[split + 4..];
    let mut pcm = Vec::new();
    if head.contains("transfer-encoding: chunked") {
        loop {
            let eol = body.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&body[..eol]).unwrap().trim(), 16)
                .unwrap();
            if n == 0 {
                break;
            }
            pcm.extend_from_slice(&body[eol + 2..eol + 2 + n]);
            body = &body[eol + 2 + n + 2..];
        }
    } else {
        pcm.extend_from_slice(body);
    }
    pcm.chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect()
}

#[test]
fn client_out_equals_speak_and_the_http_api() {
    let s = server();
    // pcm16 over an http:// URL (the realtime path is derived).
    let out = dir().join("client_pcm16.wav");
    let (o, err) = client(
        &format!("http://{}", s.addr),
        &["--out", out.to_str().unwrap(), "--json"],
    );
    assert!(o.status.success(), "client: {err}");
    let (rate, got) = wav_i16(&out);
    let want_path = dir().join("speak_pcm16.wav");
    speak(&want_path, "pcm16");
    let (want_rate, want) = wav_i16(&want_path);
    assert_eq!(rate, want_rate);
    assert!(!got.is_empty());
    assert_eq!(got, want, "client WAV differs from speak's");
    assert_eq!(http_pcm(s.addr), want, "HTTP pcm differs from speak's");
    // The done-event metrics are reported.
    assert!(err.contains("ttfp"), "{err}");
    // --json: the full metrics as one line on stdout, not in the stderr
    // report.
    assert!(!err.contains("metrics: "), "{err}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let m: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON line ({e}): {stdout}"));
    assert!(m["ttfp_ms"].as_f64().is_some(), "{m}");
    assert_eq!(m["output_samples"].as_u64(), Some(got.len() as u64), "{m}");
    assert_eq!(m["complete"], true, "{m}");

    // f32 over the full ws:// URL: bit-exact with speak's f32 WAV.
    let out = dir().join("client_f32.wav");
    let (o, err) = client(
        &format!("ws://{}/v1/realtime", s.addr),
        &["--format", "f32", "--out", out.to_str().unwrap()],
    );
    assert!(o.status.success(), "client f32: {err}");
    let want_path = dir().join("speak_f32.wav");
    speak(&want_path, "f32");
    assert_eq!(wav_f32(&out), wav_f32(&want_path));

    // The streaming text mode: what `speak --text-streaming` gives.
    let out = dir().join("client_text_streaming.wav");
    let (o, err) = client(
        &format!("http://{}", s.addr),
        &[
            "--format",
            "f32",
            "--text-mode",
            "streaming",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "client --text-mode streaming: {err}");
    let prefill = wav_f32(&dir().join("speak_f32.wav"));
    let want_path = dir().join("speak_text_streaming.wav");
    speak_with(&want_path, "f32", &["--text-streaming"]);
    let got = wav_f32(&out);
    assert_eq!(
        got,
        wav_f32(&want_path),
        "client streaming text differs from speak's"
    );
    assert_ne!(got, prefill, "the text mode made no difference");
}

#[test]
fn client_plays_on_a_device_at_another_rate() {
    let s = server();
    let raw = dir().join("client_sink.raw");
    let _ = std::fs::remove_file(&raw);
    let out = dir().join("client_16k.wav");
    let (o, err) = client(
        &s.addr.to_string(),
        &[
            "--sample-rate",
            "16000",
            "--format",
            "f32",
            "--play",
            "--device",
            "client_sink",
            "--device-rate",
            "48000",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "client --play: {err}");
    assert!(err.contains("resampled from 16000 Hz"), "{err}");
    let (rate, x) = wav_f32(&out);
    assert_eq!(rate, 16_000, "--out is at the session rate");
    let want: Vec<f32> = tts_audio::StreamResampler::new(16_000, 48_000)
        .unwrap()
        .process_all(&x)
        .into_iter()
        .map(|s| s.clamp(-1.0, 1.0))
        .collect();
    // The sink is f32 (preferred format) at 48 kHz; the unpaced null slave
    // starves between frames, inserting exact zeros (skipped here).
    let bytes = std::fs::read(&raw).unwrap();
    let line = err.lines().find(|l| l.starts_with("playing on")).unwrap();
    assert!(line.contains("48000 Hz") && line.contains("f32"), "{line}");
    let ch: usize = line
        .split(", ")
        .nth(1)
        .unwrap()
        .trim_end_matches(" ch")
        .parse()
        .unwrap();
    let got: Vec<f32> = bytes
        .chunks_exact(4 * ch)
        .map(|f| f32::from_le_bytes(f[..4].try_into().unwrap()))
        .filter(|s| *s != 0.0)
        .collect();
    assert_eq!(got.len(), want.len(), "{err}");
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(worst <= 1e-6, "max |device - resampled --out| = {worst}");
    assert!(
        err.contains(&format!("played {} frames", want.len())),
        "{err}"
    );
    assert!(err.contains("underruns"), "{err}");
}

#[test]
fn client_errors_are_clear() {
    let s = server();
    let url = format!("ws://{}/v1/realtime", s.addr);
    let never = dir().join("errors.wav");
    let never = never.to_str().unwrap();
    // Wrong token: the upgrade is refused with 401.
    let (o, err) = run(bin().args(["client", &url, TEXT, "--token", "wrong", "--out", never]));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("401") && err.contains("--token"), "{err}");
    // No token at all.
    let (o, err) = run(bin().args(["client", &url, TEXT, "--out", never]));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("401"), "{err}");
    // A server error event (unknown voice) names the code and the choices.
    let (o, err) = client(&url, &["--voice", "nobody", "--out", never]);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("invalid_voice") && err.contains("nobody") && err.contains("ryan"),
        "{err}"
    );
    // Out-of-range rate: the server's invalid_setting.
    let (o, err) = client(&url, &["--sample-rate", "1000", "--out", never]);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("invalid_setting"), "{err}");
    // Nothing listening.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (o, err) = run(bin().args([
        "client",
        &format!("ws://127.0.0.1:{}", dead.port()),
        TEXT,
        "--out",
        never,
    ]));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot connect"), "{err}");
    // TLS is refused up front.
    let (o, err) = run(bin().args(["client", "wss://example.invalid", TEXT]));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("TLS"), "{err}");
    // None of the failures left a file.
    assert!(!Path::new(never).exists());
}

#[test]
fn client_without_out_or_play_refuses_instead_of_discarding() {
    // Refused before connecting: no server is needed, nothing listens here.
    let (o, err) = run(bin().args(["client", "127.0.0.1:9", TEXT]));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("nothing to do") && err.contains("--out") && err.contains("--play"),
        "{err}"
    );
    assert!(!err.contains("cannot connect"), "{err}");
}

#[test]
fn client_writes_an_encoded_format_to_out_as_that_file() {
    let s = server();
    let url = format!("ws://{}/v1/realtime", s.addr);
    let wav = dir().join("client_ref.wav");
    let (o, err) = client(&url, &["--out", wav.to_str().unwrap()]);
    assert!(o.status.success(), "client pcm16: {err}");
    let (rate, pcm) = wav_i16(&wav);
    for (format, ext, magic) in [
        ("aac", "aac", &[0xFFu8, 0xF1][..]),
        ("mp3", "mp3", &[0xFF][..]),
        ("opus", "opus", &b"OggS"[..]),
        ("flac", "flac", &b"fLaC"[..]),
    ] {
        // symphonia 0.5 has no Opus decoder; ADTS states no length (the
        // strict reference reader takes its size estimate for one), so AAC
        // is checked by walking its frames.
        let decodes = format != "opus" && format != "aac";
        let out = dir().join(format!("client.{ext}"));
        let (o, err) = client(&url, &["--format", format, "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "client {format}: {err}");
        assert!(err.contains(&format!("{format} bytes")), "{err}");
        let bytes = std::fs::read(&out).unwrap();
        assert!(bytes.starts_with(magic), "{format}: {:?}", &bytes[..4]);
        if format == "aac" {
            let (mut pos, mut frames) = (0, 0usize);
            while pos + 7 <= bytes.len() {
                assert_eq!(bytes[pos], 0xFF, "ADTS sync at {pos}");
                pos += ((bytes[pos + 3] as usize & 3) << 11)
                    | ((bytes[pos + 4] as usize) << 3)
                    | (bytes[pos + 5] as usize >> 5);
                frames += 1;
            }
            assert_eq!(pos, bytes.len(), "whole ADTS frames");
            // FDK's 2048-sample delay, then < 1 frame of padding.
            let n = frames * 1024;
            assert!(
                n >= pcm.len() + 2048 && n < pcm.len() + 2048 + 1024,
                "{n} for {}",
                pcm.len()
            );
        }
        if !decodes {
            continue;
        }
        // The saved file decodes (symphonia, through the reference-audio
        // reader) to about the pcm16 context's length.
        let decoded =
            tts_audio::ReferenceAudio::from_path(&out).unwrap_or_else(|e| panic!("{format}: {e}"));
        let want = pcm.len() as f64 / rate as f64;
        assert!(
            (decoded.duration_secs - want).abs() < 0.15,
            "{format}: {} s for {want} s",
            decoded.duration_secs
        );
    }
    // G.711: headerless, one byte per 8 kHz sample.
    let out = dir().join("client.ulaw");
    let (o, err) = client(&url, &["--format", "mulaw", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "client mulaw: {err}");
    assert!(err.contains("8000 Hz"), "{err}");
    let n = std::fs::read(&out).unwrap().len() as f64;
    assert!(
        (n / 8000.0 - pcm.len() as f64 / rate as f64).abs() < 0.01,
        "{n} bytes"
    );
}

#[test]
fn client_refuses_encoded_formats_it_cannot_write_or_play_before_connecting() {
    // Nothing listens at port 9: each refusal comes before any connection.
    let never = dir().join("never.opus");
    let never = never.to_str().unwrap();
    let (o, err) = run(bin().args([
        "client",
        "127.0.0.1:9",
        TEXT,
        "--format",
        "opus_packets",
        "--out",
        never,
    ]));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no container") && err.contains("--format opus"),
        "{err}"
    );
    let (o, err) = run(bin().args(["client", "127.0.0.1:9", TEXT, "--format", "mp3", "--play"]));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--play needs"), "{err}");
    let (o, err) = run(bin().args([
        "client",
        "127.0.0.1:9",
        TEXT,
        "--format",
        "ogg",
        "--out",
        never,
    ]));
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("opus_packets") && err.contains("aac"), "{err}");
    assert!(!Path::new(never).exists());
}

/// Item 2 of "the first five minutes": `client --chunking live` (the
/// README's example) was refused by the server unless `--text-mode
/// streaming` was added. Live chunking now implies it; an explicit
/// `--text-mode prefill` is refused before connecting, naming both flags.
#[test]
fn client_chunking_live_implies_streaming_text_mode() {
    let s = server();
    let url = format!("http://{}", s.addr);
    let out = dir().join("live.wav");
    let out_s = out.to_str().unwrap();
    let (o, err) = client(&url, &["--chunking", "live", "--out", out_s]);
    assert!(o.status.success(), "{err}");
    let (_, samples) = wav_i16(&out);
    assert!(!samples.is_empty());
    let never = dir().join("never-live.wav");
    let (o, err) = run(bin()
        .args(["client", "127.0.0.1:9", TEXT])
        .args(["--chunking", "live", "--text-mode", "prefill", "--out"])
        .arg(&never));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--chunking live") && err.contains("--text-mode prefill"),
        "{err}"
    );
    assert!(!err.contains("connect"), "refused before connecting: {err}");
    assert!(!never.exists());
}

/// `client --help` named a `--max-chars` flag that did not exist: every
/// flag the help names is one the client takes (`chunking.max_chars`).
#[test]
fn client_help_names_only_flags_that_exist() {
    let (o, help) = run(bin().args(["client", "--help"]));
    let help = help + &String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{help}");
    let mut named: Vec<&str> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .collect();
    named.sort();
    named.dedup();
    for flag in named {
        let listed = help
            .lines()
            .any(|l| l.trim_start().starts_with(flag) || l.contains(&format!(", {flag}")));
        assert!(listed, "the help names {flag}, which is not a flag: {help}");
    }
    // And the segment length reaches the server.
    let s = server();
    let url = format!("http://{}", s.addr);
    let out = dir().join("max-chars.wav");
    let (o, err) = client(
        &url,
        &[
            "--chunking",
            "manual",
            "--max-chars",
            "12",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{err}");
    let metrics: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let segments = metrics["segments"].as_u64().unwrap();
    assert!(segments > 1, "{TEXT:?} in 12-character segments: {metrics}");
}

/// Item 1 of "the first five minutes", for `client`: `--out x.mp3` without
/// `--format` wrote a WAV into x.mp3. The extension picks the format (as
/// for `speak`); a `--format` that contradicts it, or an extension no
/// encoder writes, is refused before connecting.
#[test]
fn client_out_picks_the_format_from_the_extension() {
    let s = server();
    let url = format!("http://{}", s.addr);
    let wav = dir().join("by-ext.wav");
    let (o, err) = client(&url, &["--out", wav.to_str().unwrap()]);
    assert!(o.status.success(), "{err}");
    let (_, pcm) = wav_i16(&wav);
    for (name, magic) in [
        ("by-ext.mp3", &[0xFFu8][..]),
        ("by-ext.ogg", &b"OggS"[..]),
        ("by-ext.flac", &b"fLaC"[..]),
    ] {
        let out = dir().join(name);
        let (o, err) = client(&url, &["--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{name}: {err}");
        let bytes = std::fs::read(&out).unwrap();
        assert!(bytes.starts_with(magic), "{name}: {:?}", &bytes[..4]);
    }
    // .pcm: the server's 16-bit samples as they are, no header.
    let raw = dir().join("by-ext.pcm");
    let (o, err) = client(&url, &["--out", raw.to_str().unwrap()]);
    assert!(o.status.success(), "{err}");
    let bytes = std::fs::read(&raw).unwrap();
    let samples: Vec<i16> = bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert_eq!(samples, pcm);
    // Refused before connecting (nothing listens at port 9).
    for (args, needles) in [
        (
            &["--format", "mp3", "--out", "x.wav"][..],
            &["--format mp3", ".wav"][..],
        ),
        (&["--out", "x.m4a"], &[".m4a", ".mp3", ".flac"]),
        (
            &["--format", "f32", "--out", "x.pcm"],
            &["--format f32", ".pcm"],
        ),
    ] {
        let (o, err) = run(bin()
            .current_dir(dir())
            .args(["client", "127.0.0.1:9", TEXT])
            .args(args));
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{args:?}: {err}");
        }
        assert!(!err.contains("connect"), "{args:?}: {err}");
    }
}

#[test]
fn client_writes_the_servers_timings_as_subtitles() {
    let s = server();
    let out = dir().join("client_timed.wav");
    for name in ["client_timed.json", "client_timed.vtt"] {
        let timings = dir().join(name);
        let (o, err) = client(
            &format!("http://{}", s.addr),
            &[
                "--out",
                out.to_str().unwrap(),
                "--timings-out",
                timings.to_str().unwrap(),
            ],
        );
        assert!(o.status.success(), "client: {err}");
        let body = std::fs::read_to_string(&timings).unwrap();
        if name.ends_with(".json") {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            let words: Vec<&str> = v["words"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["text"].as_str().unwrap())
                .collect();
            assert_eq!(words, TEXT.split_whitespace().collect::<Vec<_>>());
            let chars: String = v["characters"]["chars"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            assert_eq!(chars, TEXT);
        } else {
            assert!(
                body.starts_with("WEBVTT\n\n") && body.contains(" --> "),
                "{body}"
            );
        }
    }
}
