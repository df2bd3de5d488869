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

/// The CPU features that decide which kernels run (as `/proc/cpuinfo`
/// spells them), in the order they are printed.
const FEATURES: [&str; 9] = [
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
];

/// Read bandwidth probe: a buffer far past any last-level cache, 5 passes
/// (as `speak --timings --floor`).
const PROBE_BYTES: usize = 512 << 20;
const PROBE_PASSES: usize = 5;

/// The host's class, measured now: vendor, model and the features that
/// pick the kernels, the threads and L3, and what bounds the model on it:
/// the memory read rate (`tts_kernels::probe::read_bandwidth`) and the
/// multiply-add rates of the LMs' int8 matmul and the vocoder's bf16
/// convolution (`q8_matmul_rate`, `bf16_conv_rate`). About a second; run
/// before memory is sampled (the read probe's buffer is freed after it).
pub(super) fn host_class() -> serde_json::Value {
    use tts_kernels::probe;
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| -> Option<String> {
        info.lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let flags = field("flags").unwrap_or_default();
    let flags: Vec<&str> = flags.split_whitespace().collect();
    let features: Vec<&str> = FEATURES
        .iter()
        .copied()
        .filter(|f| flags.contains(f))
        .collect();
    let l3 = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size")
        .ok()
        .map(|s| s.trim().to_string());
    let bw = probe::read_bandwidth(PROBE_BYTES, PROBE_PASSES);
    let q8 = probe::q8_matmul_rate(0, PROBE_PASSES);
    let conv = probe::bf16_conv_rate(2048, 0, PROBE_PASSES);
    let g = |v: f64| (v / 1e9 * 10.0).round() / 10.0;
    serde_json::json!({
        "vendor": field("vendor_id"),
        "cpu_model": field("model name"),
        "family": field("cpu family").and_then(|s| s.parse::<u32>().ok()),
        "model": field("model").and_then(|s| s.parse::<u32>().ok()),
        "features": (!info.is_empty()).then_some(features),
        "l3": l3,
        "threads": rayon::current_num_threads(),
        "read_gb_s": {"median": g(bw.median), "min": g(bw.min), "max": g(bw.max), "passes": bw.passes, "bytes": bw.bytes},
        "int8_matmul_gmacs": {"median": g(q8.median), "min": g(q8.min), "max": g(q8.max), "passes": q8.passes, "shape": "4 rows x 1024x1024, in cache"},
        "bf16_conv_gmacs": {"median": g(conv.median), "min": g(conv.min), "max": g(conv.max), "passes": conv.passes, "path": tts_kernels::bf16_conv_path(), "shape": "k7, 192 channels, 2048 samples, in cache"},
    })
}

/// One line naming the host's class from [`host_class`]'s document:
/// `host: AMD EPYC (AuthenticAMD family 25 model 17), 2 threads, L3 32768K,
/// avx2 fma avx512f ...; read 31.6 GB/s (30.4..32.9), int8 matmul 150
/// G multiply-adds/s (...), bf16 conv 180 (...) [avx512_bf16]`.
pub(super) fn describe_host(h: &serde_json::Value) -> String {
    let s = |v: &serde_json::Value| v.as_str().map_or("?".to_string(), str::to_string);
    let n = |v: &serde_json::Value| v.as_u64().map_or("?".to_string(), |x| x.to_string());
    let rate = |v: &serde_json::Value| match (
        v["median"].as_f64(),
        v["min"].as_f64(),
        v["max"].as_f64(),
    ) {
        (Some(m), Some(lo), Some(hi)) => format!("{m:.1} ({lo:.1}..{hi:.1})"),
        _ => "missing".into(),
    };
    let features = h["features"].as_array().map_or("?".to_string(), |a| {
        a.iter()
            .filter_map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    });
    format!(
        "host: {} ({} family {} model {}), {} threads, L3 {}, {}; read {} GB/s, int8 matmul {} and bf16 conv {} [{}] G multiply-adds/s",
        s(&h["cpu_model"]),
        s(&h["vendor"]),
        n(&h["family"]),
        n(&h["model"]),
        n(&h["threads"]),
        s(&h["l3"]),
        features,
        rate(&h["read_gb_s"]),
        rate(&h["int8_matmul_gmacs"]),
        rate(&h["bf16_conv_gmacs"]),
        s(&h["bf16_conv_gmacs"]["path"]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_line_names_what_is_missing() {
        let line = describe_host(&serde_json::json!({"threads": 2}));
        assert!(
            line.starts_with("host: ? (? family ? model ?), 2 threads"),
            "{line}"
        );
        assert!(line.contains("read missing GB/s"), "{line}");
        let line = describe_host(&serde_json::json!({
            "cpu_model": "X", "vendor": "V", "family": 25, "model": 17, "threads": 2,
            "l3": "32768K", "features": ["avx2", "avx512f"],
            "read_gb_s": {"median": 31.6, "min": 30.4, "max": 32.9},
            "int8_matmul_gmacs": {"median": 150.0, "min": 140.0, "max": 151.0},
            "bf16_conv_gmacs": {"median": 180.0, "min": 170.0, "max": 181.0, "path": "avx512_bf16"},
        }));
        assert_eq!(
            line,
            "host: X (V family 25 model 17), 2 threads, L3 32768K, avx2 avx512f; read 31.6 (30.4..32.9) GB/s, int8 matmul 150.0 (140.0..151.0) and bf16 conv 180.0 (170.0..181.0) [avx512_bf16] G multiply-adds/s"
        );
    }
}
