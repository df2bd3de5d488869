//! The converted-weights cache (`tts_models::wcache`, `--weights-cache`):
//! a cached load (first: written, then: memory-mapped) gives the same bits
//! as converting in memory, and a stale, truncated, garbage or unwritable
//! cache is detected, named and rebuilt (or skipped) without ever failing
//! the load or changing the weights.
//!
//! Every test works on a copy of a committed fixture in a temporary
//! directory, so touching or rewriting its files never affects the others.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tts_models::wcache::{WeightsCacheEvent, WeightsCacheStatus};
use tts_models::{GenOptions, LoadOptions, Precision, Qwen3Tts, Request};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// A private copy of fixture `name` and an (absent) cache dir beside it.
struct Setup {
    _tmp: tempfile::TempDir,
    model: PathBuf,
    cache: PathBuf,
}

fn setup(name: &str) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join(name);
    copy_dir(&fixture(name), &model);
    let cache = tmp.path().join("cache");
    Setup {
        _tmp: tmp,
        model,
        cache,
    }
}

fn load(dir: &Path, o: LoadOptions, cache: Option<&Path>) -> Arc<Qwen3Tts> {
    let o = o.with_weights_cache(cache);
    Arc::new(Qwen3Tts::load_with(dir, o).unwrap_or_else(|e| panic!("loading {dir:?}: {e}")))
}

/// Greedy codes of a short request and the teacher-forced raw logits of
/// both LMs over them, as bit patterns: equal iff the weights are.
#[derive(Debug, PartialEq, Eq)]
struct Fingerprint {
    codes: Vec<u32>,
    talker: Vec<u32>,
    code_predictor: Vec<u32>,
}

fn fingerprint(m: &Arc<Qwen3Tts>) -> Fingerprint {
    let mut options: GenOptions = m.default_options().greedy();
    options.max_frames = 4;
    options.ignore_eos = true;
    let req = Request {
        text: "Hello there, weights cache.".into(),
        speaker: m.speakers().first().cloned(),
        language: "auto".into(),
        instruct: None,
        voice_clone: None,
        text_streaming: false,
        options,
    };
    let mut g = m.start(&req).expect("start");
    let mut codes = Vec::new();
    while let Some(f) = g.next_frame() {
        codes.extend(f);
    }
    assert!(!codes.is_empty());
    let prompt = m.build_prompt(&req).unwrap();
    let frames = codes.len() / m.config.talker.num_code_groups;
    let (t, c) = m.teacher_force(&prompt, &codes, frames);
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect();
    Fingerprint {
        codes,
        talker: bits(t),
        code_predictor: bits(c),
    }
}

fn statuses(m: &Qwen3Tts) -> Vec<WeightsCacheStatus> {
    m.weights_cache.iter().map(|e| e.status.clone()).collect()
}

fn stage<'a>(m: &'a Qwen3Tts, prefix: &str) -> &'a WeightsCacheEvent {
    m.weights_cache
        .iter()
        .find(|e| e.stage == prefix)
        .unwrap_or_else(|| panic!("no cache event for {prefix}: {:?}", m.weights_cache))
}

fn rebuilt_reason(s: &WeightsCacheStatus) -> &str {
    match s {
        WeightsCacheStatus::Rebuilt(r) => r,
        other => panic!("expected Rebuilt, got {other:?}"),
    }
}

const TALKER: &str = "talker.model";
const PREDICTOR: &str = "talker.code_predictor.model";

#[test]
fn cached_loads_equal_the_in_memory_conversion_bit_for_bit() {
    for (name, o) in [
        ("tiny-a", LoadOptions::uniform(Precision::Int8)),
        ("tiny-a", LoadOptions::uniform(Precision::Q4)),
        (
            "tiny-b",
            LoadOptions {
                talker: Precision::Q4.into(),
                code_predictor: Precision::Int8.into(),
                ..LoadOptions::default()
            },
        ),
    ] {
        let s = setup(name);
        let want = fingerprint(&load(&s.model, o, None));
        let first = load(&s.model, o, Some(&s.cache));
        assert_eq!(
            statuses(&first),
            vec![WeightsCacheStatus::Created, WeightsCacheStatus::Created],
            "{name} {}",
            o.name()
        );
        assert_eq!(
            fingerprint(&first),
            want,
            "{name} {}: first cached load",
            o.name()
        );
        for e in &first.weights_cache {
            assert!(e.path.is_file(), "{:?}", e.path);
            assert!(e.path.starts_with(&s.cache));
        }
        assert_eq!(Some(stage(&first, TALKER).precision), o.talker.as_uniform());
        assert_eq!(
            Some(stage(&first, PREDICTOR).precision),
            o.code_predictor.as_uniform()
        );
        drop(first);
        let warm = load(&s.model, o, Some(&s.cache));
        assert_eq!(
            statuses(&warm),
            vec![WeightsCacheStatus::Hit, WeightsCacheStatus::Hit],
            "{name} {}",
            o.name()
        );
        assert_eq!(fingerprint(&warm), want, "{name} {}: mapped load", o.name());
        // No temporary files are left behind.
        let files: Vec<String> = std::fs::read_dir(&s.cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files.len(), 2, "{files:?}");
        assert!(files.iter().all(|f| f.ends_with(".wcache")), "{files:?}");
    }
}

#[test]
fn f32_and_no_cache_dir_write_nothing() {
    let s = setup("tiny-b");
    let m = load(&s.model, LoadOptions::default(), Some(&s.cache));
    assert!(m.weights_cache.is_empty());
    assert!(!s.cache.exists());
    let m = load(&s.model, LoadOptions::uniform(Precision::Int8), None);
    assert!(m.weights_cache.is_empty());
}

#[test]
fn precisions_get_their_own_files() {
    let s = setup("tiny-b");
    let int8 = LoadOptions::uniform(Precision::Int8);
    let q4 = LoadOptions::uniform(Precision::Q4);
    load(&s.model, int8, Some(&s.cache));
    let m = load(&s.model, q4, Some(&s.cache));
    assert_eq!(
        statuses(&m),
        vec![WeightsCacheStatus::Created, WeightsCacheStatus::Created]
    );
    let m = load(&s.model, int8, Some(&s.cache));
    assert_eq!(statuses(&m), vec![WeightsCacheStatus::Hit; 2]);
    assert_eq!(std::fs::read_dir(&s.cache).unwrap().count(), 4);
}

#[test]
fn a_modified_checkpoint_makes_the_cache_stale() {
    let s = setup("tiny-a");
    let o = LoadOptions::uniform(Precision::Int8);
    let want = fingerprint(&load(&s.model, o, None));
    load(&s.model, o, Some(&s.cache));
    // `touch`: same bytes, new modification time.
    let st = s.model.join("model.safetensors");
    let f = std::fs::File::options().write(true).open(&st).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    drop(f);
    let m = load(&s.model, o, Some(&s.cache));
    for prefix in [TALKER, PREDICTOR] {
        let r = rebuilt_reason(&stage(&m, prefix).status);
        assert!(
            r.contains("stale") && r.contains("modification time"),
            "{r}"
        );
    }
    assert_eq!(fingerprint(&m), want);
    let m = load(&s.model, o, Some(&s.cache));
    assert_eq!(statuses(&m), vec![WeightsCacheStatus::Hit; 2]);

    // New weights of the same size (one weight's bytes changed): the mtime
    // changes with the write, so the cache is rebuilt from the new values.
    let mut bytes = std::fs::read(&st).unwrap();
    let n = bytes.len();
    // Low mantissa bits only (bf16/f32 data is 2-byte aligned): no NaN.
    for (i, b) in bytes.iter_mut().enumerate().skip(n - 4096) {
        if i % 2 == 0 {
            *b ^= 1;
        }
    }
    std::fs::write(&st, &bytes).unwrap();
    let f = std::fs::File::options().write(true).open(&st).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(10))
        .unwrap();
    drop(f);
    let fresh = fingerprint(&load(&s.model, o, None));
    let m = load(&s.model, o, Some(&s.cache));
    assert!(matches!(
        stage(&m, TALKER).status,
        WeightsCacheStatus::Rebuilt(_)
    ));
    assert_eq!(fingerprint(&m), fresh);
}

/// Damages the talker's cache file with `damage`, then checks the next
/// load names `expect` in its reason, gives the right weights, and leaves a
/// valid file behind.
fn damaged(damage: impl Fn(&Path), expect: &str) {
    static WANT: std::sync::OnceLock<Fingerprint> = std::sync::OnceLock::new();
    let s = setup("tiny-a");
    let o = LoadOptions::uniform(Precision::Q4);
    let want = WANT.get_or_init(|| fingerprint(&load(&s.model, o, None)));
    let first = load(&s.model, o, Some(&s.cache));
    let path = stage(&first, TALKER).path.clone();
    drop(first);
    damage(&path);
    let m = load(&s.model, o, Some(&s.cache));
    let r = rebuilt_reason(&stage(&m, TALKER).status);
    assert!(r.contains(expect), "expected {expect:?} in {r:?}");
    assert_eq!(stage(&m, PREDICTOR).status, WeightsCacheStatus::Hit);
    assert_eq!(&fingerprint(&m), want);
    drop(m);
    let m = load(&s.model, o, Some(&s.cache));
    assert_eq!(statuses(&m), vec![WeightsCacheStatus::Hit; 2]);
}

#[test]
fn a_truncated_cache_file_is_rebuilt() {
    damaged(
        |p| {
            let len = std::fs::metadata(p).unwrap().len();
            let f = std::fs::File::options().write(true).open(p).unwrap();
            f.set_len(len / 2).unwrap();
        },
        "truncated",
    );
    damaged(
        |p| {
            let f = std::fs::File::options().write(true).open(p).unwrap();
            f.set_len(10).unwrap();
        },
        "truncated",
    );
    damaged(|p| std::fs::write(p, b"").unwrap(), "truncated");
}

#[test]
fn a_garbage_cache_file_is_rebuilt() {
    damaged(
        |p| {
            let len = std::fs::metadata(p).unwrap().len() as usize;
            let junk: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            std::fs::write(p, junk).unwrap();
        },
        "bad magic",
    );
}

#[test]
fn corrupt_bytes_in_a_cache_file_are_detected() {
    // One flipped bit in the data region (the first tensor's nibbles).
    damaged(
        |p| {
            let mut b = std::fs::read(p).unwrap();
            b[64 + 100] ^= 0x10;
            std::fs::write(p, b).unwrap();
        },
        "data checksum mismatch",
    );
    // One changed byte in the index (last bytes of the file).
    damaged(
        |p| {
            let mut b = std::fs::read(p).unwrap();
            let n = b.len();
            b[n - 20] ^= 0x01;
            std::fs::write(p, b).unwrap();
        },
        "header checksum mismatch",
    );
    // Another format version.
    damaged(
        |p| {
            let mut b = std::fs::read(p).unwrap();
            b[8] = 99;
            std::fs::write(p, b).unwrap();
        },
        "format version 99",
    );
}

#[test]
fn an_unwritable_cache_dir_loads_without_the_cache() {
    let s = setup("tiny-b");
    let o = LoadOptions::uniform(Precision::Int8);
    let want = fingerprint(&load(&s.model, o, None));
    // A regular file where the directory should be: creating the directory
    // fails even as root (permission bits would not stop root).
    std::fs::write(&s.cache, b"not a directory").unwrap();
    let blocked = s.cache.join("sub");
    for _ in 0..2 {
        let m = load(&s.model, o, Some(&blocked));
        assert_eq!(m.weights_cache.len(), 2);
        for e in &m.weights_cache {
            match &e.status {
                WeightsCacheStatus::Failed(r) => assert!(r.contains("cannot write"), "{r}"),
                other => panic!("expected Failed, got {other:?}"),
            }
        }
        assert_eq!(fingerprint(&m), want);
    }
}

/// `tts-rt speak --weights-cache DIR` (and `TTS_RT_WEIGHTS_CACHE`) writes
/// the cache and produces the same audio as a load without it.
#[test]
fn the_cli_flag_and_env_var_use_the_cache() {
    let s = setup("tiny-a");
    let out_dir = tempfile::tempdir().unwrap();
    let speak = |out: &str, cache: Option<(&str, &Path)>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
        c.args(["speak", "Cache me if you can.", "--speaker"])
            .arg(load(&s.model, LoadOptions::default(), None).speakers()[0].clone())
            .args(["--precision", "int8", "--max-frames", "4", "--model"])
            .arg(&s.model)
            .arg("--out")
            .arg(out_dir.path().join(out))
            .env_remove("TTS_RT_WEIGHTS_CACHE");
        match cache {
            Some(("flag", d)) => {
                c.arg("--weights-cache").arg(d);
            }
            Some((_, d)) => {
                c.env("TTS_RT_WEIGHTS_CACHE", d);
            }
            None => {}
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read(out_dir.path().join(out)).unwrap()
    };
    let plain = speak("plain.wav", None);
    assert_eq!(speak("flag.wav", Some(("flag", &s.cache))), plain);
    assert_eq!(std::fs::read_dir(&s.cache).unwrap().count(), 2);
    let env_dir = s.cache.with_file_name("cache-env");
    assert_eq!(speak("env.wav", Some(("env", &env_dir))), plain);
    assert_eq!(std::fs::read_dir(&env_dir).unwrap().count(), 2);
    // Warm (mapped) run.
    assert_eq!(speak("warm.wav", Some(("flag", &s.cache))), plain);
}

/// Loads racing on an empty cache each write their own temporary file and
/// rename it into place: both get the right weights and one valid file per
/// stage is left, with no temporary files.
#[test]
fn concurrent_loads_share_one_cache() {
    let s = setup("tiny-b");
    let o = LoadOptions::uniform(Precision::Int8);
    let want = fingerprint(&load(&s.model, o, None));
    let got: Vec<(Vec<WeightsCacheStatus>, Fingerprint)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..3)
            .map(|_| {
                sc.spawn(|| {
                    let m = load(&s.model, o, Some(&s.cache));
                    (statuses(&m), fingerprint(&m))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (st, fp) in got {
        assert!(
            st.iter()
                .all(|x| matches!(x, WeightsCacheStatus::Created | WeightsCacheStatus::Hit)),
            "{st:?}"
        );
        assert_eq!(fp, want);
    }
    let mut files: Vec<String> = std::fs::read_dir(&s.cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.iter().all(|f| f.ends_with(".wcache")), "{files:?}");
    let m = load(&s.model, o, Some(&s.cache));
    assert_eq!(statuses(&m), vec![WeightsCacheStatus::Hit; 2]);
}

/// A checkpoint file replaced by one of the same size, header and mtime
/// (`cp -p`, `rsync -t` of same-shaped weights) is still seen as changed.
#[cfg(unix)]
#[test]
fn a_replaced_checkpoint_with_its_mtime_kept_is_stale() {
    let s = setup("tiny-a");
    let o = LoadOptions::uniform(Precision::Int8);
    load(&s.model, o, Some(&s.cache));
    let st = s.model.join("model.safetensors");
    let mtime = std::fs::metadata(&st).unwrap().modified().unwrap();
    let tmp = s.model.join("model.safetensors.new");
    std::fs::copy(&st, &tmp).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&tmp)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    std::fs::rename(&tmp, &st).unwrap();
    assert_eq!(std::fs::metadata(&st).unwrap().modified().unwrap(), mtime);
    let m = load(&s.model, o, Some(&s.cache));
    let r = rebuilt_reason(&stage(&m, TALKER).status);
    assert!(r.contains("replaced or rewritten"), "{r}");
}
