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
use crate::request::{language_name, Request, MAX_TEXT_TOKENS};
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
        return Err(ModelError::EmptyText);
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
    let lang = language_name(&t.language_names(), language)?;
    // Checked: "auto" (no language row) or a `codec_language_id` key.
    let mut language_id = if lang == "auto" {
        None
    } else {
        t.languages.get(&lang).copied()
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
        return Err(ModelError::TextTooLong {
            tokens: input_ids.len(),
            max: MAX_TEXT_TOKENS,
        });
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

#[cfg(test)]
mod tests {
    //! The CustomVoice layout on the tiny-a fixture (0.6B-style; speakers
    //! ryan, serena and the dialect speakers eric and dylan), row by row.

    use std::path::{Path, PathBuf};

    use super::*;
    use crate::checkpoint::TensorStore;
    use crate::config::GenerationConfig;
    use crate::request::GenOptions;

    fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a")
    }

    struct Fixture {
        config: TtsConfig,
        tokenizer: TextTokenizer,
        talker: Talker,
        options: GenOptions,
    }

    impl Fixture {
        fn load() -> Self {
            let d = dir();
            let config = TtsConfig::load(&d.join("config.json")).unwrap();
            let store = TensorStore::open_dir(&d, "model").unwrap();
            let talker = Talker::load(&store, &config.talker).unwrap();
            let generation = GenerationConfig::load(&d.join("generation_config.json")).unwrap();
            Fixture {
                tokenizer: TextTokenizer::load(&d).unwrap(),
                talker,
                options: GenOptions::from_config(&generation),
                config,
            }
        }

        fn parts(&self) -> PromptParts<'_> {
            PromptParts {
                config: &self.config,
                tokenizer: &self.tokenizer,
                talker: &self.talker,
            }
        }

        fn request(&self, speaker: &str, language: &str, text_streaming: bool) -> Request {
            Request {
                text: "Hello there, how are you?".into(),
                speaker: Some(speaker.into()),
                language: language.into(),
                instruct: None,
                text_streaming,
                options: self.options.clone(),
            }
        }

        fn build(&self, req: &Request) -> Result<Prompt> {
            build(&self.parts(), req)
        }

        /// `P(id)` plus `C(codec)` (when given), one row.
        fn row(&self, text_id: u32, codec: Option<u32>) -> Vec<f32> {
            let mut r = self.talker.project_text(&[text_id]);
            if let Some(c) = codec {
                self.talker.add_codec_embedding(c, &mut r);
            }
            r
        }
    }

    fn prefill_row(p: &Prompt, i: usize) -> &[f32] {
        &p.prefill[i * p.hidden..(i + 1) * p.hidden]
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn codec_prefix_orders_think_language_speaker_pad_bos() {
        let f = Fixture::load();
        let c = &f.config.talker.codec;
        let en = f.config.talker.languages["english"];
        let ryan = f.config.talker.speakers["ryan"].id;
        assert_eq!(
            codec_prefix(c, Some(en), SpeakerSlot::Codec(ryan)),
            [c.think, c.think_bos, en, c.think_eos, ryan, c.pad, c.bos]
        );
        assert_eq!(
            codec_prefix(c, None, SpeakerSlot::Codec(ryan)),
            [c.nothink, c.think_bos, c.think_eos, ryan, c.pad, c.bos]
        );
        assert_eq!(
            codec_prefix(c, None, SpeakerSlot::Empty),
            [c.nothink, c.think_bos, c.think_eos, c.pad, c.bos]
        );
    }

    #[test]
    fn dialect_speaker_speaks_its_dialect_for_auto_and_chinese_only() {
        let f = Fixture::load();
        let t = &f.config.talker;
        let eric = Some(&t.speakers["eric"]);
        let sichuan = t.languages["sichuan_dialect"];
        assert_eq!(language_id(t, "auto", eric).unwrap(), Some(sichuan));
        assert_eq!(language_id(t, "Chinese", eric).unwrap(), Some(sichuan));
        assert_eq!(
            language_id(t, "english", eric).unwrap(),
            Some(t.languages["english"])
        );
        let ryan = Some(&t.speakers["ryan"]);
        assert_eq!(language_id(t, "AUTO", ryan).unwrap(), None);
    }

    /// Non-streaming: role rows, six codec-prefix rows on tts_pad/tts_bos,
    /// every text row plus tts_eos on C(pad), then P(tts_pad) + C(bos);
    /// nothing trails but tts_pad.
    #[test]
    fn custom_voice_non_streaming_rows_for_a_known_speaker_and_language() {
        let f = Fixture::load();
        let cfg = &f.config;
        let c = &cfg.talker.codec;
        let p = f.build(&f.request("Ryan", "English", false)).unwrap();
        let n_text = p.input_ids.len() - 8;
        assert_eq!(p.prefill_rows(), 3 + 6 + n_text + 1 + 1);
        assert_eq!(p.trailing_rows(), 1);
        assert_eq!(bits(&p.trailing), bits(&f.row(cfg.tts_pad_token_id, None)));
        assert_eq!(bits(&p.tts_pad), bits(&p.trailing));
        assert_eq!(p.instruct_ids, None);
        assert_eq!(
            bits(&p.prefill[..3 * p.hidden]),
            bits(&f.talker.project_text(&p.input_ids[..3]))
        );
        let (pad, bos) = (cfg.tts_pad_token_id, cfg.tts_bos_token_id);
        assert_eq!(bits(prefill_row(&p, 3)), bits(&f.row(pad, Some(c.think))));
        let ryan = cfg.talker.speakers["ryan"].id;
        assert_eq!(bits(prefill_row(&p, 7)), bits(&f.row(pad, Some(ryan))));
        assert_eq!(bits(prefill_row(&p, 8)), bits(&f.row(bos, Some(c.pad))));
        assert_eq!(
            bits(prefill_row(&p, 9)),
            bits(&f.row(p.input_ids[3], Some(c.pad)))
        );
        let eos_row = 9 + n_text;
        assert_eq!(
            bits(prefill_row(&p, eos_row)),
            bits(&f.row(cfg.tts_eos_token_id, Some(c.pad)))
        );
        assert_eq!(
            bits(prefill_row(&p, eos_row + 1)),
            bits(&f.row(pad, Some(c.bos)))
        );
    }

    /// Streaming: the first text token rides with C(bos); the rest of the
    /// text and tts_eos trail one row per frame.
    #[test]
    fn custom_voice_streaming_rows_trail_the_text() {
        let f = Fixture::load();
        let cfg = &f.config;
        let p = f.build(&f.request("ryan", "auto", true)).unwrap();
        let n_text = p.input_ids.len() - 8;
        // Auto: no language row, so five codec-prefix rows.
        assert_eq!(p.prefill_rows(), 3 + 5 + 1);
        assert_eq!(p.trailing_rows(), n_text);
        assert_eq!(
            bits(prefill_row(&p, 8)),
            bits(&f.row(p.input_ids[3], Some(cfg.talker.codec.bos)))
        );
        assert_eq!(
            bits(&p.trailing[..p.hidden]),
            bits(&f.row(p.input_ids[4], None))
        );
        assert_eq!(
            bits(&p.trailing[(n_text - 1) * p.hidden..]),
            bits(&f.row(cfg.tts_eos_token_id, None))
        );
    }

    #[test]
    fn instruction_rows_come_first_where_the_size_supports_them() {
        let mut f = Fixture::load();
        let mut req = f.request("ryan", "english", false);
        req.instruct = Some("Speak slowly.".into());
        let plain = f.build(&req).unwrap();
        assert_eq!(plain.instruct_ids, None, "0.6B ignores the instruction");
        f.config.size = "1b7".into();
        let p = f.build(&req).unwrap();
        let ids = p.instruct_ids.clone().expect("1.7B keeps the instruction");
        assert_eq!(p.prefill_rows(), plain.prefill_rows() + ids.len());
        assert_eq!(
            bits(&p.prefill[..ids.len() * p.hidden]),
            bits(&f.talker.project_text(&ids))
        );
    }

    #[test]
    fn unknown_speaker_error_lists_the_valid_speakers() {
        let f = Fixture::load();
        match f.build(&f.request("Nobody", "english", false)) {
            Err(ModelError::UnknownSpeaker { name, valid }) => {
                assert_eq!(name, "Nobody");
                assert_eq!(valid, ["dylan", "eric", "ryan", "serena"]);
            }
            other => panic!("{:?}", other.map(|p| p.prefill_rows())),
        }
    }

    #[test]
    fn custom_voice_without_a_speaker_is_refused_with_the_list() {
        let f = Fixture::load();
        let mut req = f.request("", "english", false);
        for speaker in [Some(String::new()), None] {
            req.speaker = speaker;
            match f.build(&req) {
                Err(ModelError::UnknownSpeaker { name, valid }) => {
                    assert_eq!(name, "");
                    assert_eq!(valid.len(), 4);
                }
                other => panic!("{:?}", other.map(|p| p.prefill_rows())),
            }
        }
    }

    #[test]
    fn unknown_language_error_lists_auto_first() {
        let f = Fixture::load();
        match f.build(&f.request("ryan", "Klingon", false)) {
            Err(ModelError::UnknownLanguage { name, valid }) => {
                assert_eq!(name, "Klingon");
                assert_eq!(valid[0], "auto");
                assert!(valid.iter().any(|l| l == "english"));
            }
            other => panic!("{:?}", other.map(|p| p.prefill_rows())),
        }
    }

    /// The option checks run before the voice is looked up, so an empty
    /// text with an unknown speaker reports the text.
    #[test]
    fn request_checks_run_before_the_voice() {
        let f = Fixture::load();
        let mut req = f.request("Nobody", "Klingon", false);
        req.text = "  ".into();
        assert!(matches!(f.build(&req), Err(ModelError::EmptyText)));
        req.text = "Hi.".into();
        req.options.repetition_penalty = 0.0;
        assert!(matches!(
            f.build(&req),
            Err(ModelError::InvalidRequest(m)) if m.contains("repetition penalty")
        ));
    }

    #[test]
    fn only_custom_voice_has_a_layout_so_far() {
        assert_eq!(
            PromptLayout::of(ModelKind::CustomVoice),
            Some(PromptLayout::CustomVoice)
        );
        assert_eq!(PromptLayout::of(ModelKind::Base), None);
        assert_eq!(PromptLayout::of(ModelKind::VoiceDesign), None);
    }
}
