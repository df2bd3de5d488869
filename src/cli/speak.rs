//! `tts-rt speak`: synthesize text to a WAV file and/or the audio device,
//! either offline (generate every frame, then one decode) or through the
//! streaming engine (`--stream`, `--play`). Long text is spoken as several
//! requests cut between sentences (`split`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use tts_actors::{Engine, EngineConfig, Event, SlowRequestWarning, TeamHold, VoiceLibrary};
use tts_audio::WavFormat;
use tts_models::config::ModelKind;
use tts_models::StopReason;
use tts_models::{GenOptions, Qwen3Tts, Request, VoiceClone};

use super::io::{
    check_out, out_container, read_text, write_codes, AudioWriter, Container, Destination,
};
use super::outfile::{catch_interrupts, check_target};
use super::progress::Progress;
use super::realtime::Use;
use super::subtitles::{self, Subtitler};
use super::{load, play, ModelArg, OutArgs, VoicesDirArg};

mod split;

/// `--text-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TextMode {
    Prefill,
    Streaming,
}

#[derive(Args)]
pub(crate) struct SpeakArgs {
    /// Text to speak; omitted or `-`: read stdin. Text over 300 characters
    /// is spoken as several requests cut between sentences (--max-frames
    /// then applies to each).
    text: Option<String>,
    #[command(flatten)]
    model: ModelArg,
    /// Speaker (see `tts-rt voices`; CustomVoice checkpoints); default: the
    /// checkpoint's first.
    #[arg(long)]
    speaker: Option<String>,
    /// Clone the voice of this reference clip (Base checkpoints): WAV, FLAC,
    /// MP3, OGG/Vorbis, OGG/Opus, WebM/Opus or M4A/AAC, any rate, 0.5 to 60 s.
    #[arg(long, conflicts_with_all = ["speaker", "voice"])]
    ref_audio: Option<PathBuf>,
    /// What the reference clip says: in-context cloning (the official
    /// default; required unless --x-vector-only).
    #[arg(long, requires = "ref_audio")]
    ref_text: Option<String>,
    /// Clone from the speaker embedding alone (no reference text or codes).
    #[arg(long, requires = "ref_audio")]
    x_vector_only: bool,
    /// Speak with a stored voice (see `tts-rt voice list`; Base checkpoints).
    #[arg(long, conflicts_with = "speaker")]
    voice: Option<String>,
    #[command(flatten)]
    voices: VoicesDirArg,
    /// Language (see `tts-rt voices`) or auto.
    #[arg(long, default_value = "auto")]
    language: String,
    /// CustomVoice: a style instruction (used by 1.7B checkpoints; 0.6B
    /// ignores it, as upstream). VoiceDesign: the voice, described in words
    /// (required).
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
    /// Talker sampling temperature (> 0; lower is more predictable);
    /// default from generation_config.json (0.9 officially).
    #[arg(long)]
    temperature: Option<f32>,
    /// Talker: sample only from the K likeliest codes (0: no limit);
    /// default from generation_config.json (50 officially).
    #[arg(long)]
    top_k: Option<usize>,
    /// Talker nucleus sampling: the smallest set of codes whose probability
    /// reaches P, in (0, 1] (1: off); default from generation_config.json.
    #[arg(long)]
    top_p: Option<f32>,
    /// Penalty (> 0; 1: none) on codes the talker already produced, against
    /// loops; default from generation_config.json (1.05 officially).
    #[arg(long)]
    repetition_penalty: Option<f32>,
    /// Code predictor (the residual codebooks) temperature (> 0); default
    /// from generation_config.json (subtalker_temperature).
    #[arg(long)]
    cp_temperature: Option<f32>,
    /// Code predictor top-k (0: no limit); default from
    /// generation_config.json (subtalker_top_k).
    #[arg(long)]
    cp_top_k: Option<usize>,
    /// Code predictor top-p in (0, 1]; default from generation_config.json
    /// (subtalker_top_p).
    #[arg(long)]
    cp_top_p: Option<f32>,
    /// How the text reaches the talker: `prefill` (all up front, official
    /// non_streaming_mode=True) or `streaming` (one token per frame,
    /// non_streaming_mode=False). Default: the family's official one
    /// (streaming for Base clones, prefill for CustomVoice and VoiceDesign).
    #[arg(long, value_enum, conflicts_with = "text_streaming")]
    text_mode: Option<TextMode>,
    /// Alias of `--text-mode streaming`.
    #[arg(long)]
    text_streaming: bool,
    /// Print per-stage timings as one JSON line on stderr (one per piece
    /// when long text is split).
    #[arg(long)]
    timings: bool,
    /// With --timings: also measure this host's memory read bandwidth
    /// before and after the run (a 512 MiB buffer summed on the same
    /// threads, 5 passes each; `stable` when the two agree within 15%) and
    /// report each LM stage's bandwidth floor per frame (the weight bytes it
    /// streams / their mean) and its time as a fraction of it. Offline runs
    /// only.
    #[arg(long, requires = "timings", conflicts_with_all = ["stream", "play"])]
    floor: bool,
    /// Also write the generated codes as JSON (array of frames).
    #[arg(long)]
    codes_out: Option<PathBuf>,
    /// Also write when each word (and character) of the text is heard in
    /// the audio, in the format the extension names: `.json` (words and
    /// characters), `.srt` (SubRip) or `.vtt` (WebVTT) subtitles. The
    /// timings are read from the waveform and the text (their error:
    /// docs/timings-accuracy.md).
    #[arg(long, value_name = "FILE")]
    timings_out: Option<PathBuf>,
    #[command(flatten)]
    out: OutArgs,
    #[command(flatten)]
    play: play::PlayArgs,
}

/// The voice to clone: a reference clip encoded now, or a stored voice.
fn clone_for(model: &Arc<Qwen3Tts>, a: &SpeakArgs) -> Result<Option<Arc<VoiceClone>>> {
    if let Some(path) = &a.ref_audio {
        let clip = tts_audio::ReferenceAudio::from_path(path)
            .with_context(|| format!("reference clip {}", path.display()))?;
        let (voice, _) = model
            .clone_voice(&clip.samples, a.ref_text.as_deref(), a.x_vector_only)
            .with_context(|| format!("cloning the voice of {}", path.display()))?;
        return Ok(Some(Arc::new(voice)));
    }
    let Some(name) = &a.voice else {
        return Ok(None);
    };
    check_voice_family(model, name)?;
    let dir = a.voices.resolve()?;
    let (library, skipped) = VoiceLibrary::open(model.clone(), &dir, None)
        .with_context(|| format!("opening the voice library {}", dir.display()))?;
    super::voice::report_skipped(&skipped);
    Ok(Some(library.resolve(name)?))
}

/// `--voice NAME` speaks a stored voice, which only a Base checkpoint can
/// (the voice is a clone). On another family it is refused before the
/// library opens (a stored voice's size check would otherwise compare
/// against a talker that takes no clone, "made for the 0b6 talker ...;
/// this checkpoint is 0b6"), naming what the checkpoint speaks instead:
/// its speakers (`--speaker`, the name itself when it is one), or a
/// described voice.
fn check_voice_family(model: &Qwen3Tts, name: &str) -> Result<()> {
    let kind = model.config.kind;
    if kind == ModelKind::Base {
        return Ok(());
    }
    let speakers = model.speakers();
    let instead = match kind {
        ModelKind::CustomVoice if speakers.iter().any(|s| s.eq_ignore_ascii_case(name)) => {
            format!("{name:?} is one of its preset speakers: give --speaker {name}")
        }
        ModelKind::CustomVoice => format!(
            "it speaks its preset speakers ({}): give --speaker NAME",
            speakers.join(", ")
        ),
        _ => "it speaks a voice described in words: give --instruct \"a warm, low female voice\""
            .into(),
    };
    bail!(
        "--voice {name}: stored voices are clones, which only a Base checkpoint speaks, and this checkpoint is {}; {instead}. To speak the stored voice {name:?}, give --model {} (or the Base checkpoint it was made with)",
        kind.name(),
        crate::model_path::DEFAULT_BASE_REPO
    )
}

/// `team_hold`: the engine's `TTS_RT_TEAM_HOLD` (read at start), for
/// `--stream` / `--play`.
pub(crate) fn speak(mut a: SpeakArgs, team_hold: Option<TeamHold>) -> Result<()> {
    // Ctrl-C / SIGTERM from here on, the model load included, ends the run
    // (130 / 143) with every output as it was.
    catch_interrupts();
    let text = read_text(a.text.take())?;
    // Every argument is checked before any output is opened, and outputs
    // are staged (super::outfile): a failure never touches an existing file.
    let container = match &a.out.out {
        Some(p) => out_container(p, a.out.wav_format, "--out")?,
        None => Container::Wav(a.out.wav_format.unwrap_or(WavFormat::Pcm16)),
    };
    match &a.out.out {
        Some(p) => check_out(p, "--out")?,
        None if a.play.play => {}
        None => bail!("nothing to do: give --out FILE (or - for stdout) and/or --play"),
    }
    if let Some(p) = &a.codes_out {
        check_target(p, "--codes-out")?;
    }
    if let Some(p) = &a.timings_out {
        subtitles::Kind::of(p)?;
        check_target(p, "--timings-out")?;
    }
    check_sampling_flags(&a)?;
    // Heard as it is made (--play): real time first; a file: the reference.
    let use_ = if a.play.play { Use::Live } else { Use::File };
    let model = load(&a.model, use_, true)?;
    container.check_rate(model.code2wav.sample_rate())?;
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
        opts.max_frames = check_max_frames(n, max_positions, model.code2wav.config().frame_rate())?;
    }
    if let Some(w) = random_weights_warning(&model, a.max_frames, opts.max_frames) {
        eprintln!("{w}");
    }
    let voice_clone = clone_for(&model, &a)?;
    // CustomVoice needs a speaker: default to the checkpoint's first. The
    // other families take none (the prompt builder refuses one, naming
    // what the checkpoint does instead).
    let speaker = match a.speaker.take() {
        Some(s) => Some(s),
        None if model.config.kind == ModelKind::CustomVoice && voice_clone.is_none() => Some(
            model
                .speakers()
                .into_iter()
                .next()
                .context("checkpoint has no speakers (spk_id is empty)")?,
        ),
        None => None,
    };
    let text_streaming = match (a.text_mode, a.text_streaming) {
        (Some(m), _) => m == TextMode::Streaming,
        (None, true) => true,
        (None, false) => model.config.kind.default_text_streaming(),
    };
    let base = Request {
        text: String::new(),
        speaker,
        language: a.language,
        instruct: a.instruct,
        voice_clone,
        text_streaming,
        options: opts,
    };
    // Long text becomes several requests cut between sentences (split.rs);
    // each piece gets the next seed, so repeated sentences do not repeat
    // their sampling. Every piece's prompt is built now: the speaker,
    // language, voice and sampling settings as the model checks them, and
    // the text limits, all before any output is opened.
    let reqs: Vec<Request> = split::pieces(&text)
        .into_iter()
        .enumerate()
        .map(|(i, piece)| {
            let mut r = base.clone();
            r.text = piece;
            r.options.seed = base.options.seed.wrapping_add(i as u64);
            r
        })
        .collect();
    for r in &reqs {
        model.build_prompt(r)?;
    }
    if reqs.len() > 1 && std::io::stderr().is_terminal() {
        eprintln!(
            "long text: {} pieces of at most {} characters, cut between sentences",
            reqs.len(),
            split::MAX_PIECE_CHARS
        );
    }
    let out = a.out.out.as_deref().map(Destination::open).transpose()?;
    let subtitler = a
        .timings_out
        .as_ref()
        .map(|_| Subtitler::new(&text, model.code2wav.sample_rate()));
    // --play always takes the streaming engine path: playback starts with
    // the first chunk instead of after the whole utterance.
    if a.out.stream || a.play.play {
        let engine = Engine::start(
            model,
            EngineConfig {
                max_active_requests: 1,
                team_hold,
                ..EngineConfig::default()
            },
        )?;
        let sinks = Sinks {
            out,
            format: container,
            play: &a.play,
            codes_out: a.codes_out.as_deref(),
            timings: a.timings,
            subtitles: subtitler.zip(a.timings_out.as_deref()),
        };
        return speak_streamed(engine, reqs, sinks);
    }
    let mut subtitler = subtitler;
    let out = out.expect("--out is given when --play is not");
    let mut wav = Vec::new();
    let mut codes = Vec::new();
    for (i, req) in reqs.iter().enumerate() {
        let label = if reqs.len() > 1 {
            format!("piece {}/{}: ", i + 1, reqs.len())
        } else {
            String::new()
        };
        let (w, c) = speak_offline(&model, req, a.out.stream, a.timings, a.floor, &label)?;
        if let Some(s) = &mut subtitler {
            s.piece(&req.text);
            s.audio(&w);
            s.piece_done();
        }
        wav.extend_from_slice(&w);
        codes.extend_from_slice(&c);
    }
    if let Some(p) = &a.codes_out {
        write_codes(p, &codes, model.config.talker.num_code_groups)?;
    }
    if let (Some(s), Some(p)) = (subtitler, &a.timings_out) {
        s.write(p)?;
    }
    out.write(&wav, model.code2wav.sample_rate(), container)
}

/// One request offline: every frame, then one decode. Returns the audio and
/// the codes; reports progress (`label` first) on a terminal and, with
/// `timings`, one JSON line of per-stage timings.
fn speak_offline(
    model: &Arc<Qwen3Tts>,
    req: &Request,
    stream_decode: bool,
    timings: bool,
    floor: bool,
    label: &str,
) -> Result<(Vec<f32>, Vec<u32>)> {
    let max_positions = model.config.talker.lm.max_position_embeddings;
    // The host's bandwidth before the run; again after it (`floor_report`).
    let bw_before = (timings && floor).then(probe_bandwidth);
    let t_total = Instant::now();
    let mut gen = model.start(req)?;
    let prompt_rows = gen.prompt().prefill_rows();
    let frames_cap = frame_cap(req.options.max_frames, max_positions, prompt_rows);
    let show = std::io::stderr().is_terminal();
    let t0 = Instant::now();
    let fps = model.code2wav.config().frame_rate();
    let mut codes: Vec<u32> = Vec::new();
    let mut n = 0usize;
    // On a terminal: audio seconds made and the rtf so far, in place.
    let progress = Progress::new(show, format!("{label}generating"));
    while n < frames_cap {
        let Some(frame) = gen.next_frame() else { break };
        codes.extend(frame);
        n += 1;
        progress.audio(n as f64 / fps);
    }
    progress.finish();
    if show {
        eprintln!(
            "{label}generated {n} frames ({:.2} s of audio) in {:.2} s{}",
            n as f64 / fps,
            t0.elapsed().as_secs_f64(),
            stop_note(gen.stop_reason())
        );
    }
    let t_dec = Instant::now();
    let wav = model.decode_utterance(req, &codes, n, stream_decode)?;
    let dec = t_dec.elapsed();
    let total = t_total.elapsed();
    if timings {
        let st = gen.stats;
        let per = |d: std::time::Duration, k: usize| {
            if k == 0 {
                serde_json::Value::Null
            } else {
                (d.as_secs_f64() * 1e3 / k as f64).into()
            }
        };
        let mut line = serde_json::json!({
            "frames": n,
            "frame_ms": 1000.0 / fps,
            "prompt_rows": prompt_rows,
            "prefill_ms": st.prefill.as_secs_f64() * 1e3,
            "talker_ms_per_frame": per(st.talker, n.saturating_sub(1)),
            "code_predictor_ms_per_frame": per(st.code_predictor, n),
            "code2wav_ms_per_frame": per(dec, n),
            "total_ms": total.as_secs_f64() * 1e3,
            "decode": if stream_decode { "streaming" } else { "chunked-300/25" },
            "isa": tts_kernels::isa().name(),
            "bf16_conv": tts_kernels::bf16_conv_path(),
            "precision": model.precision.name(),
            "threads": rayon::current_num_threads(),
        });
        if let Some(before) = bw_before {
            line["floor"] = floor_report(
                model,
                before,
                probe_bandwidth(),
                line["talker_ms_per_frame"].as_f64(),
                line["code_predictor_ms_per_frame"].as_f64(),
            );
        }
        eprintln!("{line}");
    }
    Ok((wav, codes))
}

/// The `--floor` probe: 512 MiB summed on the command's threads, 5 passes.
fn probe_bandwidth() -> tts_kernels::probe::Bandwidth {
    tts_kernels::probe::read_bandwidth(512 << 20, 5)
}

/// How far the bandwidth may move between the probes before and after a
/// run for its floors to be called stable.
const FLOOR_STABLE: f64 = 0.15;

/// `--floor`: the host's read bandwidth, measured before and after the run
/// (their mean is the bandwidth of the floors; a shared host's moves by a
/// third from one minute to the next, and `stable` says whether it held
/// still), and each LM stage's floor per frame at it (the weight bytes one
/// frame streams / the bandwidth) beside its measured time. `of_floor` =
/// floor / measured: 1.0 is a stage running at the memory bus's speed.
fn floor_report(
    model: &Qwen3Tts,
    before: tts_kernels::probe::Bandwidth,
    after: tts_kernels::probe::Bandwidth,
    talker_ms: Option<f64>,
    code_predictor_ms: Option<f64>,
) -> serde_json::Value {
    let bw = (before.median + after.median) / 2.0;
    let stage = |bytes: usize, measured: Option<f64>| {
        let floor_ms = bytes as f64 / bw * 1e3;
        serde_json::json!({
            "bytes_per_frame": bytes,
            "floor_ms_per_frame": floor_ms,
            "ms_per_frame": measured,
            "of_floor": measured.map(|m| floor_ms / m),
        })
    };
    serde_json::json!({
        "read_gb_s": bw / 1e9,
        "read_gb_s_before": before.median / 1e9,
        "read_gb_s_after": after.median / 1e9,
        "stable": (before.median - after.median).abs() <= FLOOR_STABLE * bw,
        "probe_bytes": after.bytes,
        "probe_passes": after.passes,
        "threads": rayon::current_num_threads(),
        "talker": stage(model.talker.bytes_per_frame(), talker_ms),
        "code_predictor": stage(model.code_predictor.bytes_per_frame(), code_predictor_ms),
    })
}

/// `speak --stream` / `--play`: the requests (the pieces of the text) run
/// one after another through the streaming engine and each chunk goes to
/// the WAV writer and/or the audio device as it arrives.
/// Where a streamed run's results go.
struct Sinks<'a> {
    /// The audio file, and its container.
    out: Option<Destination>,
    format: Container,
    play: &'a play::PlayArgs,
    codes_out: Option<&'a Path>,
    /// Per-stage timings on stderr (`--timings`).
    timings: bool,
    /// Word timings (`--timings-out`).
    subtitles: Option<(Subtitler, &'a Path)>,
}

fn speak_streamed(engine: Engine, reqs: Vec<Request>, sinks: Sinks<'_>) -> Result<()> {
    let Sinks {
        out,
        format,
        play,
        codes_out,
        timings,
        mut subtitles,
    } = sinks;
    let model = engine.model().clone();
    let max_positions = model.config.talker.lm.max_position_embeddings;
    let rate = model.code2wav.sample_rate();
    let mut writer = out
        .map(|o| AudioWriter::open(o, rate, format))
        .transpose()?;
    // Opened before synthesis starts, so the first chunk plays at once and a
    // missing device fails before any work.
    let expected = reqs.iter().map(|r| play::expected_speech(&r.text)).sum();
    let mut player = play::Playback::open(play, rate, expected)?;
    let session = engine.open_session();
    let show = std::io::stderr().is_terminal();
    // A progress line rewritten in place would garble the playback lines.
    let progress = Progress::new(show && player.is_none(), "streaming");
    let fps = model.code2wav.config().frame_rate();
    let t0 = Instant::now();
    let mut codes = Vec::new();
    let (mut frames, mut audio_s, mut first_audio_ms) = (0u64, 0.0f64, None);
    let mut last_stop = None;
    let n_reqs = reqs.len();
    // Playing: the first piece slower than real time is warned about, once.
    let slow = SlowRequestWarning::default();
    let precision = model.precision.name();
    for (i, mut req) in reqs.into_iter().enumerate() {
        let prompt_rows = model.build_prompt(&req)?.prefill_rows();
        req.options.max_frames = frame_cap(req.options.max_frames, max_positions, prompt_rows);
        if let Some((s, _)) = &mut subtitles {
            s.piece(&req.text);
        }
        let mut stream = session.synthesize_blocking(req)?;
        let (metrics, stop) = loop {
            match stream.next_blocking() {
                Some(Event::Audio(c)) => {
                    if let Some(w) = &mut writer {
                        w.write(&c.samples)?;
                    }
                    if let Some(p) = &mut player {
                        p.write(&c.samples)?;
                    }
                    if let Some((s, _)) = &mut subtitles {
                        s.audio(&c.samples);
                    }
                    codes.extend_from_slice(&c.codes);
                    let n = frames + c.first_frame + c.frames as u64;
                    progress.audio(n as f64 / fps);
                }
                Some(Event::Done { metrics, stop, .. }) => break (metrics, stop),
                Some(Event::Error { error, .. }) => return Err(error).context("synthesis failed"),
                Some(Event::Cancelled { .. }) => bail!("synthesis was cancelled"),
                Some(Event::Started { .. }) => {}
                None => bail!("the engine stopped without finishing the request"),
            }
        };
        if let Some((s, _)) = &mut subtitles {
            s.piece_done();
        }
        if first_audio_ms.is_none() {
            first_audio_ms = metrics.ttfp_ms;
        }
        if player.is_some() {
            slow.observe(metrics.rtf, &precision);
        }
        frames += metrics.frames.unwrap_or(0);
        audio_s += metrics.audio_s;
        last_stop = Some(stop);
        if timings {
            let mut line = serde_json::to_value(&*metrics)?;
            line["decode"] = "streaming-engine".into();
            line["prompt_rows"] = prompt_rows.into();
            if n_reqs > 1 {
                line["piece"] = (i + 1).into();
                line["pieces"] = n_reqs.into();
            }
            line["isa"] = tts_kernels::isa().name().into();
            line["bf16_conv"] = tts_kernels::bf16_conv_path().into();
            line["threads"] = rayon::current_num_threads().into();
            eprintln!("{line}");
        }
    }
    engine.shutdown();
    progress.finish();
    if let Some(p) = player {
        p.finish()?;
    }
    if show {
        eprintln!(
            "streamed {frames} frames ({audio_s:.2} s of audio) in {:.2} s, first audio after {:.0} ms{}",
            t0.elapsed().as_secs_f64(),
            first_audio_ms.unwrap_or(f64::NAN),
            stop_note(last_stop)
        );
    }
    if let Some(p) = codes_out {
        write_codes(p, &codes, model.config.talker.num_code_groups)?;
    }
    if let Some((s, p)) = subtitles {
        s.write(p)?;
    }
    match writer {
        Some(w) => w.finish(),
        None => Ok(()),
    }
}

/// The sampling flags, checked whatever `--greedy` says (a value that would
/// be refused with sampling on is a mistake either way), named as typed.
fn check_sampling_flags(a: &SpeakArgs) -> Result<()> {
    for (flag, v) in [
        ("--temperature", a.temperature),
        ("--cp-temperature", a.cp_temperature),
        ("--repetition-penalty", a.repetition_penalty),
    ] {
        if let Some(v) = v {
            if !(v.is_finite() && v > 0.0) {
                bail!("{flag} must be a positive number, got {v}");
            }
        }
    }
    for (flag, v) in [("--top-p", a.top_p), ("--cp-top-p", a.cp_top_p)] {
        if let Some(v) = v {
            if !(v > 0.0 && v <= 1.0) {
                bail!("{flag} must be in (0, 1], got {v}");
            }
        }
    }
    Ok(())
}

/// A checkpoint with random weights (`tts-rt gen-checkpoint` marks its
/// config) seldom ends an utterance, so without `--max-frames` a run goes
/// to the frame cap of its generation config, minutes of noise: said before
/// it starts, with the flag to give.
fn random_weights_warning(
    model: &Qwen3Tts,
    max_frames_flag: Option<usize>,
    cap: usize,
) -> Option<String> {
    if !model.config.random_weights || max_frames_flag.is_some() {
        return None;
    }
    let fps = model.code2wav.config().frame_rate();
    let cap = cap.min(model.config.talker.lm.max_position_embeddings);
    Some(format!(
        "warning: {} has random weights (written by gen-checkpoint): it makes noise and seldom ends an utterance, so without --max-frames this runs to {cap} frames ({:.1} min of audio) per piece; give --max-frames N (12.5 a second of audio, e.g. --max-frames 40)",
        model.dir.display(),
        cap as f64 / fps / 60.0
    ))
}

/// `--max-frames N`: at least 1, and below the positions the talker can
/// attend to (`frame_rate`: frames per second of audio, for the message).
fn check_max_frames(n: usize, max_positions: usize, frame_rate: f64) -> Result<usize> {
    if n == 0 {
        bail!("--max-frames must be at least 1");
    }
    if n >= max_positions {
        bail!(
            "--max-frames {n} is beyond what this checkpoint can attend to ({max_positions} positions ≈ {:.0} min of audio)",
            max_positions as f64 / frame_rate / 60.0
        );
    }
    Ok(n)
}

/// Frames a request may generate: `max_frames`, and no more than the
/// positions left after the prompt's `prompt_rows` (one for the first
/// frame's input).
fn frame_cap(max_frames: usize, max_positions: usize, prompt_rows: usize) -> usize {
    max_frames.min(max_positions.saturating_sub(prompt_rows + 1))
}

/// The end of the progress line: nothing after an end-of-speech token,
/// otherwise why generation stopped.
fn stop_note(stop: Option<StopReason>) -> &'static str {
    match stop {
        Some(StopReason::Eos) => "",
        _ => " (stopped at --max-frames, no end-of-speech token)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_frames_zero_is_refused() {
        let e = check_max_frames(0, 8192, 12.5).unwrap_err();
        assert_eq!(e.to_string(), "--max-frames must be at least 1");
    }

    #[test]
    fn max_frames_at_the_position_limit_is_refused_with_minutes_of_audio() {
        assert_eq!(check_max_frames(8191, 8192, 12.5).unwrap(), 8191);
        let e = check_max_frames(8192, 8192, 12.5).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--max-frames 8192 is beyond what this checkpoint can attend to (8192 positions ≈ 11 min of audio)"
        );
    }

    #[test]
    fn frame_cap_leaves_room_for_the_prompt_and_the_first_input() {
        assert_eq!(frame_cap(100, 8192, 20), 100);
        assert_eq!(frame_cap(9000, 8192, 20), 8192 - 21);
        // A prompt that fills the context leaves no frame, never underflows.
        assert_eq!(frame_cap(100, 64, 64), 0);
    }

    #[test]
    fn only_an_end_of_speech_stop_is_unremarked() {
        assert_eq!(stop_note(Some(StopReason::Eos)), "");
        assert_eq!(
            stop_note(None),
            " (stopped at --max-frames, no end-of-speech token)"
        );
    }
}
