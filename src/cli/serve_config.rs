//! `tts-rt serve --config FILE`: everything the serve flags set, in TOML.
//!
//! Each key is a flag's long name with `_` for `-` (`max_sessions`,
//! `header_timeout_s`, ...), plus `voice_map` as a table and
//! `cors_origins` as a list; examples/serve.toml shows every key. A flag
//! given on the command line (or its environment variable) overrides the
//! file; `voice_map` is merged, the flag's entries winning. Unknown keys
//! are refused naming the key and its line, so a misspelt limit never
//! silently falls back to its default. Relative paths (`model`,
//! `weights_cache`, `voices_dir`, `tls_cert`, `tls_key`) are taken from the
//! file's directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use super::logging::LogFormat;

/// The file's keys (all optional).
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServeFile {
    pub model: Option<PathBuf>,
    pub precision: Option<String>,
    pub weights_cache: Option<PathBuf>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub health_port: Option<u16>,
    pub wyoming_port: Option<u16>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub token: Option<String>,
    pub max_sessions: Option<usize>,
    pub max_connections: Option<usize>,
    pub header_timeout_s: Option<f64>,
    pub body_timeout_s: Option<f64>,
    pub max_body_memory_mb: Option<f64>,
    pub text_wait_timeout_s: Option<f64>,
    pub max_requests: Option<usize>,
    pub realtime_load: Option<f64>,
    pub prebuffer_ms: Option<f64>,
    pub calibrate_frames: Option<usize>,
    pub max_frames: Option<usize>,
    pub stage_threads: Option<String>,
    pub lend_core: Option<LendCoreSetting>,
    pub drain_timeout_s: Option<f64>,
    pub idle_timeout_s: Option<f64>,
    pub ping_interval_s: Option<f64>,
    pub pong_timeout_s: Option<f64>,
    pub voices_dir: Option<PathBuf>,
    pub max_voices: Option<usize>,
    pub max_upload_mb: Option<f64>,
    /// OpenAI voice → speaker, e.g. `{ alloy = "vivian", ash = "ryan" }`.
    pub voice_map: Option<BTreeMap<String, String>>,
    pub cors_origins: Option<Vec<String>>,
    pub log_format: Option<LogFormat>,
    /// The default log filter (`RUST_LOG` still wins), e.g. `"info"` or
    /// `"info,tts_transport=debug"`.
    pub log_level: Option<String>,
}

impl ServeFile {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the config file {}", path.display()))?;
        let mut f =
            Self::parse(&text).with_context(|| format!("config file {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        // A model given as a hub repo id (`Qwen/...`) stays one unless the
        // file's directory holds a directory of that name.
        let model_is_repo = f.model.as_ref().is_some_and(|m| {
            crate::model_path::is_repo_id(&m.to_string_lossy()) && !base.join(m).exists()
        });
        let model = f.model.as_mut().filter(|_| !model_is_repo);
        for p in [
            model,
            f.weights_cache.as_mut(),
            f.voices_dir.as_mut(),
            f.tls_cert.as_mut(),
            f.tls_key.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        Ok(f)
    }

    /// Parses TOML text (unknown keys refused, with the key named).
    pub fn parse(text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))
    }
}

/// `--lend-core` (`serve`, `bench`): whether code2wav lends a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LendCore {
    /// Always (`EngineConfig::lend_core`).
    On,
    /// Where this process measures it cheaper (`EngineConfig::lend_measured`).
    Auto,
    /// Never.
    Off,
}

impl LendCore {
    pub(crate) fn name(self) -> &'static str {
        match self {
            LendCore::On => "on",
            LendCore::Auto => "auto",
            LendCore::Off => "off",
        }
    }
}

/// The config file's `lend_core`: `true`, `false`, or `"on"`, `"auto"`,
/// `"off"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum LendCoreSetting {
    Bool(bool),
    Word(LendCore),
}

impl From<LendCoreSetting> for LendCore {
    fn from(s: LendCoreSetting) -> LendCore {
        match s {
            LendCoreSetting::Bool(true) => LendCore::On,
            LendCoreSetting::Bool(false) => LendCore::Off,
            LendCoreSetting::Word(w) => w,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/serve.toml")
    }

    #[test]
    fn the_example_config_loads_with_every_key() {
        let f = ServeFile::load(&example()).expect("examples/serve.toml loads");
        assert_eq!(f.port, Some(8080));
        assert_eq!(f.log_format, Some(LogFormat::Text));
        // Real time by default, as `serve` without the file (issue 31).
        assert_eq!(f.precision.as_deref(), Some("fast"));
        assert_eq!(
            f.voice_map
                .as_ref()
                .and_then(|m| m.get("alloy"))
                .map(String::as_str),
            Some("serena")
        );
        // Relative paths are the file's directory's.
        let dir = f.voices_dir.expect("voices_dir");
        assert!(
            dir.starts_with(example().parent().unwrap()),
            "{}",
            dir.display()
        );
    }

    #[test]
    fn the_prebuffer_is_a_key() {
        let f = ServeFile::parse("prebuffer_ms = 120\n").unwrap();
        assert_eq!(f.prebuffer_ms, Some(120.0));
        assert_eq!(
            ServeFile::load(&example()).unwrap().prebuffer_ms,
            Some(200.0)
        );
    }

    #[test]
    fn the_wyoming_port_is_a_key() {
        let f = ServeFile::parse("wyoming_port = 10200\n").unwrap();
        assert_eq!(f.wyoming_port, Some(10200));
    }

    #[test]
    fn lend_core_is_a_switch_or_a_word() {
        for (text, want) in [
            ("lend_core = true", LendCore::On),
            ("lend_core = false", LendCore::Off),
            ("lend_core = \"auto\"", LendCore::Auto),
            ("lend_core = \"on\"", LendCore::On),
        ] {
            let f = ServeFile::parse(text).unwrap();
            assert_eq!(f.lend_core.map(LendCore::from), Some(want), "{text}");
        }
        assert!(ServeFile::parse("lend_core = \"sometimes\"").is_err());
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        let e = ServeFile::parse("port = 1\nmax_sesions = 3\n").unwrap_err();
        let m = format!("{e:#}");
        assert!(m.contains("max_sesions"), "{m}");
        assert!(m.contains("line 2"), "{m}");
        let e = ServeFile::parse("log_format = \"xml\"").unwrap_err();
        assert!(format!("{e:#}").contains("xml"), "{e:#}");
    }
}
