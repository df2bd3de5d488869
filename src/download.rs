//! Fetching a checkpoint from the Hugging Face hub into the hub's own cache
//! layout, so that tts-rt and `huggingface_hub` (`hf download`, Python) share
//! one copy and either can use what the other fetched.
//!
//! Wire protocol (the public hub HTTP API, as `huggingface_hub` speaks it):
//!
//! - `GET {endpoint}/api/models/{repo}/revision/main?blobs=true` →
//!   `{"sha": commit, "siblings": [{"rfilename", "blobId", "size",
//!   "lfs": {"sha256", "size"}}]}`
//! - `GET {endpoint}/{repo}/resolve/{commit}/{file}`, redirects followed (the
//!   hub sends large files to a CDN), `Range: bytes=N-` to resume.
//!
//! Cache layout written (what `huggingface_hub` writes):
//!
//! ```text
//! models--{org}--{name}/blobs/{lfs sha256, else git blob id}
//!                      /snapshots/{commit}/{file} -> ../../blobs/{id}
//!                      /refs/main                    (the commit)
//! ```
//!
//! Each blob is written to `{id}.incomplete`, synced, then renamed, so a
//! blob that exists is whole; an interrupted download leaves the
//! `.incomplete` file, which the next run resumes with a Range request.
//! Two processes downloading at once are not coordinated (`huggingface_hub`
//! takes lock files); the size checks reject a blob they mangle, and a
//! rerun fetches it again.

use std::fs::{self, File, OpenOptions};
use std::io::{IsTerminal, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Short, so a machine without network fails within seconds with the
/// instructions instead of hanging.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Per socket read, not per request: a multi-GB body takes minutes, but a
/// server that sends nothing for this long has stalled.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// `$HF_HUB_OFFLINE` set to a true value, as `huggingface_hub` reads it.
pub fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .map(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "on" | "yes" | "true"
            )
        })
        .unwrap_or(false)
}

/// Where and as whom to download: `$HF_ENDPOINT` and `$HF_TOKEN`.
pub struct Hub {
    endpoint: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Hub {
    pub fn from_env() -> Hub {
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.into());
        let token = std::env::var("HF_TOKEN")
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(CONNECT_TIMEOUT)
            .timeout_read(READ_TIMEOUT)
            .timeout_write(READ_TIMEOUT)
            // The hub answers a renamed repo with a same-host redirect that
            // still needs the token; the CDN it sends files to must not get it.
            .redirect_auth_headers(ureq::RedirectAuthHeaders::SameHost)
            .user_agent(concat!("tts-rt/", env!("CARGO_PKG_VERSION")))
            .build();
        Hub {
            endpoint: endpoint.trim().trim_end_matches('/').to_string(),
            token,
            agent,
        }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn get(&self, url: &str) -> ureq::Request {
        let req = self.agent.get(url);
        match &self.token {
            Some(t) => req.set("Authorization", &format!("Bearer {t}")),
            None => req,
        }
    }
}

#[derive(Deserialize)]
struct RepoInfo {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
    #[serde(rename = "blobId")]
    blob_id: Option<String>,
    size: Option<u64>,
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    sha256: String,
    size: u64,
}

/// The files a checkpoint needs (README, .gitattributes, images are skipped).
fn wanted(name: &str) -> bool {
    const TOP: &[&str] = &[
        "config.json",
        "generation_config.json",
        "vocab.json",
        "merges.txt",
        "tokenizer_config.json",
        "preprocessor_config.json",
        "model.safetensors.index.json",
    ];
    TOP.contains(&name)
        || (name.starts_with("model") && name.ends_with(".safetensors") && !name.contains('/'))
        || name.starts_with("speech_tokenizer/")
}

/// A repo-relative path we are willing to create under the snapshot: plain
/// components only, so a hostile endpoint cannot write outside the cache.
fn safe_relative(name: &str) -> bool {
    !name.is_empty()
        && !name.contains('\\')
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// Commits and blob ids become directory and file names: hex only.
fn is_hex_id(s: &str) -> bool {
    (7..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn http_error(e: ureq::Error, what: &str) -> anyhow::Error {
    match e {
        ureq::Error::Status(code, resp) => {
            let hint = match code {
                401 | 403 => "; the repo may need a token: set HF_TOKEN (https://huggingface.co/settings/tokens)",
                404 => "; the repo or file was not found at this endpoint (check HF_ENDPOINT)",
                429 => "; rate-limited: wait a minute, or set HF_TOKEN",
                500..=599 => "; the hub had a server error: retry later",
                _ => "",
            };
            anyhow::anyhow!("{what}: HTTP {code} {}{hint}", resp.status_text())
        }
        ureq::Error::Transport(t) => {
            // One line: kind, detail, OS cause, and the URL if a redirect
            // led elsewhere (ureq's own Display repeats the URL we print).
            let mut msg = format!("{what}: {}", t.kind());
            if let Some(m) = t.message() {
                msg += &format!(": {m}");
            }
            if let Some(src) = std::error::Error::source(&t) {
                msg += &format!(": {src}");
            }
            if let Some(u) = t.url().filter(|u| !what.ends_with(u.as_str())) {
                msg += &format!(" (at {u})");
            }
            anyhow::anyhow!(msg)
        }
    }
}

/// Downloads `repo` at its `main` revision into the hub cache at `cache`
/// and returns the snapshot directory.
pub fn snapshot(hub: &Hub, repo: &str, cache: &Path) -> Result<PathBuf> {
    let api = format!(
        "{}/api/models/{repo}/revision/main?blobs=true",
        hub.endpoint
    );
    let resp = hub
        .get(&api)
        .call()
        .map_err(|e| http_error(e, &format!("GET {api}")))?;
    let info: RepoInfo = serde_json::from_reader(resp.into_reader())
        .with_context(|| format!("GET {api}: not the hub's JSON"))?;
    if !is_hex_id(&info.sha) {
        bail!("GET {api}: commit {:?} is not a hex id", info.sha);
    }
    let mut files: Vec<&Sibling> = info
        .siblings
        .iter()
        .filter(|s| wanted(&s.rfilename))
        .collect();
    if let Some(bad) = files.iter().find(|s| !safe_relative(&s.rfilename)) {
        bail!("GET {api}: refusing file name {:?}", bad.rfilename);
    }
    if !files.iter().any(|s| s.rfilename == "config.json") {
        bail!(
            "{repo} at {} has no config.json: not a checkpoint in the Hugging Face layout",
            info.sha
        );
    }
    // config.json last: a snapshot holding it is taken as complete (see
    // model_path::cached_snapshot), so it must not appear before the weights.
    files.sort_by_key(|s| s.rfilename == "config.json");

    let base = cache.join(format!("models--{}", repo.replace('/', "--")));
    let blobs = base.join("blobs");
    let snap = base.join("snapshots").join(&info.sha);
    fs::create_dir_all(&blobs).with_context(|| format!("creating {}", blobs.display()))?;
    fs::create_dir_all(&snap).with_context(|| format!("creating {}", snap.display()))?;

    let total: u64 = files.iter().filter_map(|s| size_of(s)).sum();
    eprintln!(
        "tts-rt: downloading {repo} ({} files, {}) from {} into {}",
        files.len(),
        human(total),
        hub.endpoint,
        base.display()
    );
    for s in &files {
        fetch_file(hub, repo, &info.sha, s, &blobs, &snap)?;
    }
    let refs = base.join("refs");
    fs::create_dir_all(&refs).with_context(|| format!("creating {}", refs.display()))?;
    write_atomic(&refs.join("main"), info.sha.as_bytes())?;
    eprintln!("tts-rt: {repo} is in {}", snap.display());
    Ok(snap)
}

fn size_of(s: &Sibling) -> Option<u64> {
    s.lfs.as_ref().map(|l| l.size).or(s.size)
}

/// Blob name as `huggingface_hub` chooses it: the LFS sha256, else the git
/// blob id. None (a minimal mirror) means a plain file in the snapshot.
fn blob_name(s: &Sibling) -> Option<&str> {
    s.lfs
        .as_ref()
        .map(|l| l.sha256.as_str())
        .or(s.blob_id.as_deref())
        .filter(|id| is_hex_id(id))
}

fn fetch_file(
    hub: &Hub,
    repo: &str,
    commit: &str,
    s: &Sibling,
    blobs: &Path,
    snap: &Path,
) -> Result<()> {
    let name = &s.rfilename;
    let expected = size_of(s);
    let dest = snap.join(name);
    let whole = |p: &Path| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && expected.is_none_or(|n| m.len() == n))
    };
    if whole(&dest) {
        return Ok(());
    }
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let url = format!("{}/{repo}/resolve/{commit}/{name}", hub.endpoint);
    match blob_name(s) {
        Some(id) => {
            let blob = blobs.join(id);
            if !whole(&blob) {
                download(hub, &url, &blob, expected, name)?;
            }
            link(
                &blob,
                &dest,
                &format!(
                    "{}blobs/{id}",
                    "../".repeat(1 + Path::new(name).components().count())
                ),
            )
        }
        None => download(hub, &url, &dest, expected, name),
    }
}

/// Puts `blob` at `dest` as `huggingface_hub` does: a relative symlink
/// (`rel`), else (no symlink support or permission) a hard link, else a copy.
fn link(blob: &Path, dest: &Path, rel: &str) -> Result<()> {
    // A stale or dangling entry from an earlier, interrupted run.
    if fs::symlink_metadata(dest).is_ok() {
        fs::remove_file(dest).with_context(|| format!("removing stale {}", dest.display()))?;
    }
    #[cfg(unix)]
    let linked = std::os::unix::fs::symlink(rel, dest).is_ok();
    #[cfg(windows)]
    let linked = std::os::windows::fs::symlink_file(rel, dest).is_ok();
    #[cfg(not(any(unix, windows)))]
    let linked = {
        let _ = rel;
        false
    };
    if linked || fs::hard_link(blob, dest).is_ok() {
        return Ok(());
    }
    fs::copy(blob, dest)
        .with_context(|| format!("copying {} to {}", blob.display(), dest.display()))?;
    Ok(())
}

/// GETs `url` into `dest` via `dest.incomplete`, resuming a partial file
/// when the server honours Range, and checking the byte count.
fn download(hub: &Hub, url: &str, dest: &Path, expected: Option<u64>, label: &str) -> Result<()> {
    let part = PathBuf::from(format!("{}.incomplete", dest.display()));
    let mut have = fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
    if expected.is_some_and(|n| have > n) {
        have = 0; // longer than the file: not ours to resume
    }
    let resp = if expected == Some(have) && have > 0 {
        None // complete but not renamed: the previous run stopped in between
    } else {
        Some(request(hub, url, &part, &mut have, label)?)
    };
    if let Some(resp) = resp {
        let len: Option<u64> = resp
            .header("Content-Length")
            .and_then(|v| v.trim().parse().ok());
        if let (Some(n), Some(len)) = (expected, len) {
            if have + len != n {
                bail!(
                    "GET {url}: server sends {} bytes, the hub API said {n}; the repo may have changed, rerun",
                    have + len
                );
            }
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(have > 0)
            .write(true)
            .truncate(have == 0)
            .open(&part)
            .with_context(|| format!("opening {}", part.display()))?;
        let mut progress = Progress::new(label, have, len.map(|l| l + have).or(expected));
        let mut body = resp.into_reader();
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        loop {
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    progress.finish();
                    return Err(anyhow::Error::new(e).context(format!(
                        "GET {url}: connection lost after {} of {}; rerun to resume",
                        human(have + got),
                        expected
                            .or(len.map(|l| l + have))
                            .map(human)
                            .unwrap_or_else(|| "?".into())
                    )));
                }
            };
            file.write_all(&buf[..n])
                .with_context(|| format!("writing {}", part.display()))?;
            got += n as u64;
            progress.update(have + got);
        }
        progress.finish();
        if let Some(len) = len {
            if got != len {
                bail!("GET {url}: connection closed after {got} of {len} bytes; rerun to resume");
            }
        }
        file.sync_all()
            .with_context(|| format!("syncing {}", part.display()))?;
        have += got;
    }
    if let Some(n) = expected {
        if have != n {
            fs::remove_file(&part).ok();
            bail!("GET {url}: got {have} bytes, the hub API said {n}; rerun to download it again");
        }
    }
    fs::rename(&part, dest)
        .with_context(|| format!("renaming {} to {}", part.display(), dest.display()))
}

/// Sends the GET, with `Range` when `have` bytes are already on disk; sets
/// `have` to 0 when the server answers with the whole file instead.
fn request(
    hub: &Hub,
    url: &str,
    part: &Path,
    have: &mut u64,
    label: &str,
) -> Result<ureq::Response> {
    // identity: Content-Length must count the file's bytes, not gzip's.
    let req = hub.get(url).set("Accept-Encoding", "identity");
    if *have == 0 {
        return req.call().map_err(|e| http_error(e, &format!("GET {url}")));
    }
    match req.clone().set("Range", &format!("bytes={have}-")).call() {
        Ok(resp) if resp.status() == 206 => {
            // "bytes START-END/TOTAL": only append if it starts where we stopped.
            let start = resp
                .header("Content-Range")
                .and_then(|v| v.trim().strip_prefix("bytes "))
                .and_then(|v| v.split('-').next())
                .and_then(|v| v.trim().parse::<u64>().ok());
            if start == Some(*have) {
                if std::io::stderr().is_terminal() {
                    eprintln!("resuming {label} at {}", human(*have));
                }
                return Ok(resp);
            }
            *have = 0;
            req.call().map_err(|e| http_error(e, &format!("GET {url}")))
        }
        Ok(resp) => {
            *have = 0; // 200: the server ignored Range and sends it all
            Ok(resp)
        }
        Err(ureq::Error::Status(416, _)) => {
            // Range not satisfiable: the partial file does not fit this blob.
            fs::remove_file(part).ok();
            *have = 0;
            req.call().map_err(|e| http_error(e, &format!("GET {url}")))
        }
        Err(e) => Err(http_error(e, &format!("GET {url}"))),
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    let mut f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.2} GB", bytes as f64 / (1u64 << 30) as f64)
    } else if bytes >= 1 << 20 {
        format!("{:.1} MB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.1} kB", bytes as f64 / 1024.0)
    }
}

/// A one-line progress display, drawn only when stderr is a terminal (logs
/// and pipes get the start and end lines of `snapshot` only).
struct Progress<'a> {
    on: bool,
    label: &'a str,
    start: Instant,
    start_bytes: u64,
    total: Option<u64>,
    last: Option<Instant>,
    drawn: bool,
}

impl<'a> Progress<'a> {
    fn new(label: &'a str, start_bytes: u64, total: Option<u64>) -> Self {
        let on = std::io::stderr().is_terminal();
        Progress {
            on,
            label,
            start: Instant::now(),
            start_bytes,
            total,
            last: None,
            drawn: false,
        }
    }

    fn update(&mut self, done: u64) {
        // 4 redraws a second: enough to look alive, cheap next to 1 MiB reads.
        if !self.on
            || self
                .last
                .is_some_and(|t| t.elapsed() < Duration::from_millis(250))
        {
            return;
        }
        self.last = Some(Instant::now());
        let secs = self.start.elapsed().as_secs_f64().max(1e-3);
        let rate = (done - self.start_bytes) as f64 / secs / (1u64 << 20) as f64;
        let of = match self.total {
            Some(t) if t > 0 => format!(" / {} ({:.0}%)", human(t), done as f64 * 100.0 / t as f64),
            _ => String::new(),
        };
        eprint!(
            "\r\x1b[K{}: {}{of}  {rate:.1} MB/s",
            self.label,
            human(done)
        );
        self.drawn = true;
    }

    fn finish(&mut self) {
        if self.drawn {
            eprintln!();
            self.drawn = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_checkpoint_files_are_wanted() {
        for f in [
            "config.json",
            "model.safetensors",
            "model-00001-of-00002.safetensors",
            "speech_tokenizer/x.json",
        ] {
            assert!(wanted(f), "{f}");
        }
        for f in [
            "README.md",
            ".gitattributes",
            "assets/demo.png",
            "sub/model.safetensors",
        ] {
            assert!(!wanted(f), "{f}");
        }
    }

    #[test]
    fn hostile_names_are_refused() {
        assert!(safe_relative("speech_tokenizer/config.json"));
        for f in [
            "",
            "/etc/passwd",
            "speech_tokenizer/../../x",
            "./config.json",
            "a\\b",
        ] {
            assert!(!safe_relative(f), "{f:?}");
        }
        assert!(is_hex_id("0123456789abcdef0123456789abcdef01234567"));
        assert!(!is_hex_id("../main") && !is_hex_id("abc"));
    }
}
