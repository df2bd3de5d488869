//! `speech_tokenizer/config.json`: the decoder part code2wav needs
//! ([`CodecConfig`]) and the Mimi `encoder_config` the reference-audio
//! encoder needs ([`CodecEncoderConfig`]), parsed separately so a
//! checkpoint that only synthesizes never depends on its encoder section.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::json::{read_json, Obj};
use crate::error::Result;

/// The codec decoder's sliding-window transformer (`pre_transformer`).
#[derive(Clone, Debug, PartialEq)]
pub struct CodecTransformerConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    /// `head_dim` if the file gives it (the real checkpoint does: 64 with
    /// hidden 512 and 16 heads, so q_proj is 512 -> 1024), else
    /// `hidden_size / num_heads`, as the official attention's
    /// `getattr(config, "head_dim", ...)`.
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f64,
    /// Informational: the official rotary embedding has no length limit and
    /// neither has ours (positions keep counting in a stream).
    pub max_position_embeddings: usize,
    pub attention_bias: bool,
    /// A query at position `p` sees keys `p - sliding_window + 1 ..= p`.
    pub sliding_window: usize,
    /// Only the initial value of the trained LayerScale vectors; the
    /// checkpoint's `*_layer_scale.scale` tensors are what the forward uses.
    pub layer_scale_initial_scale: f32,
}

/// `speech_tokenizer/config.json`, the parts code2wav needs. Defaults are the
/// official `Qwen3TTSTokenizerV2Config` / `Qwen3TTSTokenizerV2DecoderConfig`
/// defaults, so a file that omits a key means what it means to the official
/// code. The Mimi `encoder_config` is [`CodecEncoderConfig`]'s business
/// (synthesis never encodes, so loading code2wav does not read it).
#[derive(Clone, Debug, PartialEq)]
pub struct CodecConfig {
    pub path: PathBuf,
    pub output_sample_rate: u32,
    /// Samples per codec frame (`decode_upsample_rate`; checked equal to the
    /// product of `upsample_rates` and `upsampling_ratios`, which is what the
    /// official `chunked_decode` trims by).
    pub samples_per_frame: usize,
    pub codebook_size: usize,
    /// `codebook_dim`: width of the dequantized latent (output of the split
    /// RVQ's `output_proj`s, input of `pre_conv`). Not a declared parameter of
    /// the official config class, so it has no default there: required.
    pub codebook_dim: usize,
    /// Width of one codebook entry: `codebook_dim / 2` (the official
    /// `SplitResidualVectorQuantizer(dimension=codebook_dim // 2)`). The
    /// file's `vector_quantization_hidden_dimension` is not read by the
    /// official decoder and is ignored here too.
    pub codebook_vector_dim: usize,
    pub num_quantizers: usize,
    /// Always 1: the official decoder hard-codes `n_q_semantic=1` whatever
    /// the file's `num_semantic_quantizers` says.
    pub num_semantic_quantizers: usize,
    pub latent_dim: usize,
    pub decoder_dim: usize,
    pub transformer: CodecTransformerConfig,
    /// Strides of the vocoder blocks (`decoder.decoder.1..`), each a
    /// transposed conv with kernel `2 * rate`.
    pub upsample_rates: Vec<usize>,
    /// Strides of the `decoder.upsample.*` transposed convs (kernel = stride).
    pub upsampling_ratios: Vec<usize>,
}

impl CodecConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let v = read_json(path)?;
        Self::from_value(path, &v)
    }

    pub fn from_value(path: &Path, v: &Value) -> Result<Self> {
        let root = Obj::root(path, v, "qwen3_tts_tokenizer_12hz")?;
        let d = root.sub_or_empty("decoder_config")?;
        let nonzero = |key: &str, default: usize| d.positive_or(key, default);

        let hidden_size = nonzero("hidden_size", 1024)?;
        let num_heads = nonzero("num_attention_heads", 16)?;
        let num_kv_heads = nonzero("num_key_value_heads", 16)?;
        if num_heads % num_kv_heads != 0 {
            return Err(d.err(
                "num_key_value_heads",
                format!("({num_kv_heads}) must divide num_attention_heads ({num_heads})"),
            ));
        }
        let head_dim = d.usize_or("head_dim", hidden_size / num_heads)?;
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(d.err(
                "head_dim",
                format!("({head_dim}) must be a positive even number (rotary embedding)"),
            ));
        }
        let act = match d.get("hidden_act") {
            None => "silu",
            Some(_) => d.str("hidden_act")?,
        };
        if act != "silu" {
            return Err(d.err(
                "hidden_act",
                format!("is {act:?}; only \"silu\" is implemented"),
            ));
        }
        plain_rope(&d)?;
        let transformer = CodecTransformerConfig {
            hidden_size,
            intermediate_size: nonzero("intermediate_size", 3072)?,
            num_layers: d.usize_or("num_hidden_layers", 8)?,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: d.f64_or("rms_norm_eps", 1e-5)? as f32,
            rope_theta: d.f64_or("rope_theta", 10000.0)?,
            max_position_embeddings: d.positive_or("max_position_embeddings", 8000)?,
            attention_bias: d.bool_or("attention_bias", false)?,
            sliding_window: nonzero("sliding_window", 72)?,
            layer_scale_initial_scale: d.f64_or("layer_scale_initial_scale", 0.01)? as f32,
        };

        let list_or = |key: &str, default: &[usize]| -> Result<Vec<usize>> {
            let l = if d.get(key).is_some() {
                d.usize_list(key)?
            } else {
                default.to_vec()
            };
            if l.contains(&0) {
                return Err(d.err(key, "must not contain 0"));
            }
            Ok(l)
        };
        let upsample_rates = list_or("upsample_rates", &[8, 5, 4, 3])?;
        let upsampling_ratios = list_or("upsampling_ratios", &[2, 2])?;
        let samples_per_frame = root.usize_or("decode_upsample_rate", 1920)?;
        let product: usize = upsample_rates.iter().chain(&upsampling_ratios).product();
        if product != samples_per_frame {
            return Err(root.err(
                "decode_upsample_rate",
                format!("({samples_per_frame}) must equal the product of decoder upsample_rates and upsampling_ratios ({product})"),
            ));
        }
        let decoder_dim = nonzero("decoder_dim", 1536)?;
        if decoder_dim >> upsample_rates.len() == 0 {
            return Err(d.err(
                "decoder_dim",
                format!(
                    "({decoder_dim}) is halved by each of the {} vocoder blocks and reaches 0",
                    upsample_rates.len()
                ),
            ));
        }
        let codebook_dim = d.usize("codebook_dim")?;
        if codebook_dim < 2 {
            return Err(d.err(
                "codebook_dim",
                "must be at least 2 (codebooks are codebook_dim / 2 wide)",
            ));
        }
        let num_quantizers = nonzero("num_quantizers", 16)?;
        if num_quantizers < 2 {
            return Err(d.err(
                "num_quantizers",
                "must be at least 2 (one semantic quantizer plus acoustic ones)",
            ));
        }
        let sr = root.usize_or("output_sample_rate", 24000)?;
        Ok(CodecConfig {
            path: path.into(),
            output_sample_rate: u32::try_from(sr)
                .map_err(|_| root.err("output_sample_rate", "is too large"))?,
            samples_per_frame,
            codebook_size: nonzero("codebook_size", 2048)?,
            codebook_dim,
            codebook_vector_dim: codebook_dim / 2,
            num_quantizers,
            num_semantic_quantizers: 1,
            latent_dim: nonzero("latent_dim", 1024)?,
            decoder_dim,
            transformer,
            upsample_rates,
            upsampling_ratios,
        })
    }

    /// Codec frames per second (12.5 for the 12Hz tokenizer).
    pub fn frame_rate(&self) -> f64 {
        self.output_sample_rate as f64 / self.samples_per_frame as f64
    }
}

/// The speech tokenizer's encoder (`encoder_config`, a transformers
/// `MimiConfig`, plus the top-level `encoder_valid_num_quantizers` and
/// `encode_downsample_rate`): audio at `sample_rate` in, `valid_quantizers`
/// codes per `samples_per_frame` samples out. Defaults are `MimiConfig`'s,
/// so a missing key means what it means to the official code. Values the
/// encoder graph here does not implement (non-causal or non-zero-padded
/// convs, conv shortcuts, another activation, streaming mode) are refused
/// by name.
#[derive(Clone, Debug, PartialEq)]
pub struct CodecEncoderConfig {
    pub path: PathBuf,
    /// `sampling_rate`: the rate the encoder expects its input at.
    pub sample_rate: u32,
    /// `num_filters`: channels after the first SEANet conv; doubled by each
    /// downsampling block.
    pub num_filters: usize,
    /// SEANet downsampling strides in encoder order: `upsampling_ratios`
    /// reversed (`[4, 5, 6, 8]` for `[8, 6, 5, 4]`).
    pub ratios: Vec<usize>,
    pub kernel_size: usize,
    pub last_kernel_size: usize,
    pub residual_kernel_size: usize,
    pub num_residual_layers: usize,
    /// ResBlock `j`'s first conv has dilation `dilation_growth_rate^j`.
    pub dilation_growth_rate: usize,
    /// ResBlock bottleneck: `dim / compress` channels.
    pub compress: usize,
    /// Samples per SEANet output column (product of `ratios`; 960 = 25 Hz).
    pub hop: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub intermediate_size: usize,
    pub norm_eps: f32,
    pub rope_theta: f64,
    /// Whether q/k/v/o carry a bias (`attention_bias`, false in the hub file).
    pub attention_bias: bool,
    /// `sliding_window` as the file says; informational only: the official
    /// encoder attends over the whole clip (full causal mask), and so does
    /// this one.
    pub sliding_window: usize,
    /// The replicate-padded downsample from the SEANet rate to the code
    /// rate: kernel `2 * encodec_frame_rate / frame_rate` (4), stride 2.
    pub downsample_kernel: usize,
    pub downsample_stride: usize,
    pub codebook_size: usize,
    /// Width of one codebook entry (`codebook_dim`).
    pub codebook_dim: usize,
    /// `vector_quantization_hidden_dimension`: the quantizers' input
    /// projections map `hidden_size` to this; `None` when the two are equal
    /// (the official code then builds no `input_proj`).
    pub quantizer_proj_dim: Option<usize>,
    /// Quantizers the checkpoint holds (`num_quantizers`, 32: 1 semantic +
    /// 31 acoustic).
    pub total_quantizers: usize,
    pub num_semantic_quantizers: usize,
    /// `encoder_valid_num_quantizers`: codes kept per frame (16); only this
    /// many quantizers are run.
    pub valid_quantizers: usize,
    /// `encode_downsample_rate`: samples per code frame (1920), checked equal
    /// to `hop * downsample_stride`.
    pub samples_per_frame: usize,
}

impl CodecEncoderConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let v = read_json(path)?;
        Self::from_value(path, &v)
    }

    pub fn from_value(path: &Path, v: &Value) -> Result<Self> {
        let root = Obj::root(path, v, "qwen3_tts_tokenizer_12hz")?;
        let e = root.sub_or_empty("encoder_config")?;
        let nonzero = |key: &str, default: usize| e.positive_or(key, default);
        let must = |key: &str, default: bool, want: bool, why: &str| -> Result<()> {
            if e.bool_or(key, default)? != want {
                return Err(e.err(key, format!("is {}; {why}", !want)));
            }
            Ok(())
        };
        must(
            "use_causal_conv",
            true,
            true,
            "only the causal SEANet encoder is implemented",
        )?;
        must(
            "use_conv_shortcut",
            false,
            false,
            "only identity ResBlock shortcuts are implemented",
        )?;
        must(
            "use_streaming",
            false,
            false,
            "the encoder runs whole clips (streaming padding caches are not implemented)",
        )?;
        let str_or = |key: &str, default: &'static str| -> Result<String> {
            Ok(match e.get(key) {
                None => default.into(),
                Some(_) => e.str(key)?.into(),
            })
        };
        let pad_mode = str_or("pad_mode", "constant")?;
        if pad_mode != "constant" {
            return Err(e.err(
                "pad_mode",
                format!("is {pad_mode:?}; only \"constant\" (zero) SEANet padding is implemented"),
            ));
        }
        let act = str_or("hidden_act", "gelu")?;
        if act != "gelu" {
            return Err(e.err(
                "hidden_act",
                format!("is {act:?}; only \"gelu\" (exact erf GELU) is implemented"),
            ));
        }
        plain_rope(&e)?;
        let audio_channels = nonzero("audio_channels", 1)?;
        if audio_channels != 1 {
            return Err(e.err(
                "audio_channels",
                format!("is {audio_channels}; only mono (1) input is implemented"),
            ));
        }

        let upsampling_ratios = if e.get("upsampling_ratios").is_some() {
            e.usize_list("upsampling_ratios")?
        } else {
            vec![8, 6, 5, 4]
        };
        if upsampling_ratios.is_empty() || upsampling_ratios.contains(&0) {
            return Err(e.err(
                "upsampling_ratios",
                "must be a non-empty list of positive strides",
            ));
        }
        let ratios: Vec<usize> = upsampling_ratios.iter().rev().copied().collect();
        let hop: usize = ratios.iter().product();
        let num_filters = nonzero("num_filters", 64)?;
        let compress = nonzero("compress", 2)?;
        if num_filters / compress == 0 {
            return Err(e.err(
                "compress",
                format!("({compress}) leaves no ResBlock channels of num_filters ({num_filters})"),
            ));
        }
        let num_residual_layers = e.usize_or("num_residual_layers", 1)?;
        let dilation_growth_rate = nonzero("dilation_growth_rate", 2)?;
        if num_residual_layers > 1
            && dilation_growth_rate
                .checked_pow(num_residual_layers as u32 - 1)
                .is_none()
        {
            return Err(e.err("dilation_growth_rate", "overflows over the residual layers"));
        }

        let hidden_size = nonzero("hidden_size", 512)?;
        let num_heads = nonzero("num_attention_heads", 8)?;
        let num_kv_heads = nonzero("num_key_value_heads", 8)?;
        if num_kv_heads > num_heads || num_heads % num_kv_heads != 0 {
            return Err(e.err(
                "num_key_value_heads",
                format!("({num_kv_heads}) must divide num_attention_heads ({num_heads})"),
            ));
        }
        let head_dim = e.usize_or("head_dim", hidden_size / num_heads)?;
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(e.err(
                "head_dim",
                format!("({head_dim}) must be a positive even number (rotary embedding)"),
            ));
        }

        // `MimiConfig.frame_rate`: `_frame_rate` (what `save_pretrained`
        // writes; as a leftover kwarg it overrides the argument), else
        // `frame_rate`, else the SEANet rate (`encodec_frame_rate =
        // ceil(sampling_rate / hop)`), which means no downsample at all.
        let sr = nonzero("sampling_rate", 24000)?;
        let sample_rate = u32::try_from(sr).map_err(|_| e.err("sampling_rate", "is too large"))?;
        let encodec_rate = sr.div_ceil(hop);
        let fr_key = if e.get("_frame_rate").is_some() {
            "_frame_rate"
        } else {
            "frame_rate"
        };
        let frame_rate = e.f64_or(fr_key, encodec_rate as f64)?;
        if frame_rate.is_nan() || frame_rate <= 0.0 || frame_rate == encodec_rate as f64 {
            return Err(e.err(
                fr_key,
                format!(
                    "({frame_rate}) must be positive and below the SEANet rate ({encodec_rate} Hz): only the downsampled (12.5 Hz) tokenizer is implemented"
                ),
            ));
        }
        // `kernel_size=2 * int(encodec_frame_rate / frame_rate), stride=2`.
        let factor = (encodec_rate as f64 / frame_rate) as usize;
        if factor == 0 {
            return Err(e.err(
                fr_key,
                format!("({frame_rate}) is above the SEANet rate ({encodec_rate} Hz)"),
            ));
        }
        let downsample_stride = 2;
        let samples_per_frame = root.usize_or("encode_downsample_rate", 1920)?;
        if samples_per_frame != hop * downsample_stride {
            return Err(root.err(
                "encode_downsample_rate",
                format!(
                    "({samples_per_frame}) must equal the encoder's hop ({hop} samples per SEANet frame, the product of encoder_config.upsampling_ratios) times the downsample stride ({downsample_stride})"
                ),
            ));
        }

        let codebook_size = nonzero("codebook_size", 2048)?;
        if !codebook_size.is_power_of_two() {
            return Err(e.err(
                "codebook_size",
                format!("({codebook_size}) must be a power of 2"),
            ));
        }
        let codebook_dim = nonzero("codebook_dim", 256)?;
        let vq_dim = nonzero("vector_quantization_hidden_dimension", 256)?;
        if codebook_dim != vq_dim {
            return Err(e.err(
                "codebook_dim",
                format!(
                    "({codebook_dim}) must equal vector_quantization_hidden_dimension ({vq_dim}): the codebooks quantize the projected input"
                ),
            ));
        }
        let num_quantizers = nonzero("num_quantizers", 32)?;
        let num_semantic_quantizers = e.usize_or("num_semantic_quantizers", 1)?;
        if num_semantic_quantizers >= num_quantizers {
            return Err(e.err(
                "num_semantic_quantizers",
                format!(
                    "({num_semantic_quantizers}) must be below num_quantizers ({num_quantizers})"
                ),
            ));
        }
        let valid_quantizers = root.usize_or("encoder_valid_num_quantizers", 16)?;
        if valid_quantizers == 0 || valid_quantizers > num_quantizers {
            return Err(root.err(
                "encoder_valid_num_quantizers",
                format!("({valid_quantizers}) must be in 1..={num_quantizers} (encoder_config.num_quantizers)"),
            ));
        }

        Ok(CodecEncoderConfig {
            path: path.into(),
            sample_rate,
            num_filters,
            ratios,
            kernel_size: nonzero("kernel_size", 7)?,
            last_kernel_size: nonzero("last_kernel_size", 3)?,
            residual_kernel_size: nonzero("residual_kernel_size", 3)?,
            num_residual_layers,
            dilation_growth_rate,
            compress,
            hop,
            hidden_size,
            num_layers: e.usize_or("num_hidden_layers", 8)?,
            num_heads,
            num_kv_heads,
            head_dim,
            intermediate_size: nonzero("intermediate_size", 2048)?,
            norm_eps: e.f64_or("norm_eps", 1e-5)? as f32,
            rope_theta: e.f64_or("rope_theta", 10000.0)?,
            attention_bias: e.bool_or("attention_bias", false)?,
            sliding_window: e.usize_or("sliding_window", 250)?,
            downsample_kernel: 2 * factor,
            downsample_stride,
            codebook_size,
            codebook_dim,
            quantizer_proj_dim: (vq_dim != hidden_size).then_some(vq_dim),
            total_quantizers: num_quantizers,
            num_semantic_quantizers,
            valid_quantizers,
            samples_per_frame,
        })
    }

    /// SEANet channels entering downsampling block `i` (`num_filters * 2^i`);
    /// `i = ratios.len()` is the width of the last SEANet conv's input.
    pub fn seanet_channels(&self, i: usize) -> usize {
        self.num_filters << i
    }

    /// Code frames per second (12.5).
    pub fn frame_rate(&self) -> f64 {
        self.sample_rate as f64 / self.samples_per_frame as f64
    }
}

/// Refuses a `rope_scaling` other than plain RoPE (both transformers of the
/// speech tokenizer implement only that).
fn plain_rope(o: &Obj<'_>) -> Result<()> {
    if let Some(rs) = o.get("rope_scaling") {
        let ty = rs
            .get("rope_type")
            .or_else(|| rs.get("type"))
            .and_then(|t| t.as_str())
            .unwrap_or("default");
        if ty != "default" {
            return Err(o.err(
                "rope_scaling",
                format!("has rope_type {ty:?}; only plain (default) RoPE is implemented"),
            ));
        }
    }
    Ok(())
}
