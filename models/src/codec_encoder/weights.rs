//! The encoder's weights, taken from `speech_tokenizer/model.safetensors` by
//! the hub names (`encoder.*`) with the shapes the config implies. Tensors
//! the encode path never reads (the quantizers' `output_proj`s, the
//! codebooks past `encoder_valid_num_quantizers`, the `initialized` flags)
//! are still checked by name and shape, so a checkpoint of another layout
//! does not load silently.

use tts_kernels::{Conv1dShape, StridedConv1dShape};

use crate::checkpoint::{F32Tensor, TensorStore};
use crate::config::CodecEncoderConfig;
use crate::error::Result;
use crate::weight::Weight;

/// `MimiEuclideanCodebook.epsilon`: usage is clamped to at least this
/// before dividing.
pub(crate) const CODEBOOK_USAGE_EPS: f32 = 1e-5;

/// Prefix of every encoder tensor in the speech tokenizer's file.
pub(crate) const PREFIX: &str = "encoder";

/// How a [`MimiConv`] fills its causal padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pad {
    /// Zeros (`pad_mode="constant"`: every SEANet conv).
    Zero,
    /// Copies of the edge column (`pad_mode="replicate"`: the downsample).
    Replicate,
}

/// A causal `MimiConv1d`: left padding `kernel_eff - stride`, right padding
/// up to a whole last stride, then a plain (strided, dilated) conv.
pub(crate) struct MimiConv {
    pub w: F32Tensor,
    pub bias: Option<Vec<f32>>,
    pub shape: StridedConv1dShape,
    pub pad: Pad,
}

/// What fixes one hub conv's shape and padding (its tensors are found by
/// their prefix): what [`MimiConv::load`] checks the checkpoint against.
#[derive(Clone, Copy, Debug)]
struct ConvSpec {
    c_in: usize,
    c_out: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    bias: bool,
    pad: Pad,
}

impl ConvSpec {
    /// A SEANet conv: stride 1, no dilation, a bias, zero padding.
    fn seanet(c_in: usize, c_out: usize, kernel: usize) -> ConvSpec {
        ConvSpec {
            c_in,
            c_out,
            kernel,
            stride: 1,
            dilation: 1,
            bias: true,
            pad: Pad::Zero,
        }
    }
}

impl MimiConv {
    fn load(store: &TensorStore, prefix: &str, spec: ConvSpec) -> Result<Self> {
        let ConvSpec {
            c_in,
            c_out,
            kernel,
            stride,
            dilation,
            bias,
            pad,
        } = spec;
        let w = F32Tensor::load(store, &format!("{prefix}.weight"), &[c_out, c_in, kernel])?;
        let bias = if bias {
            Some(store.vector(&format!("{prefix}.bias"), &[c_out])?)
        } else {
            None
        };
        Ok(MimiConv {
            w,
            bias,
            shape: StridedConv1dShape {
                conv: Conv1dShape {
                    c_in,
                    c_out,
                    kernel,
                    dilation,
                    groups: 1,
                },
                stride,
            },
            pad,
        })
    }
}

/// SEANet `MimiResnetBlock`: ELU, conv `dim -> dim / compress` (kernel
/// `residual_kernel_size`, dilated), ELU, 1x1 conv back, plus the identity.
pub(crate) struct ResBlock {
    pub conv1: MimiConv,
    pub conv2: MimiConv,
}

/// One downsampling stage: its ResBlocks, then ELU and the strided conv.
pub(crate) struct DownBlock {
    pub res: Vec<ResBlock>,
    pub down: MimiConv,
}

pub(crate) struct Seanet {
    pub conv_in: MimiConv,
    pub blocks: Vec<DownBlock>,
    /// After a final ELU: `last_kernel_size` conv to `hidden_size`.
    pub conv_out: MimiConv,
}

/// A bias-optional Linear, `[out, in]`.
pub(crate) struct Linear {
    pub w: F32Tensor,
    pub bias: Option<Vec<f32>>,
    pub d_out: usize,
}

impl Linear {
    fn load(
        store: &TensorStore,
        prefix: &str,
        d_in: usize,
        d_out: usize,
        bias: bool,
    ) -> Result<Self> {
        let w = F32Tensor::load(store, &format!("{prefix}.weight"), &[d_out, d_in])?;
        let bias = if bias {
            Some(store.vector(&format!("{prefix}.bias"), &[d_out])?)
        } else {
            None
        };
        Ok(Linear { w, bias, d_out })
    }

    /// `out = x W^T + b` for `m` rows.
    pub fn run(&self, x: &[f32], m: usize, out: &mut Vec<f32>) {
        out.clear();
        out.resize(m * self.d_out, 0.0);
        tts_kernels::matmul(x, m, &self.w.mat(), self.bias.as_deref(), out);
    }
}

/// `MimiTransformerLayer`: pre-LayerNorm (weight and bias) attention and
/// GELU MLP, each residual scaled by its trained LayerScale.
pub(crate) struct Layer {
    pub ln1_w: Vec<f32>,
    pub ln1_b: Vec<f32>,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub attn_scale: Vec<f32>,
    pub ln2_w: Vec<f32>,
    pub ln2_b: Vec<f32>,
    pub fc1: Linear,
    pub fc2: Linear,
    pub mlp_scale: Vec<f32>,
}

pub(crate) struct Transformer {
    pub layers: Vec<Layer>,
    /// `1 / theta^(2i / head_dim)`, rounded to f32 like the official buffer.
    pub inv_freq: Vec<f32>,
}

/// One residual quantizer (`MimiResidualVectorQuantizer`) as the encoder
/// uses it: its input projection and the codebooks it runs.
pub(crate) struct Rvq {
    /// `[codebook_dim, hidden]` 1x1 conv (None: the official code builds
    /// none when the dimensions agree).
    pub input_proj: Option<F32Tensor>,
    /// `[codebook_size, codebook_dim]` each, `embed_sum / clamp(usage)`.
    pub codebooks: Vec<Weight>,
    /// `|e_j|^2` of every entry of each codebook.
    pub norms: Vec<Vec<f32>>,
}

pub(crate) struct Quantizer {
    pub semantic: Rvq,
    pub acoustic: Rvq,
    pub dim: usize,
}

/// Everything the encode path reads; immutable after load.
pub(crate) struct Weights {
    pub seanet: Seanet,
    pub transformer: Transformer,
    pub downsample: MimiConv,
    pub quantizer: Quantizer,
}

impl Weights {
    /// Takes every `encoder.*` tensor from `store`; the caller decides what
    /// else the store may hold.
    pub(crate) fn load(cfg: &CodecEncoderConfig, store: &TensorStore) -> Result<Self> {
        let sp = format!("{PREFIX}.encoder.layers");
        let mut idx = 0;
        let conv_in = MimiConv::load(
            store,
            &format!("{sp}.{idx}.conv"),
            ConvSpec::seanet(1, cfg.num_filters, cfg.kernel_size),
        )?;
        idx += 1;
        let mut blocks = Vec::with_capacity(cfg.ratios.len());
        for (i, &ratio) in cfg.ratios.iter().enumerate() {
            let dim = cfg.seanet_channels(i);
            let hidden = dim / cfg.compress;
            let mut res = Vec::with_capacity(cfg.num_residual_layers);
            for j in 0..cfg.num_residual_layers {
                let bp = format!("{sp}.{idx}.block");
                res.push(ResBlock {
                    conv1: MimiConv::load(
                        store,
                        &format!("{bp}.1.conv"),
                        ConvSpec {
                            dilation: cfg.dilation_growth_rate.pow(j as u32),
                            ..ConvSpec::seanet(dim, hidden, cfg.residual_kernel_size)
                        },
                    )?,
                    conv2: MimiConv::load(
                        store,
                        &format!("{bp}.3.conv"),
                        ConvSpec::seanet(hidden, dim, 1),
                    )?,
                });
                idx += 1;
            }
            // `layers.{idx}` is the ELU, the conv follows it.
            let down = MimiConv::load(
                store,
                &format!("{sp}.{}.conv", idx + 1),
                ConvSpec {
                    stride: ratio,
                    ..ConvSpec::seanet(dim, 2 * dim, 2 * ratio)
                },
            )?;
            idx += 2;
            blocks.push(DownBlock { res, down });
        }
        let conv_out = MimiConv::load(
            store,
            &format!("{sp}.{}.conv", idx + 1),
            ConvSpec::seanet(
                cfg.seanet_channels(cfg.ratios.len()),
                cfg.hidden_size,
                cfg.last_kernel_size,
            ),
        )?;
        let seanet = Seanet {
            conv_in,
            blocks,
            conv_out,
        };

        let hs = cfg.hidden_size;
        let (qd, kvd) = (
            cfg.num_heads * cfg.head_dim,
            cfg.num_kv_heads * cfg.head_dim,
        );
        let ab = cfg.attention_bias;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            let lp = format!("{PREFIX}.encoder_transformer.layers.{l}");
            let v = |n: &str| store.vector(&format!("{lp}.{n}"), &[hs]);
            layers.push(Layer {
                ln1_w: v("input_layernorm.weight")?,
                ln1_b: v("input_layernorm.bias")?,
                q: Linear::load(store, &format!("{lp}.self_attn.q_proj"), hs, qd, ab)?,
                k: Linear::load(store, &format!("{lp}.self_attn.k_proj"), hs, kvd, ab)?,
                v: Linear::load(store, &format!("{lp}.self_attn.v_proj"), hs, kvd, ab)?,
                o: Linear::load(store, &format!("{lp}.self_attn.o_proj"), qd, hs, ab)?,
                attn_scale: v("self_attn_layer_scale.scale")?,
                ln2_w: v("post_attention_layernorm.weight")?,
                ln2_b: v("post_attention_layernorm.bias")?,
                fc1: Linear::load(
                    store,
                    &format!("{lp}.mlp.fc1"),
                    hs,
                    cfg.intermediate_size,
                    false,
                )?,
                fc2: Linear::load(
                    store,
                    &format!("{lp}.mlp.fc2"),
                    cfg.intermediate_size,
                    hs,
                    false,
                )?,
                mlp_scale: v("mlp_layer_scale.scale")?,
            });
        }
        // As the official buffer: `1.0 / (base ** (arange(0, d, 2).float() /
        // d))`, exponent, power and reciprocal each rounded to f32.
        let inv_freq = (0..cfg.head_dim / 2)
            .map(|i| {
                let e = (2 * i) as f32 / cfg.head_dim as f32;
                1.0 / (cfg.rope_theta.powf(e as f64) as f32)
            })
            .collect();
        let transformer = Transformer { layers, inv_freq };

        let downsample = MimiConv::load(
            store,
            &format!("{PREFIX}.downsample.conv"),
            ConvSpec {
                c_in: hs,
                c_out: hs,
                kernel: cfg.downsample_kernel,
                stride: cfg.downsample_stride,
                dilation: 1,
                bias: false,
                pad: Pad::Replicate,
            },
        )?;

        // Semantic layers first, then acoustic; only the first
        // `valid_quantizers` overall are run.
        let n_sem = cfg.num_semantic_quantizers;
        let n_ac = cfg.total_quantizers - n_sem;
        let run_sem = cfg.valid_quantizers.min(n_sem);
        let run_ac = cfg.valid_quantizers - run_sem;
        let qp = format!("{PREFIX}.quantizer");
        let semantic = load_rvq(
            cfg,
            store,
            &format!("{qp}.semantic_residual_vector_quantizer"),
            n_sem,
            run_sem,
        )?;
        let acoustic = load_rvq(
            cfg,
            store,
            &format!("{qp}.acoustic_residual_vector_quantizer"),
            n_ac,
            run_ac,
        )?;
        Ok(Weights {
            seanet,
            transformer,
            downsample,
            quantizer: Quantizer {
                semantic,
                acoustic,
                dim: cfg.codebook_dim,
            },
        })
    }
}

/// One residual quantizer of `layers` codebooks, the first `run` of them
/// prepared for the encode path, the rest only checked.
fn load_rvq(
    cfg: &CodecEncoderConfig,
    store: &TensorStore,
    prefix: &str,
    layers: usize,
    run: usize,
) -> Result<Rvq> {
    let (cs, cd, hs) = (cfg.codebook_size, cfg.codebook_dim, cfg.hidden_size);
    let input_proj = match cfg.quantizer_proj_dim {
        Some(d) => {
            // Decoding only: checked, not kept.
            store.weight(&format!("{prefix}.output_proj.weight"), &[hs, d, 1])?;
            Some(F32Tensor::load(
                store,
                &format!("{prefix}.input_proj.weight"),
                &[d, hs, 1],
            )?)
        }
        None => None,
    };
    let mut codebooks = Vec::with_capacity(run);
    let mut norms = Vec::with_capacity(run);
    for l in 0..layers {
        let cb = format!("{prefix}.layers.{l}.codebook");
        store.weight(&format!("{cb}.initialized"), &[1])?;
        if l >= run {
            store.weight(&format!("{cb}.embed_sum"), &[cs, cd])?;
            store.weight(&format!("{cb}.cluster_usage"), &[cs])?;
            continue;
        }
        let sum = store.vector(&format!("{cb}.embed_sum"), &[cs, cd])?;
        let usage = store.vector(&format!("{cb}.cluster_usage"), &[cs])?;
        let table: Vec<f32> = sum
            .chunks_exact(cd)
            .zip(&usage)
            .flat_map(|(row, &u)| {
                let d = u.max(CODEBOOK_USAGE_EPS);
                row.iter().map(move |&x| x / d)
            })
            .collect();
        norms.push(
            table
                .chunks_exact(cd)
                .map(|e| e.iter().map(|v| v * v).sum())
                .collect(),
        );
        codebooks.push(Weight::from_f32(cs, cd, table));
    }
    Ok(Rvq {
        input_proj,
        codebooks,
        norms,
    })
}
