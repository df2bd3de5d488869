//! Prompt construction: a checked [`Request`] becomes the rows the talker
//! is fed ([`Prompt`]), in the official
//! `Qwen3TTSForConditionalGeneration.generate` layout.
//!
//! Every layout shares the same parts, assembled by [`build`]:
//! 1. the request checks (text, sampler options),
//! 2. the voice: what goes in the speaker slot of the codec prefix
//!    ([`PromptLayout`]),
//! 3. the language id (with the CustomVoice dialect rule),
//! 4. the templated text (and instruction) ids,
//! 5. the rows: optional instruction rows, the role rows `P(ids[:3])`, the
//!    codec prefix `K` on `tts_pad`/`tts_bos`, then the text all up front
//!    or trailing one row per frame ([`Request::text_streaming`]).
//!
//! Only the CustomVoice layout exists today. The Base (voice clone: ICL and
//! x-vector only) and VoiceDesign layouts are new [`PromptLayout`] cases:
//! x-vector puts a speaker-encoder vector in the speaker slot
//! ([`SpeakerSlot`]); ICL adds reference text and reference-code rows in
//! step 5; VoiceDesign has no speaker slot and keeps its instruction rows.

use crate::config::{CodecIds, ModelKind, Speaker, TalkerConfig, TtsConfig};
use crate::error::{ModelError, Result};
use crate::request::{Request, MAX_TEXT_TOKENS};
use crate::talker::Talker;
use crate::tokenizer::{template, TextTokenizer};

pub use crate::talker::Prompt;

/// Which official prompt layout a checkpoint's requests are built in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PromptLayout {
    /// `generate_custom_voice`: one of the checkpoint's named speakers (its
    /// codec id in the speaker slot; its dialect may replace the language),
    /// and an optional style instruction where the size supports one.
    CustomVoice,
}

impl PromptLayout {
    /// The layout of a checkpoint family; None for families not built yet
    /// (Base, VoiceDesign).
    pub fn of(kind: ModelKind) -> Option<Self> {
        match kind {
            ModelKind::CustomVoice => Some(PromptLayout::CustomVoice),
            ModelKind::Base | ModelKind::VoiceDesign => None,
        }
    }
}

/// What fills the speaker slot of the codec prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpeakerSlot {
    /// No speaker row (VoiceDesign).
    Empty,
    /// A codec id: `C(id)` (a CustomVoice speaker).
    Codec(u32),
}

/// The model parts a prompt is built from.
pub struct PromptParts<'a> {
    pub config: &'a TtsConfig,
    pub tokenizer: &'a TextTokenizer,
    pub talker: &'a Talker,
}

/// Checks a request and builds its prompt in the checkpoint's layout (the
/// official `Qwen3TTSForConditionalGeneration.generate` prefill).
pub fn build(m: &PromptParts<'_>, req: &Request) -> Result<Prompt> {
    check_options(req)?;
    let t = &m.config.talker;
    // `Qwen3Tts::load` refuses the families without a layout; this is the
    // CustomVoice one.
    let layout = PromptLayout::of(m.config.kind).unwrap_or(PromptLayout::CustomVoice);
    let speaker = match layout {
        PromptLayout::CustomVoice => custom_voice_speaker(m.config, req)?,
    };
    let language_id = language_id(t, &req.language, speaker)?;
    let slot = speaker.map_or(SpeakerSlot::Empty, |s| SpeakerSlot::Codec(s.id));
    let (input_ids, instruct_ids) = text_ids(m, req)?;
    let codec = codec_prefix(&t.codec, language_id, slot);
    Ok(rows(
        m.talker,
        m.config,
        &codec,
        input_ids,
        instruct_ids,
        req.text_streaming,
    ))
}

/// The checks every layout makes before it looks at the voice.
fn check_options(req: &Request) -> Result<()> {
    if req.text.trim().is_empty() {
        return Err(ModelError::InvalidRequest("text is empty".into()));
    }
    req.options
        .talker
        .validate("talker")
        .map_err(ModelError::InvalidRequest)?;
    req.options
        .code_predictor
        .validate("code predictor")
        .map_err(ModelError::InvalidRequest)?;
    if !(req.options.repetition_penalty.is_finite() && req.options.repetition_penalty > 0.0) {
        return Err(ModelError::InvalidRequest(format!(
            "repetition penalty must be a positive number, got {}",
            req.options.repetition_penalty
        )));
    }
    Ok(())
}

/// The named speaker of a CustomVoice request (case-insensitive); it is
/// required.
fn custom_voice_speaker<'c>(cfg: &'c TtsConfig, req: &Request) -> Result<Option<&'c Speaker>> {
    let t = &cfg.talker;
    let speaker =
        match &req.speaker {
            None => None,
            Some(s) if s.is_empty() => None,
            Some(s) => Some(t.speakers.get(&s.to_lowercase()).ok_or_else(|| {
                ModelError::UnknownSpeaker {
                    name: s.clone(),
                    valid: t.speaker_names(),
                }
            })?),
        };
    if speaker.is_none() && cfg.kind == ModelKind::CustomVoice {
        return Err(ModelError::UnknownSpeaker {
            name: String::new(),
            valid: t.speaker_names(),
        });
    }
    Ok(speaker)
}

/// The codec language id of `language` (a `codec_language_id` key or
/// "auto", case-insensitive; None for auto). A speaker with a dialect
/// speaks it for "chinese" and "auto", as the official code does.
fn language_id(t: &TalkerConfig, language: &str, speaker: Option<&Speaker>) -> Result<Option<u32>> {
    let lang = language.to_lowercase();
    let mut language_id = if lang == "auto" {
        None
    } else {
        Some(
            *t.languages
                .get(&lang)
                .ok_or_else(|| ModelError::UnknownLanguage {
                    name: language.to_string(),
                    valid: t.language_names(),
                })?,
        )
    };
    if lang == "chinese" || lang == "auto" {
        if let Some(d) = speaker.and_then(|s| s.dialect.as_ref()) {
            language_id = t.languages.get(d).copied();
        }
    }
    Ok(language_id)
}

/// The templated text's ids and, where the size supports one, the
/// instruction's, checked against the template and the text vocabulary.
fn text_ids(m: &PromptParts<'_>, req: &Request) -> Result<(Vec<u32>, Option<Vec<u32>>)> {
    let input_ids = m.tokenizer.encode(&template::assistant(&req.text))?;
    if input_ids.len() < 9 {
        return Err(ModelError::Tokenizer(format!(
            "templated text tokenized to {} ids; the chat template alone needs 8 — is tokenizer_config.json missing <|im_start|>/<|im_end|>?",
            input_ids.len()
        )));
    }
    if input_ids.len() > MAX_TEXT_TOKENS {
        return Err(ModelError::InvalidRequest(format!(
            "text is {} tokens; at most {MAX_TEXT_TOKENS} are accepted per request (split it)",
            input_ids.len()
        )));
    }
    let instruct_ids = match &req.instruct {
        Some(s) if !s.is_empty() && m.config.supports_instruct() => {
            Some(m.tokenizer.encode(&template::instruct(s))?)
        }
        _ => None,
    };
    for &id in input_ids.iter().chain(instruct_ids.iter().flatten()) {
        if id as usize >= m.talker.text_vocab_size() {
            return Err(ModelError::Tokenizer(format!(
                "token id {id} is outside text_vocab_size"
            )));
        }
    }
    Ok((input_ids, instruct_ids))
}

/// Codec prefix `K`: think/nothink tags, language, speaker slot, pad, bos.
pub fn codec_prefix(c: &CodecIds, language_id: Option<u32>, speaker: SpeakerSlot) -> Vec<u32> {
    let mut codec: Vec<u32> = match language_id {
        None => vec![c.nothink, c.think_bos, c.think_eos],
        Some(l) => vec![c.think, c.think_bos, l, c.think_eos],
    };
    if let SpeakerSlot::Codec(id) = speaker {
        codec.push(id);
    }
    codec.extend([c.pad, c.bos]);
    codec
}

/// The prefill and trailing rows of a prompt with codec prefix `codec`
/// (CustomVoice; VoiceDesign shares it without a speaker slot).
fn rows(
    talker: &Talker,
    cfg: &TtsConfig,
    codec: &[u32],
    input_ids: Vec<u32>,
    instruct_ids: Option<Vec<u32>>,
    text_streaming: bool,
) -> Prompt {
    let c = &cfg.talker.codec;
    let h = talker.hidden_size();
    let specials = talker.project_text(&[
        cfg.tts_bos_token_id,
        cfg.tts_eos_token_id,
        cfg.tts_pad_token_id,
    ]);
    let (tts_bos, rest) = specials.split_at(h);
    let (tts_eos, tts_pad) = rest.split_at(h);
    let kl = codec.len();

    let mut prefill = Vec::new();
    if let Some(ids) = &instruct_ids {
        prefill.extend(talker.project_text(ids));
    }
    prefill.extend(talker.project_text(&input_ids[..3]));
    // (L-2) x tts_pad + tts_bos, each plus C(K[i]) for i < L-1.
    for (i, &cid) in codec[..kl - 1].iter().enumerate() {
        let mut row = if i < kl - 2 {
            tts_pad.to_vec()
        } else {
            tts_bos.to_vec()
        };
        talker.add_codec_embedding(cid, &mut row);
        prefill.extend(row);
    }
    let text = &input_ids[3..input_ids.len() - 5];
    let trailing = if !text_streaming {
        // All text up front: P(text) ++ P(tts_eos), each + C(pad); then
        // P(tts_pad) + C(bos).
        let mut rows = talker.project_text(text);
        rows.extend_from_slice(tts_eos);
        for row in rows.chunks_exact_mut(h) {
            talker.add_codec_embedding(c.pad, row);
        }
        prefill.extend(rows);
        let mut last = tts_pad.to_vec();
        talker.add_codec_embedding(c.bos, &mut last);
        prefill.extend(last);
        tts_pad.to_vec()
    } else {
        // First text token with C(bos); the rest trail one per frame.
        let mut first = talker.project_text(&text[..1]);
        talker.add_codec_embedding(codec[kl - 1], &mut first);
        prefill.extend(first);
        let mut rows = talker.project_text(&text[1..]);
        rows.extend_from_slice(tts_eos);
        rows
    };
    Prompt {
        hidden: h,
        prefill,
        trailing,
        tts_pad: tts_pad.to_vec(),
        input_ids,
        instruct_ids,
    }
}
