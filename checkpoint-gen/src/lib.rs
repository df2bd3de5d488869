//! Random-weight checkpoints in the Hugging Face hub layout.
//!
//! # Layout
//! - `lib.rs`: the configs, the talker, code predictor and codec decoder
//!   tensor lists, the writer.
//! - `tensors`: what a tensor list is, and the fan-in codes of its
//!   non-random entries (shared by every list).
//! - `preset`: the presets (sizes and family).
//! - `encoders`: Base's speaker encoder and the speech tokenizer's encoder.
//! - `tokenizer`: the synthetic text tokenizer files.
//! - `proxy`: trained-like LM weights ([`Proxy::Trained`]: heavy tails
//!   with row/column scales, massive hidden channels, the code
//!   predictor's FFN spike), for comparing precisions when the trained
//!   checkpoint is not at hand.
//!
//! `tiny` is for smoke tests; `0.6b` and `1.7b` carry the real shapes (from
//! the published configs) for benchmarks, never for listening. Those three
//! are CustomVoice checkpoints; `tiny-base`, `0.6b-base`, `1.7b-base` and
//! `1.7b-voicedesign` are the other families at the same sizes (no preset
//! speakers, the ten languages without dialects), and carry the speech
//! tokenizer's encoder as the hub file does; Base also carries the speaker
//! encoder (`encoders`). The text
//! tokenizer is a synthetic byte-level BPE (256 byte tokens plus merges that
//! spell a few hundred common English words) with the Qwen2 special tokens at
//! their real ids, so the files have the real format without shipping Qwen's
//! vocabulary. The CustomVoice presets write only the speech tokenizer's
//! decoder (synthesis never runs the encoder), and stay byte-identical to
//! what they were before the other families existed.
//!
//! Weights: uniform with standard deviation `gain / sqrt(fan_in)` so that
//! activations neither vanish nor explode through the stacks, norms near 1,
//! and every codec parameter randomised (the official default init makes
//! code2wav output constant).
//!
//! Its own crate so that the recursion limit the large `json!` config
//! literals need is not imposed on the models crate, and so fixtures are
//! built by a crate above the loader they exercise.
#![forbid(unsafe_code)]
// `json!` expands the talker config literal past the default limit of 128.
#![recursion_limit = "256"]

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use serde_json::{json, Value};

use tts_models::sampling::Rng;
use tts_models::{ModelError, Result};

mod encoders;
mod preset;
mod proxy;
mod tensors;
mod tokenizer;

use encoders::{EncoderDims, SpeakerDims};
pub use preset::{Family, Preset, PRESET_NAMES};
pub use proxy::{massive_channels, spike_channels, Proxy, MASSIVE_GAIN, PROXY_NAMES, SPIKE_GAIN};
use tensors::{Tensors, ONE, SMALL};

struct Dims {
    size: &'static str,
    hidden: usize,
    inter: usize,
    layers: usize,
    heads: usize,
    kv: usize,
    head_dim: usize,
    text_hidden: usize,
    groups: usize,
    cp_hidden: usize,
    cp_inter: usize,
    cp_layers: usize,
    cp_heads: usize,
    cp_kv: usize,
    cp_head_dim: usize,
    // codec decoder
    c_latent: usize,
    c_dim: usize,
    c_codebook_dim: usize,
    c_hidden: usize,
    c_inter: usize,
    c_layers: usize,
    c_heads: usize,
    c_head_dim: usize,
}

fn dims(p: Preset) -> Dims {
    match p.size() {
        Preset::Tiny => Dims {
            size: "0b6",
            hidden: 64,
            inter: 128,
            layers: 2,
            heads: 4,
            kv: 2,
            head_dim: 16,
            text_hidden: 32,
            groups: 16,
            cp_hidden: 64,
            cp_inter: 128,
            cp_layers: 2,
            cp_heads: 4,
            cp_kv: 2,
            cp_head_dim: 16,
            c_latent: 64,
            c_dim: 96,
            c_codebook_dim: 32,
            c_hidden: 32,
            c_inter: 64,
            c_layers: 2,
            c_heads: 4,
            c_head_dim: 8,
        },
        _ => {
            let big = p.size() == Preset::Qwen17b;
            Dims {
                size: if big { "1b7" } else { "0b6" },
                hidden: if big { 2048 } else { 1024 },
                inter: if big { 6144 } else { 3072 },
                layers: 28,
                heads: 16,
                kv: 8,
                head_dim: 128,
                text_hidden: 2048,
                groups: 16,
                cp_hidden: 1024,
                cp_inter: 3072,
                cp_layers: 5,
                cp_heads: 16,
                cp_kv: 8,
                cp_head_dim: 128,
                c_latent: 1024,
                c_dim: 1536,
                c_codebook_dim: 512,
                c_hidden: 512,
                c_inter: 1024,
                c_layers: 8,
                c_heads: 16,
                c_head_dim: 64,
            }
        }
    }
}

const SPEAKERS: [(&str, u32, Option<&str>); 9] = [
    ("serena", 3066, None),
    ("vivian", 3065, None),
    ("uncle_fu", 3010, None),
    ("ryan", 3061, None),
    ("aiden", 2861, None),
    ("ono_anna", 2873, None),
    ("sohee", 2864, None),
    ("eric", 2875, Some("sichuan_dialect")),
    ("dylan", 2878, Some("beijing_dialect")),
];

const LANGUAGES: [(&str, u32); 12] = [
    ("chinese", 2055),
    ("english", 2050),
    ("german", 2053),
    ("italian", 2070),
    ("portuguese", 2071),
    ("spanish", 2054),
    ("japanese", 2058),
    ("korean", 2064),
    ("french", 2061),
    ("russian", 2069),
    ("beijing_dialect", 2074),
    ("sichuan_dialect", 2062),
];

fn configs(d: &Dims) -> (Value, Value) {
    let spk_id: BTreeMap<_, _> = SPEAKERS
        .iter()
        .map(|(n, id, _)| (n.to_string(), json!(id)))
        .collect();
    let dialect: BTreeMap<_, _> = SPEAKERS
        .iter()
        .map(|(n, _, dl)| (n.to_string(), dl.map_or(json!(false), |s| json!(s))))
        .collect();
    let langs: BTreeMap<_, _> = LANGUAGES
        .iter()
        .map(|(n, id)| (n.to_string(), json!(id)))
        .collect();
    let sec = d.head_dim / 2;
    let mrope = [sec - 2 * (sec * 5 / 16), sec * 5 / 16, sec * 5 / 16];
    let config = json!({
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": d.size,
        "tts_model_type": "custom_voice",
        "im_start_token_id": 151644,
        "im_end_token_id": 151645,
        "tts_pad_token_id": 151671,
        "tts_bos_token_id": 151672,
        "tts_eos_token_id": 151673,
        "assistant_token_id": 77091,
        "speaker_encoder_config": {"enc_dim": d.hidden, "sample_rate": 24000},
        "talker_config": {
            "vocab_size": 3072,
            "hidden_size": d.hidden,
            "intermediate_size": d.inter,
            "num_hidden_layers": d.layers,
            "num_attention_heads": d.heads,
            "num_key_value_heads": d.kv,
            "head_dim": d.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000,
            "rope_scaling": {"interleaved": true, "mrope_section": mrope, "rope_type": "default"},
            "attention_bias": false,
            "use_sliding_window": false,
            "num_code_groups": d.groups,
            "text_hidden_size": d.text_hidden,
            "text_vocab_size": 151936,
            "position_id_per_seconds": 13,
            "codec_eos_token_id": 2150,
            "codec_think_id": 2154,
            "codec_nothink_id": 2155,
            "codec_think_bos_id": 2156,
            "codec_think_eos_id": 2157,
            "codec_pad_id": 2148,
            "codec_bos_id": 2149,
            "spk_id": spk_id,
            "spk_is_dialect": dialect,
            "codec_language_id": langs,
            "code_predictor_config": {
                "vocab_size": 2048,
                "hidden_size": d.cp_hidden,
                "intermediate_size": d.cp_inter,
                "num_hidden_layers": d.cp_layers,
                "num_attention_heads": d.cp_heads,
                "num_key_value_heads": d.cp_kv,
                "head_dim": d.cp_head_dim,
                "hidden_act": "silu",
                "max_position_embeddings": 65536,
                "rms_norm_eps": 1e-6,
                "rope_theta": 1000000,
                "rope_scaling": null,
                "attention_bias": false,
                "use_sliding_window": false,
                "num_code_groups": d.groups
            }
        }
    });
    let codec = json!({
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_valid_num_quantizers": d.groups,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": 1920,
        "encode_downsample_rate": 1920,
        "decoder_config": {
            "codebook_size": 2048,
            "codebook_dim": d.c_codebook_dim,
            "vector_quantization_hidden_dimension": d.c_codebook_dim,
            "num_quantizers": d.groups,
            "num_semantic_quantizers": 1,
            "semantic_codebook_size": 4096,
            "hidden_size": d.c_hidden,
            "intermediate_size": d.c_inter,
            "latent_dim": d.c_latent,
            "decoder_dim": d.c_dim,
            "num_hidden_layers": d.c_layers,
            "num_attention_heads": d.c_heads,
            "num_key_value_heads": d.c_heads,
            "head_dim": d.c_head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": 8000,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000,
            "sliding_window": 72,
            "layer_scale_initial_scale": 0.01,
            "attention_bias": false,
            "attention_dropout": 0.0,
            "upsample_rates": [8, 5, 4, 3],
            "upsampling_ratios": [2, 2]
        }
    });
    (config, codec)
}

fn talker_tensors(d: &Dims) -> Tensors {
    let mut v = Vec::new();
    let mut lm = |prefix: &str,
                  h: usize,
                  inter: usize,
                  layers: usize,
                  heads: usize,
                  kv: usize,
                  hd: usize| {
        for l in 0..layers {
            let p = format!("{prefix}.layers.{l}");
            v.push((format!("{p}.input_layernorm.weight"), vec![h], 0));
            v.push((format!("{p}.post_attention_layernorm.weight"), vec![h], 0));
            v.push((
                format!("{p}.self_attn.q_proj.weight"),
                vec![heads * hd, h],
                h,
            ));
            v.push((format!("{p}.self_attn.k_proj.weight"), vec![kv * hd, h], h));
            v.push((format!("{p}.self_attn.v_proj.weight"), vec![kv * hd, h], h));
            v.push((
                format!("{p}.self_attn.o_proj.weight"),
                vec![h, heads * hd],
                heads * hd,
            ));
            v.push((format!("{p}.self_attn.q_norm.weight"), vec![hd], 0));
            v.push((format!("{p}.self_attn.k_norm.weight"), vec![hd], 0));
            v.push((format!("{p}.mlp.gate_proj.weight"), vec![inter, h], h));
            v.push((format!("{p}.mlp.up_proj.weight"), vec![inter, h], h));
            v.push((format!("{p}.mlp.down_proj.weight"), vec![h, inter], inter));
        }
        v.push((format!("{prefix}.norm.weight"), vec![h], 0));
    };
    lm(
        "talker.model",
        d.hidden,
        d.inter,
        d.layers,
        d.heads,
        d.kv,
        d.head_dim,
    );
    lm(
        "talker.code_predictor.model",
        d.cp_hidden,
        d.cp_inter,
        d.cp_layers,
        d.cp_heads,
        d.cp_kv,
        d.cp_head_dim,
    );
    let (h, th) = (d.hidden, d.text_hidden);
    v.push((
        "talker.model.text_embedding.weight".into(),
        vec![151936, th],
        1,
    ));
    v.push((
        "talker.model.codec_embedding.weight".into(),
        vec![3072, h],
        1,
    ));
    v.push((
        "talker.text_projection.linear_fc1.weight".into(),
        vec![th, th],
        th,
    ));
    v.push((
        "talker.text_projection.linear_fc1.bias".into(),
        vec![th],
        th,
    ));
    v.push((
        "talker.text_projection.linear_fc2.weight".into(),
        vec![h, th],
        th,
    ));
    v.push(("talker.text_projection.linear_fc2.bias".into(), vec![h], th));
    v.push(("talker.codec_head.weight".into(), vec![3072, h], h));
    for i in 0..d.groups - 1 {
        v.push((
            format!("talker.code_predictor.model.codec_embedding.{i}.weight"),
            vec![2048, h],
            4 * d.groups,
        ));
        v.push((
            format!("talker.code_predictor.lm_head.{i}.weight"),
            vec![2048, d.cp_hidden],
            d.cp_hidden,
        ));
    }
    if d.cp_hidden != h {
        v.push((
            "talker.code_predictor.small_to_mtp_projection.weight".into(),
            vec![d.cp_hidden, h],
            h,
        ));
        v.push((
            "talker.code_predictor.small_to_mtp_projection.bias".into(),
            vec![d.cp_hidden],
            h,
        ));
    }
    v
}

/// Codec decoder tensors. Fan-in 0: around 1 (norms, usage counts);
/// `usize::MAX`: small values (layer scales, log-alpha/beta).
fn codec_tensors(d: &Dims) -> Tensors {
    let mut v: Tensors = Vec::new();
    let cd = d.c_codebook_dim / 2;
    let q = "decoder.quantizer";
    v.push((
        format!("{q}.rvq_first.vq.layers.0._codebook.embedding_sum"),
        vec![2048, cd],
        1,
    ));
    v.push((
        format!("{q}.rvq_first.vq.layers.0._codebook.cluster_usage"),
        vec![2048],
        0,
    ));
    for i in 0..d.groups - 1 {
        v.push((
            format!("{q}.rvq_rest.vq.layers.{i}._codebook.embedding_sum"),
            vec![2048, cd],
            1,
        ));
        v.push((
            format!("{q}.rvq_rest.vq.layers.{i}._codebook.cluster_usage"),
            vec![2048],
            0,
        ));
    }
    for r in ["rvq_first", "rvq_rest"] {
        v.push((
            format!("{q}.{r}.output_proj.weight"),
            vec![d.c_codebook_dim, cd, 1],
            cd,
        ));
        v.push((
            format!("{q}.{r}.input_proj.weight"),
            vec![cd, d.c_codebook_dim, 1],
            d.c_codebook_dim,
        ));
    }
    v.push((
        "decoder.pre_conv.conv.weight".into(),
        vec![d.c_latent, d.c_codebook_dim, 3],
        3 * d.c_codebook_dim,
    ));
    v.push((
        "decoder.pre_conv.conv.bias".into(),
        vec![d.c_latent],
        d.c_codebook_dim,
    ));
    let (ch, ci) = (d.c_hidden, d.c_inter);
    let qd = d.c_heads * d.c_head_dim;
    let t = "decoder.pre_transformer";
    v.push((
        format!("{t}.input_proj.weight"),
        vec![ch, d.c_latent],
        d.c_latent,
    ));
    v.push((format!("{t}.input_proj.bias"), vec![ch], d.c_latent));
    v.push((format!("{t}.output_proj.weight"), vec![d.c_latent, ch], ch));
    v.push((format!("{t}.output_proj.bias"), vec![d.c_latent], ch));
    v.push((format!("{t}.norm.weight"), vec![ch], 0));
    for l in 0..d.c_layers {
        let p = format!("{t}.layers.{l}");
        for n in ["q", "k", "v"] {
            v.push((format!("{p}.self_attn.{n}_proj.weight"), vec![qd, ch], ch));
        }
        v.push((format!("{p}.self_attn.o_proj.weight"), vec![ch, qd], qd));
        v.push((format!("{p}.mlp.gate_proj.weight"), vec![ci, ch], ch));
        v.push((format!("{p}.mlp.up_proj.weight"), vec![ci, ch], ch));
        v.push((format!("{p}.mlp.down_proj.weight"), vec![ch, ci], ci));
        v.push((format!("{p}.input_layernorm.weight"), vec![ch], 0));
        v.push((format!("{p}.post_attention_layernorm.weight"), vec![ch], 0));
        v.push((format!("{p}.self_attn_layer_scale.scale"), vec![ch], SMALL));
        v.push((format!("{p}.mlp_layer_scale.scale"), vec![ch], SMALL));
    }
    let lat = d.c_latent;
    for u in 0..2 {
        let p = format!("decoder.upsample.{u}");
        v.push((format!("{p}.0.conv.weight"), vec![lat, lat, 2], 2 * lat));
        v.push((format!("{p}.0.conv.bias"), vec![lat], lat));
        v.push((format!("{p}.1.dwconv.conv.weight"), vec![lat, 1, 7], 7));
        v.push((format!("{p}.1.dwconv.conv.bias"), vec![lat], 7));
        v.push((format!("{p}.1.norm.weight"), vec![lat], 0));
        v.push((format!("{p}.1.norm.bias"), vec![lat], SMALL));
        v.push((format!("{p}.1.pwconv1.weight"), vec![4 * lat, lat], lat));
        v.push((format!("{p}.1.pwconv1.bias"), vec![4 * lat], lat));
        v.push((format!("{p}.1.pwconv2.weight"), vec![lat, 4 * lat], 4 * lat));
        v.push((format!("{p}.1.pwconv2.bias"), vec![lat], 4 * lat));
        v.push((format!("{p}.1.gamma"), vec![lat], SMALL));
    }
    v.push((
        "decoder.decoder.0.conv.weight".into(),
        vec![d.c_dim, lat, 7],
        7 * lat,
    ));
    v.push(("decoder.decoder.0.conv.bias".into(), vec![d.c_dim], 7 * lat));
    let mut cin = d.c_dim;
    for (b, &s) in [8usize, 5, 4, 3].iter().enumerate() {
        let cout = cin / 2;
        let p = format!("decoder.decoder.{}", b + 1);
        v.push((format!("{p}.block.0.alpha"), vec![cin], SMALL));
        v.push((format!("{p}.block.0.beta"), vec![cin], SMALL));
        v.push((
            format!("{p}.block.1.conv.weight"),
            vec![cin, cout, 2 * s],
            cin * 2,
        ));
        v.push((format!("{p}.block.1.conv.bias"), vec![cout], cin));
        for r in 2..5 {
            let rp = format!("{p}.block.{r}");
            for a in ["act1", "act2"] {
                v.push((format!("{rp}.{a}.alpha"), vec![cout], SMALL));
                v.push((format!("{rp}.{a}.beta"), vec![cout], SMALL));
            }
            v.push((
                format!("{rp}.conv1.conv.weight"),
                vec![cout, cout, 7],
                7 * cout,
            ));
            v.push((format!("{rp}.conv1.conv.bias"), vec![cout], 7 * cout));
            v.push((
                format!("{rp}.conv2.conv.weight"),
                vec![cout, cout, 1],
                2 * cout,
            ));
            v.push((format!("{rp}.conv2.conv.bias"), vec![cout], cout));
        }
        cin = cout;
    }
    v.push(("decoder.decoder.5.alpha".into(), vec![cin], SMALL));
    v.push(("decoder.decoder.5.beta".into(), vec![cin], SMALL));
    // The last conv maps to the waveform: a smaller gain keeps the random
    // decoder's output mostly inside the [-1, 1] clamp.
    v.push((
        "decoder.decoder.6.conv.weight".into(),
        vec![1, cin, 7],
        7 * cin * 400,
    ));
    v.push(("decoder.decoder.6.conv.bias".into(), vec![1], 7 * cin));
    v
}

fn fill(rng: &mut Rng, n: usize, fan_in: usize) -> Vec<f32> {
    let unif = |rng: &mut Rng| (rng.next_f64() * 2.0 - 1.0) as f32;
    match fan_in {
        0 => (0..n).map(|_| 1.0 + 0.1 * unif(rng)).collect(),
        SMALL => (0..n).map(|_| 0.1 * unif(rng)).collect(),
        ONE => vec![1.0; n],
        f => {
            // Uniform(-a, a) has std a / sqrt(3).
            let a = (3.0f64 / f as f64).sqrt() as f32;
            (0..n).map(|_| a * unif(rng)).collect()
        }
    }
}

fn write_safetensors(
    path: &Path,
    tensors: &[(String, Vec<usize>, usize)],
    bf16: bool,
    proxy: Proxy,
    rng: &mut Rng,
) -> Result<()> {
    let mut bufs: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::with_capacity(tensors.len());
    for (name, shape, fan_in) in tensors {
        let n: usize = shape.iter().product();
        let mut vals = fill(rng, n, *fan_in);
        if proxy == Proxy::Trained {
            proxy::trained_like(name, shape, *fan_in, &mut vals, rng);
        }
        let bytes = if bf16 {
            vals.iter()
                .flat_map(|&x| tts_kernels::f32_to_bf16(x).to_le_bytes())
                .collect()
        } else {
            vals.iter().flat_map(|&x| x.to_le_bytes()).collect()
        };
        bufs.push((name.clone(), shape.clone(), bytes));
    }
    let dtype = if bf16 { Dtype::BF16 } else { Dtype::F32 };
    let views: Vec<(String, TensorView<'_>)> = bufs
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(dtype, s.clone(), b).expect("tensor view of a consistent buffer"),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, &None, path).map_err(|e| ModelError::Safetensors {
        path: path.into(),
        message: e.to_string(),
    })
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|source| ModelError::Io {
        path: path.into(),
        source,
    })
}

/// Turns the CustomVoice `config.json` into `family`'s, as the hub files
/// differ (reference doc §1.2): `tts_model_type`, no preset speakers, the
/// languages without dialects, and `speaker_encoder_config` only for Base.
fn set_family(family: Family, speaker: Option<&SpeakerDims>, config: &mut Value) {
    let kind = match family {
        Family::CustomVoice => return,
        Family::Base => "base",
        Family::VoiceDesign => "voice_design",
    };
    config["tts_model_type"] = json!(kind);
    let t = &mut config["talker_config"];
    t["spk_id"] = json!({});
    t["spk_is_dialect"] = json!({});
    let langs: BTreeMap<_, _> = LANGUAGES
        .iter()
        .filter(|(n, _)| !n.contains("dialect"))
        .map(|(n, id)| (n.to_string(), json!(id)))
        .collect();
    t["codec_language_id"] = json!(langs);
    let root = config.as_object_mut().expect("config is an object");
    match speaker {
        Some(s) => {
            root.insert("speaker_encoder_config".into(), s.config());
        }
        None => {
            root.remove("speaker_encoder_config");
        }
    }
}

/// The preset's `config.json` and `speech_tokenizer/config.json`.
pub fn config_files(preset: Preset) -> (Value, Value) {
    let d = dims(preset);
    let (mut config, mut codec) = configs(&d);
    let speaker = preset.speaker_encoder(d.hidden);
    set_family(preset.family(), speaker.as_ref(), &mut config);
    if let Some(e) = preset.codec_encoder() {
        codec["encoder_config"] = e.config();
    }
    (config, codec)
}

/// Writes a complete random checkpoint directory.
pub fn write_checkpoint(dir: &Path, preset: Preset, seed: u64) -> Result<()> {
    write_checkpoint_with(dir, preset, seed, Proxy::Random)
}

/// [`write_checkpoint`] with the LM weights drawn as `proxy` says (the
/// codec's are the same for every proxy).
pub fn write_checkpoint_with(dir: &Path, preset: Preset, seed: u64, proxy: Proxy) -> Result<()> {
    let d = dims(preset);
    let st = dir.join("speech_tokenizer");
    std::fs::create_dir_all(&st).map_err(|source| ModelError::Io {
        path: st.clone(),
        source,
    })?;
    let (mut config, codec) = config_files(preset);
    // Says the weights are random, so a run without a frame cap can be
    // warned about (they seldom end an utterance); an extra key, which the
    // official code keeps as an attribute and ignores.
    config[tts_models::config::RANDOM_WEIGHTS_KEY] = json!({
        "written_by": "tts-rt gen-checkpoint",
        "seed": seed,
        "proxy": proxy.name(),
    });
    let speaker = preset.speaker_encoder(d.hidden);
    let encoder = preset.codec_encoder();
    write(
        &dir.join("config.json"),
        &serde_json::to_string_pretty(&config).expect("json"),
    )?;
    let gen = json!({"do_sample": true, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
        "subtalker_dosample": true, "subtalker_temperature": 0.9, "subtalker_top_p": 1.0, "subtalker_top_k": 50,
        "max_new_tokens": 8192});
    write(
        &dir.join("generation_config.json"),
        &serde_json::to_string_pretty(&gen).expect("json"),
    )?;
    let (vocab, merges, tok_cfg) = tokenizer::tokenizer_files();
    write(&dir.join("vocab.json"), &vocab)?;
    write(&dir.join("merges.txt"), &merges)?;
    write(&dir.join("tokenizer_config.json"), &tok_cfg)?;
    write(
        &dir.join("preprocessor_config.json"),
        "{\n  \"processor_class\": \"Qwen3TTSProcessor\"\n}\n",
    )?;
    write(
        &st.join("config.json"),
        &serde_json::to_string_pretty(&codec).expect("json"),
    )?;
    write(
        &st.join("preprocessor_config.json"),
        "{\n  \"feature_extractor_type\": \"EncodecFeatureExtractor\",\n  \"feature_size\": 1,\n  \"padding_side\": \"right\",\n  \"padding_value\": 0.0,\n  \"return_attention_mask\": true,\n  \"sampling_rate\": 24000\n}\n",
    )?;
    let mut rng = Rng::new(seed);
    // The encoders' tensors come after the others, so the random stream of
    // the parts every family shares is the CustomVoice preset's.
    let mut talker = talker_tensors(&d);
    talker.extend(speaker.iter().flat_map(SpeakerDims::tensors));
    write_safetensors(
        &dir.join("model.safetensors"),
        &talker,
        true,
        proxy,
        &mut rng,
    )?;
    let mut codec_t = codec_tensors(&d);
    codec_t.extend(encoder.iter().flat_map(EncoderDims::tensors));
    write_safetensors(
        &st.join("model.safetensors"),
        &codec_t,
        false,
        Proxy::Random,
        &mut rng,
    )?;
    Ok(())
}
