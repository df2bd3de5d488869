//! How close a reduced-precision model is to a reference one, measured the
//! way the field measures quantized LMs: teacher-forced KL divergence per
//! stage on the same context, and what free-running generation does with
//! it (the utterance's length).
//!
//! - Teacher forcing ([`teacher_forced`]): both models read the same prompt
//!   and are fed the same codes (the reference's own output), so every step
//!   compares them on one context. Per stage: the talker's codebook 0, each
//!   of the code predictor's codebooks 1..G-1 on its own, and the talker's
//!   end-of-speech logit apart from the rest (a small shift there moves
//!   where speech ends, which KL over 3072 codes hides).
//! - Free running (the caller's: `tts-rt fidelity` generates each case
//!   with both models): sampled generation over many seeds; a model that
//!   talks longer or stops earlier is broken even when its KL looks fine.
//!
//! Used by `tts-rt fidelity` (the user's own checkpoint) and the precision
//! gates in tests/it/precision.rs.

use crate::model::Qwen3Tts;
use crate::request::Request;

/// Index of the largest value (the first of equals).
pub fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold(0, |b, (i, &x)| if x > v[b] { i } else { b })
}

fn log_sum_exp(v: &[f32]) -> f64 {
    let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    m + v.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln()
}

/// KL(softmax(p) || softmax(q)) in nats, in f64.
pub fn kl(p: &[f32], q: &[f32]) -> f64 {
    let (lp, lq) = (log_sum_exp(p), log_sum_exp(q));
    p.iter()
        .zip(q)
        .map(|(&a, &b)| (a as f64 - lp).exp() * ((a as f64 - lp) - (b as f64 - lq)))
        .sum()
}

/// Log-probability of token `i` under softmax(`v`).
pub fn log_prob(v: &[f32], i: usize) -> f64 {
    v[i] as f64 - log_sum_exp(v)
}

/// Agreement of two models' logit rows for one stage.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Agreement {
    pub rows: usize,
    pub top1_equal: usize,
    pub kl_sum: f64,
    pub kl_max: f64,
    /// Sum over rows of the reference's top-1 minus top-2 logit (how
    /// decisive the reference is: random weights give small margins).
    pub margin_sum: f64,
}

impl Agreement {
    /// Adds the rows of `want` (reference) and `got` (candidate), `vocab`
    /// wide each.
    pub fn add(&mut self, want: &[f32], got: &[f32], vocab: usize) {
        for (w, g) in want.chunks_exact(vocab).zip(got.chunks_exact(vocab)) {
            self.rows += 1;
            self.top1_equal += (argmax(w) == argmax(g)) as usize;
            let d = kl(w, g);
            self.kl_sum += d;
            self.kl_max = self.kl_max.max(d);
            let mut s: Vec<f32> = w.to_vec();
            s.sort_by(|a, b| b.total_cmp(a));
            self.margin_sum += s.get(1).map_or(0.0, |&second| (s[0] - second) as f64);
        }
    }
    pub fn merge(&mut self, o: Agreement) {
        self.rows += o.rows;
        self.top1_equal += o.top1_equal;
        self.kl_sum += o.kl_sum;
        self.kl_max = self.kl_max.max(o.kl_max);
        self.margin_sum += o.margin_sum;
    }
    pub fn top1(&self) -> f64 {
        self.top1_equal as f64 / self.rows.max(1) as f64
    }
    pub fn mean_kl(&self) -> f64 {
        self.kl_sum / self.rows.max(1) as f64
    }
    pub fn mean_margin(&self) -> f64 {
        self.margin_sum / self.rows.max(1) as f64
    }
}

/// The end-of-speech logit on its own: how far the candidate moves the
/// log-probability of the codec EOS token, per talker step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EosShift {
    pub rows: usize,
    /// Sum and largest |Δ log p(eos)| (nats).
    pub abs_sum: f64,
    pub abs_max: f64,
    /// Sum of Δ log p(eos) (candidate minus reference): positive means the
    /// candidate wants to stop earlier.
    pub signed_sum: f64,
}

impl EosShift {
    pub fn add(&mut self, want: &[f32], got: &[f32], vocab: usize, eos: usize) {
        for (w, g) in want.chunks_exact(vocab).zip(got.chunks_exact(vocab)) {
            let d = log_prob(g, eos) - log_prob(w, eos);
            self.rows += 1;
            self.abs_sum += d.abs();
            self.abs_max = self.abs_max.max(d.abs());
            self.signed_sum += d;
        }
    }
    pub fn merge(&mut self, o: EosShift) {
        self.rows += o.rows;
        self.abs_sum += o.abs_sum;
        self.abs_max = self.abs_max.max(o.abs_max);
        self.signed_sum += o.signed_sum;
    }
    pub fn mean_abs(&self) -> f64 {
        self.abs_sum / self.rows.max(1) as f64
    }
    pub fn mean_signed(&self) -> f64 {
        self.signed_sum / self.rows.max(1) as f64
    }
}

/// Teacher-forced agreement of a candidate with the reference, per stage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StageFidelity {
    /// The talker's codebook 0 (every step, EOS included).
    pub codebook0: Agreement,
    /// The code predictor, one entry per codebook 1..G-1.
    pub predicted: Vec<Agreement>,
    pub eos: EosShift,
}

impl StageFidelity {
    /// Every predicted codebook together.
    pub fn predicted_all(&self) -> Agreement {
        let mut a = Agreement::default();
        self.predicted.iter().for_each(|p| a.merge(*p));
        a
    }
    pub fn merge(&mut self, o: &StageFidelity) {
        self.codebook0.merge(o.codebook0);
        if self.predicted.len() < o.predicted.len() {
            self.predicted
                .resize(o.predicted.len(), Agreement::default());
        }
        for (a, b) in self.predicted.iter_mut().zip(&o.predicted) {
            a.merge(*b);
        }
        self.eos.merge(o.eos);
    }
}

/// Feeds `codes` (`[frames, G]`, normally the reference's own output for
/// `req`) to both models over the reference's prompt for `req`, and
/// compares every stage's logits.
pub fn teacher_forced(
    reference: &Qwen3Tts,
    candidate: &Qwen3Tts,
    req: &Request,
    codes: &[u32],
) -> crate::error::Result<StageFidelity> {
    let groups = reference.config.talker.num_code_groups;
    let (tv, cv) = (
        reference.talker.vocab_size(),
        reference.code_predictor.vocab_size(),
    );
    let prompt = reference.build_prompt(req)?;
    let steps = codes.len() / groups;
    let (wt, wc) = reference.teacher_force(&prompt, codes, steps);
    let (gt, gc) = candidate.teacher_force(&prompt, codes, steps);
    let mut f = StageFidelity {
        predicted: vec![Agreement::default(); groups - 1],
        ..StageFidelity::default()
    };
    f.codebook0.add(&wt, &gt, tv);
    f.eos
        .add(&wt, &gt, tv, reference.config.talker.codec.eos as usize);
    // `[frames, G-1, cv]`: codebook q of every frame.
    for (i, (w, g)) in wc.chunks_exact(cv).zip(gc.chunks_exact(cv)).enumerate() {
        f.predicted[i % (groups - 1)].add(w, g, cv);
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_is_zero_for_equal_rows_and_grows_with_the_difference() {
        let p = [1.0f32, 2.0, 3.0];
        assert!(kl(&p, &p).abs() < 1e-12);
        assert!(kl(&p, &[1.0, 2.0, 3.5]) > 0.0);
        assert!(kl(&p, &[3.0, 2.0, 1.0]) > kl(&p, &[1.0, 2.0, 3.5]));
        // Shifting every logit changes nothing.
        assert!(kl(&p, &[11.0, 12.0, 13.0]).abs() < 1e-9);
    }

    #[test]
    fn eos_shift_is_signed_toward_stopping_earlier() {
        let mut e = EosShift::default();
        e.add(&[0.0, 0.0], &[0.0, 1.0], 2, 1);
        assert!(e.mean_signed() > 0.0 && (e.mean_abs() - e.mean_signed()).abs() < 1e-12);
        let mut a = Agreement::default();
        a.add(&[0.0, 1.0, 0.5], &[0.0, 1.0, 0.5], 3);
        assert_eq!((a.rows, a.top1_equal), (1, 1));
        assert!((a.mean_margin() - 0.5).abs() < 1e-9);
    }
}
