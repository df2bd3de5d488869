//! Token selection: the official logits-processor pipeline (transformers
//! 4.57 `_get_logits_processor` order) and a small seedable RNG.
//!
//! Talker, in order, on f32 logits: repetition penalty over the codebook-0
//! tokens generated so far → EOS banned until `min_new_tokens` → suppressed
//! ids to −inf → (sampling only) temperature → top-k → top-p → draw.
//! Greedy mode applies the first three and takes the arg-max (first on
//! ties, as `torch.argmax`). The code predictor uses only the warpers.

/// How one LM picks its next token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerConfig {
    pub do_sample: bool,
    pub temperature: f32,
    /// 0 disables top-k.
    pub top_k: usize,
    /// 1.0 disables top-p.
    pub top_p: f32,
}

impl SamplerConfig {
    pub const GREEDY: SamplerConfig = SamplerConfig {
        do_sample: false,
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
    };

    /// Checks ranges, naming the option at fault.
    pub fn validate(&self, what: &str) -> Result<(), String> {
        if self.do_sample {
            if !(self.temperature.is_finite() && self.temperature > 0.0) {
                return Err(format!(
                    "{what} temperature must be a positive number, got {}",
                    self.temperature
                ));
            }
            if !(self.top_p > 0.0 && self.top_p <= 1.0) {
                return Err(format!(
                    "{what} top-p must be in (0, 1], got {}",
                    self.top_p
                ));
            }
        }
        Ok(())
    }
}

/// xoshiro256** seeded through splitmix64: small, fast, reproducible across
/// platforms (the official torch RNG stream cannot be reproduced anyway).
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Talker-only processors (applied before the warpers).
#[derive(Clone, Debug)]
pub struct TalkerRules {
    pub repetition_penalty: f32,
    pub eos: u32,
    pub min_new_tokens: usize,
    /// Sorted ids that may never be produced.
    pub suppress: Vec<u32>,
}

impl TalkerRules {
    /// The official rules: EOS `codec_eos_token_id`, `min_new_tokens = 2`,
    /// suppress `[vocab - 1024, vocab)` except EOS (the control and speaker
    /// ids above the codebook).
    pub fn official(vocab: usize, eos: u32, repetition_penalty: f32) -> Self {
        let lo = vocab.saturating_sub(1024) as u32;
        TalkerRules {
            repetition_penalty,
            eos,
            min_new_tokens: 2,
            suppress: (lo..vocab as u32).filter(|&i| i != eos).collect(),
        }
    }

    /// Applies penalty, min-new-tokens and suppression in place.
    /// `history` holds the codebook-0 tokens generated so far, `seen` is a
    /// scratch bitmap of vocab size.
    pub fn apply(&self, logits: &mut [f32], history: &[u32], seen: &mut Vec<bool>) {
        if self.repetition_penalty != 1.0 {
            seen.clear();
            seen.resize(logits.len(), false);
            for &t in history {
                let t = t as usize;
                if t < logits.len() && !seen[t] {
                    seen[t] = true;
                    let x = logits[t];
                    logits[t] = if x < 0.0 {
                        x * self.repetition_penalty
                    } else {
                        x / self.repetition_penalty
                    };
                }
            }
        }
        if history.len() < self.min_new_tokens {
            if let Some(x) = logits.get_mut(self.eos as usize) {
                *x = f32::NEG_INFINITY;
            }
        }
        for &i in &self.suppress {
            if let Some(x) = logits.get_mut(i as usize) {
                *x = f32::NEG_INFINITY;
            }
        }
    }
}

/// First index of the maximum (NaN never wins).
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut bv = f32::NEG_INFINITY;
    for (i, &v) in x.iter().enumerate() {
        if v > bv {
            bv = v;
            best = i;
        }
    }
    best as u32
}

/// Picks a token from processed logits: arg-max when not sampling, else
/// temperature → top-k (ties with the k-th value kept, as transformers) →
/// top-p (smallest set whose mass reaches p, at least one token) → draw.
/// `scratch` is reused between calls.
pub fn pick(logits: &mut [f32], cfg: &SamplerConfig, rng: &mut Rng, scratch: &mut Vec<f32>) -> u32 {
    if !cfg.do_sample {
        return argmax(logits);
    }
    if cfg.temperature != 1.0 {
        logits.iter_mut().for_each(|x| *x /= cfg.temperature);
    }
    if cfg.top_k > 0 && cfg.top_k < logits.len() {
        scratch.clear();
        scratch.extend_from_slice(logits);
        let k = cfg.top_k;
        let (_, kth, _) = scratch.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        let kth = *kth;
        logits.iter_mut().for_each(|x| {
            if *x < kth {
                *x = f32::NEG_INFINITY
            }
        });
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return argmax(logits);
    }
    // Softmax in f64 for the draw: probabilities, not parity, matter here.
    let mut probs: Vec<(u32, f64)> = logits
        .iter()
        .enumerate()
        .filter(|(_, &x)| x > f32::NEG_INFINITY)
        .map(|(i, &x)| (i as u32, ((x - max) as f64).exp()))
        .collect();
    let total: f64 = probs.iter().map(|p| p.1).sum();
    if cfg.top_p < 1.0 {
        probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut cum = 0.0;
        let mut keep = probs.len();
        for (i, p) in probs.iter().enumerate() {
            cum += p.1 / total;
            if cum >= cfg.top_p as f64 {
                keep = i + 1;
                break;
            }
        }
        probs.truncate(keep.max(1));
    }
    let total: f64 = probs.iter().map(|p| p.1).sum();
    let mut r = rng.next_f64() * total;
    for &(i, p) in &probs {
        if r < p {
            return i;
        }
        r -= p;
    }
    probs.last().map_or(0, |p| p.0)
}

/// What a logits observer sees (tests, parity tools): the raw logits of a
/// step before any processor runs.
pub enum RawLogits<'a> {
    /// Raw talker logits of one step (before any processor).
    Talker(&'a [f32]),
    /// Raw code-predictor logits for predicted codebook `i` of the current frame.
    CodePredictor(usize, &'a [f32]),
}

/// An optional hook on every step's raw logits
/// ([`crate::generator::FrameGenerator::observer`]).
pub type LogitsObserver = Option<Box<dyn FnMut(RawLogits<'_>) + Send>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative() {
        let rules = TalkerRules {
            repetition_penalty: 2.0,
            eos: 9,
            min_new_tokens: 0,
            suppress: vec![],
        };
        let mut l = vec![4.0, -4.0, 1.0];
        rules.apply(&mut l, &[0, 1, 0], &mut Vec::new());
        assert_eq!(l, vec![2.0, -8.0, 1.0]);
    }

    #[test]
    fn eos_is_banned_until_min_new_tokens() {
        let rules = TalkerRules::official(3072, 2150, 1.0);
        let mut l = vec![0.0; 3072];
        l[2150] = 10.0;
        rules.apply(&mut l, &[1], &mut Vec::new());
        assert_eq!(l[2150], f32::NEG_INFINITY);
        let mut l = vec![0.0; 3072];
        l[2150] = 10.0;
        rules.apply(&mut l, &[1, 2], &mut Vec::new());
        assert_eq!(argmax(&l), 2150);
        assert_eq!(l[2048], f32::NEG_INFINITY);
        assert_eq!(l[3071], f32::NEG_INFINITY);
        assert_eq!(l[2047], 0.0);
    }

    #[test]
    fn top_k_one_is_greedy_and_sampling_is_seeded() {
        let cfg = SamplerConfig {
            do_sample: true,
            temperature: 0.7,
            top_k: 1,
            top_p: 1.0,
        };
        let mut rng = Rng::new(1);
        let mut s = Vec::new();
        for _ in 0..20 {
            let mut l = vec![0.1, 3.0, 2.9, -1.0];
            assert_eq!(pick(&mut l, &cfg, &mut rng, &mut s), 1);
        }
        let cfg = SamplerConfig {
            do_sample: true,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
        };
        let draw = |seed| {
            let mut rng = Rng::new(seed);
            (0..32)
                .map(|_| pick(&mut [0.0; 8], &cfg, &mut rng, &mut Vec::new()))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn top_p_keeps_the_smallest_sufficient_set() {
        let cfg = SamplerConfig {
            do_sample: true,
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
        };
        let mut rng = Rng::new(3);
        for _ in 0..50 {
            // softmax of [ln 6, ln 3, ln 1] = [0.6, 0.3, 0.1]: only id 0 survives p = 0.5.
            let mut l = vec![6f32.ln(), 3f32.ln(), 0.0];
            assert_eq!(pick(&mut l, &cfg, &mut rng, &mut Vec::new()), 0);
        }
    }
}
