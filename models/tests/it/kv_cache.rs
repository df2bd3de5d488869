//! The LM's KV cache keeps each head's positions in one run and re-lays
//! them out when it grows: the hidden states must not depend on how much
//! room a cache had, on when it grew, or on a clear and reuse, in either
//! format (f32, bf16).

use std::path::Path;

use tts_models::{KvFormat, LoadOptions, Precision, Qwen3Tts, StagePlan};

fn assert_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!("{what}: element {i} differs: {} vs {}", got[i], want[i]);
    }
}

fn load(kv: KvFormat) -> Qwen3Tts {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a");
    let mut o = LoadOptions::uniform(Precision::F32);
    o.talker = StagePlan::uniform(Precision::F32).with_kv(kv);
    Qwen3Tts::load_with(&dir, o).expect("load fixture")
}

#[test]
fn growing_reserved_and_reused_caches_give_the_same_bits() {
    for kv in [KvFormat::F32, KvFormat::Bf16] {
        same_bits(kv);
    }
}

/// The talker's hidden states from 45 positions: what a freshly grown cache
/// gives.
fn same_bits(kv: KvFormat) -> Vec<Vec<f32>> {
    let m = load(kv);
    let lm = m.talker.lm();
    assert_eq!(lm.kv_format(), kv);
    let h = lm.config().hidden_size;
    let row =
        |i: usize| -> Vec<f32> { (0..h).map(|j| ((i * h + j) as f32 * 0.37).sin()).collect() };
    // A 5-row prefill, then 40 one-row steps: an empty cache grows (by
    // doubling) several times on the way; the reserved one never does.
    let prefill: Vec<f32> = (0..5).flat_map(row).collect();
    let run = |cache: &mut tts_models::lm::KvCache| -> Vec<Vec<f32>> {
        let mut out = vec![lm.forward(&prefill, 5, cache)];
        for i in 5..45 {
            out.push(lm.forward(&row(i), 1, cache));
        }
        out
    };
    let mut grown = lm.new_cache();
    assert_eq!(grown.format(), kv);
    let want = run(&mut grown);
    assert_eq!(grown.len(), 45);
    let mut reserved = lm.new_cache_with_capacity(64);
    let got = run(&mut reserved);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_bits(g, w, &format!("reserved, call {i}"));
    }
    // Reused within its room, a cache allocates nothing more.
    let bytes = reserved.bytes();
    reserved.clear();
    run(&mut reserved);
    assert_eq!(reserved.bytes(), bytes, "a reused cache grew");
    grown.clear();
    let again = run(&mut grown);
    for (i, (g, w)) in again.iter().zip(&want).enumerate() {
        assert_bits(g, w, &format!("cleared and reused, call {i}"));
    }
    // A prefix taken from a grown cache starts another at the same bits.
    let prefix = grown.prefix(20);
    let mut from_prefix = lm.new_cache();
    assert!(from_prefix.load_prefix(&prefix));
    assert_eq!(from_prefix.len(), 20);
    let next = lm.forward(&row(20), 1, &mut from_prefix);
    assert_bits(&next, &want[16], "after a loaded prefix");
    // A prefix of the other format is refused (the cache stays empty).
    let other = load(match kv {
        KvFormat::F32 => KvFormat::Bf16,
        KvFormat::Bf16 => KvFormat::F32,
    });
    let mut wrong = other.talker.lm().new_cache();
    assert!(
        !wrong.load_prefix(&prefix),
        "{kv}: a prefix of another format"
    );
    assert!(wrong.is_empty());
    want
}

/// A bf16 cache holds half the bytes of an f32 one for the same positions,
/// and its hidden states stay close to the f32 cache's (the keys and values
/// rounded once to 8 significant bits: the official implementation's own
/// cache in bf16).
#[test]
fn a_bf16_cache_holds_half_the_bytes_and_stays_close() {
    let (f32s, bf16s) = (load(KvFormat::F32), load(KvFormat::Bf16));
    let (a, b) = (f32s.talker.lm(), bf16s.talker.lm());
    assert_eq!(2 * b.kv_bytes_per_position(), a.kv_bytes_per_position());
    let (ca, cb) = (a.new_cache_with_capacity(64), b.new_cache_with_capacity(64));
    // The forward's working buffers are not in use yet: only the history.
    assert_eq!(2 * cb.bytes(), ca.bytes());
    let (want, got) = (same_bits(KvFormat::F32), same_bits(KvFormat::Bf16));
    let mut worst = 0f32;
    for (w, g) in want.iter().zip(&got) {
        let num: f32 = w.iter().zip(g).map(|(x, y)| (x - y) * (x - y)).sum();
        let den: f32 = w.iter().map(|x| x * x).sum();
        worst = worst.max((num / den).sqrt());
    }
    assert!(
        worst > 0.0,
        "bf16 rounding changed nothing: is the cache f32?"
    );
    assert!(worst < 1e-2, "relative error {worst} of the bf16 cache");
}
