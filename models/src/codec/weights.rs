//! The decoder's weights, taken from the checkpoint by name with the shape the
//! config implies, plus what can be precomputed once (codebooks divided by
//! their usage, SnakeBeta exponentials, RoPE inverse frequencies).

use tts_kernels::{AttnShape, Conv1dShape, ConvBf16, ConvQ8, ConvTranspose1dShape};

use crate::checkpoint::{F32Tensor, TensorStore};
use crate::config::CodecConfig;
use crate::error::Result;
use crate::quant::{Code2WavLayers, Code2WavPrecision};
use crate::weight::Weight;

/// `EuclideanCodebook.epsilon` in the official decoder: usage is clamped to
/// at least this before dividing (1e-5; one port uses 1e-7, which differs on
/// rarely used entries).
pub(crate) const CODEBOOK_USAGE_EPS: f32 = 1e-5;
/// `ConvNeXtBlock.norm` is `nn.LayerNorm(dim, eps=1e-6)`, not configurable.
pub(crate) const CONVNEXT_LN_EPS: f32 = 1e-6;
/// `ConvNeXtBlock.dwconv` kernel size, not configurable.
pub(crate) const CONVNEXT_KERNEL: usize = 7;
/// Kernel of `decoder.0`, the residual units' first conv and the output conv.
pub(crate) const VOCODER_KERNEL: usize = 7;
/// Dilations of the three residual units of every vocoder block.
pub(crate) const RESIDUAL_DILATIONS: [usize; 3] = [1, 3, 9];
/// `pre_conv` kernel size.
pub(crate) const PRE_CONV_KERNEL: usize = 3;
/// `SnakeBeta.no_div_by_zero`.
const SNAKE_EPS: f32 = 1e-9;

/// A causal (left-zero-padded), stride-1 `Conv1d`.
pub(crate) struct CausalConv {
    pub w: F32Tensor,
    /// The bf16 copy the forward runs instead of `w` (dense convs at
    /// [`Code2WavPrecision::Bf16`]).
    pub bf16: Option<ConvBf16>,
    /// The int8 copy the forward runs instead of `w` (the layers a
    /// [`Code2WavPrecision::Int8`] names).
    pub q8: Option<ConvQ8>,
    pub bias: Option<Vec<f32>>,
    pub shape: Conv1dShape,
}

impl CausalConv {
    fn load(
        store: &TensorStore,
        prefix: &str,
        shape: Conv1dShape,
        bias: bool,
        precision: Code2WavPrecision,
        layer: Option<Code2WavLayers>,
    ) -> Result<Self> {
        let Conv1dShape {
            c_in,
            c_out,
            kernel,
            groups,
            ..
        } = shape;
        let w = F32Tensor::load(
            store,
            &format!("{prefix}.weight"),
            &[c_out, c_in / groups, kernel],
        )?;
        let bias = if bias {
            Some(store.vector(&format!("{prefix}.bias"), &[c_out])?)
        } else {
            None
        };
        let q8 = (layer.is_some_and(|l| precision.int8(l)) && groups == 1)
            .then(|| ConvQ8::from_conv1d(w.data(), c_out, c_in, kernel));
        let bf16 = (precision.rest_bf16() && groups == 1 && q8.is_none()).then(|| {
            ConvBf16::from_conv1d(w.data(), c_out, c_in, kernel, tts_kernels::bf16_layout())
        });
        Ok(CausalConv {
            w,
            bf16,
            q8,
            bias,
            shape,
        })
    }

    /// Input samples of left context one output sample needs beyond its own.
    pub fn history(&self) -> usize {
        (self.shape.kernel - 1) * self.shape.dilation
    }

    /// `out = conv(x)` for `x = [c_in, t_in]` already carrying `history()`
    /// columns of left context; `out` becomes `[c_out, t_in - history()]`.
    pub fn run(&self, x: &[f32], t_in: usize, out: &mut Vec<f32>) {
        let t_out = t_in - self.history();
        // Sized, not cleared: every conv path writes each output (the
        // kernels' tests fill theirs with NaN), so zeroing a reused
        // buffer was a serial pass over it for nothing.
        out.resize(self.shape.c_out * t_out, 0.0);
        if let Some(w) = &self.q8 {
            return tts_kernels::conv1d_q8(
                x,
                t_in,
                w,
                self.bias.as_deref(),
                self.shape.dilation,
                out,
            );
        }
        if let Some(w) = &self.bf16 {
            return tts_kernels::conv1d_bf16(
                x,
                t_in,
                w,
                self.bias.as_deref(),
                self.shape.dilation,
                out,
            );
        }
        tts_kernels::conv1d(
            x,
            t_in,
            self.w.data(),
            self.bias.as_deref(),
            self.shape,
            out,
        );
    }
}

/// `CausalTransConvNet`: `ConvTranspose1d(kernel, stride)` with the last
/// `kernel - stride` outputs dropped, so `t` inputs give `t * stride` outputs.
/// With `kernel = m * stride`, output sample `p` depends on inputs
/// `p / stride - (m - 1) ..= p / stride`: it is final as soon as its own input
/// frame is known, and a stream needs `m - 1` input columns of history.
pub(crate) struct CausalTransConv {
    pub w: F32Tensor,
    /// The bf16 or int8 form the forward runs instead of `w` (below f32).
    pub phases: Option<PhaseConv>,
    pub bias: Vec<f32>,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub stride: usize,
}

impl CausalTransConv {
    fn load(
        store: &TensorStore,
        prefix: &str,
        shape: ConvTranspose1dShape,
        precision: Code2WavPrecision,
        layer: Option<Code2WavLayers>,
    ) -> Result<Self> {
        let ConvTranspose1dShape { c_in, c_out, .. } = shape;
        let q8 = layer.is_some_and(|l| precision.int8(l));
        let w = F32Tensor::load(
            store,
            &format!("{prefix}.weight"),
            &[c_in, c_out, shape.kernel],
        )?;
        let bias = store.vector(&format!("{prefix}.bias"), &[c_out])?;
        let phases =
            (precision.rest_bf16() || q8).then(|| PhaseConv::new(w.data(), &bias, shape, q8));
        Ok(CausalTransConv {
            w,
            phases,
            bias,
            c_in,
            c_out,
            kernel: shape.kernel,
            stride: shape.stride,
        })
    }

    /// Input columns of history a stream keeps.
    pub fn history(&self) -> usize {
        self.kernel / self.stride - 1
    }

    /// `x = [c_in, t_in]` with `history()` leading context columns; `out`
    /// becomes `[c_out, (t_in - history()) * stride]`, the outputs of the new
    /// columns only. `full` is scratch (the untrimmed transposed conv in
    /// f32, the phase rows below it).
    pub fn run(&self, x: &[f32], t_in: usize, full: &mut Vec<f32>, out: &mut Vec<f32>) {
        let h = self.history();
        let n = t_in - h;
        if let Some(p) = &self.phases {
            return p.run(x, t_in, h, full, out);
        }
        let conv = |out: &mut [f32]| {
            tts_kernels::conv_transpose1d(
                x,
                t_in,
                self.w.data(),
                Some(&self.bias),
                ConvTranspose1dShape {
                    c_in: self.c_in,
                    c_out: self.c_out,
                    kernel: self.kernel,
                    stride: self.stride,
                },
                out,
            )
        };
        let t_full = (t_in - 1) * self.stride + self.kernel;
        let t_out = n * self.stride;
        // Sized, not cleared, as in `CausalConv::run`.
        if h == 0 && self.kernel == self.stride {
            // No overlap, no trim: the full output is the answer.
            out.resize(self.c_out * t_out, 0.0);
            conv(out);
            return;
        }
        full.resize(self.c_out * t_full, 0.0);
        conv(full);
        // Drop the `h * stride` outputs that belong to the history columns and
        // the trailing `kernel - stride` the official module trims.
        let skip = h * self.stride;
        out.clear();
        out.reserve(self.c_out * t_out);
        for row in full.chunks_exact(t_full) {
            out.extend_from_slice(&row[skip..skip + t_out]);
        }
    }
}

/// A transposed conv run as a dense stride-1 conv over its phases
/// ([`ConvTranspose1dShape::phase_weights`]): `c_out * stride` rows of
/// `kernel / stride` taps, in bf16 or int8 (the f32 layer keeps the
/// transposed kernel, which the goldens hold to), then the phases
/// interleaved into time.
pub(crate) struct PhaseConv {
    bf16: Option<ConvBf16>,
    q8: Option<ConvQ8>,
    /// The bias of each row (`bias[co]` for each of its phases).
    bias: Vec<f32>,
    c_out: usize,
    stride: usize,
}

impl PhaseConv {
    fn new(w: &[f32], bias: &[f32], shape: ConvTranspose1dShape, q8: bool) -> Self {
        let ConvTranspose1dShape { c_out, stride, .. } = shape;
        let (bf16, q8) = if q8 {
            (None, Some(ConvQ8::from_transpose1d_phases(w, shape)))
        } else {
            let l = tts_kernels::bf16_layout();
            (Some(ConvBf16::from_transpose1d_phases(w, shape, l)), None)
        };
        PhaseConv {
            bf16,
            q8,
            bias: bias
                .iter()
                .flat_map(|&b| std::iter::repeat_n(b, stride))
                .collect(),
            c_out,
            stride,
        }
    }

    /// Whether it runs in int8.
    #[cfg(test)]
    pub fn is_int8(&self) -> bool {
        self.q8.is_some()
    }

    /// `x = [c_in, t_in]` with `h` history columns: `out = [c_out, (t_in -
    /// h) * stride]`; `rows` is scratch for the phase rows.
    fn run(&self, x: &[f32], t_in: usize, h: usize, rows: &mut Vec<f32>, out: &mut Vec<f32>) {
        let (n, s) = (t_in - h, self.stride);
        // Sized, not cleared: the convs and the interleave write every element.
        rows.resize(self.c_out * s * n, 0.0);
        if let Some(w) = &self.q8 {
            tts_kernels::conv1d_q8(x, t_in, w, Some(&self.bias), 1, rows);
        } else if let Some(w) = &self.bf16 {
            tts_kernels::conv1d_bf16(x, t_in, w, Some(&self.bias), 1, rows);
        }
        out.resize(self.c_out * n * s, 0.0);
        tts_kernels::interleave_phases(rows, self.c_out, s, n, out);
    }
}

/// SnakeBeta with `exp` of the stored log-parameters precomputed.
pub(crate) struct Snake {
    pub alpha: Vec<f32>,
    pub inv_beta: Vec<f32>,
}

impl Snake {
    fn load(store: &TensorStore, prefix: &str, channels: usize) -> Result<Self> {
        let alpha = store
            .vector(&format!("{prefix}.alpha"), &[channels])?
            .iter()
            .map(|a| a.exp())
            .collect();
        let inv_beta = store
            .vector(&format!("{prefix}.beta"), &[channels])?
            .iter()
            .map(|b| 1.0 / (b.exp() + SNAKE_EPS))
            .collect();
        Ok(Snake { alpha, inv_beta })
    }

    pub fn apply(&self, x: &mut [f32], t: usize) {
        tts_kernels::snake_beta(x, t, &self.alpha, &self.inv_beta)
    }
}

/// A bias-carrying Linear: the stored weight (mapped, zero copy) at
/// [`Code2WavPrecision::F32`], an owned bf16 copy at
/// [`Code2WavPrecision::Bf16`].
pub(crate) struct Linear {
    pub w: Weight,
    pub bias: Option<Vec<f32>>,
}

impl Linear {
    fn load(
        store: &TensorStore,
        prefix: &str,
        d_in: usize,
        d_out: usize,
        bias: bool,
        precision: Code2WavPrecision,
    ) -> Result<Self> {
        let mut w = store.weight(&format!("{prefix}.weight"), &[d_out, d_in])?;
        if precision.rest_bf16() {
            w = w.to_bf16();
        }
        let bias = if bias {
            Some(store.vector(&format!("{prefix}.bias"), &[d_out])?)
        } else {
            None
        };
        Ok(Linear { w, bias })
    }

    pub fn d_out(&self) -> usize {
        self.w.rows()
    }

    /// `out = x W^T + b` for `m` rows.
    pub fn run(&self, x: &[f32], m: usize, out: &mut Vec<f32>) {
        out.clear();
        out.resize(m * self.d_out(), 0.0);
        tts_kernels::matmul(x, m, &self.w.mat(), self.bias.as_deref(), out);
    }
}

/// Split RVQ dequantizer: codebook 0 through `rvq_first`, the rest summed and
/// projected through `rvq_rest`; both projections are bias-free 1x1 convs.
pub(crate) struct Quantizer {
    /// `[num_quantizers][codebook_size * vector_dim]`, already divided by
    /// the clamped cluster usage.
    pub codebooks: Vec<Vec<f32>>,
    pub vector_dim: usize,
    pub first_proj: Weight,
    pub rest_proj: Weight,
}

pub(crate) struct AttnLayer {
    pub input_norm: Vec<f32>,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub attn_scale: Vec<f32>,
    pub post_norm: Vec<f32>,
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
    pub mlp_scale: Vec<f32>,
}

pub(crate) struct Transformer {
    pub input_proj: Linear,
    pub layers: Vec<AttnLayer>,
    pub norm: Vec<f32>,
    pub output_proj: Linear,
    pub attn: AttnShape,
    pub eps: f32,
    /// `1 / theta^(2i / head_dim)`, rounded to f32 like the official buffer.
    pub inv_freq: Vec<f32>,
    pub window: usize,
}

pub(crate) struct ConvNeXt {
    pub dwconv: CausalConv,
    pub norm_w: Vec<f32>,
    pub norm_b: Vec<f32>,
    pub pw1: Linear,
    pub pw2: Linear,
    pub gamma: Vec<f32>,
}

pub(crate) struct Upsample {
    pub trans: CausalTransConv,
    pub convnext: ConvNeXt,
}

pub(crate) struct ResidualUnit {
    pub act1: Snake,
    pub conv1: CausalConv,
    pub act2: Snake,
    pub conv2: CausalConv,
}

pub(crate) struct VocoderBlock {
    pub act: Snake,
    pub trans: CausalTransConv,
    pub units: Vec<ResidualUnit>,
}

/// Everything the forward reads; immutable after load.
pub(crate) struct Weights {
    pub quantizer: Quantizer,
    pub pre_conv: CausalConv,
    pub transformer: Transformer,
    pub upsample: Vec<Upsample>,
    pub conv_in: CausalConv,
    pub blocks: Vec<VocoderBlock>,
    pub final_act: Snake,
    pub conv_out: CausalConv,
}

impl Weights {
    /// Takes every `decoder.*` tensor from `store` (names and shapes of the
    /// hub checkpoint). The caller decides what else the store may hold.
    pub(crate) fn load(
        cfg: &CodecConfig,
        store: &TensorStore,
        precision: Code2WavPrecision,
    ) -> Result<Self> {
        let p = "decoder";
        let vd = cfg.codebook_vector_dim;
        let cs = cfg.codebook_size;

        // Quantizer. `input_proj`s exist but only the encoder side uses them.
        let mut codebooks = Vec::with_capacity(cfg.num_quantizers);
        for q in 0..cfg.num_quantizers {
            let cb = if q < cfg.num_semantic_quantizers {
                format!("{p}.quantizer.rvq_first.vq.layers.{q}._codebook")
            } else {
                format!(
                    "{p}.quantizer.rvq_rest.vq.layers.{}._codebook",
                    q - cfg.num_semantic_quantizers
                )
            };
            let sum = store.vector(&format!("{cb}.embedding_sum"), &[cs, vd])?;
            let usage = store.vector(&format!("{cb}.cluster_usage"), &[cs])?;
            let table = sum
                .chunks_exact(vd)
                .zip(&usage)
                .flat_map(|(row, &u)| {
                    let d = u.max(CODEBOOK_USAGE_EPS);
                    row.iter().map(move |&x| x / d)
                })
                .collect();
            codebooks.push(table);
        }
        for side in ["rvq_first", "rvq_rest"] {
            store.weight(
                &format!("{p}.quantizer.{side}.input_proj.weight"),
                &[vd, cfg.codebook_dim, 1],
            )?;
        }
        let quantizer = Quantizer {
            codebooks,
            vector_dim: vd,
            first_proj: store.weight(
                &format!("{p}.quantizer.rvq_first.output_proj.weight"),
                &[cfg.codebook_dim, vd, 1],
            )?,
            rest_proj: store.weight(
                &format!("{p}.quantizer.rvq_rest.output_proj.weight"),
                &[cfg.codebook_dim, vd, 1],
            )?,
        };

        let pre_conv = CausalConv::load(
            store,
            &format!("{p}.pre_conv.conv"),
            Conv1dShape {
                c_in: cfg.codebook_dim,
                c_out: cfg.latent_dim,
                kernel: PRE_CONV_KERNEL,
                dilation: 1,
                groups: 1,
            },
            true,
            precision,
            Some(Code2WavLayers::PRE_CONV),
        )?;

        let t = &cfg.transformer;
        let tp = format!("{p}.pre_transformer");
        let (hs, qd, kvd) = (
            t.hidden_size,
            t.num_heads * t.head_dim,
            t.num_kv_heads * t.head_dim,
        );
        let mut layers = Vec::with_capacity(t.num_layers);
        for l in 0..t.num_layers {
            let lp = format!("{tp}.layers.{l}");
            layers.push(AttnLayer {
                input_norm: store.vector(&format!("{lp}.input_layernorm.weight"), &[hs])?,
                q: Linear::load(
                    store,
                    &format!("{lp}.self_attn.q_proj"),
                    hs,
                    qd,
                    t.attention_bias,
                    precision,
                )?,
                k: Linear::load(
                    store,
                    &format!("{lp}.self_attn.k_proj"),
                    hs,
                    kvd,
                    t.attention_bias,
                    precision,
                )?,
                v: Linear::load(
                    store,
                    &format!("{lp}.self_attn.v_proj"),
                    hs,
                    kvd,
                    t.attention_bias,
                    precision,
                )?,
                o: Linear::load(
                    store,
                    &format!("{lp}.self_attn.o_proj"),
                    qd,
                    hs,
                    t.attention_bias,
                    precision,
                )?,
                attn_scale: store.vector(&format!("{lp}.self_attn_layer_scale.scale"), &[hs])?,
                post_norm: store.vector(&format!("{lp}.post_attention_layernorm.weight"), &[hs])?,
                gate: Linear::load(
                    store,
                    &format!("{lp}.mlp.gate_proj"),
                    hs,
                    t.intermediate_size,
                    false,
                    precision,
                )?,
                up: Linear::load(
                    store,
                    &format!("{lp}.mlp.up_proj"),
                    hs,
                    t.intermediate_size,
                    false,
                    precision,
                )?,
                down: Linear::load(
                    store,
                    &format!("{lp}.mlp.down_proj"),
                    t.intermediate_size,
                    hs,
                    false,
                    precision,
                )?,
                mlp_scale: store.vector(&format!("{lp}.mlp_layer_scale.scale"), &[hs])?,
            });
        }
        // As the official buffer: exponent, power and reciprocal each rounded
        // to f32 (`1.0 / (base ** (arange(0, d, 2).float() / d))`).
        let inv_freq = (0..t.head_dim / 2)
            .map(|i| {
                let e = (2 * i) as f32 / t.head_dim as f32;
                1.0 / (t.rope_theta.powf(e as f64) as f32)
            })
            .collect();
        let transformer = Transformer {
            input_proj: Linear::load(
                store,
                &format!("{tp}.input_proj"),
                cfg.latent_dim,
                hs,
                true,
                precision,
            )?,
            layers,
            norm: store.vector(&format!("{tp}.norm.weight"), &[hs])?,
            output_proj: Linear::load(
                store,
                &format!("{tp}.output_proj"),
                hs,
                cfg.latent_dim,
                true,
                precision,
            )?,
            attn: AttnShape {
                n_heads: t.num_heads,
                n_kv_heads: t.num_kv_heads,
                head_dim: t.head_dim,
                scale: (t.head_dim as f32).powf(-0.5),
                window: Some(t.sliding_window),
            },
            eps: t.rms_norm_eps,
            inv_freq,
            window: t.sliding_window,
        };

        let ld = cfg.latent_dim;
        let mut upsample = Vec::new();
        for (i, &r) in cfg.upsampling_ratios.iter().enumerate() {
            let up = format!("{p}.upsample.{i}");
            upsample.push(Upsample {
                trans: CausalTransConv::load(
                    store,
                    &format!("{up}.0.conv"),
                    ConvTranspose1dShape {
                        c_in: ld,
                        c_out: ld,
                        kernel: r,
                        stride: r,
                    },
                    precision,
                    None,
                )?,
                convnext: ConvNeXt {
                    dwconv: CausalConv::load(
                        store,
                        &format!("{up}.1.dwconv.conv"),
                        Conv1dShape {
                            c_in: ld,
                            c_out: ld,
                            kernel: CONVNEXT_KERNEL,
                            dilation: 1,
                            groups: ld,
                        },
                        true,
                        precision,
                        None,
                    )?,
                    norm_w: store.vector(&format!("{up}.1.norm.weight"), &[ld])?,
                    norm_b: store.vector(&format!("{up}.1.norm.bias"), &[ld])?,
                    pw1: Linear::load(
                        store,
                        &format!("{up}.1.pwconv1"),
                        ld,
                        4 * ld,
                        true,
                        precision,
                    )?,
                    pw2: Linear::load(
                        store,
                        &format!("{up}.1.pwconv2"),
                        4 * ld,
                        ld,
                        true,
                        precision,
                    )?,
                    gamma: store.vector(&format!("{up}.1.gamma"), &[ld])?,
                },
            });
        }

        let dp = format!("{p}.decoder");
        let conv_in = CausalConv::load(
            store,
            &format!("{dp}.0.conv"),
            Conv1dShape {
                c_in: ld,
                c_out: cfg.decoder_dim,
                kernel: VOCODER_KERNEL,
                dilation: 1,
                groups: 1,
            },
            true,
            precision,
            Some(Code2WavLayers::CONV_IN),
        )?;
        let mut blocks = Vec::new();
        for (i, &rate) in cfg.upsample_rates.iter().enumerate() {
            let (c_in, c_out) = (cfg.decoder_dim >> i, cfg.decoder_dim >> (i + 1));
            let bp = format!("{dp}.{}.block", i + 1);
            let mut units = Vec::new();
            for (u, &dil) in RESIDUAL_DILATIONS.iter().enumerate() {
                let up = format!("{bp}.{}", u + 2);
                units.push(ResidualUnit {
                    act1: Snake::load(store, &format!("{up}.act1"), c_out)?,
                    conv1: CausalConv::load(
                        store,
                        &format!("{up}.conv1.conv"),
                        Conv1dShape {
                            c_in: c_out,
                            c_out,
                            kernel: VOCODER_KERNEL,
                            dilation: dil,
                            groups: 1,
                        },
                        true,
                        precision,
                        Some(Code2WavLayers::conv1(i)),
                    )?,
                    act2: Snake::load(store, &format!("{up}.act2"), c_out)?,
                    conv2: CausalConv::load(
                        store,
                        &format!("{up}.conv2.conv"),
                        Conv1dShape {
                            c_in: c_out,
                            c_out,
                            kernel: 1,
                            dilation: 1,
                            groups: 1,
                        },
                        true,
                        precision,
                        Some(Code2WavLayers::conv2(i)),
                    )?,
                });
            }
            blocks.push(VocoderBlock {
                act: Snake::load(store, &format!("{bp}.0"), c_in)?,
                trans: CausalTransConv::load(
                    store,
                    &format!("{bp}.1.conv"),
                    ConvTranspose1dShape {
                        c_in,
                        c_out,
                        kernel: 2 * rate,
                        stride: rate,
                    },
                    precision,
                    Some(Code2WavLayers::trans(i)),
                )?,
                units,
            });
        }
        let n = cfg.upsample_rates.len();
        let out_dim = cfg.decoder_dim >> n;
        let final_act = Snake::load(store, &format!("{dp}.{}", n + 1), out_dim)?;
        let conv_out = CausalConv::load(
            store,
            &format!("{dp}.{}.conv", n + 2),
            Conv1dShape {
                c_in: out_dim,
                c_out: 1,
                kernel: VOCODER_KERNEL,
                dilation: 1,
                groups: 1,
            },
            true,
            precision,
            Some(Code2WavLayers::CONV_OUT),
        )?;

        Ok(Weights {
            quantizer,
            pre_conv,
            transformer,
            upsample,
            conv_in,
            blocks,
            final_act,
            conv_out,
        })
    }
}
