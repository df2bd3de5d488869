//! Live text: text that arrives in pieces while it is spoken must give the
//! same utterance as the whole text in the streaming text mode.
//!
//! - The committed token ids are, after every piece, a prefix of the whole
//!   text's ids (random texts with punctuation, blank and newline runs,
//!   digits, contractions and Chinese, cut at random places), and equal
//!   them once the text is closed.
//! - Whole requests: pieces arrive between frames at random, including
//!   long gaps where the talker has used every row it has and waits; the
//!   codes equal the whole-text request's, greedy and sampled, on a preset
//!   speaker (tiny-a), an x-vector clone (tiny-base) and a designed voice
//!   (tiny-vd).

use std::path::Path;
use std::sync::Arc;

use tts_models::live_text::LiveText;
use tts_models::tokenizer::template;
use tts_models::{ModelError, Qwen3Tts, Request};

fn load(name: &str) -> Arc<Qwen3Tts> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    Arc::new(Qwen3Tts::load(&dir).expect("load fixture"))
}

/// xorshift: deterministic pieces and arrival times.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `text` in random pieces of 1..=max chars.
fn pieces(text: &str, rng: &mut Rng, max: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let n = 1 + rng.below(max);
        out.push(chars[i..(i + n).min(chars.len())].iter().collect());
        i += n;
    }
    out
}

fn whole_ids(m: &Qwen3Tts, text: &str) -> Vec<u32> {
    let all = m.tokenizer.encode(&template::assistant(text)).unwrap();
    all[3..all.len() - 5].to_vec()
}

const TEXTS: [&str; 8] = [
    "Hello there, how are you doing today?",
    "It's 3:45 pm -- don't   be late!!  Really.",
    "First line.\n\nSecond line, after a blank one.\nThird.",
    "Numbers 12345 and 3.14159, then (parentheses) and \"quotes\".",
    "你好，世界。今天天气很好，我们出去走走吧！",
    "Mixed 中文 and English, with tabs\tand  double  spaces.",
    "Ellipsis... and dashes — and émigré café naïve.",
    "One",
];

#[test]
fn committed_ids_are_always_a_prefix_of_the_whole_texts() {
    let m = load("tiny-a");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for text in TEXTS {
        let want = whole_ids(&m, text);
        for round in 0..25 {
            let mut live = LiveText::new();
            for p in pieces(text, &mut rng, 1 + round % 7) {
                live.push(&m.tokenizer, &p).unwrap();
                let got = live.ids();
                assert!(
                    want.starts_with(got),
                    "{text:?} after {:?}: {got:?} is not a prefix of {want:?}",
                    live.text()
                );
            }
            live.close(&m.tokenizer).unwrap();
            assert_eq!(live.ids(), &want[..], "{text:?}: closed");
        }
    }
}

fn request(m: &Qwen3Tts, fx: &str, text: &str, greedy: bool, seed: u64) -> Request {
    let mut options = m.default_options();
    if greedy {
        options = options.greedy();
    }
    options.seed = seed;
    options.max_frames = 40;
    let mut r = Request {
        text: text.into(),
        speaker: None,
        language: "english".into(),
        instruct: None,
        voice_clone: None,
        text_streaming: true,
        options,
    };
    match fx {
        "tiny-a" => r.speaker = Some(m.speakers()[0].clone()),
        "tiny-base" => {
            let clip: Vec<f32> = (0..24_000)
                .map(|i| (i as f32 * 0.037).sin() * 0.3 + (i as f32 * 0.0113).sin() * 0.1)
                .collect();
            r.voice_clone = Some(Arc::new(m.clone_voice(&clip, None, true).unwrap().0));
        }
        "tiny-vd" => r.instruct = Some("A bright, quick voice.".into()),
        _ => unreachable!(),
    }
    r
}

/// Generates `req` with its text arriving in `parts`: a part is pushed
/// before the prefill until the first ids commit, then between frames at
/// random (and whenever the talker waits), the text closed after the last.
/// Returns the codes and how many times the talker waited.
fn run_live(
    m: &Arc<Qwen3Tts>,
    req: &Request,
    parts: &[String],
    rng: &mut Rng,
) -> (Vec<u32>, usize) {
    let mut live = LiveText::new();
    let mut next = 0;
    let give = |live: &mut LiveText, next: &mut usize| {
        if *next < parts.len() {
            live.push(&m.tokenizer, &parts[*next]).unwrap();
            *next += 1;
        } else {
            live.close(&m.tokenizer).unwrap();
        }
    };
    let (mut talker, mut predictor) = loop {
        if let Some(s) = m.live_sessions(req, &live).unwrap() {
            break s;
        }
        give(&mut live, &mut next);
    };
    let eos = m.config.talker.codec.eos;
    let mut out = talker.prefill(m);
    let mut codes = Vec::new();
    let mut waits = 0;
    for frame_no in 0..req.options.max_frames {
        if out.c0 == eos {
            break;
        }
        let frame = predictor.predict(m, &out);
        codes.extend_from_slice(&frame);
        if frame_no + 1 == req.options.max_frames {
            break;
        }
        // Sometimes text arrives between frames; when the talker has run
        // out, it must wait for it.
        if rng.below(3) == 0 {
            give(&mut live, &mut next);
            m.feed_live_text(&mut talker, &live).unwrap();
        }
        while talker.waiting_for_text() {
            waits += 1;
            give(&mut live, &mut next);
            m.feed_live_text(&mut talker, &live).unwrap();
        }
        out = talker.step(m, &frame);
    }
    (codes, waits)
}

#[test]
fn live_text_speaks_exactly_the_whole_text() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut waited = 0;
    for fx in ["tiny-a", "tiny-base", "tiny-vd"] {
        let m = load(fx);
        for (i, text) in TEXTS
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == 0 || fx == "tiny-a")
        {
            for (greedy, seed) in [(true, 0), (false, 7 + i as u64)] {
                let req = request(&m, fx, text, greedy, seed);
                let want = m.start(&req).unwrap().run_to_end();
                for max_piece in [1, 4, 12] {
                    let parts = pieces(text, &mut rng, max_piece);
                    let (got, waits) = run_live(&m, &req, &parts, &mut rng);
                    waited += waits;
                    assert_eq!(
                        got, want,
                        "{fx} {text:?} greedy={greedy} pieces of <= {max_piece}"
                    );
                }
            }
        }
    }
    assert!(waited > 0, "some runs made the talker wait for text");
}

#[test]
fn live_text_refuses_what_it_cannot_do() {
    let m = load("tiny-a");
    let mut live = LiveText::new();
    let mut req = request(&m, "tiny-a", "x", true, 0);
    req.text_streaming = false;
    live.push(&m.tokenizer, "Some words here").unwrap();
    assert!(matches!(
        m.live_sessions(&req, &live),
        Err(ModelError::InvalidRequest(_))
    ));
    req.text_streaming = true;
    let mut empty = LiveText::new();
    assert!(
        m.live_sessions(&req, &empty).unwrap().is_none(),
        "nothing yet"
    );
    empty.close(&m.tokenizer).unwrap();
    assert!(matches!(
        m.live_sessions(&req, &empty),
        Err(ModelError::EmptyText)
    ));
    // Text after close is ignored.
    let mut closed = LiveText::new();
    closed.push(&m.tokenizer, "Done.").unwrap();
    closed.close(&m.tokenizer).unwrap();
    assert_eq!(closed.push(&m.tokenizer, " more").unwrap(), 0);
    assert_eq!(closed.text(), "Done.");
}
