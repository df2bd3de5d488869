//! The Base preset loads with the runtime's loader and clones a voice, and
//! its random encoders give varied codes and a non-degenerate x-vector.

use tts_checkpoint_gen::{write_checkpoint, Family, Preset};
use tts_models::config::ModelKind;
use tts_models::Qwen3Tts;

/// Two seconds of a gliding two-tone signal at 24 kHz (changes over time,
/// so the codes should too).
fn clip() -> Vec<f32> {
    (0..48_000)
        .map(|i| {
            let t = i as f32 / 24_000.0;
            let f = 150.0 + 100.0 * t;
            0.3 * (std::f32::consts::TAU * f * t).sin()
                + 0.1 * (std::f32::consts::TAU * 3.1 * f * t).sin()
        })
        .collect()
}

#[test]
fn tiny_base_loads_and_clones_a_voice() {
    let dir = tempfile::tempdir().unwrap();
    write_checkpoint(dir.path(), Preset::TinyBase, 7).unwrap();
    let model = Qwen3Tts::load(dir.path()).unwrap();
    assert_eq!(model.config.kind, ModelKind::Base);
    assert!(model.speakers().is_empty());
    assert_eq!(model.languages().len(), 11, "auto plus ten languages");

    let (voice, timings) = model
        .clone_voice(&clip(), Some("hello world"), false)
        .unwrap();
    assert_eq!(voice.x_vector.len(), model.config.talker.lm.hidden_size);
    assert!(voice.x_vector.iter().all(|x| x.is_finite()));
    let spread = voice
        .x_vector
        .iter()
        .fold(f32::NEG_INFINITY, |a, &b| a.max(b))
        - voice.x_vector.iter().fold(f32::INFINITY, |a, &b| a.min(b));
    assert!(spread > 1e-3, "x-vector is constant");
    let r = voice.reference.as_ref().expect("ICL voice");
    assert_eq!(r.frames, 48_000usize.div_ceil(1920));
    let groups = model.config.talker.num_code_groups;
    assert_eq!(r.codes.len(), r.frames * groups);
    // Every code group uses more than one code over the clip.
    for g in 0..groups {
        let mut seen: Vec<u32> = r.codes.iter().skip(g).step_by(groups).copied().collect();
        seen.sort_unstable();
        seen.dedup();
        assert!(seen.len() > 1, "group {g} always gives code {}", seen[0]);
    }
    assert!(timings.x_vector > std::time::Duration::ZERO);
    assert!(timings.codes > std::time::Duration::ZERO);

    let (xv, t) = model.clone_voice(&clip(), None, true).unwrap();
    assert!(xv.reference.is_none());
    assert_eq!(xv.x_vector, voice.x_vector);
    assert_eq!(t.codes, std::time::Duration::ZERO);
}

#[test]
fn preset_names_give_their_families() {
    for (name, family) in [
        ("tiny", Family::CustomVoice),
        ("0.6b", Family::CustomVoice),
        ("1.7b", Family::CustomVoice),
        ("tiny-base", Family::Base),
        ("0.6b-base", Family::Base),
        ("1.7b-base", Family::Base),
        ("1.7b-voicedesign", Family::VoiceDesign),
    ] {
        assert_eq!(Preset::parse(name).unwrap().family(), family, "{name}");
    }
    let e = Preset::parse("2b").unwrap_err();
    assert!(
        e.contains("0.6b-base") && e.contains("1.7b-voicedesign"),
        "{e}"
    );
}

/// Every preset's configs parse as the loader reads them, with the family,
/// speakers, languages and encoders the hub files of that family have.
#[test]
fn every_preset_config_parses_as_its_family() {
    use tts_models::config::{CodecConfig, CodecEncoderConfig, TtsConfig};
    let p = std::path::Path::new("config.json");
    for (name, kind, hidden, encoder) in [
        ("tiny", ModelKind::CustomVoice, 64, false),
        ("0.6b", ModelKind::CustomVoice, 1024, false),
        ("1.7b", ModelKind::CustomVoice, 2048, false),
        ("tiny-base", ModelKind::Base, 64, true),
        ("0.6b-base", ModelKind::Base, 1024, true),
        ("1.7b-base", ModelKind::Base, 2048, true),
        ("1.7b-voicedesign", ModelKind::VoiceDesign, 2048, true),
    ] {
        let (config, codec) = tts_checkpoint_gen::config_files(Preset::parse(name).unwrap());
        let c = TtsConfig::from_value(p, &config).unwrap();
        assert_eq!(c.kind, kind, "{name}");
        assert_eq!(c.talker.lm.hidden_size, hidden, "{name}");
        let cv = kind == ModelKind::CustomVoice;
        assert_eq!(c.talker.speaker_names().is_empty(), !cv, "{name}");
        assert_eq!(
            c.talker.language_names().len(),
            if cv { 13 } else { 11 },
            "{name}"
        );
        match &c.speaker_encoder {
            Some(s) => {
                assert_eq!(kind, ModelKind::Base, "{name}");
                assert_eq!(s.enc_dim, hidden, "{name}");
            }
            None => assert_ne!(kind, ModelKind::Base, "{name}"),
        }
        CodecConfig::from_value(p, &codec).unwrap();
        assert_eq!(codec.get("encoder_config").is_some(), encoder, "{name}");
        if encoder {
            let e = CodecEncoderConfig::from_value(p, &codec).unwrap();
            assert_eq!(e.valid_quantizers, 16, "{name}");
            assert_eq!(e.samples_per_frame, 1920, "{name}");
        }
    }
    // VoiceDesign, like the hub file, has no speaker_encoder_config.
    let (vd, _) = tts_checkpoint_gen::config_files(Preset::Qwen17bVoiceDesign);
    assert!(vd.get("speaker_encoder_config").is_none());
    let (b, _) = tts_checkpoint_gen::config_files(Preset::Qwen06bBase);
    assert_eq!(
        b["speaker_encoder_config"],
        serde_json::json!({"enc_dim": 1024, "sample_rate": 24000})
    );
}
