//! Encoder tests: the official PyTorch encoder's stage outputs and reference
//! codes on the tiny-base speech tokenizer (32 quantizers, 16 kept,
//! codebook 2048, hop 1920; `tools/clone_fixtures.py`), input checks and
//! load-time refusals.

use std::path::{Path, PathBuf};

use safetensors::tensor::Dtype;

use super::*;

/// Relative L2 bound against PyTorch f32 (different summation orders).
const GOLDEN_REL_L2: f64 = 1e-4;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn tiny_base() -> CodecEncoder {
    CodecEncoder::load(&fixtures_dir().join("tiny-base/speech_tokenizer")).unwrap()
}

/// An F32 tensor and its shape.
fn st_f32(st: &safetensors::SafeTensors<'_>, name: &str) -> (Vec<f32>, Vec<usize>) {
    let t = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("golden `{name}`: {e}"));
    assert_eq!(t.dtype(), Dtype::F32, "{name}");
    let v = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (v, t.shape().to_vec())
}

fn st_i64(st: &safetensors::SafeTensors<'_>, name: &str) -> (Vec<i64>, Vec<usize>) {
    let t = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("golden `{name}`: {e}"));
    assert_eq!(t.dtype(), Dtype::I64, "{name}");
    let v = t
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (v, t.shape().to_vec())
}

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += (g as f64 - w as f64).powi(2);
        den += (w as f64).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

fn check_clip(enc: &CodecEncoder, st: &safetensors::SafeTensors<'_>, clip: &str) {
    let (samples, _) = st_f32(st, &format!("{clip}.samples"));
    let s = enc.stages(&samples).unwrap();
    let hs = enc.config().hidden_size;
    for (stage, got, t) in [
        ("seanet", &s.seanet, s.t25),
        ("transformer", &s.transformer, s.t25),
        ("downsample", &s.downsample, s.codes.frames),
    ] {
        let (want, shape) = st_f32(st, &format!("{clip}.{stage}"));
        assert_eq!(shape, [hs, t], "{clip}.{stage} shape");
        let r = rel_l2(got, &want);
        eprintln!("{clip}.{stage}: rel-L2 {r:.3e}");
        assert!(r <= GOLDEN_REL_L2, "{clip}.{stage}: rel-L2 {r:.3e}");
    }
    let (want, shape) = st_i64(st, &format!("{clip}.ref_codes"));
    assert_eq!(
        shape,
        [s.codes.frames, s.codes.groups],
        "{clip}.ref_codes shape"
    );
    assert_eq!(s.codes.frames, samples.len().div_ceil(1920));
    let got: Vec<i64> = s.codes.codes.iter().map(|&c| c as i64).collect();
    let diff = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(
        diff,
        0,
        "{clip}.ref_codes: {diff} of {} codes differ",
        want.len()
    );
    // The public entry gives the same codes.
    assert_eq!(enc.encode(&samples).unwrap(), s.codes);
}

#[test]
fn encoder_matches_official_goldens_tiny_base() {
    let enc = tiny_base();
    assert_eq!(enc.num_quantizers(), 16);
    assert_eq!(enc.samples_per_frame(), 1920);
    assert_eq!(enc.sample_rate(), 24000);
    let bytes = std::fs::read(fixtures_dir().join("goldens/tiny-base/encoders.safetensors"))
        .expect("tiny-base encoder goldens (tools/clone_fixtures.py)");
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for clip in ["ref_a", "ref_b"] {
        check_clip(&enc, &st, clip);
    }
}

#[test]
fn frame_count_is_the_ceiling_of_n_over_1920() {
    let enc = tiny_base();
    for n in [1usize, 959, 960, 961, 1919, 1920, 1921, 3840, 5000] {
        let x: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.01).sin() * 0.3).collect();
        let c = enc.encode(&x).unwrap();
        assert_eq!(c.frames, n.div_ceil(1920), "n = {n}");
        assert_eq!(c.groups, 16);
        assert_eq!(c.codes.len(), c.frames * 16);
        assert!(c.codes.iter().all(|&v| v < 2048));
        assert_eq!(c.frame(c.frames - 1).len(), 16);
    }
}

#[test]
fn empty_and_non_finite_input_are_refused() {
    let enc = tiny_base();
    let e = enc.encode(&[]).unwrap_err();
    assert!(
        matches!(e, ModelError::EmptyAudio { sample_rate: 24000 }),
        "{e}"
    );
    let mut x = vec![0.1f32; 100];
    x[37] = f32::NAN;
    match enc.encode(&x).unwrap_err() {
        ModelError::NonFiniteAudio { index, .. } => assert_eq!(index, 37),
        e => panic!("{e}"),
    }
    x[37] = f32::INFINITY;
    assert!(matches!(
        enc.encode(&x),
        Err(ModelError::NonFiniteAudio { index: 37, .. })
    ));
}

#[test]
fn tiny_a_encoder_is_refused_by_name() {
    // tiny-a's encoder_config has more KV heads (4) than query heads (2),
    // which the official attention cannot run either.
    let e = CodecEncoder::load(&fixtures_dir().join("tiny-a/speech_tokenizer")).unwrap_err();
    let m = e.to_string();
    assert!(m.contains("encoder_config.num_key_value_heads"), "{m}");
}

#[test]
fn a_missing_encoder_tensor_is_named() {
    // The tiny-base tokenizer read with a config implying one more layer.
    let dir = fixtures_dir().join("tiny-base/speech_tokenizer");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    v["encoder_config"]["num_hidden_layers"] = 3.into();
    let cfg = CodecEncoderConfig::from_value(&dir.join("config.json"), &v).unwrap();
    let store = TensorStore::open_dir(&dir, "model").unwrap();
    let m = CodecEncoder::from_store(cfg, &store)
        .unwrap_err()
        .to_string();
    assert!(m.contains("encoder.encoder_transformer.layers.2."), "{m}");
}

#[test]
fn attention_spans_the_whole_clip_not_the_sliding_window() {
    // The config says sliding_window 250, but the official encoder attends
    // over every earlier frame. Frame 600 of the transformer output is past
    // what a 250-frame window could reach through both layers (2 * 249),
    // and past the SEANet's receptive field, so a change in the first
    // 20 ms reaches it only through full-clip attention.
    let enc = tiny_base();
    assert_eq!(enc.config().sliding_window, 250);
    assert_eq!(enc.config().num_layers, 2);
    let n = 620 * 960;
    let a: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.013).sin() * 0.2).collect();
    let mut b = a.clone();
    for v in &mut b[..480] {
        *v = -*v;
    }
    let (sa, sb) = (enc.stages(&a).unwrap(), enc.stages(&b).unwrap());
    let t = sa.t25;
    assert_eq!(t, 620);
    let col = |s: &EncoderStages, stage: &[f32], f: usize| -> Vec<f32> {
        let _ = s;
        (0..enc.config().hidden_size)
            .map(|c| stage[c * t + f])
            .collect()
    };
    // The SEANet output there is untouched...
    assert_eq!(col(&sa, &sa.seanet, 600), col(&sb, &sb.seanet, 600));
    // ...the transformer output is not.
    let (ta, tb) = (
        col(&sa, &sa.transformer, 600),
        col(&sb, &sb.transformer, 600),
    );
    assert!(
        ta.iter().zip(&tb).any(|(x, y)| x != y),
        "frame 600 ignores frame 0"
    );
}

#[test]
fn chunked_seanet_equals_the_whole_clip() {
    let enc = tiny_base();
    let hop = enc.config().hop;
    let s = &enc.w.seanet;
    for n in [1, hop - 1, hop, 7 * hop + 5, 20 * hop + 333] {
        let x: Vec<f32> = (0..n)
            .map(|i| ((i as f32) * 0.021).sin() * 0.4 + ((i * 7919) % 13) as f32 * 0.01)
            .collect();
        let (whole, t) = seanet::forward_chunked(s, &x, hop, n.div_ceil(hop).max(1) * hop);
        assert_eq!(t, n.div_ceil(hop));
        for chunk_hops in [1, 2, 3, 8] {
            let (got, t2) = seanet::forward_chunked(s, &x, hop, chunk_hops * hop);
            assert_eq!(t2, t);
            let r = rel_l2(&got, &whole);
            assert!(
                r <= 1e-6,
                "n = {n}, chunks of {chunk_hops} hops: rel-L2 {r:.3e}"
            );
        }
    }
}
