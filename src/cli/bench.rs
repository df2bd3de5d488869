//! `tts-rt bench`: drives the engine in-process over text lengths ×
//! concurrency levels × repeats and reports METRICS.md figures (nearest-rank
//! p50/p95/max with n and the argmax request; warm-ups excluded and
//! reported apart; cold start apart), per-stage attribution, memory
//! (RssAnon at start, after load, at its sampled peaks and at the end; after
//! every request, with a growth figure per cell) and provenance.
//!
//! This file holds the flags and the run in named steps (`bench` lists
//! them); `summary`: a cell's figures from its records; `report`: the
//! table; `rss`: RssAnon sampling and growth; `machine`: checkout, CPU and
//! load for the provenance; `voice`: what each family's requests speak with
//! (a Base checkpoint's cloned voice is made once, its cost reported) and
//! `--clone-cost`, the cost of making a voice.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use tts_actors::{
    ChunkSchedule, Engine, EngineConfig, EngineStats, Event, RequestMetrics, StageThreads, TeamHold,
};
use tts_audio::timing::Transcript;
use tts_models::{GenOptions, Qwen3Tts, Request};

use super::switches::Switches;
use super::ModelArg;

mod machine;
mod report;
mod rss;
mod scoreboard;
mod summary;
mod voice;

use machine::{cpu_model, git_commit, host_class, load_avg_1m};
use report::{print_table, TableOptions};
use rss::{RssSampler, RssTotals};
use summary::{incomplete_requests, summarise_cell, Record, GROWTH_FROM};
use voice::{BenchVoice, VoiceArgs};

/// RssAnon sampling period: a sample (seek, read, parse of the 1.4 kB
/// `/proc/self/status`) costs ≈ 7 µs here, 0.4% of a core at 2 ms, and the
/// allocations it has to catch (a prefill's activations, a quantization
/// pass) last far longer.
const RSS_SAMPLE_MS: u64 = 2;

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
    /// code2wav decodes on one core beside the LM stages while they step:
    /// `on` (the bare flag), `auto` (where measured cheaper) or `off` (see
    /// `serve --lend-core`). Refused beside a TTS_RT_TEAM_HOLD that never
    /// lends (anything but `lend`).
    #[arg(long, value_name = "WHEN", num_args = 0..=1, default_missing_value = "on")]
    lend_core: Option<super::serve_config::LendCore>,
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
    #[arg(long, value_delimiter = ',', default_values_t = tts_actors::config::DEFAULT_CHUNK_FRAMES)]
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
    /// Time every word of each request's audio as the server does for a
    /// client that asks (`timings`), on each request's client thread as it
    /// streams: rtf and ttfp with and without it show what it costs
    /// (benches/timings_cost.sh runs the two interleaved).
    #[arg(long)]
    word_timings: bool,
    /// The multi-session scoreboard: offer 1, 2, ... streams at once (up to
    /// --max-streams) with admission by measured real-time capacity, as
    /// `serve` runs it, each stream --frames frames (default 250: 20 s);
    /// prints how many stay continuous at --prebuffer-ms. The text is the
    /// first of --lengths; --repeats and --warmup are per level.
    #[arg(long)]
    scoreboard: bool,
    /// Most streams the scoreboard offers at once.
    #[arg(long, default_value_t = 6)]
    max_streams: usize,
    /// The scoreboard's admission by measured real-time capacity (as
    /// `serve --realtime-load`): 0..1 of the cores' time; 0 turns it off
    /// (then the fixed bound, --max-streams, admits).
    #[arg(long, default_value_t = 0.9)]
    realtime_load: f64,
    /// Frames the scoreboard's calibration may run before the first level
    /// (as `serve --calibrate-frames`; 0 skips it).
    #[arg(long, default_value_t = 1000)]
    calibrate_frames: usize,
    /// The stages take work by buffer slack (the stream closest to
    /// underrun first), or in arrival order with `false` (an A/B switch).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    slack_order: bool,
    /// A chunk leaves short of its --chunks size when waiting for one more
    /// frame would reach a listener with --prebuffer-ms after it ran dry
    /// (as `serve` runs), or by the schedule alone with `false` (an A/B
    /// switch).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pace_chunks: bool,
    #[command(flatten)]
    voice: VoiceArgs,
}

/// A request's record before it has run.
struct Slot {
    label: String,
    length: String,
    concurrency: usize,
    warmup: bool,
    done: Option<(RequestMetrics, Option<u64>, Instant)>,
}

fn provenance(model: &Qwen3Tts, a: &BenchArgs, switches: &Switches) -> Value {
    let t = &model.config.talker;
    let c = model.code2wav.config();
    // The switches as read at start (every `TTS_RT_*` one), and the thread
    // count's variable.
    let mut env: serde_json::Map<String, Value> = switches
        .raw
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    env.insert(
        "RAYON_NUM_THREADS".into(),
        json!(std::env::var("RAYON_NUM_THREADS").ok()),
    );
    json!({
        "git_commit": git_commit(),
        "cpu_model": cpu_model(),
        "isa": tts_kernels::isa().name(),
        "bf16_conv": tts_kernels::bf16_conv_path(),
        "threads": rayon::current_num_threads(),
        "stage_threads": a.stage_threads,
        "lend_core": a.lend_core.unwrap_or(super::serve_config::LendCore::Off).name(),
        "team_hold": switches.team_hold.map(TeamHold::name),
        "cores_online": std::thread::available_parallelism().ok().map(|n| n.get()),
        "load_avg_1m_at_start": load_avg_1m(),
        "precision": format!("f32 compute; talker weights {}, code predictor weights {} (f32 = as stored, BF16 in hub checkpoints); code2wav {}", model.precision.talker.name(), model.precision.code_predictor.name(), model.precision.code2wav.name()),
        "precision_spec": model.precision.name(),
        "prefix_cache_bytes": model.prefix_cache.budget(),
        "env": env,
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
            "pace_chunks": a.pace_chunks,
            "word_timings": a.word_timings,
            "prebuffer_ms": a.prebuffer_ms,
            "t_req": "client side: when Session::synthesize is called (includes prompt building)",
            "rss_sample_ms": RSS_SAMPLE_MS,
            "growth_from_request": GROWTH_FROM,
        },
    })
}

/// One request to its terminal event; anything but Done is an error.
/// `word_timings`: its words are timed as its audio arrives.
fn run_one(
    session: &tts_actors::Session,
    req: Request,
    word_timings: bool,
) -> Result<RequestMetrics> {
    let mut timing: Option<Transcript> = None;
    let text = word_timings.then(|| req.text.clone());
    let mut s = session.synthesize_blocking(req)?;
    while let Some(e) = s.next_blocking() {
        match e {
            Event::Done { metrics, .. } => {
                if let Some(t) = &mut timing {
                    std::hint::black_box(t.utterance_done());
                    std::hint::black_box(t.finish());
                }
                return Ok(*metrics);
            }
            Event::Error { error, .. } => return Err(error.into()),
            Event::Cancelled { .. } => bail!("request cancelled"),
            Event::Audio(c) => {
                if let Some(text) = &text {
                    let t = timing.get_or_insert_with(|| {
                        let mut t = Transcript::new(c.sample_rate, 1.0);
                        t.append(text);
                        t.speak(text);
                        t
                    });
                    std::hint::black_box(t.audio(&c.samples));
                }
            }
            Event::Started { .. } => {}
        }
    }
    bail!("stream ended without a terminal event")
}

/// The whole run, in the order its steps happen: check the flags, load the
/// model and start the engine, build the workload, run every cell (warm-up
/// rounds first, then the measured ones, for each text length and
/// concurrency), sample memory at the end, summarise each cell, and print
/// the table or the JSON document.
pub fn bench(a: BenchArgs, switches: &Switches) -> Result<()> {
    if a.voice.clone_cost {
        // The encoders only: the LMs' precision does not matter here.
        let model = super::load(&a.model, super::realtime::Use::File, false)?;
        let prov = provenance(&model, &a, switches);
        return voice::clone_cost(&model, &a.voice, prov, a.json);
    }
    if a.scoreboard {
        return run_scoreboard(a, switches);
    }
    let texts = check_args(&a)?;
    // Checked before the model loads (e.g. `--lend-core` beside a
    // `TTS_RT_TEAM_HOLD` that never lends is refused at once).
    let config = engine_config(&a, switches.team_hold)?;
    config.validate()?;
    // Before memory is sampled: the read probe's buffer is not the model's.
    let host = host_class();
    let sampler = RssSampler::start(Duration::from_millis(RSS_SAMPLE_MS));
    let started = load_and_start(&a, config, &sampler)?;
    let bench_voice = BenchVoice::make(&started.model, &a.voice)?;
    let workload = Workload::new(&a, &started.model, texts, bench_voice)?;
    let show = !a.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut slots = plan_slots(&workload.texts, &a);
    let cell_peaks = run_cells(&a, &started.engine, &workload, &sampler, &mut slots, show)?;
    let Started {
        model,
        engine,
        times,
        rss_load,
    } = started;
    let final_stats = engine.shutdown();
    let memory = sample_end(sampler, &cell_peaks);
    let records = into_records(slots);
    if let Some(p) = &a.jsonl {
        write_jsonl(p, &records)?;
    }
    let cells = summarise_cells(&a, &workload, &records, cell_peaks)?;
    let mut prov = provenance(&model, &a, switches);
    prov["host"] = host;
    let mut doc = document(prov, times, rss_load, memory, final_stats, cells);
    doc["voice"] = workload.voice.summary.clone();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("{}", voice::describe(&doc["voice"]));
        print_table(
            &doc,
            &TableOptions {
                frames: a.frames,
                text_streaming: a.text_streaming,
                prebuffer_ms: a.prebuffer_ms,
                growth_from: GROWTH_FROM,
            },
        );
    }
    let incomplete = incomplete_requests(&doc);
    if incomplete > 0 {
        bail!("{incomplete} measured request(s) were incomplete (samples != frames × samples_per_frame)");
    }
    Ok(())
}

/// `--scoreboard`: the engine started and calibrated as `serve` does, then
/// the climb ([`scoreboard`]), printed as a table or one JSON document.
fn run_scoreboard(mut a: BenchArgs, switches: &Switches) -> Result<()> {
    if !(1..=64).contains(&a.max_streams) {
        bail!("--max-streams must be 1 to 64, got {}", a.max_streams);
    }
    if !(0.0..=1.0).contains(&a.realtime_load) {
        bail!(
            "--realtime-load must be 0 (off) to 1, got {}",
            a.realtime_load
        );
    }
    if a.calibrate_frames > 10_000 {
        bail!(
            "--calibrate-frames must be 0 (skip) to 10000, got {}",
            a.calibrate_frames
        );
    }
    a.frames = Some(a.frames.unwrap_or(250));
    a.concurrency = vec![a.max_streams];
    let texts = check_args(&a)?;
    let mut config = engine_config(&a, switches.team_hold)?;
    config.realtime_load = (a.realtime_load > 0.0).then_some(a.realtime_load);
    config.validate()?;
    let host = host_class();
    let sampler = RssSampler::start(Duration::from_millis(RSS_SAMPLE_MS));
    let started = load_and_start(&a, config.clone(), &sampler)?;
    let show = !a.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let calibration = match config.realtime_load {
        Some(_) if a.calibrate_frames > 0 => {
            let t = Instant::now();
            let streams = started.engine.calibrate(a.calibrate_frames)?;
            json!({"streams": streams, "ms": t.elapsed().as_secs_f64() * 1e3})
        }
        _ => Value::Null,
    };
    let bench_voice = BenchVoice::make(&started.model, &a.voice)?;
    let workload = Workload::new(&a, &started.model, texts.clone(), bench_voice)?;
    let plan = scoreboard::Plan {
        max_streams: a.max_streams,
        warmup: a.warmup,
        repeats: a.repeats,
        seed: a.seed,
        text: texts[0].1,
        show,
    };
    let levels = scoreboard::climb(&started.engine, &workload, &plan)?;
    let stats = started.engine.stats();
    let model = started.model.clone();
    let final_stats = started.engine.shutdown();
    let frame_rate = model.code2wav.config().frame_rate();
    let mut prov = provenance(&model, &a, switches);
    prov["host"] = host;
    let doc = json!({
        "provenance": prov,
        "voice": workload.voice.summary.clone(),
        "scoreboard": {
            "text": texts[0].0,
            "frames": a.frames,
            "prebuffer_ms": a.prebuffer_ms,
            "admission": match config.realtime_load {
                Some(l) => format!("measured real-time capacity at load {l}, at most {}", a.max_streams),
                None => format!("fixed bound of {}", a.max_streams),
            },
            "slack_order": a.slack_order,
            "calibration": calibration,
            "capacity_streams": stats.capacity_streams,
            "one_stream_load": stats.one_stream_load,
            "measured_streams": stats.measured_streams,
            "held_for_slack": final_stats.held_for_slack,
            "code2wav_steps_held_lent": final_stats.placement_steps,
            "levels": levels.iter().map(|l| scoreboard::level_json(l, frame_rate)).collect::<Vec<_>>(),
            "continuous_streams": scoreboard::continuous_streams(&levels),
        },
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("{}", voice::describe(&doc["voice"]));
        scoreboard::print(&doc);
    }
    Ok(())
}

/// A text length's name and its text.
type Text = (&'static str, &'static str);

/// The flags checked before anything is loaded; the built-in texts
/// `--lengths` names, in its order.
fn check_args(a: &BenchArgs) -> Result<Vec<Text>> {
    if a.repeats == 0 {
        bail!("--repeats must be at least 1");
    }
    if a.concurrency.is_empty() || a.concurrency.contains(&0) {
        bail!("--concurrency levels must be at least 1");
    }
    select_texts(&a.lengths)
}

/// The built-in texts named by `lengths`, in its order.
fn select_texts(lengths: &[String]) -> Result<Vec<Text>> {
    let mut texts = Vec::new();
    for l in lengths {
        match TEXTS.iter().find(|(n, _)| n == l) {
            Some(&(n, t)) => texts.push((n, t)),
            None => bail!("unknown --lengths entry {l:?}; use ten, short, medium or long"),
        }
    }
    Ok(texts)
}

/// The engine's config: sized for the largest concurrency level, with the
/// placement flags and `TTS_RT_TEAM_HOLD` (`team_hold`).
fn engine_config(a: &BenchArgs, team_hold: Option<TeamHold>) -> Result<EngineConfig> {
    let max_conc = *a.concurrency.iter().max().expect("non-empty");
    Ok(EngineConfig {
        chunks: ChunkSchedule::new(a.chunks.clone())?,
        prebuffer_ms: a.prebuffer_ms,
        pace_chunks: a.pace_chunks,
        max_active_requests: max_conc.max(1),
        stage_threads: a.stage_threads,
        lend_core: a.lend_core == Some(super::serve_config::LendCore::On),
        lend_measured: a.lend_core == Some(super::serve_config::LendCore::Auto),
        team_hold,
        slack_order: a.slack_order,
        ..EngineConfig::default()
    })
}

/// Cold-start timings (ms).
#[derive(Clone, Copy)]
struct StartTimes {
    /// From before the load to a running engine.
    cold_start_ms: f64,
    load_ms: f64,
    engine_start_ms: f64,
}

/// RssAnon (kB) around the load.
#[derive(Clone, Copy)]
struct LoadMemory {
    start: Option<u64>,
    after_load: Option<u64>,
    /// The sampled peak of load + quantization + engine start.
    load_peak: Option<u64>,
}

/// The model loaded and the engine running, with what that cost.
struct Started {
    model: Arc<Qwen3Tts>,
    engine: Engine,
    times: StartTimes,
    rss_load: LoadMemory,
}

/// Step 1: load the checkpoint and start the engine (sized for the largest
/// concurrency level), timing both and sampling RssAnon around them.
fn load_and_start(a: &BenchArgs, config: EngineConfig, sampler: &RssSampler) -> Result<Started> {
    let rss_start = sampler.now();
    let t_cold = Instant::now();
    // bench measures what `serve` does: the same default precision.
    let model: Arc<Qwen3Tts> = super::load(&a.model, super::realtime::Use::Live, true)?;
    let load_ms = t_cold.elapsed().as_secs_f64() * 1e3;
    // Weights are mapped, not read: this is what loading allocated (int8/q4
    // copies of the LM weights, code2wav, tokenizer).
    let rss_after_load = sampler.now();
    let t_engine = Instant::now();
    let engine = Engine::start(model.clone(), config)?;
    let engine_start_ms = t_engine.elapsed().as_secs_f64() * 1e3;
    let cold_start_ms = t_cold.elapsed().as_secs_f64() * 1e3;
    // Load + quantization + engine start (quantization's scratch is freed
    // before the load returns: only the sampled peak sees it).
    let rss_load_peak = sampler.take_window_peak();
    Ok(Started {
        model,
        engine,
        times: StartTimes {
            cold_start_ms,
            load_ms,
            engine_start_ms,
        },
        rss_load: LoadMemory {
            start: rss_start,
            after_load: rss_after_load,
            load_peak: rss_load_peak,
        },
    })
}

/// What every request of the run is made from.
struct Workload {
    texts: Vec<Text>,
    options: GenOptions,
    voice: BenchVoice,
    text_streaming: bool,
    /// Time each request's words as its audio streams (`--word-timings`).
    word_timings: bool,
    /// Per text: prefill rows, text rows fed one per frame after it, and
    /// the leading prefill rows the prefix cache shares (0 when it is off).
    prompt_rows: Vec<(usize, usize, usize)>,
}

impl Workload {
    /// Step 2: the generation options from the flags, the voice (the
    /// checkpoint's first speaker, a cloned voice or a description), and
    /// each text's prompt size.
    fn new(
        a: &BenchArgs,
        model: &Qwen3Tts,
        texts: Vec<Text>,
        voice: BenchVoice,
    ) -> Result<Workload> {
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
        let mut w = Workload {
            texts,
            options,
            voice,
            text_streaming: a.text_streaming,
            word_timings: a.word_timings,
            prompt_rows: Vec::new(),
        };
        for &(_, text) in &w.texts {
            let p = model.build_prompt(&w.request(text, a.seed))?;
            w.prompt_rows.push((
                p.prefill.len() / p.hidden,
                // Text rows fed one per frame after the prefill (text streaming).
                if a.text_streaming {
                    p.trailing.len() / p.hidden
                } else {
                    0
                },
                if model.prefix_cache.is_enabled() {
                    p.cacheable_rows()
                } else {
                    0
                },
            ));
        }
        Ok(w)
    }

    /// The request for `text` with sampling seed `seed`.
    fn request(&self, text: &str, seed: u64) -> Request {
        let mut opts = self.options.clone();
        opts.seed = seed;
        Request {
            text: text.to_string(),
            speaker: self.voice.speaker.clone(),
            language: "english".into(),
            instruct: self.voice.instruct.clone(),
            voice_clone: self.voice.voice_clone.clone(),
            text_streaming: self.text_streaming,
            options: opts,
        }
    }
}

/// Step 3: every request's record, in the order the requests will finish
/// their rounds (length, concurrency, round, session), labelled
/// `LENGTH/cCONC/{wN|rN}/sI`.
///
/// Every record exists (label written, page touched) before the first
/// request, so the bench's own bookkeeping does not grow the heap while the
/// per-request RssAnon is read: a growth figure is the engine's and the
/// model's, not the bench's.
fn plan_slots(texts: &[Text], a: &BenchArgs) -> Vec<Slot> {
    plan_slots_for(texts, &a.concurrency, a.warmup, a.repeats)
}

fn plan_slots_for(texts: &[Text], levels: &[usize], warmups: usize, repeats: usize) -> Vec<Slot> {
    let mut slots: Vec<Slot> = Vec::new();
    for &(len_name, _) in texts {
        for &conc in levels {
            for round in 0..warmups + repeats {
                let warmup = round < warmups;
                let rep = if warmup {
                    format!("w{round}")
                } else {
                    format!("r{}", round - warmups)
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
    slots
}

/// A request's outcome, the RssAnon its thread read right after it, and
/// when it ended.
type Done = (Result<RequestMetrics>, Option<u64>, Instant);

/// Step 4: run every cell, one round at a time (warm-ups first), filling
/// `slots` in order; each cell's sampled RssAnon peak, in cell order.
fn run_cells(
    a: &BenchArgs,
    engine: &Engine,
    workload: &Workload,
    sampler: &RssSampler,
    slots: &mut [Slot],
    show: bool,
) -> Result<Vec<Option<u64>>> {
    let mut next_slot = slots.iter_mut();
    let mut cell_peaks: Vec<Option<u64>> =
        Vec::with_capacity(workload.texts.len() * a.concurrency.len());
    for &(len_name, text) in &workload.texts {
        for &conc in &a.concurrency {
            let sessions: Vec<_> = (0..conc).map(|_| engine.open_session()).collect();
            for round in 0..a.warmup + a.repeats {
                let warmup = round < a.warmup;
                let results = run_round(&sessions, workload, text, a.seed, sampler);
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
    Ok(cell_peaks)
}

/// One round: one request per session, all at once, each on its own
/// thread (session `i` samples with seed `seed + i`); results in session
/// order.
fn run_round(
    sessions: &[tts_actors::Session],
    workload: &Workload,
    text: &str,
    seed: u64,
    sampler: &RssSampler,
) -> Vec<Done> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = sessions
            .iter()
            .enumerate()
            .map(|(i, session)| {
                let req = workload.request(text, seed.wrapping_add(i as u64));
                let timed = workload.word_timings;
                scope.spawn(move || {
                    let r = run_one(session, req, timed);
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
    })
}

/// RssAnon (kB) after the run.
struct EndMemory {
    end: Option<u64>,
    peak: Option<u64>,
    samples: u64,
    /// The highest of the cells' peaks.
    requests_peak: Option<u64>,
}

/// Step 5: the last memory figures, stopping the sampler.
fn sample_end(sampler: RssSampler, cell_peaks: &[Option<u64>]) -> EndMemory {
    let end = sampler.now();
    let RssTotals { peak_kb, samples } = sampler.stop();
    EndMemory {
        end,
        peak: peak_kb,
        samples,
        requests_peak: cell_peaks.iter().flatten().max().copied(),
    }
}

fn into_records(slots: Vec<Slot>) -> Vec<Record> {
    slots
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
        .collect()
}

/// `--jsonl`: one line per request, warm-ups included and marked.
fn write_jsonl(p: &std::path::Path, records: &[Record]) -> Result<()> {
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(p).with_context(|| format!("cannot write {}", p.display()))?,
    );
    for r in records {
        let line = json!({"request": r.label, "length": r.length, "concurrency": r.concurrency, "warmup": r.warmup, "rss_anon_kb_after": r.rss_after_kb, "metrics": r.metrics});
        writeln!(f, "{line}")?;
    }
    f.flush()?;
    Ok(())
}

/// Step 6: one summary per cell, in run order.
fn summarise_cells(
    a: &BenchArgs,
    workload: &Workload,
    records: &[Record],
    cell_peaks: Vec<Option<u64>>,
) -> Result<Vec<Value>> {
    let mut cells = Vec::new();
    let mut cell_peaks = cell_peaks.into_iter();
    for (&(len_name, _), &prompt_rows) in workload.texts.iter().zip(&workload.prompt_rows) {
        for &conc in &a.concurrency {
            let peak = cell_peaks.next().flatten();
            cells.push(summarise_cell(records, len_name, conc, prompt_rows, peak)?);
        }
    }
    Ok(cells)
}

/// Step 7: the JSON document: provenance, cold start, memory, the engine's
/// final counters and the cells.
fn document(
    provenance: Value,
    times: StartTimes,
    rss_load: LoadMemory,
    memory: EndMemory,
    final_stats: EngineStats,
    cells: Vec<Value>,
) -> Value {
    json!({
        "provenance": provenance,
        "cold_start_ms": times.cold_start_ms,
        "load_ms": times.load_ms,
        "engine_start_ms": times.engine_start_ms,
        "rss_anon_kb": {
            "start": rss_load.start,
            "after_load": rss_load.after_load,
            "load_peak": rss_load.load_peak,
            "requests_peak": memory.requests_peak,
            "peak": memory.peak,
            "end": memory.end,
            "samples": memory.samples,
            "sample_ms": RSS_SAMPLE_MS,
        },
        "engine": final_stats,
        "cells": cells,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_keep_their_order_and_an_unknown_one_names_the_choices() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let t = select_texts(&names(&["long", "ten"])).unwrap();
        assert_eq!(t.iter().map(|t| t.0).collect::<Vec<_>>(), ["long", "ten"]);
        let e = select_texts(&names(&["short", "huge"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown --lengths entry \"huge\"; use ten, short, medium or long"
        );
    }

    #[test]
    fn slots_run_warmups_then_repeats_per_cell_one_per_session() {
        let texts = [TEXTS[1], TEXTS[0]];
        let slots = plan_slots_for(&texts, &[1, 2], 1, 2);
        // 2 lengths × (1 + 2 sessions) × (1 warm-up + 2 repeats).
        assert_eq!(slots.len(), 2 * 3 * 3);
        let labels: Vec<&str> = slots.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            &labels[..9],
            [
                "short/c1/w0/s0",
                "short/c1/r0/s0",
                "short/c1/r1/s0",
                "short/c2/w0/s0",
                "short/c2/w0/s1",
                "short/c2/r0/s0",
                "short/c2/r0/s1",
                "short/c2/r1/s0",
                "short/c2/r1/s1",
            ]
        );
        assert_eq!(labels[9], "ten/c1/w0/s0");
        let warm: Vec<bool> = slots[3..9].iter().map(|s| s.warmup).collect();
        assert_eq!(warm, [true, true, false, false, false, false]);
        assert!(slots.iter().all(|s| s.done.is_none()));
    }

    #[test]
    fn no_warmup_rounds_label_repeats_from_r0() {
        let slots = plan_slots_for(&[TEXTS[0]], &[1], 0, 2);
        let labels: Vec<&str> = slots.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["ten/c1/r0/s0", "ten/c1/r1/s0"]);
    }
}
