//! Session settings: the defaults a connection starts with, `session.update`
//! validated completely and applied all or nothing, and the snapshot a
//! context takes of them when it opens. Pure (no socket, no engine), so each
//! rule is unit-tested here.

use tts_models::GenOptions;

use crate::protocol::{
    self, AudioFormat, AudioTransport, Chunking, ChunkingUpdate, ErrorCode, ProtocolError,
    SessionSettings, SessionUpdate, TextMode, Vad, VadUpdate,
};
use crate::state::Loaded;
use crate::validate::{self, Rejected};
use crate::voices::Voices;

/// Longest `chunking.max_delay_ms`: a minute of waiting for a boundary is
/// already more than any client means.
const MAX_DELAY_MS: u64 = 60_000;

/// What a `session.update` is checked against: the checkpoint and the
/// server's limits.
pub struct Bounds<'a> {
    pub voices: &'a Voices,
    pub languages: &'a [String],
    /// The server's frame cap per request.
    pub max_frames: usize,
    /// The server's appended-but-unsynthesized characters per context.
    pub max_pending_chars: usize,
}

impl<'a> Bounds<'a> {
    pub fn of(m: &'a Loaded, max_pending_chars: usize) -> Self {
        Bounds {
            voices: &m.voices,
            languages: &m.languages,
            max_frames: m.max_frames,
            max_pending_chars,
        }
    }
}

/// What a context needs from the session settings, captured at creation.
#[derive(Clone, Debug)]
pub struct CtxSettings {
    pub speaker: String,
    pub language: String,
    pub instruct: Option<String>,
    pub rate: u32,
    pub format: AudioFormat,
    pub transport: AudioTransport,
    pub acks: bool,
    pub options: GenOptions,
    pub text_mode: TextMode,
}

/// A new connection's settings: the first speaker, `auto`, the model's own
/// rate, PCM16 in binary frames.
pub fn initial(voices: &Voices, native_rate: u32, max_frames: usize) -> SessionSettings {
    SessionSettings {
        voice: voices.default_speaker().unwrap_or_default().to_string(),
        language: "auto".into(),
        instruct: None,
        sample_rate: native_rate,
        native_sample_rate: native_rate,
        format: AudioFormat::Pcm16,
        audio_transport: AudioTransport::Binary,
        chunking: Chunking::default(),
        vad: Vad::default(),
        audio_acks: false,
        greedy: false,
        seed: 0,
        max_frames,
        text_mode: TextMode::default(),
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
    }
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
        s.voice = validate::voice(b.voices, &v).map_err(refused)?;
    }
    if let Some(l) = u.language {
        s.language = validate::language(b.languages, &l).map_err(refused)?;
    }
    if let Some(i) = u.instruct {
        s.instruct = (!i.trim().is_empty()).then_some(i);
    }
    if let Some(r) = u.sample_rate {
        s.sample_rate = validate::sample_rate(r).map_err(refused)?;
    }
    if let Some(f) = u.format {
        s.format = f;
    }
    if let Some(t) = u.audio_transport {
        s.audio_transport = t;
    }
    if let Some(ChunkingUpdate {
        mode,
        max_delay_ms,
        min_chars,
        max_chars,
    }) = u.chunking
    {
        let c = &mut s.chunking;
        c.mode = mode.unwrap_or(c.mode);
        c.max_delay_ms = max_delay_ms.unwrap_or(c.max_delay_ms);
        c.min_chars = min_chars.unwrap_or(c.min_chars);
        c.max_chars = max_chars.unwrap_or(c.max_chars);
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
    Ok(s)
}

/// The snapshot a new context takes: later `session.update`s do not change
/// a context already open.
pub fn ctx_settings(s: &SessionSettings, m: &Loaded) -> CtxSettings {
    CtxSettings {
        speaker: s.voice.clone(),
        language: s.language.clone(),
        instruct: s.instruct.clone(),
        rate: s.sample_rate,
        format: s.format,
        transport: s.audio_transport,
        acks: s.audio_acks,
        options: validate::gen_options(m, s.greedy, s.seed, s.max_frames),
        text_mode: s.text_mode,
    }
}
