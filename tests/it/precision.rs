//! Fidelity gates of the reduced precisions against the stored (f32/bf16)
//! weights, on the committed fixtures: teacher-forced top-1 agreement and
//! mean KL(f32 || low) of codebook 0 (talker) and of the predicted codebooks
//! (code predictor), and greedy code agreement. A precision that fails its
//! gate must not become a default (see docs/performance.md, which also
//! reports the same figures on a full-size random 0.6B checkpoint via the
//! ignored `full_size_report` test).
//!
//! Teacher forcing feeds the golden codes (the official greedy output, which
//! the f32 path reproduces exactly) to both models, so every step compares
//! the two precisions on the same context. Greedy agreement instead lets
//! each model follow its own choices: one flipped argmax changes everything
//! after it, so it is reported per case as the matching prefix too.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{request, root, Golden};
use serde_json::Value;
use tts_models::fidelity::Agreement;
use tts_models::{LoadOptions, Precision, Qwen3Tts, Request};

fn load(dir: &Path, p: Precision) -> Arc<Qwen3Tts> {
    load_opts(dir, LoadOptions::uniform(p))
}

fn load_opts(dir: &Path, o: LoadOptions) -> Arc<Qwen3Tts> {
    Arc::new(Qwen3Tts::load_with(dir, o).unwrap_or_else(|e| panic!("loading {dir:?}: {e}")))
}

/// `f32`, `int8`, or `q4,int8` (talker,code predictor) for labels.
fn label(o: LoadOptions) -> String {
    if o.talker == o.code_predictor {
        o.talker.to_string()
    } else {
        format!("{},{}", o.talker, o.code_predictor)
    }
}

fn golden_codes(fixture: &str) -> (Value, Vec<(String, Vec<u32>)>) {
    let g = Golden::load(fixture);
    let out = g.cases["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| {
            let name = case["name"].as_str().unwrap().to_string();
            let codes = g.codes(&format!("{name}.codes")).0;
            (name, codes)
        })
        .collect();
    (g.cases, out)
}

#[derive(Debug, Default)]
struct Report {
    codebook0: Agreement,
    predicted: Agreement,
    greedy_equal: usize,
    greedy_total: usize,
    /// Per case: frames identical from the start before the first
    /// difference, and the reference's frame count.
    greedy_prefix: Vec<(String, usize, usize)>,
    /// Frames matched before a divergence, and divergences (cases that
    /// differ somewhere).
    greedy_survived: usize,
    greedy_diverged: usize,
}

impl Report {
    /// Per-frame probability that greedy decoding stays on the reference's
    /// path: matched frames / (matched frames + divergences).
    fn greedy_survival(&self) -> f64 {
        self.greedy_survived as f64 / (self.greedy_survived + self.greedy_diverged).max(1) as f64
    }
}

fn compare(f32m: &Qwen3Tts, low: &Arc<Qwen3Tts>, cases: &[(String, Request, Vec<u32>)]) -> Report {
    let groups = f32m.config.talker.num_code_groups;
    let (tv, cv) = (f32m.talker.vocab_size(), f32m.code_predictor.vocab_size());
    let mut r = Report::default();
    for (name, req, codes) in cases {
        let p = f32m.build_prompt(req).unwrap();
        let (wt, wc) = f32m.teacher_force(&p, codes, codes.len() / groups);
        let (gt, gc) = low.teacher_force(&p, codes, codes.len() / groups);
        let mut a = Agreement::default();
        a.add(&wt, &gt, tv);
        r.codebook0.merge(a);
        let mut a = Agreement::default();
        a.add(&wc, &gc, cv);
        r.predicted.merge(a);

        let got = low.start(req).unwrap().run_to_end();
        let n = got.len().min(codes.len());
        r.greedy_equal += got[..n]
            .iter()
            .zip(&codes[..n])
            .filter(|(a, b)| a == b)
            .count();
        r.greedy_total += codes.len().max(got.len());
        let prefix = got
            .chunks(groups)
            .zip(codes.chunks(groups))
            .take_while(|(a, b)| a == b)
            .count();
        r.greedy_prefix
            .push((name.clone(), prefix, codes.len() / groups));
        r.greedy_survived += prefix;
        r.greedy_diverged += (got != *codes) as usize;
    }
    r
}

fn print(label: &str, r: &Report) {
    println!(
        "{label}: codebook0 top1 {:.4} meanKL {:.2e} (f32 margin {:.3}, {} rows); predicted top1 {:.4} meanKL {:.2e} \
         (margin {:.3}, {} rows); greedy: per-frame survival {:.4} ({} frames matched, {} divergences), positional code \
         agreement {:.4} ({}/{}), matching frame prefix per case {:?}",
        r.codebook0.top1(),
        r.codebook0.mean_kl(),
        r.codebook0.mean_margin(),
        r.codebook0.rows,
        r.predicted.top1(),
        r.predicted.mean_kl(),
        r.predicted.mean_margin(),
        r.predicted.rows,
        r.greedy_survival(),
        r.greedy_survived,
        r.greedy_diverged,
        r.greedy_equal as f64 / r.greedy_total.max(1) as f64,
        r.greedy_equal,
        r.greedy_total,
        r.greedy_prefix
    );
}

/// Both fixtures at `o` against their f32 models, merged.
fn fixtures_report(o: LoadOptions) -> Report {
    let p = label(o);
    let mut total = Report::default();
    for fx in ["tiny-a", "tiny-b"] {
        let dir = root().join(fx);
        let f32m = load(&dir, Precision::F32);
        let low = load_opts(&dir, o);
        assert_eq!(low.precision, o);
        let (json, codes) = golden_codes(fx);
        let cases: Vec<_> = json["cases"]
            .as_array()
            .unwrap()
            .iter()
            .zip(codes)
            .map(|(c, (name, codes))| (name, request(&f32m, c), codes))
            .collect();
        let r = compare(&f32m, &low, &cases);
        print(&format!("{fx} {p}"), &r);
        total.codebook0.merge(r.codebook0);
        total.predicted.merge(r.predicted);
        total.greedy_equal += r.greedy_equal;
        total.greedy_total += r.greedy_total;
        total.greedy_survived += r.greedy_survived;
        total.greedy_diverged += r.greedy_diverged;
    }
    print(&format!("fixtures {p}"), &total);
    total
}

/// Gate thresholds of one precision.
struct Gate {
    top1_min: f64,
    kl_max: f64,
    survival_min: f64,
}

fn check_gate(p: &str, total: &Report, g: &Gate) {
    for (what, a) in [
        ("codebook 0", total.codebook0),
        ("predicted codebooks", total.predicted),
    ] {
        assert!(
            a.top1() >= g.top1_min,
            "{p} {what}: teacher-forced top-1 {:.4} < {}",
            a.top1(),
            g.top1_min
        );
        assert!(
            a.mean_kl() <= g.kl_max,
            "{p} {what}: mean KL {:.2e} > {:e}",
            a.mean_kl(),
            g.kl_max
        );
    }
    let s = total.greedy_survival();
    assert!(
        s >= g.survival_min,
        "{p}: greedy per-frame survival {s:.4} < {}",
        g.survival_min
    );
}

/// Int8 gate on both fixtures.
///
/// Thresholds, and why:
/// - teacher-forced top-1 >= 0.97 per codebook class and mean KL <= 1e-3
///   nats: weight rounding of 0.4% of a row's max perturbs logits by ~0.1%
///   of their spread, so only near-ties may flip (the fixtures' random
///   weights make many rows nearly flat; a 3% allowance covers a few of the
///   ~100 codebook-0 and ~300 predicted rows). KL ~1e-3 is the level where
///   sampled distributions are indistinguishable in practice (a 0.1%
///   change of the expected log-likelihood per token).
/// - greedy: per-frame survival >= 0.75 (the probability that a frame of
///   greedy int8 codes still equals the f32 path, given all earlier frames
///   did). Greedy decoding turns one flipped near-tie into a different
///   continuation, after which positional agreement means nothing, so the
///   gate is on how long the paths stay together. The teacher-forced rates
///   predict it: with top-1 agreement a0 (codebook 0) and a (each of the
///   G-1 predicted codes), a frame survives with ~a0 * a^(G-1): 0.86 on
///   tiny-a (16 groups) and 0.92 on tiny-b (4), measured 0.94 and 0.90;
///   0.75 leaves room for the handful of divergences (6) these few frames
///   can show. A broken kernel drops it towards 0.
#[test]
fn int8_passes_fidelity_gate_on_fixtures() {
    let total = fixtures_report(LoadOptions::uniform(Precision::Int8));
    check_gate("int8", &total, &QUALITY_GATE);
}

/// The quality gate (reasoning above): what a precision must pass on the
/// fixtures before it may become a default.
const QUALITY_GATE: Gate = Gate {
    top1_min: 0.97,
    kl_max: 1e-3,
    survival_min: 0.75,
};

/// Whether `r` passes `g` (for reporting; `check_gate` asserts).
fn passes(r: &Report, g: &Gate) -> bool {
    [r.codebook0, r.predicted]
        .iter()
        .all(|a| a.top1() >= g.top1_min && a.mean_kl() <= g.kl_max)
        && r.greedy_survival() >= g.survival_min
}

/// 4-bit weights on both fixtures, uniform and with the code predictor at
/// int8 (`--precision q4,int8`).
///
/// **q4 does not pass the quality gate** (`QUALITY_GATE`, the int8 one) and
/// is not expected to: a 4-bit group step is ~10x int8's per-row step
/// (relative weight error 8.8% vs 0.84% on Gaussian weights, see the
/// kernels' `q4_format_error_report`), and the KL grows with the square of
/// the logit perturbation (~100x). Measured on the fixtures: mean KL
/// 3.8e-3 (codebook 0) and 1.6e-2 (predicted codebooks), top-1 0.90 and
/// 0.69 on their nearly flat random logits (f32 margin ~0.28 nats), and
/// greedy decoding leaves the f32 path within a frame or two. So q4 stays
/// opt-in and f32 the default (`default_load_options_are_the_stored_weights`).
///
/// What this test asserts is q4's *envelope*, so that a quantizer or kernel
/// regression fails loudly while the expected 4-bit loss passes: per
/// codebook class mean KL <= 3e-2 nats (2x the worse measured class;
/// a wrong scale, nibble order or activation permutation gives KL ~1 and
/// top-1 near 1/vocab) and top-1 >= 0.6 (measured 0.69 at the worst).
/// Greedy survival is printed, not gated: on these flat logits it is ~0.2
/// for q4 and says nothing beyond the KL.
#[test]
fn q4_fidelity_envelope_on_fixtures() {
    const ENVELOPE: Gate = Gate {
        top1_min: 0.6,
        kl_max: 3e-2,
        survival_min: 0.0,
    };
    let q4 = LoadOptions::uniform(Precision::Q4);
    let total = fixtures_report(q4);
    println!(
        "q4 passes the quality gate: {}",
        passes(&total, &QUALITY_GATE)
    );
    check_gate("q4", &total, &ENVELOPE);
    let mixed = LoadOptions {
        talker: Precision::Q4.into(),
        code_predictor: Precision::Int8.into(),
        ..LoadOptions::default()
    };
    let total = fixtures_report(mixed);
    println!(
        "q4,int8 passes the quality gate: {}",
        passes(&total, &QUALITY_GATE)
    );
    check_gate("q4,int8", &total, &ENVELOPE);
}

/// The better low-bit formats against the anchors of the same harness
/// (int8: the shipping 8-bit; q4: the linear 4-bit grid), both fixtures,
/// uniform precision: per codebook class, teacher-forced mean KL against
/// f32.
///
/// - **iq4** (IQ4_NL's non-linear grid with least-squares scales, the same
///   4.25 bits as q4) must lie between the anchors: below q4 and above
///   int8 (a 4-bit format matching int8 would mean the harness sees no
///   weight error at all), and inside q4's envelope.
/// - **q6** (6.25 bits) must be far below the 4-bit formats: at most a
///   quarter of iq4's KL. It is not at int8's: its group step (1/31.5 of a
///   32-weight group's largest) is ~2.7x int8's per-row step on Gaussian
///   weights and its activations are int8 rather than int16, so its KL is
///   a few times int8's (figures printed and in docs/performance.md).
///
/// The fixtures' weights are the official code's random init (Gaussian),
/// where the non-linear grid pays; on uniform weights (`gen-checkpoint`)
/// a linear grid is the better fit.
#[test]
fn iq4_and_q6_rank_against_the_int8_and_q4_anchors_on_fixtures() {
    let report = |p| fixtures_report(LoadOptions::uniform(p));
    let (int8, q4, iq4, q6) = (
        report(Precision::Int8),
        report(Precision::Q4),
        report(Precision::Iq4),
        report(Precision::Q6),
    );
    for (what, pick) in [
        (
            "codebook 0",
            (|r: &Report| r.codebook0) as fn(&Report) -> Agreement,
        ),
        ("predicted codebooks", |r: &Report| r.predicted),
    ] {
        let kl = |r: &Report| pick(r).mean_kl();
        println!(
            "{what}: mean KL int8 {:.2e}, q6 {:.2e}, iq4 {:.2e}, q4 {:.2e}; iq4/q4 {:.2}, q6/int8 {:.2}, iq4/int8 {:.1}",
            kl(&int8),
            kl(&q6),
            kl(&iq4),
            kl(&q4),
            kl(&iq4) / kl(&q4),
            kl(&q6) / kl(&int8),
            kl(&iq4) / kl(&int8)
        );
        assert!(
            kl(&iq4) < kl(&q4) && kl(&iq4) > kl(&int8),
            "{what}: iq4 KL {:.2e} not between int8 {:.2e} and q4 {:.2e}",
            kl(&iq4),
            kl(&int8),
            kl(&q4)
        );
        assert!(
            kl(&q6) <= kl(&iq4) / 4.0,
            "{what}: q6 KL {:.2e} > iq4's / 4 ({:.2e})",
            kl(&q6),
            kl(&iq4)
        );
    }
    const ENVELOPE: Gate = Gate {
        top1_min: 0.6,
        kl_max: 3e-2,
        survival_min: 0.0,
    };
    check_gate("iq4", &iq4, &ENVELOPE);
    println!(
        "q6 passes the quality gate: {}; iq4: {}",
        passes(&q6, &QUALITY_GATE),
        passes(&iq4, &QUALITY_GATE)
    );
}

/// The f32 path loaded through `load_with` is the parity-tested one: same
/// codes as the goldens (guards against `LoadOptions::default` drifting).
#[test]
fn default_load_options_are_the_stored_weights() {
    assert_eq!(LoadOptions::default(), LoadOptions::uniform(Precision::F32));
    let dir = root().join("tiny-a");
    let m = load(&dir, Precision::F32);
    let (json, codes) = golden_codes("tiny-a");
    let case = &json["cases"][0];
    assert_eq!(
        m.start(&request(&m, case)).unwrap().run_to_end(),
        codes[0].1
    );
}

/// The same figures on a full-size checkpoint (not run by default: it needs
/// a generated 0.6B checkpoint and minutes of CPU):
/// `TTS_RT_PRECISION_MODEL=/path/q06b cargo test --release --test it precision:: -- --ignored --nocapture`.
/// The teacher is the f32 model's own greedy output over `FRAMES` frames
/// (EOS ignored, so the length is fixed). `TTS_RT_PRECISION_LIST` picks
/// the arms, `;`-separated `--precision` spellings (default
/// `int8;q6;iq4;q4;q4,int8`); each is loaded, reported and dropped in turn.
#[test]
#[ignore]
fn full_size_report() {
    let Some((dir, frames, f32m, cases)) = full_size_cases() else {
        return;
    };
    let arms: Vec<LoadOptions> = std::env::var("TTS_RT_PRECISION_LIST")
        .unwrap_or_else(|_| "int8;q6;iq4;q4;q4,int8".into())
        .split(';')
        .map(parse_arm)
        .collect();
    for o in arms {
        let low = load_opts(&dir, o);
        print(
            &format!("{} {} ({frames} frames/case)", dir.display(), label(o)),
            &compare(&f32m, &low, &cases),
        );
    }
}

/// `int8` or `q4,int8` (talker,code predictor).
fn parse_arm(a: &str) -> LoadOptions {
    let mut it = a.split(',').map(|p| p.trim().parse::<Precision>().unwrap());
    let talker = it.next().unwrap();
    LoadOptions {
        talker: talker.into(),
        code_predictor: it.next().unwrap_or(talker).into(),
        ..LoadOptions::default()
    }
}

type Cases = Vec<(String, Request, Vec<u32>)>;

/// The full-size cases (`TTS_RT_PRECISION_MODEL`, `TTS_RT_PRECISION_FRAMES`
/// frames each): two texts, the first with the text in the prefill, the
/// second streamed, greedy, EOS ignored; the teacher is the f32 path's own
/// greedy output. The same cases as `benches/ref_lm_fidelity.py`.
fn full_size_cases() -> Option<(PathBuf, usize, Arc<Qwen3Tts>, Cases)> {
    let Ok(dir) = std::env::var("TTS_RT_PRECISION_MODEL") else {
        eprintln!("set TTS_RT_PRECISION_MODEL to a checkpoint directory");
        return None;
    };
    let frames: usize = std::env::var("TTS_RT_PRECISION_FRAMES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = PathBuf::from(dir);
    let f32m = load(&dir, Precision::F32);
    let speaker = f32m.speakers().into_iter().next();
    let mut cases = Vec::new();
    for (i, text) in [
        "The quick brown fox jumps over the lazy dog near the river bank today.",
        "Hello world, this is a test.",
    ]
    .iter()
    .enumerate()
    {
        let mut options = f32m.default_options().greedy();
        options.max_frames = frames;
        options.ignore_eos = true;
        let req = Request {
            text: text.to_string(),
            speaker: speaker.clone(),
            language: "auto".into(),
            instruct: None,
            voice_clone: None,
            text_streaming: i == 1,
            options,
        };
        let codes = f32m.start(&req).unwrap().run_to_end();
        cases.push((format!("case{i}"), req, codes));
    }
    Some((dir, frames, f32m, cases))
}

/// The full-size gate relative to the official implementation's own bf16
/// (docs/performance.md, "The yardstick"): `TTS_RT_OFFICIAL_FIDELITY` is
/// the JSON `benches/ref_lm_fidelity.py --json` wrote for the same
/// checkpoint and frame count. For both codebook classes: top-1 >= the
/// official bf16's minus two binomial standard errors of the rows, mean KL
/// <= 1.25x the official bf16's. Greedy survival is printed, not gated (2-4
/// events per run). `TTS_RT_PRECISION_LIST` (default `int8`) picks the arms.
#[test]
#[ignore = "needs a full-size checkpoint and the official figures (see docs/performance.md)"]
fn relative_gate_against_official_bf16() {
    let Ok(path) = std::env::var("TTS_RT_OFFICIAL_FIDELITY") else {
        eprintln!("set TTS_RT_OFFICIAL_FIDELITY to benches/ref_lm_fidelity.py's JSON");
        return;
    };
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}")),
    )
    .unwrap_or_else(|e| panic!("{path}: {e}"));
    let Some((dir, frames, f32m, cases)) = full_size_cases() else {
        return;
    };
    assert_eq!(
        doc["frames"].as_u64(),
        Some(frames as u64),
        "{path} was measured with another frame count than TTS_RT_PRECISION_FRAMES"
    );
    let official = |class: &str| {
        let c = &doc[class];
        let rows = c["rows"].as_f64().unwrap();
        (
            c["top1_equal"].as_f64().unwrap() / rows,
            c["kl_sum"].as_f64().unwrap() / rows,
        )
    };
    let arms = std::env::var("TTS_RT_PRECISION_LIST").unwrap_or_else(|_| "int8".into());
    for o in arms.split(';').map(parse_arm) {
        let low = load_opts(&dir, o);
        let r = compare(&f32m, &low, &cases);
        let p = label(o);
        print(&format!("{} {p} ({frames} frames/case)", dir.display()), &r);
        println!("official {}: greedy {}", doc["low"], doc["greedy"]);
        for (class, a) in [("codebook0", r.codebook0), ("predicted", r.predicted)] {
            let (top1, kl) = official(class);
            let se = (top1 * (1.0 - top1) / a.rows.max(1) as f64).sqrt();
            assert!(
                a.top1() >= top1 - 2.0 * se,
                "{p} {class}: top-1 {:.4} < official bf16 {top1:.4} - 2 x {se:.4}",
                a.top1()
            );
            assert!(
                a.mean_kl() <= 1.25 * kl,
                "{p} {class}: mean KL {:.3e} > 1.25 x official bf16 {kl:.3e}",
                a.mean_kl()
            );
        }
    }
}

/// A precision plan converts each tensor class to its own precision, and
/// the bytes a frame streams follow the plan: the loaded stages' figures
/// equal the ones computed from the shapes alone (tiny-a is stored bf16).
#[test]
fn plans_convert_per_class_and_bytes_per_frame_follow_them() {
    use tts_models::quant::plan::frame_bytes;
    use tts_models::{PrecisionPlan, Preset};
    let dir = root().join("tiny-a");
    let mut seen = Vec::new();
    for spec in [
        "reference",
        "balanced",
        "fast",
        "q4",
        "talker.attn=int8,talker.mlp=q4,cp.mlp_down=int8,cp.head=int8",
        "balanced,talker.head=int8",
    ] {
        let plan = PrecisionPlan::parse(spec).unwrap();
        let m = load_opts(&dir, LoadOptions::from_plan(plan));
        assert_eq!(m.precision.plan(), plan);
        let want = frame_bytes(&m.config.talker, &plan, 2);
        let got = (
            m.talker.bytes_per_frame(),
            m.code_predictor.bytes_per_frame(),
        );
        assert_eq!(got, want, "{spec}");
        seen.push((spec, got));
    }
    let get = |s: &str| seen.iter().find(|(n, _)| *n == s).unwrap().1;
    let (reference, balanced, fast) = (get("reference"), get("balanced"), get("fast"));
    // balanced = fast for the talker; its code predictor keeps mlp_down
    // stored, so it streams more than fast and less than the reference.
    assert_eq!(balanced.0, fast.0);
    assert!(fast.1 < balanced.1 && balanced.1 < reference.1, "{seen:?}");
    // An int8 head is smaller than the stored bf16 one (q4 is not compared:
    // tiny rows of 64 inputs pad to one 512-input block).
    assert!(get("balanced,talker.head=int8").0 < balanced.0);
    assert_eq!(
        Preset::Balanced.plan(),
        PrecisionPlan::parse("balanced").unwrap()
    );
}

/// The reference preset is the stored-weights path the goldens hold to,
/// and `balanced` keeps the code predictor's down projection exactly as
/// stored: its teacher-forced code-predictor KL sits below int8's.
#[test]
fn balanced_sits_between_the_stored_weights_and_int8() {
    use tts_models::PrecisionPlan;
    let total = |o: LoadOptions| fixtures_report(o);
    // int8 with balanced's talker KV cache (bf16).
    let int8 = total(LoadOptions::from_plan(
        PrecisionPlan::parse("int8,talker.kv=bf16").unwrap(),
    ));
    let balanced = total(LoadOptions::from_plan(
        PrecisionPlan::parse("balanced,code2wav=f32").unwrap(),
    ));
    let reference = total(LoadOptions::from_plan(
        PrecisionPlan::parse("reference").unwrap(),
    ));
    assert_eq!(reference.predicted.mean_kl(), 0.0);
    assert_eq!(reference.codebook0.mean_kl(), 0.0);
    // Same talker as int8: same codebook-0 figures.
    assert_eq!(balanced.codebook0.mean_kl(), int8.codebook0.mean_kl());
    assert!(
        balanced.predicted.mean_kl() < int8.predicted.mean_kl(),
        "balanced {} vs int8 {}",
        balanced.predicted.mean_kl(),
        int8.predicted.mean_kl()
    );
}
