//! Parity with the official PyTorch implementation (qwen-tts 0.1.1) on the
//! committed random-weight fixtures. The goldens were written by
//! `tools/make_fixtures.py`; see tools/README.md.
//!
//! Tolerances: token ids and greedy codes must be identical; logits and
//! waveforms within rel-L2 1e-4 (f32 compute in different summation order
//! gives ~1e-6); streaming vs one-shot decode within 1e-5 max abs.

use crate::common;

use std::sync::Arc;

use common::{ids, rel_l2, request, root, Golden};
use tts_models::Qwen3Tts;

const FIXTURES: [&str; 2] = ["tiny-a", "tiny-b"];

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn model(fixture: &str) -> Arc<Qwen3Tts> {
    Arc::new(
        Qwen3Tts::load(&root().join(fixture)).unwrap_or_else(|e| panic!("loading {fixture}: {e}")),
    )
}

#[test]
fn tokenizer_matches_official() {
    for fx in FIXTURES {
        let g = Golden::load(fx);
        let m = model(fx);
        for item in g.cases["tokenizer"].as_array().unwrap() {
            let text = item["text"].as_str().unwrap();
            let want = ids(&item["ids"]).unwrap();
            assert_eq!(
                m.tokenizer.encode(text).unwrap(),
                want,
                "{fx}: tokenizing {text:?}"
            );
        }
    }
}

#[test]
fn prompts_match_official() {
    for fx in FIXTURES {
        let g = Golden::load(fx);
        let m = model(fx);
        for case in g.cases["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let p = m.build_prompt(&request(&m, case)).unwrap();
            assert_eq!(
                p.input_ids,
                ids(&case["input_ids"]).unwrap(),
                "{fx}/{name}: input ids"
            );
            assert_eq!(
                p.instruct_ids,
                ids(&case["instruct_ids"]),
                "{fx}/{name}: instruct ids"
            );
            let (want, shape) = g.f32(&format!("{name}.prefill_embeds"));
            assert_eq!(p.prefill_rows(), shape[0], "{fx}/{name}: prefill rows");
            let e = rel_l2(&p.prefill, &want);
            assert!(e <= 1e-5, "{fx}/{name}: prefill embeddings rel-L2 {e:.2e}");
            let (want, _) = g.f32(&format!("{name}.trailing"));
            let e = rel_l2(&p.trailing, &want);
            assert!(e <= 1e-5, "{fx}/{name}: trailing text rel-L2 {e:.2e}");
        }
    }
}

#[test]
fn teacher_forced_logits_match_official() {
    for fx in FIXTURES {
        let g = Golden::load(fx);
        let m = model(fx);
        for case in g.cases["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let p = m.build_prompt(&request(&m, case)).unwrap();
            let (codes, _) = g.codes(&format!("{name}.codes"));
            let (want_t, shape_t) = g.f32(&format!("{name}.talker_logits"));
            let (want_c, _) = g.f32(&format!("{name}.cp_logits"));
            let (got_t, got_c) = m.teacher_force(&p, &codes, shape_t[0]);
            let e = rel_l2(&got_t, &want_t);
            assert!(e <= 1e-4, "{fx}/{name}: talker logits rel-L2 {e:.2e}");
            let e = rel_l2(&got_c, &want_c);
            assert!(
                e <= 1e-4,
                "{fx}/{name}: code predictor logits rel-L2 {e:.2e}"
            );
        }
    }
}

#[test]
fn greedy_codes_match_official() {
    for fx in FIXTURES {
        let g = Golden::load(fx);
        let m = model(fx);
        for case in g.cases["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let (want, shape) = g.codes(&format!("{name}.codes"));
            let mut gen = m.start(&request(&m, case)).unwrap();
            let got = gen.run_to_end();
            assert_eq!(got.len() / shape[1], shape[0], "{fx}/{name}: frame count");
            assert_eq!(got, want, "{fx}/{name}: greedy codes");
            let hit_eos = gen.stop_reason() == Some(tts_models::StopReason::Eos);
            assert_eq!(
                hit_eos,
                case["hit_eos"].as_bool().unwrap(),
                "{fx}/{name}: stop reason"
            );
        }
    }
}

#[test]
fn waveforms_match_official() {
    for fx in FIXTURES {
        let g = Golden::load(fx);
        let m = model(fx);
        let groups = m.code2wav.num_quantizers();
        for case in g.cases["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let (codes, _) = g.codes(&format!("{name}.codes"));
            let (want, _) = g.f32(&format!("{name}.wav"));
            let got = m
                .code2wav
                .decode_chunked(&codes, codes.len() / groups, 300, 25)
                .unwrap();
            let e = rel_l2(&got, &want);
            assert!(e <= 1e-4, "{fx}/{name}: waveform rel-L2 {e:.2e}");
        }
        for (codes_name, wav_name, chunked) in [
            ("decode_short.codes", "decode_short.wav", true),
            ("decode_long.codes", "decode_long.wav_chunked", true),
            ("decode_long.codes", "decode_long.wav_full", false),
        ] {
            if !g.has(codes_name) {
                continue;
            }
            let (codes, shape) = g.codes(codes_name);
            let (want, _) = g.f32(wav_name);
            let got = if chunked {
                m.code2wav
                    .decode_chunked(&codes, shape[0], 300, 25)
                    .unwrap()
            } else {
                m.code2wav.decode(&codes, shape[0]).unwrap()
            };
            let e = rel_l2(&got, &want);
            assert!(e <= 1e-4, "{fx}/{wav_name}: rel-L2 {e:.2e}");
        }
    }
}

#[test]
fn streaming_decoder_equals_one_shot() {
    for fx in FIXTURES {
        let g = Golden::load(fx);
        let m = model(fx);
        let (codes, shape) = g.codes("decode_long.codes");
        let (frames, groups) = (shape[0], shape[1]);
        let whole = m.code2wav.decode(&codes, frames).unwrap();
        for chunk in [1usize, 3, 7, 25] {
            let mut dec = m.code2wav.streaming();
            let mut got = Vec::new();
            let mut t = 0;
            while t < frames {
                let n = chunk.min(frames - t);
                got.extend(dec.step(&codes[t * groups..(t + n) * groups], n).unwrap());
                t += n;
            }
            let d = max_abs(&got, &whole);
            assert!(d <= 1e-5, "{fx}: chunks of {chunk}: max abs diff {d:.2e}");
        }
    }
}
