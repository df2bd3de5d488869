//! The voice file format: round trips, the layout other tools read, and a
//! named error for every way a file can be wrong.

use crate::common;

use std::collections::HashMap;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use tts_voices::format::{self, FormatProblem};
use tts_voices::{CodecShape, RecordError, VoiceMode};

use common::{codes_of_groups, icl, xvec};

fn meta_of(bytes: &[u8]) -> HashMap<String, String> {
    let (_, m) = SafeTensors::read_metadata(bytes).unwrap();
    m.metadata().clone().unwrap()
}

/// A safetensors file with `meta` and the given tensors.
fn build(
    meta: &HashMap<String, String>,
    tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)],
) -> Vec<u8> {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, &Some(meta.clone())).unwrap()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn read(bytes: &[u8]) -> Result<tts_voices::VoiceRecord, FormatProblem> {
    format::from_bytes(bytes, Some(&CodecShape::default()))
}

#[test]
fn icl_and_xvec_records_round_trip_exactly() {
    for record in [icl("Alice", 1024, 7), xvec("bob", 2048, 3)] {
        let bytes = format::to_bytes(&record).unwrap();
        assert_eq!(read(&bytes).unwrap(), record);
    }
    // Unknown clip details stay unknown.
    let mut r = xvec("anon", 8, 1);
    r.provenance.source.duration_s = None;
    r.provenance.source.sample_rate = None;
    r.provenance.source.channels = None;
    let bytes = format::to_bytes(&r).unwrap();
    assert_eq!(read(&bytes).unwrap(), r);
}

#[test]
fn the_bytes_are_a_function_of_the_record() {
    let record = icl("Alice", 48, 5);
    let first = format::to_bytes(&record).unwrap();
    for _ in 0..8 {
        assert_eq!(format::to_bytes(&record.clone()).unwrap(), first);
    }
    let header_len = u64::from_le_bytes(first[..8].try_into().unwrap()) as usize;
    assert_eq!(header_len % 8, 0);
    assert_eq!(first.len(), 8 + header_len + 48 * 4 + 5 * 16 * 4);
    assert!(first[8..].starts_with(b"{\"__metadata__\":{"));
}

#[test]
fn the_file_has_vllm_omni_tensor_names_and_the_documented_metadata() {
    let record = icl("Alice", 1024, 7);
    let bytes = format::to_bytes(&record).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let emb = st.tensor("speaker_embedding").unwrap();
    assert_eq!((emb.dtype(), emb.shape()), (Dtype::F32, &[1024][..]));
    let codes = st.tensor("ref_code").unwrap();
    assert_eq!((codes.dtype(), codes.shape()), (Dtype::I32, &[7, 16][..]));
    assert_eq!(&codes.data()[4..8], &2047i32.to_le_bytes());
    let m = meta_of(&bytes);
    let expect = [
        ("format", "tts-rt-voice"),
        ("version", "1"),
        ("name", "Alice"),
        ("mode", "icl"),
        ("ref_text", "Hello there, this is the reference."),
        ("talker_size", "0b6"),
        ("hidden_size", "1024"),
        ("created", "2026-01-31T12:00:00Z"),
        ("source_name", "ref clip.wav"),
        ("source_duration_s", "3.25"),
        ("source_sample_rate", "44100"),
        ("source_channels", "2"),
        ("model", "Qwen3-TTS-12Hz-0.6B-Base"),
        ("model_fingerprint", "a1b2c3d4"),
        ("description", "warm narrator"),
    ];
    for (k, v) in expect {
        assert_eq!(m.get(k).map(String::as_str), Some(v), "{k}");
    }
    assert_eq!(m["source_sha256"], tts_voices::sha256_hex(b"RIFF....WAVE"));
    // An x-vector voice has no ref_code and an empty ref_text.
    let bytes = format::to_bytes(&xvec("bob", 16, 1)).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert!(st.tensor("ref_code").is_err());
    assert_eq!(meta_of(&bytes)["mode"], "xvec");
    assert_eq!(meta_of(&bytes)["ref_text"], "");
}

#[test]
fn truncated_and_foreign_files_are_told_apart() {
    let bytes = format::to_bytes(&icl("Alice", 64, 3)).unwrap();
    for cut in [0, 5, 8, 40, bytes.len() - 1] {
        let err = read(&bytes[..cut]).unwrap_err();
        assert!(
            matches!(err, FormatProblem::Truncated { .. }),
            "cut {cut}: {err}"
        );
    }
    let garbage: Vec<u8> = (0..500u32).map(|i| (i * 7919 % 251) as u8).collect();
    assert!(matches!(
        read(&garbage),
        Err(FormatProblem::NotSafetensors { .. })
    ));
    let mut flipped = bytes.clone();
    flipped[8] = b'X'; // the header's opening brace
    assert!(matches!(
        read(&flipped),
        Err(FormatProblem::NotSafetensors { .. })
    ));
    let mut json_broken = bytes.clone();
    json_broken[12] = b'\x01';
    assert!(matches!(
        read(&json_broken),
        Err(FormatProblem::NotSafetensors { .. })
    ));
}

#[test]
fn every_metadata_and_tensor_problem_is_named() {
    let good = icl("Alice", 32, 2);
    let bytes = format::to_bytes(&good).unwrap();
    let meta = meta_of(&bytes);
    let emb = f32_bytes(&good.x_vector);
    let codes: Vec<u8> = good
        .ref_codes
        .as_ref()
        .unwrap()
        .as_slice()
        .iter()
        .flat_map(|&c| (c as i32).to_le_bytes())
        .collect();
    let tensors = || {
        vec![
            ("speaker_embedding", Dtype::F32, vec![32], emb.clone()),
            ("ref_code", Dtype::I32, vec![2, 16], codes.clone()),
        ]
    };
    assert_eq!(read(&build(&meta, &tensors())).unwrap(), good);

    let with = |k: &str, v: Option<&str>| {
        let mut m = meta.clone();
        match v {
            Some(v) => m.insert(k.into(), v.into()),
            None => m.remove(k),
        };
        read(&build(&m, &tensors())).unwrap_err()
    };
    assert!(matches!(
        with("format", None),
        FormatProblem::NotAVoice { found: None }
    ));
    assert!(matches!(
        with("format", Some("gguf")),
        FormatProblem::NotAVoice { .. }
    ));
    assert!(matches!(
        with("version", Some("2")),
        FormatProblem::Version { .. }
    ));
    for key in [
        "name",
        "mode",
        "hidden_size",
        "created",
        "source_sha256",
        "model",
    ] {
        let err = with(key, None);
        assert!(
            matches!(err, FormatProblem::Metadata { key: k, .. } if k == key),
            "{key}: {err}"
        );
    }
    for (key, bad) in [
        ("name", "../evil"),
        ("mode", "clone"),
        ("hidden_size", "lots"),
        ("created", "yesterday"),
        ("source_sample_rate", "-1"),
    ] {
        let err = with(key, Some(bad));
        assert!(
            matches!(err, FormatProblem::Metadata { key: k, .. } if k == key),
            "{key}: {err}"
        );
    }
    assert!(matches!(
        with("ref_text", Some("  ")),
        FormatProblem::Record(RecordError::IclNeedsRefText)
    ));
    assert!(matches!(
        with("source_sha256", Some("abc")),
        FormatProblem::Record(RecordError::BadField {
            field: "source_sha256",
            ..
        })
    ));
    let mut xmeta = meta.clone();
    xmeta.insert("mode".into(), "xvec".into());
    xmeta.insert("ref_text".into(), String::new());
    assert!(matches!(
        read(&build(&xmeta, &tensors())),
        Err(FormatProblem::UnexpectedTensor(t)) if t == "ref_code"
    ));

    let t = |list: Vec<(&str, Dtype, Vec<usize>, Vec<u8>)>| read(&build(&meta, &list)).unwrap_err();
    let only_emb = vec![("speaker_embedding", Dtype::F32, vec![32], emb.clone())];
    assert!(matches!(
        t(only_emb),
        FormatProblem::MissingTensor("ref_code")
    ));
    let only_codes = vec![("ref_code", Dtype::I32, vec![2, 16], codes.clone())];
    assert!(matches!(
        t(only_codes),
        FormatProblem::MissingTensor("speaker_embedding")
    ));
    let short = vec![
        (
            "speaker_embedding",
            Dtype::F32,
            vec![31],
            emb[..124].to_vec(),
        ),
        ("ref_code", Dtype::I32, vec![2, 16], codes.clone()),
    ];
    assert!(matches!(
        t(short),
        FormatProblem::Tensor {
            tensor: "speaker_embedding",
            ..
        }
    ));
    let wrong_dtype = vec![
        ("speaker_embedding", Dtype::I32, vec![32], emb.clone()),
        ("ref_code", Dtype::I32, vec![2, 16], codes.clone()),
    ];
    assert!(matches!(
        t(wrong_dtype),
        FormatProblem::Tensor {
            tensor: "speaker_embedding",
            ..
        }
    ));
    let wrong_groups = vec![
        ("speaker_embedding", Dtype::F32, vec![32], emb.clone()),
        ("ref_code", Dtype::I32, vec![4, 8], codes.clone()),
    ];
    assert!(matches!(
        t(wrong_groups),
        FormatProblem::Tensor {
            tensor: "ref_code",
            ..
        }
    ));
    let mut big = codes.clone();
    big[8..12].copy_from_slice(&2048i32.to_le_bytes());
    let out_of_range = vec![
        ("speaker_embedding", Dtype::F32, vec![32], emb.clone()),
        ("ref_code", Dtype::I32, vec![2, 16], big),
    ];
    assert!(matches!(
        t(out_of_range),
        FormatProblem::Record(RecordError::CodeOutOfRange {
            frame: 0,
            group: 2,
            code: 2048,
            ..
        })
    ));
    let mut negative = codes.clone();
    negative[..4].copy_from_slice(&(-1i32).to_le_bytes());
    let negative = vec![
        ("speaker_embedding", Dtype::F32, vec![32], emb.clone()),
        ("ref_code", Dtype::I32, vec![2, 16], negative),
    ];
    assert!(matches!(
        t(negative),
        FormatProblem::Tensor {
            tensor: "ref_code",
            ..
        }
    ));
    let mut nan = good.x_vector.clone();
    nan[5] = f32::NAN;
    let nan = vec![
        ("speaker_embedding", Dtype::F32, vec![32], f32_bytes(&nan)),
        ("ref_code", Dtype::I32, vec![2, 16], codes.clone()),
    ];
    assert!(matches!(
        t(nan),
        FormatProblem::Record(RecordError::NonFinite { index: 5, .. })
    ));
    let extra = vec![
        ("speaker_embedding", Dtype::F32, vec![32], emb.clone()),
        ("ref_code", Dtype::I32, vec![2, 16], codes.clone()),
        ("weights", Dtype::F32, vec![1], vec![0; 4]),
    ];
    assert!(matches!(t(extra), FormatProblem::UnexpectedTensor(n) if n == "weights"));
}

/// Without a model's codec (`None`) a file's codes are read in their own
/// shape: the 8 groups a trimmed checkpoint's encoder keeps read back as
/// written, where a reader holding the released codec refuses them; a
/// shape no codec makes (no groups, more than 32, a code past the 2048-entry
/// codebook) is refused all the same, naming the problem.
#[test]
fn a_voice_of_8_code_groups_reads_without_a_model_and_bad_shapes_do_not() {
    let mut eight = icl("Alice", 32, 3);
    eight.ref_codes = Some(codes_of_groups(8, 3));
    let bytes = format::to_bytes(&eight).unwrap();
    assert_eq!(format::from_bytes(&bytes, None).unwrap(), eight);
    let released = read(&bytes).unwrap_err();
    assert!(
        matches!(&released, FormatProblem::Tensor { tensor: "ref_code", expected, found }
            if expected.contains("[T, 16]") && found.contains("[3, 8]")),
        "{released}"
    );
    let trimmed = CodecShape {
        groups: 8,
        ..CodecShape::default()
    };
    assert_eq!(format::from_bytes(&bytes, Some(&trimmed)).unwrap(), eight);

    let meta = meta_of(&bytes);
    let emb = f32_bytes(&eight.x_vector);
    let refuse = |shape: Vec<usize>, codes: Vec<i32>| {
        let codes: Vec<u8> = codes.iter().flat_map(|c| c.to_le_bytes()).collect();
        let list = [
            ("speaker_embedding", Dtype::F32, vec![32], emb.clone()),
            ("ref_code", Dtype::I32, shape, codes),
        ];
        format::from_bytes(&build(&meta, &list), None).unwrap_err()
    };
    for (shape, n) in [(vec![3, 0], 0), (vec![1, 33], 33), (vec![24], 24)] {
        let err = refuse(shape.clone(), vec![0; n]);
        assert!(
            matches!(&err, FormatProblem::Tensor { tensor: "ref_code", expected, .. }
                if expected.contains("G in 1..=32")),
            "{shape:?}: {err}"
        );
    }
    let mut past = vec![0; 16];
    past[11] = 2048;
    assert!(matches!(
        refuse(vec![2, 8], past),
        FormatProblem::Record(RecordError::CodeOutOfRange {
            frame: 1,
            group: 3,
            code: 2048,
            codebook_size: 2048,
        })
    ));
    // A record made in memory is held to the same bounds.
    let mut wide = eight.clone();
    wide.ref_codes = Some(codes_of_groups(33, 1));
    assert_eq!(
        wide.validate(None),
        Err(RecordError::TooManyGroups { groups: 33 })
    );
    assert!(wide
        .validate(None)
        .unwrap_err()
        .to_string()
        .contains("1..=32"));
    assert_eq!(eight.validate(None), Ok(()));
}

#[test]
fn reading_a_file_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alice.safetensors");
    std::fs::write(&path, b"not a voice").unwrap();
    let err = format::read_file(&path, Some(&CodecShape::default())).unwrap_err();
    assert_eq!(err.path, path);
    assert!(err.to_string().contains("alice.safetensors"), "{err}");
    let missing = format::read_file(
        &dir.path().join("none.safetensors"),
        Some(&CodecShape::default()),
    );
    assert!(matches!(missing.unwrap_err().problem, FormatProblem::Io(_)));
}

#[test]
fn records_refuse_what_the_model_cannot_use() {
    let mut r = icl("Alice", 16, 2);
    r.ref_text = Some(String::new());
    assert_eq!(
        r.validate(Some(&CodecShape::default())),
        Err(RecordError::IclNeedsRefText)
    );
    let mut r = icl("Alice", 16, 2);
    r.ref_codes = None;
    assert_eq!(
        r.validate(Some(&CodecShape::default())),
        Err(RecordError::IclNeedsCodes)
    );
    let mut r = xvec("bob", 16, 1);
    r.ref_text = Some("hi".into());
    assert!(matches!(
        r.validate(Some(&CodecShape::default())),
        Err(RecordError::XVectorOnlyHas(_))
    ));
    let mut r = xvec("bob", 16, 1);
    r.hidden_size = 17;
    assert!(matches!(
        r.validate(Some(&CodecShape::default())),
        Err(RecordError::HiddenSizeMismatch { .. })
    ));
    let r = icl("Alice", 16, 2);
    let small = CodecShape {
        groups: 16,
        codebook_size: 1024,
    };
    assert!(matches!(
        r.validate(Some(&small)),
        Err(RecordError::CodeOutOfRange { .. })
    ));
    assert!(r.check_talker("0b6", 16).is_ok());
    let err = r.check_talker("1b7", 2048).unwrap_err();
    assert!(err.to_string().contains("1b7"), "{err}");
    assert_eq!(r.mode, VoiceMode::Icl);
    assert!(tts_voices::RefCodes::new(16, vec![0; 17]).is_err());
}

#[test]
fn json_view_carries_the_vectors_and_provenance() {
    let r = icl("Alice", 4, 2);
    let j = r.to_json();
    assert_eq!(j["name"], "Alice");
    assert_eq!(j["key"], "alice");
    assert_eq!(j["mode"], "icl");
    assert_eq!(j["ref_frames"], 2);
    assert_eq!(j["created"], "2026-01-31T12:00:00Z");
    assert_eq!(j["source"]["sample_rate"], 44_100);
    assert_eq!(j["x_vector"].as_array().unwrap().len(), 4);
    assert_eq!(j["x_vector"][1].as_f64().unwrap() as f32, r.x_vector[1]);
    assert_eq!(j["ref_codes"][0][1], 2047);
    assert_eq!(j["ref_codes"][1].as_array().unwrap().len(), 16);
    let x = xvec("bob", 4, 1).to_json();
    assert!(x["ref_codes"].is_null() && x["ref_text"].is_null());
    assert!(r.summary_json().get("x_vector").is_none());
}
