//! `tts-rt bench`: drives the engine in-process over text lengths ×
//! concurrency levels × repeats and reports METRICS.md figures (nearest-rank
//! p50/p95/max with n and the argmax request; warm-ups excluded and
//! reported apart; cold start apart), per-stage attribution, memory
//! (RssAnon at start, after load, at its sampled peaks and at the end; after
//! every request, with a growth figure per cell) and provenance.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use tts_actors::{
    ChunkSchedule, Engine, EngineConfig, Event, RequestMetrics, StageThreads, Summary,
};
use tts_models::{Qwen3Tts, Request};

use super::ModelArg;

mod rss;

use rss::{RssSampler, RssTotals};

/// RssAnon sampling period: a sample (seek, read, parse of the 1.4 kB
/// `/proc/self/status`) costs ≈ 7 µs here, 0.4% of a core at 2 ms, and the
/// allocations it has to catch (a prefill's activations, a quantization
/// pass) last far longer.
const RSS_SAMPLE_MS: u64 = 2;

/// Memory growth is measured from this request of a cell on (1-based,
/// completion order, warm-ups included): the first requests of a process
/// grow the allocator's arenas and the engine's pools to their working size.
const GROWTH_FROM: usize = 10;

/// Built-in texts: `ten` is the ten-word sentence of the TTFP target
/// (issue 5: ttfp_ms p50 ≤ 250 at concurrency 1); the others grow
/// (words ≈ 9, 30, 90).
const TEXTS: [(&str, &str); 4] = [
    (
        "ten",
        "Please call me back when you get home tonight, thanks.",
    ),
    ("short", "The quick brown fox jumps over the lazy dog."),
    (
        "medium",
        "Streaming speech synthesis has to start talking quickly and then keep up: the first \
         packet should arrive within a few hundred milliseconds, and every later chunk before \
         the listener runs out of audio.",
    ),
    (
        "long",
        "A real-time text-to-speech engine is judged by what a listener hears. The first sound \
         must come soon after the request, the audio must never stall once it has started, and \
         several conversations sharing one machine must not disturb one another. This benchmark \
         measures exactly that: the time to the first packet, the pace of the packets after it, \
         the smallest playback buffer that avoids any gap, and where the time goes between the \
         talker, the code predictor, the vocoder and the hand-offs between them.",
    ),
];

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArg,
    /// Text lengths to run: ten, short, medium, long (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "short,medium")]
    lengths: Vec<String>,
    /// Place the stages on their own kernel pools: LM,VOCODER threads (e.g.
    /// 1,1 on two cores: talker + code predictor on one, code2wav beside
    /// them). Default: all stages share the global pool (--threads).
    #[arg(long)]
    stage_threads: Option<StageThreads>,
    /// Concurrent sessions per round (comma-separated levels).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    concurrency: Vec<usize>,
    /// Measured rounds per (length, concurrency) cell; each round runs one
    /// request per session at once, so a cell runs (warmup + repeats) ×
    /// concurrency requests in this one process (e.g. --repeats 100
    /// --warmup 0 --concurrency 1 for the memory-growth figure over 100
    /// requests).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Warm-up rounds per cell (excluded from the percentiles).
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Fixed-length utterances: exactly N frames, end-of-speech ignored
    /// (random checkpoints never stop on their own).
    #[arg(long)]
    frames: Option<usize>,
    /// Frame cap when --frames is not given (default: the checkpoint's).
    #[arg(long)]
    max_frames: Option<usize>,
    /// Greedy decoding (default: the checkpoint's sampling settings).
    #[arg(long)]
    greedy: bool,
    /// Feed the text alongside the frames, one token per frame (official
    /// `non_streaming_mode=False`): a shorter prefill, so an earlier first
    /// packet. Default: all text in the prefill (the official custom-voice
    /// default).
    #[arg(long)]
    text_streaming: bool,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Frames per chunk: first, second, ... (the last repeats).
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    chunks: Vec<usize>,
    /// Playback prebuffer for the continuity figures (ms).
    #[arg(long, default_value_t = 200.0)]
    prebuffer_ms: f64,
    /// Machine-readable output (one JSON document) instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write one JSON record per request (warm-ups included, marked).
    #[arg(long)]
    jsonl: Option<PathBuf>,
}

/// The figures summarised per cell, in table order.
const FIELDS: [&str; 14] = [
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

/// A request's record before it has run.
struct Slot {
    label: String,
    length: String,
    concurrency: usize,
    warmup: bool,
    done: Option<(RequestMetrics, Option<u64>, Instant)>,
}

struct Record {
    label: String,
    length: String,
    concurrency: usize,
    warmup: bool,
    metrics: RequestMetrics,
    /// RssAnon read by the request's own thread right after its terminal
    /// event.
    rss_after_kb: Option<u64>,
    /// When that terminal event arrived (orders a round's requests).
    done_at: Instant,
}

fn git_commit() -> Option<String> {
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

fn cpu_model() -> Option<String> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let l = s.lines().find(|l| l.starts_with("model name"))?;
    Some(l.split_once(':')?.1.trim().to_string())
}

fn load_avg_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn provenance(model: &Qwen3Tts, a: &BenchArgs) -> Value {
    let t = &model.config.talker;
    let c = model.code2wav.config();
    json!({
        "git_commit": git_commit(),
        "cpu_model": cpu_model(),
        "isa": tts_kernels::isa().name(),
        "threads": rayon::current_num_threads(),
        "stage_threads": a.stage_threads,
        "cores_online": std::thread::available_parallelism().ok().map(|n| n.get()),
        "load_avg_1m_at_start": load_avg_1m(),
        "precision": format!("f32 compute; talker weights {}, code predictor weights {} (f32 = as stored, BF16 in hub checkpoints); code2wav {}", model.precision.talker.name(), model.precision.code_predictor.name(), model.precision.code2wav.name()),
        "precision_spec": model.precision.name(),
        "env": {
            "TTS_RT_ISA": std::env::var("TTS_RT_ISA").ok(),
            "RAYON_NUM_THREADS": std::env::var("RAYON_NUM_THREADS").ok(),
        },
        "model": {
            "dir": model.dir.display().to_string(),
            "talker_hidden": t.lm.hidden_size,
            "talker_layers": t.lm.num_layers,
            "num_code_groups": t.num_code_groups,
            "sample_rate": model.code2wav.sample_rate(),
            "samples_per_frame": model.code2wav.samples_per_frame(),
            "frame_rate_hz": c.frame_rate(),
        },
        "run": {
            "lengths": a.lengths,
            "concurrency": a.concurrency,
            "repeats": a.repeats,
            "warmup_rounds": a.warmup,
            "frames": a.frames,
            "max_frames": a.max_frames,
            "greedy": a.greedy,
            "text_streaming": a.text_streaming,
            "seed": a.seed,
            "chunk_frames": a.chunks,
            "prebuffer_ms": a.prebuffer_ms,
            "t_req": "client side: when Session::synthesize is called (includes prompt building)",
            "rss_sample_ms": RSS_SAMPLE_MS,
            "growth_from_request": GROWTH_FROM,
        },
    })
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

/// One request to its terminal event; anything but Done is an error.
fn run_one(session: &tts_actors::Session, req: Request) -> Result<RequestMetrics> {
    let mut s = session.synthesize_blocking(req)?;
    while let Some(e) = s.next_blocking() {
        match e {
            Event::Done { metrics, .. } => return Ok(*metrics),
            Event::Error { error, .. } => return Err(error.into()),
            Event::Cancelled { .. } => bail!("request cancelled"),
            Event::Started { .. } | Event::Audio(_) => {}
        }
    }
    bail!("stream ended without a terminal event")
}

pub fn bench(a: BenchArgs) -> Result<()> {
    if a.repeats == 0 {
        bail!("--repeats must be at least 1");
    }
    if a.concurrency.is_empty() || a.concurrency.contains(&0) {
        bail!("--concurrency levels must be at least 1");
    }
    let mut texts = Vec::new();
    for l in &a.lengths {
        match TEXTS.iter().find(|(n, _)| n == l) {
            Some(&(n, t)) => texts.push((n, t)),
            None => bail!("unknown --lengths entry {l:?}; use ten, short, medium or long"),
        }
    }
    let sampler = RssSampler::start(Duration::from_millis(RSS_SAMPLE_MS));
    let rss_start = sampler.now();
    let t_cold = Instant::now();
    let model: Arc<Qwen3Tts> = super::load(&a.model)?;
    let load_ms = t_cold.elapsed().as_secs_f64() * 1e3;
    // Weights are mapped, not read: this is what loading allocated (int8/q4
    // copies of the LM weights, code2wav, tokenizer).
    let rss_after_load = sampler.now();
    let max_conc = *a.concurrency.iter().max().expect("non-empty");
    let config = EngineConfig {
        chunks: ChunkSchedule::new(a.chunks.clone())?,
        prebuffer_ms: a.prebuffer_ms,
        max_active_requests: max_conc.max(1),
        stage_threads: a.stage_threads,
        ..EngineConfig::default()
    };
    let t_engine = Instant::now();
    let engine = Engine::start(model.clone(), config)?;
    let engine_start_ms = t_engine.elapsed().as_secs_f64() * 1e3;
    let cold_start_ms = t_cold.elapsed().as_secs_f64() * 1e3;
    // Load + quantization + engine start (quantization's scratch is freed
    // before the load returns: only the sampled peak sees it).
    let rss_load_peak = sampler.take_window_peak();

    let mut options = model.default_options();
    if a.greedy {
        options = options.greedy();
    }
    options.seed = a.seed;
    if let Some(n) = a.frames {
        if n == 0 {
            bail!("--frames must be at least 1");
        }
        options.max_frames = n;
        options.ignore_eos = true;
    } else if let Some(n) = a.max_frames {
        options.max_frames = n;
    }
    let speaker = model
        .speakers()
        .into_iter()
        .next()
        .context("checkpoint has no speakers")?;
    let show = !a.json && std::io::IsTerminal::is_terminal(&std::io::stderr());

    let request = |text: &str, seed: u64| {
        let mut opts = options.clone();
        opts.seed = seed;
        Request {
            text: text.to_string(),
            speaker: Some(speaker.clone()),
            language: "english".into(),
            instruct: None,
            text_streaming: a.text_streaming,
            options: opts,
        }
    };
    let mut prompt_rows = Vec::new();
    for &(_, text) in &texts {
        let p = model.build_prompt(&request(text, a.seed))?;
        prompt_rows.push((
            p.prefill.len() / p.hidden,
            // Text rows fed one per frame after the prefill (text streaming).
            if a.text_streaming {
                p.trailing.len() / p.hidden
            } else {
                0
            },
        ));
    }

    // Every request's record exists (label written, page touched) before
    // the first request, so the bench's own bookkeeping does not grow the
    // heap while the per-request RssAnon is read: a growth figure is the
    // engine's and the model's, not the bench's.
    let mut slots: Vec<Slot> = Vec::new();
    for &(len_name, _) in &texts {
        for &conc in &a.concurrency {
            for round in 0..a.warmup + a.repeats {
                let warmup = round < a.warmup;
                let rep = if warmup {
                    format!("w{round}")
                } else {
                    format!("r{}", round - a.warmup)
                };
                for i in 0..conc {
                    slots.push(Slot {
                        label: format!("{len_name}/c{conc}/{rep}/s{i}"),
                        length: len_name.to_string(),
                        concurrency: conc,
                        warmup,
                        done: None,
                    });
                }
            }
        }
    }
    let mut next_slot = slots.iter_mut();
    let mut cell_peaks: Vec<Option<u64>> = Vec::with_capacity(texts.len() * a.concurrency.len());
    for &(len_name, text) in &texts {
        for &conc in &a.concurrency {
            let sessions: Vec<_> = (0..conc).map(|_| engine.open_session()).collect();
            for round in 0..a.warmup + a.repeats {
                let warmup = round < a.warmup;
                type Done = (Result<RequestMetrics>, Option<u64>, Instant);
                let results: Vec<Done> = std::thread::scope(|scope| {
                    let sampler = &sampler;
                    let handles: Vec<_> = sessions
                        .iter()
                        .enumerate()
                        .map(|(i, session)| {
                            let req = request(text, a.seed.wrapping_add(i as u64));
                            scope.spawn(move || {
                                let r = run_one(session, req);
                                (r, sampler.now(), Instant::now())
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| {
                            h.join().unwrap_or_else(|_| {
                                (
                                    Err(anyhow::anyhow!("bench worker panicked")),
                                    None,
                                    Instant::now(),
                                )
                            })
                        })
                        .collect()
                });
                for (r, rss_after_kb, done_at) in results {
                    let slot = next_slot.next().expect("one slot per request");
                    debug_assert_eq!(slot.warmup, warmup);
                    let metrics = r.with_context(|| format!("request {}", slot.label))?;
                    slot.done = Some((metrics, rss_after_kb, done_at));
                }
                if show {
                    eprint!(
                        "\r{len_name} × {conc}: round {}/{}   ",
                        round + 1,
                        a.warmup + a.repeats
                    );
                }
            }
            cell_peaks.push(sampler.take_window_peak());
        }
    }
    if show {
        eprintln!();
    }
    let final_stats = engine.shutdown();
    let rss_end = sampler.now();
    let RssTotals {
        peak_kb: rss_peak,
        samples: rss_samples,
    } = sampler.stop();
    let rss_requests_peak = cell_peaks.iter().flatten().max().copied();
    let records: Vec<Record> = slots
        .into_iter()
        .map(|s| {
            let (metrics, rss_after_kb, done_at) = s.done.expect("every request ran");
            Record {
                label: s.label,
                length: s.length,
                concurrency: s.concurrency,
                warmup: s.warmup,
                metrics,
                rss_after_kb,
                done_at,
            }
        })
        .collect();

    if let Some(p) = &a.jsonl {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot write {}", p.display()))?,
        );
        for r in &records {
            let line = json!({"request": r.label, "length": r.length, "concurrency": r.concurrency, "warmup": r.warmup, "rss_anon_kb_after": r.rss_after_kb, "metrics": r.metrics});
            writeln!(f, "{line}")?;
        }
        f.flush()?;
    }

    let mut cells = Vec::new();
    let mut cell_peaks = cell_peaks.into_iter();
    for (&(len_name, _), &(prefill_rows, trailing_rows)) in texts.iter().zip(&prompt_rows) {
        for &conc in &a.concurrency {
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
            let count = |p: &dyn Fn(&RequestMetrics) -> bool| {
                measured.iter().filter(|r| p(&r.metrics)).count()
            };
            let warm_vals: Vec<(String, Option<f64>)> = warm
                .iter()
                .map(|r| (r.label.clone(), r.metrics.ttfp_ms))
                .collect();
            cells.push(json!({
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
                "prompt_rows": { "prefill": prefill_rows, "trailing_text": trailing_rows },
                "rss_anon_kb": {
                    "peak": cell_peaks.next().flatten(),
                    "after_request": after,
                    "after_request_labels": in_order.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(),
                    "growth": growth,
                    "growth_last_half": growth_last_half,
                },
            }));
        }
    }
    let doc = json!({
        "provenance": provenance(&model, &a),
        "cold_start_ms": cold_start_ms,
        "load_ms": load_ms,
        "engine_start_ms": engine_start_ms,
        "rss_anon_kb": {
            "start": rss_start,
            "after_load": rss_after_load,
            "load_peak": rss_load_peak,
            "requests_peak": rss_requests_peak,
            "peak": rss_peak,
            "end": rss_end,
            "samples": rss_samples,
            "sample_ms": RSS_SAMPLE_MS,
        },
        "engine": final_stats,
        "cells": cells,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_table(&doc, &a);
    }
    let incomplete: usize = doc["cells"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["n"].as_u64().unwrap_or(0) - c["complete"].as_u64().unwrap_or(0))
        .sum::<u64>() as usize;
    if incomplete > 0 {
        bail!("{incomplete} measured request(s) were incomplete (samples != frames × samples_per_frame)");
    }
    Ok(())
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

fn print_table(doc: &Value, a: &BenchArgs) {
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
            "  prompt {} prefill rows{}  RssAnon peak {}, after request 1 {}, after request {} {}",
            c["prompt_rows"]["prefill"],
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
            format!("; growth needs {} requests or more\n", GROWTH_FROM + 1)
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
