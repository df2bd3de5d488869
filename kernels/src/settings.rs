//! The kernels' process-wide switches, set once by the program that links
//! them.
//!
//! Six measurement and override switches decide how the kernels run for the
//! whole process: the instruction-set path, whether a step runs on a pool
//! thread, kernel teams and how long their workers spin, AMX tiles, and the
//! software prefetch. They are one [`KernelSettings`] value; the program
//! builds it (from its own configuration, or with the pure parser
//! [`KernelSettings::from_env_map`] over the environment it read) and
//! [installs](KernelSettings::install) it before the first kernel runs.
//! This crate never reads the environment itself. A process that installs
//! nothing runs on [`KernelSettings::default`] (what an empty environment
//! gives); the first kernel that asks fixes the settings for the rest of
//! the process, so a later install of other values is refused.
//!
//! The hot paths read the installed value through one `OnceLock` load.

use std::fmt;
use std::sync::OnceLock;

use crate::instruction_set::Isa;

/// The default team spin before a worker parks, in microseconds: long
/// enough to bridge the gap between two regions of a step and between the
/// steps of one frame (a mailbox hop), short enough that an idle team is
/// idle (`crate::team`).
pub const DEFAULT_TEAM_SPIN_US: u64 = 200;

/// Which cache level the decode matvecs prefetch their next weight block
/// into (`TTS_RT_PREFETCH`; a measurement switch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PrefetchLevel {
    /// No software prefetch (`off`, `0`).
    Off,
    /// `prefetcht0` (`l1`).
    L1,
    /// `prefetcht1`, the default (`l2`): the next block is up to 48 KB
    /// ahead, more than L1 holds.
    #[default]
    L2,
}

impl PrefetchLevel {
    pub fn name(self) -> &'static str {
        match self {
            PrefetchLevel::Off => "off",
            PrefetchLevel::L1 => "l1",
            PrefetchLevel::L2 => "l2",
        }
    }
}

/// Every process-wide kernel switch. `Default` is the behaviour with none
/// of the environment variables set; each field names the variable the
/// `tts-rt` binary reads it from (once, at start: see
/// [`KernelSettings::from_env_map`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelSettings {
    /// `TTS_RT_ISA=scalar|avx2|avx512`: force an instruction-set path.
    /// `None` (the default): the best the CPU has. A forced path the CPU
    /// lacks falls back to detection ([`crate::isa`] says what is in use).
    pub isa: Option<Isa>,
    /// `TTS_RT_ON_POOL=off` (`false`): [`crate::on_pool`] runs its step on
    /// the calling thread instead of a pool thread (an A/B switch).
    pub on_pool: bool,
    /// `TTS_RT_TEAMS=off` (`false`): the runtime keeps its kernels on
    /// rayon's pools instead of kernel teams ([`crate::teams_enabled`]; an
    /// A/B switch).
    pub teams: bool,
    /// `TTS_RT_TEAM_SPIN_US`: how long a team worker (and a caller waiting
    /// for the workers) spins before it parks, in microseconds
    /// ([`DEFAULT_TEAM_SPIN_US`], 200, by default).
    pub team_spin_us: u64,
    /// `TTS_RT_AMX=off` (`false`): bf16 convolutions stay on `vdpbf16ps`
    /// even where AMX tiles are usable.
    pub amx: bool,
    /// `TTS_RT_PREFETCH=off|l1|l2`: the decode matvecs' software prefetch.
    pub prefetch: PrefetchLevel,
}

impl Default for KernelSettings {
    fn default() -> Self {
        KernelSettings {
            isa: None,
            on_pool: true,
            teams: true,
            team_spin_us: DEFAULT_TEAM_SPIN_US,
            amx: true,
            prefetch: PrefetchLevel::L2,
        }
    }
}

/// A switch's value that is not one it accepts: names the key, the value
/// and what it takes instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingError {
    pub key: &'static str,
    pub value: String,
    /// The accepted values, for the message.
    pub accepted: &'static str,
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={:?} is not understood; use one of: {}",
            self.key, self.value, self.accepted
        )
    }
}

impl std::error::Error for SettingError {}

/// [`KernelSettings::install`] came too late: the settings in use differ
/// from the ones offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingsFixed {
    pub in_use: KernelSettings,
    pub offered: KernelSettings,
}

impl fmt::Display for SettingsFixed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the kernel settings were fixed before they were installed (in use: {:?}; offered: {:?})",
            self.in_use, self.offered
        )
    }
}

impl std::error::Error for SettingsFixed {}

/// The accepted spellings of an on/off switch, for messages.
pub const SWITCH_VALUES: &str = "on, off (also 1/0, true/false, yes/no)";

/// Parses an on/off switch: `on`, `1`, `true`, `yes` → true; `off`, `0`,
/// `false`, `no` → false (case-insensitive, surrounding blanks ignored).
/// Unset or blank gives `default`.
pub fn parse_switch(
    key: &'static str,
    value: Option<&str>,
    default: bool,
) -> Result<bool, SettingError> {
    let Some(v) = value.filter(|v| !v.trim().is_empty()) else {
        return Ok(default);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Ok(true),
        "off" | "0" | "false" | "no" => Ok(false),
        _ => Err(SettingError {
            key,
            value: v.to_string(),
            accepted: SWITCH_VALUES,
        }),
    }
}

static SETTINGS: OnceLock<KernelSettings> = OnceLock::new();

/// The settings in use (fixing them at the default if nothing was
/// installed). One `OnceLock` load once fixed.
#[inline]
pub(crate) fn get() -> &'static KernelSettings {
    SETTINGS.get_or_init(KernelSettings::default)
}

impl KernelSettings {
    pub const ISA_ENV: &'static str = "TTS_RT_ISA";
    pub const ON_POOL_ENV: &'static str = "TTS_RT_ON_POOL";
    pub const TEAMS_ENV: &'static str = "TTS_RT_TEAMS";
    pub const TEAM_SPIN_US_ENV: &'static str = "TTS_RT_TEAM_SPIN_US";
    pub const AMX_ENV: &'static str = "TTS_RT_AMX";
    pub const PREFETCH_ENV: &'static str = "TTS_RT_PREFETCH";
    /// Every variable [`KernelSettings::from_env_map`] looks up.
    pub const ENV_KEYS: [&'static str; 6] = [
        Self::ISA_ENV,
        Self::ON_POOL_ENV,
        Self::TEAMS_ENV,
        Self::TEAM_SPIN_US_ENV,
        Self::AMX_ENV,
        Self::PREFETCH_ENV,
    ];

    /// Builds the settings from variables looked up by name (`lookup` is
    /// typically the process environment, which the program reads once at
    /// start; this function reads nothing itself). An unset or blank
    /// variable keeps its default; any value a variable does not accept is
    /// refused, naming the variable and its accepted values. Every
    /// variable's meaning is its field's ([`KernelSettings`]).
    pub fn from_env_map(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingError> {
        let d = KernelSettings::default();
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let isa = match get(Self::ISA_ENV) {
            None => None,
            Some(v) => Some(Isa::from_name(&v).ok_or(SettingError {
                key: Self::ISA_ENV,
                value: v,
                accepted: "scalar, avx2, avx512 (also avx2+fma, avx512f)",
            })?),
        };
        let switch = |k: &'static str, default: bool| parse_switch(k, get(k).as_deref(), default);
        let team_spin_us = match get(Self::TEAM_SPIN_US_ENV) {
            None => d.team_spin_us,
            Some(v) => v.trim().parse::<u64>().map_err(|_| SettingError {
                key: Self::TEAM_SPIN_US_ENV,
                value: v,
                accepted: "a whole number of microseconds, e.g. 200 (the default)",
            })?,
        };
        let prefetch = match get(Self::PREFETCH_ENV) {
            None => d.prefetch,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "off" | "0" => PrefetchLevel::Off,
                "l1" => PrefetchLevel::L1,
                "l2" => PrefetchLevel::L2,
                _ => {
                    return Err(SettingError {
                        key: Self::PREFETCH_ENV,
                        value: v,
                        accepted: "l2 (the default), l1, off",
                    })
                }
            },
        };
        Ok(KernelSettings {
            isa,
            on_pool: switch(Self::ON_POOL_ENV, d.on_pool)?,
            teams: switch(Self::TEAMS_ENV, d.teams)?,
            team_spin_us,
            amx: switch(Self::AMX_ENV, d.amx)?,
            prefetch,
        })
    }

    /// Makes these the process's settings. Call once, before the first
    /// kernel runs: once a kernel has read the settings (the defaults, if
    /// none were installed) they are fixed, and installing different ones
    /// is refused. Installing the values already in use is a no-op.
    pub fn install(self) -> Result<(), SettingsFixed> {
        let mut fresh = false;
        let in_use = *SETTINGS.get_or_init(|| {
            fresh = true;
            self
        });
        if fresh || in_use == self {
            Ok(())
        } else {
            Err(SettingsFixed {
                in_use,
                offered: self,
            })
        }
    }

    /// The settings in use: the installed ones, else (fixing them) the
    /// defaults.
    pub fn current() -> KernelSettings {
        *get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<KernelSettings, SettingError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        KernelSettings::from_env_map(|k| m.get(k).cloned())
    }

    #[test]
    fn nothing_set_is_the_default_and_the_default_is_todays_behaviour() {
        let d = parse(&[]).unwrap();
        assert_eq!(d, KernelSettings::default());
        assert_eq!(d.isa, None);
        assert!(d.on_pool && d.teams && d.amx);
        assert_eq!(d.team_spin_us, 200);
        assert_eq!(d.prefetch, PrefetchLevel::L2);
        // Blank values are unset (a script's `TTS_RT_AMX=$empty`).
        let blank: Vec<(&str, &str)> = KernelSettings::ENV_KEYS.map(|k| (k, " ")).to_vec();
        assert_eq!(parse(&blank).unwrap(), KernelSettings::default());
    }

    #[test]
    fn each_variable_takes_its_documented_values() {
        for (v, isa) in [
            ("scalar", Isa::Scalar),
            ("avx2", Isa::Avx2),
            ("AVX512", Isa::Avx512),
            ("avx2+fma", Isa::Avx2),
            ("avx512f", Isa::Avx512),
        ] {
            assert_eq!(parse(&[("TTS_RT_ISA", v)]).unwrap().isa, Some(isa), "{v}");
        }
        for key in ["TTS_RT_ON_POOL", "TTS_RT_TEAMS", "TTS_RT_AMX"] {
            for (v, on) in [
                ("off", false),
                ("OFF", false),
                ("0", false),
                ("no", false),
                ("false", false),
                ("on", true),
                (" on ", true),
                ("1", true),
                ("yes", true),
                ("true", true),
            ] {
                let s = parse(&[(key, v)]).unwrap();
                let got = match key {
                    "TTS_RT_ON_POOL" => s.on_pool,
                    "TTS_RT_TEAMS" => s.teams,
                    _ => s.amx,
                };
                assert_eq!(got, on, "{key}={v}");
                // Only that field moved.
                let mut back = s;
                (back.on_pool, back.teams, back.amx) = (true, true, true);
                assert_eq!(back, KernelSettings::default(), "{key}={v}");
            }
        }
        assert_eq!(
            parse(&[("TTS_RT_TEAM_SPIN_US", "0")]).unwrap().team_spin_us,
            0
        );
        assert_eq!(
            parse(&[("TTS_RT_TEAM_SPIN_US", "1500")])
                .unwrap()
                .team_spin_us,
            1500
        );
        for (v, p) in [
            ("off", PrefetchLevel::Off),
            ("0", PrefetchLevel::Off),
            ("l1", PrefetchLevel::L1),
            ("L2", PrefetchLevel::L2),
        ] {
            assert_eq!(parse(&[("TTS_RT_PREFETCH", v)]).unwrap().prefetch, p, "{v}");
        }
    }

    #[test]
    fn a_typo_is_refused_naming_the_variable_and_its_values() {
        for (key, bad, hint) in [
            ("TTS_RT_ISA", "avx3", "avx512"),
            ("TTS_RT_ON_POOL", "of", "off"),
            ("TTS_RT_TEAMS", "disabled", "off"),
            ("TTS_RT_TEAM_SPIN_US", "200us", "microseconds"),
            ("TTS_RT_TEAM_SPIN_US", "-1", "microseconds"),
            ("TTS_RT_AMX", "nope", "off"),
            ("TTS_RT_PREFETCH", "l3", "l1"),
        ] {
            let e = parse(&[(key, bad)]).unwrap_err();
            assert_eq!(e.key, key);
            let m = e.to_string();
            assert!(
                m.starts_with(&format!("{key}={bad:?} is not understood; use one of: ")),
                "{m}"
            );
            assert!(m.contains(hint), "{m}");
        }
    }

    #[test]
    fn installing_after_the_settings_are_fixed_is_refused_unless_equal() {
        // This test binary never installs anything else, so the settings in
        // use are the defaults once read.
        let d = KernelSettings::current();
        assert_eq!(d, KernelSettings::default());
        d.install().unwrap();
        let other = KernelSettings {
            prefetch: PrefetchLevel::Off,
            ..d
        };
        let e = other.install().unwrap_err();
        assert_eq!((e.in_use, e.offered), (d, other));
        assert_eq!(KernelSettings::current(), d);
    }
}
