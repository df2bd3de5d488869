//! Broken checkpoints and bad requests get clear errors naming the problem,
//! never a panic. Each test damages a copy of a fixture in a temp dir.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use tts_models::{ModelError, Qwen3Tts, Request};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

fn copy_fixture(name: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&fixture(name), t.path());
    t
}

fn load_err(dir: &Path) -> ModelError {
    match Qwen3Tts::load(dir) {
        Ok(_) => panic!("loading {} should fail", dir.display()),
        Err(e) => e,
    }
}

type Tensors = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

fn read_tensors(path: &Path) -> Tensors {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, v)| (n, (v.dtype(), v.shape().to_vec(), v.data().to_vec())))
        .collect()
}

fn write_tensors(path: &Path, t: &Tensors) {
    let views: Vec<(String, TensorView<'_>)> = t
        .iter()
        .map(|(n, (d, s, b))| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, &None, path).unwrap();
}

fn edit_model(dir: &Path, f: impl FnOnce(&mut Tensors)) {
    let p = dir.join("model.safetensors");
    let mut t = read_tensors(&p);
    f(&mut t);
    write_tensors(&p, &t);
}

fn edit_config(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

const PROBE: &str = "talker.model.layers.1.mlp.up_proj.weight";

#[test]
fn missing_tensor_is_named() {
    let d = copy_fixture("tiny-a");
    edit_model(d.path(), |t| {
        t.remove(PROBE);
    });
    let e = load_err(d.path());
    assert!(
        matches!(&e, ModelError::MissingTensor { tensor, .. } if tensor == PROBE),
        "{e}"
    );
    assert!(e.to_string().contains(PROBE));
}

#[test]
fn misshaped_tensor_names_both_shapes() {
    let d = copy_fixture("tiny-a");
    edit_model(d.path(), |t| {
        let (dt, shape, _) = t[PROBE].clone();
        let new = vec![shape[0] + 1, shape[1]];
        let n: usize = new.iter().product();
        t.insert(PROBE.into(), (dt, new, vec![0u8; n * 2]));
    });
    let e = load_err(d.path());
    assert!(
        matches!(&e, ModelError::ShapeMismatch { tensor, .. } if tensor == PROBE),
        "{e}"
    );
}

#[test]
fn unexpected_tensor_is_refused() {
    let d = copy_fixture("tiny-a");
    edit_model(d.path(), |t| {
        t.insert(
            "talker.model.layers.99.mlp.up_proj.weight".into(),
            (Dtype::F32, vec![2], vec![0u8; 8]),
        );
    });
    let e = load_err(d.path());
    assert!(
        matches!(&e, ModelError::UnexpectedTensors { first, .. } if first.contains("layers.99")),
        "{e}"
    );
}

#[test]
fn truncated_and_garbage_files_are_reported() {
    let d = copy_fixture("tiny-a");
    let p = d.path().join("model.safetensors");
    let len = std::fs::metadata(&p).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(len - 1000).unwrap();
    drop(f);
    let e = load_err(d.path());
    assert!(matches!(e, ModelError::Safetensors { .. }), "{e}");
    assert!(e.to_string().contains("truncated"), "{e}");

    for junk in [
        &b""[..],
        b"abc",
        b"\xff\xff\xff\xff\xff\xff\xff\x7fxxxx",
        b"\x08\x00\x00\x00\x00\x00\x00\x00not json",
    ] {
        std::fs::write(&p, junk).unwrap();
        let e = load_err(d.path());
        assert!(matches!(e, ModelError::Safetensors { .. }), "{e}");
    }
}

#[test]
fn integer_tensors_are_refused_by_name() {
    let d = copy_fixture("tiny-a");
    edit_model(d.path(), |t| {
        let (_, shape, data) = t[PROBE].clone();
        t.insert(PROBE.into(), (Dtype::I16, shape, data));
    });
    let e = load_err(d.path());
    assert!(
        matches!(&e, ModelError::UnsupportedDtype { tensor, .. } if tensor == PROBE),
        "{e}"
    );
}

#[test]
fn config_errors_name_the_key() {
    let d = copy_fixture("tiny-a");
    let cfg = d.path().join("config.json");
    edit_config(&cfg, |v| v["model_type"] = "llama".into());
    let e = load_err(d.path());
    assert!(matches!(e, ModelError::UnknownModelType { .. }), "{e}");
    assert!(e.to_string().contains("llama"));

    copy_dir(&fixture("tiny-a"), d.path());
    edit_config(&cfg, |v| {
        v["talker_config"]
            .as_object_mut()
            .unwrap()
            .remove("hidden_size");
    });
    let e = load_err(d.path()).to_string();
    assert!(
        e.contains("talker_config.hidden_size") && e.contains("missing"),
        "{e}"
    );

    copy_dir(&fixture("tiny-a"), d.path());
    edit_config(&cfg, |v| {
        v["talker_config"]["num_key_value_heads"] = 3.into()
    });
    let e = load_err(d.path()).to_string();
    assert!(e.contains("num_key_value_heads"), "{e}");

    copy_dir(&fixture("tiny-a"), d.path());
    std::fs::write(&cfg, "{ not json").unwrap();
    let e = load_err(d.path());
    assert!(matches!(e, ModelError::Json { .. }), "{e}");

    copy_dir(&fixture("tiny-a"), d.path());
    edit_config(&d.path().join("speech_tokenizer/config.json"), |v| {
        v["model_type"] = "mimi".into()
    });
    let e = load_err(d.path());
    assert!(matches!(e, ModelError::UnknownModelType { .. }), "{e}");
}

#[test]
fn missing_files_name_the_path() {
    let d = copy_fixture("tiny-a");
    std::fs::remove_file(d.path().join("vocab.json")).unwrap();
    let e = load_err(d.path()).to_string();
    assert!(e.contains("vocab.json"), "{e}");

    let d = copy_fixture("tiny-b");
    std::fs::remove_file(d.path().join("model-00002-of-00002.safetensors")).unwrap();
    let e = load_err(d.path()).to_string();
    assert!(e.contains("model-00002-of-00002.safetensors"), "{e}");
}

#[test]
fn f32_and_f16_checkpoints_load() {
    // The fixture is BF16; the same values stored as F32 must give the same
    // greedy codes, and an F16 copy must load and run.
    let d = copy_fixture("tiny-a");
    let reference = Arc::new(Qwen3Tts::load(&fixture("tiny-a")).unwrap());
    for target in [Dtype::F32, Dtype::F16] {
        edit_model(d.path(), |t| {
            for (dt, _, data) in t.values_mut() {
                assert_eq!(*dt, Dtype::BF16);
                let vals = data
                    .chunks_exact(2)
                    .map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16));
                *data = match target {
                    Dtype::F32 => vals.flat_map(|v| v.to_le_bytes()).collect(),
                    _ => vals
                        .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
                        .collect(),
                };
                *dt = target;
            }
        });
        let m = Arc::new(Qwen3Tts::load(d.path()).unwrap());
        let mut opts = m.default_options().greedy();
        opts.max_frames = 6;
        let req = Request {
            text: "Hello there.".into(),
            speaker: Some("ryan".into()),
            language: "english".into(),
            instruct: None,
            voice_clone: None,
            text_streaming: false,
            options: opts,
        };
        let got = m.start(&req).unwrap().run_to_end();
        assert!(!got.is_empty());
        if target == Dtype::F32 {
            assert_eq!(got, reference.start(&req).unwrap().run_to_end());
        }
        copy_dir(&fixture("tiny-a"), d.path());
    }
}

#[test]
fn bad_requests_are_rejected_with_the_valid_choices() {
    let m = Arc::new(Qwen3Tts::load(&fixture("tiny-a")).unwrap());
    let base = Request {
        text: "Hello.".into(),
        speaker: Some("ryan".into()),
        language: "english".into(),
        instruct: None,
        voice_clone: None,
        text_streaming: false,
        options: m.default_options(),
    };
    let err = |r: Request| m.start(&r).err().expect("request should fail").to_string();

    let e = err(Request {
        speaker: Some("nobody".into()),
        ..base.clone()
    });
    assert!(
        e.contains("nobody") && e.contains("ryan") && e.contains("serena"),
        "{e}"
    );
    let e = err(Request {
        language: "klingon".into(),
        ..base.clone()
    });
    assert!(
        e.contains("klingon") && e.contains("english") && e.contains("auto"),
        "{e}"
    );
    let e = err(Request {
        text: "   ".into(),
        ..base.clone()
    });
    assert!(e.contains("empty"), "{e}");
    let mut o = base.options.clone();
    o.talker.temperature = 0.0;
    let e = err(Request {
        options: o,
        ..base.clone()
    });
    assert!(e.contains("temperature"), "{e}");
    let e = err(Request {
        text: "word ".repeat(20_000),
        ..base.clone()
    });
    assert!(e.contains("tokens"), "{e}");
    // Case-insensitive names, as upstream.
    assert!(m
        .start(&Request {
            speaker: Some("RYAN".into()),
            language: "English".into(),
            ..base
        })
        .is_ok());
}
