//! `--out` never destroys an existing file: a run that fails (bad flag,
//! unknown speaker, bad codes, no server) or is interrupted (SIGINT,
//! SIGTERM) leaves the previous file byte for byte and no temporary beside
//! it; a run that succeeds replaces it with a finalized WAV.
//!
//! Each test owns a directory holding one "good" file; afterwards that
//! directory must hold exactly that file, unchanged. Interruptions are sent
//! with `kill -INT` / `kill -TERM` (no signal crate in the tree) once the
//! run has staged its output, i.e. while it is synthesizing.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const GOOD: &[u8] = b"RIFF\x24\x00\x00\x00WAVE a good file the user wants to keep";

fn fixture() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-a").to_string()
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.env_remove("TTS_RT_MODEL").env_remove("TTS_RT_TOKEN");
    c
}

/// A fresh directory with `good.wav` in it; returns (dir, path of good.wav).
fn setup(name: &str) -> (PathBuf, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("cli_outfile")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.wav");
    std::fs::write(&good, GOOD).unwrap();
    (dir, good)
}

/// The directory holds `good.wav` unchanged and nothing else.
fn assert_untouched(dir: &Path, good: &Path, context: &str) {
    assert_eq!(
        std::fs::read(good).unwrap(),
        GOOD,
        "{context}: the existing --out file was changed"
    );
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["good.wav"], "{context}: left behind {names:?}");
}

fn fails(c: &mut Command, needle: &str) {
    let o = c.stdin(Stdio::null()).output().expect("run tts-rt");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains(needle),
        "stderr should mention {needle:?}: {err}"
    );
}

fn speak_args<'a>(good: &'a Path, fixture: &'a str) -> Vec<&'a str> {
    vec![
        "speak",
        "Hello there.",
        "--model",
        fixture,
        "--max-frames",
        "8",
        "--out",
        good.to_str().unwrap(),
    ]
}

#[test]
fn out_file_survives_unknown_speaker() {
    let (dir, good) = setup("unknown_speaker");
    let fx = fixture();
    let mut args = speak_args(&good, &fx);
    args.extend(["--speaker", "nobody"]);
    fails(bin().args(&args), "nobody");
    assert_untouched(&dir, &good, "speak --speaker nobody");
    args.push("--stream");
    fails(bin().args(&args), "nobody");
    assert_untouched(&dir, &good, "speak --stream --speaker nobody");
}

#[test]
fn out_file_survives_bad_top_p() {
    let (dir, good) = setup("bad_top_p");
    let fx = fixture();
    for extra in [
        &["--top-p", "5"][..],
        &["--top-p", "5", "--greedy"],
        &["--cp-top-p", "0"],
        &["--temperature=-1"],
        &["--repetition-penalty", "nan"],
    ] {
        let mut args = speak_args(&good, &fx);
        args.extend(extra);
        fails(bin().args(&args), extra[0].split('=').next().unwrap());
        assert_untouched(&dir, &good, &format!("speak {extra:?}"));
    }
}

#[test]
fn out_file_survives_bad_codes() {
    let (dir, good) = setup("bad_codes");
    let codes = dir.parent().unwrap().join("bad_codes.json");
    for (bad, needle) in [
        ("[[1, 2, 3]]", "needs 8 per frame"),
        ("[]", "no frames"),
        ("not json", "expected a JSON array"),
    ] {
        std::fs::write(&codes, bad).unwrap();
        let mut c = bin();
        c.args(["decode", "--model", &fixture(), "--codes"])
            .arg(&codes)
            .arg("--out")
            .arg(&good);
        fails(&mut c, needle);
        assert_untouched(&dir, &good, &format!("decode {bad}"));
    }
}

#[test]
fn out_file_survives_unreachable_server() {
    let (dir, good) = setup("unreachable_server");
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut c = bin();
    c.args(["client", &format!("ws://{dead}"), "Hello.", "--out"])
        .arg(&good);
    fails(&mut c, "cannot connect");
    assert_untouched(&dir, &good, "client to a dead address");
}

/// Kills the child when a test ends early.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill {sig} {pid}");
}

/// Waits until `dir` holds a staged temporary (the run is writing its
/// output) or `good` changed (the old behaviour: truncated at open).
fn wait_for_staging(dir: &Path, good: &Path, child: &mut Child) {
    let t0 = Instant::now();
    loop {
        let staged = std::fs::read_dir(dir)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().starts_with('.'));
        if staged || std::fs::read(good).unwrap_or_default() != GOOD {
            return;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("tts-rt ended ({st}) before it staged its output");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no output staged within 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait(child: &mut Child, within: Duration) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        assert!(
            t0.elapsed() < within,
            "tts-rt still running {within:?} after the signal"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `c`, waits until it writes, sends `sig`, and checks the exit code
/// and the directory.
fn interrupt(c: &mut Command, dir: &Path, good: &Path, sig: &str, code: i32) {
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tts-rt");
    let mut g = Guard(child);
    wait_for_staging(dir, good, &mut g.0);
    // Well into synthesis, not at its first instruction.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        g.0.try_wait().unwrap().is_none(),
        "tts-rt finished before the signal; give it more work"
    );
    signal(g.0.id(), sig);
    let st = wait(&mut g.0, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut g.0.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(st.code(), Some(code), "{sig}: {st}; stderr: {err}");
    assert!(err.contains("left as it was"), "{err}");
    assert_untouched(dir, good, sig);
}

/// A long utterance: thousands of frames, no early stop.
fn long_speak(good: &Path, extra: &[&str]) -> Command {
    let mut c = bin();
    c.args([
        "speak",
        "A long interrupted sentence.",
        "--model",
        &fixture(),
        "--max-frames",
        "30000",
        "--ignore-eos",
        "--out",
    ])
    .arg(good)
    .args(extra);
    c
}

#[test]
fn out_file_survives_sigint_during_speak() {
    let (dir, good) = setup("sigint_speak");
    interrupt(&mut long_speak(&good, &[]), &dir, &good, "-INT", 130);
}

#[test]
fn out_file_survives_sigint_during_speak_stream() {
    let (dir, good) = setup("sigint_speak_stream");
    interrupt(
        &mut long_speak(&good, &["--stream"]),
        &dir,
        &good,
        "-INT",
        130,
    );
    // SIGTERM (a service manager, `timeout`) behaves the same.
    interrupt(
        &mut long_speak(&good, &["--stream"]),
        &dir,
        &good,
        "-TERM",
        143,
    );
}

#[test]
fn out_file_survives_sigint_during_decode() {
    let (dir, good) = setup("sigint_decode");
    // Enough frames that the decode runs for a while on any machine.
    let frames = 60_000;
    let frame: Vec<String> = (0..8).map(|q| (q * 37 % 1024).to_string()).collect();
    let frame = format!("[{}]", frame.join(","));
    let json = format!("[{}]", vec![frame; frames].join(","));
    let codes = dir.parent().unwrap().join("sigint_decode_codes.json");
    std::fs::write(&codes, json).unwrap();
    let mut c = bin();
    c.args(["decode", "--model", &fixture(), "--codes"])
        .arg(&codes)
        .arg("--out")
        .arg(&good);
    interrupt(&mut c, &dir, &good, "-INT", 130);
    let _ = std::fs::remove_file(&codes);
}

/// A `tts-rt serve` on loopback (tiny-a, port 0), killed on drop.
struct Serve {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve() -> Serve {
    let mut child = bin()
        .args(["serve", "--model", &fixture(), "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tts-rt serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
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
    while common::http_get(s.addr, "/ready").map_or(0, |(st, _)| st) != 200 {
        assert!(t0.elapsed() < Duration::from_secs(60), "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    s
}

#[test]
fn out_file_survives_sigint_during_client() {
    let (dir, good) = setup("sigint_client");
    let s = serve();
    let mut c = bin();
    c.args([
        "client",
        &format!("ws://{}", s.addr),
        "A long interrupted sentence, streamed.",
        "--max-frames",
        "2000",
        "--out",
    ])
    .arg(&good);
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tts-rt client");
    let mut g = Guard(child);
    wait_for_staging(&dir, &good, &mut g.0);
    // Freeze the server mid-stream: the client is now waiting for audio
    // with its output staged, however fast the synthesis is.
    signal(s.child.id(), "-STOP");
    std::thread::sleep(Duration::from_millis(200));
    assert!(g.0.try_wait().unwrap().is_none(), "client finished early");
    signal(g.0.id(), "-INT");
    let st = wait(&mut g.0, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut g.0.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(st.code(), Some(130), "{st}; stderr: {err}");
    assert_untouched(&dir, &good, "client -INT");
    drop(s);
}

#[test]
fn out_file_is_replaced_by_a_complete_run() {
    let (dir, good) = setup("replaced");
    let fx = fixture();
    for extra in [&[][..], &["--stream"]] {
        let mut args = speak_args(&good, &fx);
        args.extend(extra);
        let o = bin().args(&args).stdin(Stdio::null()).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let r = hound::WavReader::open(&good).unwrap();
        assert!(r.duration() > 0, "{extra:?}: empty WAV");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(names.len(), 1, "{extra:?}: a temporary was left");
        std::fs::write(&good, GOOD).unwrap();
    }
}

/// tiny-a with a FIFO nobody writes in place of its weights: a load that
/// blocks for as long as the test wants (a hung mount's stand-in).
fn blocked_checkpoint(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("cli_outfile_ckpt")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(fixture()).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "model.safetensors" {
            std::os::unix::fs::symlink(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
    let st = Command::new("mkfifo")
        .arg(dir.join("model.safetensors"))
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo");
    dir
}

/// Issue 28: Ctrl-C during `speak`'s model load was ignored (the handler
/// came only with the staged output, after the load) and the run then
/// replaced `--out`. SIGINT and SIGTERM during the load now end the run at
/// once, 130 / 143, the existing file as it was — also when the shell that
/// started it left them ignored (a script's background job), as the handler
/// takes them whatever their inherited disposition.
#[test]
fn ctrl_c_during_speaks_model_load_stops_it_and_leaves_out_alone() {
    let ckpt = blocked_checkpoint("speak_load");
    for (how, sig, code) in [
        ("plain", "-INT", 130),
        ("plain", "-TERM", 143),
        ("inherited-ignore", "-INT", 130),
        ("inherited-ignore", "-TERM", 143),
    ] {
        let (dir, good) = setup(&format!("load_{how}{sig}"));
        let mut c = if how == "plain" {
            bin()
        } else {
            // A shell's `trap '' INT TERM` is inherited through exec.
            let mut c = Command::new("sh");
            c.args(["-c", "trap '' INT TERM; exec \"$0\" \"$@\""])
                .arg(env!("CARGO_BIN_EXE_tts-rt"))
                .env_remove("TTS_RT_MODEL");
            c
        };
        c.args(["speak", "Hello there.", "--model"])
            .arg(&ckpt)
            .arg("--out")
            .arg(&good);
        let child = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tts-rt");
        let mut g = Guard(child);
        // Well into the load (blocked on the FIFO).
        std::thread::sleep(Duration::from_millis(700));
        assert!(
            g.0.try_wait().unwrap().is_none(),
            "{how} {sig}: tts-rt ended before the signal"
        );
        signal(g.0.id(), sig);
        let t0 = Instant::now();
        let st = wait(&mut g.0, Duration::from_secs(10));
        let mut err = String::new();
        std::io::Read::read_to_string(&mut g.0.stderr.take().unwrap(), &mut err).unwrap();
        println!(
            "SIG{} during speak's model load ({how}): {st} in {:?}, --out untouched",
            sig.trim_start_matches('-'),
            t0.elapsed()
        );
        assert_eq!(st.code(), Some(code), "{how} {sig}: {st}; stderr: {err}");
        assert!(err.contains("interrupted"), "{how} {sig}: {err}");
        assert_untouched(&dir, &good, &format!("{how} {sig} during the load"));
    }
    let _ = std::fs::remove_dir_all(&ckpt);
}

/// What a file's first bytes say it is (enough to tell the formats apart).
fn sniff(bytes: &[u8]) -> &'static str {
    match bytes {
        [b'R', b'I', b'F', b'F', ..] => "wav",
        [b'f', b'L', b'a', b'C', ..] => "flac",
        [b'O', b'g', b'g', b'S', ..] => "ogg",
        [b'I', b'D', b'3', ..] => "mp3",
        // ADTS: 12-bit sync, layer 00 (MPEG audio frames have a layer ≠ 00).
        [0xFF, b, ..] if b & 0xF6 == 0xF0 => "aac",
        [0xFF, b, ..] if b & 0xE0 == 0xE0 => "mp3",
        _ => "other",
    }
}

/// Item 1 of "the first five minutes": `speak --out x.mp3` wrote WAV bytes
/// into x.mp3. The extension picks the format, offline and streamed.
#[test]
fn speak_out_picks_the_format_from_the_extension() {
    let (dir, _good) = setup("out_by_extension");
    let fx = fixture();
    for stream in [false, true] {
        let mut pcm_len = 0;
        for (name, want) in [
            ("x.wav", "wav"),
            ("x.mp3", "mp3"),
            ("x.opus", "ogg"),
            ("x.ogg", "ogg"),
            ("x.flac", "flac"),
            ("x.aac", "aac"),
            ("x.pcm", "other"),
            ("x.raw", "other"),
            ("X.MP3", "mp3"),
            ("x.ulaw", "other"),
        ] {
            let path = dir.join(name);
            let mut args = speak_args(&path, &fx);
            if stream {
                args.push("--stream");
            }
            let o = bin().args(&args).stdin(Stdio::null()).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "{name} (stream {stream}): {err}");
            let bytes = std::fs::read(&path).unwrap();
            assert!(!bytes.is_empty(), "{name}");
            assert_eq!(sniff(&bytes), want, "{name} (stream {stream})");
            if name.ends_with(".pcm") || name.ends_with(".raw") {
                // Headerless 16-bit samples: 8 frames of 24 kHz audio.
                assert_eq!(bytes.len() % 2, 0, "{name}");
                assert!(bytes.len() > 1000, "{name}: {}", bytes.len());
                pcm_len = bytes.len();
            }
            if name == "x.ulaw" {
                // 8 kHz, one byte a sample: a sixth of the 16-bit 24 kHz size.
                let third = pcm_len / 6;
                assert!(
                    bytes.len().abs_diff(third) <= 2,
                    "{} vs {third}",
                    bytes.len()
                );
            }
            std::fs::remove_file(&path).unwrap();
        }
    }
    // `-` stays WAV.
    let mut args = speak_args(Path::new("-"), &fx);
    args.retain(|a| *a != "-");
    args.push("-");
    let o = bin().args(&args).stdin(Stdio::null()).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(sniff(&o.stdout), "wav");
}

/// An extension `--out` cannot write is refused before the model loads,
/// naming it and the ones it can; an existing file is left as it was.
#[test]
fn speak_out_refuses_an_extension_it_cannot_write() {
    let (dir, good) = setup("out_bad_extension");
    for name in ["x.m4a", "x.txt"] {
        let target = dir.join(name);
        for cmd in [
            &["speak", "Hello.", "--model", "/nonexistent-model"][..],
            &[
                "decode",
                "--codes",
                "/nonexistent.json",
                "--model",
                "/nonexistent-model",
            ],
        ] {
            let ext = name.rsplit('.').next().unwrap();
            let o = bin()
                .args(cmd)
                .arg("--out")
                .arg(&target)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{err}");
            assert!(err.contains(&format!(".{ext}")), "{err}");
            for can in [".wav", ".mp3", ".opus", ".ogg", ".flac", ".aac", ".pcm"] {
                assert!(err.contains(can), "{cmd:?} {name}: {err}");
            }
            assert!(!err.contains("nonexistent"), "checked first: {err}");
            assert_untouched(&dir, &good, name);
        }
    }
    // --wav-format f32 describes a WAV; it cannot apply to an MP3.
    let target = dir.join("x.mp3");
    let o = bin()
        .args(["speak", "Hello.", "--model", "/nonexistent-model"])
        .args(["--wav-format", "f32", "--out"])
        .arg(&target)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--wav-format") && err.contains(".mp3"),
        "{err}"
    );
    assert_untouched(&dir, &good, "--wav-format f32 x.mp3");
}
