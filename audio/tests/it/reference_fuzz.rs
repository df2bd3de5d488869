//! Reference audio from untrusted bytes (issue 28, "No client can take the
//! others down"): mutated clips of every container and codec the decoder
//! accepts, and crafted headers that once asked for gigabytes, must each
//! come back as a clip or a clean refusal: never a panic out of
//! `from_bytes`, never an allocation the file did not bound.
//!
//! The bound is enforced by this binary's allocator ([`Counting`], the
//! test binary's global allocator): a single request past
//! [`MAX_ALLOCATION`] is refused (the process then aborts with "memory
//! allocation of N bytes failed", after naming the case), and each case's
//! peak growth in live bytes must stay under [`MAX_CASE_GROWTH`]. Each test
//! here runs in a process of its own (`alone!`, where the bound is armed:
//! the binary's other tests only get counted) and takes a lock, so one
//! case's peak is its own.
//!
//! Seeds: the committed FLAC, MP3 (with and without a Xing header; both
//! carry an ID3v2.4 tag), OGG/Vorbis, OGG/Opus, WebM/Opus and M4A/AAC fixtures
//! (tests/fixtures/audio, tools/make_audio_fixtures.sh), WAVs written here
//! with hound (8-bit, 16-bit, 24-bit extensible, 32-bit float), an ADTS AAC
//! clip from this crate's own encoder, and tagged variants (a FLAC with a
//! picture block and a picture comment, an MP3 with an ID3v2.3 tag).
//!
//! Mutations, from a seeded generator: byte flips, truncation, and
//! overwrites of header, size and count fields (found near the formats'
//! markers) with 0, 1, 0x7f.., 0xff.. at 1-4 bytes in either byte order;
//! Ogg seeds mostly get their page checksums repaired afterwards, so the
//! damage reaches the packet parsers instead of stopping at the CRC.
//!
//! `TTS_RT_FUZZ_CASES` sets the number of cases (default 240, a few
//! seconds); `TTS_RT_FUZZ_SEED` the generator's seed (default fixed, so a
//! failure reproduces). A failing case is written to the target's temp
//! directory and named in the panic.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::f64::consts::PI;
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use std::time::Instant;

use tts_audio::{ReferenceAudio, ReferenceAudioError};

use crate::alone::alone;

// ---- the counting allocator ----------------------------------------------

/// No single allocation may exceed 256 MiB: the largest a valid 60 s clip
/// needs is its decoded signal (11.5 M samples at 192 kHz, 46 MB) and the
/// file (at most 128 MiB, and the fixtures here are under 40 KB).
const MAX_ALLOCATION: usize = 256 << 20;

/// Nor may one case grow the live heap by more than this at its peak.
const MAX_CASE_GROWTH: usize = 256 << 20;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);
/// The case being run, for the refusal message (no allocation there).
static CASE: AtomicU64 = AtomicU64::new(u64::MAX);
/// Set in a process that runs a test of this file (alone): only there is an
/// allocation past [`MAX_ALLOCATION`] refused.
static ARMED: AtomicBool = AtomicBool::new(false);

/// Runs the test in a process of its own (`alone!`) and arms the bound
/// there: true in that process.
macro_rules! alone_and_bounded {
    ($test:ident) => {
        alone!($test) && {
            ARMED.store(true, Ordering::Relaxed);
            true
        }
    };
}

/// The test binary's global allocator (main.rs).
pub struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator, except
// that an oversized request is answered with null, which the GlobalAlloc
// contract allows (the caller then reports the failure).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !admit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, passed through.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !admit(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as alloc.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr came from System with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !admit(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: ptr came from System with this layout.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

fn admit(size: usize) -> bool {
    LARGEST.fetch_max(size, Ordering::Relaxed);
    if size <= MAX_ALLOCATION || !ARMED.load(Ordering::Relaxed) {
        return true;
    }
    // Say which case before the abort; formatted on the stack.
    let case = CASE.load(Ordering::Relaxed);
    let named = case == u64::MAX;
    let case = digits(case);
    let mut buf = [0u8; 160];
    let mut n = 0;
    for part in [
        &b"reference_fuzz: refused an allocation of "[..],
        digits(size as u64).as_slice(),
        b" bytes (limit 256 MiB) in ",
        if named {
            b"a named test"
        } else {
            b"fuzz case "
        },
        if named { &[][..] } else { case.as_slice() },
        b"\n",
    ] {
        let take = part.len().min(buf.len() - n);
        buf[n..n + take].copy_from_slice(&part[..take]);
        n += take;
    }
    let _ = std::io::stderr().write_all(&buf[..n]);
    false
}

/// A number's decimal digits, right-aligned in a fixed array (no heap).
struct Digits([u8; 20], usize);

impl Digits {
    fn as_slice(&self) -> &[u8] {
        &self.0[self.1..]
    }
}

fn digits(mut x: u64) -> Digits {
    let mut d = Digits([b'0'; 20], 19);
    loop {
        d.0[d.1] = b'0' + (x % 10) as u8;
        x /= 10;
        if x == 0 {
            return d;
        }
        d.1 -= 1;
    }
}

fn grew(size: usize) {
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

/// One case at a time: the peak is per case.
static SERIAL: Mutex<()> = Mutex::new(());

thread_local! {
    /// Set while a case decodes: a panic there is caught by the decoder's
    /// guard and only its location is kept (printing every one, with a
    /// backtrace, would take most of the run's time).
    static QUIET: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A panic hook that keeps quiet panics' locations and reports the rest
/// as usual.
fn install_quiet_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", short_path(l.file()), l.line()))
                    .unwrap_or_default();
                LAST_PANIC.with(|p| *p.borrow_mut() = at);
            } else {
                default(info);
            }
        }));
    });
}

/// `.../symphonia-codec-aac-0.5.5/src/aac/ics/mod.rs` as
/// `symphonia-codec-aac-0.5.5/src/aac/ics/mod.rs`.
fn short_path(file: &str) -> &str {
    file.find("symphonia").map_or(file, |i| &file[i..])
}

/// What one decode did to the heap.
struct Footprint {
    growth: usize,
    largest: usize,
}

fn measured<T>(f: impl FnOnce() -> T) -> (T, Footprint) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    LARGEST.store(0, Ordering::Relaxed);
    let out = f();
    let growth = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    let largest = LARGEST.load(Ordering::Relaxed);
    (out, Footprint { growth, largest })
}

/// Decodes `bytes` as an upload would be, and checks the two bounds.
fn decode(bytes: &[u8], hint: Option<&str>) -> Result<ReferenceAudio, ReferenceAudioError> {
    let (result, used) = measured(|| ReferenceAudio::from_bytes(bytes, hint));
    assert!(
        used.largest <= MAX_ALLOCATION && used.growth <= MAX_CASE_GROWTH,
        "largest allocation {} B, peak growth {} B",
        used.largest,
        used.growth
    );
    result
}

// ---- seeds ---------------------------------------------------------------

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/audio")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `secs` of a 440 Hz tone at `rate`, interleaved over `channels`.
fn tone(rate: u32, secs: f64, channels: u16) -> Vec<f32> {
    let n = (rate as f64 * secs) as usize;
    (0..n)
        .flat_map(|i| {
            let s = 0.5 * (2.0 * PI * 440.0 * i as f64 / rate as f64).sin();
            (0..channels).map(move |_| s as f32)
        })
        .collect()
}

fn wav(rate: u32, channels: u16, bits: u16, float: bool) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: bits,
        sample_format: if float {
            hound::SampleFormat::Float
        } else {
            hound::SampleFormat::Int
        },
    };
    let mut out = Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
    let full = (1i64 << (bits - 1)) as f64;
    for s in tone(rate, 0.6, channels) {
        match (float, bits) {
            (true, _) => w.write_sample(s).unwrap(),
            (false, 8) => w.write_sample((s as f64 * 127.0) as i8).unwrap(),
            (false, 16) => w.write_sample((s as f64 * 32767.0) as i16).unwrap(),
            (false, _) => w.write_sample((s as f64 * (full - 1.0)) as i32).unwrap(),
        }
    }
    w.finalize().unwrap();
    out.into_inner()
}

fn adts() -> Vec<u8> {
    let mut enc = tts_audio::Format::Aac.encoder(24_000).expect("aac encoder");
    let mut bytes = Vec::new();
    enc.push(&tone(24_000, 0.6, 1), &mut bytes).unwrap();
    enc.finish(&mut bytes).unwrap();
    bytes
}

/// The FLAC fixture with `block` (type, body) inserted after STREAMINFO.
fn flac_with_block(kind: u8, body: &[u8]) -> Vec<u8> {
    let bytes = fixture("tone440-44100-stereo.flac");
    assert_eq!(&bytes[..4], b"fLaC");
    assert_eq!(bytes[4] & 0x7f, 0, "STREAMINFO first");
    let mut out = bytes[..42].to_vec();
    out.push(kind);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(body);
    out.extend_from_slice(&bytes[42..]);
    out
}

/// A FLAC picture block body whose MIME type and image lengths are as
/// given (the image bytes present: `image.len()`).
fn picture(mime_len: u32, image_len: u32, image: &[u8]) -> Vec<u8> {
    let mut p = 3u32.to_be_bytes().to_vec(); // front cover
    p.extend_from_slice(&mime_len.to_be_bytes());
    p.extend_from_slice(b"image/png");
    p.extend_from_slice(&0u32.to_be_bytes()); // no description
    p.extend_from_slice(&[0; 16]); // width, height, depth, colours
    p.extend_from_slice(&image_len.to_be_bytes());
    p.extend_from_slice(image);
    p
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..=c.len() {
            out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// The FLAC fixture with a picture block and a VORBIS_COMMENT block holding
/// a title and a METADATA_BLOCK_PICTURE comment.
fn flac_tagged() -> Vec<u8> {
    let pic = picture(9, 8, b"\x89PNG\r\n\x1a\n");
    let comments = [
        b"TITLE=tone".to_vec(),
        format!("METADATA_BLOCK_PICTURE={}", base64(&pic)).into_bytes(),
    ];
    let mut block = 6u32.to_le_bytes().to_vec();
    block.extend_from_slice(b"fuzzer");
    block.extend_from_slice(&(comments.len() as u32).to_le_bytes());
    for c in &comments {
        block.extend_from_slice(&(c.len() as u32).to_le_bytes());
        block.extend_from_slice(c);
    }
    let with_comments = flac_with_block(4, &block);
    // Then the picture block, after STREAMINFO too.
    let mut out = with_comments[..42].to_vec();
    out.push(6);
    out.extend_from_slice(&(pic.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&pic);
    out.extend_from_slice(&with_comments[42..]);
    out
}

/// An ID3v2.3 tag with a title frame and the given extra frame.
fn id3v23(extra: &[u8]) -> Vec<u8> {
    let mut frames = b"TIT2".to_vec();
    frames.extend_from_slice(&5u32.to_be_bytes());
    frames.extend_from_slice(&[0, 0, 0]);
    frames.extend_from_slice(b"tone");
    frames.extend_from_slice(extra);
    let size = frames.len() as u32;
    let mut tag = b"ID3\x03\x00\x00".to_vec();
    // Syncsafe: 7 bits per byte.
    tag.extend((0..4).rev().map(|i| ((size >> (7 * i)) & 0x7f) as u8));
    tag.extend_from_slice(&frames);
    tag
}

/// The MP3 fixture with its ID3v2.4 tag replaced by `tag`.
fn mp3_with_tag(tag: &[u8]) -> Vec<u8> {
    let mp3 = fixture("tone440-22050-mono.mp3");
    assert_eq!(&mp3[..3], b"ID3");
    let size = mp3[6..10]
        .iter()
        .fold(0usize, |a, &b| (a << 7) | usize::from(b & 0x7f));
    let mut out = tag.to_vec();
    out.extend_from_slice(&mp3[10 + size..]);
    out
}

fn mp3_id3v23() -> Vec<u8> {
    let mut apic = b"APIC".to_vec();
    let body = b"\x00image/png\x00\x03\x00\x89PNG";
    apic.extend_from_slice(&(body.len() as u32).to_be_bytes());
    apic.extend_from_slice(&[0, 0]);
    apic.extend_from_slice(body);
    mp3_with_tag(&id3v23(&apic))
}

struct Seed {
    name: &'static str,
    hint: &'static str,
    bytes: Vec<u8>,
    ogg: bool,
}

fn seeds() -> Vec<Seed> {
    let seed = |name, hint, bytes: Vec<u8>| Seed {
        name,
        hint,
        ogg: hint == "ogg" || hint == "opus",
        bytes,
    };
    vec![
        seed("WAV 8-bit", "wav", wav(8_000, 1, 8, false)),
        seed("WAV 16-bit", "wav", wav(8_000, 1, 16, false)),
        seed("WAV 24-bit extensible", "wav", wav(16_000, 1, 24, false)),
        seed("WAV 32-bit float stereo", "wav", wav(11_025, 2, 32, true)),
        seed("FLAC", "flac", fixture("tone440-44100-stereo.flac")),
        seed("FLAC tagged", "flac", flac_tagged()),
        seed("MP3", "mp3", fixture("tone440-22050-mono.mp3")),
        seed(
            "MP3 without Xing",
            "mp3",
            fixture("tone440-22050-mono-noxing.mp3"),
        ),
        seed("MP3 with ID3v2.3", "mp3", mp3_id3v23()),
        seed("OGG/Vorbis", "ogg", fixture("tone440-48000-stereo.ogg")),
        seed("OGG/Opus", "opus", fixture("tone440-48000-stereo.opus")),
        seed("WebM/Opus", "webm", fixture("tone440-48000-stereo.webm")),
        seed("M4A/AAC", "m4a", fixture("tone440-44100-stereo.m4a")),
        seed("AAC (ADTS)", "aac", adts()),
    ]
}

// ---- the mutator -----------------------------------------------------------

/// splitmix64: small, seedable, good enough to pick bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Markers near which header, size and count fields lie: MP4 boxes, RIFF
/// chunks, FLAC, Ogg and Vorbis headers (`BCV` starts a codebook), ID3v2
/// frames, MP3 info frames, Matroska elements.
const MARKERS: [&[u8]; 41] = [
    b"ftyp",
    b"moov",
    b"mvhd",
    b"trak",
    b"tkhd",
    b"edts",
    b"elst",
    b"mdia",
    b"mdhd",
    b"hdlr",
    b"minf",
    b"stbl",
    b"stsd",
    b"mp4a",
    b"esds",
    b"stts",
    b"stsc",
    b"stsz",
    b"stco",
    b"udta",
    b"meta",
    b"ilst",
    b"mdat",
    b"RIFF",
    b"fmt ",
    b"data",
    b"fLaC",
    b"OggS",
    b"vorbis",
    b"BCV",
    b"ID3",
    b"TIT2",
    b"APIC",
    b"Info",
    b"Xing",
    b"METADATA_BLOCK",
    // WebM/Matroska: Segment, Tracks, Cluster, CodecPrivate, the codec id.
    &[0x18, 0x53, 0x80, 0x67],
    &[0x16, 0x54, 0xAE, 0x6B],
    &[0x1F, 0x43, 0xB6, 0x75],
    &[0x63, 0xA2],
    b"A_OPUS",
];

/// Offsets worth overwriting: the first 64 bytes, the 32 around each
/// marker, and FLAC's metadata block headers and their first fields.
fn field_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut out: Vec<usize> = (0..64.min(bytes.len())).collect();
    for m in MARKERS {
        for (i, _) in bytes.windows(m.len()).enumerate().filter(|(_, w)| *w == m) {
            out.extend(i.saturating_sub(8)..(i + 24).min(bytes.len()));
        }
    }
    if bytes.starts_with(b"fLaC") {
        let mut p = 4;
        while p + 4 <= bytes.len() {
            out.extend(p..(p + 16).min(bytes.len()));
            let len = u32::from_be_bytes([0, bytes[p + 1], bytes[p + 2], bytes[p + 3]]) as usize;
            if bytes[p] & 0x80 != 0 {
                break;
            }
            p += 4 + len;
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Values a crafted field takes: 0, 1, the largest signed, the largest.
const SPECIAL: [u32; 4] = [0, 1, 0x7fff_ffff, 0xffff_ffff];

fn mutate(seed: &Seed, offsets: &[usize], rng: &mut Rng) -> (Vec<u8>, String) {
    let mut b = seed.bytes.clone();
    let mut how = Vec::new();
    for _ in 0..1 + rng.below(3) {
        match rng.below(5) {
            0 => {
                let at = rng.below(b.len());
                let x = 1 + rng.below(255) as u8;
                b[at] ^= x;
                how.push(format!("flip {at} ^{x:#04x}"));
            }
            1 => {
                let len = 1 + rng.below(b.len() - 1);
                b.truncate(len);
                how.push(format!("truncate to {len}"));
            }
            kind => {
                // A field near a marker (2, 3) or anywhere in the file's
                // first 4 KB (4).
                let at = if kind < 4 {
                    offsets[rng.below(offsets.len())]
                } else {
                    rng.below(4096)
                }
                .min(b.len() - 1);
                let width = 1 + rng.below(4);
                let v = SPECIAL[rng.below(4)];
                let big = rng.below(2) == 0;
                let bytes = if big {
                    v.to_be_bytes()
                } else {
                    v.to_le_bytes()
                };
                let field = if big {
                    &bytes[4 - width..]
                } else {
                    &bytes[..width]
                };
                let end = (at + width).min(b.len());
                b[at..end].copy_from_slice(&field[..end - at]);
                how.push(format!(
                    "{width}-byte {} {v:#x} at {at}",
                    if big { "BE" } else { "LE" }
                ));
            }
        }
        if b.len() < 2 {
            break;
        }
    }
    if seed.ogg && rng.below(4) != 0 {
        ogg_fix_crcs(&mut b);
        how.push("page CRCs repaired".into());
    }
    (b, how.join(", "))
}

/// Ogg's CRC-32: polynomial 0x04c11db7, MSB first, no reflection, init 0.
fn ogg_crc(data: &[u8]) -> u32 {
    let mut crc = 0u32;
    for &byte in data {
        crc ^= u32::from(byte) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04c1_1db7
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Rewrites the CRC of every whole page found from the start.
fn ogg_fix_crcs(b: &mut [u8]) {
    let mut p = 0;
    while let Some(i) = b[p..].windows(4).position(|w| w == b"OggS").map(|i| i + p) {
        let Some(&segs) = b.get(i + 26) else { return };
        let table_end = i + 27 + usize::from(segs);
        let Some(table) = b.get(i + 27..table_end) else {
            return;
        };
        let end = table_end + table.iter().map(|&s| usize::from(s)).sum::<usize>();
        if end > b.len() {
            return;
        }
        b[i + 22..i + 26].fill(0);
        let crc = ogg_crc(&b[i..end]);
        b[i + 22..i + 26].copy_from_slice(&crc.to_le_bytes());
        p = end;
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

/// The variant's name, for the summary.
fn kind(r: &Result<ReferenceAudio, ReferenceAudioError>) -> String {
    match r {
        Ok(_) => "Ok".into(),
        Err(e) => format!("{e:?}")
            .split([' ', '{', '('])
            .next()
            .unwrap_or_default()
            .to_string(),
    }
}

#[test]
fn mutated_clips_of_every_format_decode_or_are_refused_within_bounds() {
    if !alone_and_bounded!(mutated_clips_of_every_format_decode_or_are_refused_within_bounds) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    install_quiet_hook();
    let cases = env_u64("TTS_RT_FUZZ_CASES", 240);
    let seed = env_u64("TTS_RT_FUZZ_SEED", 0x7e57_a0d1_0028);
    let seeds = seeds();
    // Every seed decodes as it is.
    for s in &seeds {
        let r = decode(&s.bytes, Some(s.hint));
        assert!(r.is_ok(), "seed {}: {r:?}", s.name);
    }
    let offsets: Vec<Vec<usize>> = seeds.iter().map(|s| field_offsets(&s.bytes)).collect();
    let mut rng = Rng(seed);
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let (mut growth, mut largest) = (0usize, 0usize);
    let start = Instant::now();
    for case in 0..cases {
        let which = case as usize % seeds.len();
        let s = &seeds[which];
        let (bytes, how) = mutate(s, &offsets[which], &mut rng);
        CASE.store(case, Ordering::Relaxed);
        QUIET.with(|q| q.set(true));
        let (r, used) = measured(|| {
            std::panic::catch_unwind(|| ReferenceAudio::from_bytes(&bytes, Some(s.hint)))
        });
        QUIET.with(|q| q.set(false));
        let fail = |why: String| -> ! {
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
            let path = dir.join(format!("reference_fuzz-{seed:x}-{case}.{}", s.hint));
            let _ = std::fs::write(&path, &bytes);
            panic!(
                "case {case} (seed {seed:#x}; {} with {how}): {why}; input written to {}",
                s.name,
                path.display()
            )
        };
        let Ok(r) = r else {
            fail("a panic escaped from_bytes".into())
        };
        if used.largest > MAX_ALLOCATION || used.growth > MAX_CASE_GROWTH {
            fail(format!(
                "largest allocation {} B, peak growth {} B",
                used.largest, used.growth
            ));
        }
        if let Err(ReferenceAudioError::DecoderFault { detail, .. }) = &r {
            if !detail.starts_with("decoding:") {
                fail(format!("the container checks panicked: {detail}"));
            }
            let at = LAST_PANIC.with(|p| p.take());
            *faults.entry(format!("{} at {at}", s.name)).or_default() += 1;
        }
        *outcomes.entry(kind(&r)).or_default() += 1;
        growth = growth.max(used.growth);
        largest = largest.max(used.largest);
    }
    CASE.store(u64::MAX, Ordering::Relaxed);
    println!(
        "{cases} cases from seed {seed:#x} over {} seeds in {:.1} s; largest allocation {} KiB, \
         largest peak growth {} KiB",
        seeds.len(),
        start.elapsed().as_secs_f64(),
        largest >> 10,
        growth >> 10
    );
    println!("outcomes: {outcomes:?}");
    for (what, n) in &faults {
        println!("decoder panic caught ({n}x): {what}");
    }
}

// ---- crafted headers that once asked for gigabytes ------------------------

#[test]
fn an_m4a_sample_larger_than_the_file_is_refused_before_its_buffer() {
    if !alone_and_bounded!(an_m4a_sample_larger_than_the_file_is_refused_before_its_buffer) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // The fixture's stsz box: header, version/flags, constant size 0,
    // count, then the first sample's size, read into a 4 GiB buffer.
    let mut bytes = fixture("tone440-44100-stereo.m4a");
    let stsz = bytes.windows(4).position(|w| w == b"stsz").unwrap() - 4;
    bytes[stsz + 20..stsz + 24].copy_from_slice(&u32::MAX.to_be_bytes());
    let err = decode(&bytes, Some("m4a")).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::BadField { ref field, value: 0xffff_ffff, .. } if field == "stsz entry 0"),
        "{err:?}"
    );
}

#[test]
fn a_flac_picture_claiming_4_gib_is_refused_before_its_buffer() {
    if !alone_and_bounded!(a_flac_picture_claiming_4_gib_is_refused_before_its_buffer) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let bytes = flac_with_block(6, &picture(u32::MAX, 0, b""));
    let err = decode(&bytes, Some("flac")).unwrap_err();
    match &err {
        ReferenceAudioError::SizeOverrun {
            format,
            part,
            claimed,
            ..
        } => {
            assert_eq!(
                (*format, part.as_str()),
                ("FLAC", "PICTURE block's MIME type")
            );
            assert_eq!(*claimed, u64::from(u32::MAX));
        }
        other => panic!("{other:?}"),
    }
    // The image length too, and inside a METADATA_BLOCK_PICTURE comment.
    let bytes = flac_with_block(6, &picture(9, u32::MAX, b"tiny"));
    let err = decode(&bytes, Some("flac")).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::SizeOverrun { ref part, .. } if part == "PICTURE block's image"),
        "{err:?}"
    );
    let comment = format!(
        "METADATA_BLOCK_PICTURE={}",
        base64(&picture(9, u32::MAX, b"tiny"))
    );
    let mut block = 0u32.to_le_bytes().to_vec();
    block.extend_from_slice(&1u32.to_le_bytes());
    block.extend_from_slice(&(comment.len() as u32).to_le_bytes());
    block.extend_from_slice(comment.as_bytes());
    let err = decode(&flac_with_block(4, &block), Some("flac")).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::SizeOverrun { ref part, .. } if part == "METADATA_BLOCK_PICTURE comment's image"),
        "{err:?}"
    );
}

/// The OGG fixture's comment header (on page 1 with the setup header) with
/// its one comment's length set to `len`, the page's CRC repaired.
fn ogg_with_comment_len(len: u32) -> Vec<u8> {
    let mut bytes = fixture("tone440-48000-stereo.ogg");
    let at = bytes.windows(7).position(|w| w == b"\x03vorbis").unwrap();
    // Vendor length, vendor ("ffmpeg"), comment count, first length.
    let vendor = u32::from_le_bytes(bytes[at + 7..at + 11].try_into().unwrap()) as usize;
    let len_at = at + 11 + vendor + 4;
    bytes[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
    ogg_fix_crcs(&mut bytes);
    bytes
}

#[test]
fn an_ogg_vorbis_comment_claiming_4_gib_is_refused_before_its_buffer() {
    if !alone_and_bounded!(an_ogg_vorbis_comment_claiming_4_gib_is_refused_before_its_buffer) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    assert!(decode(&ogg_with_comment_len(22), Some("ogg")).is_ok());
    let err = decode(&ogg_with_comment_len(u32::MAX), Some("ogg")).unwrap_err();
    match &err {
        ReferenceAudioError::SizeOverrun {
            format,
            part,
            claimed,
            within,
            ..
        } => {
            assert_eq!((*format, part.as_str()), ("OGG", "comment 0"));
            assert_eq!(*claimed, u64::from(u32::MAX));
            assert_eq!(within, "its Vorbis comment header");
        }
        other => panic!("{other:?}"),
    }
}

/// Vorbis packs header fields least-significant bit first.
#[derive(Default)]
struct BitWriter {
    bytes: Vec<u8>,
    bits: usize,
}

impl BitWriter {
    fn put(&mut self, value: u32, n: usize) {
        for i in 0..n {
            if self.bits.is_multiple_of(8) {
                self.bytes.push(0);
            }
            let bit = ((value >> i) & 1) as u8;
            *self.bytes.last_mut().unwrap() |= bit << (self.bits % 8);
            self.bits += 1;
        }
    }
}

/// An Ogg page from whole packets (each under 64 KB, all on this page).
fn ogg_page(serial: u32, sequence: u32, flags: u8, granule: u64, packets: &[&[u8]]) -> Vec<u8> {
    let mut table = Vec::new();
    for p in packets {
        table.extend(std::iter::repeat_n(255u8, p.len() / 255));
        table.push((p.len() % 255) as u8);
    }
    let mut page = b"OggS\x00".to_vec();
    page.push(flags);
    page.extend_from_slice(&granule.to_le_bytes());
    page.extend_from_slice(&serial.to_le_bytes());
    page.extend_from_slice(&sequence.to_le_bytes());
    page.extend_from_slice(&[0; 4]);
    page.push(table.len() as u8);
    page.extend_from_slice(&table);
    for p in packets {
        page.extend_from_slice(p);
    }
    let crc = ogg_crc(&page);
    page[22..26].copy_from_slice(&crc.to_le_bytes());
    page
}

/// The OGG fixture with its setup header replaced by one of `books`
/// codebooks, each of 2^23 one-dimensional entries all 23 bits long (a
/// complete code described in 98 bits, which the decoder expands into
/// hundreds of MB of tables).
fn ogg_with_huge_codebooks(books: u32) -> Vec<u8> {
    let fx = fixture("tone440-48000-stereo.ogg");
    // Page 0: identification; page 1: comment and setup; page 2: audio.
    let page = |at: usize| {
        let segs = usize::from(fx[at + 26]);
        let body: usize = fx[at + 27..at + 27 + segs]
            .iter()
            .map(|&s| usize::from(s))
            .sum();
        (at + 27 + segs, at + 27 + segs + body)
    };
    let (body0, end0) = page(0);
    let (body1, end1) = page(end0);
    let serial = u32::from_le_bytes(fx[14..18].try_into().unwrap());
    let ident = &fx[body0..end0];
    let comment_len = 48; // the first packet on page 1 (one 48-byte segment)
    assert_eq!(fx[end0 + 27], 48);
    let comment = &fx[body1..body1 + comment_len];
    let mut w = BitWriter::default();
    w.put(books - 1, 8);
    for _ in 0..books {
        w.put(0x56_4342, 24); // sync
        w.put(1, 16); // dimensions
        w.put(1 << 23, 24); // entries
        w.put(1, 1); // ordered by length
        w.put(22, 5); // first length - 1
        w.put(1 << 23, 24); // all entries at that length
        w.put(0, 4); // no lookup table
    }
    let mut setup = b"\x05vorbis".to_vec();
    setup.extend_from_slice(&w.bytes);
    let mut out = fx[..end0].to_vec();
    assert_eq!(&ident[..7], b"\x01vorbis");
    out.extend(ogg_page(serial, 1, 0, 0, &[comment, &setup]));
    out.extend_from_slice(&fx[end1..]);
    out
}

#[test]
fn an_ogg_vorbis_setup_with_huge_codebooks_is_refused_before_the_decoder_expands_them() {
    if !alone_and_bounded!(
        an_ogg_vorbis_setup_with_huge_codebooks_is_refused_before_the_decoder_expands_them
    ) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let err = decode(&ogg_with_huge_codebooks(2), Some("ogg")).unwrap_err();
    match &err {
        ReferenceAudioError::BadField {
            format,
            field,
            value,
            ..
        } => {
            assert_eq!(*format, "OGG");
            assert!(field.contains("Vorbis codebook entries"), "{field}");
            assert_eq!(*value, 1 << 23, "refused at the first codebook");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_id3v2_frame_claiming_4_gib_is_never_read() {
    if !alone_and_bounded!(an_id3v2_frame_claiming_4_gib_is_never_read) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // An ID3v2.3 frame's 32-bit size was reserved before the tag's own
    // bound was consulted. The tag is blanked now: the clip decodes.
    let mut huge = b"PRIV".to_vec();
    huge.extend_from_slice(&u32::MAX.to_be_bytes());
    huge.extend_from_slice(&[0, 0]);
    huge.extend_from_slice(b"owner\x00data");
    let clip = decode(&mp3_with_tag(&id3v23(&huge)), Some("mp3")).expect("decodes");
    assert_eq!(clip.source_format, "MP3");
    // A tag that claims more than the file holds is refused by name.
    let mut long = id3v23(b"");
    long[6..10].copy_from_slice(&[0x7f; 4]);
    let err = decode(&mp3_with_tag(&long), Some("mp3")).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::Truncated { format: "file", ref part, claimed: 0x0fff_ffff, .. } if part == "ID3v2 tag"),
        "{err:?}"
    );
}

#[test]
fn a_piped_wav_whose_info_tag_claims_4_gib_is_refused_before_its_buffer() {
    if !alone_and_bounded!(a_piped_wav_whose_info_tag_claims_4_gib_is_refused_before_its_buffer) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // A WAV written to a pipe states 0xFFFF_FFFF as its RIFF size, so a
    // LIST chunk may claim nearly 4 GiB and an INFO tag inside it as much.
    let plain = wav(8_000, 1, 16, false);
    let fmt_end = 12 + 8 + 16;
    assert_eq!(&plain[fmt_end..fmt_end + 4], b"data", "a 16-byte fmt chunk");
    let mut bytes = plain[..fmt_end].to_vec();
    bytes[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(b"LIST");
    // Within the RIFF size (symphonia checks that much), far past the file.
    bytes.extend_from_slice(&0xffff_0000u32.to_le_bytes());
    bytes.extend_from_slice(b"INFOINAM");
    bytes.extend_from_slice(&0xfffe_0000u32.to_le_bytes());
    bytes.extend_from_slice(b"tone");
    bytes.extend_from_slice(&plain[fmt_end..]);
    let err = decode(&bytes, Some("wav")).unwrap_err();
    assert!(
        matches!(err, ReferenceAudioError::Truncated { format: "WAV", ref part, claimed: 0xffff_0000, .. } if part == "'LIST' chunk"),
        "{err:?}"
    );
}

/// The M4A fixture with its mp4a sample entry rewritten in place as a
/// version-2 `lpcm` entry (32-bit big-endian float, stereo, 44.1 kHz) that
/// states `frames_per_packet`; its trailing bytes become a `free` box.
fn m4a_as_lpcm(frames_per_packet: u32) -> Vec<u8> {
    let mut bytes = fixture("tone440-44100-stereo.m4a");
    let entry = bytes.windows(4).position(|w| w == b"mp4a").unwrap() - 4;
    let size = u32::from_be_bytes(bytes[entry..entry + 4].try_into().unwrap()) as usize;
    let mut payload = vec![0u8; 6];
    payload.extend_from_slice(&1u16.to_be_bytes()); // data reference
    payload.extend_from_slice(&2u16.to_be_bytes()); // version 2
    payload.extend_from_slice(&[0; 6]); // revision, vendor
    payload.extend_from_slice(&[0, 3, 0, 16, 0xff, 0xfe, 0, 0, 0, 1, 0, 0]);
    payload.extend_from_slice(&72u32.to_be_bytes()); // size of the fields
    payload.extend_from_slice(&44_100f64.to_be_bytes());
    payload.extend_from_slice(&2u32.to_be_bytes()); // channels
    payload.extend_from_slice(&0x7f00_0000u32.to_be_bytes());
    payload.extend_from_slice(&32u32.to_be_bytes()); // bits
    payload.extend_from_slice(&3u32.to_be_bytes()); // float, big-endian
    payload.extend_from_slice(&8u32.to_be_bytes()); // bytes per packet
    payload.extend_from_slice(&frames_per_packet.to_be_bytes());
    let free = size - 8 - payload.len();
    payload.extend_from_slice(&(free as u32).to_be_bytes());
    payload.extend_from_slice(b"free");
    payload.resize(size - 8, 0);
    bytes[entry + 4..entry + 8].copy_from_slice(b"lpcm");
    bytes[entry + 8..entry + size].copy_from_slice(&payload);
    bytes
}

#[test]
fn an_mp4_pcm_track_stating_4_billion_frames_per_packet_is_refused_before_its_buffer() {
    if !alone_and_bounded!(
        an_mp4_pcm_track_stating_4_billion_frames_per_packet_is_refused_before_its_buffer
    ) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // The PCM decoder reserves frames per packet × channels samples when it
    // is made: 2^32 stereo float frames are 32 GiB.
    let err = decode(&m4a_as_lpcm(u32::MAX), Some("m4a")).unwrap_err();
    match &err {
        ReferenceAudioError::BadField {
            format,
            field,
            value,
            ..
        } => {
            assert_eq!((*format, field.as_str()), ("M4A", "frames per packet"));
            assert_eq!(*value, u64::from(u32::MAX));
        }
        other => panic!("{other:?}"),
    }
    // One frame per packet, as an MP4 PCM track usually states, gets past
    // the check to the decoder (the fixture's AAC bytes are no PCM clip,
    // but they decode as one).
    let r = decode(&m4a_as_lpcm(1), Some("m4a"));
    assert!(
        !matches!(r, Err(ReferenceAudioError::BadField { .. })),
        "{r:?}"
    );
}
