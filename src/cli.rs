//! The command line: the clap definitions shared by several subcommands
//! (`ModelArg`, `OutArgs`, `--precision` parsing), model loading, and the
//! dispatch to one module per subcommand.
//!
//! # Layout
//! - `speak` / `decode` / `speakers` (`tts-rt voices`: a checkpoint's preset
//!   speakers and languages) / `voice` (`tts-rt voice`: the voice library) /
//!   `gen_checkpoint` / `devices`: the local subcommands, each with its own
//!   flags.
//! - `bench`: the in-process benchmark harness (`bench/rss.rs`: RssAnon
//!   sampling and growth).
//! - `serve`: the realtime WebSocket and OpenAI-compatible HTTP server
//!   (`serve_config`: its `--config` TOML file); `client`: its counterpart
//!   over the realtime WebSocket (`client_encoded`: `--format` names and
//!   encoded formats written to `--out` as they arrive).
//! - `logging`: the `tracing` subscriber (`RUST_LOG`, `--log-format`):
//!   `serve` logs at info, the other commands show warnings only.
//! - `play`: `--play` flags and live playback (shared by `speak` and
//!   `client`); `io`: text in, WAV and codes out (shared by `speak`,
//!   `decode` and `client`); `outfile`: output files staged beside their
//!   target and renamed over it only on success, with the SIGINT/SIGTERM
//!   handler that removes what is still staged (a failed or interrupted run
//!   leaves an existing file as it was).
//! - `speak/split`: long text cut into sentence-aligned pieces (the
//!   server's segmenter).
//! - `progress`: the progress line of long jobs (audio seconds and rtf),
//!   on a terminal only.
//! - `realtime`: the precision a command runs without `--precision`
//!   (`fast` where audio is heard as it is made, `reference` for files)
//!   and the startup line naming it with its cost.
//! - `switches`: the `TTS_RT_*` measurement and override switches of the
//!   kernels, the engine and the server, read from the environment once at
//!   start (a malformed value is refused by name) and handed down as typed
//!   settings.
//!
//! Imports point from the subcommands to this file, `play` and `io`; none
//! between subcommands.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use tts_audio::WavFormat;
use tts_models::{LoadOptions, PrecisionPlan, PrefixCache, Qwen3Tts};

use crate::model_path;

mod bench;
mod client;
mod client_encoded;
mod decode;
mod devices;
mod fidelity;
mod gen_checkpoint;
mod io;
mod logging;
mod outfile;
mod play;
mod progress;
mod realtime;
mod serve;
mod serve_config;
mod speak;
mod speakers;
mod subtitles;
mod switches;
mod voice;

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
    /// $RAYON_NUM_THREADS); at most 4 per available core. Not for `voices`
    /// or `devices`, which compute nothing.
    #[arg(long, global = true)]
    threads: Option<usize>,
}

#[derive(Subcommand)]
enum Command {
    /// Synthesize TEXT (or stdin) to a WAV file and/or play it live (--play).
    Speak(speak::SpeakArgs),
    /// Decode codes (JSON array of frames) to a WAV file with code2wav only.
    Decode(decode::DecodeArgs),
    /// List the speakers (* marks the default) and languages a checkpoint
    /// offers (reads its config only).
    Voices(speakers::SpeakersArgs),
    /// The voice library: make (`add`, Base checkpoints), list, show,
    /// remove, import and export stored voices.
    Voice(voice::VoiceArgs),
    /// Write a random-weight checkpoint in the Hugging Face layout.
    GenCheckpoint(gen_checkpoint::GenArgs),
    /// Benchmark the streaming engine: text lengths × concurrency × repeats.
    Bench(bench::BenchArgs),
    /// Serve the realtime WebSocket API and OpenAI-compatible HTTP.
    Serve(serve::ServeArgs),
    /// List the audio output devices `--play --device` can use.
    Devices,
    /// What each precision costs on this checkpoint: per-stage KL and top-1
    /// against the stored weights, end-of-speech shift, duration drift,
    /// bytes per frame and real-time factor; and which one to use.
    Fidelity(fidelity::FidelityArgs),
    /// Speak TEXT through a running `tts-rt serve` (realtime WebSocket):
    /// play it as it arrives and/or write a WAV; print the server's metrics.
    Client(client::ClientArgs),
}

#[derive(Args)]
struct ModelArg {
    /// Checkpoint directory, or a Hugging Face repo id such as
    /// Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice (found in the hub cache, else
    /// downloaded there). Default: $TTS_RT_MODEL, else
    /// Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Weight precision: a preset, TALKER[,CODE_PREDICTOR[,CODE2WAV]], or
    /// per-tensor-class items. Default: `fast` where audio is heard as it
    /// is made (`speak --play`, `bench`), `reference` for a file.
    /// Presets: `reference` (stored weights, code2wav f32: what the goldens
    /// hold to; `f32` is the same), `balanced` (int8 except the
    /// code predictor's MLP down projection, the heads and embeddings,
    /// which stay stored bf16; code2wav bf16; the talker's KV cache bf16),
    /// `fast` (`int8,int8,int8,talker.kv=bf16`).
    /// The LMs: f32 (alias bf16, stored: the checkpoint's weights, f32
    /// compute), int8 (per-channel) or q4 (4-bit, groups of 32), quantized
    /// at load. CODE2WAV: f32 (default), bf16 (bf16 weights and
    /// activations in the vocoder's convolutions, f32 accumulation) or int8
    /// (vocoder blocks 2-4's residual convs and blocks 3-4's transposed
    /// convs in int8, exact integer sums; the rest bf16; per layer
    /// `code2wav.decoder.4.conv1=bf16` opts one out,
    /// `code2wav.decoder.1.conv1=int8` one in; docs/precision.md).
    /// Per class: `[BASE,]STAGE.CLASS=P,...` with STAGE `talker` or `cp`,
    /// CLASS `attn`, `mlp` (= `mlp_up_gate` + `mlp_down`), `mlp_up_gate`,
    /// `mlp_down` or `head`; `STAGE=P` sets attn and mlp; `STAGE.kv=f32|bf16`
    /// the KV cache's format; `code2wav=bf16`;
    /// later items win, e.g. `talker.attn=int8,talker.mlp=q4,cp.mlp_down=bf16`
    /// or `balanced,cp.mlp_down=int8` or `fast,talker.kv=f32`. Embeddings and projections always
    /// keep the stored weights. `tts-rt fidelity` measures what each costs
    /// on a checkpoint; docs/performance.md, "Precision by tensor".
    #[arg(long, value_parser = parse_precision)]
    precision: Option<LoadOptions>,
    /// Cache int8/q4-converted LM weights in DIR: the first load writes
    /// them, later loads memory-map them (no conversion, weights shared
    /// between processes instead of per-process memory). Off by default.
    #[arg(long, value_name = "DIR", env = "TTS_RT_WEIGHTS_CACHE")]
    weights_cache: Option<PathBuf>,
    /// Memory (MiB) for the talker's shared prompt prefixes: the keys and
    /// values of the rows every request of one voice starts with (preset
    /// speaker or clone, language, instruct, an in-context clone's
    /// transcript), computed once and reused, so later requests prefill only
    /// their own text. Exact (the same output as without it); 0 turns it off.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    prefix_cache_mb: usize,
}

/// Where stored voices live (`voice add`, `speak --voice`, `serve`).
#[derive(Args, Clone, Debug)]
pub(crate) struct VoicesDirArg {
    /// Voice library directory (default: $TTS_RT_VOICES_DIR, else
    /// $XDG_DATA_HOME/tts-rt/voices, else ~/.local/share/tts-rt/voices).
    #[arg(long, value_name = "DIR", env = "TTS_RT_VOICES_DIR")]
    pub voices_dir: Option<PathBuf>,
}

impl VoicesDirArg {
    /// The directory to use: the flag, else the user's data directory.
    pub fn resolve(&self) -> Result<PathBuf> {
        if let Some(d) = &self.voices_dir {
            return Ok(d.clone());
        }
        if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
            return Ok(PathBuf::from(d).join("tts-rt/voices"));
        }
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .context("no voice directory: give --voices-dir (none of TTS_RT_VOICES_DIR, XDG_DATA_HOME, HOME is set)")?;
        Ok(PathBuf::from(home).join(".local/share/tts-rt/voices"))
    }
}

/// A `--precision` value ([`PrecisionPlan::parse`]): a preset
/// (`reference`, `balanced`, `fast`), `TALKER[,CODE_PREDICTOR[,CODE2WAV]]`
/// (e.g. `q4,int8`, `iq4,int8`, `f32,f32,bf16`) or per-class items over an optional
/// base (`balanced,cp.mlp_down=int8`,
/// `talker.attn=int8,talker.mlp=q4,cp.mlp_down=bf16`). Errors name the
/// part at fault.
pub(crate) fn parse_precision(s: &str) -> std::result::Result<LoadOptions, String> {
    PrecisionPlan::parse(s)
        .map(LoadOptions::from_plan)
        .map_err(|e| e.to_string())
}

#[derive(Args)]
struct OutArgs {
    /// Output file, its format from its extension: .wav, .mp3, .opus or
    /// .ogg (Ogg Opus), .flac, .aac (ADTS), .pcm or .raw (16-bit
    /// little-endian, no header), .ulaw / .alaw (G.711, 8 kHz); no
    /// extension: WAV. `-`: WAV on stdout. (`speak`: optional with --play.)
    #[arg(long)]
    out: Option<PathBuf>,
    /// A WAV's samples: pcm16 (default) or f32 (exact model output).
    #[arg(long)]
    wav_format: Option<WavFormat>,
    /// Decode with the stateful streaming decoder instead of the official
    /// 300/25-frame chunked decode (identical up to 300 frames; beyond that
    /// the streaming decoder equals a whole-utterance decode). `speak
    /// --stream` runs the streaming engine and writes chunks as they arrive.
    #[arg(long)]
    stream: bool,
}

pub fn run() -> Result<()> {
    let cli = Cli::parse();
    // Every environment switch, read and checked once, before anything
    // runs; the kernels' are fixed for the process here.
    let switches = switches::Switches::read()?;
    switches.install_kernels()?;
    if let Some(note) = switches.isa_note() {
        eprintln!("note: {note}");
    }
    if let Some(n) = cli.threads {
        if let Some(sub) = match cli.command {
            Command::Voices(_) => Some("voices"),
            Command::Devices => Some("devices"),
            _ => None,
        } {
            bail!("--threads does nothing for `{sub}` (it runs no kernels); leave it out");
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        check_threads(n, cores)?;
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .context("setting the kernel thread count (--threads)")?;
    }
    // `serve` installs its own (its format and level can come from its
    // config file); the others show the engine's warnings, plainly.
    if !matches!(cli.command, Command::Serve(_)) {
        logging::init(logging::LogFormat::Text, "warn", false)?;
    }
    // The offline paths (a whole utterance on this thread: `speak` without
    // --stream, `decode`, `fidelity`) run their kernels on one team of
    // --threads; the engine (`serve`, `bench`, `speak --stream`) builds its
    // own.
    let team = match &cli.command {
        Command::Speak(_) | Command::Decode(_) | Command::Fidelity(_)
            if tts_kernels::teams_enabled() =>
        {
            Some(
                tts_kernels::Team::new(rayon::current_num_threads(), "tts-kernel")
                    .context("starting the kernel threads")?,
            )
        }
        _ => None,
    };
    let go = || run_command(cli.command, &switches);
    match team {
        Some(t) => t.install(go),
        None => go(),
    }
}

fn run_command(command: Command, switches: &switches::Switches) -> Result<()> {
    match command {
        Command::Speak(a) => speak::speak(a, switches.team_hold),
        Command::Decode(a) => decode::decode(a),
        Command::Voices(a) => speakers::list(a),
        Command::Voice(a) => voice::voice(a),
        Command::GenCheckpoint(a) => gen_checkpoint::gen_checkpoint(a),
        Command::Bench(a) => bench::bench(a, switches),
        Command::Serve(a) => serve::serve(a, switches),
        Command::Devices => devices::devices(),
        Command::Client(a) => client::client(a),
        Command::Fidelity(a) => fidelity::fidelity(a),
    }
}

/// `--threads N`: at least 1 and at most 4 per available core. More only
/// oversubscribes (every kernel call then waits on threads that cannot run;
/// `--threads 100000` spent minutes spawning and spinning before the first
/// frame), so it is refused rather than clamped.
fn check_threads(n: usize, cores: usize) -> Result<()> {
    anyhow::ensure!(n >= 1, "--threads must be at least 1");
    let max = 4 * cores;
    anyhow::ensure!(
        n <= max,
        "--threads {n} is more than 4 per available core ({cores} cores: at most {max}); leave it out for one per core"
    );
    Ok(())
}

/// Loads `--model` at `--precision`, or at the default for `use_`
/// (`realtime.rs`). `announce`: print the startup line saying which
/// precision runs and what it costs (the commands that speak).
fn load(model: &ModelArg, use_: realtime::Use, announce: bool) -> Result<Arc<Qwen3Tts>> {
    let dir = model_path::resolve(model.model.as_deref())?;
    let t = Instant::now();
    let (precision, defaulted) = realtime::resolve(model.precision, use_);
    if announce {
        eprintln!(
            "{}",
            realtime::startup_line(&precision.plan(), defaulted.then_some(use_))
        );
    }
    let options = precision.with_weights_cache(model.weights_cache.as_deref());
    let mut m = Qwen3Tts::load_with(&dir, options)
        .with_context(|| format!("loading checkpoint {}", dir.display()))?;
    m.prefix_cache = PrefixCache::new(model.prefix_cache_mb.saturating_mul(1 << 20));
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

#[cfg(test)]
mod tests {
    use super::*;
    use tts_models::{Code2WavPrecision, Precision};

    fn parsed(s: &str) -> (Precision, Precision, Code2WavPrecision) {
        let o = parse_precision(s).unwrap();
        let uniform = |p: tts_models::StagePlan| p.as_uniform().expect("a uniform stage");
        (uniform(o.talker), uniform(o.code_predictor), o.code2wav)
    }

    #[test]
    fn threads_beyond_four_per_core_are_refused() {
        check_threads(1, 2).unwrap();
        check_threads(8, 2).unwrap();
        let e = check_threads(100_000, 2).unwrap_err().to_string();
        assert!(e.contains("at most 8"), "{e}");
        assert!(check_threads(0, 2).is_err());
    }

    #[test]
    fn fast_is_int8_int8_int8_whatever_its_case_and_spaces() {
        let want = (Precision::Int8, Precision::Int8, Code2WavPrecision::INT8);
        assert_eq!(parsed("fast"), want);
        assert_eq!(parsed(" FAST "), want);
        assert_eq!(parsed("int8,int8,int8"), want);
    }

    #[test]
    fn one_precision_applies_to_both_lms_and_leaves_code2wav_f32() {
        assert_eq!(
            parsed("q4"),
            (Precision::Q4, Precision::Q4, Code2WavPrecision::F32)
        );
    }

    #[test]
    fn iq4_and_q6_parse_alone_and_per_stage() {
        assert_eq!(
            parsed("iq4"),
            (Precision::Iq4, Precision::Iq4, Code2WavPrecision::F32)
        );
        assert_eq!(
            parsed("q6,int8"),
            (Precision::Q6, Precision::Int8, Code2WavPrecision::F32)
        );
        assert_eq!(
            parsed("iq4, q6, bf16"),
            (Precision::Iq4, Precision::Q6, Code2WavPrecision::Bf16)
        );
    }

    #[test]
    fn two_and_three_precisions_name_the_stages_in_order() {
        assert_eq!(
            parsed("q4,int8"),
            (Precision::Q4, Precision::Int8, Code2WavPrecision::F32)
        );
        assert_eq!(
            parsed("f32, f32 ,bf16"),
            (Precision::F32, Precision::F32, Code2WavPrecision::Bf16)
        );
    }

    #[test]
    fn parsed_precision_has_no_weights_cache_until_the_flag_adds_it() {
        assert_eq!(parse_precision("int8").unwrap().weights_cache, None);
    }

    #[test]
    fn four_precisions_are_refused_with_the_accepted_forms() {
        let e = parse_precision("f32,f32,f32,f32").unwrap_err();
        assert!(e.contains("give a preset"), "{e}");
        assert!(e.contains("one precision, two"), "{e}");
    }

    #[test]
    fn an_unknown_single_precision_suggests_the_presets_and_a_list_does_not() {
        let one = parse_precision("int4").unwrap_err();
        assert!(one.starts_with("`int4`: talker precision: "), "{one}");
        assert!(
            one.contains("reference, balanced, fast (int8,int8,int8,talker.kv=bf16)"),
            "{one}"
        );
        let two = parse_precision("int4,f32").unwrap_err();
        assert!(!two.contains("fast"), "{two}");
        let cp = parse_precision("f32,int4").unwrap_err();
        assert!(cp.starts_with("`int4`: code predictor precision: "), "{cp}");
        assert!(parse_precision("f32,f32,int4").is_err());
        assert!(parse_precision("f32,f32,int8").is_ok());
    }

    #[test]
    fn presets_and_per_class_items_parse_into_load_options() {
        let b = parse_precision("balanced").unwrap();
        assert_eq!(b.code_predictor.mlp_down, Precision::F32);
        assert_eq!(b.code_predictor.attn, Precision::Int8);
        assert_eq!(b.code2wav, Code2WavPrecision::Bf16);
        assert_eq!(
            parse_precision("reference").unwrap(),
            LoadOptions::default()
        );
        let o = parse_precision("talker.attn=int8,talker.mlp=q4,cp.mlp_down=bf16").unwrap();
        assert_eq!(o.talker.attn, Precision::Int8);
        assert_eq!(o.talker.mlp_down, Precision::Q4);
        let e = parse_precision("balanced,cp.mlp_dwn=int8").unwrap_err();
        assert!(
            e.starts_with("`cp.mlp_dwn=int8`: unknown tensor class"),
            "{e}"
        );
    }
}
