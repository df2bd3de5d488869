//! `config.json` parsing and validation on the tiny-a fixture's config,
//! one key changed per test: each error names its file and dotted key
//! (the speaker encoder's on the same config turned Base).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::*;

fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a/config.json")
}

fn fixture() -> Value {
    read_json(&fixture_path()).expect("tiny-a config.json")
}

/// The error message of parsing the fixture after `edit`.
fn error_after(edit: impl FnOnce(&mut Value)) -> String {
    let mut v = fixture();
    edit(&mut v);
    match TtsConfig::from_value(&fixture_path(), &v) {
        Ok(_) => panic!("the edited config parsed"),
        Err(e) => e.to_string(),
    }
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for p in parts {
        assert!(message.contains(p), "{message:?} lacks {p:?}");
    }
}

#[test]
fn tiny_a_parses_speakers_dialects_and_languages() {
    let cfg = TtsConfig::from_value(&fixture_path(), &fixture()).unwrap();
    assert_eq!(cfg.kind, ModelKind::CustomVoice);
    assert_eq!(cfg.size, "0b6");
    let t = &cfg.talker;
    assert_eq!(t.speaker_names(), ["dylan", "eric", "ryan", "serena"]);
    assert_eq!(t.speakers["ryan"].dialect, None);
    assert_eq!(
        t.speakers["eric"].dialect.as_deref(),
        Some("sichuan_dialect")
    );
    let langs = t.language_names();
    assert_eq!(langs[0], "auto");
    assert!(langs[1..].windows(2).all(|w| w[0] < w[1]), "{langs:?}");
    assert_eq!(langs.len(), t.languages.len() + 1);
}

#[test]
fn names_are_case_insensitive_and_listed_lower_case() {
    let mut v = fixture();
    v["talker_config"]["spk_id"] = json!({"Ryan": 3061});
    v["talker_config"]["spk_is_dialect"] = json!({"Ryan": false});
    let cfg = TtsConfig::from_value(&fixture_path(), &v).unwrap();
    assert_eq!(cfg.talker.speaker_names(), ["ryan"]);
}

#[test]
fn instruct_follows_the_official_size_rule() {
    let mut cfg = TtsConfig::from_value(&fixture_path(), &fixture()).unwrap();
    for (size, supported) in [("0b6", false), ("", false), ("1b7", true)] {
        cfg.size = size.into();
        assert_eq!(cfg.supports_instruct(), supported, "size {size:?}");
    }
}

#[test]
fn wrong_model_type_is_an_unknown_model_type() {
    let e = error_after(|v| v["model_type"] = json!("llama"));
    assert_mentions(&e, &["llama", "qwen3_tts"]);
}

#[test]
fn unknown_tts_model_type_lists_the_families() {
    let e = error_after(|v| v["tts_model_type"] = json!("clone"));
    assert_mentions(
        &e,
        &[
            "`tts_model_type`",
            "\"clone\"",
            "custom_voice, voice_design or base",
        ],
    );
}

#[test]
fn missing_key_names_its_dotted_path() {
    let e = error_after(|v| {
        v["talker_config"]
            .as_object_mut()
            .unwrap()
            .remove("codec_pad_id");
    });
    assert_mentions(
        &e,
        &["config.json", "`talker_config.codec_pad_id` is missing"],
    );
}

#[test]
fn fewer_than_two_code_groups_are_refused() {
    let e = error_after(|v| v["talker_config"]["num_code_groups"] = json!(1));
    assert_mentions(&e, &["`talker_config.num_code_groups`", "at least 2"]);
}

#[test]
fn predictor_code_groups_must_match_the_talker() {
    let e = error_after(|v| {
        v["talker_config"]["code_predictor_config"]["num_code_groups"] = json!(3);
    });
    assert_mentions(
        &e,
        &[
            "`talker_config.code_predictor_config.num_code_groups`",
            "differs",
        ],
    );
}

#[test]
fn dialect_must_name_a_known_language() {
    let e = error_after(|v| {
        v["talker_config"]["spk_is_dialect"]["eric"] = json!("klingon");
    });
    assert_mentions(
        &e,
        &[
            "`talker_config.spk_is_dialect.eric`",
            "not in codec_language_id",
        ],
    );
}

#[test]
fn speaker_id_outside_the_codec_vocabulary_is_refused() {
    let e = error_after(|v| v["talker_config"]["spk_id"]["ryan"] = json!(1_000_000));
    assert_mentions(
        &e,
        &[
            "`talker_config.spk_id.ryan`",
            "outside the codec vocabulary",
        ],
    );
}

#[test]
fn special_token_outside_the_text_vocabulary_is_refused() {
    let e = error_after(|v| v["tts_pad_token_id"] = json!(u32::MAX));
    assert_mentions(&e, &["`tts_pad_token_id`", "outside the text vocabulary"]);
}

#[test]
fn custom_voice_without_speakers_is_refused_at_load() {
    for spk in [json!({}), Value::Null] {
        let e = error_after(|v| {
            v["talker_config"]["spk_id"] = spk;
            v["talker_config"]["spk_is_dialect"] = json!({});
        });
        assert_mentions(&e, &["`talker_config.spk_id`", "names no speakers"]);
    }
}

#[test]
fn zero_max_position_embeddings_is_refused_naming_the_key() {
    let e = error_after(|v| v["talker_config"]["max_position_embeddings"] = json!(0));
    assert_mentions(
        &e,
        &[
            "`talker_config.max_position_embeddings`",
            "must be positive",
        ],
    );
    let e = error_after(|v| {
        v["talker_config"]["code_predictor_config"]["max_position_embeddings"] = json!(0);
    });
    assert_mentions(
        &e,
        &[
            "`talker_config.code_predictor_config.max_position_embeddings`",
            "must be positive",
        ],
    );
}

#[test]
fn max_new_tokens_zero_is_refused_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("tts-rt-gencfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("generation_config.json");
    for n in [0, 1] {
        std::fs::write(&path, format!("{{\"max_new_tokens\": {n}}}")).unwrap();
        let e = GenerationConfig::load(&path).unwrap_err().to_string();
        assert_mentions(
            &e,
            &["generation_config.json", "`max_new_tokens`", "at least 2"],
        );
    }
    std::fs::write(&path, "{\"max_new_tokens\": 2}").unwrap();
    assert_eq!(GenerationConfig::load(&path).unwrap().max_new_tokens, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// tiny-a's config turned into a Base one whose speaker encoder config is
/// `spk` (absent when `None`).
fn as_base(v: &mut Value, spk: Option<Value>) {
    v["tts_model_type"] = json!("base");
    let o = v.as_object_mut().unwrap();
    match spk {
        Some(s) => o.insert("speaker_encoder_config".into(), s),
        None => o.remove("speaker_encoder_config"),
    };
}

fn talker_hidden() -> usize {
    fixture()["talker_config"]["hidden_size"].as_u64().unwrap() as usize
}

#[test]
fn only_base_has_a_speaker_encoder() {
    let mut v = fixture();
    v["speaker_encoder_config"] = json!({"enc_dim": 7, "enc_res2net_scale": 5});
    let cfg = TtsConfig::from_value(&fixture_path(), &v).unwrap();
    assert_eq!(cfg.kind, ModelKind::CustomVoice);
    assert_eq!(cfg.speaker_encoder, None, "unused for custom_voice");
    v["tts_model_type"] = json!("voice_design");
    let cfg = TtsConfig::from_value(&fixture_path(), &v).unwrap();
    assert_eq!(cfg.speaker_encoder, None, "unused for voice_design");
}

#[test]
fn base_speaker_encoder_takes_the_official_defaults() {
    let h = talker_hidden();
    let mut v = fixture();
    as_base(
        &mut v,
        Some(json!({"enc_dim": h, "sample_rate": 24000, "model_type": ""})),
    );
    let cfg = TtsConfig::from_value(&fixture_path(), &v).unwrap();
    let spk = cfg.speaker_encoder.expect("base has a speaker encoder");
    assert_eq!(
        spk,
        SpeakerEncoderConfig {
            enc_dim: h,
            ..SpeakerEncoderConfig::default()
        }
    );
    assert_eq!(spk.enc_channels, [512, 512, 512, 512, 1536]);
    assert_eq!(spk.enc_kernel_sizes, [5, 3, 3, 3, 1]);
    assert_eq!(spk.enc_dilations, [1, 2, 3, 4, 1]);
    assert_eq!(
        (
            spk.mel_dim,
            spk.enc_attention_channels,
            spk.enc_res2net_scale
        ),
        (128, 128, 8)
    );
    assert_eq!((spk.enc_se_channels, spk.sample_rate), (128, 24000));
    assert_eq!(spk.min_frames(), 5, "block 3: kernel 3, dilation 4");
    assert_eq!(spk.mfa_channels(), 1536);
    assert_eq!(
        spk.res2net_blocks().collect::<Vec<_>>(),
        [(512, 3, 2), (512, 3, 3), (512, 3, 4)]
    );
}

#[test]
fn base_speaker_encoder_honours_every_key() {
    let h = talker_hidden();
    let mut v = fixture();
    as_base(
        &mut v,
        Some(json!({
            "enc_dim": h, "mel_dim": 128, "enc_channels": [32, 32, 32, 64],
            "enc_kernel_sizes": [3, 3, 5, 1], "enc_dilations": [1, 2, 3, 1],
            "enc_attention_channels": 16, "enc_res2net_scale": 4, "enc_se_channels": 8,
        })),
    );
    let spk = TtsConfig::from_value(&fixture_path(), &v)
        .unwrap()
        .speaker_encoder
        .unwrap();
    assert_eq!(spk.enc_channels, [32, 32, 32, 64]);
    assert_eq!(spk.enc_kernel_sizes, [3, 3, 5, 1]);
    assert_eq!(spk.enc_dilations, [1, 2, 3, 1]);
    assert_eq!(
        (
            spk.enc_attention_channels,
            spk.enc_res2net_scale,
            spk.enc_se_channels
        ),
        (16, 4, 8)
    );
    assert_eq!(spk.min_frames(), 7, "kernel 5, dilation 3: pad 6");
}

#[test]
fn base_enc_dim_must_equal_the_talker_hidden_size() {
    let h = talker_hidden();
    assert_ne!(h, 1024, "the fixture's hidden size is not the default");
    // Absent key: the official default enc_dim (1024) applies.
    let e = error_after(|v| as_base(v, None));
    assert_mentions(
        &e,
        &[
            "`speaker_encoder_config.enc_dim`",
            "(1024)",
            &format!("talker_config.hidden_size ({h})"),
        ],
    );
    let e = error_after(|v| as_base(v, Some(json!({"enc_dim": h + 1}))));
    assert_mentions(&e, &[&format!("({})", h + 1), &format!("({h})")]);
}

#[test]
fn inconsistent_speaker_encoder_configs_name_the_key() {
    let h = talker_hidden();
    let case = |extra: Value| {
        let mut spk = json!({"enc_dim": h});
        for (k, x) in extra.as_object().unwrap() {
            spk[k] = x.clone();
        }
        error_after(|v| as_base(v, Some(spk)))
    };
    let e = case(json!({"enc_res2net_scale": 7}));
    assert_mentions(
        &e,
        &[
            "`speaker_encoder_config.enc_channels`",
            "(512) is not divisible by enc_res2net_scale (7)",
        ],
    );
    let e = case(json!({"enc_dilations": [1, 2, 3]}));
    assert_mentions(
        &e,
        &[
            "`speaker_encoder_config.enc_dilations`",
            "3 entries",
            "enc_channels has 5",
        ],
    );
    let e = case(json!({"enc_channels": [512, 512, 512, 512, 1024]}));
    assert_mentions(&e, &["last entry (1024)", "(1536)"]);
    let e = case(json!({"enc_channels": [256, 512, 512, 512, 1536]}));
    assert_mentions(&e, &["entry 1 (512) differs from entry 0 (256)"]);
    let e = case(json!({
        "enc_channels": [512, 1536], "enc_kernel_sizes": [5, 1], "enc_dilations": [1, 1],
    }));
    assert_mentions(&e, &["has 2 entries; at least 3"]);
    let e = case(json!({"enc_kernel_sizes": [5, 0, 3, 3, 1]}));
    assert_mentions(
        &e,
        &["`speaker_encoder_config.enc_kernel_sizes`", "positive"],
    );
    let e = case(json!({"enc_se_channels": 0}));
    assert_mentions(
        &e,
        &["`speaker_encoder_config.enc_se_channels`", "positive"],
    );
    let e = case(json!({"mel_dim": 80}));
    assert_mentions(
        &e,
        &["`speaker_encoder_config.mel_dim`", "is 80", "128 bins"],
    );
    let e = case(json!({"sample_rate": 16000}));
    assert_mentions(&e, &["`speaker_encoder_config.sample_rate`", "16000"]);
    let e = case(json!({"enc_channels": "wide"}));
    assert_mentions(&e, &["`speaker_encoder_config.enc_channels`", "list"]);
}

/// The hub speech tokenizer's `encoder_config` (reference doc §1.3), as
/// `save_pretrained` writes it (`_frame_rate`, not `frame_rate`).
fn hub_codec_json() -> Value {
    json!({
        "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_valid_num_quantizers": 16,
        "encode_downsample_rate": 1920,
        "decoder_config": {"codebook_dim": 512},
        "encoder_config": {
            "_frame_rate": 12.5,
            "audio_channels": 1,
            "codebook_dim": 256,
            "codebook_size": 2048,
            "compress": 2,
            "dilation_growth_rate": 2,
            "head_dim": 64,
            "hidden_act": "gelu",
            "hidden_size": 512,
            "intermediate_size": 2048,
            "kernel_size": 7,
            "last_kernel_size": 3,
            "norm_eps": 1e-5,
            "num_attention_heads": 8,
            "num_filters": 64,
            "num_hidden_layers": 8,
            "num_key_value_heads": 8,
            "num_quantizers": 32,
            "num_residual_layers": 1,
            "num_semantic_quantizers": 1,
            "pad_mode": "constant",
            "residual_kernel_size": 3,
            "rope_theta": 10000.0,
            "sampling_rate": 24000,
            "sliding_window": 250,
            "upsampling_ratios": [8, 6, 5, 4],
            "use_causal_conv": true,
            "use_conv_shortcut": false,
            "vector_quantization_hidden_dimension": 256,
        },
    })
}

fn encoder_error_after(edit: impl FnOnce(&mut Value)) -> String {
    let mut v = hub_codec_json();
    edit(&mut v);
    match CodecEncoderConfig::from_value(Path::new("speech_tokenizer/config.json"), &v) {
        Ok(_) => panic!("the edited encoder config parsed"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn hub_encoder_config_parses() {
    let c = CodecEncoderConfig::from_value(Path::new("config.json"), &hub_codec_json()).unwrap();
    assert_eq!(c.ratios, [4, 5, 6, 8]);
    assert_eq!(c.hop, 960);
    assert_eq!((c.downsample_kernel, c.downsample_stride), (4, 2));
    assert_eq!(c.samples_per_frame, 1920);
    assert_eq!(c.frame_rate(), 12.5);
    assert_eq!((c.total_quantizers, c.valid_quantizers), (32, 16));
    assert_eq!(c.quantizer_proj_dim, Some(256));
    assert_eq!((c.num_heads, c.num_kv_heads, c.head_dim), (8, 8, 64));
    assert_eq!(c.seanet_channels(4), 1024);
    // Missing keys take MimiConfig's defaults, which are the hub values.
    let mut v = hub_codec_json();
    v["encoder_config"] = json!({"frame_rate": 12.5});
    let d = CodecEncoderConfig::from_value(Path::new("config.json"), &v).unwrap();
    assert_eq!(
        CodecEncoderConfig {
            path: c.path.clone(),
            ..d
        },
        c
    );
}

#[test]
fn encoder_configs_the_graph_cannot_run_are_refused_by_key() {
    let cases: [(&str, Value, &str); 8] = [
        ("use_causal_conv", json!(false), "causal"),
        ("pad_mode", json!("reflect"), "\"constant\""),
        ("use_conv_shortcut", json!(true), "shortcut"),
        ("hidden_act", json!("silu"), "gelu"),
        ("num_key_value_heads", json!(16), "must divide"),
        ("audio_channels", json!(2), "mono"),
        (
            "vector_quantization_hidden_dimension",
            json!(128),
            "codebook_dim",
        ),
        ("_frame_rate", json!(25), "SEANet rate"),
    ];
    for (key, value, part) in cases {
        let m = encoder_error_after(|v| v["encoder_config"][key] = value.clone());
        assert_mentions(&m, &["speech_tokenizer/config.json", part]);
        assert!(m.contains("encoder_config."), "{m}");
    }
    let m = encoder_error_after(|v| v["encode_downsample_rate"] = 960.into());
    assert_mentions(&m, &["`encode_downsample_rate`", "960"]);
    let m = encoder_error_after(|v| v["encoder_valid_num_quantizers"] = 33.into());
    assert_mentions(&m, &["`encoder_valid_num_quantizers`", "1..=32"]);
}

#[test]
fn decoder_config_does_not_read_the_encoder_section() {
    // A synthesis checkpoint loads whatever its encoder_config says.
    let mut v = hub_codec_json();
    v["encoder_config"]["use_causal_conv"] = false.into();
    CodecConfig::from_value(Path::new("config.json"), &v).unwrap();
}
