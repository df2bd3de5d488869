//! Issue 5's memory criterion through the binary: `tts-rt bench` runs 100
//! requests in one process on a committed tiny checkpoint and reports
//! RssAnon (anonymous resident memory: the weights are memory-mapped and
//! not in it) at start, after load, at its sampled peaks, after every
//! request and at the end; the growth from request 10 to the last must stay
//! within allocator noise.
//!
//! Not a timed test: memory is read from /proc/self/status, not clocks.
//! Linux only (elsewhere bench reports memory as missing, which is checked).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// Bounds on growth from request 10 to request 100, tiny-b, 1 frame, 2
/// threads. Measured on the project machine (glibc malloc, 2 threads, debug
/// and test profiles): delta +72..+80 kB and slope +0.63..+0.72 kB/request
/// at concurrency 1; delta −32..+128 kB, slope +0.60..+0.80 at concurrency
/// 3 (a handful of 4-8 kB steps as the allocator settles; over 300 requests
/// the slope falls to 0.16, i.e. it is not linear). The bounds are ~3× the
/// largest measured value; a leak of L kB per request adds ≈ L to the slope
/// and 90 L to the delta, so anything from ≈ 3 kB per request is caught —
/// one request's streaming state on this fixture is ≈ 130-170 kB (the steps
/// of the first 8 requests, before the pools reach their working size), its
/// talker KV cache ≈ 6 kB.
const MAX_DELTA_KB: i64 = 384;
const MAX_SLOPE_KB_PER_REQUEST: f64 = 3.0;
/// With several sessions, requests 10..N can still hold one allocator step
/// of a few hundred kB: a thread that meets a locked malloc arena gets an
/// arena of its own, and when that happens depends on timing. One such step
/// (+248 kB at request 22, slope +3.09 over 10..102, then flat) failed the
/// slope bound once in four CI runs. There the leak signal is the second
/// half, held to the bounds above: a leak of L kB per request adds ≈ L to
/// its slope. Requests 10..N only have to stay within this step allowance,
/// which still catches a leak from ≈ 11 kB per request.
const MAX_DELTA_KB_SETTLING: i64 = 1024;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn bench(args: &[&str]) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .env_remove("TTS_RT_MODEL")
        .args(["--threads", "2", "bench", "--model"])
        .arg(fixture("tiny-b"))
        .args([
            "--lengths",
            "short",
            "--warmup",
            "0",
            "--frames",
            "1",
            "--json",
        ])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run tts-rt");
    assert!(
        o.status.success(),
        "tts-rt bench failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("bench --json prints one JSON document")
}

fn kb(v: &Value, what: &str) -> u64 {
    let x = v
        .as_u64()
        .unwrap_or_else(|| panic!("{what}: {v} is not a kB count"));
    assert!(x > 0, "{what} is 0: missing values must be null");
    x
}

fn check(doc: &Value, conc: u64, requests: usize) {
    let r = &doc["rss_anon_kb"];
    if !Path::new("/proc/self/status").exists() {
        for k in ["start", "after_load", "load_peak", "peak", "end"] {
            assert!(r[k].is_null(), "{k} must be missing without /proc: {r}");
        }
        return;
    }
    let start = kb(&r["start"], "start");
    let after_load = kb(&r["after_load"], "after_load");
    let load_peak = kb(&r["load_peak"], "load_peak");
    let requests_peak = kb(&r["requests_peak"], "requests_peak");
    let peak = kb(&r["peak"], "peak");
    let end = kb(&r["end"], "end");
    assert!(r["samples"].as_u64().unwrap() > 1, "the sampler ran: {r}");
    assert!(start < after_load, "loading allocates: {r}");
    assert!(after_load <= load_peak && load_peak <= peak, "{r}");
    assert!(requests_peak <= peak && end <= peak, "{r}");

    let cells = doc["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 1);
    let c = &cells[0];
    assert_eq!(c["concurrency"], conc);
    let m = &c["rss_anon_kb"];
    let cell_peak = kb(&m["peak"], "cell peak");
    assert!(cell_peak <= requests_peak);
    let after: Vec<u64> = m["after_request"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| kb(v, "after_request"))
        .collect();
    assert_eq!(after.len(), requests, "one value per request");
    assert_eq!(
        m["after_request_labels"].as_array().unwrap().len(),
        requests
    );
    assert!(after.iter().all(|&v| v <= cell_peak), "peak ≥ every read");

    let g = &m["growth"];
    assert_eq!(g["from_request"], 10);
    assert_eq!(g["to_request"], requests);
    let delta = g["delta_kb"].as_i64().unwrap();
    assert_eq!(delta, after[requests - 1] as i64 - after[9] as i64);
    let slope = g["slope_kb_per_request"].as_f64().unwrap();
    let (max_delta, max_slope) = if conc == 1 {
        (MAX_DELTA_KB, MAX_SLOPE_KB_PER_REQUEST)
    } else {
        (MAX_DELTA_KB_SETTLING, f64::INFINITY)
    };
    assert!(
        delta <= max_delta && slope <= max_slope,
        "RssAnon grows over {requests} requests at concurrency {conc}: {delta:+} kB from \
         request 10 to {requests}, slope {slope:+.2} kB/request (bounds {max_delta} kB, \
         {max_slope} kB/request); after each request: {after:?}"
    );
    // The second half alone (where memory must have levelled off).
    let h = &m["growth_last_half"];
    assert_eq!(h["from_request"], requests / 2 + 1);
    let (hd, hs) = (
        h["delta_kb"].as_i64().unwrap(),
        h["slope_kb_per_request"].as_f64().unwrap(),
    );
    assert!(
        hd <= MAX_DELTA_KB && hs <= MAX_SLOPE_KB_PER_REQUEST,
        "RssAnon still grows in the second half: {hd:+} kB, {hs:+.2} kB/request; {after:?}"
    );
}

#[test]
fn one_hundred_requests_do_not_grow_anonymous_memory() {
    // One session: 100 rounds of one request.
    let doc = bench(&["--concurrency", "1", "--repeats", "100"]);
    check(&doc, 1, 100);
    // Three sessions at once: 34 rounds of three requests (102).
    let doc = bench(&["--concurrency", "3", "--repeats", "34"]);
    check(&doc, 3, 102);
}
