//! `tts-rt fidelity`: what each precision costs on the user's own
//! checkpoint, measured the way quantized LMs are measured
//! (`tts_models::fidelity`): per-stage teacher-forced KL and top-1 against
//! the stored weights, the end-of-speech shift, the duration drift of
//! sampled generation over several seeds, the weight bytes one frame
//! streams, and the real-time factor on this machine — then the fastest
//! preset whose per-stage KL stays within the int8 anchor's.
//!
//! By default every named preset (`balanced`, `fast`) and every
//! [`Precision`] format uniform over both LMs (`int8`, `q4`, and any format
//! the enum gains) is measured beside the anchors on the same harness: the
//! stored weights (`reference`, the floor: KL 0 by construction), `int8`
//! (the acceptable anchor) and `q4` (the reference 4-bit anchor).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use tts_models::config::ModelKind;
use tts_models::fidelity::{teacher_forced, StageFidelity};
use tts_models::{LoadOptions, Precision, Preset, Qwen3Tts, Request, VoiceClone};

use super::{model_path, parse_precision};

#[derive(Args)]
pub(crate) struct FidelityArgs {
    /// Checkpoint directory, or a Hugging Face repo id such as
    /// Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice (found in the hub cache, else
    /// downloaded there). Default: $TTS_RT_MODEL, else
    /// Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice.
    #[arg(long)]
    model: Option<PathBuf>,
    /// A precision to compare with the stored weights (repeatable): any
    /// `--precision` spec (a preset, `q4,int8`, `balanced,cp.mlp_down=int8`,
    /// ...). Default: every preset and every format (balanced, fast, int8,
    /// q4, ...). The anchors `int8` and `q4` are always measured.
    #[arg(long = "preset", value_name = "SPEC")]
    presets: Vec<String>,
    /// Text to speak (repeatable); default: three sentences of different
    /// lengths.
    #[arg(long)]
    text: Vec<String>,
    /// Seeds per text (sampled with the checkpoint's generation settings).
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Frames per utterance at most.
    #[arg(long, default_value_t = 60)]
    max_frames: usize,
    /// A candidate is recommended when each stage's mean KL is at most this
    /// many times the int8 anchor's.
    #[arg(long, default_value_t = 1.5)]
    kl_slack: f64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

const TEXTS: [&str; 3] = [
    "Hello, and thank you for calling.",
    "The quick brown fox jumps over the lazy dog, then takes a well-earned nap in the sun.",
    "Speech synthesis turns written text into audio; a good voice sounds natural, keeps its pace, and ends where the sentence ends.",
];

/// One text × seed, with the reference model's own codes.
struct Case {
    req: Request,
    codes: Vec<u32>,
}

/// What one precision measured.
struct Arm {
    spec: String,
    /// The plan's full `--precision` spelling (every class when mixed).
    plan: String,
    stages: StageFidelity,
    frames: Vec<usize>,
    /// Weight bytes one frame streams: (talker, code predictor).
    bytes_per_frame: (usize, usize),
    rtf: Option<f64>,
}

/// The int8 anchor (the acceptable precision) and the reference 4-bit one.
const ANCHORS: [&str; 2] = ["int8", "q4"];

/// The default arms: the named presets but `reference` (the floor, always
/// measured), then each format uniform over both LMs (anchors included).
fn default_specs() -> Vec<String> {
    Preset::ALL
        .iter()
        .filter(|p| **p != Preset::Reference)
        .map(|p| p.name().to_string())
        .chain(
            Precision::ALL
                .iter()
                .filter(|p| **p != Precision::F32)
                .map(|p| p.name().to_string()),
        )
        .collect()
}

/// What an arm is in the report: an anchor, a preset or a spelling.
fn role(spec: &str) -> &'static str {
    match spec {
        "int8" => "anchor: int8 (acceptable)",
        "q4" => "anchor: reference 4-bit",
        s if Preset::from_name(s).is_some() => "preset",
        s if Precision::from_name(s).is_some() => "format",
        _ => "plan",
    }
}

pub(crate) fn fidelity(a: FidelityArgs) -> Result<()> {
    if a.seeds == 0 || a.max_frames == 0 {
        bail!("--seeds and --max-frames must be at least 1");
    }
    let dir = model_path::resolve(a.model.as_deref())?;
    let mut specs: Vec<String> = if a.presets.is_empty() {
        default_specs()
    } else {
        a.presets.iter().map(|s| s.trim().to_string()).collect()
    };
    for s in &specs {
        parse_precision(s).map_err(|e| anyhow::anyhow!("--preset {s:?}: {e}"))?;
    }
    for (i, anchor) in ANCHORS.iter().enumerate() {
        if !specs.iter().any(|s| s == anchor) {
            specs.insert(i.min(specs.len()), anchor.to_string());
        }
    }
    let reference = load(&dir, LoadOptions::default())?;
    let texts: Vec<String> = if a.text.is_empty() {
        TEXTS.iter().map(|s| s.to_string()).collect()
    } else {
        a.text.clone()
    };
    let base = base_request(&reference, a.max_frames)?;
    let seeds: Vec<u64> = (0..a.seeds).collect();
    let mut cases = Vec::new();
    for t in &texts {
        for &seed in &seeds {
            let mut req = base.clone();
            req.text = t.clone();
            req.options.seed = seed;
            let codes = reference.start(&req)?.run_to_end();
            cases.push(Case { req, codes });
        }
    }
    let measure = |m: &Arc<Qwen3Tts>, spec: &str, plan: String| -> Result<Arm> {
        let mut stages = StageFidelity::default();
        for c in &cases {
            stages.merge(&teacher_forced(&reference, m, &c.req, &c.codes)?);
        }
        let (frames, rtf) = free_running(m, &cases)?;
        Ok(Arm {
            spec: spec.to_string(),
            plan,
            stages,
            frames,
            bytes_per_frame: (
                m.talker.bytes_per_frame(),
                m.code_predictor.bytes_per_frame(),
            ),
            rtf,
        })
    };
    let reference_arm = measure(&reference, "reference", LoadOptions::default().name())?;
    let mut arms = Vec::new();
    for spec in &specs {
        eprintln!("measuring {spec} ...");
        let o = parse_precision(spec).map_err(anyhow::Error::msg)?;
        let m = load(&dir, o)?;
        arms.push(measure(&m, spec, o.name())?);
    }
    let anchor = arms
        .iter()
        .find(|a| a.spec == "int8")
        .expect("int8 is always measured");
    let (a0, ap) = (
        anchor.stages.codebook0.mean_kl(),
        anchor.stages.predicted_all().mean_kl(),
    );
    let ref_frames = mean(&reference_arm.frames);
    let within = |arm: &Arm| {
        arm.stages.codebook0.mean_kl() <= a0 * a.kl_slack + 1e-12
            && arm.stages.predicted_all().mean_kl() <= ap * a.kl_slack + 1e-12
            && (mean(&arm.frames) - ref_frames).abs() <= 0.1 * ref_frames.max(1.0)
    };
    let recommended = arms
        .iter()
        .filter(|arm| within(arm))
        .min_by(|x, y| {
            let r = |a: &Arm| a.rtf.unwrap_or(f64::INFINITY);
            r(x).total_cmp(&r(y))
        })
        .map_or("reference (the stored weights)".to_string(), |a| {
            a.spec.clone()
        });
    let report = json!({
        "model": dir.display().to_string(),
        "family": reference.config.kind.name(),
        "cases": cases.len(),
        "texts": texts.len(),
        "seeds": a.seeds,
        "max_frames": a.max_frames,
        "threads": rayon::current_num_threads(),
        "isa": tts_kernels::isa().name(),
        "bf16_conv": tts_kernels::bf16_conv_path(),
        "reference": arm_json(&reference_arm, ref_frames),
        "arms": arms.iter().map(|x| {
            let mut v = arm_json(x, ref_frames);
            v["within_int8_anchor"] = within(x).into();
            v["kl_vs_int8"] = json!({
                "codebook0": ratio(x.stages.codebook0.mean_kl(), a0),
                "predicted": ratio(x.stages.predicted_all().mean_kl(), ap),
            });
            v
        }).collect::<Vec<_>>(),
        "kl_slack": a.kl_slack,
        "recommended": recommended,
        "note": "Measured against this checkpoint's stored weights on its own texts. On random weights only the ranking of precisions carries over; on the trained checkpoint these figures are what the precisions cost.",
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", describe(&report));
    }
    Ok(())
}

fn load(dir: &std::path::Path, o: LoadOptions) -> Result<Arc<Qwen3Tts>> {
    Ok(Arc::new(Qwen3Tts::load_with(dir, o).with_context(
        || format!("loading checkpoint {}", dir.display()),
    )?))
}

/// A request each family can speak: CustomVoice's first speaker, a
/// VoiceDesign description, a Base x-vector clone of a synthetic clip.
fn base_request(m: &Arc<Qwen3Tts>, max_frames: usize) -> Result<Request> {
    let mut options = m.default_options();
    options.max_frames = max_frames;
    let mut req = Request {
        text: String::new(),
        speaker: None,
        language: "auto".into(),
        instruct: None,
        voice_clone: None,
        text_streaming: m.config.kind.default_text_streaming(),
        options,
    };
    match m.config.kind {
        ModelKind::CustomVoice => req.speaker = m.speakers().into_iter().next(),
        ModelKind::VoiceDesign => {
            req.instruct = Some("A calm, warm voice speaking clearly at a moderate pace.".into())
        }
        ModelKind::Base => {
            let clip = tts_audio::reference::synthetic_speech(5.0);
            let (v, _): (VoiceClone, _) = m.clone_voice(&clip, None, true)?;
            req.voice_clone = Some(Arc::new(v));
        }
    }
    Ok(req)
}

/// Frames each case's sampled generation runs to, and the offline real-time
/// factor of generating and decoding them all.
fn free_running(m: &Arc<Qwen3Tts>, cases: &[Case]) -> Result<(Vec<usize>, Option<f64>)> {
    let mut frames = Vec::new();
    let (mut busy, mut audio_s) = (0.0f64, 0.0f64);
    for c in cases {
        let t = Instant::now();
        let mut g = m.start(&c.req)?;
        let codes = g.run_to_end();
        if g.frames() > 0 {
            m.code2wav.decode(&codes, g.frames())?;
        }
        busy += t.elapsed().as_secs_f64();
        audio_s += g.frames() as f64 * m.code2wav.samples_per_frame() as f64
            / m.code2wav.sample_rate() as f64;
        frames.push(g.frames());
    }
    Ok((frames, (audio_s > 0.0).then(|| busy / audio_s)))
}

/// `x / anchor`, None when the anchor measured zero.
fn ratio(x: f64, anchor: f64) -> Option<f64> {
    (anchor > 0.0).then(|| x / anchor)
}

fn mean(v: &[usize]) -> f64 {
    v.iter().sum::<usize>() as f64 / v.len().max(1) as f64
}

fn arm_json(a: &Arm, ref_frames: f64) -> Value {
    let p = a.stages.predicted_all();
    json!({
        "precision": a.spec,
        "role": if a.spec == "reference" { "anchor: floor (stored weights)" } else { role(&a.spec) },
        "plan": a.plan,
        "codebook0": {"mean_kl": a.stages.codebook0.mean_kl(), "max_kl": a.stages.codebook0.kl_max,
                      "top1": a.stages.codebook0.top1(), "rows": a.stages.codebook0.rows},
        "predicted": {"mean_kl": p.mean_kl(), "max_kl": p.kl_max, "top1": p.top1(), "rows": p.rows},
        "predicted_per_codebook_mean_kl": a.stages.predicted.iter().map(|x| x.mean_kl()).collect::<Vec<_>>(),
        "eos": {"mean_abs_logprob_shift": a.stages.eos.mean_abs(), "max_abs_logprob_shift": a.stages.eos.abs_max,
                "mean_signed_logprob_shift": a.stages.eos.mean_signed()},
        "frames": a.frames,
        "mean_frames": mean(&a.frames),
        "duration_drift": if ref_frames > 0.0 { Some(mean(&a.frames) / ref_frames - 1.0) } else { None },
        "bytes_per_frame": a.bytes_per_frame.0 + a.bytes_per_frame.1,
        "bytes_per_frame_talker": a.bytes_per_frame.0,
        "bytes_per_frame_code_predictor": a.bytes_per_frame.1,
        "rtf_offline": a.rtf,
    })
}

fn describe(r: &Value) -> String {
    let mut out = format!(
        "fidelity of {} ({}), {} cases ({} texts x {} seeds, <= {} frames), {} threads, {}\n",
        r["model"].as_str().unwrap_or(""),
        r["family"].as_str().unwrap_or(""),
        r["cases"],
        r["texts"],
        r["seeds"],
        r["max_frames"],
        r["threads"],
        r["isa"].as_str().unwrap_or("")
    );
    out += &format!(
        "{:<10} {:>10} {:>7} {:>7} {:>10} {:>7} {:>7} {:>10} {:>9} {:>9} {:>7}  {}\n",
        "precision",
        "c0 KL",
        "xint8",
        "c0 top1",
        "cp KL",
        "xint8",
        "cp top1",
        "eos shift",
        "duration",
        "MB/frame",
        "rtf",
        "role"
    );
    let x = |v: &Value| v.as_f64().map_or("-".to_string(), |v| format!("{v:.2}"));
    let row = |a: &Value| {
        format!(
            "{:<10} {:>10.3e} {:>7} {:>7.4} {:>10.3e} {:>7} {:>7.4} {:>10.3e} {:>+8.1}% {:>9.2} {:>7}  {}\n",
            a["precision"].as_str().unwrap_or(""),
            a["codebook0"]["mean_kl"].as_f64().unwrap_or(f64::NAN),
            x(&a["kl_vs_int8"]["codebook0"]),
            a["codebook0"]["top1"].as_f64().unwrap_or(f64::NAN),
            a["predicted"]["mean_kl"].as_f64().unwrap_or(f64::NAN),
            x(&a["kl_vs_int8"]["predicted"]),
            a["predicted"]["top1"].as_f64().unwrap_or(f64::NAN),
            a["eos"]["mean_abs_logprob_shift"]
                .as_f64()
                .unwrap_or(f64::NAN),
            100.0 * a["duration_drift"].as_f64().unwrap_or(f64::NAN),
            a["bytes_per_frame"].as_f64().unwrap_or(f64::NAN) / 1e6,
            a["rtf_offline"]
                .as_f64()
                .map_or("missing".to_string(), |v| format!("{v:.3}")),
            a["role"].as_str().unwrap_or(""),
        )
    };
    out += &row(&r["reference"]);
    for a in r["arms"].as_array().into_iter().flatten() {
        out += &row(a);
    }
    out += &format!(
        "recommended: {} (the fastest whose per-stage KL is within {}x the int8 anchor's and whose duration stays within 10%)\n{}\n",
        r["recommended"].as_str().unwrap_or(""),
        r["kl_slack"],
        r["note"].as_str().unwrap_or("")
    );
    out
}
