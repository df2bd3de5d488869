//! Downloading the default checkpoint into the Hugging Face cache when no
//! `--model` is given, against an in-process fake hub on 127.0.0.1 (no other
//! host is ever contacted) that serves `tests/fixtures/tiny-a` under any repo
//! name through the two endpoints the hub API offers.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REPO_DIR: &str = "models--Qwen--Qwen3-TTS-12Hz-0.6B-CustomVoice";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// The one file served with Range support, and the one truncated mid-body.
const RANGED: &str = "model.safetensors";
/// The one file answered with a redirect (as the hub sends LFS files to a CDN).
const REDIRECTED: &str = "vocab.json";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-a")
}

/// Repo-relative paths of the fixture's files, `/`-separated.
fn fixture_files() -> Vec<String> {
    fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let name = format!("{prefix}{}", e.file_name().to_str().unwrap());
            if e.file_type().unwrap().is_dir() {
                walk(&e.path(), &format!("{name}/"), out);
            } else {
                out.push(name);
            }
        }
    }
    let mut out = Vec::new();
    walk(&fixture(), "", &mut out);
    out.sort();
    out
}

/// A stable fake id for a file: the downloader names blobs by the id the
/// API gives, it does not hash contents.
fn fake_id(name: &str, hex_len: usize) -> String {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    let x = h.finish();
    format!("{x:016x}").repeat(4)[..hex_len].to_string()
}

fn blob_id(name: &str) -> String {
    if name.ends_with(".safetensors") {
        fake_id(name, 64) // LFS: sha256
    } else {
        fake_id(name, 40) // git blob id
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Normal,
    /// Every `/api/...` request gets this status.
    ApiStatus(u16),
    /// Every `/resolve/` request gets this status.
    FileStatus(u16),
    /// Accept, read the request, close without answering.
    Drop,
    /// Send RANGED's headers for the whole file but only half of its body.
    TruncateRanged,
}

#[derive(Clone, Debug)]
struct Req {
    path: String,
    range: Option<String>,
    auth: Option<String>,
}

struct FakeHub {
    port: u16,
    mode: Arc<Mutex<Mode>>,
    log: Arc<Mutex<Vec<Req>>>,
}

impl FakeHub {
    fn start() -> FakeHub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(Mode::Normal));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (m, l) = (mode.clone(), log.clone());
        // One connection at a time: the client is sequential. The thread
        // lives until the test process exits.
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mode = *m.lock().unwrap();
                let _ = serve(stream, port, mode, &l);
            }
        });
        FakeHub { port, mode, log }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn take_log(&self) -> Vec<Req> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

fn serve(stream: TcpStream, port: u16, mode: Mode, log: &Mutex<Vec<Req>>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let (mut range, mut auth) = (None, None);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "range" => range = Some(v.trim().to_string()),
                "authorization" => auth = Some(v.trim().to_string()),
                _ => {}
            }
        }
    }
    log.lock().unwrap().push(Req {
        path: path.clone(),
        range: range.clone(),
        auth,
    });
    let mut out = stream;
    if mode == Mode::Drop {
        return Ok(());
    }
    if let Some(rest) = path.strip_prefix("/api/models/") {
        if let Mode::ApiStatus(code) = mode {
            return respond(&mut out, code, &[], b"{\"error\":\"nope\"}");
        }
        if !rest.split('?').next().unwrap().ends_with("/revision/main") {
            return respond(&mut out, 404, &[], b"");
        }
        return respond(
            &mut out,
            200,
            &[("Content-Type", "application/json".into())],
            api_json().as_bytes(),
        );
    }
    // /{org}/{name}/resolve/{commit}/{file} or /cdn/{file}
    let file = if let Some(f) = path.strip_prefix("/cdn/") {
        f.to_string()
    } else if let Some((_, tail)) = path.split_once("/resolve/") {
        if let Mode::FileStatus(code) = mode {
            return respond(&mut out, code, &[], b"");
        }
        let Some((commit, f)) = tail.split_once('/') else {
            return respond(&mut out, 404, &[], b"");
        };
        if commit != COMMIT {
            return respond(&mut out, 404, &[], b"");
        }
        if f == REDIRECTED {
            let to = format!("http://127.0.0.1:{port}/cdn/{f}");
            return respond(&mut out, 302, &[("Location", to)], b"");
        }
        f.to_string()
    } else {
        return respond(&mut out, 404, &[], b"");
    };
    let body = match file.as_str() {
        "README.md" | ".gitattributes" => b"not needed".to_vec(),
        f => match std::fs::read(fixture().join(f)) {
            Ok(b) => b,
            Err(_) => return respond(&mut out, 404, &[], b""),
        },
    };
    if file == RANGED && mode == Mode::TruncateRanged {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        out.write_all(head.as_bytes())?;
        out.write_all(&body[..body.len() / 2])?;
        return out.flush(); // and close: the client sees EOF mid-body
    }
    let start = range.filter(|_| file == RANGED).and_then(|r| {
        r.strip_prefix("bytes=")?
            .strip_suffix('-')?
            .parse::<usize>()
            .ok()
    });
    match start {
        Some(s) if s < body.len() => {
            let cr = format!("bytes {s}-{}/{}", body.len() - 1, body.len());
            respond(&mut out, 206, &[("Content-Range", cr)], &body[s..])
        }
        _ => respond(&mut out, 200, &[], &body),
    }
}

fn respond(
    out: &mut TcpStream,
    code: u16,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let reason = match code {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        404 => "Not Found",
        500 => "Internal Server Error",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(body)?;
    out.flush()
}

/// The `revision/main?blobs=true` answer: the fixture's files plus two the
/// client must skip.
fn api_json() -> String {
    let mut siblings = Vec::new();
    for name in fixture_files()
        .into_iter()
        .chain(["README.md".into(), ".gitattributes".into()])
    {
        let size = std::fs::metadata(fixture().join(&name))
            .map(|m| m.len())
            .unwrap_or(10);
        let lfs = if name.ends_with(".safetensors") {
            format!(
                r#","lfs":{{"sha256":"{}","size":{size},"pointerSize":134}}"#,
                blob_id(&name)
            )
        } else {
            String::new()
        };
        let git_id = fake_id(&format!("git:{name}"), 40);
        let id = if lfs.is_empty() {
            blob_id(&name)
        } else {
            git_id
        };
        siblings.push(format!(
            r#"{{"rfilename":"{name}","blobId":"{id}","size":{size}{lfs}}}"#
        ));
    }
    format!(
        r#"{{"id":"any/repo","sha":"{COMMIT}","siblings":[{}]}}"#,
        siblings.join(",")
    )
}

/// tts-rt with a clean environment: the cache in `home`, the hub at
/// `endpoint`, no proxy, no model.
fn tts(home: &Path, endpoint: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.env_clear()
        .env("HOME", home)
        .env("HF_HUB_CACHE", home.join("hub"))
        .env("HF_ENDPOINT", endpoint)
        .env("RAYON_NUM_THREADS", "2")
        .stdin(Stdio::null());
    c
}

fn run(c: &mut Command) -> Output {
    c.output().expect("run tts-rt")
}

fn ok(c: &mut Command) -> Output {
    let o = run(c);
    assert!(
        o.status.success(),
        "tts-rt failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn fails_with(c: &mut Command, needles: &[&str]) -> String {
    let o = run(c);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !o.status.success(),
        "expected failure, got success; stderr: {err}"
    );
    assert!(!err.contains("panicked"), "panicked: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr should mention {n:?}: {err}");
    }
    err
}

fn voices_of_fixture() -> Vec<u8> {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tts-rt"));
    c.arg("voices").arg("--model").arg(fixture());
    ok(&mut c).stdout
}

fn repo_dir(home: &Path) -> PathBuf {
    home.join("hub").join(REPO_DIR)
}

/// Leftover `*.incomplete` files under the repo's cache entry.
fn incomplete(home: &Path) -> Vec<PathBuf> {
    let blobs = repo_dir(home).join("blobs");
    let Ok(rd) = std::fs::read_dir(blobs) else {
        return vec![];
    };
    rd.flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".incomplete"))
        .collect()
}

#[test]
fn downloads_into_hub_layout_then_runs_from_cache_without_network() {
    let hub = FakeHub::start();
    let home = tempfile::tempdir().unwrap();
    let expected = voices_of_fixture();

    let o = ok(tts(home.path(), &hub.endpoint())
        .env("HF_TOKEN", "hf_test")
        .arg("voices"));
    assert_eq!(o.stdout, expected, "voices from the downloaded snapshot");
    let log = hub.take_log();
    let paths: Vec<&str> = log.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths[0],
        "/api/models/Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice/revision/main?blobs=true"
    );
    assert_eq!(
        log[0].auth.as_deref(),
        Some("Bearer hf_test"),
        "HF_TOKEN is sent as a bearer token"
    );
    assert!(
        paths.contains(&format!("/cdn/{REDIRECTED}").as_str()),
        "the redirect was followed: {paths:?}"
    );
    assert!(
        !paths
            .iter()
            .any(|p| p.ends_with("README.md") || p.ends_with(".gitattributes")),
        "files a checkpoint does not need are skipped: {paths:?}"
    );
    let resolves = paths.iter().filter(|p| p.contains("/resolve/")).count();
    assert_eq!(
        resolves,
        fixture_files().len(),
        "one GET per needed file: {paths:?}"
    );
    assert!(paths
        .last()
        .unwrap()
        .ends_with("/resolve/0123456789abcdef0123456789abcdef01234567/config.json"));

    // The layout huggingface_hub writes and reads.
    let base = repo_dir(home.path());
    assert_eq!(
        std::fs::read_to_string(base.join("refs/main")).unwrap(),
        COMMIT
    );
    let snap = base.join("snapshots").join(COMMIT);
    for name in fixture_files() {
        let p = snap.join(&name);
        assert_eq!(
            std::fs::read(&p).unwrap(),
            std::fs::read(fixture().join(&name)).unwrap(),
            "{name}"
        );
        let blob = base.join("blobs").join(blob_id(&name));
        assert!(blob.is_file(), "blob of {name} at {}", blob.display());
        #[cfg(unix)]
        {
            let up = "../".repeat(1 + name.matches('/').count() + 1);
            let target =
                std::fs::read_link(&p).unwrap_or_else(|e| panic!("{name} is not a symlink: {e}"));
            assert_eq!(
                target,
                PathBuf::from(format!("{up}blobs/{}", blob_id(&name))),
                "{name}"
            );
        }
    }
    assert!(!snap.join("README.md").exists());
    assert!(incomplete(home.path()).is_empty());

    // Second run: from the cache, the hub untouched; likewise offline.
    let o = ok(tts(home.path(), &hub.endpoint()).arg("voices"));
    assert_eq!(o.stdout, expected);
    let o = ok(tts(home.path(), &hub.endpoint())
        .env("HF_HUB_OFFLINE", "1")
        .arg("voices"));
    assert_eq!(o.stdout, expected);
    assert!(hub.take_log().is_empty(), "a cached model needs no network");
}

#[test]
fn interrupted_download_fails_with_instructions_and_resumes_with_range() {
    let hub = FakeHub::start();
    let home = tempfile::tempdir().unwrap();
    let full = std::fs::metadata(fixture().join(RANGED)).unwrap().len();

    hub.set(Mode::TruncateRanged);
    fails_with(
        tts(home.path(), &hub.endpoint()).arg("voices"),
        &["hf download", RANGED, "rerun to resume"],
    );
    let part = incomplete(home.path());
    assert_eq!(part.len(), 1, "the partial blob is kept: {part:?}");
    let have = std::fs::metadata(&part[0]).unwrap().len();
    assert!(have > 0 && have < full, "partial: {have} of {full}");
    assert!(
        !repo_dir(home.path()).join("refs/main").exists(),
        "no ref to a half snapshot"
    );
    assert!(
        !repo_dir(home.path())
            .join("snapshots")
            .join(COMMIT)
            .join("config.json")
            .exists(),
        "config.json comes last, so a half snapshot is not taken for a model"
    );

    hub.set(Mode::Normal);
    hub.take_log();
    let o = ok(tts(home.path(), &hub.endpoint()).arg("voices"));
    assert_eq!(o.stdout, voices_of_fixture());
    let log = hub.take_log();
    let ranged: Vec<&Req> = log
        .iter()
        .filter(|r| r.path.ends_with(&format!("/{COMMIT}/{RANGED}")))
        .collect();
    assert_eq!(ranged.len(), 1, "{log:?}");
    assert_eq!(
        ranged[0].range.as_deref(),
        Some(format!("bytes={have}-").as_str()),
        "resumed where it stopped"
    );
    let snap = repo_dir(home.path()).join("snapshots").join(COMMIT);
    assert_eq!(
        std::fs::read(snap.join(RANGED)).unwrap(),
        std::fs::read(fixture().join(RANGED)).unwrap()
    );
    assert!(incomplete(home.path()).is_empty());
}

#[test]
fn hub_errors_fail_with_instructions() {
    let hub = FakeHub::start();
    for (mode, cause) in [
        (Mode::ApiStatus(404), "HTTP 404"),
        (Mode::ApiStatus(500), "HTTP 500"),
        (Mode::FileStatus(500), "HTTP 500"),
        (Mode::FileStatus(404), "HTTP 404"),
        (Mode::Drop, "/api/models/"),
    ] {
        hub.set(mode);
        let home = tempfile::tempdir().unwrap();
        let err = fails_with(
            tts(home.path(), &hub.endpoint()).arg("voices"),
            &[
                "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
                "hf download",
                "--model",
                &hub.endpoint(),
                cause,
            ],
        );
        assert!(
            !repo_dir(home.path()).join("refs/main").exists(),
            "{mode:?}: {err}"
        );
    }
}

#[test]
fn unreachable_endpoint_fails_fast_with_instructions() {
    // A port that was just free: connection refused, no waiting.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let home = tempfile::tempdir().unwrap();
    let t = Instant::now();
    fails_with(
        tts(home.path(), &format!("http://127.0.0.1:{port}")).arg("voices"),
        &["hf download", "downloading it from", "Connection Failed"],
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
}

#[test]
fn offline_never_contacts_the_hub() {
    let hub = FakeHub::start();
    let home = tempfile::tempdir().unwrap();
    fails_with(
        tts(home.path(), &hub.endpoint())
            .env("HF_HUB_OFFLINE", "1")
            .arg("voices"),
        &["HF_HUB_OFFLINE", "hf download", "--model"],
    );
    assert!(hub.take_log().is_empty(), "offline: no request");
    assert!(!repo_dir(home.path()).exists());
}

#[test]
fn model_flag_takes_a_hub_repo_id_and_downloads_that_repo() {
    let hub = FakeHub::start();
    let home = tempfile::tempdir().unwrap();
    let expected = voices_of_fixture();
    let repo = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice";

    let o = ok(tts(home.path(), &hub.endpoint())
        .args(["voices", "--model", repo])
        .current_dir(home.path()));
    assert_eq!(o.stdout, expected, "voices from the downloaded snapshot");
    let log = hub.take_log();
    assert_eq!(
        log[0].path,
        format!("/api/models/{repo}/revision/main?blobs=true")
    );
    assert!(
        log.iter()
            .filter(|r| r.path.contains("/resolve/"))
            .all(|r| r.path.starts_with(&format!("/{repo}/resolve/"))),
        "every file from that repo"
    );
    let snap = home
        .path()
        .join("hub/models--Qwen--Qwen3-TTS-12Hz-1.7B-CustomVoice/snapshots")
        .join(COMMIT);
    assert!(snap.join("config.json").is_file());
    assert!(!repo_dir(home.path()).exists(), "not the default repo");

    // Offline, by TTS_RT_MODEL, from the cache.
    let o = ok(tts(home.path(), &hub.endpoint())
        .env("HF_HUB_OFFLINE", "1")
        .env("TTS_RT_MODEL", repo)
        .arg("voices")
        .current_dir(home.path()));
    assert_eq!(o.stdout, expected);
    assert!(hub.take_log().is_empty(), "a cached repo needs no network");

    // A repo id that is not cached, offline: named, with the command to get it.
    fails_with(
        tts(home.path(), &hub.endpoint())
            .env("HF_HUB_OFFLINE", "1")
            .args(["voices", "--model", "Qwen/Qwen3-TTS-12Hz-0.6B-Base"])
            .current_dir(home.path()),
        &[
            "--model = Qwen/Qwen3-TTS-12Hz-0.6B-Base",
            "HF_HUB_OFFLINE",
            "hf download Qwen/Qwen3-TTS-12Hz-0.6B-Base",
        ],
    );
    // Neither a directory nor a repo id: the path is named.
    fails_with(
        tts(home.path(), &hub.endpoint())
            .args(["voices", "--model", "./no/such/dir"])
            .current_dir(home.path()),
        &["--model = ./no/such/dir", "no such directory"],
    );
    assert!(hub.take_log().is_empty());
}
