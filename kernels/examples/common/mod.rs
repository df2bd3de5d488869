//! What the kernel examples and benches share: reproducible test data, and
//! the kernel switches read from the environment as `tts-rt` reads them.

/// Installs the kernels' process-wide switches (`TTS_RT_ISA`,
/// `TTS_RT_ON_POOL`, `TTS_RT_TEAMS`, `TTS_RT_TEAM_SPIN_US`, `TTS_RT_AMX`,
/// `TTS_RT_PREFETCH`) from this process's environment, with the parser the
/// binary uses; call first thing in `main`. A malformed value exits (2)
/// naming the variable and what it accepts.
pub fn install_kernel_settings() {
    let lookup = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
    let settings = tts_kernels::KernelSettings::from_env_map(lookup).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2)
    });
    settings
        .install()
        .expect("kernel settings installed before any kernel ran");
}

pub use tts_kernels::probe::data;
