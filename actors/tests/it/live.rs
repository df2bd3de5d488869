//! Live text through the engine: text pushed in pieces while the request
//! is being spoken gives exactly the whole text's codes in the streaming
//! text mode, greedy and sampled, whatever the arrival times — including
//! gaps longer than the audio already made, when the talker holds the
//! request — and a request held open with no text resumes when text comes.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tts_actors::{AudioChunk, ChunkSchedule, Engine, EngineConfig, Event, LiveRequest, Stream};
use tts_models::{GenOptions, ModelError, Qwen3Tts, Request};

fn model() -> Arc<Qwen3Tts> {
    static M: OnceLock<Arc<Qwen3Tts>> = OnceLock::new();
    M.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a");
        Arc::new(Qwen3Tts::load(&dir).expect("load fixture"))
    })
    .clone()
}

fn request(m: &Qwen3Tts, text: &str, greedy: bool, seed: u64) -> Request {
    let mut options: GenOptions = m.default_options();
    if greedy {
        options = options.greedy();
    }
    options.max_frames = 40;
    options.seed = seed;
    Request {
        text: text.into(),
        speaker: Some(m.speakers()[0].clone()),
        language: "english".into(),
        instruct: None,
        voice_clone: None,
        text_streaming: true,
        options,
    }
}

fn engine(m: &Arc<Qwen3Tts>) -> Engine {
    Engine::start(
        m.clone(),
        EngineConfig {
            chunks: ChunkSchedule::new(vec![1, 4, 8]).unwrap(),
            ..EngineConfig::default()
        },
    )
    .unwrap()
}

/// Reads a stream to its end; the chunks and the terminal event.
fn collect(s: &mut Stream) -> (Vec<AudioChunk>, Event) {
    let mut chunks = Vec::new();
    loop {
        match s.next_blocking().expect("a terminal event") {
            Event::Started { .. } => {}
            Event::Audio(c) => chunks.push(c),
            t => return (chunks, t),
        }
    }
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Word-ish pieces of `text` (1..=3 words each, split mid-word sometimes).
fn pieces(text: &str, rng: &mut Rng) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let n = 1 + rng.below(9) as usize;
        out.push(chars[i..(i + n).min(chars.len())].iter().collect());
        i += n;
    }
    out
}

/// Pushes `parts` into `live` with the given delays, on the calling thread,
/// until the request starts; the rest (and the close) on another thread.
fn speak_live(
    mut live: LiveRequest,
    parts: Vec<String>,
    delays_ms: Vec<u64>,
) -> (Stream, std::thread::JoinHandle<()>) {
    let mut i = 0;
    let stream = loop {
        let got = if i < parts.len() {
            live.push_blocking(&parts[i]).unwrap()
        } else {
            live.close_blocking().unwrap()
        };
        i += 1;
        if let Some(s) = got {
            break s;
        }
        assert!(i <= parts.len() + 1, "the request never started");
    };
    let pusher = std::thread::spawn(move || {
        while i < parts.len() {
            std::thread::sleep(Duration::from_millis(delays_ms[i % delays_ms.len()]));
            live.push_blocking(&parts[i]).unwrap();
            i += 1;
        }
        live.close_blocking().unwrap();
    });
    (stream, pusher)
}

fn codes(chunks: &[AudioChunk]) -> Vec<u32> {
    chunks
        .iter()
        .flat_map(|c| c.codes.iter().copied())
        .collect()
}

#[test]
fn live_text_through_the_engine_speaks_exactly_the_whole_text() {
    let m = model();
    let engine = engine(&m);
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    let texts = [
        "Hello there, this sentence arrives a few characters at a time.",
        "Numbers like 42 and punctuation -- all of it, streamed!",
    ];
    for (t, text) in texts.iter().enumerate() {
        for (greedy, seed) in [(true, 0), (false, 11 + t as u64)] {
            let req = request(&m, text, greedy, seed);
            let want = m.start(&req).unwrap().run_to_end();
            // Fast arrivals, and gaps far longer than a frame's audio.
            for delays in [vec![0, 1, 3], vec![5, 150, 0, 400]] {
                let session = engine.open_session();
                let live = session.live(req.clone()).unwrap();
                let (mut stream, pusher) = speak_live(live, pieces(text, &mut rng), delays.clone());
                let (chunks, end) = collect(&mut stream);
                pusher.join().unwrap();
                assert!(matches!(end, Event::Done { .. }), "{end:?}");
                assert_eq!(
                    codes(&chunks),
                    want,
                    "{text:?} greedy={greedy} delays {delays:?}"
                );
            }
        }
    }
}

#[test]
fn a_live_request_held_open_without_text_resumes_when_text_comes() {
    let m = model();
    let engine = engine(&m);
    let req = request(&m, "", true, 0);
    let session = engine.open_session();
    let mut live = session.live(req.clone()).unwrap();
    assert!(live.push_blocking("Wait").unwrap().is_none(), "no word yet");
    let mut stream = live
        .push_blocking(" for")
        .unwrap()
        .expect("the first word starts it");
    // The talker speaks what it has, then holds the request.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(engine.stats().active_requests, 1);
    live.push_blocking(" it, then go on.").unwrap();
    live.close_blocking().unwrap();
    let (chunks, end) = collect(&mut stream);
    assert!(matches!(end, Event::Done { .. }), "{end:?}");
    let mut whole = req;
    whole.text = "Wait for it, then go on.".into();
    assert_eq!(codes(&chunks), m.start(&whole).unwrap().run_to_end());
    // The wait is reported: at a frame after the first, about as long as
    // the text was held back (less the little audio the first words made).
    let pauses = live.pauses();
    assert!(!pauses.is_empty(), "no pause recorded");
    let longest = pauses.iter().map(|p| p.ms).fold(0.0, f64::max);
    assert!(longest > 500.0 && longest < 1600.0, "{pauses:?}");
    assert!(pauses.iter().all(|p| p.frame >= 1), "{pauses:?}");
}

/// Issue 28's lockout: clients that open a live context, send a few words
/// and then wait held every engine slot, so every other request got
/// `at_capacity` for as long as they waited. A live request parked for its
/// text is not work: it leaves the active-request count until text comes.
#[test]
fn live_requests_waiting_for_text_hold_no_engine_slot() {
    let m = model();
    let engine = Engine::start(
        m.clone(),
        EngineConfig {
            chunks: ChunkSchedule::new(vec![1, 4, 8]).unwrap(),
            max_active_requests: 2,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let req = request(&m, "", true, 0);
    // Two live requests fill both slots, then wait for text.
    let mut held = Vec::new();
    for _ in 0..2 {
        let session = engine.open_session();
        let mut live = session.live(req.clone()).unwrap();
        let stream = live.push_blocking("Wait for").unwrap().expect("started");
        held.push((session, live, stream));
    }
    let t0 = std::time::Instant::now();
    while !held.iter().all(|(_, l, _)| l.waiting_for_text()) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the talker never parked the live requests"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(engine.stats().active_requests, 2);
    // A third session's whole-text request is admitted and completes.
    let other = engine.open_session();
    let mut whole = request(&m, "Meanwhile, somebody else speaks.", true, 0);
    whole.text_streaming = false;
    let mut s = other
        .synthesize_blocking(whole)
        .expect("admitted while the live requests wait for text");
    let (_, end) = collect(&mut s);
    assert!(matches!(end, Event::Done { .. }), "{end:?}");
    // The waiting requests resume and finish when their text comes.
    for (_, mut live, mut stream) in held {
        live.push_blocking(" it, then go on.").unwrap();
        live.close_blocking().unwrap();
        let (_, end) = collect(&mut stream);
        assert!(matches!(end, Event::Done { .. }), "{end:?}");
    }
}

#[test]
fn dropping_a_live_request_closes_its_text() {
    let m = model();
    let engine = engine(&m);
    let req = request(&m, "", true, 0);
    let session = engine.open_session();
    let mut live = session.live(req.clone()).unwrap();
    let mut stream = live.push_blocking("Short and done").unwrap().unwrap();
    drop(live);
    let (chunks, end) = collect(&mut stream);
    assert!(matches!(end, Event::Done { .. }), "{end:?}");
    let mut whole = req;
    whole.text = "Short and done".into();
    assert_eq!(codes(&chunks), m.start(&whole).unwrap().run_to_end());
}

#[test]
fn live_requests_are_checked_before_any_text() {
    let m = model();
    let engine = engine(&m);
    let session = engine.open_session();
    let mut req = request(&m, "", true, 0);
    req.text_streaming = false;
    assert!(
        session.live(req.clone()).is_err(),
        "needs the streaming text mode"
    );
    req.text_streaming = true;
    req.speaker = Some("nobody".into());
    let e = session.live(req).err().expect("unknown speaker");
    assert!(e.to_string().contains("nobody"), "{e}");
    let _ = ModelError::EmptyText;
}
