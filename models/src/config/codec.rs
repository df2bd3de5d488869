//! `speech_tokenizer/config.json`: the parts code2wav needs.

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
/// code. The Mimi `encoder_config` is not parsed (synthesis never encodes).
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
        let empty = Value::Object(Default::default());
        let d = match root.get("decoder_config") {
            None => Obj {
                file: path,
                prefix: "decoder_config.".into(),
                v: &empty,
            },
            Some(_) => root.sub("decoder_config")?,
        };
        let nonzero = |key: &str, default: usize| -> Result<usize> {
            let x = d.usize_or(key, default)?;
            if x == 0 {
                return Err(d.err(key, "must be positive"));
            }
            Ok(x)
        };

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
        if let Some(rs) = d.get("rope_scaling") {
            let ty = rs
                .get("rope_type")
                .or_else(|| rs.get("type"))
                .and_then(|t| t.as_str())
                .unwrap_or("default");
            if ty != "default" {
                return Err(d.err(
                    "rope_scaling",
                    format!("has rope_type {ty:?}; only plain (default) RoPE is implemented"),
                ));
            }
        }
        let transformer = CodecTransformerConfig {
            hidden_size,
            intermediate_size: nonzero("intermediate_size", 3072)?,
            num_layers: d.usize_or("num_hidden_layers", 8)?,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: d.f64_or("rms_norm_eps", 1e-5)? as f32,
            rope_theta: d.f64_or("rope_theta", 10000.0)?,
            max_position_embeddings: d.usize_or("max_position_embeddings", 8000)?,
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
