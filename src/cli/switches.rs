//! The environment switches, read once when the program starts.
//!
//! Eight measurement and override switches come from the environment: the
//! kernels' six (`TTS_RT_ISA`, `TTS_RT_ON_POOL`, `TTS_RT_TEAMS`,
//! `TTS_RT_TEAM_SPIN_US`, `TTS_RT_AMX`, `TTS_RT_PREFETCH`), the engine's
//! `TTS_RT_TEAM_HOLD` and the server's `TTS_RT_NODELAY`. No library crate
//! reads the environment: this module reads each variable once, before any
//! command runs, parses it (an unset or blank variable keeps its default;
//! a value a variable does not accept refuses to start, naming the
//! variable and what it accepts) and the values reach the crates as typed
//! settings: [`tts_kernels::KernelSettings`] installed for the process,
//! `EngineConfig::team_hold` for every engine a command starts and
//! `ServeConfig::nodelay` for the server.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use tts_actors::TeamHold;
use tts_kernels::{KernelSettings, SettingError};

/// The engine's variable ([`tts_actors::EngineConfig::team_hold`]).
pub(crate) const TEAM_HOLD_ENV: &str = "TTS_RT_TEAM_HOLD";

/// Every variable read at start.
pub(crate) const KEYS: [&str; 8] = [
    KernelSettings::ISA_ENV,
    KernelSettings::ON_POOL_ENV,
    KernelSettings::TEAMS_ENV,
    KernelSettings::TEAM_SPIN_US_ENV,
    KernelSettings::AMX_ENV,
    KernelSettings::PREFETCH_ENV,
    TEAM_HOLD_ENV,
    tts_transport::NODELAY_ENV,
];

/// What the environment switches say, parsed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Switches {
    pub kernels: KernelSettings,
    /// `TTS_RT_TEAM_HOLD` (`None`: unset).
    pub team_hold: Option<TeamHold>,
    /// `TTS_RT_NODELAY` (`true` unless `off`).
    pub nodelay: bool,
    /// Each variable as it was read (`None`: unset), for provenance.
    pub raw: BTreeMap<&'static str, Option<String>>,
}

impl Switches {
    /// Reads every variable of [`KEYS`] from the process environment, once
    /// (a value that is not UTF-8 is kept lossily, so it is refused by
    /// name rather than ignored), and parses them.
    pub fn read() -> Result<Switches> {
        Switches::parse(|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Parses the variables `lookup` finds (called once per key).
    pub fn parse(lookup: impl Fn(&str) -> Option<String>) -> Result<Switches> {
        let raw: BTreeMap<&'static str, Option<String>> =
            KEYS.iter().map(|&k| (k, lookup(k))).collect();
        let get = |k: &str| raw.get(k).cloned().flatten();
        let kernels = KernelSettings::from_env_map(get)?;
        let team_hold = match get(TEAM_HOLD_ENV).filter(|v| !v.trim().is_empty()) {
            None => None,
            Some(v) => Some(TeamHold::from_name(&v).ok_or(SettingError {
                key: TEAM_HOLD_ENV,
                value: v,
                accepted: TeamHold::NAMES,
            })?),
        };
        let nodelay = tts_transport::parse_nodelay(get(tts_transport::NODELAY_ENV).as_deref())
            .map_err(anyhow::Error::msg)?;
        Ok(Switches {
            kernels,
            team_hold,
            nodelay,
            raw,
        })
    }

    /// Makes [`Switches::kernels`] the process's kernel settings: call
    /// before the first kernel runs.
    pub fn install_kernels(&self) -> Result<()> {
        self.kernels
            .install()
            .context("installing the kernel switches (TTS_RT_ISA, TTS_RT_AMX, ...)")
    }

    /// A note for stderr when `TTS_RT_ISA` forces a path this CPU lacks
    /// (the kernels then use the best path it has).
    pub fn isa_note(&self) -> Option<String> {
        let forced = self.kernels.isa?;
        (!forced.is_supported()).then(|| {
            format!(
                "{}={}: this CPU lacks {}; the kernels use {}",
                KernelSettings::ISA_ENV,
                self.raw
                    .get(KernelSettings::ISA_ENV)
                    .cloned()
                    .flatten()
                    .unwrap_or_default()
                    .trim(),
                forced.name(),
                tts_kernels::Isa::detect().name()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tts_kernels::PrefetchLevel;

    fn parse(vars: &[(&str, &str)]) -> Result<Switches> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Switches::parse(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn an_empty_environment_is_every_default() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.kernels, KernelSettings::default());
        assert_eq!(s.team_hold, None);
        assert!(s.nodelay);
        assert_eq!(s.raw.len(), KEYS.len());
        assert!(s.raw.values().all(Option::is_none));
    }

    #[test]
    fn every_variable_reaches_its_setting() {
        let s = parse(&[
            ("TTS_RT_ISA", "scalar"),
            ("TTS_RT_ON_POOL", "off"),
            ("TTS_RT_TEAMS", "off"),
            ("TTS_RT_TEAM_SPIN_US", "50"),
            ("TTS_RT_AMX", "off"),
            ("TTS_RT_PREFETCH", "l1"),
            ("TTS_RT_TEAM_HOLD", "lend"),
            ("TTS_RT_NODELAY", "off"),
        ])
        .unwrap();
        assert_eq!(
            s.kernels,
            KernelSettings {
                isa: Some(tts_kernels::Isa::Scalar),
                on_pool: false,
                teams: false,
                team_spin_us: 50,
                amx: false,
                prefetch: PrefetchLevel::L1,
            }
        );
        assert_eq!(s.team_hold, Some(TeamHold::Lend));
        assert!(!s.nodelay);
        assert_eq!(s.raw["TTS_RT_AMX"].as_deref(), Some("off"));
        for (v, h) in [
            ("off", TeamHold::Off),
            ("all", TeamHold::All),
            ("c2w", TeamHold::C2w),
            ("lend", TeamHold::Lend),
        ] {
            assert_eq!(
                parse(&[("TTS_RT_TEAM_HOLD", v)]).unwrap().team_hold,
                Some(h)
            );
        }
        assert_eq!(parse(&[("TTS_RT_TEAM_HOLD", " ")]).unwrap().team_hold, None);
    }

    #[test]
    fn a_typo_in_any_variable_is_refused_by_name() {
        let e = parse(&[("TTS_RT_TEAM_HOLD", "lnd")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "TTS_RT_TEAM_HOLD=\"lnd\" is not understood; use one of: c2w (the default), lend, off, all"
        );
        for (k, v) in [
            ("TTS_RT_ISA", "avx3"),
            ("TTS_RT_ON_POOL", "of"),
            ("TTS_RT_TEAMS", "nope"),
            ("TTS_RT_TEAM_SPIN_US", "fast"),
            ("TTS_RT_AMX", "offf"),
            ("TTS_RT_PREFETCH", "l3"),
            ("TTS_RT_NODELAY", "maybe"),
        ] {
            let e = parse(&[(k, v)]).unwrap_err().to_string();
            assert!(e.contains(&format!("{k}={v:?} is not understood")), "{e}");
        }
    }
}
