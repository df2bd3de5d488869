//! Qwen2 byte-level BPE text tokenizer and the official chat templates.
//!
//! Built from `vocab.json` + `merges.txt` + the added tokens of
//! `tokenizer_config.json`, the way `Qwen2TokenizerFast` is built when no
//! `tokenizer.json` ships: NFC normaliser, the standard Qwen2 split regex,
//! byte-level mapping, BPE without unknown token. The regex is the one the
//! official code gets when it loads by hub id (a transformers quirk swaps it
//! for a "fixed Mistral" regex on some local directories; we do not copy that).

use std::collections::HashMap;
use std::path::Path;

use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use crate::checkpoint::read_text;
use crate::config::read_json;
use crate::error::{ModelError, Result};

/// The standard Qwen2 pre-tokenizer pattern.
pub const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

pub struct TextTokenizer {
    inner: Tokenizer,
    vocab_size: usize,
}

impl TextTokenizer {
    /// Loads from a checkpoint directory.
    pub fn load(dir: &Path) -> Result<Self> {
        let vocab_path = dir.join("vocab.json");
        let merges_path = dir.join("merges.txt");
        let config_path = dir.join("tokenizer_config.json");
        let bad = |p: &Path, m: String| ModelError::Config {
            path: p.to_path_buf(),
            message: m,
        };

        let vocab_json = read_json(&vocab_path)?;
        let vocab_obj = vocab_json
            .as_object()
            .ok_or_else(|| bad(&vocab_path, "must be an object token -> id".into()))?;
        let mut vocab: HashMap<String, u32> = HashMap::with_capacity(vocab_obj.len() + 64);
        for (tok, id) in vocab_obj {
            let id = id
                .as_u64()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| bad(&vocab_path, format!("id of {tok:?} is not an integer")))?;
            vocab.insert(tok.clone(), id);
        }

        let merges_text = read_text(&merges_path)?;
        let mut merges = Vec::new();
        for (i, line) in merges_text.lines().enumerate() {
            if line.starts_with("#version") || line.trim().is_empty() {
                continue;
            }
            let mut parts = line.split(' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(a), Some(b), None) => merges.push((a.to_string(), b.to_string())),
                _ => {
                    return Err(bad(
                        &merges_path,
                        format!("line {} is not a merge `a b`: {line:?}", i + 1),
                    ))
                }
            }
        }

        // Added tokens keep their configured ids: put them into the BPE
        // vocabulary first (ids may have gaps, which sequential assignment
        // by `add_tokens` would not reproduce).
        let mut added = Vec::new();
        if config_path.exists() {
            let cfg = read_json(&config_path)?;
            if let Some(dec) = cfg.get("added_tokens_decoder").and_then(|d| d.as_object()) {
                for (id, t) in dec {
                    let id: u32 = id.parse().map_err(|_| {
                        bad(
                            &config_path,
                            format!("added_tokens_decoder key {id:?} is not an id"),
                        )
                    })?;
                    let content = t.get("content").and_then(|c| c.as_str()).ok_or_else(|| {
                        bad(
                            &config_path,
                            format!("added_tokens_decoder.{id}.content is missing"),
                        )
                    })?;
                    let flag = |k: &str, d: bool| t.get(k).and_then(|v| v.as_bool()).unwrap_or(d);
                    let special = flag("special", false);
                    if let Some(&existing) = vocab.get(content) {
                        if existing != id {
                            return Err(bad(&config_path, format!("added token {content:?} has id {id} but vocab.json gives {existing}")));
                        }
                    }
                    vocab.insert(content.to_string(), id);
                    let tok = AddedToken::from(content.to_string(), special)
                        .lstrip(flag("lstrip", false))
                        .rstrip(flag("rstrip", false))
                        .single_word(flag("single_word", false))
                        .normalized(flag("normalized", !special));
                    added.push((id, tok));
                }
            }
        }
        added.sort_by_key(|(id, _)| *id);
        let vocab_size = vocab.values().map(|&v| v as usize + 1).max().unwrap_or(0);

        let bpe = BPE::builder()
            .vocab_and_merges(
                vocab
                    .into_iter()
                    .collect::<tokenizers::models::bpe::Vocab>(),
                merges,
            )
            .build()
            .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", merges_path.display())))?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_normalizer(Some(NFC));
        let split = Split::new(
            SplitPattern::Regex(QWEN2_PATTERN.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| ModelError::Tokenizer(format!("pre-tokenizer regex: {e}")))?;
        inner.with_pre_tokenizer(Some(Sequence::new(vec![
            split.into(),
            ByteLevel::new(false, false, false).into(),
        ])));
        inner.with_decoder(Some(ByteLevel::default()));
        let (special, normal): (Vec<_>, Vec<_>) =
            added.into_iter().map(|(_, t)| t).partition(|t| t.special);
        inner.add_special_tokens(&special);
        inner.add_tokens(&normal);
        Ok(TextTokenizer { inner, vocab_size })
    }

    /// Token ids of `text`, no special tokens added (added-token literals in
    /// the text are matched, as the official processor does).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))
    }

    /// One past the largest id the tokenizer can produce.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}

/// The official chat templates (`Qwen3TTSModel._build_*_text`).
pub mod template {
    /// The text to speak.
    pub fn assistant(text: &str) -> String {
        format!("<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")
    }
    /// A style instruction (1.7B CustomVoice, VoiceDesign).
    pub fn instruct(instruct: &str) -> String {
        format!("<|im_start|>user\n{instruct}<|im_end|>\n")
    }
    /// Reference text for voice cloning.
    pub fn reference(text: &str) -> String {
        format!("<|im_start|>assistant\n{text}<|im_end|>\n")
    }
}
