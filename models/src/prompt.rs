//! Prompt construction: a checked [`Request`] becomes the rows the talker
//! is fed ([`Prompt`]), in the official
//! `Qwen3TTSForConditionalGeneration.generate` layout.
//!
//! Every layout shares the same parts, assembled by [`build`]:
//! 1. the request checks (text, sampler options),
//! 2. the family check and the voice: what goes in the speaker slot of the
//!    codec prefix ([`PromptLayout`], [`SpeakerSlot`]),
//! 3. the language id (with the CustomVoice dialect rule),
//! 4. the templated text (and instruction, and reference-text) ids,
//! 5. the rows: optional instruction rows, the role rows `P(ids[:3])`, the
//!    codec prefix `K` on `tts_pad`/`tts_bos`, then the text all up front
//!    or trailing one row per frame ([`Request::text_streaming`]), or for an
//!    in-context clone the reference text and reference codes beside the
//!    target text (the official `generate_icl_prompt`).
//!
//! The three layouts: CustomVoice puts a preset speaker's codec id in the
//! slot; Base (voice clone) puts the speaker encoder's x-vector there, raw,
//! and in ICL mode adds the reference rows; VoiceDesign has no speaker slot
//! and leads with the voice description's rows.

use crate::code_predictor::CodePredictor;
use crate::config::{CodecIds, ModelKind, Speaker, TalkerConfig, TtsConfig};
use crate::error::{ModelError, Result};
use crate::request::{language_name, Request, VoiceClone, MAX_TEXT_TOKENS};
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
    /// `generate_voice_clone` (Base): an x-vector in the speaker slot and,
    /// in ICL mode, the reference text and codes.
    VoiceClone,
    /// `generate_voice_design`: the voice described in an instruction, no
    /// speaker slot.
    VoiceDesign,
}

impl PromptLayout {
    /// The layout of a checkpoint family.
    pub fn of(kind: ModelKind) -> Self {
        match kind {
            ModelKind::CustomVoice => PromptLayout::CustomVoice,
            ModelKind::Base => PromptLayout::VoiceClone,
            ModelKind::VoiceDesign => PromptLayout::VoiceDesign,
        }
    }
}

/// What fills the speaker slot of the codec prefix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SpeakerSlot<'a> {
    /// No speaker row (VoiceDesign).
    Empty,
    /// A codec id: `C(id)` (a CustomVoice speaker).
    Codec(u32),
    /// A vector used as the row itself: a Base x-vector, which lives in the
    /// codec-embedding space and takes no projection.
    Vector(&'a [f32]),
}

/// One entry of the codec prefix `K`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CodecRow<'a> {
    /// `C(id)`.
    Id(u32),
    /// A row given as is (the x-vector).
    Vector(&'a [f32]),
}

/// The model parts a prompt is built from.
pub struct PromptParts<'a> {
    pub config: &'a TtsConfig,
    pub tokenizer: &'a TextTokenizer,
    pub talker: &'a Talker,
    /// Its codebook embeddings `E_q` give the reference-code rows of an ICL
    /// clone.
    pub code_predictor: &'a CodePredictor,
}

/// Checks a request and builds its prompt in the checkpoint's layout (the
/// official `Qwen3TTSForConditionalGeneration.generate` prefill).
pub fn build(m: &PromptParts<'_>, req: &Request) -> Result<Prompt> {
    check_options(req)?;
    let t = &m.config.talker;
    let (speaker, clone) = match PromptLayout::of(m.config.kind) {
        PromptLayout::CustomVoice => {
            if req.voice_clone.is_some() {
                return Err(wrong_family(
                    m.config.kind,
                    "the request asks to clone a voice",
                ));
            }
            (custom_voice_speaker(m.config, req)?, None)
        }
        PromptLayout::VoiceClone => {
            refuse_speaker(m.config.kind, req)?;
            if has_text(&req.instruct) {
                return Err(wrong_family(
                    m.config.kind,
                    "the request has an instruct (a style or voice description)",
                ));
            }
            let clone = req.voice_clone.as_deref().ok_or_else(|| {
                wrong_family(m.config.kind, "the request names no voice to clone")
            })?;
            check_clone(m, clone)?;
            (None, Some(clone))
        }
        PromptLayout::VoiceDesign => {
            refuse_speaker(m.config.kind, req)?;
            if req.voice_clone.is_some() {
                return Err(wrong_family(
                    m.config.kind,
                    "the request asks to clone a voice",
                ));
            }
            // No description is allowed: the official
            // `generate_voice_design` takes an empty instruct as none and
            // speaks without instruct rows (`text_ids`).
            (None, None)
        }
    };
    let language_id = language_id(t, &req.language, speaker)?;
    let slot = match (speaker, clone) {
        (Some(s), _) => SpeakerSlot::Codec(s.id),
        (None, Some(c)) => SpeakerSlot::Vector(&c.x_vector),
        (None, None) => SpeakerSlot::Empty,
    };
    let ids = text_ids(m, req, clone)?;
    let codec = codec_prefix(&t.codec, language_id, slot);
    Ok(rows(m, &codec, ids, clone, req.text_streaming))
}

fn has_text(s: &Option<String>) -> bool {
    s.as_deref().is_some_and(|s| !s.trim().is_empty())
}

fn wrong_family(family: ModelKind, problem: &str) -> ModelError {
    ModelError::WrongFamily {
        family,
        problem: problem.to_string(),
    }
}

/// Base and VoiceDesign have no preset speakers (`spk_id` is empty).
fn refuse_speaker(family: ModelKind, req: &Request) -> Result<()> {
    match &req.speaker {
        Some(s) if !s.trim().is_empty() => Err(wrong_family(
            family,
            &format!("the request names the preset speaker {s:?}"),
        )),
        _ => Ok(()),
    }
}

/// A cloned voice fits the checkpoint: an x-vector of the talker's width,
/// finite; ICL codes of the talker's code groups, inside the codebook, with
/// a transcript.
fn check_clone(m: &PromptParts<'_>, c: &VoiceClone) -> Result<()> {
    let h = m.talker.hidden_size();
    let bad = |msg: String| Err(ModelError::InvalidVoice(msg));
    if c.x_vector.len() != h {
        return bad(format!(
            "its x-vector has {} values but this checkpoint's talker takes {h} (a voice is made for one talker size: 0.6B voices have 1024, 1.7B voices 2048)",
            c.x_vector.len()
        ));
    }
    if !c.x_vector.iter().all(|v| v.is_finite()) {
        return bad("its x-vector holds non-finite values".into());
    }
    if let Some(r) = &c.reference {
        let g = m.config.talker.num_code_groups;
        if r.text.trim().is_empty() {
            return bad(
                "in-context cloning needs the transcript of the reference clip (ref_text); give it, or clone from the x-vector only".into(),
            );
        }
        if r.frames == 0 || r.codes.len() != r.frames * g {
            return bad(format!(
                "its reference codes hold {} values for {} frames; this checkpoint needs {g} per frame",
                r.codes.len(),
                r.frames
            ));
        }
        let limit = m.code_predictor.vocab_size().min(m.talker.vocab_size()) as u32;
        if let Some(&code) = r.codes.iter().find(|&&c| c >= limit) {
            return bad(format!(
                "reference code {code} is outside the codebook (0..{limit})"
            ));
        }
    }
    Ok(())
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

/// The token ids a prompt is built from.
struct TextIds {
    /// The templated target text.
    input: Vec<u32>,
    /// The templated instruction, where the layout uses one.
    instruct: Option<Vec<u32>>,
    /// ICL: the templated reference text, tokenized on its own (no BPE merge
    /// crosses into the target text, as upstream).
    reference: Option<Vec<u32>>,
}

/// The templated text's ids and, where used, the instruction's and the
/// reference text's, checked against the template and the text vocabulary.
fn text_ids(m: &PromptParts<'_>, req: &Request, clone: Option<&VoiceClone>) -> Result<TextIds> {
    let input = m.tokenizer.encode(&template::assistant(&req.text))?;
    if input.len() < 9 {
        return Err(ModelError::Tokenizer(format!(
            "templated text tokenized to {} ids; the chat template alone needs 8 — is tokenizer_config.json missing <|im_start|>/<|im_end|>?",
            input.len()
        )));
    }
    // VoiceDesign always uses its instruction (upstream has no size guard
    // there); CustomVoice only where the size supports one; Base never
    // (`generate_voice_clone` takes none; a non-blank one was refused).
    let use_instruct = match m.config.kind {
        ModelKind::VoiceDesign => true,
        ModelKind::CustomVoice => m.config.supports_instruct(),
        ModelKind::Base => false,
    };
    // Exactly the official test `ins is None or ins == ""`: an empty
    // instruct gives no instruct rows at all (not an empty user turn),
    // while any other text, blank or not, is templated as it stands.
    let instruct = match &req.instruct {
        Some(s) if !s.is_empty() && use_instruct => {
            Some(m.tokenizer.encode(&template::instruct(s))?)
        }
        _ => None,
    };
    let reference = match clone.and_then(|c| c.reference.as_ref()) {
        Some(r) => {
            let ids = m.tokenizer.encode(&template::reference(&r.text))?;
            if ids.len() < 6 {
                return Err(ModelError::Tokenizer(format!(
                    "templated reference text tokenized to {} ids; the template alone needs 5",
                    ids.len()
                )));
            }
            Some(ids)
        }
        None => None,
    };
    let total = input.len() + reference.as_ref().map_or(0, Vec::len);
    if total > MAX_TEXT_TOKENS {
        return Err(ModelError::TextTooLong {
            tokens: total,
            max: MAX_TEXT_TOKENS,
        });
    }
    let all = input
        .iter()
        .chain(instruct.iter().flatten())
        .chain(reference.iter().flatten());
    for &id in all {
        if id as usize >= m.talker.text_vocab_size() {
            return Err(ModelError::Tokenizer(format!(
                "token id {id} is outside text_vocab_size"
            )));
        }
    }
    Ok(TextIds {
        input,
        instruct,
        reference,
    })
}

/// Codec prefix `K`: think/nothink tags, language, speaker slot, pad, bos.
pub fn codec_prefix<'a>(
    c: &CodecIds,
    language_id: Option<u32>,
    speaker: SpeakerSlot<'a>,
) -> Vec<CodecRow<'a>> {
    let mut codec: Vec<CodecRow<'a>> = match language_id {
        None => vec![c.nothink, c.think_bos, c.think_eos],
        Some(l) => vec![c.think, c.think_bos, l, c.think_eos],
    }
    .into_iter()
    .map(CodecRow::Id)
    .collect();
    match speaker {
        SpeakerSlot::Empty => {}
        SpeakerSlot::Codec(id) => codec.push(CodecRow::Id(id)),
        SpeakerSlot::Vector(v) => codec.push(CodecRow::Vector(v)),
    }
    codec.extend([CodecRow::Id(c.pad), CodecRow::Id(c.bos)]);
    codec
}

/// `row += K[i]`.
fn add_codec_row(talker: &Talker, r: CodecRow<'_>, row: &mut [f32]) {
    match r {
        CodecRow::Id(id) => talker.add_codec_embedding(id, row),
        CodecRow::Vector(v) => row.iter_mut().zip(v).for_each(|(a, b)| *a += b),
    }
}

/// The prefill and trailing rows of a prompt with codec prefix `codec`.
fn rows(
    m: &PromptParts<'_>,
    codec: &[CodecRow<'_>],
    ids: TextIds,
    clone: Option<&VoiceClone>,
    text_streaming: bool,
) -> Prompt {
    let (talker, cfg) = (m.talker, m.config);
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
    let input_ids = ids.input;

    let mut prefill = Vec::new();
    if let Some(ids) = &ids.instruct {
        prefill.extend(talker.project_text(ids));
    }
    prefill.extend(talker.project_text(&input_ids[..3]));
    // (L-2) x tts_pad + tts_bos, each plus K[i] for i < L-1.
    for (i, &k) in codec[..kl - 1].iter().enumerate() {
        let mut row = if i < kl - 2 {
            tts_pad.to_vec()
        } else {
            tts_bos.to_vec()
        };
        add_codec_row(talker, k, &mut row);
        prefill.extend(row);
    }
    // Everything so far is the same for every text of this voice.
    let mut shared_rows = prefill.len() / h;
    let text = &input_ids[3..input_ids.len() - 5];
    let icl = clone
        .and_then(|v| v.reference.as_ref())
        .zip(ids.reference.as_deref());
    let trailing = if let Some((reference, ref_ids)) = icl {
        let ref_text = &ref_ids[3..ref_ids.len() - 2];
        let n_cc = reference.frames + 1;
        // The reference transcript's rows come first in both text modes
        // (streaming: beside the first `Cc` rows, while there are any).
        shared_rows += if text_streaming {
            ref_text.len().min(n_cc)
        } else {
            ref_text.len()
        };
        icl_rows(
            m,
            ref_text,
            text,
            reference,
            (tts_eos, tts_pad),
            text_streaming,
            &mut prefill,
        )
    } else if !text_streaming {
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
        // First text token with K[L-1] = C(bos); the rest trail one per frame.
        let mut first = talker.project_text(&text[..1]);
        add_codec_row(talker, codec[kl - 1], &mut first);
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
        instruct_ids: ids.instruct,
        ref_ids: ids.reference,
        shared_rows,
    }
}

/// The in-context rows (official `generate_icl_prompt`), appended to
/// `prefill`; returns the trailing rows.
///
/// - `Txt = P(ref_text ++ text) ++ P(tts_eos)`; the reference text comes
///   first and both are the templates' inner ids.
/// - `Cc = [C(bos)] ++ [C(rc[t,0]) + Σ_q E_q(rc[t,q])]`, one row per
///   reference frame, summed in codebook order as upstream's `sum(1)`.
/// - Text all up front: every `Txt` row on `C(pad)`, then every `Cc` row on
///   `tts_pad`; `tts_pad` trails.
/// - Text streaming: `Txt[i] + Cc[i]` side by side for the `Cc` rows
///   (`Txt` padded with `tts_pad` when shorter); any `Txt` rows left over
///   trail one per frame.
fn icl_rows(
    m: &PromptParts<'_>,
    ref_text: &[u32],
    text: &[u32],
    reference: &crate::request::CloneReference,
    (tts_eos, tts_pad): (&[f32], &[f32]),
    text_streaming: bool,
    prefill: &mut Vec<f32>,
) -> Vec<f32> {
    let talker = m.talker;
    let c = &m.config.talker.codec;
    let h = talker.hidden_size();
    let g = m.config.talker.num_code_groups;
    let mut txt = talker.project_text(&[ref_text, text].concat());
    txt.extend_from_slice(tts_eos);
    let mut cc = vec![0f32; h];
    talker.add_codec_embedding(c.bos, &mut cc);
    for frame in reference.codes.chunks_exact(g) {
        let mut row = vec![0f32; h];
        talker.add_codec_embedding(frame[0], &mut row);
        for (q, &code) in frame[1..].iter().enumerate() {
            m.code_predictor.add_embedding(q, code, &mut row);
        }
        cc.extend(row);
    }
    let (n_txt, n_cc) = (txt.len() / h, cc.len() / h);
    if !text_streaming {
        for row in txt.chunks_exact_mut(h) {
            talker.add_codec_embedding(c.pad, row);
        }
        prefill.extend(txt);
        for row in cc.chunks_exact_mut(h) {
            row.iter_mut().zip(tts_pad).for_each(|(a, b)| *a += b);
        }
        prefill.extend(cc);
        return tts_pad.to_vec();
    }
    let side = n_cc.min(n_txt);
    for (i, row) in cc.chunks_exact_mut(h).enumerate() {
        let t = if i < side {
            &txt[i * h..(i + 1) * h]
        } else {
            tts_pad
        };
        row.iter_mut().zip(t).for_each(|(a, b)| *a += b);
    }
    prefill.extend(cc);
    if n_txt > n_cc {
        txt[n_cc * h..].to_vec()
    } else {
        tts_pad.to_vec()
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
        code_predictor: CodePredictor,
        options: GenOptions,
    }

    impl Fixture {
        fn load() -> Self {
            let d = dir();
            let config = TtsConfig::load(&d.join("config.json")).unwrap();
            let store = TensorStore::open_dir(&d, "model").unwrap();
            let talker = Talker::load(&store, &config.talker).unwrap();
            let code_predictor = CodePredictor::load(&store, &config.talker).unwrap();
            let generation = GenerationConfig::load(&d.join("generation_config.json")).unwrap();
            Fixture {
                tokenizer: TextTokenizer::load(&d).unwrap(),
                talker,
                code_predictor,
                options: GenOptions::from_config(&generation),
                config,
            }
        }

        fn parts(&self) -> PromptParts<'_> {
            PromptParts {
                config: &self.config,
                tokenizer: &self.tokenizer,
                talker: &self.talker,
                code_predictor: &self.code_predictor,
            }
        }

        fn request(&self, speaker: &str, language: &str, text_streaming: bool) -> Request {
            Request {
                text: "Hello there, how are you?".into(),
                speaker: Some(speaker.into()),
                language: language.into(),
                instruct: None,
                voice_clone: None,
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
        let ids = |v: &[u32]| v.iter().map(|&i| CodecRow::Id(i)).collect::<Vec<_>>();
        assert_eq!(
            codec_prefix(c, Some(en), SpeakerSlot::Codec(ryan)),
            ids(&[c.think, c.think_bos, en, c.think_eos, ryan, c.pad, c.bos])
        );
        assert_eq!(
            codec_prefix(c, None, SpeakerSlot::Codec(ryan)),
            ids(&[c.nothink, c.think_bos, c.think_eos, ryan, c.pad, c.bos])
        );
        assert_eq!(
            codec_prefix(c, None, SpeakerSlot::Empty),
            ids(&[c.nothink, c.think_bos, c.think_eos, c.pad, c.bos])
        );
        let x = [0.5f32; 4];
        let with_vector = codec_prefix(c, None, SpeakerSlot::Vector(&x));
        assert_eq!(with_vector[3], CodecRow::Vector(&x));
        assert_eq!(with_vector.len(), 6);
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

    /// The official `ins is None or ins == ""`: an empty instruct is none
    /// (no rows, not an empty user turn); any other text is templated as
    /// it stands, blanks too. Base never takes one.
    #[test]
    fn only_an_empty_instruct_is_no_instruct() {
        let vd = as_family(ModelKind::VoiceDesign);
        let mut req = vd.request("", "english", false);
        req.speaker = None;
        let mut rows = Vec::new();
        for instruct in [None, Some(String::new())] {
            req.instruct = instruct;
            let p = vd.build(&req).unwrap();
            assert_eq!(p.instruct_ids, None);
            rows.push(p.prefill_rows());
        }
        assert_eq!(rows[0], rows[1]);
        req.instruct = Some(" ".into());
        let p = vd.build(&req).unwrap();
        let ids = p
            .instruct_ids
            .clone()
            .expect("a blank instruct is templated");
        assert_eq!(ids, vd.tokenizer.encode(&template::instruct(" ")).unwrap());
        assert_eq!(p.prefill_rows(), rows[0] + ids.len());

        let mut cv = Fixture::load();
        cv.config.size = "1b7".into();
        let mut req = cv.request("ryan", "english", false);
        req.instruct = Some(String::new());
        assert_eq!(cv.build(&req).unwrap().instruct_ids, None);

        let mut base = as_family(ModelKind::Base);
        base.config.size = "1b7".into();
        let voice = clone_voice(&base, 2, Some("Reference."));
        let mut req = clone_request(&base, voice, true);
        req.instruct = Some(" ".into());
        assert_eq!(base.build(&req).unwrap().instruct_ids, None);
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
    fn each_family_has_its_layout() {
        assert_eq!(
            PromptLayout::of(ModelKind::CustomVoice),
            PromptLayout::CustomVoice
        );
        assert_eq!(PromptLayout::of(ModelKind::Base), PromptLayout::VoiceClone);
        assert_eq!(
            PromptLayout::of(ModelKind::VoiceDesign),
            PromptLayout::VoiceDesign
        );
    }

    // ---- Base (voice clone) and VoiceDesign layouts, on tiny-a's weights
    // with the family switched (the golden parity tests use real Base and
    // VoiceDesign fixtures; these pin the row order and the refusals).

    fn as_family(kind: ModelKind) -> Fixture {
        let mut f = Fixture::load();
        f.config.kind = kind;
        f
    }

    fn clone_voice(f: &Fixture, frames: usize, text: Option<&str>) -> std::sync::Arc<VoiceClone> {
        let h = f.talker.hidden_size();
        let g = f.config.talker.num_code_groups;
        let x_vector = (0..h).map(|i| (i as f32 * 0.37).sin()).collect();
        let reference = text.map(|t| crate::request::CloneReference {
            text: t.into(),
            codes: (0..frames * g).map(|i| (i * 97 % 2048) as u32).collect(),
            frames,
        });
        std::sync::Arc::new(VoiceClone {
            x_vector,
            reference,
        })
    }

    fn clone_request(f: &Fixture, voice: std::sync::Arc<VoiceClone>, streaming: bool) -> Request {
        let mut r = f.request("", "english", streaming);
        r.speaker = None;
        r.voice_clone = Some(voice);
        r
    }

    /// x-vector only: the CustomVoice rows with the raw x-vector as the
    /// speaker row (`P(tts_pad) + x`).
    #[test]
    fn x_vector_clone_puts_the_vector_in_the_speaker_slot() {
        let f = as_family(ModelKind::Base);
        let voice = clone_voice(&f, 0, None);
        for streaming in [false, true] {
            let p = f
                .build(&clone_request(&f, voice.clone(), streaming))
                .unwrap();
            let mut row = f.row(f.config.tts_pad_token_id, None);
            row.iter_mut()
                .zip(&voice.x_vector)
                .for_each(|(a, b)| *a += b);
            assert_eq!(bits(prefill_row(&p, 7)), bits(&row));
            let n_text = p.input_ids.len() - 8;
            if streaming {
                assert_eq!(p.prefill_rows(), 3 + 6 + 1);
                assert_eq!(p.trailing_rows(), n_text);
            } else {
                assert_eq!(p.prefill_rows(), 3 + 6 + n_text + 1 + 1);
                assert_eq!(p.trailing_rows(), 1);
            }
            assert_eq!(p.ref_ids, None);
        }
    }

    /// ICL: after the header, the reference text then the target text beside
    /// `C(bos)` and the reference-code rows (streaming), or all text on
    /// `C(pad)` then all code rows on `tts_pad` (non-streaming).
    #[test]
    fn icl_clone_rows_follow_generate_icl_prompt() {
        let f = as_family(ModelKind::Base);
        let cfg = &f.config;
        let c = &cfg.talker.codec;
        let g = cfg.talker.num_code_groups;
        // Few frames: the text outlasts the codes, so some of it trails.
        let voice = clone_voice(&f, 3, Some("This is the reference."));
        let p = f.build(&clone_request(&f, voice.clone(), true)).unwrap();
        let ref_ids = p.ref_ids.clone().unwrap();
        let n_r = ref_ids.len() - 5;
        let n_t = p.input_ids.len() - 8;
        let n_txt = n_r + n_t + 1;
        assert_eq!(p.prefill_rows(), 3 + 6 + 4);
        assert_eq!(p.trailing_rows(), n_txt - 4);
        // Row 9: P(first ref token) + C(bos).
        assert_eq!(
            bits(prefill_row(&p, 9)),
            bits(&f.row(ref_ids[3], Some(c.bos)))
        );
        // Row 10: P(second ref token) + C(rc[0,0]) + sum_q E_q(rc[0,q]).
        let rc = &voice.reference.as_ref().unwrap().codes;
        let mut cc = vec![0f32; p.hidden];
        f.talker.add_codec_embedding(rc[0], &mut cc);
        for (q, &code) in rc[1..g].iter().enumerate() {
            f.code_predictor.add_embedding(q, code, &mut cc);
        }
        let mut want = f.row(ref_ids[4], None);
        want.iter_mut().zip(&cc).for_each(|(a, b)| *a += b);
        assert_eq!(bits(prefill_row(&p, 10)), bits(&want));
        // The last trailing row is tts_eos.
        assert_eq!(
            bits(&p.trailing[(p.trailing_rows() - 1) * p.hidden..]),
            bits(&f.row(cfg.tts_eos_token_id, None))
        );

        // Many frames: the codes outlast the text, which is padded.
        let long = clone_voice(&f, 60, Some("This is the reference."));
        let p = f.build(&clone_request(&f, long, true)).unwrap();
        assert_eq!(p.prefill_rows(), 3 + 6 + 61);
        assert_eq!(p.trailing_rows(), 1);
        assert_eq!(bits(&p.trailing), bits(&p.tts_pad));

        // Non-streaming: all text rows on C(pad), then every code row.
        let p = f.build(&clone_request(&f, voice, false)).unwrap();
        assert_eq!(p.prefill_rows(), 3 + 6 + n_txt + 4);
        assert_eq!(p.trailing_rows(), 1);
        assert_eq!(
            bits(prefill_row(&p, 9)),
            bits(&f.row(ref_ids[3], Some(c.pad)))
        );
        assert_eq!(
            bits(prefill_row(&p, 9 + n_txt)),
            bits(&f.row(cfg.tts_pad_token_id, Some(c.bos)))
        );
    }

    /// VoiceDesign: the instruct rows first (whatever the size), no speaker
    /// row.
    #[test]
    fn voice_design_leads_with_the_description_and_has_no_speaker_row() {
        let f = as_family(ModelKind::VoiceDesign);
        let mut req = f.request("", "english", false);
        req.speaker = None;
        req.instruct = Some("A calm, low voice.".into());
        let p = f.build(&req).unwrap();
        let ids = p
            .instruct_ids
            .clone()
            .expect("VoiceDesign keeps the instruct on 0.6B too");
        let n_text = p.input_ids.len() - 8;
        assert_eq!(p.prefill_rows(), ids.len() + 3 + 5 + n_text + 1 + 1);
        let c = &f.config.talker.codec;
        let bos_row = ids.len() + 3 + 4;
        assert_eq!(
            bits(prefill_row(&p, bos_row)),
            bits(&f.row(f.config.tts_bos_token_id, Some(c.pad)))
        );
    }

    fn refusal(f: &Fixture, req: &Request) -> String {
        match f.build(req) {
            Err(e @ (ModelError::WrongFamily { .. } | ModelError::InvalidVoice(_))) => {
                e.to_string()
            }
            other => panic!("{:?}", other.map(|p| p.prefill_rows())),
        }
    }

    #[test]
    fn requests_outside_the_family_are_refused_with_what_it_can_do() {
        let cv = Fixture::load();
        let base = as_family(ModelKind::Base);
        let vd = as_family(ModelKind::VoiceDesign);
        let voice = clone_voice(&base, 2, Some("Reference."));

        let mut r = cv.request("ryan", "english", false);
        r.voice_clone = Some(voice.clone());
        let e = refusal(&cv, &r);
        assert!(
            e.contains("clone a voice")
                && e.contains("CustomVoice")
                && e.contains("Base checkpoint"),
            "{e}"
        );

        let mut r = clone_request(&base, voice.clone(), true);
        r.speaker = Some("ryan".into());
        let e = refusal(&base, &r);
        assert!(
            e.contains("preset speaker \"ryan\"") && e.contains("Base checkpoint"),
            "{e}"
        );

        let mut r = clone_request(&base, voice.clone(), true);
        r.voice_clone = None;
        let e = refusal(&base, &r);
        assert!(
            e.contains("no voice to clone") && e.contains("reference"),
            "{e}"
        );

        let mut r = clone_request(&base, voice.clone(), true);
        r.instruct = Some("whisper".into());
        assert!(refusal(&base, &r).contains("instruct"));

        let mut r = vd.request("", "english", false);
        r.speaker = None;
        r.instruct = Some("A bright voice.".into());
        r.voice_clone = Some(voice);
        assert!(refusal(&vd, &r).contains("clone a voice"));
    }

    #[test]
    fn a_voice_that_does_not_fit_the_checkpoint_is_refused() {
        let f = as_family(ModelKind::Base);
        let mut v = (*clone_voice(&f, 2, Some("Reference."))).clone();
        v.x_vector.push(0.0);
        let e = refusal(&f, &clone_request(&f, v.clone().into(), true));
        assert!(e.contains("x-vector has") && e.contains("1024"), "{e}");
        v.x_vector.pop();
        v.x_vector[0] = f32::NAN;
        assert!(refusal(&f, &clone_request(&f, v.clone().into(), true)).contains("non-finite"));
        v.x_vector[0] = 0.0;
        v.reference.as_mut().unwrap().text = " ".into();
        assert!(refusal(&f, &clone_request(&f, v.clone().into(), true)).contains("transcript"));
        let r = v.reference.as_mut().unwrap();
        r.text = "Reference.".into();
        r.codes.pop();
        assert!(refusal(&f, &clone_request(&f, v.clone().into(), true))
            .contains("reference codes hold"));
        let r = v.reference.as_mut().unwrap();
        r.codes.push(5000);
        assert!(refusal(&f, &clone_request(&f, v.into(), true)).contains("outside the codebook"));
    }
}
