//! The reference-clip encoders of Base checkpoints, at random: the speaker
//! encoder (`speaker_encoder.*`, 76 tensors in the talker file, bf16 like
//! the rest of it) and the speech tokenizer's Mimi encoder (`encoder.*`,
//! 225 tensors, f32), with the config entries that describe them.
//!
//! Shapes follow the hub files (reference doc §1.3 and §3), as the loaders
//! in `tts_models::speaker_encoder` and `tts_models::codec_encoder` check
//! them. Values are "healthy" the same way as the decoder's: weights with
//! standard deviation `1 / sqrt(fan_in)`, norms near 1, codebook usages
//! near 1 (never 0) and codebook sums of unit variance, so a clip encodes
//! to varied codes and a non-degenerate x-vector.

use serde_json::{json, Value};

use crate::tensors::{Tensors, ONE, SMALL};

/// Speaker encoder sizes; the rest (128 mel bins, res2net scale 8, kernel
/// sizes `[5, 3, 3, 3, 1]`, dilations `[1, 2, 3, 4, 1]`) are the official
/// class defaults the hub config leaves implicit.
pub(crate) struct SpeakerDims {
    /// Output width: the talker's hidden size.
    pub enc_dim: usize,
    /// `enc_channels`: four TDNN widths, then the MFA width.
    pub channels: [usize; 5],
    pub attention: usize,
    pub se: usize,
}

pub(crate) const MEL_DIM: usize = 128;
const RES2NET_SCALE: usize = 8;
const KERNELS: [usize; 5] = [5, 3, 3, 3, 1];

impl SpeakerDims {
    /// The hub speaker encoder for a talker of width `enc_dim`.
    pub fn hub(enc_dim: usize) -> Self {
        SpeakerDims {
            enc_dim,
            channels: [512, 512, 512, 512, 1536],
            attention: 128,
            se: 128,
        }
    }

    /// `speaker_encoder_config`: as the hub file writes it (`enc_dim` and
    /// `sample_rate` only) when the sizes are the defaults, else with the
    /// keys that differ.
    pub fn config(&self) -> Value {
        let hub = Self::hub(self.enc_dim);
        let mut v = json!({"enc_dim": self.enc_dim, "sample_rate": 24000});
        if self.channels != hub.channels {
            v["enc_channels"] = json!(self.channels);
        }
        if self.attention != hub.attention {
            v["enc_attention_channels"] = json!(self.attention);
        }
        if self.se != hub.se {
            v["enc_se_channels"] = json!(self.se);
        }
        v
    }

    /// The 76 `speaker_encoder.*` tensors.
    pub fn tensors(&self) -> Tensors {
        let p = "speaker_encoder";
        let mut v: Tensors = Vec::new();
        let mut conv = |name: String, c_in: usize, c_out: usize, k: usize| {
            v.push((format!("{name}.weight"), vec![c_out, c_in, k], c_in * k));
            v.push((format!("{name}.bias"), vec![c_out], c_in * k));
        };
        let ch = self.channels;
        conv(format!("{p}.blocks.0.conv"), MEL_DIM, ch[0], KERNELS[0]);
        for i in 1..4 {
            let b = format!("{p}.blocks.{i}");
            let (cin, c) = (ch[i - 1], ch[i]);
            let part = c / RES2NET_SCALE;
            conv(format!("{b}.tdnn1.conv"), cin, c, 1);
            for j in 0..RES2NET_SCALE - 1 {
                conv(
                    format!("{b}.res2net_block.blocks.{j}.conv"),
                    part,
                    part,
                    KERNELS[i],
                );
            }
            conv(format!("{b}.tdnn2.conv"), c, c, 1);
            conv(format!("{b}.se_block.conv1"), c, self.se, 1);
            conv(format!("{b}.se_block.conv2"), self.se, c, 1);
        }
        let m = ch[4];
        // The MFA conv reads the three blocks' outputs concatenated.
        conv(
            format!("{p}.mfa.conv"),
            ch[1] + ch[2] + ch[3],
            m,
            KERNELS[4],
        );
        conv(format!("{p}.asp.tdnn.conv"), 3 * m, self.attention, 1);
        conv(format!("{p}.asp.conv"), self.attention, m, 1);
        conv(format!("{p}.fc"), 2 * m, self.enc_dim, 1);
        v
    }
}

/// Mimi encoder sizes (the hub's `encoder_config`).
pub(crate) struct EncoderDims {
    pub num_filters: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub inter: usize,
    pub codebook_dim: usize,
    /// Quantizers in the file (1 semantic + the rest acoustic); the
    /// talker's code groups are the first of them.
    pub quantizers: usize,
}

/// `upsampling_ratios` (decoder order): 960 samples per SEANet frame, so
/// with the stride-2 downsample 1920 per code, as the decoder expects.
const UPSAMPLING_RATIOS: [usize; 4] = [8, 6, 5, 4];
const CODEBOOK_SIZE: usize = 2048;

impl EncoderDims {
    pub fn hub() -> Self {
        EncoderDims {
            num_filters: 64,
            hidden: 512,
            layers: 8,
            heads: 8,
            head_dim: 64,
            inter: 2048,
            codebook_dim: 256,
            quantizers: 32,
        }
    }

    /// `encoder_config` as `save_pretrained` writes the hub's.
    pub fn config(&self) -> Value {
        json!({
            "_frame_rate": 12.5,
            "audio_channels": 1,
            "codebook_dim": self.codebook_dim,
            "codebook_size": CODEBOOK_SIZE,
            "compress": 2,
            "dilation_growth_rate": 2,
            "head_dim": self.head_dim,
            "hidden_act": "gelu",
            "hidden_size": self.hidden,
            "intermediate_size": self.inter,
            "kernel_size": 7,
            "last_kernel_size": 3,
            "layer_scale_initial_scale": 0.01,
            "max_position_embeddings": 8000,
            "model_type": "mimi",
            "norm_eps": 1e-5,
            "num_attention_heads": self.heads,
            "num_filters": self.num_filters,
            "num_hidden_layers": self.layers,
            "num_key_value_heads": self.heads,
            "num_quantizers": self.quantizers,
            "num_residual_layers": 1,
            "num_semantic_quantizers": 1,
            "pad_mode": "constant",
            "residual_kernel_size": 3,
            "rope_theta": 10000.0,
            "sampling_rate": 24000,
            "sliding_window": 250,
            "upsampling_ratios": UPSAMPLING_RATIOS,
            "use_cache": false,
            "use_causal_conv": true,
            "use_conv_shortcut": false,
            "use_streaming": false,
            "vector_quantization_hidden_dimension": self.codebook_dim
        })
    }

    /// The 225 `encoder.*` tensors (at the hub sizes).
    pub fn tensors(&self) -> Tensors {
        let mut v: Tensors = Vec::new();
        let sp = "encoder.encoder.layers";
        let conv = |v: &mut Tensors, name: String, c_in: usize, c_out: usize, k: usize| {
            v.push((format!("{name}.weight"), vec![c_out, c_in, k], c_in * k));
            v.push((format!("{name}.bias"), vec![c_out], c_in * k));
        };
        let nf = self.num_filters;
        conv(&mut v, format!("{sp}.0.conv"), 1, nf, 7);
        let mut idx = 1;
        let mut dim = nf;
        for &ratio in UPSAMPLING_RATIOS.iter().rev() {
            let b = format!("{sp}.{idx}.block");
            conv(&mut v, format!("{b}.1.conv"), dim, dim / 2, 3);
            conv(&mut v, format!("{b}.3.conv"), dim / 2, dim, 1);
            // `layers.{idx + 1}` is the ELU.
            conv(
                &mut v,
                format!("{sp}.{}.conv", idx + 2),
                dim,
                2 * dim,
                2 * ratio,
            );
            idx += 3;
            dim *= 2;
        }
        conv(
            &mut v,
            format!("{sp}.{}.conv", idx + 1),
            dim,
            self.hidden,
            3,
        );

        let (hs, qd) = (self.hidden, self.heads * self.head_dim);
        for l in 0..self.layers {
            let lp = format!("encoder.encoder_transformer.layers.{l}");
            for ln in ["input_layernorm", "post_attention_layernorm"] {
                v.push((format!("{lp}.{ln}.weight"), vec![hs], 0));
                v.push((format!("{lp}.{ln}.bias"), vec![hs], SMALL));
            }
            for n in ["q", "k", "v"] {
                v.push((format!("{lp}.self_attn.{n}_proj.weight"), vec![qd, hs], hs));
            }
            v.push((format!("{lp}.self_attn.o_proj.weight"), vec![hs, qd], qd));
            v.push((format!("{lp}.mlp.fc1.weight"), vec![self.inter, hs], hs));
            v.push((
                format!("{lp}.mlp.fc2.weight"),
                vec![hs, self.inter],
                self.inter,
            ));
            v.push((format!("{lp}.self_attn_layer_scale.scale"), vec![hs], SMALL));
            v.push((format!("{lp}.mlp_layer_scale.scale"), vec![hs], SMALL));
        }
        v.push((
            "encoder.downsample.conv.weight".into(),
            vec![hs, hs, 4],
            4 * hs,
        ));

        let cd = self.codebook_dim;
        let q = "encoder.quantizer";
        for (half, layers) in [
            ("semantic_residual_vector_quantizer", 1),
            ("acoustic_residual_vector_quantizer", self.quantizers - 1),
        ] {
            let r = format!("{q}.{half}");
            if cd != hs {
                v.push((format!("{r}.input_proj.weight"), vec![cd, hs, 1], hs));
                v.push((format!("{r}.output_proj.weight"), vec![hs, cd, 1], cd));
            }
            for l in 0..layers {
                let cb = format!("{r}.layers.{l}.codebook");
                v.push((format!("{cb}.initialized"), vec![1], ONE));
                v.push((format!("{cb}.embed_sum"), vec![CODEBOOK_SIZE, cd], 1));
                v.push((format!("{cb}.cluster_usage"), vec![CODEBOOK_SIZE], 0));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_sizes_have_the_hub_tensor_counts_and_parameters() {
        let s = SpeakerDims::hub(2048).tensors();
        assert_eq!(s.len(), 76);
        let params = |t: &Tensors| -> usize {
            t.iter()
                .map(|(_, shape, _)| shape.iter().product::<usize>())
                .sum()
        };
        // Reference doc §1.1: 12,001,088 (E = 2048) and 8,854,336 (E = 1024).
        assert_eq!(params(&s), 12_001_088);
        assert_eq!(params(&SpeakerDims::hub(1024).tensors()), 8_854_336);
        let e = EncoderDims::hub().tensors();
        assert_eq!(e.len(), 225);
        // Reference doc §3.1: 56,234,304 parameters in all.
        assert_eq!(params(&e), 56_234_304);
    }
}
