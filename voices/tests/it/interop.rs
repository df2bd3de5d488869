//! vllm-omni and qwentts.cpp layouts: round trips, foreign files, refusals.

use crate::common;

use std::fs;

use safetensors::tensor::{Dtype, TensorView};
use tts_voices::interop::{
    export_qwentts, export_vllm_omni, import_qwentts, import_vllm_omni, ImportTarget, InteropError,
    MANIFEST_FILE,
};
use tts_voices::{ModelInfo, VoiceMode, VoiceName};

use common::{codes_of_groups, icl, xvec};

fn target(hidden_size: usize) -> ImportTarget {
    ImportTarget {
        talker_size: "0b6".into(),
        hidden_size,
        model: ModelInfo {
            checkpoint: "Qwen3-TTS-12Hz-0.6B-Base".into(),
            fingerprint: "f00d".into(),
        },
    }
}

#[test]
fn vllm_omni_export_then_import_gives_the_records_back() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = icl("Alice", 64, 11);
    let bob = xvec("bob", 64, 4);
    export_vllm_omni(tmp.path(), &[&alice, &bob], "Qwen/Qwen3-TTS-12Hz-0.6B-Base").unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(tmp.path().join(MANIFEST_FILE)).unwrap()).unwrap();
    assert_eq!(manifest["model"], "Qwen/Qwen3-TTS-12Hz-0.6B-Base");
    assert_eq!(manifest["hidden_size"], 64);
    assert_eq!(manifest["voices"]["Alice"]["file"], "alice.safetensors");
    assert_eq!(manifest["voices"]["Alice"]["mode"], "icl");
    assert_eq!(
        manifest["voices"]["Alice"]["ref_text"],
        alice.ref_text.clone().unwrap()
    );
    assert_eq!(
        manifest["voices"]["Alice"]["speaker_description"],
        "warm narrator"
    );
    assert_eq!(manifest["voices"]["Alice"]["ref_code_length"], 11);
    assert_eq!(manifest["voices"]["bob"]["mode"], "xvec");
    let (records, skipped) = import_vllm_omni(tmp.path(), &target(64)).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(records, [alice, bob]);
}

#[test]
fn vllm_omni_export_refuses_mixed_sizes_and_duplicate_names() {
    let tmp = tempfile::tempdir().unwrap();
    let err = export_vllm_omni(tmp.path(), &[&xvec("a", 8, 1), &xvec("b", 16, 1)], "m");
    assert!(matches!(err, Err(InteropError::Export(_))));
    let err = export_vllm_omni(tmp.path(), &[&xvec("a", 8, 1), &xvec("A", 8, 2)], "m");
    assert!(matches!(err, Err(InteropError::Export(_))));
    assert!(matches!(
        export_vllm_omni(tmp.path(), &[], "m"),
        Err(InteropError::Export(_))
    ));
}

/// A directory as vllm-omni's precompute script writes it: no tts-rt
/// metadata, bf16 or f32 embeddings, int32 or int64 codes, extra fields.
#[test]
fn vllm_omni_import_reads_foreign_files_and_skips_bad_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let e = 8;
    let emb: Vec<f32> = (0..e).map(|i| i as f32 * 0.5 - 1.0).collect();
    let f32b: Vec<u8> = emb.iter().flat_map(|v| v.to_le_bytes()).collect();
    // bf16 of values exactly representable in bf16: the top 16 bits.
    let bf16b: Vec<u8> = emb
        .iter()
        .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
        .collect();
    let codes: Vec<i64> = (0..3 * 16).map(|i| (i * 41) % 2048).collect();
    let i64b: Vec<u8> = codes.iter().flat_map(|v| v.to_le_bytes()).collect();
    let i32b: Vec<u8> = codes
        .iter()
        .flat_map(|&v| (v as i32).to_le_bytes())
        .collect();
    let write = |file: &str, tensors: Vec<(&str, TensorView<'_>)>| {
        fs::write(
            dir.join(file),
            safetensors::serialize(tensors, &None).unwrap(),
        )
        .unwrap();
    };
    fn emb_view(b: &[u8], d: Dtype) -> TensorView<'_> {
        TensorView::new(d, vec![b.len() / d.size()], b).unwrap()
    }
    write(
        "carol.safetensors",
        vec![("speaker_embedding", emb_view(&f32b, Dtype::F32))],
    );
    write(
        "dave.safetensors",
        vec![
            ("speaker_embedding", emb_view(&bf16b, Dtype::BF16)),
            (
                "ref_code",
                TensorView::new(Dtype::I64, vec![3, 16], &i64b).unwrap(),
            ),
        ],
    );
    write(
        "erin.safetensors",
        vec![
            ("speaker_embedding", emb_view(&f32b, Dtype::F32)),
            (
                "ref_code",
                TensorView::new(Dtype::I32, vec![3, 16], &i32b).unwrap(),
            ),
        ],
    );
    let wide: Vec<u8> = vec![0; 4 * 16];
    write(
        "wide.safetensors",
        vec![(
            "speaker_embedding",
            TensorView::new(Dtype::F32, vec![16], &wide).unwrap(),
        )],
    );
    fs::write(dir.join("broken.safetensors"), b"\x10\x00").unwrap();
    let manifest = serde_json::json!({
        "model": "Qwen3-TTS",
        "hidden_size": e,
        "voices": {
            "carol": {"file": "carol.safetensors", "mode": "xvec", "speaker_description": "calm", "embedding_dim": e},
            "dave": {"file": "dave.safetensors", "mode": "icl", "ref_text": "Dave speaking.", "ref_code_length": 3},
            "erin": {"file": "erin.safetensors", "ref_text": "Erin here."},
            "nofile": {"file": "missing.safetensors", "mode": "xvec"},
            "../evil": {"file": "carol.safetensors", "mode": "xvec"},
            "escape": {"file": "../carol.safetensors", "mode": "xvec"},
            "wide": {"file": "wide.safetensors", "mode": "xvec"},
            "broken": {"file": "broken.safetensors", "mode": "xvec"},
            "notext": {"file": "erin.safetensors", "mode": "icl"},
            "badlen": {"file": "dave.safetensors", "mode": "icl", "ref_text": "x", "ref_code_length": 4},
            "odd": {"file": "carol.safetensors", "mode": "clone"}
        }
    });
    fs::write(dir.join(MANIFEST_FILE), manifest.to_string()).unwrap();

    let (records, skipped) = import_vllm_omni(dir, &target(e)).unwrap();
    let got: Vec<_> = records.iter().map(|r| (r.name.as_str(), r.mode)).collect();
    assert_eq!(
        got,
        [
            ("carol", VoiceMode::XVectorOnly),
            ("dave", VoiceMode::Icl),
            ("erin", VoiceMode::Icl)
        ]
    );
    let carol = &records[0];
    assert_eq!(carol.x_vector, emb);
    assert_eq!(carol.description.as_deref(), Some("calm"));
    assert_eq!(carol.talker_size, "0b6");
    assert_eq!(carol.provenance.source.name, "vllm-omni:carol.safetensors");
    assert_eq!(carol.provenance.model.fingerprint, "f00d");
    let dave = &records[1];
    assert_eq!(dave.x_vector, emb);
    let want: Vec<u32> = codes.iter().map(|&c| c as u32).collect();
    assert_eq!(dave.ref_codes.as_ref().unwrap().as_slice(), &want[..]);
    assert_eq!(dave.ref_text.as_deref(), Some("Dave speaking."));
    assert_eq!(records[2].ref_frames(), 3);

    let reason = |name: &str| {
        skipped
            .iter()
            .find(|s| s.reason.starts_with(&format!("voice {name:?}")))
            .unwrap_or_else(|| panic!("{name} not skipped: {skipped:?}"))
            .reason
            .clone()
    };
    assert!(reason("nofile").contains("cannot read"));
    assert!(reason("../evil").contains("path separators"));
    assert!(reason("escape").contains("plain file name"));
    assert!(reason("wide").contains("hidden size is 8"));
    assert!(reason("broken").contains("truncated"));
    assert!(reason("notext").contains("ref_text"));
    assert!(reason("badlen").contains("ref_code_length"));
    assert!(reason("odd").contains("mode"));
    assert_eq!(skipped.len(), 8, "{skipped:?}");
}

#[test]
fn vllm_omni_import_refuses_a_manifest_for_another_talker_or_unreadable() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = import_vllm_omni(tmp.path(), &target(8));
    assert!(matches!(missing, Err(InteropError::Io { .. })));
    fs::write(tmp.path().join(MANIFEST_FILE), "{\"voices\": [}").unwrap();
    assert!(matches!(
        import_vllm_omni(tmp.path(), &target(8)),
        Err(InteropError::Manifest { .. })
    ));
    fs::write(
        tmp.path().join(MANIFEST_FILE),
        r#"{"hidden_size": 2048, "voices": {}}"#,
    )
    .unwrap();
    let err = import_vllm_omni(tmp.path(), &target(1024)).unwrap_err();
    assert!(
        matches!(
            err,
            InteropError::HiddenSize {
                expected: 1024,
                found: 2048,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn qwentts_export_then_import_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = icl("Alice", 1024, 13);
    let files = export_qwentts(tmp.path(), &alice).unwrap();
    assert_eq!(files.spk, tmp.path().join("alice.spk"));
    assert_eq!(fs::metadata(&files.spk).unwrap().len(), 4 * 1024);
    let rvq = files.rvq.clone().unwrap();
    assert_eq!(fs::metadata(&rvq).unwrap().len(), 22 * 13);
    let txt = files.txt.clone().unwrap();
    assert_eq!(
        fs::read_to_string(&txt).unwrap(),
        alice.ref_text.clone().unwrap()
    );

    let name = VoiceName::new("Alice").unwrap();
    let back = import_qwentts(
        name,
        &files.spk,
        Some(&rvq),
        alice.ref_text.as_deref(),
        &target(1024),
    )
    .unwrap();
    assert_eq!(back.x_vector, alice.x_vector);
    assert_eq!(back.ref_codes, alice.ref_codes);
    assert_eq!(back.ref_text, alice.ref_text);
    assert_eq!(back.mode, VoiceMode::Icl);
    assert_eq!(back.provenance.source.name, "qwentts:alice.rvq");

    let bob = xvec("bob", 1024, 9);
    let files = export_qwentts(tmp.path(), &bob).unwrap();
    assert!(files.rvq.is_none() && files.txt.is_none());
    let back = import_qwentts(
        VoiceName::new("bob").unwrap(),
        &files.spk,
        None,
        None,
        &target(1024),
    )
    .unwrap();
    assert_eq!(back.x_vector, bob.x_vector);
    assert_eq!(back.mode, VoiceMode::XVectorOnly);
}

#[test]
fn qwentts_import_refuses_sizes_that_do_not_fit() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |f: &str| tmp.path().join(f);
    fs::write(p("odd.spk"), [0u8; 1023]).unwrap();
    fs::write(p("ok.spk"), [0u8; 4096]).unwrap();
    fs::write(p("small.spk"), [0u8; 2048]).unwrap();
    fs::write(p("odd.rvq"), [0u8; 23]).unwrap();
    fs::write(p("ok.rvq"), [0u8; 44]).unwrap();
    fs::write(p("nan.spk"), f32::NAN.to_le_bytes().repeat(1024)).unwrap();
    let n = || VoiceName::new("v").unwrap();
    let t = target(1024);
    let err = import_qwentts(n(), &p("odd.spk"), None, None, &t).unwrap_err();
    assert!(
        err.to_string().contains("odd.spk") && err.to_string().contains("f32"),
        "{err}"
    );
    let err = import_qwentts(n(), &p("small.spk"), None, None, &t).unwrap_err();
    assert!(
        matches!(
            err,
            InteropError::HiddenSize {
                expected: 1024,
                found: 512,
                ..
            }
        ),
        "{err}"
    );
    let err = import_qwentts(n(), &p("ok.spk"), Some(&p("odd.rvq")), Some("hi"), &t).unwrap_err();
    assert!(
        err.to_string().contains("odd.rvq") && err.to_string().contains("23 bytes"),
        "{err}"
    );
    let err = import_qwentts(n(), &p("ok.spk"), Some(&p("ok.rvq")), None, &t).unwrap_err();
    assert!(err.to_string().contains("reference text"), "{err}");
    assert!(import_qwentts(n(), &p("ok.spk"), None, Some("hi"), &t).is_err());
    assert!(matches!(
        import_qwentts(n(), &p("nan.spk"), None, None, &t),
        Err(InteropError::Record(_))
    ));
    let ok = import_qwentts(n(), &p("ok.spk"), Some(&p("ok.rvq")), Some("hi"), &t).unwrap();
    assert_eq!(ok.ref_frames(), 2);
    assert!(matches!(
        import_qwentts(n(), &p("absent.spk"), None, None, &t),
        Err(InteropError::Io { .. })
    ));
}

/// Issue 31, item 4: an error whose message already says its cause (a read
/// failure, a refused record) must not also return it as its source, or
/// every renderer that walks the chain (the CLI's "caused by" lines) says
/// it twice. Each cause in a chain is new text.
#[test]
fn one_cause_per_error_line_in_the_voices_errors() {
    use std::error::Error;
    use tts_voices::{format, CodecShape, RecordError, StoreError, VoiceStore};
    fn assert_once(e: &dyn Error) {
        let mut line = e.to_string();
        let mut cause = e.source();
        while let Some(c) = cause {
            let text = c.to_string();
            assert!(
                !line.contains(&text),
                "the cause {text:?} is said twice: in {line:?} and again as its source"
            );
            line = text;
            cause = c.source();
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    // Interop: an unreadable directory, a record refused.
    let missing = import_vllm_omni(&tmp.path().join("none"), &target(8)).unwrap_err();
    assert!(matches!(missing, InteropError::Io { .. }), "{missing}");
    assert_once(&missing);
    assert_once(&InteropError::from(RecordError::IclNeedsCodes));
    // Store: a directory that is a file, a record refused.
    let file = tmp.path().join("a-file");
    fs::write(&file, b"x").unwrap();
    let Err(store) = VoiceStore::open(&file) else {
        panic!("a file is not a directory");
    };
    assert!(matches!(store, StoreError::Io { .. }), "{store}");
    assert!(store.to_string().contains("a-file"), "{store}");
    assert_once(&store);
    let record = StoreError::from(RecordError::IclNeedsCodes);
    assert!(
        record.to_string().starts_with("invalid voice: "),
        "{record}"
    );
    assert_once(&record);
    // Format: a file that cannot be read.
    let unread = format::read_file(
        &tmp.path().join("none.safetensors"),
        Some(&CodecShape::default()),
    )
    .unwrap_err();
    assert!(unread.to_string().contains("cannot read it"), "{unread}");
    assert_once(&unread);
}

/// A voice of a checkpoint keeping 8 code groups: the vllm-omni layout
/// carries its `[T, 8]` codes there and back; a qwentts.cpp `.rvq` (16
/// codebooks, no header to say otherwise) is refused before any file is
/// written, naming both widths.
#[test]
fn a_voice_of_8_code_groups_exports_to_vllm_omni_not_to_qwentts() {
    let tmp = tempfile::tempdir().unwrap();
    let mut eight = icl("eight", 64, 5);
    eight.ref_codes = Some(codes_of_groups(8, 5));
    export_vllm_omni(tmp.path(), &[&eight], "tiny-base8").unwrap();
    let (records, skipped) = import_vllm_omni(tmp.path(), &target(64)).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(records, [eight.clone()]);

    let out = tmp.path().join("qwentts");
    let err = export_qwentts(&out, &eight).unwrap_err().to_string();
    assert!(err.contains("8 code groups") && err.contains("16"), "{err}");
    assert!(!out.join("eight.spk").exists());
}
