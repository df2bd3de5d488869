//! The bench's voices: what each family's requests speak with, and the cost
//! of making a cloned voice.
//!
//! - CustomVoice: the checkpoint's first preset speaker (as before).
//! - Base: a voice made once, before the cells, from `--ref-audio FILE
//!   --ref-text "..."` or a deterministic synthetic clip, then stored (an
//!   `Arc<VoiceClone>` shared by every request, as a stored voice of the
//!   library is): ICL by default, `--x-vector-only` for the x-vector mode.
//!   What making it cost (x-vector and codes, each also per second of
//!   audio) is reported beside the cells.
//! - VoiceDesign: a fixed description (`--instruct` to change it).
//!
//! `--clone-cost` times the two encoders alone on synthetic clips of
//! several lengths (interleaved runs, median and spread) instead of running
//! cells.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use tts_models::config::ModelKind;
use tts_models::{Qwen3Tts, VoiceClone};

/// Voice flags of `tts-rt bench`.
#[derive(Args, Clone, Debug)]
pub(crate) struct VoiceArgs {
    /// Base checkpoints: the reference clip the bench's voice is cloned from
    /// (any format `speak --ref-audio` reads). Default: a synthetic clip of
    /// --ref-seconds.
    #[arg(long, requires = "ref_text")]
    ref_audio: Option<PathBuf>,
    /// The transcript of --ref-audio (ICL needs it).
    #[arg(long)]
    ref_text: Option<String>,
    /// Length of the synthetic reference clip (s) when no --ref-audio.
    #[arg(long, default_value_t = 5.0)]
    ref_seconds: f64,
    /// Base checkpoints: speak with the x-vector only (no reference codes
    /// in the prompt) instead of ICL.
    #[arg(long)]
    x_vector_only: bool,
    /// VoiceDesign checkpoints: the description of the voice.
    #[arg(long, default_value = DESCRIPTION)]
    instruct: String,
    /// Instead of synthesis cells, time making a voice (x-vector and codes
    /// apart) on synthetic clips of these lengths (s); Base checkpoints.
    #[arg(long)]
    pub clone_cost: bool,
    /// --clone-cost: clip lengths (s).
    #[arg(long, value_delimiter = ',', default_value = "3,10,20")]
    clone_seconds: Vec<f64>,
    /// --clone-cost: measured runs per clip (interleaved over the lengths,
    /// after one warm-up run of each).
    #[arg(long, default_value_t = 7)]
    clone_runs: usize,
}

const DESCRIPTION: &str = "A calm, warm female voice speaking clearly at a moderate pace.";

/// Words of the synthetic clip's transcript (about 2.5 a second, a
/// speaking rate).
const TRANSCRIPT: &str = "Thank you for calling. Please leave a short message after the tone, \
     and we will get back to you as soon as we can. Have a good day, and speak to you soon.";

/// A synthetic clip length the encoders take: positive, at most the
/// reference clips' documented maximum.
fn clip_length_ok(seconds: f64) -> bool {
    seconds.is_finite() && seconds > 0.0 && seconds <= tts_audio::MAX_REFERENCE_SECONDS
}

/// The synthetic clip's transcript: about 2.5 words a second of it.
fn synthetic_text(seconds: f64) -> String {
    let words: Vec<&str> = TRANSCRIPT.split(' ').collect();
    let n = ((seconds * 2.5).round() as usize).max(1);
    (0..n)
        .map(|i| words[i % words.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the bench's requests speak with.
pub(super) struct BenchVoice {
    pub speaker: Option<String>,
    pub instruct: Option<String>,
    pub voice_clone: Option<Arc<VoiceClone>>,
    /// For the document: which voice, and for Base what making it cost.
    pub summary: Value,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl BenchVoice {
    /// The family's voice; a Base one is made here (once, timed).
    pub fn make(model: &Qwen3Tts, a: &VoiceArgs) -> Result<BenchVoice> {
        match model.config.kind {
            ModelKind::CustomVoice => {
                let speaker = model
                    .speakers()
                    .into_iter()
                    .next()
                    .context("checkpoint has no speakers")?;
                Ok(BenchVoice {
                    summary: json!({"kind": "preset speaker", "speaker": speaker}),
                    speaker: Some(speaker),
                    instruct: None,
                    voice_clone: None,
                })
            }
            ModelKind::VoiceDesign => Ok(BenchVoice {
                summary: json!({"kind": "described voice (VoiceDesign instruct)", "instruct": a.instruct}),
                speaker: None,
                instruct: Some(a.instruct.clone()),
                voice_clone: None,
            }),
            ModelKind::Base => {
                let (samples, text, source) = match &a.ref_audio {
                    Some(p) => {
                        let clip = tts_audio::ReferenceAudio::from_path(p)
                            .with_context(|| format!("reference clip {}", p.display()))?;
                        (clip.samples, a.ref_text.clone(), p.display().to_string())
                    }
                    None => {
                        if !clip_length_ok(a.ref_seconds) {
                            bail!(
                                "--ref-seconds must be above 0 and at most {} s",
                                tts_audio::MAX_REFERENCE_SECONDS
                            );
                        }
                        (
                            tts_audio::reference::synthetic_speech(a.ref_seconds),
                            Some(synthetic_text(a.ref_seconds)),
                            format!("synthetic {} s clip", a.ref_seconds),
                        )
                    }
                };
                let seconds = samples.len() as f64 / 24_000.0;
                let (voice, t) = model
                    .clone_voice(&samples, text.as_deref(), a.x_vector_only)
                    .context("making the bench's voice")?;
                let mode = if a.x_vector_only {
                    "x-vector only"
                } else {
                    "ICL"
                };
                let frames = voice.reference.as_ref().map(|r| r.frames);
                let codes_ms = (!a.x_vector_only).then(|| ms(t.codes));
                let summary = json!({
                    "kind": format!("stored cloned voice ({mode})"),
                    "mode": mode,
                    "source": source,
                    "ref_seconds": seconds,
                    "ref_text": text,
                    "ref_frames": frames,
                    "make_once": {
                        "note": "one clone_voice call before the cells (the process's first: includes warm-up)",
                        "x_vector_ms": ms(t.x_vector),
                        "codes_ms": codes_ms,
                        "x_vector_ms_per_s": ms(t.x_vector) / seconds,
                        "codes_ms_per_s": codes_ms.map(|c| c / seconds),
                    },
                });
                Ok(BenchVoice {
                    speaker: None,
                    instruct: None,
                    voice_clone: Some(Arc::new(voice)),
                    summary,
                })
            }
        }
    }
}

/// One line for the table: which voice the cells spoke with.
pub(super) fn describe(summary: &Value) -> String {
    let mut s = format!("voice: {}", summary["kind"].as_str().unwrap_or("?"));
    if let Some(sp) = summary["speaker"].as_str() {
        s += &format!(" {sp:?}");
    }
    let m = &summary["make_once"];
    if m.is_object() {
        s += &format!(
            "; from {} ({:.1} s); made once: x-vector {:.0} ms",
            summary["source"].as_str().unwrap_or("?"),
            summary["ref_seconds"].as_f64().unwrap_or(0.0),
            m["x_vector_ms"].as_f64().unwrap_or(f64::NAN),
        );
        match m["codes_ms"].as_f64() {
            Some(c) => s += &format!(", codes {c:.0} ms"),
            None => s += ", no codes (x-vector only)",
        }
    }
    s
}

/// Nearest-rank median, min and max.
fn spread(v: &mut [f64]) -> Value {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    json!({"median": v[(n - 1) / 2], "min": v[0], "max": v[n - 1], "n": n})
}

/// `--clone-cost`: x-vector and codes timed apart for each clip length,
/// `runs` measured runs interleaved over the lengths after one warm-up of
/// each; prints a table (or the JSON document).
pub(super) fn clone_cost(
    model: &Qwen3Tts,
    a: &VoiceArgs,
    provenance: Value,
    json_out: bool,
) -> Result<()> {
    if model.config.kind != ModelKind::Base {
        bail!(
            "--clone-cost needs a Base checkpoint (this one is {}: it {})",
            model.config.kind,
            model.config.kind.capability()
        );
    }
    if a.clone_runs == 0 {
        bail!("--clone-runs must be at least 1");
    }
    if a.clone_seconds.is_empty() || !a.clone_seconds.iter().all(|&s| clip_length_ok(s)) {
        bail!(
            "--clone-seconds must be lengths above 0 and at most {} s",
            tts_audio::MAX_REFERENCE_SECONDS
        );
    }
    let clips: Vec<(f64, Vec<f32>, String)> = a
        .clone_seconds
        .iter()
        .map(|&s| {
            (
                s,
                tts_audio::reference::synthetic_speech(s),
                synthetic_text(s),
            )
        })
        .collect();
    let mut xv: Vec<Vec<f64>> = vec![Vec::new(); clips.len()];
    let mut codes: Vec<Vec<f64>> = vec![Vec::new(); clips.len()];
    let mut warm = Vec::new();
    for run in 0..=a.clone_runs {
        for (i, (_, samples, text)) in clips.iter().enumerate() {
            let (_, t) = model
                .clone_voice(samples, Some(text), false)
                .context("making a voice")?;
            if run == 0 {
                warm.push(json!({"x_vector_ms": ms(t.x_vector), "codes_ms": ms(t.codes)}));
            } else {
                xv[i].push(ms(t.x_vector));
                codes[i].push(ms(t.codes));
            }
        }
    }
    let rows: Vec<Value> = clips
        .iter()
        .enumerate()
        .map(|(i, (s, samples, _))| {
            let x = spread(&mut xv[i]);
            let c = spread(&mut codes[i]);
            json!({
                "seconds": s,
                "samples": samples.len(),
                "x_vector_ms": x,
                "codes_ms": c,
                "x_vector_ms_per_s": x["median"].as_f64().map(|m| m / s),
                "codes_ms_per_s": c["median"].as_f64().map(|m| m / s),
                "warmup": warm[i],
            })
        })
        .collect();
    let doc = json!({
        "provenance": provenance,
        "clone_cost": {
            "runs": a.clone_runs,
            "order": "interleaved: each run makes one voice per length, lengths in the given order; one warm-up run first (excluded)",
            "clip": "synthetic speech-like signal (tts_audio::reference::synthetic_speech), 24 kHz mono",
            "rows": rows,
        },
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    let p = &doc["provenance"];
    println!(
        "tts-rt bench --clone-cost  commit {}  isa {}  threads {}  runs {} (median [min–max])",
        p["git_commit"].as_str().unwrap_or("?"),
        p["isa"].as_str().unwrap_or("?"),
        p["threads"],
        a.clone_runs
    );
    println!(
        "{:>8}  {:>26}  {:>26}  {:>10}  {:>10}",
        "clip s", "x-vector ms", "codes ms", "xv ms/s", "codes ms/s"
    );
    let f = |v: &Value| {
        format!(
            "{:.1} [{:.1}–{:.1}]",
            v["median"].as_f64().unwrap_or(f64::NAN),
            v["min"].as_f64().unwrap_or(f64::NAN),
            v["max"].as_f64().unwrap_or(f64::NAN)
        )
    };
    for r in &rows {
        println!(
            "{:>8.1}  {:>26}  {:>26}  {:>10.1}  {:>10.1}",
            r["seconds"].as_f64().unwrap_or(f64::NAN),
            f(&r["x_vector_ms"]),
            f(&r["codes_ms"]),
            r["x_vector_ms_per_s"].as_f64().unwrap_or(f64::NAN),
            r["codes_ms_per_s"].as_f64().unwrap_or(f64::NAN)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_text_grows_with_the_clip() {
        assert_eq!(synthetic_text(2.0).split(' ').count(), 5);
        assert_eq!(synthetic_text(20.0).split(' ').count(), 50);
    }

    #[test]
    fn spread_is_nearest_rank() {
        let s = spread(&mut [3.0, 1.0, 2.0, 10.0]);
        assert_eq!(s["median"], 2.0);
        assert_eq!(
            (s["min"].as_f64(), s["max"].as_f64()),
            (Some(1.0), Some(10.0))
        );
    }
}
