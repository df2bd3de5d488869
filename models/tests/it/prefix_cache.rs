//! The talker's KV prefix cache: a request whose prompt starts with rows
//! another request already computed (the same voice, language, mode and
//! instruct) prefills only the rest, and gets exactly what a full prefill
//! gives — bit for bit, since the decoder treats rows independently and
//! causal attention makes a position's keys depend on earlier rows only.
//!
//! Covered on every layout: CustomVoice (a preset speaker, both text modes,
//! tiny-a), Base (an in-context clone and an x-vector-only clone, both text
//! modes, tiny-base) and VoiceDesign (tiny-vd), alone (`prefill`) and in
//! `step_batch` beside another session; plus what the cache keeps, what it
//! must not share, and its byte bound.

use std::path::Path;
use std::sync::Arc;

use tts_models::lm::BatchScratch;
use tts_models::{
    GenOptions, PrefixCache, Qwen3Tts, Request, TalkerOutput, TalkerState, TalkerWork, VoiceClone,
};

fn load(name: &str, cache_bytes: usize) -> Arc<Qwen3Tts> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    let mut m = Qwen3Tts::load(&dir).expect("load fixture");
    m.prefix_cache = PrefixCache::new(cache_bytes);
    Arc::new(m)
}

const ON: usize = 64 << 20;

/// A deterministic speech-like clip (two drifting partials and a little
/// noise), 24 kHz.
fn clip(seconds: f32, seed: u32) -> Vec<f32> {
    let n = (seconds * 24_000.0) as usize;
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|i| {
            let t = i as f32 / 24_000.0;
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let noise = (s as f32 / u32::MAX as f32 - 0.5) * 0.02;
            0.3 * (2.0 * std::f32::consts::PI * (140.0 + 20.0 * t) * t).sin()
                + 0.1 * (2.0 * std::f32::consts::PI * (430.0 + seed as f32) * t).sin()
                + noise
        })
        .collect()
}

fn voice(m: &Qwen3Tts, seed: u32, icl: bool) -> Arc<VoiceClone> {
    let ref_text = icl.then_some("A short reference sentence for the clone.");
    Arc::new(m.clone_voice(&clip(1.2, seed), ref_text, !icl).unwrap().0)
}

fn request(m: &Qwen3Tts, text: &str, streaming: bool) -> Request {
    let mut options: GenOptions = m.default_options().greedy();
    options.max_frames = 6;
    Request {
        text: text.into(),
        speaker: None,
        language: "english".into(),
        instruct: None,
        voice_clone: None,
        text_streaming: streaming,
        options,
    }
}

/// The requests of one fixture, each layout in both text modes; `texts`
/// gives each a different spoken text (same voice).
fn requests(fx: &str, m: &Qwen3Tts, text: &str) -> Vec<(String, Request)> {
    let mut out = Vec::new();
    for streaming in [false, true] {
        let mode = if streaming { "streaming" } else { "prefill" };
        match fx {
            "tiny-a" => {
                let mut r = request(m, text, streaming);
                r.speaker = Some(m.speakers()[0].clone());
                out.push((format!("{fx} preset speaker, {mode}"), r));
            }
            "tiny-base" => {
                for icl in [true, false] {
                    let mut r = request(m, text, streaming);
                    r.voice_clone = Some(voice(m, 7, icl));
                    let what = if icl { "ICL clone" } else { "x-vector clone" };
                    out.push((format!("{fx} {what}, {mode}"), r));
                }
            }
            "tiny-vd" => {
                let mut r = request(m, text, streaming);
                r.instruct = Some("A calm, low voice speaking slowly.".into());
                out.push((format!("{fx} designed voice, {mode}"), r));
            }
            _ => unreachable!(),
        }
    }
    out
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn prefill(m: &Arc<Qwen3Tts>, req: &Request) -> (TalkerState, TalkerOutput) {
    let (mut t, _) = m.sessions(req).unwrap();
    let out = t.prefill(m);
    (t, out)
}

const FIXTURES: [&str; 3] = ["tiny-a", "tiny-base", "tiny-vd"];

#[test]
fn a_cached_prefix_gives_the_full_prefills_result_bit_for_bit() {
    for fx in FIXTURES {
        let off = load(fx, 0);
        let on = load(fx, ON);
        for text in ["Hello there.", "Another, rather longer sentence to speak."] {
            for ((name, r_off), (_, r_on)) in requests(fx, &off, text)
                .into_iter()
                .zip(requests(fx, &on, text))
            {
                let (t_ref, want) = prefill(&off, &r_off);
                assert_eq!(t_ref.reused_rows(), 0, "{name}: cache off");
                let shared = t_ref.prompt().cacheable_rows();
                assert!(shared > 0, "{name}: a prefix to share");
                // First prefill of this prefix on `on` may miss or hit (the
                // other text ran first); the second always hits.
                for pass in 0..2 {
                    let (t, got) = prefill(&on, &r_on);
                    if pass == 1 {
                        assert_eq!(t.reused_rows(), shared, "{name}: second prefill hits");
                    }
                    assert_eq!(got.c0, want.c0, "{name}: first token");
                    assert_eq!(bits(&got.hidden), bits(&want.hidden), "{name}: hidden");
                    assert_eq!(t.positions(), t_ref.positions(), "{name}: positions");
                }
            }
        }
        let s = on.prefix_cache.stats();
        assert!(s.hits > 0 && s.inserts > 0, "{fx}: {s:?}");
    }
}

#[test]
fn whole_requests_with_a_cached_prefix_generate_the_same_codes() {
    for fx in FIXTURES {
        let off = load(fx, 0);
        let on = load(fx, ON);
        for ((name, r_off), (_, r_on)) in requests(fx, &off, "Greedy codes must not change.")
            .into_iter()
            .zip(requests(fx, &on, "Greedy codes must not change."))
        {
            let want = off.start(&r_off).unwrap().run_to_end();
            for _ in 0..2 {
                let got = on.start(&r_on).unwrap().run_to_end();
                assert_eq!(got, want, "{name}: codes");
            }
        }
    }
}

#[test]
fn batched_prefills_use_and_fill_the_cache_exactly() {
    for fx in FIXTURES {
        let off = load(fx, 0);
        let on = load(fx, ON);
        let a = requests(fx, &on, "The first session.");
        let b = requests(fx, &on, "A second session with the same voice.");
        let a_off = requests(fx, &off, "The first session.");
        let b_off = requests(fx, &off, "A second session with the same voice.");
        for i in 0..a.len() {
            let name = &a[i].0;
            let (_, want_a) = prefill(&off, &a_off[i].1);
            let (_, want_b) = prefill(&off, &b_off[i].1);
            // Step 1: `a` alone in a batch (a miss that fills the cache);
            // step 2: `b` (a hit) joins beside a second `a` (a hit).
            let mut scratch = BatchScratch::default();
            let (mut s1, _) = on.sessions(&a[i].1).unwrap();
            let out1 =
                TalkerState::step_batch(&on, &mut [(&mut s1, TalkerWork::Prefill)], &mut scratch);
            assert_eq!(
                bits(&out1[0].hidden),
                bits(&want_a.hidden),
                "{name}: a alone"
            );
            let (mut s2, _) = on.sessions(&b[i].1).unwrap();
            let (mut s3, _) = on.sessions(&a[i].1).unwrap();
            let outs = TalkerState::step_batch(
                &on,
                &mut [
                    (&mut s2, TalkerWork::Prefill),
                    (&mut s3, TalkerWork::Prefill),
                ],
                &mut scratch,
            );
            assert!(s2.reused_rows() > 0 && s3.reused_rows() > 0, "{name}: hits");
            assert_eq!(bits(&outs[0].hidden), bits(&want_b.hidden), "{name}: b");
            assert_eq!(
                bits(&outs[1].hidden),
                bits(&want_a.hidden),
                "{name}: a again"
            );
        }
    }
}

#[test]
fn different_voices_and_languages_do_not_share_a_prefix() {
    let m = load("tiny-base", ON);
    let mut r1 = request(&m, "Same text.", true);
    r1.voice_clone = Some(voice(&m, 1, true));
    let mut r2 = r1.clone();
    r2.voice_clone = Some(voice(&m, 2, true));
    let mut r3 = r1.clone();
    r3.language = "auto".into();
    for r in [&r1, &r2, &r3] {
        let (t, _) = prefill(&m, r);
        assert_eq!(t.reused_rows(), 0, "a new voice or language misses");
    }
    let s = m.prefix_cache.stats();
    assert_eq!((s.hits, s.inserts, s.entries), (0, 3, 3), "{s:?}");
    let (t, _) = prefill(&m, &r2);
    assert!(t.reused_rows() > 0);
}

#[test]
fn the_cache_stays_within_its_byte_budget() {
    let probe = load("tiny-a", ON);
    let (t, _) = prefill(&probe, &requests("tiny-a", &probe, "x")[0].1);
    let one = probe.prefix_cache.stats().bytes;
    assert!(one > 0 && t.prompt().cacheable_rows() > 0);
    // Room for two entries: a third evicts the least recently used.
    let m = load("tiny-a", 2 * one + one / 2);
    let speakers = m.speakers();
    for s in speakers.iter().take(3) {
        let mut r = request(&m, "Budget.", false);
        r.speaker = Some(s.clone());
        prefill(&m, &r);
    }
    let st = m.prefix_cache.stats();
    assert_eq!((st.entries, st.evictions), (2, 1), "{st:?}");
    assert!(st.bytes <= m.prefix_cache.budget());
    // The first speaker was evicted, the third is kept.
    let mut r = request(&m, "Budget again.", false);
    r.speaker = Some(speakers[0].clone());
    assert_eq!(prefill(&m, &r).0.reused_rows(), 0);
    r.speaker = Some(speakers[2].clone());
    assert!(prefill(&m, &r).0.reused_rows() > 0);
    // Disabled: nothing kept, nothing reused.
    let off = load("tiny-a", 0);
    prefill(&off, &r);
    assert_eq!(prefill(&off, &r).0.reused_rows(), 0);
    assert_eq!(off.prefix_cache.stats().entries, 0);
}
