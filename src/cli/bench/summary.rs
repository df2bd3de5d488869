//! Per-cell figures from the requests' records: nearest-rank summaries of
//! the measured requests, counts, the warm-ups apart, and memory after each
//! request with its growth.

use std::time::Instant;

use anyhow::Result;
use serde_json::{json, Value};
use tts_actors::{RequestMetrics, Summary};

use super::report::FIELDS;
use super::rss;

/// Memory growth is measured from this request of a cell on (1-based,
/// completion order, warm-ups included): the first requests of a process
/// grow the allocator's arenas and the engine's pools to their working size.
pub(super) const GROWTH_FROM: usize = 10;

/// A request's record after it has run.
pub(super) struct Record {
    pub label: String,
    pub length: String,
    pub concurrency: usize,
    pub warmup: bool,
    pub metrics: RequestMetrics,
    /// RssAnon read by the request's own thread right after its terminal
    /// event.
    pub rss_after_kb: Option<u64>,
    /// When that terminal event arrived (orders a round's requests).
    pub done_at: Instant,
}

fn field(m: &RequestMetrics, name: &str) -> Option<f64> {
    match name {
        "ttfp_ms" => m.ttfp_ms,
        "e2el_ms" => Some(m.e2el_ms),
        "rtf" => m.rtf,
        "stream_rtf" => m.stream_rtf,
        "required_prebuffer_ms" => m.required_prebuffer_ms,
        "stall_ms" => m.stall_ms,
        "stall_ms_at_prebuffer" => m.stall_ms_at_prebuffer,
        "ttft_ms" => m.ttft_ms,
        "tpot_ms" => m.tpot_ms,
        "talker_ms" => m.talker_ms,
        "code_predictor_ms" => m.code_predictor_ms,
        "code2wav_ms" => m.code2wav_ms,
        "handoff_ms" => m.handoff_ms,
        "audio_s" => Some(m.audio_s),
        _ => None,
    }
}

/// One cell's figures: percentiles of the measured requests, counts,
/// the warm-ups' TTFP, the prompt size, and memory per request in
/// completion order with its growth.
pub(super) fn summarise_cell(
    records: &[Record],
    len_name: &str,
    conc: usize,
    (prefill_rows, trailing_rows, shared_rows): (usize, usize, usize),
    peak: Option<u64>,
) -> Result<Value> {
    let mut in_order: Vec<&Record> = records
        .iter()
        .filter(|r| r.length == len_name && r.concurrency == conc)
        .collect();
    in_order.sort_by_key(|r| r.done_at);
    let after: Vec<Option<u64>> = in_order.iter().map(|r| r.rss_after_kb).collect();
    let all_after: Option<Vec<u64>> = after.iter().copied().collect();
    let growth_json = |from: usize| {
        all_after
            .as_deref()
            .and_then(|v| rss::growth(v, from))
            .map(|g| {
                json!({
                    "from_request": g.from,
                    "to_request": g.to,
                    "delta_kb": g.delta_kb,
                    "slope_kb_per_request": g.slope_kb_per_request,
                    "min_kb": g.min_kb,
                    "max_kb": g.max_kb,
                })
            })
    };
    let growth = growth_json(GROWTH_FROM);
    // The second half alone: whether memory has levelled off (with
    // several sessions the allocator keeps settling for a few dozen
    // requests after request 10; see docs/benchmarks.md, Memory).
    let growth_last_half = if after.len() >= 2 * GROWTH_FROM {
        growth_json(after.len() / 2 + 1)
    } else {
        None
    };
    let measured: Vec<&Record> = records
        .iter()
        .filter(|r| !r.warmup && r.length == len_name && r.concurrency == conc)
        .collect();
    let warm: Vec<&Record> = records
        .iter()
        .filter(|r| r.warmup && r.length == len_name && r.concurrency == conc)
        .collect();
    let mut summaries = serde_json::Map::new();
    for f in FIELDS {
        let vals: Vec<(String, Option<f64>)> = measured
            .iter()
            .map(|r| (r.label.clone(), field(&r.metrics, f)))
            .collect();
        summaries.insert(f.to_string(), serde_json::to_value(Summary::of(&vals))?);
    }
    let count =
        |p: &dyn Fn(&RequestMetrics) -> bool| measured.iter().filter(|r| p(&r.metrics)).count();
    let warm_vals: Vec<(String, Option<f64>)> = warm
        .iter()
        .map(|r| (r.label.clone(), r.metrics.ttfp_ms))
        .collect();
    Ok(json!({
        "length": len_name,
        "concurrency": conc,
        "n": measured.len(),
        "summary": summaries,
        "continuity_ok": count(&|m| m.continuity_ok == Some(true)),
        "continuity_ok_at_prebuffer": count(&|m| m.continuity_ok_at_prebuffer == Some(true)),
        "underruns_total": measured.iter().filter_map(|r| r.metrics.underruns).sum::<u32>(),
        "underruns_at_prebuffer_total": measured.iter().filter_map(|r| r.metrics.underruns_at_prebuffer).sum::<u32>(),
        "complete": count(&|m| m.complete == Some(true)),
        "finite": count(&|m| m.finite),
        "frames": measured.iter().filter_map(|r| r.metrics.frames).sum::<u64>(),
        "warmup": { "n": warm.len(), "ttfp_ms": Summary::of(&warm_vals) },
        "prompt_rows": {
            "prefill": prefill_rows,
            "trailing_text": trailing_rows,
            "shared_prefix": shared_rows,
        },
        "rss_anon_kb": {
            "peak": peak,
            "after_request": after,
            "after_request_labels": in_order.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(),
            "growth": growth,
            "growth_last_half": growth_last_half,
        },
    }))
}

/// Measured requests the document counts as incomplete (n - complete,
/// summed over cells).
pub(super) fn incomplete_requests(doc: &Value) -> usize {
    doc["cells"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["n"].as_u64().unwrap_or(0) - c["complete"].as_u64().unwrap_or(0))
        .sum::<u64>() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_requests_sum_measured_minus_complete_over_cells() {
        let doc = json!({"cells": [
            {"n": 3, "complete": 3},
            {"n": 4, "complete": 1},
        ]});
        assert_eq!(incomplete_requests(&doc), 3);
        assert_eq!(incomplete_requests(&json!({"cells": []})), 0);
    }
}
