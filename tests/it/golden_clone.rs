//! Parity of the Base (voice clone) and VoiceDesign paths with the official
//! PyTorch implementation (qwen-tts 0.1.1), on the committed random-weight
//! fixtures tiny-base and tiny-vd (see tools/README.md).
//!
//! The clone cases take the official x-vector and reference codes from
//! `encoders.safetensors`, so these tests pin the prompt, the generation
//! and the decode-and-cut on their own; the encoders have their own parity
//! tests. Tolerances as tests/it/golden.rs: ids and greedy codes identical,
//! prefill rows rel-L2 <= 1e-5, logits and waveforms <= 1e-4.

use crate::common;

use std::sync::Arc;

use common::{clone_root, ids, rel_l2, request, root, Golden};
use safetensors::SafeTensors;
use serde_json::Value;
use tts_models::{CloneReference, ModelError, Qwen3Tts, Request, StopReason, VoiceClone};

/// tiny-a from the committed fixtures; Base and VoiceDesign from
/// [`clone_root`].
fn dir_of(fixture: &str) -> std::path::PathBuf {
    match fixture {
        "tiny-base" | "tiny-vd" => clone_root().join(fixture),
        _ => root().join(fixture),
    }
}

fn model(fixture: &str) -> Arc<Qwen3Tts> {
    Arc::new(Qwen3Tts::load(&dir_of(fixture)).unwrap_or_else(|e| panic!("loading {fixture}: {e}")))
}

/// The official encoders' outputs per reference clip.
struct Encoders(Vec<u8>);

impl Encoders {
    fn load() -> Self {
        Encoders(
            std::fs::read(clone_root().join("goldens/tiny-base/encoders.safetensors")).unwrap(),
        )
    }
    fn f32(&self, name: &str) -> Vec<f32> {
        let t = SafeTensors::deserialize(&self.0).unwrap();
        let v = t.tensor(name).unwrap();
        v.data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }
    fn codes(&self, name: &str) -> (Vec<u32>, usize) {
        let t = SafeTensors::deserialize(&self.0).unwrap();
        let v = t.tensor(name).unwrap();
        let codes = v
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
            .collect();
        (codes, v.shape()[0])
    }
}

/// A tiny-base case as the greedy request the official script ran, with
/// the official x-vector and (ICL) reference codes of its clip.
fn clone_request(m: &Qwen3Tts, enc: &Encoders, case: &Value) -> Request {
    let clip = case["ref_audio"].as_str().unwrap();
    let reference = if case["x_vector_only"].as_bool().unwrap() {
        None
    } else {
        let (codes, frames) = enc.codes(&format!("{clip}.ref_codes"));
        Some(CloneReference {
            text: case["ref_text"].as_str().unwrap().to_string(),
            codes,
            frames,
        })
    };
    let mut req = request(m, case);
    req.voice_clone = Some(Arc::new(VoiceClone {
        x_vector: enc.f32(&format!("{clip}.xvector")),
        reference,
    }));
    req
}

fn cases(g: &Golden) -> Vec<Value> {
    g.cases["cases"].as_array().unwrap().clone()
}

/// The requests of a fixture's cases, as the official script ran them.
fn requests(fx: &str, m: &Qwen3Tts) -> Vec<(Value, Request)> {
    let g = Golden::load(fx);
    let enc = (fx == "tiny-base").then(Encoders::load);
    cases(&g)
        .into_iter()
        .map(|c| {
            let r = match &enc {
                Some(e) => clone_request(m, e, &c),
                None => request(m, &c),
            };
            (c, r)
        })
        .collect()
}

const FIXTURES: [&str; 2] = ["tiny-base", "tiny-vd"];

#[test]
fn clone_and_design_prompts_match_official() {
    for fx in FIXTURES {
        let g = Golden::load(fx);
        let m = model(fx);
        for (case, req) in requests(fx, &m) {
            let name = case["name"].as_str().unwrap();
            let p = m.build_prompt(&req).unwrap();
            assert_eq!(
                p.input_ids,
                ids(&case["input_ids"]).unwrap(),
                "{fx}/{name}: input ids"
            );
            assert_eq!(
                p.ref_ids,
                ids(&case["ref_ids"]),
                "{fx}/{name}: reference ids"
            );
            assert_eq!(
                p.instruct_ids,
                ids(&case["instruct_ids"]),
                "{fx}/{name}: instruct ids"
            );
            let (want, shape) = g.f32(&format!("{name}.prefill_embeds"));
            assert_eq!(p.prefill_rows(), shape[0], "{fx}/{name}: prefill rows");
            let e = rel_l2(&p.prefill, &want);
            assert!(e <= 1e-5, "{fx}/{name}: prefill rows rel-L2 {e:.2e}");
            let (want, shape) = g.f32(&format!("{name}.trailing"));
            assert_eq!(p.trailing_rows(), shape[0], "{fx}/{name}: trailing rows");
            let e = rel_l2(&p.trailing, &want);
            assert!(e <= 1e-5, "{fx}/{name}: trailing rows rel-L2 {e:.2e}");
        }
    }
}

#[test]
fn clone_and_design_logits_match_official() {
    for fx in FIXTURES {
        let g = Golden::load(fx);
        let m = model(fx);
        let groups = m.config.talker.num_code_groups;
        for (case, req) in requests(fx, &m) {
            let name = case["name"].as_str().unwrap();
            let p = m.build_prompt(&req).unwrap();
            let (codes, _) = g.codes(&format!("{name}.codes"));
            let (want_t, shape_t) = g.f32(&format!("{name}.talker_logits"));
            let (got_t, got_c) = m.teacher_force(&p, &codes, shape_t[0]);
            let e = rel_l2(&got_t, &want_t);
            assert!(e <= 1e-4, "{fx}/{name}: talker logits rel-L2 {e:.2e}");
            let (want_c, _) = g.f32(&format!("{name}.cp_logits_first"));
            let e = rel_l2(&got_c[..want_c.len()], &want_c);
            assert!(
                e <= 1e-4,
                "{fx}/{name}: first frame's code predictor logits rel-L2 {e:.2e}"
            );
            assert_eq!(want_c.len() % (groups - 1), 0);
        }
    }
}

#[test]
fn clone_and_design_greedy_codes_match_official() {
    for fx in FIXTURES {
        let g = Golden::load(fx);
        let m = model(fx);
        for (case, req) in requests(fx, &m) {
            let name = case["name"].as_str().unwrap();
            let (want, shape) = g.codes(&format!("{name}.codes"));
            let mut gen = m.start(&req).unwrap();
            let got = gen.run_to_end();
            assert_eq!(got.len() / shape[1], shape[0], "{fx}/{name}: frame count");
            assert_eq!(got, want, "{fx}/{name}: greedy codes");
            assert_eq!(
                gen.stop_reason() == Some(StopReason::Eos),
                case["hit_eos"].as_bool().unwrap(),
                "{fx}/{name}: stop reason"
            );
        }
    }
}

/// Offline: the official decode of reference + generated codes, cut where
/// the reference ends (upstream's float formula). Streaming: a decoder
/// primed with the reference, which equals the uncut official decode from
/// the reference's last sample on while the whole stays in one 300-frame
/// chunk (all these cases) — the official cut keeps one extra reference
/// sample for some length pairs, the streamed audio never does.
#[test]
fn clone_and_design_waveforms_match_official() {
    for fx in FIXTURES {
        let g = Golden::load(fx);
        let m = model(fx);
        let spf = m.code2wav.samples_per_frame();
        for (case, req) in requests(fx, &m) {
            let name = case["name"].as_str().unwrap();
            let (codes, shape) = g.codes(&format!("{name}.codes"));
            let (want, _) = g.f32(&format!("{name}.wav"));
            let got = m.decode_utterance(&req, &codes, shape[0], false).unwrap();
            assert_eq!(got.len(), want.len(), "{fx}/{name}: samples after the cut");
            let e = rel_l2(&got, &want);
            assert!(e <= 1e-4, "{fx}/{name}: waveform rel-L2 {e:.2e}");
            if let Some(cut) = case["cut"].as_u64().filter(|&c| c > 0) {
                assert_eq!(
                    cut as usize,
                    tts_models::model::icl_cut(
                        case["ref_frames"].as_u64().unwrap() as usize,
                        case["ref_frames"].as_u64().unwrap() as usize + shape[0],
                        case["samples_uncut"].as_u64().unwrap() as usize
                    ),
                    "{fx}/{name}: cut"
                );
            }
            let streamed = m.decode_utterance(&req, &codes, shape[0], true).unwrap();
            assert_eq!(
                streamed.len(),
                shape[0] * spf,
                "{fx}/{name}: streamed length"
            );
            let uncut = if g.has(&format!("{name}.wav_uncut")) {
                let (u, _) = g.f32(&format!("{name}.wav_uncut"));
                u[u.len() - streamed.len()..].to_vec()
            } else {
                want.clone()
            };
            let e = rel_l2(&streamed, &uncut);
            assert!(e <= 1e-4, "{fx}/{name}: streamed waveform rel-L2 {e:.2e}");
        }
    }
}

/// The official `generate_voice_design` takes an empty instruct as none
/// (`if ins is None or ins == "": instruct_ids.append(None)`): no instruct
/// rows, not an empty user turn, and it speaks. Given as `""` or left out,
/// the request builds the official prompt, greedy codes and waveform.
#[test]
fn voice_design_with_an_empty_instruct_speaks_as_the_official() {
    let g = Golden::load("tiny-vd");
    let m = model("tiny-vd");
    let case = cases(&g)
        .into_iter()
        .find(|c| c["instruct"].as_str() == Some(""))
        .expect("the fixture has an empty-instruct case");
    let name = case["name"].as_str().unwrap();
    assert!(
        case["instruct_ids"].is_null(),
        "{name}: official instruct ids"
    );
    let (want_codes, shape) = g.codes(&format!("{name}.codes"));
    let (want_wav, _) = g.f32(&format!("{name}.wav"));
    let (want_prefill, prefill_shape) = g.f32(&format!("{name}.prefill_embeds"));
    for instruct in [Some(String::new()), None] {
        let mut req = request(&m, &case);
        req.instruct = instruct.clone();
        let p = m
            .build_prompt(&req)
            .unwrap_or_else(|e| panic!("{name} ({instruct:?}): {e}"));
        assert_eq!(p.instruct_ids, None, "{name} ({instruct:?}): instruct ids");
        assert_eq!(p.prefill_rows(), prefill_shape[0], "{name}: prefill rows");
        let e = rel_l2(&p.prefill, &want_prefill);
        assert!(e <= 1e-5, "{name}: prefill rows rel-L2 {e:.2e}");
        let got = m.start(&req).unwrap().run_to_end();
        assert_eq!(got, want_codes, "{name} ({instruct:?}): greedy codes");
        let wav = m.decode_utterance(&req, &got, shape[0], false).unwrap();
        let e = rel_l2(&wav, &want_wav);
        assert!(e <= 1e-4, "{name} ({instruct:?}): waveform rel-L2 {e:.2e}");
    }
}

/// Through the streaming engine (chunks of 1, 4, 8 frames), an ICL clone
/// gives the official greedy codes, and its audio is the primed decoder's:
/// the official uncut decode from where the reference ends.
#[test]
fn streamed_clone_equals_the_official_decode() {
    use tts_actors::{ChunkSchedule, Engine, EngineConfig, Event};
    let g = Golden::load("tiny-base");
    let m = model("tiny-base");
    let engine = Engine::start(
        m.clone(),
        EngineConfig {
            chunks: ChunkSchedule::new(vec![1, 4, 8]).unwrap(),
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let session = engine.open_session();
    for (case, req) in requests("tiny-base", &m) {
        let name = case["name"].as_str().unwrap();
        let mut s = session.synthesize_blocking(req).unwrap();
        let (mut codes, mut audio) = (Vec::new(), Vec::new());
        loop {
            match s.next_blocking().expect("a terminal event") {
                Event::Started { .. } => {}
                Event::Audio(c) => {
                    codes.extend(c.codes.iter().copied());
                    audio.extend(c.samples.iter().copied());
                }
                Event::Done { .. } => break,
                other => panic!("{name}: {other:?}"),
            }
        }
        let (want, _) = g.codes(&format!("{name}.codes"));
        assert_eq!(codes, want, "{name}: streamed codes");
        let frames = want.len() / m.config.talker.num_code_groups;
        assert_eq!(
            audio.len(),
            frames * m.code2wav.samples_per_frame(),
            "{name}: samples"
        );
        let uncut = match g.has(&format!("{name}.wav_uncut")) {
            true => g.f32(&format!("{name}.wav_uncut")).0,
            false => g.f32(&format!("{name}.wav")).0,
        };
        let tail = &uncut[uncut.len() - audio.len()..];
        let e = rel_l2(&audio, tail);
        assert!(e <= 1e-4, "{name}: streamed audio rel-L2 {e:.2e}");
    }
}

/// From the reference WAV file to the talker's codes: the decoded clip is
/// the samples the official code saw, the x-vector and reference codes
/// equal the official encoders' (rel-L2 <= 1e-4; codes identical), and the
/// voice made here gives the official greedy codes.
#[test]
fn a_voice_cloned_from_the_wav_file_speaks_like_the_official() {
    let g = Golden::load("tiny-base");
    let enc = Encoders::load();
    let m = model("tiny-base");
    for clip in g.cases["ref_clips"].as_array().unwrap() {
        let name = clip["name"].as_str().unwrap();
        let path = clone_root()
            .join("goldens/tiny-base")
            .join(clip["file"].as_str().unwrap());
        let audio = tts_audio::ReferenceAudio::from_path(&path).unwrap();
        assert_eq!(
            audio.samples,
            enc.f32(&format!("{name}.samples")),
            "{name}: samples"
        );
        let text = clip["text"].as_str().unwrap();
        let (voice, _) = m.clone_voice(&audio.samples, Some(text), false).unwrap();
        let e = rel_l2(&voice.x_vector, &enc.f32(&format!("{name}.xvector")));
        assert!(e <= 1e-4, "{name}: x-vector rel-L2 {e:.2e}");
        let r = voice.reference.as_ref().unwrap();
        let (want, frames) = enc.codes(&format!("{name}.ref_codes"));
        assert_eq!(
            (r.frames, &r.codes),
            (frames, &want),
            "{name}: reference codes"
        );
        let (xv, _) = m.clone_voice(&audio.samples, None, true).unwrap();
        assert_eq!(xv.x_vector, voice.x_vector);
        assert!(xv.reference.is_none());
        for case in cases(&g).iter().filter(|c| c["ref_audio"] == name) {
            let case_name = case["name"].as_str().unwrap();
            let mut req = request(&m, case);
            let v = if case["x_vector_only"].as_bool().unwrap() {
                xv.clone()
            } else {
                voice.clone()
            };
            req.voice_clone = Some(Arc::new(v));
            let got = m.start(&req).unwrap().run_to_end();
            let (want, _) = g.codes(&format!("{case_name}.codes"));
            assert_eq!(got, want, "{case_name}: greedy codes from the cloned voice");
        }
    }
}

#[test]
fn clone_requests_refuse_what_the_family_cannot_do() {
    let cv = model("tiny-a");
    let e = cv
        .clone_voice(&vec![0.1; 24_000], Some("Hi."), false)
        .unwrap_err();
    assert!(matches!(e, ModelError::WrongFamily { .. }), "{e}");
    assert!(e.to_string().contains("Base checkpoint"), "{e}");
    let base = model("tiny-base");
    let e = base
        .clone_voice(&vec![0.1; 24_000], None, false)
        .unwrap_err();
    assert!(e.to_string().contains("transcript"), "{e}");
    let e = base
        .clone_voice(&vec![0.1; 24_000], Some("  "), false)
        .unwrap_err();
    assert!(e.to_string().contains("transcript"), "{e}");
}
