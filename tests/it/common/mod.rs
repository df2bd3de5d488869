//! Shared by the root integration tests: the committed fixtures' location,
//! the golden tensors written by tools/make_fixtures.py, a golden case
//! as a greedy [`Request`], and a bare HTTP GET for the serve tests.

use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use serde_json::Value;
use tts_models::{GenOptions, Qwen3Tts, Request};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Where the Base and VoiceDesign fixtures are: the committed ones, or
/// another pair made by `tools/make_fixtures.sh --variant other --out DIR`
/// (`TTS_RT_CLONE_FIXTURES=DIR`), which these tests then check the same way.
pub fn clone_root() -> PathBuf {
    match std::env::var_os("TTS_RT_CLONE_FIXTURES") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => root(),
    }
}

pub struct Golden {
    pub cases: Value,
    bytes: Vec<u8>,
}

impl Golden {
    pub fn load(fixture: &str) -> Golden {
        let base = if fixture == "tiny-base" || fixture == "tiny-vd" {
            clone_root()
        } else {
            root()
        };
        let dir = base.join("goldens").join(fixture);
        let cases = serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap())
            .unwrap();
        Golden {
            cases,
            bytes: std::fs::read(dir.join("goldens.safetensors")).unwrap(),
        }
    }
    pub fn tensors(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).unwrap()
    }
    pub fn has(&self, name: &str) -> bool {
        self.tensors().names().iter().any(|n| *n == name)
    }
    pub fn f32(&self, name: &str) -> (Vec<f32>, Vec<usize>) {
        let t = self.tensors();
        let v = t
            .tensor(name)
            .unwrap_or_else(|e| panic!("golden tensor {name}: {e}"));
        assert_eq!(v.dtype(), safetensors::Dtype::F32, "{name}");
        (
            v.data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            v.shape().to_vec(),
        )
    }
    pub fn codes(&self, name: &str) -> (Vec<u32>, Vec<usize>) {
        let t = self.tensors();
        let v = t
            .tensor(name)
            .unwrap_or_else(|e| panic!("golden tensor {name}: {e}"));
        let data: Vec<u32> = match v.dtype() {
            safetensors::Dtype::I64 => v
                .data()
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
                .collect(),
            safetensors::Dtype::I32 => v
                .data()
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as u32)
                .collect(),
            d => panic!("{name}: unexpected dtype {d:?}"),
        };
        (data, v.shape().to_vec())
    }
}

/// A golden case as the greedy request the official script ran.
pub fn request(model: &Qwen3Tts, case: &Value) -> Request {
    let mut options: GenOptions = model.default_options().greedy();
    options.max_frames = case["max_new_tokens"].as_u64().unwrap() as usize - 1;
    Request {
        text: case["text"].as_str().unwrap().to_string(),
        speaker: case["speaker"].as_str().map(str::to_string),
        language: case["language"].as_str().unwrap().to_string(),
        instruct: case["instruct"].as_str().map(str::to_string),
        voice_clone: None,
        text_streaming: !case["non_streaming_mode"].as_bool().unwrap(),
        options,
    }
}

/// `GET path` on a loopback server with a raw socket (no HTTP client
/// dependency): the status code (0 if unparsable) and the body.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut r = String::new();
    s.read_to_string(&mut r)?;
    let status = r
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = r.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Ok((status, body))
}

/// `||a - b|| / ||b||` over equal-length slices (the golden tolerance).
pub fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den.max(1e-30)).sqrt()
}

/// A JSON array of token ids (None for null).
pub fn ids(v: &Value) -> Option<Vec<u32>> {
    v.as_array()
        .map(|a| a.iter().map(|x| x.as_u64().unwrap() as u32).collect())
}

/// The address a `tts-rt serve` child announces on its first stdout line
/// (`listening on http://ADDR ...`); it must be loopback.
pub fn listening_addr(child: &mut std::process::Child) -> std::net::SocketAddr {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout piped"))
        .read_line(&mut line)
        .expect("read the listening line");
    let addr: std::net::SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    assert!(addr.ip().is_loopback(), "loopback: {addr}");
    addr
}
