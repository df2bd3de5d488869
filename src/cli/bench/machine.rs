//! Where a bench ran: the checkout, the CPU and the load when it started
//! (the provenance block of the document).

pub(super) fn git_commit() -> Option<String> {
    if let Ok(c) = std::env::var("TTS_RT_GIT_COMMIT") {
        return Some(c);
    }
    let o = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

pub(super) fn cpu_model() -> Option<String> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let l = s.lines().find(|l| l.starts_with("model name"))?;
    Some(l.split_once(':')?.1.trim().to_string())
}

pub(super) fn load_avg_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
