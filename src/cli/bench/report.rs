//! The bench's output for people: the table printed from the JSON document
//! (`--json` prints the document itself). Reads only the document and the
//! few flags the table names, so it sees exactly what `--json` shows.

use serde_json::Value;

/// The figures summarised per cell, in table order.
pub(super) const FIELDS: [&str; 14] = [
    "ttfp_ms",
    "e2el_ms",
    "rtf",
    "stream_rtf",
    "required_prebuffer_ms",
    "stall_ms",
    "stall_ms_at_prebuffer",
    "ttft_ms",
    "tpot_ms",
    "talker_ms",
    "code_predictor_ms",
    "code2wav_ms",
    "handoff_ms",
    "audio_s",
];

/// The flags the table header and cells name besides the document.
pub(super) struct TableOptions {
    pub frames: Option<usize>,
    pub text_streaming: bool,
    pub prebuffer_ms: f64,
    /// The first request of the growth figure (`GROWTH_FROM`).
    pub growth_from: usize,
}

/// A kB figure in MB for the table, or "missing" (never 0).
fn mb(v: &Value) -> String {
    v.as_f64()
        .map_or("missing".into(), |kb| format!("{:.1} MB", kb / 1024.0))
}

fn fmt(v: &Value) -> String {
    match v.as_f64() {
        None => "null".into(),
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 1.0 => format!("{x:.2}"),
        Some(x) => format!("{x:.3}"),
    }
}

pub(super) fn print_table(doc: &Value, a: &TableOptions) {
    let p = &doc["provenance"];
    let mut out = String::new();
    let s = |v: &Value| {
        v.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string())
    };
    out += &format!(
        "tts-rt bench  commit {}  cpu {}  isa {}  threads {}  load1m {}\n",
        s(&p["git_commit"]),
        s(&p["cpu_model"]),
        s(&p["isa"]),
        p["threads"],
        p["load_avg_1m_at_start"]
    );
    if !p["host"].is_null() {
        out += &super::machine::describe_host(&p["host"]);
        out += "\n";
    }
    out += &format!(
        "model {}  ({} code groups, {} Hz, {} samples/frame)  precision: {}\n",
        s(&p["model"]["dir"]),
        p["model"]["num_code_groups"],
        p["model"]["sample_rate"],
        p["model"]["samples_per_frame"],
        s(&p["precision"])
    );
    out += &format!(
        "cold start {:.0} ms (load {:.0} ms, engine {:.1} ms)  frames {}  text {}\n",
        doc["cold_start_ms"].as_f64().unwrap_or(f64::NAN),
        doc["load_ms"].as_f64().unwrap_or(f64::NAN),
        doc["engine_start_ms"].as_f64().unwrap_or(f64::NAN),
        a.frames
            .map_or("until EOS or cap".to_string(), |n| format!("{n} fixed")),
        if a.text_streaming {
            "streaming (one token per frame)"
        } else {
            "all in the prefill"
        },
    );
    let r = &doc["rss_anon_kb"];
    out += &format!(
        "RssAnon: start {}, after load {}, load peak {}, requests peak {}, peak {}, end {}  ({} samples every {} ms)\n",
        mb(&r["start"]),
        mb(&r["after_load"]),
        mb(&r["load_peak"]),
        mb(&r["requests_peak"]),
        mb(&r["peak"]),
        mb(&r["end"]),
        r["samples"],
        r["sample_ms"],
    );
    for c in doc["cells"].as_array().into_iter().flatten() {
        out += &format!(
            "\n[{} text, concurrency {}]  n={}  complete {}/{}  finite {}/{}  continuity_ok P=0: {}/{}, P={} ms: {}/{}  underruns {} / {}  warm-up n={}\n",
            s(&c["length"]),
            c["concurrency"],
            c["n"],
            c["complete"],
            c["n"],
            c["finite"],
            c["n"],
            c["continuity_ok"],
            c["n"],
            a.prebuffer_ms,
            c["continuity_ok_at_prebuffer"],
            c["n"],
            c["underruns_total"],
            c["underruns_at_prebuffer_total"],
            c["warmup"]["n"],
        );
        let m = &c["rss_anon_kb"];
        let after = m["after_request"].as_array().map_or(&[][..], |v| v);
        let (g, h) = (&m["growth"], &m["growth_last_half"]);
        out += &format!(
            "  prompt {} prefill rows{}{}  RssAnon peak {}, after request 1 {}, after request {} {}",
            c["prompt_rows"]["prefill"],
            match c["prompt_rows"]["shared_prefix"].as_u64() {
                Some(n) if n > 0 => format!(" (first {n} shared, from the prefix cache)"),
                _ => String::new(),
            },
            match c["prompt_rows"]["trailing_text"].as_u64() {
                Some(n) if n > 0 => format!(" + {n} text rows trailing"),
                _ => String::new(),
            },
            mb(&m["peak"]),
            mb(after.first().unwrap_or(&Value::Null)),
            after.len(),
            mb(after.last().unwrap_or(&Value::Null)),
        );
        out += &if g.is_null() {
            format!("; growth needs {} requests or more\n", a.growth_from + 1)
        } else {
            let one = |g: &Value| {
                format!(
                    "requests {}..{}: {:+} kB, slope {:+.2} kB/request (spread {} kB)",
                    g["from_request"],
                    g["to_request"],
                    g["delta_kb"].as_i64().unwrap_or(0),
                    g["slope_kb_per_request"].as_f64().unwrap_or(f64::NAN),
                    g["max_kb"].as_i64().unwrap_or(0) - g["min_kb"].as_i64().unwrap_or(0),
                )
            };
            let mut s = format!(";\n  growth {}", one(g));
            if !h.is_null() {
                s += &format!("; last half {}", one(h));
            }
            s + "\n"
        };
        out += &format!(
            "  {:<24}{:>5}{:>10}{:>10}{:>10}  argmax\n",
            "metric", "n", "p50", "p95", "max"
        );
        for f in FIELDS {
            let m = &c["summary"][f];
            out += &format!(
                "  {:<24}{:>5}{:>10}{:>10}{:>10}  {}\n",
                f,
                m["n"],
                fmt(&m["p50"]),
                fmt(&m["p95"]),
                fmt(&m["max"]),
                m["argmax"].as_str().unwrap_or("-")
            );
        }
        // Attribution: share of the median stage times.
        let med = |f: &str| c["summary"][f]["p50"].as_f64();
        if let (Some(t), Some(p), Some(w), Some(h)) = (
            med("talker_ms"),
            med("code_predictor_ms"),
            med("code2wav_ms"),
            med("handoff_ms"),
        ) {
            let sum = t + p + w + h;
            if sum > 0.0 {
                out += &format!(
                    "  stage share of p50 time: talker {:.0}%  code predictor {:.0}%  code2wav {:.0}%  handoff {:.0}%\n",
                    100.0 * t / sum,
                    100.0 * p / sum,
                    100.0 * w / sum,
                    100.0 * h / sum
                );
            }
        }
    }
    print!("{out}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kb_figures_print_in_mb_and_a_missing_one_never_as_zero() {
        assert_eq!(mb(&Value::from(1536)), "1.5 MB");
        assert_eq!(mb(&Value::Null), "missing");
    }

    #[test]
    fn table_numbers_keep_three_significant_places_down_to_integers() {
        assert_eq!(fmt(&Value::from(1234.56)), "1235");
        assert_eq!(fmt(&Value::from(-150.4)), "-150");
        assert_eq!(fmt(&Value::from(2.5)), "2.50");
        assert_eq!(fmt(&Value::from(0.12345)), "0.123");
        assert_eq!(fmt(&Value::Null), "null");
    }
}
