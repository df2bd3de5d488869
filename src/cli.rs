//! Argument parsing and the subcommands.

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use tts_actors::{Engine, EngineConfig, Event};
use tts_audio::{WavFormat, WavSink};
use tts_models::quant::Precision;
use tts_models::{GenOptions, LoadOptions, Qwen3Tts, Request};

use crate::model_path;

mod bench;
mod client;
mod play;

#[derive(Parser)]
#[command(
    name = "tts-rt",
    version,
    about = "Real-time Qwen3-TTS on ordinary CPUs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Kernel threads (the global rayon pool; default: one per core, or
    /// $RAYON_NUM_THREADS).
    #[arg(long, global = true)]
    threads: Option<usize>,
}

#[derive(Subcommand)]
enum Command {
    /// Synthesize TEXT (or stdin) to a WAV file and/or play it live (--play).
    Speak(SpeakArgs),
    /// Decode codes (JSON array of frames) to a WAV file with code2wav only.
    Decode(DecodeArgs),
    /// List the speakers and languages a checkpoint offers.
    Voices(ModelArg),
    /// Write a random-weight checkpoint in the Hugging Face layout.
    GenCheckpoint(GenArgs),
    /// Benchmark the streaming engine: text lengths × concurrency × repeats.
    Bench(bench::BenchArgs),
    /// Serve the realtime WebSocket API and OpenAI-compatible HTTP.
    Serve(serve::ServeArgs),
    /// List the audio output devices `--play --device` can use.
    Devices,
    /// Speak TEXT through a running `tts-rt serve` (realtime WebSocket):
    /// play it as it arrives and/or write a WAV; print the server's metrics.
    Client(client::ClientArgs),
}

mod serve;

/// `--precision fast`: the fastest setting that passes every fidelity gate
/// (docs/performance.md, "The yardstick" and "code2wav in bf16").
const FAST_PRECISION: &str = "int8,int8,bf16";

#[derive(Args)]
struct ModelArg {
    /// Checkpoint directory (default: $TTS_RT_MODEL, else the Hugging Face
    /// cache entry of Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Weight precision: TALKER[,CODE_PREDICTOR[,CODE2WAV]], or `fast`.
    /// The LMs: f32 (the stored weights, f32 compute), int8 (per-channel)
    /// or q4 (4-bit, groups of 32), quantized at load. int8 passes its
    /// fidelity gates (closer to f32 than the official bf16 is, on random
    /// weights; trained weights unmeasured); q4 fails them. CODE2WAV: f32
    /// (default) or bf16 (the vocoder's convolutions with bf16 weights and
    /// activations, f32 accumulation; ~2x faster code2wav with avx512_bf16,
    /// passes its waveform-SNR gate), e.g. `f32,f32,bf16`. `fast` is
    /// `int8,int8,bf16`, the fastest setting that passes every gate
    /// (docs/performance.md).
    #[arg(long, default_value = "f32", value_parser = parse_precision)]
    precision: LoadOptions,
    /// Cache int8/q4-converted LM weights in DIR: the first load writes
    /// them, later loads memory-map them (no conversion, weights shared
    /// between processes instead of per-process memory). Off by default.
    #[arg(long, value_name = "DIR", env = "TTS_RT_WEIGHTS_CACHE")]
    weights_cache: Option<PathBuf>,
}

/// `f32`, `int8`, `q4`, `TALKER,CODE_PREDICTOR` (e.g. `q4,int8`),
/// `TALKER,CODE_PREDICTOR,CODE2WAV` (e.g. `f32,f32,bf16`) or `fast`
/// (`int8,int8,bf16`).
pub(crate) fn parse_precision(s: &str) -> std::result::Result<LoadOptions, String> {
    let s = if s.trim().eq_ignore_ascii_case("fast") {
        FAST_PRECISION
    } else {
        s
    };
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.len() > 3 {
        return Err(format!(
            "{s:?}: give one precision, two (talker,code predictor) or three \
             (talker,code predictor,code2wav)"
        ));
    }
    let talker: Precision = parts[0].parse().map_err(|e| {
        if parts.len() == 1 {
            format!("talker precision: {e}; or `fast` ({FAST_PRECISION})")
        } else {
            format!("talker precision: {e}")
        }
    })?;
    let code_predictor = match parts.get(1) {
        Some(p) => p
            .parse()
            .map_err(|e| format!("code predictor precision: {e}"))?,
        None => talker,
    };
    let code2wav = match parts.get(2) {
        Some(p) => p.parse()?,
        None => tts_models::Code2WavPrecision::F32,
    };
    Ok(LoadOptions {
        talker,
        code_predictor,
        code2wav,
        weights_cache: None,
    })
}

#[derive(Args)]
struct OutArgs {
    /// Output WAV path, or `-` for stdout (`speak`: optional with --play).
    #[arg(long)]
    out: Option<PathBuf>,
    /// pcm16 (default) or f32 (exact model output).
    #[arg(long, default_value = "pcm16")]
    wav_format: WavFormat,
    /// Decode with the stateful streaming decoder instead of the official
    /// 300/25-frame chunked decode (identical up to 300 frames; beyond that
    /// the streaming decoder equals a whole-utterance decode). `speak
    /// --stream` runs the streaming engine and writes chunks as they arrive.
    #[arg(long)]
    stream: bool,
}

#[derive(Args)]
struct SpeakArgs {
    /// Text to speak; omitted or `-`: read stdin.
    text: Option<String>,
    #[command(flatten)]
    model: ModelArg,
    /// Speaker (see `tts-rt voices`); default: the checkpoint's first.
    #[arg(long)]
    speaker: Option<String>,
    /// Language (see `tts-rt voices`) or auto.
    #[arg(long, default_value = "auto")]
    language: String,
    /// Style instruction (used by 1.7B checkpoints; 0.6B ignores it, as upstream).
    #[arg(long)]
    instruct: Option<String>,
    /// RNG seed for sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Greedy decoding for both the talker and the code predictor.
    #[arg(long)]
    greedy: bool,
    /// Frames to generate at most (12.5 per second of audio for 12Hz
    /// checkpoints); default from generation_config.json (max_new_tokens - 1).
    #[arg(long)]
    max_frames: Option<usize>,
    /// Never stop on the end-of-speech token: generate exactly --max-frames
    /// frames (benchmarks on fixed lengths).
    #[arg(long, requires = "max_frames")]
    ignore_eos: bool,
    #[arg(long)]
    temperature: Option<f32>,
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long)]
    top_p: Option<f32>,
    #[arg(long)]
    repetition_penalty: Option<f32>,
    #[arg(long)]
    cp_temperature: Option<f32>,
    #[arg(long)]
    cp_top_k: Option<usize>,
    #[arg(long)]
    cp_top_p: Option<f32>,
    /// Feed the text alongside the frames (official non_streaming_mode=False).
    #[arg(long)]
    text_streaming: bool,
    /// Print per-stage timings as one JSON line on stderr.
    #[arg(long)]
    timings: bool,
    /// Also write the generated codes as JSON (array of frames).
    #[arg(long)]
    codes_out: Option<PathBuf>,
    #[command(flatten)]
    out: OutArgs,
    #[command(flatten)]
    play: play::PlayArgs,
}

#[derive(Args)]
struct DecodeArgs {
    #[command(flatten)]
    model: ModelArg,
    /// JSON array of frames, each an array of num_code_groups integers.
    #[arg(long)]
    codes: PathBuf,
    #[command(flatten)]
    out: OutArgs,
}

#[derive(Args)]
struct GenArgs {
    /// tiny, 0.6b or 1.7b.
    #[arg(long)]
    preset: String,
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Copy the text tokenizer (vocab.json, merges.txt, tokenizer_config.json)
    /// from this checkpoint directory instead of writing the small synthetic
    /// one, e.g. `tests/fixtures/tiny-b`, which carries the real Qwen
    /// vocabulary: the synthetic one spends about one token per character,
    /// so prompts (and prefill times) come out ~2x longer than a real
    /// checkpoint's.
    #[arg(long)]
    tokenizer_from: Option<PathBuf>,
}

pub fn run() -> Result<()> {
    let cli = Cli::parse();
    if let Some(n) = cli.threads {
        anyhow::ensure!(n >= 1, "--threads must be at least 1");
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .context("setting the kernel thread count (--threads)")?;
    }
    match cli.command {
        Command::Speak(a) => speak(a),
        Command::Decode(a) => decode(a),
        Command::Voices(a) => voices(a),
        Command::GenCheckpoint(a) => gen_checkpoint(a),
        Command::Bench(a) => bench::bench(a),
        Command::Serve(a) => serve::serve(a),
        Command::Devices => play::devices(),
        Command::Client(a) => client::client(a),
    }
}

fn load(model: &ModelArg) -> Result<Arc<Qwen3Tts>> {
    let dir = model_path::resolve(model.model.as_deref())?;
    let t = Instant::now();
    let options = model
        .precision
        .with_weights_cache(model.weights_cache.as_deref());
    let m = Qwen3Tts::load_with(&dir, options)
        .with_context(|| format!("loading checkpoint {}", dir.display()))?;
    if std::io::stderr().is_terminal() {
        let cache: Vec<String> = m
            .weights_cache
            .iter()
            .map(|e| format!("{} {}: {:?}", e.stage, e.precision, e.status))
            .collect();
        eprintln!(
            "loaded {} in {:.1} s{}",
            dir.display(),
            t.elapsed().as_secs_f64(),
            if cache.is_empty() {
                String::new()
            } else {
                format!(" (weights cache: {})", cache.join("; "))
            }
        );
    }
    Ok(Arc::new(m))
}

/// Where audio goes: a file (opened before the model loads, so an unwritable
/// path fails fast) or stdout (buffered: WAV needs a seekable header).
enum Output {
    File(PathBuf, File),
    Stdout,
}

impl Output {
    fn open(path: &Path) -> Result<Self> {
        if path == Path::new("-") {
            return Ok(Output::Stdout);
        }
        let f = File::create(path)
            .with_context(|| format!("cannot write output {}", path.display()))?;
        Ok(Output::File(path.to_path_buf(), f))
    }

    fn write(self, samples: &[f32], rate: u32, format: WavFormat) -> Result<()> {
        match self {
            Output::File(path, f) => {
                let mut sink = WavSink::new(std::io::BufWriter::new(f), rate, format)?;
                sink.write(samples)?;
                sink.finish()
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Output::Stdout => {
                let bytes = tts_audio::wav_bytes(samples, rate, format)?;
                let mut out = std::io::stdout().lock();
                out.write_all(&bytes)?;
                out.flush()?;
            }
        }
        Ok(())
    }
}

/// An output being written chunk by chunk: a file grows as audio arrives;
/// stdout is collected (WAV needs its header's length up front).
enum AudioWriter {
    File(PathBuf, WavSink<std::io::BufWriter<File>>),
    Stdout(Vec<f32>, u32, WavFormat),
}

impl AudioWriter {
    fn open(out: Output, rate: u32, format: WavFormat) -> Result<Self> {
        Ok(match out {
            Output::File(path, f) => AudioWriter::File(
                path,
                WavSink::new(std::io::BufWriter::new(f), rate, format)?,
            ),
            Output::Stdout => AudioWriter::Stdout(Vec::new(), rate, format),
        })
    }

    fn write(&mut self, samples: &[f32]) -> Result<()> {
        match self {
            AudioWriter::File(path, sink) => sink
                .write(samples)
                .with_context(|| format!("writing {}", path.display()))?,
            AudioWriter::Stdout(buf, ..) => buf.extend_from_slice(samples),
        }
        Ok(())
    }

    fn finish(self) -> Result<()> {
        match self {
            AudioWriter::File(path, sink) => sink
                .finish()
                .with_context(|| format!("writing {}", path.display()))?,
            AudioWriter::Stdout(buf, rate, format) => Output::Stdout.write(&buf, rate, format)?,
        }
        Ok(())
    }
}

fn read_text(arg: Option<String>) -> Result<String> {
    let text = match arg.as_deref() {
        None | Some("-") => {
            if std::io::stdin().is_terminal() {
                bail!("no text given: pass TEXT or pipe it on stdin");
            }
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading text from stdin")?;
            s
        }
        Some(t) => t.to_string(),
    };
    let text = text.trim().to_string();
    if text.is_empty() {
        bail!("text is empty: nothing to say");
    }
    Ok(text)
}

fn speak(a: SpeakArgs) -> Result<()> {
    let text = read_text(a.text)?;
    let out = match &a.out.out {
        Some(p) => Some(Output::open(p)?),
        None if a.play.play => None,
        None => bail!("nothing to do: give --out FILE (or - for stdout) and/or --play"),
    };
    let model = load(&a.model)?;
    let mut opts: GenOptions = model.default_options();
    if let Some(v) = a.temperature {
        opts.talker.temperature = v;
    }
    if let Some(v) = a.top_k {
        opts.talker.top_k = v;
    }
    if let Some(v) = a.top_p {
        opts.talker.top_p = v;
    }
    if let Some(v) = a.repetition_penalty {
        opts.repetition_penalty = v;
    }
    if let Some(v) = a.cp_temperature {
        opts.code_predictor.temperature = v;
    }
    if let Some(v) = a.cp_top_k {
        opts.code_predictor.top_k = v;
    }
    if let Some(v) = a.cp_top_p {
        opts.code_predictor.top_p = v;
    }
    if a.greedy {
        opts = opts.greedy();
    }
    opts.seed = a.seed;
    opts.ignore_eos = a.ignore_eos;
    let max_positions = model.config.talker.lm.max_position_embeddings;
    if let Some(n) = a.max_frames {
        if n == 0 {
            bail!("--max-frames must be at least 1");
        }
        if n >= max_positions {
            bail!(
                "--max-frames {n} is beyond what this checkpoint can attend to ({max_positions} positions ≈ {:.0} min of audio)",
                max_positions as f64 / model.code2wav.config().frame_rate() / 60.0
            );
        }
        opts.max_frames = n;
    }
    let speaker = match a.speaker {
        Some(s) => s,
        None => model
            .speakers()
            .into_iter()
            .next()
            .context("checkpoint has no speakers (spk_id is empty)")?,
    };
    let req = Request {
        text,
        speaker: Some(speaker),
        language: a.language,
        instruct: a.instruct,
        text_streaming: a.text_streaming,
        options: opts,
    };
    // --play always takes the streaming engine path: playback starts with
    // the first chunk instead of after the whole utterance.
    if a.out.stream || a.play.play {
        return speak_streamed(
            model,
            req,
            out,
            a.out.wav_format,
            &a.play,
            a.codes_out.as_deref(),
            a.timings,
        );
    }
    let out = out.expect("--out is given when --play is not");
    let t_total = Instant::now();
    let mut gen = model.start(&req)?;
    let prompt_rows = gen.prompt().prefill_rows();
    let frames_cap = req
        .options
        .max_frames
        .min(max_positions.saturating_sub(prompt_rows + 1));
    let groups = gen.num_code_groups();
    let show = std::io::stderr().is_terminal();
    let t0 = Instant::now();
    let fps = model.code2wav.config().frame_rate();
    let mut codes: Vec<u32> = Vec::new();
    let mut n = 0usize;
    while n < frames_cap {
        let Some(frame) = gen.next_frame() else { break };
        codes.extend(frame);
        n += 1;
        if show && n.is_multiple_of(5) {
            eprint!(
                "\rgenerating: {n} frames ({:.1} s of audio) in {:.1} s",
                n as f64 / fps,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    if show {
        eprintln!(
            "\rgenerated {n} frames ({:.2} s of audio) in {:.2} s{}",
            n as f64 / fps,
            t0.elapsed().as_secs_f64(),
            match gen.stop_reason() {
                Some(tts_models::synth::StopReason::Eos) => "",
                _ => " (stopped at --max-frames, no end-of-speech token)",
            }
        );
    }
    if let Some(p) = &a.codes_out {
        write_codes(p, &codes, groups)?;
    }
    let t_dec = Instant::now();
    let wav = model.code2wav.decode_on_pool(&codes, n, a.out.stream)?;
    let dec = t_dec.elapsed();
    let total = t_total.elapsed();
    if a.timings {
        let st = gen.stats;
        let per = |d: std::time::Duration, k: usize| {
            if k == 0 {
                serde_json::Value::Null
            } else {
                (d.as_secs_f64() * 1e3 / k as f64).into()
            }
        };
        let line = serde_json::json!({
            "frames": n,
            "frame_ms": 1000.0 / fps,
            "prompt_rows": prompt_rows,
            "prefill_ms": st.prefill.as_secs_f64() * 1e3,
            "talker_ms_per_frame": per(st.talker, n.saturating_sub(1)),
            "code_predictor_ms_per_frame": per(st.code_predictor, n),
            "code2wav_ms_per_frame": per(dec, n),
            "total_ms": total.as_secs_f64() * 1e3,
            "decode": if a.out.stream { "streaming" } else { "chunked-300/25" },
            "isa": tts_kernels::isa().name(),
            "precision": model.precision.name(),
            "threads": rayon::current_num_threads(),
        });
        eprintln!("{line}");
    }
    out.write(&wav, model.code2wav.sample_rate(), a.out.wav_format)
}

/// `speak --stream` / `--play`: the request runs through the streaming
/// engine and each chunk goes to the WAV writer and/or the audio device as it
/// arrives.
fn speak_streamed(
    model: Arc<Qwen3Tts>,
    mut req: Request,
    out: Option<Output>,
    format: WavFormat,
    play: &play::PlayArgs,
    codes_out: Option<&Path>,
    timings: bool,
) -> Result<()> {
    let max_positions = model.config.talker.lm.max_position_embeddings;
    let prompt_rows = model.build_prompt(&req)?.prefill_rows();
    req.options.max_frames = req
        .options
        .max_frames
        .min(max_positions.saturating_sub(prompt_rows + 1));
    let engine = Engine::start(
        model.clone(),
        EngineConfig {
            max_active_requests: 1,
            ..EngineConfig::default()
        },
    )?;
    let rate = model.code2wav.sample_rate();
    let mut writer = out
        .map(|o| AudioWriter::open(o, rate, format))
        .transpose()?;
    // Opened before synthesis starts, so the first chunk plays at once and a
    // missing device fails before any work.
    let mut player = play::Playback::open(play, rate)?;
    let session = engine.open_session();
    let mut stream = session.synthesize_blocking(req)?;
    let show = std::io::stderr().is_terminal();
    // A progress line rewritten in place would garble the playback lines.
    let progress = show && player.is_none();
    let fps = model.code2wav.config().frame_rate();
    let t0 = Instant::now();
    let mut codes = Vec::new();
    let (metrics, stop) = loop {
        match stream.next_blocking() {
            Some(Event::Audio(c)) => {
                if let Some(w) = &mut writer {
                    w.write(&c.samples)?;
                }
                if let Some(p) = &mut player {
                    p.write(&c.samples)?;
                }
                codes.extend_from_slice(&c.codes);
                if progress {
                    let n = c.first_frame + c.frames as u64;
                    eprint!(
                        "\rstreaming: {n} frames ({:.1} s of audio) in {:.1} s",
                        n as f64 / fps,
                        t0.elapsed().as_secs_f64()
                    );
                }
            }
            Some(Event::Done { metrics, stop, .. }) => break (metrics, stop),
            Some(Event::Error { error, .. }) => return Err(error).context("synthesis failed"),
            Some(Event::Cancelled { .. }) => bail!("synthesis was cancelled"),
            Some(Event::Started { .. }) => {}
            None => bail!("the engine stopped without finishing the request"),
        }
    };
    engine.shutdown();
    if let Some(p) = player {
        p.finish()?;
    }
    if show {
        eprintln!(
            "\rstreamed {} frames ({:.2} s of audio) in {:.2} s, first audio after {:.0} ms{}",
            metrics.frames.unwrap_or(0),
            metrics.audio_s,
            metrics.e2el_ms / 1e3,
            metrics.ttfp_ms.unwrap_or(f64::NAN),
            match stop {
                tts_models::synth::StopReason::Eos => "",
                _ => " (stopped at --max-frames, no end-of-speech token)",
            }
        );
    }
    if let Some(p) = codes_out {
        write_codes(p, &codes, model.config.talker.num_code_groups)?;
    }
    if timings {
        let mut line = serde_json::to_value(&*metrics)?;
        line["decode"] = "streaming-engine".into();
        line["prompt_rows"] = prompt_rows.into();
        line["isa"] = tts_kernels::isa().name().into();
        line["threads"] = rayon::current_num_threads().into();
        eprintln!("{line}");
    }
    match writer {
        Some(w) => w.finish(),
        None => Ok(()),
    }
}

fn write_codes(path: &Path, codes: &[u32], groups: usize) -> Result<()> {
    let frames: Vec<&[u32]> = codes.chunks(groups).collect();
    let json = serde_json::to_string(&frames)?;
    std::fs::write(path, json + "\n")
        .with_context(|| format!("writing codes to {}", path.display()))
}

fn decode(a: DecodeArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.codes)
        .with_context(|| format!("reading {}", a.codes.display()))?;
    let frames: Vec<Vec<i64>> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: expected a JSON array of frames (arrays of integers)",
            a.codes.display()
        )
    })?;
    let out = Output::open(
        a.out
            .out
            .as_deref()
            .context("decode needs --out FILE (or - for stdout)")?,
    )?;
    let model = load(&a.model)?;
    let groups = model.code2wav.num_quantizers();
    let book = model.code2wav.codebook_size() as i64;
    let mut codes = Vec::with_capacity(frames.len() * groups);
    for (i, f) in frames.iter().enumerate() {
        if f.len() != groups {
            bail!(
                "{}: frame {i} has {} codes; this checkpoint needs {groups} per frame",
                a.codes.display(),
                f.len()
            );
        }
        for (q, &c) in f.iter().enumerate() {
            if !(0..book).contains(&c) {
                bail!(
                    "{}: frame {i}, codebook {q}: code {c} is outside 0..{book}",
                    a.codes.display()
                );
            }
            codes.push(c as u32);
        }
    }
    if frames.is_empty() {
        bail!("{}: no frames to decode", a.codes.display());
    }
    let wav = model
        .code2wav
        .decode_on_pool(&codes, frames.len(), a.out.stream)?;
    out.write(&wav, model.code2wav.sample_rate(), a.out.wav_format)
}

fn voices(a: ModelArg) -> Result<()> {
    let model = load(&a)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "speakers:")?;
    for (name, s) in &model.config.talker.speakers {
        match &s.dialect {
            Some(d) => writeln!(
                out,
                "  {name} (speaks {d} when the language is chinese or auto)"
            )?,
            None => writeln!(out, "  {name}")?,
        }
    }
    writeln!(out, "languages:")?;
    for l in model.languages() {
        writeln!(out, "  {l}")?;
    }
    writeln!(
        out,
        "instruct: {}",
        if model.config.supports_instruct() {
            "supported"
        } else {
            "ignored by this model size"
        }
    )?;
    Ok(())
}

fn gen_checkpoint(a: GenArgs) -> Result<()> {
    let preset = tts_checkpoint_gen::Preset::parse(&a.preset).map_err(anyhow::Error::msg)?;
    let t = Instant::now();
    if let Some(src) = &a.tokenizer_from {
        // Check the source before writing gigabytes.
        tts_models::tokenizer::TextTokenizer::load(src)
            .with_context(|| format!("--tokenizer-from {}", src.display()))?;
    }
    tts_checkpoint_gen::write_checkpoint(&a.out, preset, a.seed)
        .with_context(|| format!("writing checkpoint to {}", a.out.display()))?;
    if let Some(src) = &a.tokenizer_from {
        for f in ["vocab.json", "merges.txt", "tokenizer_config.json"] {
            let from = src.join(f);
            std::fs::copy(&from, a.out.join(f)).with_context(|| {
                format!("--tokenizer-from: copying {} (vocab.json, merges.txt and tokenizer_config.json are needed)", from.display())
            })?;
        }
        tts_models::tokenizer::TextTokenizer::load(&a.out)
            .with_context(|| format!("the copied tokenizer in {}", a.out.display()))?;
    }
    eprintln!(
        "wrote {} checkpoint to {} in {:.1} s",
        a.preset,
        a.out.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
