//! Files written by independent writers (tests/fixtures/make_fixtures.py):
//! vllm-omni's layout by the safetensors Python package, qwentts.cpp's
//! `.rvq` by a port of its packer, and a tts-rt v1 file from the documented
//! metadata table. Reading them must give the values in expected.json, and
//! our packer must reproduce the `.rvq` bytes exactly.

use std::fs;
use std::path::PathBuf;

use tts_voices::interop::{
    export_qwentts, import_qwentts, import_vllm_omni, pack_codes, unpack_codes, ImportTarget,
};
use tts_voices::{format, CodecShape, ModelInfo, RefCodes, Timestamp, VoiceMode, VoiceName};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

struct Expected {
    x_vector: Vec<f32>,
    codes: RefCodes,
    ref_text: String,
}

fn expected() -> Expected {
    let v: serde_json::Value =
        serde_json::from_slice(&fs::read(fixtures().join("expected.json")).unwrap()).unwrap();
    let frames: Vec<Vec<u32>> = serde_json::from_value(v["codes"].clone()).unwrap();
    Expected {
        x_vector: serde_json::from_value(v["x_vector"].clone()).unwrap(),
        codes: RefCodes::from_frames(&frames).unwrap(),
        ref_text: v["ref_text"].as_str().unwrap().to_owned(),
    }
}

fn target() -> ImportTarget {
    ImportTarget {
        talker_size: "0b6".into(),
        hidden_size: 8,
        model: ModelInfo {
            checkpoint: "Qwen3-TTS-12Hz-0.6B-Base".into(),
            fingerprint: "fp".into(),
        },
    }
}

#[test]
fn a_v1_file_written_from_the_documented_table_reads_back() {
    let want = expected();
    let path = fixtures().join("tts_rt_v1/alice.safetensors");
    let r = format::read_file(&path, Some(&CodecShape::default())).unwrap();
    assert_eq!(r.name.as_str(), "Alice");
    assert_eq!(r.mode, VoiceMode::Icl);
    assert_eq!(r.x_vector, want.x_vector);
    assert_eq!(r.ref_codes.as_ref(), Some(&want.codes));
    assert_eq!(r.ref_text.as_deref(), Some(want.ref_text.as_str()));
    assert_eq!((r.talker_size.as_str(), r.hidden_size), ("0b6", 8));
    assert_eq!(r.description.as_deref(), Some("fixture voice"));
    let p = &r.provenance;
    assert_eq!(p.created, Timestamp::parse("2026-01-31T12:00:00Z").unwrap());
    assert_eq!(p.source.name, "alice.flac");
    assert_eq!(p.source.duration_s, Some(3.5));
    assert_eq!(p.source.sample_rate, Some(48_000));
    assert_eq!(p.source.channels, Some(2));
    assert_eq!(p.source.sha256, "ab".repeat(32));
    assert_eq!(p.model.checkpoint, "Qwen3-TTS-12Hz-0.6B-Base");
    assert_eq!(p.model.fingerprint, "fp-1");
    assert_eq!(p.format_version, 1);
    // Our writer's file for the same record reads back to the same record.
    let ours = format::to_bytes(&r).unwrap();
    assert_eq!(
        format::from_bytes(&ours, Some(&CodecShape::default())).unwrap(),
        r
    );
}

#[test]
fn a_vllm_omni_directory_imports() {
    let want = expected();
    let (records, skipped) = import_vllm_omni(&fixtures().join("vllm_omni"), &target()).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(records.len(), 2);
    let alice = &records[0];
    assert_eq!(alice.name.as_str(), "Alice");
    assert_eq!(alice.mode, VoiceMode::Icl);
    assert_eq!(alice.x_vector, want.x_vector);
    assert_eq!(alice.ref_codes.as_ref(), Some(&want.codes));
    assert_eq!(alice.ref_text.as_deref(), Some(want.ref_text.as_str()));
    let bob = &records[1];
    assert_eq!(bob.mode, VoiceMode::XVectorOnly);
    let neg: Vec<f32> = want.x_vector.iter().map(|v| -v).collect();
    assert_eq!(bob.x_vector, neg);
    assert_eq!(bob.description.as_deref(), Some("deep voice"));
}

#[test]
fn qwentts_files_import_and_our_packer_reproduces_their_bytes() {
    let want = expected();
    let dir = fixtures().join("qwentts");
    let rvq = fs::read(dir.join("alice.rvq")).unwrap();
    assert_eq!(rvq.len(), 22 * 3);
    assert_eq!(pack_codes(&want.codes).unwrap(), rvq);
    assert_eq!(unpack_codes(&rvq, 16).unwrap(), want.codes);
    let r = import_qwentts(
        VoiceName::new("Alice").unwrap(),
        &dir.join("alice.spk"),
        Some(&dir.join("alice.rvq")),
        Some(&want.ref_text),
        &target(),
    )
    .unwrap();
    assert_eq!(r.x_vector, want.x_vector);
    assert_eq!(r.ref_codes.as_ref(), Some(&want.codes));
    let out = tempfile::tempdir().unwrap();
    let files = export_qwentts(out.path(), &r).unwrap();
    assert_eq!(
        fs::read(files.spk).unwrap(),
        fs::read(dir.join("alice.spk")).unwrap()
    );
    assert_eq!(fs::read(files.rvq.unwrap()).unwrap(), rvq);
}
