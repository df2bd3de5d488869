//! Session settings: the defaults a connection starts with, `session.update`
//! validated completely and applied all or nothing, and the snapshot a
//! context takes of them when it opens. Pure (no socket, no engine), so each
//! rule is unit-tested here.

use std::sync::Arc;

use tts_actors::{GenOptions, ModelKind, VoiceClone, VoiceLibrary};

use crate::protocol::{
    self, AudioFormat, AudioTransport, Chunking, ChunkingMode, ChunkingUpdate, ErrorCode,
    ProtocolError, SessionSettings, SessionUpdate, TextMode, Vad, VadUpdate, MAX_PREBUFFER_MS,
};
use crate::speakers::Speakers;
use crate::state::Loaded;
use crate::validate::{self, Rejected};

/// Longest `chunking.max_delay_ms`: a minute of waiting for a boundary is
/// already more than any client means.
const MAX_DELAY_MS: u64 = 60_000;
/// Largest `chunking.live_max_tokens`: the cut may come a sentence later,
/// and one utterance's text must stay well inside the model's 8192 tokens.
pub const MAX_LIVE_TOKENS: usize = 2000;
/// Largest `chunking.live_max_audio_s`.
pub const MAX_LIVE_AUDIO_S: f64 = 600.0;

/// What a `session.update` is checked against: the checkpoint and the
/// server's limits.
pub struct Bounds<'a> {
    pub speakers: &'a Speakers,
    pub languages: &'a [String],
    /// The server's frame cap per request.
    pub max_frames: usize,
    /// The server's appended-but-unsynthesized characters per context.
    pub max_pending_chars: usize,
    /// A Base checkpoint's stored voices: `voice` names one of them.
    pub stored: Option<&'a VoiceLibrary>,
    /// The checkpoint, for the checks that depend on what it can do
    /// (`instruct`); `None` in unit tests of the rest.
    pub model: Option<&'a Loaded>,
}

impl<'a> Bounds<'a> {
    pub fn of(m: &'a Loaded, max_pending_chars: usize) -> Self {
        Bounds {
            speakers: &m.speakers,
            languages: &m.languages,
            max_frames: m.max_frames,
            max_pending_chars,
            stored: m.library.as_deref(),
            model: Some(m),
        }
    }
}

/// What a context needs from the session settings, captured at creation.
#[derive(Clone, Debug)]
pub struct CtxSettings {
    /// A preset speaker (CustomVoice).
    pub speaker: Option<String>,
    /// A stored voice (Base), resolved when the context opened.
    pub voice_clone: Option<Arc<VoiceClone>>,
    /// Why the context cannot be spoken, when its stored voice could not be
    /// resolved as it opened (deleted since `session.update` chose it, or
    /// made for another talker): the context fails with this message
    /// instead of reaching the model without a voice.
    pub voice_error: Option<String>,
    pub language: String,
    pub instruct: Option<String>,
    pub rate: u32,
    pub format: AudioFormat,
    pub transport: AudioTransport,
    pub acks: bool,
    /// Word and character timings (`realtime/timings.rs`).
    pub timings: bool,
    pub options: GenOptions,
    pub text_mode: TextMode,
    /// The listener's prebuffer (`session.update` `prebuffer_ms`; the
    /// server's unless declared).
    pub prebuffer_ms: f64,
    /// The client declared `prebuffer_ms` ([`SessionSettings::prebuffer_declared`]).
    pub prebuffer_declared: bool,
}

#[cfg(test)]
impl CtxSettings {
    /// A context's settings for unit tests: PCM16 at 16 kHz in `transport`,
    /// the checkpoint-independent default generation options.
    pub fn for_tests(transport: AudioTransport) -> Self {
        CtxSettings {
            speaker: Some("ryan".into()),
            voice_clone: None,
            voice_error: None,
            language: "auto".into(),
            instruct: None,
            rate: 16000,
            format: AudioFormat::Pcm16,
            transport,
            acks: false,
            timings: false,
            options: GenOptions::from_config(&Default::default()),
            text_mode: TextMode::default(),
            prebuffer_ms: protocol::DEFAULT_PREBUFFER_MS,
            prebuffer_declared: false,
        }
    }
}

/// A new connection's settings: the first speaker, `auto`, the model's own
/// rate, PCM16 in binary frames, the server's prebuffer.
pub fn initial(
    speakers: &Speakers,
    native_rate: u32,
    max_frames: usize,
    prebuffer_ms: f64,
) -> SessionSettings {
    SessionSettings {
        voice: speakers.default_speaker().unwrap_or_default().to_string(),
        language: "auto".into(),
        instruct: None,
        sample_rate: native_rate,
        native_sample_rate: native_rate,
        format: AudioFormat::Pcm16,
        audio_transport: AudioTransport::Binary,
        chunking: Chunking::default(),
        vad: Vad::default(),
        audio_acks: false,
        timings: false,
        greedy: false,
        seed: 0,
        max_frames,
        text_mode: TextMode::default(),
        prebuffer_ms,
        prebuffer_declared: false,
    }
}

/// The realtime protocol's words for a shared check's refusal.
fn refused(r: Rejected) -> ProtocolError {
    match r {
        Rejected::UnknownVoice { voice, valid } => {
            let mut e =
                ProtocolError::new(ErrorCode::InvalidVoice, format!("unknown voice {voice:?}"));
            e.valid = Some(valid);
            e
        }
        Rejected::UnknownLanguage { language, valid } => {
            let mut e = ProtocolError::new(
                ErrorCode::InvalidLanguage,
                format!("unknown language {language:?}"),
            );
            e.valid = Some(valid);
            e
        }
        Rejected::SampleRate { rate } => ProtocolError::new(
            ErrorCode::InvalidSetting,
            format!(
                "sample_rate {rate} is out of range; use {}..={} Hz",
                protocol::MIN_SAMPLE_RATE,
                protocol::MAX_SAMPLE_RATE
            ),
        ),
        Rejected::MaxFrames { frames, max } => ProtocolError::new(
            ErrorCode::InvalidSetting,
            format!("max_frames {frames} must be 1..={max}"),
        ),
        Rejected::Instructions { checkpoint } => ProtocolError::new(
            ErrorCode::InvalidSetting,
            Rejected::instructions_message(&checkpoint),
        ),
    }
}

/// A stored voice's name as stored, or `invalid_voice` listing them.
fn stored_voice(lib: &VoiceLibrary, name: &str) -> Result<String, ProtocolError> {
    if let Some(r) = lib.get(name) {
        return Ok(r.name.as_str().to_string());
    }
    let valid: Vec<String> = lib
        .list()
        .iter()
        .map(|r| r.name.as_str().to_string())
        .collect();
    let mut e = refused(Rejected::UnknownVoice {
        voice: name.to_string(),
        valid,
    });
    e.message.push_str(
        ": this Base checkpoint speaks stored voices (upload one with POST /v1/audio/voices)",
    );
    Err(e)
}

/// Validates a `session.update` completely against `current`, and returns
/// the settings it makes (all or nothing: on `Err` nothing changed).
pub fn apply(
    current: &SessionSettings,
    u: SessionUpdate,
    b: &Bounds,
) -> Result<SessionSettings, ProtocolError> {
    let mut s = current.clone();
    let bad = |m: String| Err(ProtocolError::new(ErrorCode::InvalidSetting, m));
    if let Some(v) = u.voice {
        s.voice = match b.stored {
            Some(lib) => stored_voice(lib, &v)?,
            None => validate::speaker(b.speakers, &v).map_err(refused)?,
        };
    }
    if let Some(l) = u.language {
        s.language = validate::language(b.languages, &l).map_err(refused)?;
    }
    if let Some(i) = u.instruct {
        if let Some(m) = b.model {
            validate::instructions(m, Some(&i)).map_err(refused)?;
        }
        // `""` clears it; any other text is kept as it stands, as the
        // official code templates it.
        s.instruct = (!i.is_empty()).then_some(i);
    }
    if let Some(r) = u.sample_rate {
        s.sample_rate = validate::sample_rate(r).map_err(refused)?;
    }
    if let Some(f) = u.format {
        s.format = f;
    }
    if let Some(c) = super::encode::codec(s.format) {
        // A codec takes only its rates: G.711 switches to 8 kHz unless a
        // rate is asked for in the same update (as on HTTP); another rate
        // the codec lacks is refused, naming those it takes.
        let requested = u
            .sample_rate
            .or((u.format.is_none()).then_some(s.sample_rate));
        s.sample_rate = c.output_rate(requested, s.sample_rate).map_err(|e| {
            ProtocolError::new(
                ErrorCode::InvalidSetting,
                format!("format {}: {e}", s.format),
            )
        })?;
    }
    if let Some(t) = u.audio_transport {
        s.audio_transport = t;
    }
    if let Some(ChunkingUpdate {
        mode,
        max_delay_ms,
        min_chars,
        max_chars,
        live_max_tokens,
        live_max_audio_s,
    }) = u.chunking
    {
        let c = &mut s.chunking;
        c.mode = mode.unwrap_or(c.mode);
        c.max_delay_ms = max_delay_ms.unwrap_or(c.max_delay_ms);
        c.min_chars = min_chars.unwrap_or(c.min_chars);
        c.max_chars = max_chars.unwrap_or(c.max_chars);
        c.live_max_tokens = live_max_tokens.unwrap_or(c.live_max_tokens);
        c.live_max_audio_s = live_max_audio_s.unwrap_or(c.live_max_audio_s);
        if !(1..=MAX_LIVE_TOKENS).contains(&c.live_max_tokens) {
            return bad(format!(
                "chunking.live_max_tokens {} must be 1..={MAX_LIVE_TOKENS}",
                c.live_max_tokens
            ));
        }
        if !(c.live_max_audio_s.is_finite()
            && c.live_max_audio_s > 0.0
            && c.live_max_audio_s <= MAX_LIVE_AUDIO_S)
        {
            return bad(format!(
                "chunking.live_max_audio_s {} must be over 0 and at most {MAX_LIVE_AUDIO_S}",
                c.live_max_audio_s
            ));
        }
        if c.max_delay_ms > MAX_DELAY_MS {
            return bad(format!(
                "chunking.max_delay_ms {} is over 60000",
                c.max_delay_ms
            ));
        }
        if c.max_chars == 0 || c.max_chars > b.max_pending_chars {
            return bad(format!(
                "chunking.max_chars {} must be 1..={}",
                c.max_chars, b.max_pending_chars
            ));
        }
        if c.min_chars > c.max_chars {
            return bad(format!(
                "chunking.min_chars {} exceeds max_chars {}",
                c.min_chars, c.max_chars
            ));
        }
    }
    if let Some(VadUpdate {
        enabled,
        barge_in,
        threshold_db,
        min_speech_ms,
        min_silence_ms,
    }) = u.vad
    {
        let v = &mut s.vad;
        v.enabled = enabled.unwrap_or(v.enabled);
        v.barge_in = barge_in.unwrap_or(v.barge_in);
        v.threshold_db = threshold_db.unwrap_or(v.threshold_db);
        v.min_speech_ms = min_speech_ms.unwrap_or(v.min_speech_ms);
        v.min_silence_ms = min_silence_ms.unwrap_or(v.min_silence_ms);
        if !(v.threshold_db.is_finite() && (-120.0..=0.0).contains(&v.threshold_db)) {
            return bad(format!(
                "vad.threshold_db {} must be -120..=0 dBFS",
                v.threshold_db
            ));
        }
        if v.min_speech_ms > 5000 || v.min_silence_ms > 10_000 {
            return bad("vad.min_speech_ms must be <= 5000 and vad.min_silence_ms <= 10000".into());
        }
    }
    if let Some(a) = u.audio_acks {
        s.audio_acks = a;
    }
    if let Some(t) = u.timings {
        s.timings = t;
    }
    if let Some(g) = u.greedy {
        s.greedy = g;
    }
    if let Some(seed) = u.seed {
        s.seed = seed;
    }
    if let Some(f) = u.max_frames {
        s.max_frames = validate::max_frames(f, b.max_frames).map_err(refused)?;
    }
    if let Some(t) = u.text_mode {
        s.text_mode = t;
    }
    if let Some(p) = u.prebuffer_ms {
        if !(p.is_finite() && (0.0..=MAX_PREBUFFER_MS).contains(&p)) {
            return bad(format!(
                "prebuffer_ms {p} must be 0..={MAX_PREBUFFER_MS} (milliseconds the client buffers \
                 before it plays)"
            ));
        }
        s.prebuffer_ms = p;
        s.prebuffer_declared = true;
    }
    if s.chunking.mode == ChunkingMode::Live && s.text_mode != TextMode::Streaming {
        return bad(
            "chunking.mode live needs text_mode streaming: live text feeds the talker one token \
             per frame as it arrives, and prefill needs the whole text before the first frame \
             (set both in one session.update)"
                .into(),
        );
    }
    Ok(s)
}

/// The snapshot a new context takes: later `session.update`s do not change
/// a context already open.
pub fn ctx_settings(s: &SessionSettings, m: &Loaded) -> CtxSettings {
    let (speaker, voice) = match (m.kind(), &m.library) {
        // A voice removed since `session.update` chose it fails the
        // context, saying so (the library remembers what it deleted).
        (ModelKind::Base, Some(lib)) => (None, lib.resolve(&s.voice).map(Some)),
        (ModelKind::CustomVoice, _) => (Some(s.voice.clone()), Ok(None)),
        _ => (None, Ok(None)),
    };
    let (voice_clone, voice_error) = match voice {
        Ok(c) => (c, None),
        Err(e) => (None, Some(e.to_string())),
    };
    CtxSettings {
        speaker,
        voice_clone,
        voice_error,
        language: s.language.clone(),
        instruct: s.instruct.clone(),
        rate: s.sample_rate,
        format: s.format,
        transport: s.audio_transport,
        acks: s.audio_acks,
        timings: s.timings,
        options: validate::gen_options(m, s.greedy, s.seed, s.max_frames),
        text_mode: s.text_mode,
        prebuffer_ms: s.prebuffer_ms,
        prebuffer_declared: s.prebuffer_declared,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ChunkingMode;

    fn speakers() -> Speakers {
        Speakers::new(vec!["ryan".into(), "vivian".into()])
    }

    fn langs() -> Vec<String> {
        ["auto", "english", "chinese"].map(String::from).to_vec()
    }

    /// Applies `u` to the initial settings of a checkpoint with two
    /// speakers, a 100-frame cap and a 1000-character pending limit.
    fn applied(u: SessionUpdate) -> Result<SessionSettings, ProtocolError> {
        let (v, l) = (speakers(), langs());
        let b = Bounds {
            speakers: &v,
            languages: &l,
            max_frames: 100,
            max_pending_chars: 1000,
            stored: None,
            model: None,
        };
        apply(&initial(&v, 24000, 100, 200.0), u, &b)
    }

    fn invalid_setting(u: SessionUpdate) -> String {
        let e = applied(u).expect_err("refused");
        assert_eq!(e.code, ErrorCode::InvalidSetting);
        assert_eq!(e.valid, None);
        e.message
    }

    #[test]
    fn initial_settings_speak_the_first_speaker_at_the_native_rate() {
        let s = initial(&speakers(), 24000, 100, 200.0);
        assert_eq!(s.voice, "ryan");
        assert_eq!(s.language, "auto");
        assert_eq!((s.sample_rate, s.native_sample_rate), (24000, 24000));
        assert_eq!(s.format, AudioFormat::Pcm16);
        assert_eq!(s.audio_transport, AudioTransport::Binary);
        assert_eq!(s.max_frames, 100);
        assert!(!s.audio_acks && !s.greedy);
    }

    #[test]
    fn encoded_formats_take_their_codec_rates_and_g711_switches_to_8_khz() {
        let s = applied(SessionUpdate {
            format: Some(AudioFormat::Mulaw),
            ..Default::default()
        })
        .expect("valid");
        assert_eq!((s.format, s.sample_rate), (AudioFormat::Mulaw, 8000));
        let msg = invalid_setting(SessionUpdate {
            format: Some(AudioFormat::Alaw),
            sample_rate: Some(16000),
            ..Default::default()
        });
        assert!(msg.contains("alaw") && msg.contains("8000"), "{msg}");
        let msg = invalid_setting(SessionUpdate {
            format: Some(AudioFormat::OpusPackets),
            sample_rate: Some(44100),
            ..Default::default()
        });
        assert!(msg.contains("48000") && msg.contains("opus"), "{msg}");
        let s = applied(SessionUpdate {
            format: Some(AudioFormat::Aac),
            ..Default::default()
        })
        .expect("valid");
        assert_eq!((s.format, s.sample_rate), (AudioFormat::Aac, 24000));
    }

    /// The listener's prebuffer: any finite 0..=10 s, into every context
    /// opened after; anything else is refused, naming the field.
    #[test]
    fn a_declared_prebuffer_is_checked_and_taken() {
        let s = applied(SessionUpdate {
            prebuffer_ms: Some(750.0),
            ..Default::default()
        })
        .expect("valid");
        assert_eq!(s.prebuffer_ms, 750.0);
        // Declared: the scheduler models the player as holding it.
        assert!(s.prebuffer_declared);
        let first = initial(&speakers(), 24000, 100, 320.0);
        assert_eq!(first.prebuffer_ms, 320.0);
        assert!(!first.prebuffer_declared, "the server's is not declared");
        let other = applied(SessionUpdate {
            seed: Some(3),
            ..Default::default()
        })
        .unwrap();
        assert!(!other.prebuffer_declared);
        for ok in [0.0, MAX_PREBUFFER_MS] {
            let u = SessionUpdate {
                prebuffer_ms: Some(ok),
                ..Default::default()
            };
            assert_eq!(applied(u).map(|s| s.prebuffer_ms), Ok(ok));
        }
        for bad in [-1.0, 10_000.5, f64::NAN, f64::INFINITY] {
            let msg = invalid_setting(SessionUpdate {
                prebuffer_ms: Some(bad),
                ..Default::default()
            });
            assert!(
                msg.starts_with("prebuffer_ms ") && msg.contains("0..=10000"),
                "{msg}"
            );
        }
    }

    #[test]
    fn an_empty_update_changes_nothing() {
        assert_eq!(
            applied(SessionUpdate::default()),
            Ok(initial(&speakers(), 24000, 100, 200.0))
        );
    }

    #[test]
    fn voice_and_language_resolve_to_what_the_checkpoint_names() {
        let s = applied(SessionUpdate {
            voice: Some("Vivian".into()),
            language: Some("English".into()),
            instruct: Some(String::new()),
            ..Default::default()
        })
        .expect("valid");
        assert_eq!(s.voice, "vivian");
        assert_eq!(s.language, "english");
        assert_eq!(s.instruct, None, "an empty instruct clears it");
        // Any other text is kept as given: the official code templates a
        // blank instruct as it stands (only "" is no instruct).
        let s = applied(SessionUpdate {
            instruct: Some("  ".into()),
            ..Default::default()
        })
        .expect("valid");
        assert_eq!(s.instruct.as_deref(), Some("  "));
    }

    #[test]
    fn unknown_voice_and_language_list_the_valid_ones() {
        let e = applied(SessionUpdate {
            voice: Some("nobody".into()),
            ..Default::default()
        })
        .expect_err("refused");
        assert_eq!(e.code, ErrorCode::InvalidVoice);
        assert_eq!(e.message, "unknown voice \"nobody\"");
        assert_eq!(e.valid, Some(speakers().valid()));
        let e = applied(SessionUpdate {
            language: Some("Klingon".into()),
            ..Default::default()
        })
        .expect_err("refused");
        assert_eq!(e.code, ErrorCode::InvalidLanguage);
        assert_eq!(e.message, "unknown language \"klingon\"");
        assert_eq!(e.valid, Some(langs()));
    }

    #[test]
    fn update_is_all_or_nothing_a_late_bad_field_refuses_the_whole_update() {
        // The voice is valid and checked first; the frame cap is not.
        let msg = invalid_setting(SessionUpdate {
            voice: Some("vivian".into()),
            max_frames: Some(101),
            ..Default::default()
        });
        assert_eq!(msg, "max_frames 101 must be 1..=100");
        assert_eq!(
            invalid_setting(SessionUpdate {
                max_frames: Some(0),
                ..Default::default()
            }),
            "max_frames 0 must be 1..=100"
        );
    }

    #[test]
    fn sample_rate_out_of_range_names_the_range_in_hz() {
        let msg = invalid_setting(SessionUpdate {
            sample_rate: Some(protocol::MAX_SAMPLE_RATE + 1),
            ..Default::default()
        });
        assert_eq!(
            msg,
            format!(
                "sample_rate {} is out of range; use {}..={} Hz",
                protocol::MAX_SAMPLE_RATE + 1,
                protocol::MIN_SAMPLE_RATE,
                protocol::MAX_SAMPLE_RATE
            )
        );
    }

    #[test]
    fn live_chunking_needs_the_streaming_text_mode_and_bounded_cuts() {
        let live = |text_mode, tokens: Option<usize>, secs: Option<f64>| SessionUpdate {
            chunking: Some(ChunkingUpdate {
                mode: Some(ChunkingMode::Live),
                live_max_tokens: tokens,
                live_max_audio_s: secs,
                ..Default::default()
            }),
            text_mode,
            ..Default::default()
        };
        let s = applied(live(Some(TextMode::Streaming), Some(50), Some(20.0))).expect("valid");
        assert_eq!(
            (
                s.chunking.mode,
                s.chunking.live_max_tokens,
                s.chunking.live_max_audio_s
            ),
            (ChunkingMode::Live, 50, 20.0)
        );
        let m = invalid_setting(live(None, None, None));
        assert!(m.contains("needs text_mode streaming"), "{m}");
        assert_eq!(
            invalid_setting(live(Some(TextMode::Streaming), Some(0), None)),
            "chunking.live_max_tokens 0 must be 1..=2000"
        );
        let m = invalid_setting(live(Some(TextMode::Streaming), None, Some(f64::NAN)));
        assert!(m.contains("live_max_audio_s NaN"), "{m}");
    }

    #[test]
    fn chunking_update_keeps_absent_fields_and_checks_the_result() {
        let s = applied(SessionUpdate {
            chunking: Some(ChunkingUpdate {
                mode: Some(ChunkingMode::Manual),
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("valid");
        assert_eq!(
            s.chunking,
            Chunking {
                mode: ChunkingMode::Manual,
                ..Chunking::default()
            }
        );
        let chunking = |u: ChunkingUpdate| {
            invalid_setting(SessionUpdate {
                chunking: Some(u),
                ..Default::default()
            })
        };
        assert_eq!(
            chunking(ChunkingUpdate {
                max_delay_ms: Some(60_001),
                ..Default::default()
            }),
            "chunking.max_delay_ms 60001 is over 60000"
        );
        assert_eq!(
            chunking(ChunkingUpdate {
                max_chars: Some(1001),
                ..Default::default()
            }),
            "chunking.max_chars 1001 must be 1..=1000"
        );
        // min_chars is checked against the merged max_chars (default 300).
        assert_eq!(
            chunking(ChunkingUpdate {
                min_chars: Some(301),
                ..Default::default()
            }),
            "chunking.min_chars 301 exceeds max_chars 300"
        );
    }

    #[test]
    fn vad_threshold_and_durations_are_bounded() {
        let vad = |u: VadUpdate| {
            invalid_setting(SessionUpdate {
                vad: Some(u),
                ..Default::default()
            })
        };
        for db in [0.5, -120.5, f32::NAN] {
            let msg = vad(VadUpdate {
                threshold_db: Some(db),
                ..Default::default()
            });
            assert!(msg.starts_with("vad.threshold_db "), "{msg}");
        }
        assert_eq!(
            vad(VadUpdate {
                min_silence_ms: Some(10_001),
                ..Default::default()
            }),
            "vad.min_speech_ms must be <= 5000 and vad.min_silence_ms <= 10000"
        );
        let s = applied(SessionUpdate {
            vad: Some(VadUpdate {
                barge_in: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("valid");
        assert_eq!(
            s.vad,
            Vad {
                barge_in: false,
                ..Vad::default()
            }
        );
    }
}
