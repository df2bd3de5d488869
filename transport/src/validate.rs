//! The request checks the OpenAI route and the realtime session share:
//! voice, language, instructions, output rate and frame cap, each one
//! function here, and
//! the generation options both build from them. Each caller renders a
//! [`Rejected`] in its own wire shape (an OpenAI 400 naming the parameter,
//! or a protocol `error` event with its code), so the check lives once and
//! the two surfaces keep their own messages.

use tts_actors::{EngineError, GenOptions, ModelError, ModelKind};

use crate::protocol::sample_rate_in_range;
use crate::speakers::Speakers;
use crate::state::Loaded;

/// Why a request field was refused, with what a message needs to say.
#[derive(Clone, Debug, PartialEq)]
pub enum Rejected {
    /// Neither a checkpoint speaker nor an OpenAI voice name.
    UnknownVoice { voice: String, valid: Vec<String> },
    /// Not among the checkpoint's languages (compared lower-case).
    UnknownLanguage {
        language: String,
        valid: Vec<String>,
    },
    /// Outside [`MIN_SAMPLE_RATE`](crate::protocol::MIN_SAMPLE_RATE)`..=`
    /// [`MAX_SAMPLE_RATE`](crate::protocol::MAX_SAMPLE_RATE).
    SampleRate { rate: u32 },
    /// Outside `1..=max` codec frames.
    MaxFrames { frames: usize, max: usize },
    /// Instructions for a checkpoint that cannot follow them; `checkpoint`
    /// names it ("0.6B CustomVoice").
    Instructions { checkpoint: String },
}

impl Rejected {
    /// The words both surfaces use for [`Rejected::Instructions`].
    pub fn instructions_message(checkpoint: &str) -> String {
        format!(
            "instructions are not followed by this checkpoint ({checkpoint}): only VoiceDesign and 1.7B CustomVoice checkpoints follow instructions; omit them (or send an empty string)"
        )
    }
}

/// Non-blank instructions, refused on a checkpoint that cannot follow
/// them: VoiceDesign (they describe the voice) and CustomVoice above 0.6B
/// (a style instruction) can; the official code drops them on 0.6B
/// CustomVoice, and Base has none. A blank string is no instruction.
pub fn instructions(m: &Loaded, instructions: Option<&str>) -> Result<(), Rejected> {
    let given = instructions.is_some_and(|i| !i.trim().is_empty());
    let follows = instructions_role(m) != "none";
    if !given || follows {
        return Ok(());
    }
    let size = match m.model.config.size.as_str() {
        "0b6" => "0.6B ",
        "1b7" => "1.7B ",
        _ => "",
    };
    Err(Rejected::Instructions {
        checkpoint: format!("{size}{}", m.kind().name()),
    })
}

/// What instructions do on this checkpoint (`GET /v1/audio/voices`
/// `instructions`, which the browser page reads): `voice` (VoiceDesign:
/// they describe the voice), `style` (CustomVoice above 0.6B),
/// `none` (0.6B CustomVoice, Base: refused).
pub fn instructions_role(m: &Loaded) -> &'static str {
    match m.kind() {
        ModelKind::VoiceDesign => "voice",
        ModelKind::CustomVoice if m.model.config.supports_instruct() => "style",
        ModelKind::CustomVoice | ModelKind::Base => "none",
    }
}

/// A checkpoint speaker or OpenAI voice → the speaker it speaks with.
pub fn speaker(speakers: &Speakers, name: &str) -> Result<String, Rejected> {
    speakers
        .resolve(name)
        .ok_or_else(|| Rejected::UnknownVoice {
            voice: name.to_string(),
            valid: speakers.valid(),
        })
}

/// A language, lower-cased, if the checkpoint knows it: the model's own
/// check ([`tts_actors::language_name`]), its typed refusal rendered here.
pub fn language(languages: &[String], language: &str) -> Result<String, Rejected> {
    tts_actors::language_name(languages, language).map_err(|e| {
        let valid = match e {
            ModelError::UnknownLanguage { valid, .. } => valid,
            _ => languages.to_vec(),
        };
        Rejected::UnknownLanguage {
            language: language.to_lowercase(),
            valid,
        }
    })
}

/// An output sample rate the resampler can produce.
pub fn sample_rate(rate: u32) -> Result<u32, Rejected> {
    if sample_rate_in_range(rate) {
        Ok(rate)
    } else {
        Err(Rejected::SampleRate { rate })
    }
}

/// A per-request frame cap within the server's (`max`).
pub fn max_frames(frames: usize, max: usize) -> Result<usize, Rejected> {
    if frames == 0 || frames > max {
        Err(Rejected::MaxFrames { frames, max })
    } else {
        Ok(frames)
    }
}

/// The checkpoint's generation options with a request's sampling choices
/// (`max_frames` already checked).
pub fn gen_options(m: &Loaded, greedy: bool, seed: u64, max_frames: usize) -> GenOptions {
    let mut options = m.model.default_options();
    if greedy {
        options = options.greedy();
    }
    options.seed = seed;
    options.max_frames = max_frames;
    options
}

/// An engine refusal in words, said once: the model's own refusals already
/// start with "invalid request:", which the engine's wrapper would repeat.
pub fn engine_message(e: &EngineError) -> String {
    const PREFIX: &str = "invalid request: ";
    match e.model_cause() {
        Some(cause) => {
            let m = cause.to_string();
            if m.starts_with(PREFIX) {
                m
            } else {
                format!("{PREFIX}{m}")
            }
        }
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{MAX_SAMPLE_RATE, MIN_SAMPLE_RATE};

    fn langs() -> Vec<String> {
        ["auto", "english"].map(String::from).to_vec()
    }

    #[test]
    fn voice_resolves_speakers_and_openai_names_or_lists_the_valid_ones() {
        let v = Speakers::new(vec!["Ryan".into(), "vivian".into()]);
        assert_eq!(speaker(&v, " RYAN "), Ok("ryan".into()));
        assert!(speaker(&v, "alloy").is_ok());
        let Err(Rejected::UnknownVoice { voice: got, valid }) = speaker(&v, "nobody") else {
            panic!("refused");
        };
        assert_eq!(got, "nobody");
        assert_eq!(valid, v.valid());
    }

    #[test]
    fn language_is_compared_lower_case_and_returned_lower_case() {
        assert_eq!(language(&langs(), "English"), Ok("english".into()));
        assert_eq!(
            language(&langs(), "Klingon"),
            Err(Rejected::UnknownLanguage {
                language: "klingon".into(),
                valid: langs()
            })
        );
    }

    #[test]
    fn sample_rate_bounds_are_inclusive() {
        assert_eq!(sample_rate(MIN_SAMPLE_RATE), Ok(MIN_SAMPLE_RATE));
        assert_eq!(sample_rate(MAX_SAMPLE_RATE), Ok(MAX_SAMPLE_RATE));
        assert_eq!(
            sample_rate(MIN_SAMPLE_RATE - 1),
            Err(Rejected::SampleRate {
                rate: MIN_SAMPLE_RATE - 1
            })
        );
        assert!(sample_rate(MAX_SAMPLE_RATE + 1).is_err());
    }

    #[test]
    fn token_limit_error_reads_once() {
        let e = EngineError::from(ModelError::TextTooLong {
            tokens: 900,
            max: 512,
        });
        let m = engine_message(&e);
        assert_eq!(m.matches("invalid request").count(), 1, "{m}");
        assert!(m.starts_with("invalid request: text is 900 tokens"), "{m}");
        let e = EngineError::from(ModelError::UnknownSpeaker {
            name: "x".into(),
            valid: vec!["ryan".into()],
        });
        assert!(engine_message(&e).starts_with("invalid request: unknown speaker"));
    }

    #[test]
    fn max_frames_is_one_to_the_server_cap() {
        assert_eq!(max_frames(1, 10), Ok(1));
        assert_eq!(max_frames(10, 10), Ok(10));
        assert_eq!(
            max_frames(0, 10),
            Err(Rejected::MaxFrames { frames: 0, max: 10 })
        );
        assert!(max_frames(11, 10).is_err());
    }
}
