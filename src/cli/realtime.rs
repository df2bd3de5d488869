//! Which precision a command runs when `--precision` is not given, and the
//! one line each command that speaks (`serve`, `speak`, `bench`) prints at
//! start: the precision, what it costs in fidelity, and the speed to expect.
//!
//! Where audio is heard as it is made (`serve`, `speak --play`, and
//! `bench`, which measures what `serve` does) the default is `fast`: on the
//! full-size random 0.6B its int8 LMs (the talker's KV cache in bf16, as the
//! official keeps it) are as close to the stored weights as the official
//! implementation's own bf16 is (codebook-0 KL 1.2e-4 against its 1.27e-4,
//! docs/performance.md, "The yardstick"), and one session
//! streams at rtf 0.49-0.78 on the measured 2-core hosts (up to 0.98 on a
//! Zen 4 whose memory other tenants share), where `reference` runs at
//! 1.3-2.9: slower than real time. A file (`speak --out` without
//! `--play`) is not listened to while it is made, so it keeps `reference`,
//! the numerics the golden tests hold to; `--precision fast` makes it ~2.5x
//! sooner.

use tts_models::{Code2WavPrecision, LoadOptions, Precision, PrecisionPlan, Preset};

/// Where a command's audio goes, which decides its default precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Use {
    /// Heard as it is made (`serve`, `speak --play`, `bench`): real time first.
    Live,
    /// Written to a file: the reference numerics.
    File,
}

impl Use {
    pub(crate) fn default_preset(self) -> Preset {
        match self {
            Use::Live => Preset::Fast,
            Use::File => Preset::Reference,
        }
    }

    fn default_note(self) -> &'static str {
        match self {
            Use::Live => "the default for live audio",
            Use::File => "the default for files",
        }
    }
}

/// `--precision` if given, else the default for `use_`; and whether the
/// default was taken (the startup line says so).
pub(crate) fn resolve(given: Option<LoadOptions>, use_: Use) -> (LoadOptions, bool) {
    match given {
        Some(o) => (o, false),
        None => (LoadOptions::from_plan(use_.default_preset().plan()), true),
    }
}

/// The startup line: `precision NAME (what it is[, the default for ...]):
/// fidelity; speed; the flag for the other end`. Figures: the full-size
/// random checkpoints of docs/performance.md ("Reading `tts-rt
/// fidelity`", "What is not met"): KL of codebook 0 against the stored
/// weights, rtf of one session on 2-core hosts.
pub(crate) fn startup_line(plan: &PrecisionPlan, defaulted: Option<Use>) -> String {
    let (what, cost) = describe(plan);
    let name = match plan.preset() {
        Some(p) => p.name().to_string(),
        None => plan.name(),
    };
    let note = match defaulted {
        Some(u) => format!(", {}", u.default_note()),
        None => String::new(),
    };
    format!("precision {name} ({what}{note}): {cost}")
}

/// What the plan is, and what it costs.
fn describe(plan: &PrecisionPlan) -> (&'static str, &'static str) {
    match plan.preset() {
        Some(Preset::Fast) => (
            "int8 LMs, bf16 talker KV cache, int8/bf16 vocoder",
            "as close to the stored weights as the official bf16 (codebook-0 KL 1.2e-4; official bf16 1.3e-4; the vocoder's waveform within the official bf16's own error); real time on 2 AVX-512 cores at 0.6B (rtf 0.5-0.8 measured, up to 1.0 on a busy host; 2.7 on an AVX2-only Zen 1); --precision f32 for the reference numerics",
        ),
        Some(Preset::Balanced) => (
            "int8 LMs but the code predictor's down projection and the heads, bf16 talker KV cache, bf16 vocoder",
            "codebook-0 KL 1.2e-4, as fast; real time on 2 AVX-512 cores at 0.6B, ~15% slower than fast (rtf 0.6-0.8 measured)",
        ),
        Some(Preset::Reference) => (
            "stored weights, f32 vocoder",
            "the official numerics the golden tests hold to; slower than real time on 2 cores at 0.6B (rtf 1.3-2.9 measured, ~2.5x fast's time); --precision fast for real time",
        ),
        None => {
            let uniform = plan
                .talker
                .as_uniform()
                .filter(|&t| Some(t) == plan.code_predictor.as_uniform());
            match (uniform, plan.code2wav) {
                (Some(Precision::Int8), Code2WavPrecision::F32) => (
                    "int8 LMs, f32 vocoder",
                    "codebook-0 KL 1.1e-4, as fast; the f32 vocoder makes it slower than fast",
                ),
                (Some(Precision::Q6), _) => (
                    "6-bit LMs",
                    "codebook-0 KL 1.8e-3, 16x int8's; about as fast as int8",
                ),
                (Some(Precision::Q4 | Precision::Iq4), _) => (
                    "4-bit LMs",
                    "fails the fidelity gates (codebook-0 KL ~2.7e-2, ~230x int8's): expect audible differences; the fewest bytes per frame",
                ),
                _ => (
                    "a plan of its own",
                    "its fidelity is not in the measured tables: `tts-rt fidelity --model DIR` measures it on your checkpoint",
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(s: &str) -> PrecisionPlan {
        PrecisionPlan::parse(s).unwrap()
    }

    /// Issue 31, item 1: live audio defaults to a precision that streams in
    /// real time; files keep the reference.
    #[test]
    fn real_time_by_default_live_audio_runs_fast_and_files_the_reference() {
        let (live, defaulted) = resolve(None, Use::Live);
        assert!(defaulted);
        assert_eq!(live.plan().preset(), Some(Preset::Fast));
        let (file, _) = resolve(None, Use::File);
        assert_eq!(file.plan().preset(), Some(Preset::Reference));
        let given = LoadOptions::from_plan(plan("q4"));
        assert_eq!(resolve(Some(given), Use::Live), (given, false));
    }

    #[test]
    fn real_time_by_default_the_startup_line_names_precision_fidelity_and_speed() {
        let fast = startup_line(&plan("fast"), Some(Use::Live));
        assert!(
            fast.starts_with(
                "precision fast (int8 LMs, bf16 talker KV cache, int8/bf16 vocoder, the default for live audio): "
            ),
            "{fast}"
        );
        assert!(
            fast.contains("KL 1.2e-4") && fast.contains("real time"),
            "{fast}"
        );
        assert!(fast.contains("--precision f32"), "{fast}");
        let reference = startup_line(&plan("f32"), None);
        assert!(
            reference.starts_with("precision reference (stored weights, f32 vocoder): "),
            "{reference}"
        );
        assert!(reference.contains("--precision fast"), "{reference}");
        assert!(startup_line(&plan("q4"), None).contains("fails the fidelity gates"));
        let custom = startup_line(&plan("talker.attn=int8"), None);
        assert!(custom.contains("tts-rt fidelity"), "{custom}");
        for p in ["fast", "balanced", "f32", "int8", "q6", "iq4", "q4,int8"] {
            assert!(
                !startup_line(&plan(p), None).contains('\n'),
                "one line: {p}"
            );
        }
    }
}
