//! Precision by tensor: a [`PrecisionPlan`] gives each LM stage a
//! [`Precision`] per tensor class ([`StagePlan`]) and code2wav its
//! convolution precision, so the tensors the evidence on trained
//! Qwen3-TTS names as sensitive (the code predictor's MLP down projection,
//! whose inputs carry the 0.6B's activation spike; the output heads; the
//! embeddings) can keep the stored bf16 while the rest goes int8 or lower.
//!
//! # Tensor classes (per stage: `talker`, `cp`)
//! - `attn`: q/k/v/o projections of every decoder layer.
//! - `mlp_up_gate`: the MLP gate and up projections.
//! - `mlp_down`: the MLP down projection.
//! - `head`: the output heads (talker `codec_head`; the code predictor's
//!   one `lm_head` per predicted codebook). Stored unless a plan says
//!   otherwise.
//! - `kv`: the KV cache's format, `f32` or `bf16` (not a weight: each
//!   position's keys and values, rounded as they are appended and widened
//!   exactly as attention reads them). f32 unless a plan says otherwise.
//! - Fixed at the stored weights, refused at anything else: `embed` (the
//!   text and codec embeddings: read one row per token, so converting them
//!   saves memory but no bandwidth), `text_proj` (talker) and `proj` (the
//!   code predictor's `small_to_mtp_projection`, 1.7B).
//!
//! # Presets ([`Preset`])
//! - `reference`: every tensor stored, code2wav f32 (what the goldens hold).
//! - `balanced`: int8 everywhere except the code predictor's `mlp_down`,
//!   the heads and the embeddings (stored); code2wav bf16; the talker's KV
//!   cache bf16.
//! - `fast`: both LMs' decoder linears int8, heads stored, code2wav int8
//!   (its default set: vocoder blocks 2-4's residual convs; the rest bf16),
//!   the talker's KV cache bf16 (`int8,int8,int8,talker.kv=bf16`).
//!
//! # Grammar ([`PrecisionPlan::parse`], the `--precision` value)
//! ```text
//! SPEC  := BASE | [BASE,]ITEM(,ITEM)*
//! BASE  := PRESET | P | P,P | P,P,C2W  (default: reference)
//! ITEM  := STAGE.CLASS=P | STAGE=P | STAGE.kv=f32|bf16 | code2wav=C2W
//!        | code2wav.LAYER=int8|REST
//! STAGE := talker | cp (alias code_predictor)
//! CLASS := attn | mlp (= mlp_up_gate and mlp_down) | mlp_up_gate | mlp_down | head
//! P     := any Precision name (f32/bf16/stored: the stored weights, int8, q4, ...)
//! C2W   := f32 | bf16 | int8        (int8: blocks 2-4's residual convs int8, the rest bf16)
//! LAYER := pre_conv | decoder.0 | decoder.B.conv1 | decoder.B.conv2 | conv_out
//! REST  := the precision of what is not int8 (bf16 after code2wav=int8)
//! ```
//! `STAGE=P` sets the stage's decoder linears (`attn`, `mlp`), not its
//! head: the per-stage meaning `--precision` always had. Items apply left
//! to right over the base, later ones winning.

use std::fmt;

use crate::config::{LmConfig, TalkerConfig};
use crate::quant::{convert, Code2WavLayers, Code2WavPrecision, Precision};
use crate::weight::Weight;

/// A class of tensors in one LM stage that a [`StagePlan`] sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TensorClass {
    Attn,
    MlpUpGate,
    MlpDown,
    Head,
}

impl TensorClass {
    pub const ALL: [TensorClass; 4] = [
        TensorClass::Attn,
        TensorClass::MlpUpGate,
        TensorClass::MlpDown,
        TensorClass::Head,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TensorClass::Attn => "attn",
            TensorClass::MlpUpGate => "mlp_up_gate",
            TensorClass::MlpDown => "mlp_down",
            TensorClass::Head => "head",
        }
    }
}

/// The format an LM stage keeps its KV cache in: each position's keys and
/// values are rounded to it as they are appended, and attention reads them
/// back exactly (a bf16 cache halves the bytes a decode step reads from
/// its history, and the memory a session holds; the official
/// implementation keeps its cache in the model's dtype, bf16).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvFormat {
    #[default]
    F32,
    Bf16,
}

impl KvFormat {
    pub fn name(self) -> &'static str {
        match self {
            KvFormat::F32 => "f32",
            KvFormat::Bf16 => "bf16",
        }
    }

    pub fn from_name(s: &str) -> Option<KvFormat> {
        [KvFormat::F32, KvFormat::Bf16]
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Bytes of one element.
    pub fn bytes(self) -> usize {
        match self {
            KvFormat::F32 => 4,
            KvFormat::Bf16 => 2,
        }
    }
}

impl fmt::Display for KvFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The precision of each tensor class of one LM stage, and the format of
/// its KV cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StagePlan {
    pub attn: Precision,
    pub mlp_up_gate: Precision,
    pub mlp_down: Precision,
    pub head: Precision,
    pub kv: KvFormat,
}

impl StagePlan {
    /// The decoder linears at `p`, the head stored, the KV cache f32: what
    /// a per-stage precision always meant.
    pub const fn uniform(p: Precision) -> Self {
        StagePlan {
            attn: p,
            mlp_up_gate: p,
            mlp_down: p,
            head: Precision::F32,
            kv: KvFormat::F32,
        }
    }

    /// This plan with its KV cache in `kv`.
    pub const fn with_kv(self, kv: KvFormat) -> Self {
        StagePlan { kv, ..self }
    }

    pub fn get(&self, c: TensorClass) -> Precision {
        match c {
            TensorClass::Attn => self.attn,
            TensorClass::MlpUpGate => self.mlp_up_gate,
            TensorClass::MlpDown => self.mlp_down,
            TensorClass::Head => self.head,
        }
    }

    pub fn set(&mut self, c: TensorClass, p: Precision) {
        match c {
            TensorClass::Attn => self.attn = p,
            TensorClass::MlpUpGate => self.mlp_up_gate = p,
            TensorClass::MlpDown => self.mlp_down = p,
            TensorClass::Head => self.head = p,
        }
    }

    /// `Some(p)` when the weights are [`Self::uniform`]`(p)`'s (whatever
    /// the KV cache's format).
    pub fn as_uniform(&self) -> Option<Precision> {
        (*self == StagePlan::uniform(self.attn).with_kv(self.kv)).then_some(self.attn)
    }

    /// The converted (non-stored) precisions of the plan, each with the
    /// classes at it, in class order.
    pub fn converted(&self) -> Vec<(Precision, Vec<TensorClass>)> {
        let mut out: Vec<(Precision, Vec<TensorClass>)> = Vec::new();
        for c in TensorClass::ALL {
            let p = self.get(c);
            if p == Precision::F32 {
                continue;
            }
            match out.iter_mut().find(|(q, _)| *q == p) {
                Some((_, cs)) => cs.push(c),
                None => out.push((p, vec![c])),
            }
        }
        out
    }

    /// The precision's name when uniform (`int8`), else every class
    /// (`attn=int8;mlp_up_gate=int8;mlp_down=f32;head=f32`); a KV cache
    /// other than f32 follows (`int8;kv=bf16`).
    pub fn name(&self) -> String {
        let weights = match self.as_uniform() {
            Some(p) => p.name().to_string(),
            None => TensorClass::ALL
                .iter()
                .map(|&c| format!("{}={}", c.name(), self.get(c)))
                .collect::<Vec<_>>()
                .join(";"),
        };
        match self.kv {
            KvFormat::F32 => weights,
            kv => format!("{weights};kv={kv}"),
        }
    }
}

impl From<Precision> for StagePlan {
    fn from(p: Precision) -> Self {
        StagePlan::uniform(p)
    }
}

impl fmt::Display for StagePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The named presets, picked by what they trade.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Preset {
    Reference,
    Balanced,
    Fast,
}

impl Preset {
    pub const ALL: [Preset; 3] = [Preset::Reference, Preset::Balanced, Preset::Fast];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Reference => "reference",
            Preset::Balanced => "balanced",
            Preset::Fast => "fast",
        }
    }

    /// What the preset trades, one line.
    pub fn summary(self) -> &'static str {
        match self {
            Preset::Reference => "stored weights everywhere, code2wav f32: what the goldens hold to",
            Preset::Balanced => {
                "int8 except the code predictor's MLP down projection, the heads and the embeddings (stored bf16); code2wav bf16"
            }
            Preset::Fast => {
                "int8 decoder linears in both LMs (heads stored), code2wav int8 (vocoder blocks 2-4's residual convs; the rest bf16)"
            }
        }
    }

    pub fn from_name(s: &str) -> Option<Preset> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
    }

    pub fn plan(self) -> PrecisionPlan {
        let int8 = StagePlan::uniform(Precision::Int8);
        match self {
            Preset::Reference => PrecisionPlan::default(),
            Preset::Balanced => PrecisionPlan {
                talker: int8.with_kv(KvFormat::Bf16),
                code_predictor: StagePlan {
                    mlp_down: Precision::F32,
                    ..int8
                },
                code2wav: Code2WavPrecision::Bf16,
            },
            Preset::Fast => PrecisionPlan {
                talker: int8.with_kv(KvFormat::Bf16),
                code_predictor: int8,
                code2wav: Code2WavPrecision::INT8,
            },
        }
    }
}

/// Precision of every tensor class of both LMs, and of code2wav.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PrecisionPlan {
    pub talker: StagePlan,
    pub code_predictor: StagePlan,
    pub code2wav: Code2WavPrecision,
}

/// A `--precision` spelling that does not parse: the part at fault and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{part}`: {problem}")]
pub struct PlanError {
    pub part: String,
    pub problem: String,
}

fn err(part: &str, problem: impl Into<String>) -> PlanError {
    PlanError {
        part: part.to_string(),
        problem: problem.into(),
    }
}

fn precision(part: &str, v: &str) -> Result<Precision, PlanError> {
    if v.eq_ignore_ascii_case("stored") {
        return Ok(Precision::F32);
    }
    Precision::from_name(v).ok_or_else(|| {
        let names: Vec<&str> = Precision::ALL.iter().map(|p| p.name()).collect();
        err(
            part,
            format!(
                "unknown precision {v:?}; expected {} (f32 = bf16 = stored: the checkpoint's own weights)",
                names.join(", ")
            ),
        )
    })
}

fn code2wav(part: &str, v: &str) -> Result<Code2WavPrecision, PlanError> {
    Code2WavPrecision::from_name(v).ok_or_else(|| {
        err(
            part,
            format!("unknown code2wav precision {v:?}; expected f32, bf16 or int8"),
        )
    })
}

const CLASSES: &str = "attn, mlp, mlp_up_gate, mlp_down, head or kv (the KV cache)";

impl PrecisionPlan {
    /// Both LMs' decoder linears at `p` (heads stored), code2wav f32.
    pub fn uniform(p: Precision) -> Self {
        PrecisionPlan {
            talker: p.into(),
            code_predictor: p.into(),
            code2wav: Code2WavPrecision::F32,
        }
    }

    /// Parses a `--precision` spelling (grammar in the module docs).
    pub fn parse(s: &str) -> Result<PrecisionPlan, PlanError> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        if parts.iter().all(|p| !p.contains('=')) {
            return Self::parse_positional(s, &parts);
        }
        // The base: the parts before the first item.
        let base = parts.iter().take_while(|p| !p.contains('=')).count();
        let (mut plan, items) = match base {
            0 => (PrecisionPlan::default(), &parts[..]),
            n => (
                Self::parse_positional(&parts[..n].join(","), &parts[..n])?,
                &parts[n..],
            ),
        };
        for item in items {
            plan.apply(item)?;
        }
        Ok(plan)
    }

    /// `PRESET`, `P`, `P,P` or `P,P,C2W`.
    fn parse_positional(s: &str, parts: &[&str]) -> Result<PrecisionPlan, PlanError> {
        if parts.len() == 1 {
            if let Some(p) = Preset::from_name(parts[0]) {
                return Ok(p.plan());
            }
        }
        if parts.len() > 3 {
            return Err(err(
                s,
                "give a preset (reference, balanced, fast), one precision, two (talker,code predictor), three (talker,code predictor,code2wav) or STAGE.CLASS=PRECISION items",
            ));
        }
        let stage = |name: &'static str| {
            move |mut e: PlanError| {
                e.problem = format!("{name} precision: {}", e.problem);
                e
            }
        };
        let talker = precision(parts[0], parts[0])
            .map_err(stage("talker"))
            .map_err(|mut e| {
                if parts.len() == 1 {
                    e.problem +=
                        "; or a preset: reference, balanced, fast (int8,int8,int8,talker.kv=bf16)";
                }
                e
            })?;
        let code_predictor = match parts.get(1) {
            Some(p) => precision(p, p).map_err(stage("code predictor"))?,
            None => talker,
        };
        let code2wav = match parts.get(2) {
            Some(p) => code2wav(p, p).map_err(stage("code2wav"))?,
            None => Code2WavPrecision::F32,
        };
        Ok(PrecisionPlan {
            talker: talker.into(),
            code_predictor: code_predictor.into(),
            code2wav,
        })
    }

    /// One `KEY=VALUE` item.
    fn apply(&mut self, item: &str) -> Result<(), PlanError> {
        let Some((key, value)) = item.split_once('=') else {
            return Err(err(
                item,
                "expected STAGE.CLASS=PRECISION, STAGE=PRECISION, STAGE.kv=f32|bf16, code2wav=f32|bf16|int8 or code2wav.LAYER=int8|bf16|f32 (a preset or precisions may only come first)",
            ));
        };
        let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
        if key == "code2wav" {
            self.code2wav = code2wav(item, value)?;
            return Ok(());
        }
        if let Some(layer) = key.strip_prefix("code2wav.") {
            let l = Code2WavLayers::from_name(layer).ok_or_else(|| {
                err(
                    item,
                    format!(
                        "unknown code2wav layer {layer:?}; expected {}",
                        Code2WavLayers::spellings()
                    ),
                )
            })?;
            self.code2wav = self
                .code2wav
                .set_layer(l, value)
                .map_err(|e| err(item, e))?;
            return Ok(());
        }
        let (stage, class) = match key.split_once('.') {
            Some((s, c)) => (s, Some(c)),
            None => (key.as_str(), None),
        };
        let plan = match stage {
            "talker" => &mut self.talker,
            "cp" | "code_predictor" => &mut self.code_predictor,
            _ => {
                return Err(err(
                    item,
                    format!("unknown stage {stage:?}; expected talker, cp or code2wav"),
                ))
            }
        };
        if class == Some("kv") {
            plan.kv = KvFormat::from_name(value).ok_or_else(|| {
                err(
                    item,
                    format!("unknown KV cache format {value:?}; expected f32 or bf16"),
                )
            })?;
            return Ok(());
        }
        let p = precision(item, value)?;
        let classes: &[TensorClass] = match class {
            None | Some("linear") => &[
                TensorClass::Attn,
                TensorClass::MlpUpGate,
                TensorClass::MlpDown,
            ],
            Some("attn") => &[TensorClass::Attn],
            Some("mlp") => &[TensorClass::MlpUpGate, TensorClass::MlpDown],
            Some("mlp_up_gate") => &[TensorClass::MlpUpGate],
            Some("mlp_down") => &[TensorClass::MlpDown],
            Some("head") => &[TensorClass::Head],
            Some(fixed @ ("embed" | "text_proj" | "proj")) => {
                if p == Precision::F32 {
                    return Ok(());
                }
                return Err(err(
                    item,
                    format!(
                        "{stage}.{fixed} always keeps the stored weights (no converted path: embeddings are read a row per token, the projections are ~1% of a frame's bytes); set {CLASSES}"
                    ),
                ));
            }
            Some(c) => {
                return Err(err(
                    item,
                    format!("unknown tensor class {c:?}; expected {CLASSES}"),
                ))
            }
        };
        for &c in classes {
            plan.set(c, p);
        }
        Ok(())
    }

    /// The preset this plan is, if any.
    pub fn preset(&self) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.plan() == *self)
    }

    /// A spelling [`Self::parse`] reads back: `TALKER,CP,CODE2WAV` when both
    /// stages are uniform (`int8,int8,int8`), else every class of each stage
    /// (`talker=int8,talker.head=f32,cp.attn=int8,...,code2wav=bf16`); a
    /// KV cache other than f32 follows as an item (`talker.kv=bf16`).
    pub fn name(&self) -> String {
        let stages = [("talker", &self.talker), ("cp", &self.code_predictor)];
        let kv = stages
            .iter()
            .filter(|(_, p)| p.kv != KvFormat::F32)
            .map(|(stage, p)| format!(",{stage}.kv={}", p.kv));
        if let (Some(t), Some(c), Some(w)) = (
            self.talker.as_uniform(),
            self.code_predictor.as_uniform(),
            self.code2wav.simple_name(),
        ) {
            return format!("{t},{c},{w}") + &kv.collect::<String>();
        }
        let mut items = Vec::new();
        for (stage, plan) in stages {
            for c in TensorClass::ALL {
                items.push(format!("{stage}.{}={}", c.name(), plan.get(c)));
            }
        }
        items.extend(self.code2wav.items());
        items.join(",") + &kv.collect::<String>()
    }
}

impl fmt::Display for PrecisionPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl std::str::FromStr for PrecisionPlan {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, PlanError> {
        PrecisionPlan::parse(s)
    }
}

/// Bytes of a `[rows, cols]` weight at `p`; `stored` is the checkpoint's
/// bytes per weight for [`Precision::F32`] (2 for the hub's bf16). Every
/// converted format stores rows independently, so one converted row gives
/// the size of any format the enum has.
pub fn weight_bytes(rows: usize, cols: usize, p: Precision, stored: usize) -> usize {
    if p == Precision::F32 {
        return rows * cols * stored;
    }
    rows * convert(Weight::from_f32(1, cols, vec![0.0; cols]), p).bytes()
}

/// Weight bytes one frame streams per LM stage under `plan`, from the
/// shapes alone (no checkpoint): `(talker, code predictor)`. Equals the
/// loaded models' `bytes_per_frame` for a checkpoint stored at `stored`
/// bytes per weight.
pub fn frame_bytes(cfg: &TalkerConfig, plan: &PrecisionPlan, stored: usize) -> (usize, usize) {
    let lm = |c: &LmConfig, s: &StagePlan| {
        let (h, qd, kvd, i) = (
            c.hidden_size,
            c.num_heads * c.head_dim,
            c.num_kv_heads * c.head_dim,
            c.intermediate_size,
        );
        let attn = weight_bytes(qd, h, s.attn, stored)
            + 2 * weight_bytes(kvd, h, s.attn, stored)
            + weight_bytes(h, qd, s.attn, stored);
        let mlp =
            2 * weight_bytes(i, h, s.mlp_up_gate, stored) + weight_bytes(h, i, s.mlp_down, stored);
        c.num_layers * (attn + mlp)
    };
    let talker = lm(&cfg.lm, &plan.talker)
        + weight_bytes(
            cfg.lm.vocab_size,
            cfg.lm.hidden_size,
            plan.talker.head,
            stored,
        );
    let cp = &cfg.code_predictor;
    let steps = cfg.num_code_groups - 1;
    let projection = if cfg.lm.hidden_size != cp.hidden_size {
        weight_bytes(cp.hidden_size, cfg.lm.hidden_size, Precision::F32, stored)
    } else {
        0
    };
    let predictor = steps
        * (lm(cp, &plan.code_predictor)
            + projection
            + weight_bytes(
                cp.vocab_size,
                cp.hidden_size,
                plan.code_predictor.head,
                stored,
            ));
    (talker, predictor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_positional_spellings_parse() {
        assert_eq!(
            PrecisionPlan::parse("reference"),
            Ok(PrecisionPlan::default())
        );
        assert_eq!(
            PrecisionPlan::parse("fast"),
            PrecisionPlan::parse("int8,int8,int8,talker.kv=bf16")
        );
        let f = PrecisionPlan::parse("fast").unwrap();
        assert_eq!(f.talker.kv, KvFormat::Bf16);
        assert_eq!(f.code_predictor.kv, KvFormat::F32);
        assert_eq!(f.talker.as_uniform(), Some(Precision::Int8));
        assert_eq!(
            PrecisionPlan::parse("int8,int8,int8").unwrap().talker.kv,
            KvFormat::F32,
            "a positional precision names the weights; the cache stays f32"
        );
        assert_eq!(
            PrecisionPlan::parse("reference").unwrap().talker.kv,
            KvFormat::F32
        );
        let b = PrecisionPlan::parse("Balanced").unwrap();
        assert_eq!(b.code_predictor.mlp_down, Precision::F32);
        assert_eq!(b.code_predictor.attn, Precision::Int8);
        assert_eq!(
            b.talker,
            StagePlan::uniform(Precision::Int8).with_kv(KvFormat::Bf16)
        );
        assert_eq!(b.code2wav, Code2WavPrecision::Bf16);
        let q = PrecisionPlan::parse("q4,int8").unwrap();
        assert_eq!(q.talker, Precision::Q4.into());
        assert_eq!(q.code_predictor, Precision::Int8.into());
        assert_eq!(q.code2wav, Code2WavPrecision::F32);
        for p in Preset::ALL {
            assert_eq!(p.plan().preset(), Some(p));
        }
    }

    #[test]
    fn class_items_apply_over_a_base_left_to_right() {
        let p = PrecisionPlan::parse("talker.attn=int8, talker.mlp=q4,cp.mlp_down=bf16").unwrap();
        assert_eq!(p.talker.attn, Precision::Int8);
        assert_eq!(
            (p.talker.mlp_up_gate, p.talker.mlp_down),
            (Precision::Q4, Precision::Q4)
        );
        assert_eq!(p.talker.head, Precision::F32);
        assert_eq!(p.code_predictor, StagePlan::default());
        let p = PrecisionPlan::parse("balanced,cp.mlp_down=int8,talker.head=int8,code2wav=f32")
            .unwrap();
        assert_eq!(p.code_predictor, Precision::Int8.into());
        assert_eq!(p.talker.head, Precision::Int8);
        assert_eq!(p.code2wav, Code2WavPrecision::F32);
        let p = PrecisionPlan::parse("int8,cp=q4,cp.embed=stored").unwrap();
        assert_eq!(p.code_predictor, Precision::Q4.into());
        assert_eq!(p.talker, Precision::Int8.into());
    }

    #[test]
    fn names_read_back() {
        for s in [
            "reference",
            "balanced",
            "fast",
            "q4,int8",
            "talker.attn=int8,talker.mlp=q4,cp.head=int8,code2wav=bf16",
            "int8,int8,int8",
            "fast,code2wav=int8,code2wav.decoder.0=int8,code2wav.decoder.3.conv2=bf16",
            "code2wav=f32,code2wav.decoder.4.conv1=int8",
            "fast,code2wav.decoder.2.conv1=int8",
            "talker.attn=int8,code2wav=int8,code2wav.conv_out=int8",
            "fast,talker.kv=f32",
            "int8,q4,cp.kv=bf16",
            "talker.attn=int8,talker.kv=bf16,cp.kv=bf16",
            "balanced",
        ] {
            let p = PrecisionPlan::parse(s).unwrap();
            assert_eq!(
                PrecisionPlan::parse(&p.name()),
                Ok(p),
                "{s} -> {}",
                p.name()
            );
        }
        assert_eq!(Preset::Fast.plan().name(), "int8,int8,int8,talker.kv=bf16");
        assert_eq!(
            PrecisionPlan::parse("fast,talker.kv=f32").unwrap().name(),
            "int8,int8,int8"
        );
        assert_eq!(
            PrecisionPlan::parse("fast,code2wav=int8,code2wav.decoder.4.conv1=bf16")
                .unwrap()
                .name(),
            "talker.attn=int8,talker.mlp_up_gate=int8,talker.mlp_down=int8,talker.head=f32,\
             cp.attn=int8,cp.mlp_up_gate=int8,cp.mlp_down=int8,cp.head=f32,\
             code2wav=int8,code2wav.decoder.4.conv1=bf16,talker.kv=bf16"
        );
        // Opting every layer back out is bf16 again.
        let mut p = PrecisionPlan::parse("code2wav=int8").unwrap();
        for (n, _) in Code2WavLayers::each(4) {
            p.apply(&format!("code2wav.{n}=bf16")).unwrap();
        }
        assert_eq!(p.code2wav, Code2WavPrecision::Bf16);
    }

    #[test]
    fn errors_name_the_bad_part() {
        let cases = [
            ("talker.attn=int3", "talker.attn=int3", "int3"),
            ("talker.ffn=int8", "talker.ffn=int8", "mlp_down"),
            ("vocoder.attn=int8", "vocoder.attn=int8", "stage"),
            ("talker.embed=int8", "talker.embed=int8", "stored"),
            ("cp.proj=q4", "cp.proj=q4", "stored"),
            ("code2wav=int4", "code2wav=int4", "int8"),
            (
                "code2wav.decoder.9.conv1=int8",
                "code2wav.decoder.9.conv1=int8",
                "layer",
            ),
            (
                "code2wav=int8,code2wav.decoder.1.conv1=f32",
                "code2wav.decoder.1.conv1=f32",
                "rest",
            ),
            ("int8,q4,f32,f32", "int8,q4,f32,f32", "preset"),
            ("int8,q5", "q5", "unknown precision"),
            ("turbo", "turbo", "balanced"),
            ("talker=int8,fast", "fast", "come first"),
            ("fast,talker.kv=int8", "talker.kv=int8", "f32 or bf16"),
            ("fast,cp.kv=q4", "cp.kv=q4", "KV cache"),
        ];
        for (spec, part, word) in cases {
            let e = PrecisionPlan::parse(spec).unwrap_err();
            assert_eq!(e.part, part, "{spec}: {e}");
            assert!(e.to_string().contains(word), "{spec}: {e}");
        }
    }

    #[test]
    fn stage_plans_group_converted_classes_by_precision() {
        let b = Preset::Balanced.plan();
        assert_eq!(
            b.code_predictor.converted(),
            vec![(
                Precision::Int8,
                vec![TensorClass::Attn, TensorClass::MlpUpGate]
            )]
        );
        assert_eq!(StagePlan::default().converted(), vec![]);
        assert_eq!(b.talker.name(), "int8;kv=bf16");
        assert_eq!(StagePlan::uniform(Precision::Int8).name(), "int8");
        assert_eq!(
            b.code_predictor.name(),
            "attn=int8;mlp_up_gate=int8;mlp_down=f32;head=f32"
        );
    }

    #[test]
    fn weight_bytes_match_the_formats() {
        assert_eq!(weight_bytes(3, 64, Precision::F32, 2), 3 * 64 * 2);
        assert_eq!(weight_bytes(3, 64, Precision::Int8, 2), 3 * (64 + 4));
        let q4 = tts_kernels::q4::q4_row_bytes(64) + tts_kernels::q4::q4_row_groups(64) + 4;
        assert_eq!(weight_bytes(3, 64, Precision::Q4, 2), 3 * q4);
    }
}
