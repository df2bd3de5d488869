//! `config.json` parsing and validation on the tiny-a fixture's config,
//! one key changed per test: each error names its file and dotted key.

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
