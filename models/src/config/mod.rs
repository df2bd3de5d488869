//! Checkpoint configuration: `config.json`, `generation_config.json` and
//! `speech_tokenizer/config.json`, parsed and validated in one pass so that
//! every later stage can trust the numbers. Errors name the file and key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::Result;

mod codec;
mod json;
mod speaker_encoder;
#[cfg(test)]
mod tests;

/// Re-exported where it was defined before it had a file of its own.
pub use crate::kind::ModelKind;
pub use codec::{CodecConfig, CodecEncoderConfig, CodecTransformerConfig};
pub(crate) use json::read_json;
use json::Obj;
pub use speaker_encoder::SpeakerEncoderConfig;

/// One Qwen3 decoder stack (the talker's or the code predictor's).
#[derive(Clone, Debug, PartialEq)]
pub struct LmConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f64,
    pub max_position_embeddings: usize,
    pub vocab_size: usize,
    /// Per-layer sliding window (None: full causal attention).
    pub layer_windows: Vec<Option<usize>>,
}

impl LmConfig {
    fn parse(o: &Obj<'_>) -> Result<Self> {
        let hidden_size = o.positive("hidden_size")?;
        let num_heads = o.positive("num_attention_heads")?;
        let num_kv_heads = o.usize_or("num_key_value_heads", num_heads)?;
        if num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
            return Err(o.err(
                "num_key_value_heads",
                format!("({num_kv_heads}) must divide num_attention_heads ({num_heads})"),
            ));
        }
        let head_dim = o.usize_or("head_dim", hidden_size / num_heads)?;
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(o.err(
                "head_dim",
                "must be a positive even number (rotary embedding)",
            ));
        }
        let act = o
            .get("hidden_act")
            .and_then(|v| v.as_str())
            .unwrap_or("silu");
        if act != "silu" {
            return Err(o.err(
                "hidden_act",
                format!("is {act:?}; only \"silu\" is implemented"),
            ));
        }
        if o.bool_or("attention_bias", false)? {
            return Err(o.err(
                "attention_bias",
                "is true; the Qwen3 blocks here have no attention bias",
            ));
        }
        let num_layers = o.positive("num_hidden_layers")?;
        let window = if o.bool_or("use_sliding_window", false)? {
            Some(o.positive("sliding_window")?)
        } else {
            None
        };
        let layer_windows = match o.get("layer_types").and_then(|v| v.as_array()) {
            Some(types) => {
                if types.len() != num_layers {
                    return Err(o.err(
                        "layer_types",
                        format!("has {} entries for {num_layers} layers", types.len()),
                    ));
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        Some("full_attention") => Ok(None),
                        Some("sliding_attention") => window.map(Some).ok_or_else(|| {
                            o.err(
                                "layer_types",
                                "names sliding_attention but use_sliding_window is false",
                            )
                        }),
                        _ => Err(o.err("layer_types", format!("has unknown entry {t}"))),
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            None => {
                let max_window_layers = o.usize_or("max_window_layers", 28)?;
                (0..num_layers)
                    .map(|i| if i >= max_window_layers { window } else { None })
                    .collect()
            }
        };
        Ok(LmConfig {
            hidden_size,
            intermediate_size: o.positive("intermediate_size")?,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: o.f64_or("rms_norm_eps", 1e-6)? as f32,
            rope_theta: o.f64_or("rope_theta", 10000.0)?,
            // 0 would leave no room for even the prompt: every request
            // would fail at its first frame instead of the load failing.
            max_position_embeddings: o.positive_or("max_position_embeddings", 32768)?,
            vocab_size: o.positive("vocab_size")?,
            layer_windows,
        })
    }
}

/// What a speaker is: its codec id and, for dialect speakers, the language
/// entry that replaces Chinese/auto.
#[derive(Clone, Debug, PartialEq)]
pub struct Speaker {
    pub id: u32,
    pub dialect: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CodecIds {
    pub pad: u32,
    pub bos: u32,
    pub eos: u32,
    pub think: u32,
    pub nothink: u32,
    pub think_bos: u32,
    pub think_eos: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TalkerConfig {
    pub lm: LmConfig,
    pub text_vocab_size: usize,
    pub text_hidden_size: usize,
    pub num_code_groups: usize,
    pub codec: CodecIds,
    pub speakers: BTreeMap<String, Speaker>,
    pub languages: BTreeMap<String, u32>,
    pub code_predictor: LmConfig,
}

impl TalkerConfig {
    /// Speaker names (lower-case, sorted).
    pub fn speaker_names(&self) -> Vec<String> {
        self.speakers.keys().cloned().collect()
    }

    /// Language names (lower-case, sorted), plus "auto".
    pub fn language_names(&self) -> Vec<String> {
        let mut v: Vec<String> = vec!["auto".into()];
        v.extend(self.languages.keys().cloned());
        v
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct TtsConfig {
    pub path: PathBuf,
    pub kind: ModelKind,
    /// `tts_model_size`, e.g. "0b6" or "1b7".
    pub size: String,
    pub im_start_token_id: u32,
    pub im_end_token_id: u32,
    pub tts_pad_token_id: u32,
    pub tts_bos_token_id: u32,
    pub tts_eos_token_id: u32,
    pub talker: TalkerConfig,
    /// The x-vector encoder: `Some` only for [`ModelKind::Base`], the one
    /// family whose checkpoint has it (the official model builds it only
    /// for base); its `enc_dim` equals the talker hidden size.
    pub speaker_encoder: Option<SpeakerEncoderConfig>,
    /// The checkpoint says its weights are random ([`RANDOM_WEIGHTS_KEY`]
    /// in `config.json`, written by `tts-rt gen-checkpoint`): it makes
    /// noise and seldom ends an utterance on its own.
    pub random_weights: bool,
}

/// The `config.json` key `tts-rt gen-checkpoint` writes into a random-weight
/// checkpoint (an object: what wrote it, the seed, the proxy). The official
/// code and transformers keep unknown keys as attributes and ignore them,
/// so the Hugging Face layout is unchanged.
pub const RANDOM_WEIGHTS_KEY: &str = "tts_rt_random_weights";

impl TtsConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let v = read_json(path)?;
        Self::from_value(path, &v)
    }

    pub fn from_value(path: &Path, v: &Value) -> Result<Self> {
        let root = Obj::root(path, v, "qwen3_tts")?;
        let kind = match root.str("tts_model_type")? {
            "custom_voice" => ModelKind::CustomVoice,
            "voice_design" => ModelKind::VoiceDesign,
            "base" => ModelKind::Base,
            other => {
                return Err(root.err(
                    "tts_model_type",
                    format!("is {other:?}; expected custom_voice, voice_design or base"),
                ))
            }
        };
        let t = root.sub("talker_config")?;
        let lm = LmConfig::parse(&t)?;
        let cp_obj = t.sub("code_predictor_config")?;
        let code_predictor = LmConfig::parse(&cp_obj)?;
        let num_code_groups = t.positive("num_code_groups")?;
        if num_code_groups < 2 {
            return Err(t.err(
                "num_code_groups",
                "must be at least 2 (codebook 0 plus predicted codebooks)",
            ));
        }
        let cp_groups = cp_obj.usize_or("num_code_groups", num_code_groups)?;
        if cp_groups != num_code_groups {
            return Err(cp_obj.err(
                "num_code_groups",
                format!(
                    "({cp_groups}) differs from talker_config.num_code_groups ({num_code_groups})"
                ),
            ));
        }
        let codec = CodecIds {
            pad: t.u32("codec_pad_id")?,
            bos: t.u32("codec_bos_id")?,
            eos: t.u32("codec_eos_token_id")?,
            think: t.u32("codec_think_id")?,
            nothink: t.u32("codec_nothink_id")?,
            think_bos: t.u32("codec_think_bos_id")?,
            think_eos: t.u32("codec_think_eos_id")?,
        };
        let languages = t.id_map("codec_language_id")?;
        let spk_ids = t.id_map("spk_id")?;
        let dialects = t.get("spk_is_dialect").and_then(|d| d.as_object());
        let mut speakers = BTreeMap::new();
        for (name, id) in spk_ids {
            let dialect = match dialects
                .and_then(|d| d.iter().find(|(k, _)| k.to_lowercase() == name))
                .map(|(_, v)| v)
            {
                None | Some(Value::Bool(false)) | Some(Value::Null) => None,
                Some(Value::String(s)) => {
                    let s = s.to_lowercase();
                    if !languages.contains_key(&s) {
                        return Err(t.err(
                            &format!("spk_is_dialect.{name}"),
                            format!("names {s:?}, which is not in codec_language_id"),
                        ));
                    }
                    Some(s)
                }
                Some(other) => {
                    return Err(t.err(
                        &format!("spk_is_dialect.{name}"),
                        format!("must be false or a language name, found {other}"),
                    ))
                }
            };
            speakers.insert(name, Speaker { id, dialect });
        }
        let talker = TalkerConfig {
            text_vocab_size: t.positive("text_vocab_size")?,
            text_hidden_size: t.positive("text_hidden_size")?,
            num_code_groups,
            codec,
            speakers,
            languages,
            code_predictor,
            lm,
        };
        let mut cfg = TtsConfig {
            path: path.into(),
            kind,
            size: root
                .get("tts_model_size")
                .and_then(|s| s.as_str())
                .unwrap_or("")
                .to_string(),
            im_start_token_id: root.u32("im_start_token_id")?,
            im_end_token_id: root.u32("im_end_token_id")?,
            tts_pad_token_id: root.u32("tts_pad_token_id")?,
            tts_bos_token_id: root.u32("tts_bos_token_id")?,
            tts_eos_token_id: root.u32("tts_eos_token_id")?,
            talker,
            speaker_encoder: None,
            random_weights: root.get(RANDOM_WEIGHTS_KEY).is_some(),
        };
        cfg.validate(&root, &t)?;
        if kind == ModelKind::Base {
            cfg.speaker_encoder = Some(Self::speaker_encoder(&root, &cfg.talker)?);
        }
        Ok(cfg)
    }

    /// The Base speaker encoder's config: `speaker_encoder_config`, or the
    /// official class defaults when the key is absent.
    fn speaker_encoder(root: &Obj<'_>, talker: &TalkerConfig) -> Result<SpeakerEncoderConfig> {
        const KEY: &str = "speaker_encoder_config";
        let cfg = match root.get(KEY) {
            None => SpeakerEncoderConfig::default(),
            Some(_) => SpeakerEncoderConfig::parse(&root.sub(KEY)?)?,
        };
        let hidden = talker.lm.hidden_size;
        if cfg.enc_dim != hidden {
            return Err(root.err(
                &format!("{KEY}.enc_dim"),
                format!(
                    "({}) differs from talker_config.hidden_size ({hidden}); the x-vector fills a talker embedding row",
                    cfg.enc_dim
                ),
            ));
        }
        Ok(cfg)
    }

    fn validate(&self, root: &Obj<'_>, t: &Obj<'_>) -> Result<()> {
        let tv = self.talker.text_vocab_size as u32;
        for (key, id) in [
            ("im_start_token_id", self.im_start_token_id),
            ("im_end_token_id", self.im_end_token_id),
            ("tts_pad_token_id", self.tts_pad_token_id),
            ("tts_bos_token_id", self.tts_bos_token_id),
            ("tts_eos_token_id", self.tts_eos_token_id),
        ] {
            if id >= tv {
                return Err(root.err(key, format!("({id}) is outside the text vocabulary ({tv})")));
            }
        }
        let v = self.talker.lm.vocab_size as u32;
        let c = &self.talker.codec;
        for (key, id) in [
            ("codec_pad_id", c.pad),
            ("codec_bos_id", c.bos),
            ("codec_eos_token_id", c.eos),
            ("codec_think_id", c.think),
            ("codec_nothink_id", c.nothink),
            ("codec_think_bos_id", c.think_bos),
            ("codec_think_eos_id", c.think_eos),
        ] {
            if id >= v {
                return Err(t.err(key, format!("({id}) is outside the codec vocabulary ({v})")));
            }
        }
        if self.kind == ModelKind::CustomVoice && self.talker.speakers.is_empty() {
            // Every CustomVoice request names a preset speaker: without one
            // the checkpoint would load and then refuse every request.
            return Err(t.err(
                "spk_id",
                "names no speakers; a CustomVoice checkpoint needs at least one (name -> codec id)",
            ));
        }
        for (name, s) in &self.talker.speakers {
            if s.id >= v {
                return Err(t.err(
                    &format!("spk_id.{name}"),
                    format!("({}) is outside the codec vocabulary ({v})", s.id),
                ));
            }
        }
        for (name, &id) in &self.talker.languages {
            if id >= v {
                return Err(t.err(
                    &format!("codec_language_id.{name}"),
                    format!("({id}) is outside the codec vocabulary ({v})"),
                ));
            }
        }
        if self.talker.lm.vocab_size < 1024 {
            // The official suppression range is the top 1024 ids (see sampling).
            return Err(t.err("vocab_size", "must be at least 1024"));
        }
        Ok(())
    }

    /// Whether the checkpoint uses instruct text (the official code ignores it
    /// for the 0.6B size: `tts_model_size in "0b6"`).
    pub fn supports_instruct(&self) -> bool {
        let s = self.size.as_str();
        !(s.is_empty() || "0b6".contains(s))
    }
}

/// `max_new_tokens`: at least 2, because a request generates
/// `max_new_tokens - 1` frames (the last token is the end of speech); 0 or 1
/// would make every request silent.
fn max_new_tokens(o: &Obj<'_>, default: usize) -> Result<usize> {
    let n = o.usize_or("max_new_tokens", default)?;
    if n < 2 {
        return Err(o.err(
            "max_new_tokens",
            format!("({n}) must be at least 2: requests generate max_new_tokens - 1 frames"),
        ));
    }
    Ok(n)
}

/// `generation_config.json`: the official sampling defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationConfig {
    pub do_sample: bool,
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub repetition_penalty: f32,
    pub subtalker_do_sample: bool,
    pub subtalker_temperature: f32,
    pub subtalker_top_k: usize,
    pub subtalker_top_p: f32,
    pub max_new_tokens: usize,
}

impl Default for GenerationConfig {
    /// The official hard defaults (`_merge_generate_kwargs`).
    fn default() -> Self {
        GenerationConfig {
            do_sample: true,
            temperature: 0.9,
            top_k: 50,
            top_p: 1.0,
            repetition_penalty: 1.05,
            subtalker_do_sample: true,
            subtalker_temperature: 0.9,
            subtalker_top_k: 50,
            subtalker_top_p: 1.0,
            max_new_tokens: 2048,
        }
    }
}

impl GenerationConfig {
    /// Reads the file if present; missing keys keep the official defaults.
    pub fn load(path: &Path) -> Result<Self> {
        let d = Self::default();
        if !path.exists() {
            return Ok(d);
        }
        let v = read_json(path)?;
        let o = Obj {
            file: path,
            prefix: String::new(),
            v: &v,
        };
        Ok(GenerationConfig {
            do_sample: o.bool_or("do_sample", d.do_sample)?,
            temperature: o.f64_or("temperature", d.temperature as f64)? as f32,
            top_k: o.usize_or("top_k", d.top_k)?,
            top_p: o.f64_or("top_p", d.top_p as f64)? as f32,
            repetition_penalty: o.f64_or("repetition_penalty", d.repetition_penalty as f64)? as f32,
            subtalker_do_sample: o.bool_or("subtalker_dosample", d.subtalker_do_sample)?,
            subtalker_temperature: o
                .f64_or("subtalker_temperature", d.subtalker_temperature as f64)?
                as f32,
            subtalker_top_k: o.usize_or("subtalker_top_k", d.subtalker_top_k)?,
            subtalker_top_p: o.f64_or("subtalker_top_p", d.subtalker_top_p as f64)? as f32,
            max_new_tokens: max_new_tokens(&o, d.max_new_tokens)?,
        })
    }
}
