//! Trained-like proxies: random LM weights reshaped to carry the statistics
//! that make trained weights harder to quantize than Gaussian ones, so a
//! comparison of precisions on a proxy ranks them as the real checkpoint
//! would (absolute KL on random weights says little; the ranking of
//! formats carries over, roughly).
//!
//! What [`Proxy::Trained`] changes, and what each mimics (the findings
//! gathered on trained Qwen3-TTS and trained LLMs):
//! - **Heavy tails with row and column scales.** Every decoder linear and
//!   head is drawn from a Student-t (ν = 3 for q/k, whose trained weights
//!   are the heaviest-tailed, ν = 5 elsewhere) instead of a uniform, times
//!   a log-normal scale per output row and per input column (σ = 0.5 in
//!   log space), plus one weight in a thousand ×8. Trained weights are
//!   heavier-tailed than Gaussian ones, and heavy tails alone raise the
//!   4-bit error 1.6–2.2x over Gaussian weights; a rotation that
//!   "Gaussianizes" them is exactly what makes them easy again. The
//!   overall standard deviation stays `1/sqrt(fan_in)`.
//! - **Massive activations.** A few hidden channels of each stage (the
//!   same ones in every layer, as in trained models) get 50x RMSNorm gains
//!   before attention and the MLP, and the weight columns they feed are
//!   1/50 of the rest: the "huge residual channel into small weights"
//!   pattern of trained LMs (the trained talker's residual stream shows
//!   errors in the thousands at 4 bits). The f32 function is unchanged;
//!   per-row quantization spends its range on the huge channel's product
//!   and loses the small columns, which in a synthetic check roughly
//!   tripled per-row int8 output error.
//! - **The code predictor's FFN spike.** In each code-predictor layer a
//!   few intermediate channels have up-projection rows ×100 and
//!   down-projection columns ×1/100, so the down projection's inputs on
//!   those channels are 100x the rest: the 0.6B's real code predictor
//!   carries an activation spike in its FFN that overflowed fp16 in one
//!   port (its `ffn_down` had to stay f32), and its down projection is the
//!   tensor the evidence names most sensitive to low-bit weights.
//! - **Sharper logits.** The heads are scaled ×3, so top-1 margins look
//!   less like a random net's near-flat logits.
//!
//! These are the recommended proxies, not measurements of the real
//! weights: a listening or ASR check on a trained checkpoint stays the
//! final word.

use tts_models::sampling::Rng;

/// How the LM weights of a generated checkpoint are drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Proxy {
    /// Uniform with standard deviation `1/sqrt(fan_in)` (the fixtures).
    #[default]
    Random,
    /// Trained-like statistics (module docs).
    Trained,
}

/// The accepted `--proxy` names.
pub const PROXY_NAMES: &str = "random or trained";

impl Proxy {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "random" => Ok(Proxy::Random),
            "trained" | "trained-like" => Ok(Proxy::Trained),
            _ => Err(format!("unknown proxy {s:?}; use {PROXY_NAMES}")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Proxy::Random => "random",
            Proxy::Trained => "trained",
        }
    }
}

/// Gain of the massive hidden channels' norm weights.
pub const MASSIVE_GAIN: f32 = 50.0;
/// Ratio of the code predictor's spike channels to the rest at the down
/// projection's input.
pub const SPIKE_GAIN: f32 = 100.0;
/// Gain of the output heads.
const HEAD_GAIN: f32 = 3.0;
/// Log-space standard deviation of the per-row and per-column scales.
const LOG_SCALE_SIGMA: f64 = 0.5;

/// The massive channels of a stage `h` wide (4 of them, spread out).
pub fn massive_channels(h: usize) -> Vec<usize> {
    let mut c: Vec<usize> = [1, 3, 5, 7].iter().map(|k| (k * h / 8 + k) % h).collect();
    c.dedup();
    c
}

/// The spike channels of a code-predictor MLP `inter` wide (3 of them).
pub fn spike_channels(inter: usize) -> Vec<usize> {
    let mut c: Vec<usize> = [1, 3, 4]
        .iter()
        .map(|k| (k * inter / 5 + 2) % inter)
        .collect();
    c.dedup();
    c
}

fn normal(rng: &mut Rng) -> f64 {
    let u1 = rng.next_f64().max(1e-300);
    let u2 = rng.next_f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A Student-t draw with `nu` degrees of freedom, scaled to unit variance.
fn student_t(rng: &mut Rng, nu: u32) -> f64 {
    let z = normal(rng);
    let chi2: f64 = (0..nu).map(|_| normal(rng).powi(2)).sum();
    let t = z / (chi2 / nu as f64).sqrt();
    t * ((nu as f64 - 2.0) / nu as f64).sqrt()
}

/// Log-normal scales of mean square 1.
fn scales(rng: &mut Rng, n: usize) -> Vec<f64> {
    let norm = (LOG_SCALE_SIGMA * LOG_SCALE_SIGMA).exp();
    (0..n)
        .map(|_| (LOG_SCALE_SIGMA * normal(rng)).exp() / norm)
        .collect()
}

/// The parts of an LM tensor name: (stage prefix, the rest after the
/// layer index), e.g. `("talker.code_predictor.model", "mlp.up_proj.weight")`.
fn split_layer(name: &str) -> Option<(&str, &str)> {
    let (stage, rest) = name.split_once(".layers.")?;
    let (_, tail) = rest.split_once('.')?;
    Some((stage, tail))
}

/// Reshapes the freshly drawn `vals` of tensor `name` (`shape`, `fan_in`)
/// to the trained-like statistics; tensors other than the LMs' norms,
/// linears and heads are left as drawn.
pub(crate) fn trained_like(
    name: &str,
    shape: &[usize],
    fan_in: usize,
    vals: &mut [f32],
    rng: &mut Rng,
) {
    let is_head =
        name == "talker.codec_head.weight" || name.starts_with("talker.code_predictor.lm_head.");
    let layer = split_layer(name);
    if let Some((_, "input_layernorm.weight" | "post_attention_layernorm.weight")) = layer {
        for c in massive_channels(vals.len()) {
            vals[c] *= MASSIVE_GAIN;
        }
        return;
    }
    let linear = matches!(
        layer,
        Some((
            _,
            "self_attn.q_proj.weight"
                | "self_attn.k_proj.weight"
                | "self_attn.v_proj.weight"
                | "self_attn.o_proj.weight"
                | "mlp.gate_proj.weight"
                | "mlp.up_proj.weight"
                | "mlp.down_proj.weight"
        ))
    );
    if !(linear || is_head) || shape.len() != 2 || fan_in == 0 {
        return;
    }
    let (rows, cols) = (shape[0], shape[1]);
    let tail = layer.map_or("", |(_, t)| t);
    let nu = if matches!(tail, "self_attn.q_proj.weight" | "self_attn.k_proj.weight") {
        3
    } else {
        5
    };
    let std = 1.0 / (fan_in as f64).sqrt();
    let (rs, cs) = (scales(rng, rows), scales(rng, cols));
    for (r, row) in vals.chunks_exact_mut(cols).enumerate() {
        for (c, v) in row.iter_mut().enumerate() {
            let mut x = student_t(rng, nu) * std * rs[r] * cs[c];
            if rng.next_f64() < 1e-3 {
                x *= 8.0;
            }
            *v = x as f32;
        }
    }
    if is_head {
        vals.iter_mut().for_each(|v| *v *= HEAD_GAIN);
        return;
    }
    let Some((stage, tail)) = layer else { return };
    // Columns fed by the massive channels (the normed hidden state).
    if matches!(
        tail,
        "self_attn.q_proj.weight"
            | "self_attn.k_proj.weight"
            | "self_attn.v_proj.weight"
            | "mlp.gate_proj.weight"
            | "mlp.up_proj.weight"
    ) {
        for c in massive_channels(cols) {
            for row in vals.chunks_exact_mut(cols) {
                row[c] /= MASSIVE_GAIN;
            }
        }
    }
    if stage == "talker.code_predictor.model" {
        match tail {
            "mlp.up_proj.weight" => {
                for r in spike_channels(rows) {
                    vals[r * cols..(r + 1) * cols]
                        .iter_mut()
                        .for_each(|v| *v *= SPIKE_GAIN);
                }
            }
            "mlp.down_proj.weight" => {
                for c in spike_channels(cols) {
                    for row in vals.chunks_exact_mut(cols) {
                        row[c] /= SPIKE_GAIN;
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!(Proxy::parse("Trained"), Ok(Proxy::Trained));
        assert_eq!(Proxy::parse("random"), Ok(Proxy::Random));
        assert!(Proxy::parse("gaussian").unwrap_err().contains("trained"));
    }

    fn kurtosis(v: &[f32]) -> f64 {
        let n = v.len() as f64;
        let m2 = v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / n;
        let m4 = v.iter().map(|&x| (x as f64).powi(4)).sum::<f64>() / n;
        m4 / (m2 * m2)
    }

    /// Heavy tails (kurtosis well above the uniform's 1.8 and Gaussian's
    /// 3), the spike channels' rows 100x and the massive columns 1/50.
    #[test]
    fn trained_like_weights_are_heavy_tailed_and_spiked() {
        let mut rng = Rng::new(7);
        let (rows, cols) = (200, 64);
        let mut w = vec![0f32; rows * cols];
        trained_like(
            "talker.code_predictor.model.layers.0.mlp.up_proj.weight",
            &[rows, cols],
            cols,
            &mut w,
            &mut rng,
        );
        let massive = massive_channels(cols);
        let plain: Vec<f32> = w
            .chunks_exact(cols)
            .enumerate()
            .filter(|(r, _)| !spike_channels(rows).contains(r))
            .flat_map(|(_, row)| {
                row.iter()
                    .enumerate()
                    .filter(|(c, _)| !massive.contains(c))
                    .map(|(_, &v)| v)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(kurtosis(&plain) > 4.0, "{}", kurtosis(&plain));
        let rms = |v: &mut dyn Iterator<Item = f32>| {
            let (s, n) = v.fold((0.0f64, 0usize), |(s, n), x| {
                (s + (x as f64).powi(2), n + 1)
            });
            (s / n as f64).sqrt()
        };
        let all = rms(&mut plain.iter().copied());
        let r = spike_channels(rows)[0];
        let spike = rms(&mut w[r * cols..(r + 1) * cols].iter().copied());
        assert!(spike > 20.0 * all, "{spike} vs {all}");
        let spikes = spike_channels(rows);
        let col = rms(&mut w
            .chunks_exact(cols)
            .enumerate()
            .filter(|(r, _)| !spikes.contains(r))
            .map(|(_, row)| row[massive[0]]));
        assert!(col < all / 10.0, "{col} vs {all}");
        let mut norm = vec![1f32; cols];
        trained_like(
            "talker.model.layers.3.input_layernorm.weight",
            &[cols],
            0,
            &mut norm,
            &mut rng,
        );
        assert_eq!(norm[massive[1]], MASSIVE_GAIN);
        assert_eq!(
            norm.iter().filter(|&&v| v == 1.0).count(),
            cols - massive.len()
        );
    }
}
