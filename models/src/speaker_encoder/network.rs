//! The ECAPA-TDNN forward pass on a channel-major `[channels, frames]` mel:
//! initial TDNN, SE-Res2Net blocks, multi-layer feature aggregation,
//! attentive statistics pooling and the final projection to the x-vector
//! (`Qwen3TTSSpeakerEncoder.forward`, batch 1, no masking).
//!
//! Every convolution is PyTorch's `padding="same", padding_mode="reflect"`:
//! the caller (here) reflect-pads each channel row, then runs the kernels'
//! "valid" [`tts_kernels::conv1d`].

use super::mel::reflect_pad;
use super::weights::{Conv, SeRes2NetBlock, Weights};

/// `clamp(min=eps)` under the square roots of the pooling statistics.
const STATS_EPS: f32 = 1e-12;

impl Conv {
    /// `conv(x)` for `x = [c_in, t]`, "same" reflect padding: `[c_out, t]`.
    /// Needs `t` larger than either pad (the caller checks the length).
    fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let s = self.shape;
        debug_assert_eq!(x.len(), s.c_in * t);
        let (left, right) = self.same_pad();
        let mut out = vec![0f32; s.c_out * t];
        if left + right == 0 {
            tts_kernels::conv1d(x, t, &self.w, Some(&self.b), s, &mut out);
            return out;
        }
        let tp = t + left + right;
        let mut padded = Vec::with_capacity(s.c_in * tp);
        for row in x.chunks_exact(t) {
            padded.extend(reflect_pad(row, left, right));
        }
        tts_kernels::conv1d(&padded, tp, &self.w, Some(&self.b), s, &mut out);
        out
    }

    /// `ReLU(conv(x))`: the official `TimeDelayNetBlock`.
    fn tdnn(&self, x: &[f32], t: usize) -> Vec<f32> {
        let mut y = self.forward(x, t);
        relu(&mut y);
        y
    }
}

impl SeRes2NetBlock {
    /// `se(tdnn2(res2net(tdnn1(x)))) + x` on `x = [C, t]`.
    fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let h = self.tdnn1.tdnn(x, t);
        let h = self.res2net(&h, t);
        let mut h = self.tdnn2.tdnn(&h, t);
        self.squeeze_excite(&mut h, t);
        for (v, r) in h.iter_mut().zip(x) {
            *v += r;
        }
        h
    }

    /// Res2Net: split the channels into `scale` parts; part 0 passes
    /// through, part 1 goes through conv 0, part `i >= 2` through conv
    /// `i - 1` after adding the previous part's output.
    fn res2net(&self, x: &[f32], t: usize) -> Vec<f32> {
        let part = x.len() / self.scale;
        let mut out = Vec::with_capacity(x.len());
        out.extend_from_slice(&x[..part]);
        let mut prev: Vec<f32> = Vec::new();
        for (i, conv) in self.res2net.iter().enumerate() {
            let chunk = &x[(i + 1) * part..(i + 2) * part];
            let y = if i == 0 {
                conv.tdnn(chunk, t)
            } else {
                let sum: Vec<f32> = chunk.iter().zip(&prev).map(|(a, b)| a + b).collect();
                conv.tdnn(&sum, t)
            };
            out.extend_from_slice(&y);
            prev = y;
        }
        out
    }

    /// `h *= sigmoid(conv2(relu(conv1(mean_t(h)))))`, one gate per channel.
    fn squeeze_excite(&self, h: &mut [f32], t: usize) {
        let mean: Vec<f32> = h
            .chunks_exact(t)
            .map(|row| row.iter().sum::<f32>() / t as f32)
            .collect();
        let s = self.se_conv1.tdnn(&mean, 1);
        let gate = self.se_conv2.forward(&s, 1);
        for (row, g) in h.chunks_exact_mut(t).zip(gate) {
            let g = sigmoid(g);
            row.iter_mut().for_each(|v| *v *= g);
        }
    }
}

impl Weights {
    /// The x-vector `[enc_dim]` of a channel-major mel `[mel_dim, t]`.
    pub(super) fn forward(&self, mel: &[f32], t: usize) -> Vec<f32> {
        let mut h = self.tdnn0.tdnn(mel, t);
        // The aggregation concatenates the SE-Res2Net outputs (not block 0's).
        let mut cat = Vec::with_capacity(self.mfa.shape.c_in * t);
        for block in &self.blocks {
            h = block.forward(&h, t);
            cat.extend_from_slice(&h);
        }
        let m = self.mfa.tdnn(&cat, t);
        let pooled = self.attentive_pooling(&m, t);
        self.fc.forward(&pooled, 1)
    }

    /// Attentive statistics pooling of `m = [C, t]` to `[mean; std]` (`2 C`).
    fn attentive_pooling(&self, m: &[f32], t: usize) -> Vec<f32> {
        let c = self.mfa.shape.c_out;
        // Global context: uniform weights 1/t (the official mask / total).
        let uniform = vec![1.0 / t as f32; t];
        let (mut mean, mut std) = (Vec::with_capacity(c), Vec::with_capacity(c));
        for row in m.chunks_exact(t) {
            let (mu, sd) = weighted_stats(row, &uniform);
            mean.push(mu);
            std.push(sd);
        }
        // asp.tdnn on [m; mean; std] (the statistics repeated over time):
        // the statistics' part is one constant per attention channel, so it
        // is computed once and added as the frames' bias.
        let mut stats = mean;
        stats.extend_from_slice(&std);
        let context = self.asp_stats.forward(&stats, 1);
        let mut a = vec![0f32; self.asp_frames.shape.c_out * t];
        let s = self.asp_frames.shape;
        tts_kernels::conv1d(m, t, &self.asp_frames.w, Some(&context), s, &mut a);
        a.iter_mut().for_each(|v| *v = v.max(0.0).tanh());
        let mut a = self.asp_conv.forward(&a, t);
        let mut pooled = vec![0f32; 2 * c];
        for (ch, (row, w)) in m.chunks_exact(t).zip(a.chunks_exact_mut(t)).enumerate() {
            softmax(w);
            let (mu, sd) = weighted_stats(row, w);
            pooled[ch] = mu;
            pooled[c + ch] = sd;
        }
        pooled
    }
}

/// `(sum w x, sqrt(max(sum w (x - mean)^2, eps)))` over one channel.
fn weighted_stats(x: &[f32], w: &[f32]) -> (f32, f32) {
    let mean: f32 = x.iter().zip(w).map(|(x, w)| w * x).sum();
    let var: f32 = x
        .iter()
        .zip(w)
        .map(|(x, w)| {
            let d = x - mean;
            w * d * d
        })
        .sum();
    (mean, var.max(STATS_EPS).sqrt())
}

fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= inv);
}

fn relu(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = v.max(0.0));
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}
