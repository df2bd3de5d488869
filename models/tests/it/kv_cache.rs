//! The LM's KV cache keeps each head's positions in one run and re-lays
//! them out when it grows: the hidden states must not depend on how much
//! room a cache had, on when it grew, or on a clear and reuse.

use std::path::Path;

use tts_models::{LoadOptions, Precision, Qwen3Tts};

fn assert_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!("{what}: element {i} differs: {} vs {}", got[i], want[i]);
    }
}

#[test]
fn growing_reserved_and_reused_caches_give_the_same_bits() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a");
    let m = Qwen3Tts::load_with(&dir, LoadOptions::uniform(Precision::F32)).expect("load fixture");
    let lm = m.talker.lm();
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
}
