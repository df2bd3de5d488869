//! `tts-rt fidelity`: what each precision costs on the user's own
//! checkpoint, measured the way quantized LMs are measured
//! (`tts_models::fidelity`): per-stage teacher-forced KL and top-1 against
//! the stored weights, the end-of-speech shift, the duration drift of
//! sampled generation over several seeds, the weight bytes one frame
//! streams, and the real-time factor on this machine — then the fastest
//! preset whose per-stage KL stays within the int8 anchor's.
//!
//! The real-time factor is timed on one fixed workload (the longest text,
//! `--max-frames` frames with end of speech suppressed, generated and
//! decoded offline), `--timing-passes` times per arm. The arms that pass
//! the fidelity gate, the ones a recommendation chooses between, stay
//! loaded together and are timed in interleaved passes with their order
//! rotated, so a host whose speed drifts (other tenants, memory bandwidth)
//! moves every candidate alike; the rest are timed right after their
//! fidelity. The fastest candidate is recommended when it ran faster than
//! each other candidate in every paired pass; otherwise the speed is not a
//! ranking and the recommendation is the closest of the tied ones.
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

use super::progress::Progress;
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
    /// Timed passes of the fixed workload per arm (the rtf column is their
    /// median, with min and max). The arms within the int8 anchor's KL are
    /// held in memory together while their passes interleave.
    #[arg(long, default_value_t = 5)]
    timing_passes: usize,
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
    /// The real-time factor of each timed pass of the fixed workload.
    rtf: Vec<f64>,
    /// Whether those passes interleaved with the other candidates'.
    interleaved: bool,
}

impl Arm {
    /// (median, min, max) of the timed passes; None when none ran.
    fn rtf_summary(&self) -> Option<(f64, f64, f64)> {
        let mut v = self.rtf.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some((median, v[0], v[n - 1]))
    }
}

/// Whether `a` ran faster than `b` in every timed pass: pass by pass when
/// both have the same number of passes (interleaved passes share their
/// minute of the host), else by their ranges lying apart.
fn faster_every_pass(a: &Arm, b: &Arm) -> bool {
    if a.rtf.len() == b.rtf.len() && !a.rtf.is_empty() {
        return a.rtf.iter().zip(&b.rtf).all(|(x, y)| x < y);
    }
    match (a.rtf_summary(), b.rtf_summary()) {
        (Some(x), Some(y)) => x.2 < y.1,
        _ => false,
    }
}

/// The recommendation and why: the fastest arm within the gate by median
/// rtf when it ran faster than every other candidate in every pass; else,
/// among the fastest and the candidates it did not beat in every pass (not
/// a ranking), the closest to the stored weights (code predictor KL, then
/// codebook 0's).
fn recommend(candidates: &[&Arm]) -> (String, String) {
    let med = |a: &Arm| a.rtf_summary().map_or(f64::INFINITY, |s| s.0);
    let mut c: Vec<&Arm> = candidates.to_vec();
    c.sort_by(|x, y| med(x).total_cmp(&med(y)));
    let Some(best) = c.first() else {
        return (
            "reference (the stored weights)".into(),
            "no precision stays within the int8 anchor's KL and duration".into(),
        );
    };
    let tied: Vec<&Arm> = c
        .iter()
        .copied()
        .filter(|a| std::ptr::eq(*a, *best) || !faster_every_pass(best, a))
        .collect();
    if tied.len() <= 1 {
        return (
            best.spec.clone(),
            "the fastest whose per-stage KL is within the int8 anchor's and whose duration stays within 10%".into(),
        );
    }
    let closest = tied
        .iter()
        .min_by(|x, y| {
            let k = |a: &Arm| {
                (
                    a.stages.predicted_all().mean_kl(),
                    a.stages.codebook0.mean_kl(),
                )
            };
            k(x).partial_cmp(&k(y)).unwrap_or(std::cmp::Ordering::Equal)
        })
        .expect("tied is not empty");
    let names: Vec<&str> = tied.iter().map(|a| a.spec.as_str()).collect();
    (
        closest.spec.clone(),
        format!(
            "{}: none ran faster than the others in every pass on this machine, not a ranking; the closest of them to the stored weights",
            names.join(", ")
        ),
    )
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
    if a.seeds == 0 || a.max_frames == 0 || a.timing_passes == 0 {
        bail!("--seeds, --max-frames and --timing-passes must be at least 1");
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
    // The int8 anchor is measured first (the report keeps this order):
    // every later arm is judged against it as soon as its fidelity is
    // known, to decide whether it stays loaded for the interleaved timing.
    let int8_at = specs
        .iter()
        .position(|s| s == "int8")
        .expect("int8 is always measured");
    let order: Vec<usize> = std::iter::once(int8_at)
        .chain((0..specs.len()).filter(|&i| i != int8_at))
        .collect();
    let reference = load(&dir, LoadOptions::default())?;
    let texts: Vec<String> = if a.text.is_empty() {
        TEXTS.iter().map(|s| s.to_string()).collect()
    } else {
        a.text.clone()
    };
    let base = base_request(&reference, a.max_frames)?;
    let seeds: Vec<u64> = (0..a.seeds).collect();
    // On a terminal: which step runs (minutes on the full-size checkpoints).
    let progress = Progress::stderr("fidelity");
    let n_cases = texts.len() * seeds.len();
    let mut cases = Vec::new();
    for t in &texts {
        for &seed in &seeds {
            progress.show(&format!(
                "the reference's codes, case {}/{n_cases}",
                cases.len() + 1
            ));
            let mut req = base.clone();
            req.text = t.clone();
            req.options.seed = seed;
            let codes = reference.start(&req)?.run_to_end();
            cases.push(Case { req, codes });
        }
    }
    let measure = |m: &Arc<Qwen3Tts>, spec: &str, plan: String| -> Result<Arm> {
        let mut stages = StageFidelity::default();
        for (j, c) in cases.iter().enumerate() {
            progress.show(&format!("{spec}: case {}/{n_cases}", j + 1));
            stages.merge(&teacher_forced(&reference, m, &c.req, &c.codes)?);
        }
        Ok(Arm {
            spec: spec.to_string(),
            plan,
            stages,
            frames: free_running(m, &cases)?,
            bytes_per_frame: (
                m.talker.bytes_per_frame(),
                m.code_predictor.bytes_per_frame(),
            ),
            rtf: Vec::new(),
            interleaved: false,
        })
    };
    // The timing workload: the longest text, the full frame budget.
    let mut timing_req = base.clone();
    timing_req.text = texts
        .iter()
        .max_by_key(|t| t.chars().count())
        .cloned()
        .unwrap_or_default();
    timing_req.options.ignore_eos = true;
    let time_passes = |m: &Arc<Qwen3Tts>, n: usize| -> Result<Vec<f64>> {
        (0..n).map(|_| time_once(m, &timing_req)).collect()
    };
    let mut reference_arm = measure(&reference, "reference", LoadOptions::default().name())?;
    reference_arm.rtf = time_passes(&reference, a.timing_passes)?;
    let ref_frames = mean(&reference_arm.frames);
    let mut anchor_kl: Option<(f64, f64)> = None;
    let within = |arm: &Arm, (a0, ap): (f64, f64)| {
        arm.stages.codebook0.mean_kl() <= a0 * a.kl_slack + 1e-12
            && arm.stages.predicted_all().mean_kl() <= ap * a.kl_slack + 1e-12
            && (mean(&arm.frames) - ref_frames).abs() <= 0.1 * ref_frames.max(1.0)
    };
    let mut arms: Vec<Option<Arm>> = specs.iter().map(|_| None).collect();
    // The candidates (within the gate), held for the interleaved timing.
    let mut held: Vec<(usize, Arc<Qwen3Tts>)> = Vec::new();
    for &i in &order {
        let spec = &specs[i];
        progress.finish();
        eprintln!("measuring {spec} ...");
        let o = parse_precision(spec).map_err(anyhow::Error::msg)?;
        let m = load(&dir, o)?;
        let mut arm = measure(&m, spec, o.name())?;
        let gate = *anchor_kl.get_or_insert((
            arm.stages.codebook0.mean_kl(),
            arm.stages.predicted_all().mean_kl(),
        ));
        if within(&arm, gate) {
            held.push((i, m));
        } else {
            arm.rtf = time_passes(&m, a.timing_passes)?;
        }
        arms[i] = Some(arm);
    }
    let mut arms: Vec<Arm> = arms.into_iter().flatten().collect();
    progress.finish();
    if !held.is_empty() {
        eprintln!(
            "timing {} in {} interleaved passes ...",
            held.iter()
                .map(|(i, _)| arms[*i].spec.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            a.timing_passes
        );
    }
    for pass in 0..a.timing_passes {
        for k in 0..held.len() {
            let (i, m) = &held[(k + pass) % held.len()];
            let rtf = time_once(m, &timing_req)?;
            progress.show(&format!(
                "timing pass {}/{}, {}: rtf {rtf:.2}",
                pass + 1,
                a.timing_passes,
                arms[*i].spec
            ));
            arms[*i].rtf.push(rtf);
            arms[*i].interleaved = true;
        }
    }
    drop(held);
    progress.finish();
    let (a0, ap) = anchor_kl.expect("int8 is always measured");
    let candidates: Vec<&Arm> = arms.iter().filter(|x| within(x, (a0, ap))).collect();
    let (recommended, reason) = recommend(&candidates);
    let report = json!({
        "model": dir.display().to_string(),
        "family": reference.config.kind.name(),
        "cases": cases.len(),
        "texts": texts.len(),
        "seeds": a.seeds,
        "max_frames": a.max_frames,
        "threads": rayon::current_num_threads(),
        "timing": {
            "text": timing_req.text,
            "frames": a.max_frames,
            "end_of_speech": "suppressed",
            "passes": a.timing_passes,
        },
        "isa": tts_kernels::isa().name(),
        "bf16_conv": tts_kernels::bf16_conv_path(),
        "reference": arm_json(&reference_arm, ref_frames),
        "arms": arms.iter().map(|x| {
            let mut v = arm_json(x, ref_frames);
            v["within_int8_anchor"] = within(x, (a0, ap)).into();
            v["kl_vs_int8"] = json!({
                "codebook0": ratio(x.stages.codebook0.mean_kl(), a0),
                "predicted": ratio(x.stages.predicted_all().mean_kl(), ap),
            });
            v
        }).collect::<Vec<_>>(),
        "kl_slack": a.kl_slack,
        "recommended": recommended,
        "recommended_because": reason,
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

/// Frames each case's sampled generation runs to.
fn free_running(m: &Arc<Qwen3Tts>, cases: &[Case]) -> Result<Vec<usize>> {
    cases
        .iter()
        .map(|c| {
            let mut g = m.start(&c.req)?;
            g.run_to_end();
            Ok(g.frames())
        })
        .collect()
}

/// The offline real-time factor of one pass of the timing workload:
/// generating its frames and decoding them, over the audio's length.
fn time_once(m: &Arc<Qwen3Tts>, req: &Request) -> Result<f64> {
    let t = Instant::now();
    let mut g = m.start(req)?;
    let codes = g.run_to_end();
    if g.frames() > 0 {
        m.code2wav.decode(&codes, g.frames())?;
    }
    let busy = t.elapsed().as_secs_f64();
    let audio_s =
        g.frames() as f64 * m.code2wav.samples_per_frame() as f64 / m.code2wav.sample_rate() as f64;
    if audio_s <= 0.0 {
        bail!("the timing workload produced no audio");
    }
    Ok(busy / audio_s)
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
    let rtf = a.rtf_summary();
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
        "rtf_offline": rtf.map(|s| s.0),
        "rtf_offline_min": rtf.map(|s| s.1),
        "rtf_offline_max": rtf.map(|s| s.2),
        "rtf_passes": a.rtf,
        "rtf_timing": if a.interleaved { "interleaved with the other candidates" } else { "alone, after its fidelity" },
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
        "{:<10} {:>10} {:>7} {:>7} {:>10} {:>7} {:>7} {:>10} {:>9} {:>9} {:>19}  {}\n",
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
        "rtf (min-max)",
        "role"
    );
    let x = |v: &Value| v.as_f64().map_or("-".to_string(), |v| format!("{v:.2}"));
    let row = |a: &Value| {
        format!(
            "{:<10} {:>10.3e} {:>7} {:>7.4} {:>10.3e} {:>7} {:>7.4} {:>10.3e} {:>+8.1}% {:>9.2} {:>19}  {}\n",
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
            match (
                a["rtf_offline"].as_f64(),
                a["rtf_offline_min"].as_f64(),
                a["rtf_offline_max"].as_f64(),
            ) {
                (Some(m), Some(lo), Some(hi)) => format!("{m:.3} ({lo:.3}-{hi:.3})"),
                _ => "missing".to_string(),
            },
            a["role"].as_str().unwrap_or(""),
        )
    };
    out += &row(&r["reference"]);
    for a in r["arms"].as_array().into_iter().flatten() {
        out += &row(a);
    }
    out += &format!(
        "rtf: {} passes of {} frames of the longest text, end of speech suppressed, generated and decoded offline; the candidates' passes interleaved and compared pass by pass\n",
        r["timing"]["passes"], r["timing"]["frames"]
    );
    out += &format!(
        "recommended: {} ({}; KL slack {}x)\n{}\n",
        r["recommended"].as_str().unwrap_or(""),
        r["recommended_because"].as_str().unwrap_or(""),
        r["kl_slack"],
        r["note"].as_str().unwrap_or("")
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tts_models::fidelity::Agreement;

    /// An arm with one predicted codebook whose mean KL is `cp_kl`, and
    /// these timed passes.
    fn arm(spec: &str, cp_kl: f64, rtf: &[f64]) -> Arm {
        let agree = |kl: f64| Agreement {
            rows: 1,
            kl_sum: kl,
            kl_max: kl,
            ..Agreement::default()
        };
        Arm {
            spec: spec.into(),
            plan: spec.into(),
            stages: StageFidelity {
                codebook0: agree(1e-4),
                predicted: vec![agree(cp_kl)],
                ..StageFidelity::default()
            },
            frames: vec![10],
            bytes_per_frame: (1, 1),
            rtf: rtf.to_vec(),
            interleaved: true,
        }
    }

    #[test]
    fn a_clear_ranking_recommends_the_fastest() {
        // Ranges overlap (0.60 > 0.58), but fast won every paired pass.
        let (fast, balanced) = (
            arm("fast", 2.2e-4, &[0.50, 0.60, 0.51]),
            arm("balanced", 2.0e-4, &[0.58, 0.61, 0.62]),
        );
        let (pick, why) = recommend(&[&balanced, &fast]);
        assert_eq!(pick, "fast");
        assert!(why.contains("the fastest"), "{why}");
        // Unpaired (different pass counts): by ranges, which overlap here.
        let one_pass = arm("balanced", 2.0e-4, &[0.58]);
        assert_eq!(recommend(&[&one_pass, &fast]).0, "balanced");
    }

    #[test]
    fn overlapping_timings_recommend_the_closest_and_say_so() {
        // fast is ahead by the median but not in pass 2; int8 is behind
        // fast in every pass.
        let (fast, balanced, int8) = (
            arm("fast", 2.2e-4, &[0.50, 0.58, 0.55]),
            arm("balanced", 2.0e-4, &[0.56, 0.57, 0.57]),
            arm("int8", 2.2e-4, &[0.57, 0.59, 0.56]),
        );
        let (pick, why) = recommend(&[&int8, &fast, &balanced]);
        assert_eq!(pick, "balanced");
        assert!(why.contains("fast, balanced"), "{why}");
        assert!(why.contains("not a ranking"), "{why}");
        assert!(!why.contains("int8"), "{why}");
    }

    #[test]
    fn no_candidate_recommends_the_stored_weights() {
        let (pick, why) = recommend(&[]);
        assert!(pick.starts_with("reference"), "{pick}");
        assert!(why.contains("no precision"), "{why}");
    }

    #[test]
    fn the_rtf_summary_is_median_min_max() {
        assert_eq!(
            arm("x", 0.0, &[0.3, 0.1, 0.2]).rtf_summary(),
            Some((0.2, 0.1, 0.3))
        );
        assert_eq!(
            arm("x", 0.0, &[0.4, 0.1, 0.2, 0.3]).rtf_summary(),
            Some((0.25, 0.1, 0.4))
        );
        assert_eq!(arm("x", 0.0, &[]).rtf_summary(), None);
    }
}
