//! Code2wav tests: streaming == one-shot for awkward chunkings on a tiny
//! random decoder written in the hub layout, the official chunked/padded
//! decode rules, load-time checks, and goldens from the official PyTorch code.
//!
//! (~900 lines: the unit tests of the private codec modules, sharing one tiny
//! random decoder written in the hub layout.)

use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};
use serde_json::json;

use super::*;
use crate::quant::Code2WavPrecision;

/// xorshift64*: deterministic test data without a rand dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [lo, hi).
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// A small decoder exercising every structural feature: GQA, an explicit
/// head_dim != hidden/heads, a sliding window much shorter than the test
/// sequences, two transposed-conv kernels (k = s and k = 2s), dilations.
fn tiny_config_json() -> serde_json::Value {
    json!({
        "model_type": "qwen3_tts_tokenizer_12hz",
        "output_sample_rate": 24000,
        "decode_upsample_rate": 12,
        "decoder_config": {
            "codebook_size": 16,
            "codebook_dim": 8,
            "vector_quantization_hidden_dimension": 8,
            "num_quantizers": 4,
            "num_semantic_quantizers": 1,
            "latent_dim": 12,
            "decoder_dim": 16,
            "hidden_size": 8,
            "intermediate_size": 10,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 6,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000,
            "sliding_window": 5,
            "upsample_rates": [3, 2],
            "upsampling_ratios": [2],
        },
        "encoder_config": {},
    })
}

/// Every tensor of the hub layout for `cfg`, independent of the loader's own
/// naming code so a naming slip in either shows up.
fn hub_tensors(cfg: &CodecConfig) -> Vec<(String, Vec<usize>)> {
    let mut v: Vec<(String, Vec<usize>)> = Vec::new();
    let mut add = |n: String, s: &[usize]| v.push((n, s.to_vec()));
    let (cs, cd, vd) = (cfg.codebook_size, cfg.codebook_dim, cfg.codebook_dim / 2);
    let q = "decoder.quantizer";
    add(
        format!("{q}.rvq_first.vq.layers.0._codebook.embedding_sum"),
        &[cs, vd],
    );
    add(
        format!("{q}.rvq_first.vq.layers.0._codebook.cluster_usage"),
        &[cs],
    );
    for l in 0..cfg.num_quantizers - 1 {
        add(
            format!("{q}.rvq_rest.vq.layers.{l}._codebook.embedding_sum"),
            &[cs, vd],
        );
        add(
            format!("{q}.rvq_rest.vq.layers.{l}._codebook.cluster_usage"),
            &[cs],
        );
    }
    for side in ["rvq_first", "rvq_rest"] {
        add(format!("{q}.{side}.output_proj.weight"), &[cd, vd, 1]);
        add(format!("{q}.{side}.input_proj.weight"), &[vd, cd, 1]);
    }
    let ld = cfg.latent_dim;
    add("decoder.pre_conv.conv.weight".into(), &[ld, cd, 3]);
    add("decoder.pre_conv.conv.bias".into(), &[ld]);
    let t = &cfg.transformer;
    let (hs, qd, kvd, is) = (
        t.hidden_size,
        t.num_heads * t.head_dim,
        t.num_kv_heads * t.head_dim,
        t.intermediate_size,
    );
    let tp = "decoder.pre_transformer";
    add(format!("{tp}.input_proj.weight"), &[hs, ld]);
    add(format!("{tp}.input_proj.bias"), &[hs]);
    add(format!("{tp}.output_proj.weight"), &[ld, hs]);
    add(format!("{tp}.output_proj.bias"), &[ld]);
    add(format!("{tp}.norm.weight"), &[hs]);
    for l in 0..t.num_layers {
        let lp = format!("{tp}.layers.{l}");
        add(format!("{lp}.self_attn.q_proj.weight"), &[qd, hs]);
        add(format!("{lp}.self_attn.k_proj.weight"), &[kvd, hs]);
        add(format!("{lp}.self_attn.v_proj.weight"), &[kvd, hs]);
        add(format!("{lp}.self_attn.o_proj.weight"), &[hs, qd]);
        add(format!("{lp}.mlp.gate_proj.weight"), &[is, hs]);
        add(format!("{lp}.mlp.up_proj.weight"), &[is, hs]);
        add(format!("{lp}.mlp.down_proj.weight"), &[hs, is]);
        add(format!("{lp}.input_layernorm.weight"), &[hs]);
        add(format!("{lp}.post_attention_layernorm.weight"), &[hs]);
        add(format!("{lp}.self_attn_layer_scale.scale"), &[hs]);
        add(format!("{lp}.mlp_layer_scale.scale"), &[hs]);
    }
    for (i, &r) in cfg.upsampling_ratios.iter().enumerate() {
        let up = format!("decoder.upsample.{i}");
        add(format!("{up}.0.conv.weight"), &[ld, ld, r]);
        add(format!("{up}.0.conv.bias"), &[ld]);
        add(format!("{up}.1.dwconv.conv.weight"), &[ld, 1, 7]);
        add(format!("{up}.1.dwconv.conv.bias"), &[ld]);
        add(format!("{up}.1.norm.weight"), &[ld]);
        add(format!("{up}.1.norm.bias"), &[ld]);
        add(format!("{up}.1.pwconv1.weight"), &[4 * ld, ld]);
        add(format!("{up}.1.pwconv1.bias"), &[4 * ld]);
        add(format!("{up}.1.pwconv2.weight"), &[ld, 4 * ld]);
        add(format!("{up}.1.pwconv2.bias"), &[ld]);
        add(format!("{up}.1.gamma"), &[ld]);
    }
    let dd = cfg.decoder_dim;
    add("decoder.decoder.0.conv.weight".into(), &[dd, ld, 7]);
    add("decoder.decoder.0.conv.bias".into(), &[dd]);
    for (i, &r) in cfg.upsample_rates.iter().enumerate() {
        let (ci, co) = (dd >> i, dd >> (i + 1));
        let bp = format!("decoder.decoder.{}.block", i + 1);
        add(format!("{bp}.0.alpha"), &[ci]);
        add(format!("{bp}.0.beta"), &[ci]);
        add(format!("{bp}.1.conv.weight"), &[ci, co, 2 * r]);
        add(format!("{bp}.1.conv.bias"), &[co]);
        for u in 2..5 {
            for a in ["act1", "act2"] {
                add(format!("{bp}.{u}.{a}.alpha"), &[co]);
                add(format!("{bp}.{u}.{a}.beta"), &[co]);
            }
            add(format!("{bp}.{u}.conv1.conv.weight"), &[co, co, 7]);
            add(format!("{bp}.{u}.conv1.conv.bias"), &[co]);
            add(format!("{bp}.{u}.conv2.conv.weight"), &[co, co, 1]);
            add(format!("{bp}.{u}.conv2.conv.bias"), &[co]);
        }
    }
    let n = cfg.upsample_rates.len();
    let od = dd >> n;
    add(format!("decoder.decoder.{}.alpha", n + 1), &[od]);
    add(format!("decoder.decoder.{}.beta", n + 1), &[od]);
    add(
        format!("decoder.decoder.{}.conv.weight", n + 2),
        &[1, od, 7],
    );
    add(format!("decoder.decoder.{}.conv.bias", n + 2), &[1]);
    // One encoder tensor: the loader must skip the Mimi encoder.
    add("encoder.encoder.layers.0.conv.weight".into(), &[2, 1, 7]);
    v
}

/// Random values scaled so activations stay O(1) and nothing saturates
/// (default inits would make the output constant).
fn random_tensor(name: &str, shape: &[usize], rng: &mut Rng) -> Vec<f32> {
    let n: usize = shape.iter().product();
    let fan_in: usize = shape.iter().skip(1).product::<usize>().max(1);
    let (lo, hi) = if name.ends_with("cluster_usage") {
        (0.5, 2.0)
    } else if name.ends_with(".alpha") || name.ends_with(".beta") {
        (-0.5, 0.5)
    } else if name.ends_with("layernorm.weight") || name.ends_with("norm.weight") {
        (0.8, 1.2)
    } else if name.ends_with(".scale") || name.ends_with("gamma") {
        (0.2, 0.6)
    } else if name.ends_with("embedding_sum") {
        (-1.0, 1.0)
    } else if name.starts_with("decoder.decoder.") && name.ends_with("conv.weight") && shape[0] == 1
    {
        // The output conv: keep the waveform mostly inside the clamp.
        let b = 0.05 / (fan_in as f32).sqrt();
        (-b, b)
    } else {
        let b = 1.5 / (fan_in as f32).sqrt();
        (-b, b)
    };
    (0..n).map(|_| rng.uniform(lo, hi)).collect()
}

/// A temp dir holding `config.json` and `model.safetensors` for `config`.
pub(super) fn write_random_checkpoint(tag: &str, config: &serde_json::Value, seed: u64) -> PathBuf {
    write_checkpoint_with(tag, config, seed, |_| {})
}

fn write_checkpoint_with(
    tag: &str,
    config: &serde_json::Value,
    seed: u64,
    edit: impl FnOnce(&mut Vec<(String, Vec<usize>)>),
) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tts-rt-codec-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg_path = dir.join("config.json");
    std::fs::write(&cfg_path, serde_json::to_vec_pretty(config).unwrap()).unwrap();
    let cfg = CodecConfig::load(&cfg_path).unwrap();
    let mut tensors = hub_tensors(&cfg);
    edit(&mut tensors);
    let mut rng = Rng(seed);
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .into_iter()
        .map(|(name, shape)| {
            let data = random_tensor(&name, &shape, &mut rng);
            let b = data.iter().flat_map(|x| x.to_le_bytes()).collect();
            (name, shape, b)
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = bytes
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    let file = safetensors::serialize(views, &None).unwrap();
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    dir
}

fn tiny_model(tag: &str) -> Code2Wav {
    let dir = write_random_checkpoint(tag, &tiny_config_json(), 0x5eed_c0de);
    let m = Code2Wav::load(&dir).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    m
}

fn random_codes(m: &Code2Wav, n_frames: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng(seed);
    (0..n_frames * m.num_quantizers())
        .map(|_| rng.below(m.codebook_size()) as u32)
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn rel_l2(a: &[f32], reference: &[f32]) -> f64 {
    assert_eq!(a.len(), reference.len(), "length mismatch");
    let num: f64 = a
        .iter()
        .zip(reference)
        .map(|(x, y)| ((x - y) as f64).powi(2))
        .sum();
    let den: f64 = reference.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den.max(1e-30)).sqrt()
}

/// Streams `codes` in steps of the given sizes (cycled) and concatenates.
fn stream(m: &Code2Wav, codes: &[u32], n_frames: usize, sizes: &[usize]) -> Vec<f32> {
    let q = m.num_quantizers();
    let mut dec = m.streaming();
    let mut out = Vec::new();
    let (mut t, mut i) = (0, 0);
    while t < n_frames {
        let n = sizes[i % sizes.len()].min(n_frames - t);
        let wav = dec.step(&codes[t * q..(t + n) * q], n).unwrap();
        assert_eq!(
            wav.len(),
            n * m.samples_per_frame(),
            "a step returns exactly its frames' samples"
        );
        out.extend_from_slice(&wav);
        t += n;
        i += 1;
    }
    assert_eq!(dec.frames(), n_frames);
    out
}

/// Stream tolerance: outputs are within [-1, 1]; the brief asks 1e-5.
const STREAM_TOL: f32 = 1e-5;

#[test]
fn codec_streaming_matches_one_shot_for_any_chunking() {
    let m = tiny_model("stream");
    let n = 41; // > 8x the sliding window of 5
    let codes = random_codes(&m, n, 7);
    let whole = m.decode(&codes, n).unwrap();
    assert_eq!(whole.len(), n * m.samples_per_frame());
    // The random decoder must not be degenerate (constant or all clipped).
    let spread =
        whole.iter().fold(0f32, |a, &x| a.max(x)) - whole.iter().fold(0f32, |a, &x| a.min(x));
    assert!(
        spread > 0.1,
        "tiny decoder output is nearly constant ({spread})"
    );
    let clipped = whole.iter().filter(|x| x.abs() >= 1.0).count();
    assert!(
        clipped < whole.len() / 10,
        "tiny decoder output is mostly clipped ({clipped} of {})",
        whole.len()
    );
    for sizes in [
        &[1][..],
        &[3],
        &[7],
        &[25],
        &[13],
        &[1, 2, 5, 3, 11, 1, 4],
        &[6, 1, 1, 9],
    ] {
        let s = stream(&m, &codes, n, sizes);
        let d = max_abs_diff(&s, &whole);
        assert!(
            d <= STREAM_TOL,
            "chunking {sizes:?}: max |stream - one-shot| = {d}"
        );
    }
}

/// bf16 convolutions: streaming still equals one-shot (each conv output
/// depends only on its own rounded inputs, and the bf16 kernels have one
/// code path for every length), and the output stays near f32 (a gross
/// layout or ordering error would not).
#[test]
fn codec_bf16_streams_like_one_shot_and_stays_near_f32() {
    let dir = write_random_checkpoint("bf16", &tiny_config_json(), 0x5eed_c0de);
    let f = Code2Wav::load(&dir).unwrap();
    let m = Code2Wav::load_with(&dir, Code2WavPrecision::Bf16).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(m.precision(), Code2WavPrecision::Bf16);
    assert!(m.w.conv_in.bf16.is_some() && m.w.blocks[0].trans.phases.is_some());
    assert!(
        m.w.upsample[0].convnext.dwconv.bf16.is_none(),
        "depthwise stays f32"
    );
    let bf16 = |w: &crate::weight::Weight| matches!(w.mat(), tts_kernels::Mat::Bf16 { .. });
    let t = &m.w.transformer;
    assert!(bf16(&t.layers[0].q.w) && bf16(&t.layers[0].down.w) && bf16(&t.output_proj.w));
    assert!(bf16(&m.w.upsample[0].convnext.pw1.w) && bf16(&m.w.upsample[0].convnext.pw2.w));
    assert!(
        !bf16(&f.w.transformer.layers[0].q.w),
        "f32 keeps the stored weights"
    );
    let n = 41;
    let codes = random_codes(&m, n, 7);
    let whole = m.decode(&codes, n).unwrap();
    for sizes in [&[1][..], &[7], &[1, 2, 5, 3, 11, 1, 4]] {
        let d = max_abs_diff(&stream(&m, &codes, n, sizes), &whole);
        assert!(d <= STREAM_TOL, "bf16 chunking {sizes:?}: max diff {d}");
    }
    let r = rel_l2(&whole, &f.decode(&codes, n).unwrap());
    assert!(r < 0.05, "bf16 vs f32 rel-L2 {r}");
}

#[test]
fn codec_streaming_reset_restarts_the_utterance() {
    let m = tiny_model("reset");
    let q = m.num_quantizers();
    let codes = random_codes(&m, 10, 3);
    let mut dec = m.streaming();
    let first = dec.step(&codes[..4 * q], 4).unwrap();
    dec.step(&codes[4 * q..], 6).unwrap();
    dec.reset();
    assert_eq!(dec.frames(), 0);
    assert_eq!(dec.step(&codes[..4 * q], 4).unwrap(), first);
    assert!(
        dec.step(&[], 0).unwrap().is_empty(),
        "zero frames give zero samples"
    );
}

#[test]
fn codec_chunked_decode_follows_the_official_windows() {
    let m = tiny_model("chunked");
    let (q, spf) = (m.num_quantizers(), m.samples_per_frame());
    let n = 23;
    let codes = random_codes(&m, n, 11);
    let whole = m.decode(&codes, n).unwrap();
    // One window covering everything is the plain forward.
    let one = m
        .decode_chunked(
            &codes,
            n,
            OFFICIAL_CHUNK_FRAMES,
            OFFICIAL_LEFT_CONTEXT_FRAMES,
        )
        .unwrap();
    assert!(max_abs_diff(&one, &whole) <= STREAM_TOL);
    // chunk 7, context 3: windows [0,7), [4,14), [11,21), [18,23), each
    // decoded from scratch with its context samples dropped.
    let got = m.decode_chunked(&codes, n, 7, 3).unwrap();
    let mut want = Vec::new();
    for (s, e, ctx) in [(0, 7, 0), (7, 14, 3), (14, 21, 3), (21, 23, 3)] {
        let w = m.decode(&codes[(s - ctx) * q..e * q], e - s + ctx).unwrap();
        want.extend_from_slice(&w[ctx * spf..]);
    }
    assert!(max_abs_diff(&got, &want) <= STREAM_TOL);
    // Context fewer than the window: the windows really differ from one forward.
    assert!(
        max_abs_diff(&got, &whole) > 1e-4,
        "chunked decode should differ from the whole forward here"
    );
    // Context at a boundary: start == left_context uses start frames.
    let got = m.decode_chunked(&codes, n, 5, 5).unwrap();
    let w = m.decode(&codes[..10 * q], 10).unwrap();
    assert!(max_abs_diff(&got[5 * spf..10 * spf], &w[5 * spf..]) <= STREAM_TOL);
    assert!(m.decode_chunked(&codes, n, 0, 3).is_err());
}

#[test]
fn codec_padded_decode_trims_by_codebook0_and_clamps() {
    let m = tiny_model("padded");
    let (q, spf) = (m.num_quantizers(), m.samples_per_frame());
    let n = 9;
    let codes = random_codes(&m, n, 5);
    let mut padded: Vec<i64> = codes.iter().map(|&c| c as i64).collect();
    padded.extend(std::iter::repeat_n(-1, 3 * q));
    let got = m.decode_padded(&padded, n + 3).unwrap();
    assert_eq!(got.len(), n * spf);
    assert!(max_abs_diff(&got, &m.decode(&codes, n).unwrap()) <= STREAM_TOL);
}

#[test]
fn codec_rejects_bad_codes_with_a_clear_message() {
    let m = tiny_model("badcodes");
    let q = m.num_quantizers();
    let mut codes = random_codes(&m, 3, 1);
    let e = m.decode(&codes[..q * 2 + 1], 3).unwrap_err().to_string();
    assert!(e.contains("frame-major"), "{e}");
    codes[q + 2] = m.codebook_size() as u32;
    let e = m.decode(&codes, 3).unwrap_err().to_string();
    assert!(e.contains("frame 1, codebook 2"), "{e}");
    assert!(m.streaming().step(&codes, 3).is_err());
}

#[test]
fn codec_load_names_missing_misshaped_and_unexpected_tensors() {
    let cfg = tiny_config_json();
    let missing = "decoder.pre_transformer.layers.1.mlp.up_proj.weight";
    let dir = write_checkpoint_with("missing", &cfg, 1, |t| t.retain(|(n, _)| n != missing));
    let e = Code2Wav::load(&dir).unwrap_err();
    assert!(
        matches!(&e, ModelError::MissingTensor { tensor, .. } if tensor == missing),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();

    let bad = "decoder.decoder.2.block.1.conv.weight";
    let dir = write_checkpoint_with("shape", &cfg, 1, |t| {
        t.iter_mut()
            .filter(|(n, _)| n == bad)
            .for_each(|(_, s)| s[2] += 1);
    });
    let e = Code2Wav::load(&dir).unwrap_err();
    assert!(
        matches!(&e, ModelError::ShapeMismatch { tensor, .. } if tensor == bad),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();

    let dir = write_checkpoint_with("extra", &cfg, 1, |t| {
        t.push(("decoder.surprise.weight".into(), vec![2]))
    });
    let e = Code2Wav::load(&dir).unwrap_err();
    assert!(
        matches!(&e, ModelError::UnexpectedTensors { first, .. } if first == "decoder.surprise.weight"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn codec_config_uses_official_defaults() {
    let p = Path::new("speech_tokenizer/config.json");
    let v =
        json!({"model_type": "qwen3_tts_tokenizer_12hz", "decoder_config": {"codebook_dim": 512}});
    let c = CodecConfig::from_value(p, &v).unwrap();
    assert_eq!(
        (c.output_sample_rate, c.samples_per_frame, c.codebook_size),
        (24000, 1920, 2048)
    );
    assert_eq!(
        (
            c.codebook_vector_dim,
            c.num_quantizers,
            c.latent_dim,
            c.decoder_dim
        ),
        (256, 16, 1024, 1536)
    );
    let t = &c.transformer;
    assert_eq!(
        (
            t.hidden_size,
            t.intermediate_size,
            t.num_layers,
            t.num_heads,
            t.num_kv_heads
        ),
        (1024, 3072, 8, 16, 16)
    );
    assert_eq!(
        (t.head_dim, t.sliding_window, t.rms_norm_eps, t.rope_theta),
        (64, 72, 1e-5, 10000.0)
    );
    assert_eq!(
        (c.upsample_rates.as_slice(), c.upsampling_ratios.as_slice()),
        (&[8, 5, 4, 3][..], &[2, 2][..])
    );
    // codebook_dim has no official default.
    let v = json!({"model_type": "qwen3_tts_tokenizer_12hz", "decoder_config": {}});
    let e = CodecConfig::from_value(p, &v).unwrap_err().to_string();
    assert!(e.contains("decoder_config.codebook_dim"), "{e}");
    // The real checkpoint's explicit head_dim wins over hidden / heads.
    let v = json!({"model_type": "qwen3_tts_tokenizer_12hz",
        "decoder_config": {"codebook_dim": 512, "hidden_size": 512, "head_dim": 64}});
    assert_eq!(
        CodecConfig::from_value(p, &v).unwrap().transformer.head_dim,
        64
    );
    let v = json!({"model_type": "qwen3_tts_tokenizer_12hz", "decode_upsample_rate": 1000,
        "decoder_config": {"codebook_dim": 512}});
    assert!(CodecConfig::from_value(p, &v).is_err());
}

// ---------------------------------------------------------------------------
// Goldens from the official PyTorch decoder (tools/make_fixtures.py).

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// Reads an F32 or I64 tensor from a safetensors buffer.
fn st_f32(st: &safetensors::SafeTensors<'_>, name: &str) -> Vec<f32> {
    let t = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("golden `{name}`: {e}"));
    assert_eq!(t.dtype(), Dtype::F32, "{name}");
    t.data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn st_codes(st: &safetensors::SafeTensors<'_>, name: &str) -> (Vec<i64>, usize) {
    let t = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("golden `{name}`: {e}"));
    assert_eq!(t.dtype(), Dtype::I64, "{name}");
    let frames = t.shape()[0];
    (
        t.data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        frames,
    )
}

/// Relative L2 bound against PyTorch f32 (different summation orders).
const GOLDEN_REL_L2: f64 = 1e-4;

fn check_goldens(fixture: &str) {
    let root = fixtures_dir();
    let m = Code2Wav::load(&root.join(fixture).join("speech_tokenizer")).unwrap();
    let bytes = std::fs::read(
        root.join("goldens")
            .join(fixture)
            .join("goldens.safetensors"),
    )
    .unwrap_or_else(|e| {
        panic!("goldens for {fixture} (make them with tools/make_fixtures.py): {e}")
    });
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();

    let (codes, n) = st_codes(&st, "decode_short.codes");
    let u: Vec<u32> = codes.iter().map(|&c| c as u32).collect();
    let want = st_f32(&st, "decode_short.wav");
    let r = rel_l2(&m.decode_padded(&codes, n).unwrap(), &want);
    assert!(r <= GOLDEN_REL_L2, "{fixture} decode_short: rel-L2 {r:e}");
    let r = rel_l2(&m.decode(&u, n).unwrap(), &want);
    assert!(
        r <= GOLDEN_REL_L2,
        "{fixture} decode_short via decode: rel-L2 {r:e}"
    );

    let (codes, n) = st_codes(&st, "decode_long.codes");
    let u: Vec<u32> = codes.iter().map(|&c| c as u32).collect();
    let full = st_f32(&st, "decode_long.wav_full");
    let chunked = st_f32(&st, "decode_long.wav_chunked");
    let r = rel_l2(&m.decode(&u, n).unwrap(), &full);
    assert!(
        r <= GOLDEN_REL_L2,
        "{fixture} decode_long full: rel-L2 {r:e}"
    );
    let ours = m
        .decode_chunked(&u, n, OFFICIAL_CHUNK_FRAMES, OFFICIAL_LEFT_CONTEXT_FRAMES)
        .unwrap();
    let r = rel_l2(&ours, &chunked);
    assert!(
        r <= GOLDEN_REL_L2,
        "{fixture} decode_long chunked: rel-L2 {r:e}"
    );
    assert_eq!(m.decode_padded(&codes, n).unwrap(), ours);
    // Streaming reproduces the whole forward, not the chunked one.
    let s = stream(&m, &u, n, &[1, 7, 25, 3]);
    let r = rel_l2(&s, &full);
    assert!(
        r <= GOLDEN_REL_L2,
        "{fixture} decode_long streamed: rel-L2 {r:e}"
    );
}

#[test]
fn codec_matches_official_goldens_tiny_a() {
    check_goldens("tiny-a");
}

#[test]
fn codec_matches_official_goldens_tiny_b() {
    check_goldens("tiny-b");
}

/// Parity with a decoder dumped by a local script: set `TTS_CODEC_PARITY_DIR`
/// to a directory with `config.json`, `model.safetensors` and `io.safetensors`
/// (`codes` I64 [T, Q], `wav_full`, `wav_chunked`). Skipped when unset.
#[test]
fn codec_parity_with_external_dump() {
    let Some(dir) = std::env::var_os("TTS_CODEC_PARITY_DIR") else {
        eprintln!("TTS_CODEC_PARITY_DIR unset; skipping");
        return;
    };
    let dir = PathBuf::from(dir);
    let m = Code2Wav::load(&dir).unwrap();
    let bytes = std::fs::read(dir.join("io.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (codes, n) = st_codes(&st, "codes");
    let u: Vec<u32> = codes.iter().map(|&c| c as u32).collect();
    let full = st_f32(&st, "wav_full");
    let chunked = st_f32(&st, "wav_chunked");
    let t0 = std::time::Instant::now();
    let ours_full = m.decode(&u, n).unwrap();
    let t_full = t0.elapsed().as_secs_f64();
    let ours_chunked = m
        .decode_chunked(&u, n, OFFICIAL_CHUNK_FRAMES, OFFICIAL_LEFT_CONTEXT_FRAMES)
        .unwrap();
    let t0 = std::time::Instant::now();
    let streamed = stream(&m, &u, n, &[1, 3, 7, 25]);
    let t_stream = t0.elapsed().as_secs_f64();
    let audio = (n * m.samples_per_frame()) as f64 / m.sample_rate() as f64;
    eprintln!(
        "timing: {n} frames = {audio:.2} s audio; one-shot {t_full:.2} s (RTF {:.2}), \
         streamed in 1/3/7/25-frame steps {t_stream:.2} s (RTF {:.2})",
        t_full / audio,
        t_stream / audio
    );
    // PyTorch in f64, when present: how much of the gap is f32 rounding.
    if st.names().iter().any(|n| *n == "wav_full_f64") {
        let f64_ref = st_f32(&st, "wav_full_f64");
        eprintln!(
            "f64 reference: ours rel-L2 {:e}, official f32 rel-L2 {:e}",
            rel_l2(&ours_full, &f64_ref),
            rel_l2(&full, &f64_ref)
        );
    }
    eprintln!(
        "parity: full rel-L2 {:e} max {:e}; chunked rel-L2 {:e} max {:e}; streamed vs official full rel-L2 {:e}",
        rel_l2(&ours_full, &full),
        max_abs_diff(&ours_full, &full),
        rel_l2(&ours_chunked, &chunked),
        max_abs_diff(&ours_chunked, &chunked),
        rel_l2(&streamed, &full)
    );
    assert!(rel_l2(&ours_full, &full) <= GOLDEN_REL_L2);
    assert!(rel_l2(&ours_chunked, &chunked) <= GOLDEN_REL_L2);
}

/// The kernel switches (`TTS_RT_AMX`, `TTS_RT_TEAMS`, `TTS_RT_ISA`, ...)
/// from the environment, as `tts-rt` reads them at start: the timing tests'
/// A/B arms set them (docs/performance.md, "Reproducing (code2wav in
/// bf16)"). Run such a test alone: the first kernel any test runs fixes
/// the switches for the whole test binary.
fn install_kernel_switches() {
    tts_kernels::KernelSettings::from_env_map(|k| std::env::var(k).ok())
        .unwrap_or_else(|e| panic!("{e}"))
        .install()
        .unwrap_or_else(|e| panic!("{e}; run this test alone"));
}

/// Timing harness for a full-size decoder (not run by default):
/// `TTS_RT_C2W_MODEL=/path/q06b cargo test --release -p tts-models --lib codec_time_full_size -- --ignored --nocapture`.
/// Decodes `TTS_RT_C2W_FRAMES` (default 40) random frames with the official
/// chunked decode (what `speak` runs), `TTS_RT_C2W_PASSES` times, at
/// `TTS_RT_C2W_PRECISION` (f32, bf16 or int8), printing per-stage times;
/// `TTS_RT_C2W_STEP=k` streams in steps of k frames instead;
/// `TTS_RT_C2W_SESSIONS=s` (with a step) decodes `s` streams of different
/// codes, stepped together round by round, `TTS_RT_C2W_BATCH=1` with one
/// [`Code2Wav::decode_step_batch`] per round, else one `decode_step` per
/// stream (the figures are then per frame of all streams).
#[test]
#[ignore]
fn codec_time_full_size() {
    let Some(dir) = std::env::var_os("TTS_RT_C2W_MODEL") else {
        eprintln!("TTS_RT_C2W_MODEL unset; skipping");
        return;
    };
    install_kernel_switches();
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (n, passes) = (env("TTS_RT_C2W_FRAMES", 40), env("TTS_RT_C2W_PASSES", 3));
    // Streaming steps of this many frames instead (0: the chunked decode).
    let step = env("TTS_RT_C2W_STEP", 0);
    // A name (`f32`, `bf16`, `int8`) or a `--precision` spec with
    // `code2wav` items (a per-layer int8 set).
    let precision = std::env::var("TTS_RT_C2W_PRECISION").map_or(Code2WavPrecision::F32, |p| {
        if p.contains('=') {
            crate::PrecisionPlan::parse(&p).unwrap().code2wav
        } else {
            p.parse().unwrap()
        }
    });
    let m = Code2Wav::load_with(&PathBuf::from(dir).join("speech_tokenizer"), precision).unwrap();
    eprintln!(
        "code2wav {precision}, {}",
        tts_kernels::Kernels::selected().bf16_conv_path()
    );
    let codes = random_codes(&m, n, 7);
    let sessions = env("TTS_RT_C2W_SESSIONS", 1).max(1);
    let batch = env("TTS_RT_C2W_BATCH", 0) == 1;
    let all_codes: Vec<Vec<u32>> = (0..sessions as u64)
        .map(|i| random_codes(&m, n, 7 + i))
        .collect();
    let q = m.num_quantizers();
    // Streams `sessions` utterances in steps of `step` frames, round by
    // round; returns all samples.
    let multi = |step: usize| -> Vec<f32> {
        let mut states: Vec<DecoderState> = (0..sessions).map(|_| m.new_state()).collect();
        let mut outs: Vec<Vec<f32>> = (0..sessions).map(|_| Vec::new()).collect();
        let mut scratch = BatchScratch::default();
        let mut t = 0;
        while t < n {
            let k = step.min(n - t);
            if batch {
                let mut jobs: Vec<StepJob<'_>> = states
                    .iter_mut()
                    .zip(outs.iter_mut())
                    .zip(&all_codes)
                    .map(|((state, out), c)| StepJob {
                        state,
                        codes: &c[t * q..(t + k) * q],
                        n_frames: k,
                        out,
                    })
                    .collect();
                m.decode_step_batch(&mut jobs, &mut scratch).unwrap();
            } else {
                for ((st, out), c) in states.iter_mut().zip(outs.iter_mut()).zip(&all_codes) {
                    m.decode_step(st, &c[t * q..(t + k) * q], k, out).unwrap();
                }
            }
            t += k;
        }
        outs.concat()
    };
    let n_all = if step > 0 { n * sessions } else { n };
    if step > 0 {
        eprintln!(
            "{sessions} streams in steps of {step}, {}",
            if batch {
                "batched"
            } else {
                "one call per stream"
            }
        );
    }
    // Process CPU seconds (utime + stime of every thread, 10 ms ticks): on
    // a busy machine a steadier figure than wall time.
    let cpu_s = || -> f64 {
        let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        // Fields after the command name: state, ppid, ... utime (11),
        // stime (12), in clock ticks.
        let f: Vec<&str> = s
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, r)| r.split_whitespace().collect());
        let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        match (tick(11), tick(12)) {
            (Some(u), Some(k)) => (u + k) as f64 / 100.0,
            _ => f64::NAN,
        }
    };
    // On a kernel team, as `speak` and the engine run (`TTS_RT_TEAMS=off`:
    // rayon's pool).
    let team = tts_kernels::teams_enabled()
        .then(|| tts_kernels::Team::new(rayon::current_num_threads(), "tts-kernel").unwrap());
    let on_team = |f: &mut dyn FnMut()| match &team {
        Some(t) => t.install(f),
        None => f(),
    };
    for p in 0..passes {
        forward::profile::enable();
        let c0 = cpu_s();
        let t0 = std::time::Instant::now();
        let mut wav = Vec::new();
        on_team(&mut || {
            wav = match step {
                0 => m
                    .decode_chunked(
                        &codes,
                        n,
                        OFFICIAL_CHUNK_FRAMES,
                        OFFICIAL_LEFT_CONTEXT_FRAMES,
                    )
                    .unwrap(),
                k if sessions == 1 && !batch => stream(&m, &codes, n, &[k]),
                k => multi(k),
            }
        });
        let n = n_all;
        let dt = t0.elapsed().as_secs_f64() * 1e3;
        assert_eq!(wav.len(), n * m.samples_per_frame());
        // FNV-1a over the samples' bits: batched and one-call-per-stream
        // runs of the same settings must print the same value.
        let fnv = wav.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
            (h ^ x.to_bits() as u64).wrapping_mul(0x100_0000_01b3)
        });
        eprintln!("samples fnv1a {fnv:016x}");
        let cpu = (cpu_s() - c0) * 1e3;
        eprintln!(
            "pass {p}: {n} frames in {dt:.1} ms = {:.2} ms/frame; CPU {:.2} ms/frame (load {})",
            dt / n as f64,
            cpu / n as f64,
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
        for (label, d) in forward::profile::take() {
            let ms = d.as_secs_f64() * 1e3;
            eprintln!(
                "  {label:<20} {:>7.2} ms/frame {:>5.1}%",
                ms / n as f64,
                100.0 * ms / dt
            );
        }
    }
}

/// One layer under test: `(x, t_in, scratch, out)`.
type LayerCall<'a> = dyn FnMut(&[f32], usize, &mut Vec<f32>, &mut Vec<f32>) + 'a;

/// What one parallel region over several streams' segments of a conv could
/// save (not run by default): for the layers that are weight-bound at short
/// steps, the time of `s` calls of one stream's columns against one call
/// over `s` times the columns (which reads the weights once; a time bound
/// only, not the batched arithmetic).
/// `TTS_RT_C2W_MODEL=/path/q06b [TTS_RT_C2W_PRECISION=bf16] cargo test --release -p tts-models --lib codec_conv_segments_bound -- --ignored --nocapture`
#[test]
#[ignore]
fn codec_conv_segments_bound() {
    let Some(dir) = std::env::var_os("TTS_RT_C2W_MODEL") else {
        eprintln!("TTS_RT_C2W_MODEL unset; skipping");
        return;
    };
    install_kernel_switches();
    // A name (`f32`, `bf16`, `int8`) or a `--precision` spec with
    // `code2wav` items (a per-layer int8 set).
    let precision = std::env::var("TTS_RT_C2W_PRECISION").map_or(Code2WavPrecision::F32, |p| {
        if p.contains('=') {
            crate::PrecisionPlan::parse(&p).unwrap().code2wav
        } else {
            p.parse().unwrap()
        }
    });
    let m = Code2Wav::load_with(&PathBuf::from(dir).join("speech_tokenizer"), precision).unwrap();
    let (streams, reps) = (3, 20);
    let w = &m.w;
    let b0 = &w.blocks[0];
    let up: usize = w.upsample.iter().map(|u| u.trans.stride).product();
    for frames in [1, 4, 8] {
        // Input columns of each layer for a step of `frames` frames.
        let n_in = frames * up;
        let n_b0 = n_in * b0.trans.stride;
        let (mut out, mut full) = (Vec::new(), Vec::new());
        let mut time = |label: &str, c_in: usize, h: usize, n: usize, f: &mut LayerCall<'_>| {
            for (arm, calls, cols) in [
                ("one call per stream", streams, n),
                ("one call, all columns", 1, streams * n),
            ] {
                let x = vec![0.25f32; c_in * (h + cols)];
                let t0 = std::time::Instant::now();
                for _ in 0..reps {
                    for _ in 0..calls {
                        f(&x, h + cols, &mut full, &mut out);
                    }
                }
                eprintln!(
                    "{precision} {frames}-frame steps, {streams} streams, {label:<24} {arm:<22} {:7.2} ms",
                    t0.elapsed().as_secs_f64() * 1e3 / reps as f64
                );
            }
        };
        time(
            "decoder.0 (k7)",
            w.conv_in.shape.c_in,
            w.conv_in.history(),
            n_in,
            &mut |x, t, _, o| w.conv_in.run(x, t, o),
        );
        time(
            "block 0 transposed",
            b0.trans.c_in,
            b0.trans.history(),
            n_in,
            &mut |x, t, fl, o| b0.trans.run(x, t, fl, o),
        );
        let c1 = &b0.units[0].conv1;
        time(
            "block 0 unit 0 (k7)",
            c1.shape.c_in,
            c1.history(),
            n_b0,
            &mut |x, t, _, o| c1.run(x, t, o),
        );
    }
}

/// Below f32 a transposed conv runs over its phases, in int8 where the plan
/// names it (`decoder.B.trans`) and bf16 otherwise; f32 keeps the
/// transposed kernel. A stream gives the one-shot decode's bits.
#[test]
fn transposed_convs_run_over_their_phases_below_f32() {
    let dir = write_random_checkpoint("trans-phases", &tiny_config_json(), 0x5eed_c0de);
    let p = crate::PrecisionPlan::parse("code2wav=int8,code2wav.decoder.2.trans=int8")
        .unwrap()
        .code2wav;
    let m = Code2Wav::load_with(&dir, p).unwrap();
    let f = Code2Wav::load(&dir).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let t = |m: &Code2Wav, b: usize| m.w.blocks[b].trans.phases.as_ref().map(|p| p.is_int8());
    assert_eq!((t(&m, 0), t(&m, 1)), (Some(false), Some(true)));
    assert!(m.w.upsample[0].trans.phases.is_some());
    assert_eq!((t(&f, 0), t(&f, 1)), (None, None));
    let n = 23;
    let codes = random_codes(&m, n, 11);
    let whole = m.decode(&codes, n).unwrap();
    for sizes in [&[1][..], &[4, 1, 7, 2]] {
        let got = stream(&m, &codes, n, sizes);
        assert_eq!(got.len(), whole.len());
        assert!(
            got.iter()
                .zip(&whole)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "chunks {sizes:?}"
        );
    }
    let r = rel_l2(&whole, &f.decode(&codes, n).unwrap());
    assert!(r < 0.05, "int8 phases vs f32 rel-L2 {r}");
}
