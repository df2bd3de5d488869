//! The corrupt-checkpoint probe against the real binary: each broken copy
//! of tests/fixtures/tiny-a makes `tts-rt serve` exit at load (never report
//! ready), naming what is wrong — the tensor, the key or the file — with no
//! panic. Each copy symlinks what it does not change (nothing large is
//! copied) and lives under the target's temp dir.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use safetensors::{Dtype, SafeTensors};
use serde_json::{json, Value};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-a")
}

/// A copy of tiny-a named `name`: `replace` lists (path inside the
/// checkpoint, new bytes); everything else is symlinked.
fn copy_with(name: &str, replace: &[(&str, Vec<u8>)]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("corrupt_checkpoint")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    link_tree(&fixture(), &dir, "", replace);
    dir
}

fn link_tree(from: &Path, to: &Path, rel: &str, replace: &[(&str, Vec<u8>)]) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if e.file_type().unwrap().is_dir() {
            link_tree(&e.path(), &to.join(&name), &path, replace);
        } else if let Some((_, bytes)) = replace.iter().find(|(p, _)| *p == path) {
            std::fs::write(to.join(&name), bytes).unwrap();
        } else {
            std::os::unix::fs::symlink(e.path(), to.join(&name)).unwrap();
        }
    }
}

type Tensors = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

/// `file`'s tensors after `edit`, serialized again.
fn edited_tensors(file: &str, edit: impl FnOnce(&mut Tensors)) -> Vec<u8> {
    let bytes = std::fs::read(fixture().join(file)).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut t: Tensors = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, (v.dtype(), v.shape().to_vec(), v.data().to_vec())))
        .collect();
    edit(&mut t);
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = t
        .iter()
        .map(|(n, (d, s, b))| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize(views, &None).unwrap()
}

/// `file`'s JSON after `edit`.
fn edited_json(file: &str, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join(file)).unwrap()).unwrap();
    edit(&mut v);
    serde_json::to_vec_pretty(&v).unwrap()
}

/// `serve` on `dir` exits non-zero within a minute, its stderr naming
/// every needle, without a panic.
fn serve_refuses(dir: &Path, needles: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args(["serve", "--model", dir.to_str().unwrap(), "--port", "0"])
        .env_remove("TTS_RT_MODEL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{}: serve kept running", dir.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "{}: exit 0: {err}", dir.display());
    assert!(!err.contains("panicked"), "{}: {err}", dir.display());
    assert!(!err.contains(" ready in "), "reported ready: {err}");
    for n in needles {
        assert!(
            err.contains(n),
            "{}: stderr lacks {n:?}:\n{err}",
            dir.display()
        );
    }
    err
}

/// A case: its name, the files it replaces, what its refusal must name.
type Case = (
    &'static str,
    Vec<(&'static str, Vec<u8>)>,
    Vec<&'static str>,
);

const PROBE: &str = "talker.model.layers.1.mlp.up_proj.weight";
const CODEC_PROBE: &str = "decoder.decoder.6.conv.bias";

#[test]
fn every_corrupt_checkpoint_is_refused_at_load_naming_the_key() {
    let weights = std::fs::read(fixture().join("model.safetensors")).unwrap();
    let cases: Vec<Case> = vec![
        (
            "truncated_weights",
            vec![(
                "model.safetensors",
                weights[..weights.len() - 1000].to_vec(),
            )],
            vec!["model.safetensors", "truncated"],
        ),
        (
            "empty_weights",
            vec![("model.safetensors", Vec::new())],
            vec!["model.safetensors"],
        ),
        (
            "wrong_dtype",
            vec![(
                "model.safetensors",
                edited_tensors("model.safetensors", |t| {
                    let (_, shape, data) = t[PROBE].clone();
                    t.insert(PROBE.into(), (Dtype::I16, shape, data));
                }),
            )],
            vec![PROBE],
        ),
        (
            "missing_tensor",
            vec![(
                "model.safetensors",
                edited_tensors("model.safetensors", |t| {
                    t.remove(PROBE);
                }),
            )],
            vec![PROBE],
        ),
        (
            "missing_codec_tensor",
            vec![(
                "speech_tokenizer/model.safetensors",
                edited_tensors("speech_tokenizer/model.safetensors", |t| {
                    t.remove(CODEC_PROBE);
                }),
            )],
            vec![CODEC_PROBE],
        ),
        (
            "config_not_json",
            vec![("config.json", b"{\"talker_config\": ".to_vec())],
            vec!["config.json"],
        ),
        (
            "hidden_size_a_string",
            vec![(
                "config.json",
                edited_json("config.json", |v| {
                    v["talker_config"]["hidden_size"] = json!("wide");
                }),
            )],
            vec!["hidden_size"],
        ),
        (
            "spk_id_missing",
            vec![(
                "config.json",
                edited_json("config.json", |v| {
                    let t = v["talker_config"].as_object_mut().unwrap();
                    t.remove("spk_id");
                    t.remove("spk_is_dialect");
                }),
            )],
            vec!["spk_id"],
        ),
        (
            "zero_max_position_embeddings",
            vec![(
                "config.json",
                edited_json("config.json", |v| {
                    v["talker_config"]["max_position_embeddings"] = json!(0);
                }),
            )],
            vec!["max_position_embeddings"],
        ),
        (
            "zero_max_new_tokens",
            vec![(
                "generation_config.json",
                edited_json("generation_config.json", |v| {
                    v["max_new_tokens"] = json!(0);
                }),
            )],
            vec!["generation_config.json", "max_new_tokens"],
        ),
    ];
    let n = cases.len();
    for (name, replace, needles) in cases {
        let dir = copy_with(name, &replace);
        let err = serve_refuses(&dir, &needles);
        let last = err.lines().last().unwrap_or("");
        println!("corrupt checkpoint {name}: refused: {last}");
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("corrupt-checkpoint: {n} broken checkpoints, each refused at load by name");
}

/// Issue 28: a directory, or a symbolic link loop, where the weights file
/// should be got a misleading refusal (a loop read as "no such file", a
/// directory as an mmap error); each must say what is there instead, for
/// `serve` and `speak` alike, and `speak` must leave `--out` alone.
#[test]
fn a_directory_or_a_symlink_loop_as_the_weights_file_is_named_as_such() {
    /// A case: its name, what the refusal says, how the weights path is made.
    type NotAFile = (&'static str, &'static str, fn(&Path));
    let cases: [NotAFile; 3] = [
        (
            "weights_dir",
            "model.safetensors is a directory, not a file",
            |p| {
                std::fs::create_dir(p).unwrap();
            },
        ),
        (
            "weights_self_loop",
            "model.safetensors is a symbolic link loop",
            |p| {
                std::os::unix::fs::symlink("model.safetensors", p).unwrap();
            },
        ),
        (
            "weights_loop",
            "model.safetensors is a symbolic link loop",
            |p| {
                // model.safetensors -> other.safetensors -> model.safetensors
                let other = p.with_file_name("other.safetensors");
                std::os::unix::fs::symlink("other.safetensors", p).unwrap();
                std::os::unix::fs::symlink("model.safetensors", other).unwrap();
            },
        ),
    ];
    for (name, says, make) in cases {
        let dir = copy_with(name, &[]);
        let weights = dir.join("model.safetensors");
        std::fs::remove_file(&weights).unwrap();
        make(&weights);
        let err = serve_refuses(&dir, &[says]);
        println!(
            "{name}: serve refused: {}",
            err.lines().last().unwrap_or("")
        );
        let out = dir.join("keep.wav");
        std::fs::write(&out, b"keep").unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
            .args(["speak", "Hello.", "--model", dir.to_str().unwrap(), "--out"])
            .arg(&out)
            .env_remove("TTS_RT_MODEL")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert!(
            err.contains(says),
            "{name}: speak's stderr lacks {says:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert_eq!(
            std::fs::read(&out).unwrap(),
            b"keep",
            "{name}: --out changed"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!(
        "corrupt-checkpoint: {} weights paths that are no file (a directory, link loops), each refused saying what is there",
        cases.len()
    );
}
