//! The messages between stages: one typed, versioned contract.
//!
//! Every value that crosses a stage boundary is defined here, so a stage can
//! be replaced (another precision, a batched implementation, another
//! process) knowing exactly what it receives and what it must emit.
//!
//! # Version
//! [`CONTRACT_VERSION`] changes whenever a field's meaning, a message, or an
//! ordering rule below changes. Version 1 is in-process: messages move owned
//! per-request state (the talker's prompt and KV cache, the predictor's RNG
//! stream) instead of serializing it.
//!
//! # Identity and staleness
//! - A request is named by [`RequestKey`] `{session, epoch}`. A session's
//!   epoch grows by one for every request it submits, so a key is never
//!   reused; the router's current epoch for the session is the only live one.
//! - Every message carries a [`Stamp`]: the key, the *sender's* worker
//!   generation and the time it was sent. A stage that restarts (panic) or is
//!   retired (stall) gets generation + 1; a receiver drops any message whose
//!   sender generation is not the sender stage's current one, and any data
//!   message for a request it holds no state for. Both are counted
//!   ([`crate::EngineStats`]), never delivered.
//!
//! # Flow (one request)
//! ```text
//! router ──StartRequest──▶ talker ──TalkerToken(frame 0, +open)──▶ predictor
//!                            ▲                                      │
//!                            └──────FrameFeedback(frame t)──────────┤
//!                                                                   ▼
//! router ◀──AudioOut::{Chunk(seq), Finished}── code2wav ◀──FrameForDecode(t)
//! ```
//! Talker and predictor alternate per request (exactly one token circulates
//! per request), so different requests overlap across the two LM stages and
//! code2wav overlaps both on its own thread.
//!
//! # Ordering rules
//! 1. Per (sender, receiver) pair messages arrive in send order (bounded
//!    FIFO mailboxes; a sender that finds a mailbox full waits, in order).
//! 2. Per-request state travels with the first message that needs it
//!    (`TalkerToken::open`, `FrameForDecode::first`); a stage creates state
//!    only from such a message.
//! 3. [`DropRequest`] is sent talker → predictor → code2wav, each after the
//!    previous acknowledged, so nothing produced for the request before the
//!    drop can reach a stage after that stage dropped it (no resurrection).
//! 4. [`AudioChunk::seq`] is contiguous from 0 per request; exactly
//!    one chunk, the last, has `terminal` set (it is empty when the end is
//!    known only after the last audio went out: EOS, or zero frames);
//!    `Finished` always follows it.
//! 5. Live text (version 2): a request whose text is still arriving
//!    carries a [`crate::flow::LiveFeed`] in its [`StartRequest`]; the
//!    caller appends text rows to it and the talker takes them before each
//!    step, holding the request (not stepping it, never feeding padding)
//!    while the next step would need a row that has not arrived.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Message;
use tts_models::codec::DecoderState;
use tts_models::{PredictorState, StopReason, TalkerOutput, TalkerState};

use crate::flow::FlowGate;

/// Bumped on any change to the messages or rules in this module.
pub const CONTRACT_VERSION: u32 = 2;

/// The three model stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StageKind {
    Talker,
    CodePredictor,
    Code2Wav,
}

impl StageKind {
    pub const ALL: [StageKind; 3] = [
        StageKind::Talker,
        StageKind::CodePredictor,
        StageKind::Code2Wav,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            StageKind::Talker => "talker",
            StageKind::CodePredictor => "code_predictor",
            StageKind::Code2Wav => "code2wav",
        }
    }

    pub fn parse(s: &str) -> Option<StageKind> {
        StageKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl std::fmt::Display for StageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A session: one client conversation, at most one active request at a time.
pub type SessionId = u64;
/// Worker generation of a stage: 0 at start, +1 per restart or retirement.
pub type Generation = u64;

/// Names one request: the session and the session's epoch when it was
/// submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct RequestKey {
    pub session: SessionId,
    pub epoch: u64,
}

impl std::fmt::Display for RequestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s{}e{}", self.session, self.epoch)
    }
}

/// Carried by every message.
#[derive(Clone, Copy, Debug)]
pub struct Stamp {
    pub key: RequestKey,
    /// Generation of the stage that sent the message (the router's messages
    /// carry 0: the router is not restarted).
    pub generation: Generation,
    pub sent_at: Instant,
}

impl Stamp {
    pub fn new(key: RequestKey, generation: Generation) -> Self {
        Stamp {
            key,
            generation,
            sent_at: Instant::now(),
        }
    }
}

/// Per-stage time of one request so far; rides on the token that
/// circulates between the LM stages, then on to code2wav.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageTimes {
    /// Talker prefill and steps (compute).
    pub talker: Duration,
    /// Code predictor (compute).
    pub code_predictor: Duration,
    /// Code2wav (compute).
    pub code2wav: Duration,
    /// Time messages of this request waited between being sent and being
    /// processed, summed over every hand-off (queueing in mailboxes and
    /// behind other requests' work).
    pub handoff: Duration,
}

/// Router → talker: start a request (all state the LM stages need).
pub struct StartRequest {
    pub stamp: Stamp,
    pub talker: TalkerState,
    /// Forwarded to the predictor with the first token.
    pub predictor: PredictorState,
    /// Frames at most (`GenOptions::max_frames`).
    pub max_frames: usize,
    /// The request's flow gate: the talker pauses it while the consumer is
    /// behind.
    pub gate: Arc<FlowGate>,
    /// Live text: the rows of text that arrives after the start; the talker
    /// holds the request while it has none to take.
    pub live: Option<Arc<crate::flow::LiveFeed>>,
}

/// What the talker picked for frame `frame_index`.
pub enum TokenKind {
    /// Codebook-0 token plus the hidden state that produced it.
    C0(TalkerOutput),
    /// No more frames: `frame_index` frames were made.
    End(StopReason),
}

/// Talker → predictor.
pub struct TalkerToken {
    pub stamp: Stamp,
    pub frame_index: u64,
    pub kind: TokenKind,
    /// The frame made from this token is the request's last (`max_frames`).
    pub last: bool,
    /// The predictor's state, on the first token of a request only.
    pub open: Option<Box<PredictorState>>,
    pub times: StageTimes,
}

/// Predictor → talker: a finished frame to feed back (never sent for the
/// last frame).
pub struct FrameFeedback {
    pub stamp: Stamp,
    pub frame_index: u64,
    pub codes: Vec<u32>,
    pub times: StageTimes,
}

/// Predictor → code2wav: a finished frame, or the end of the request.
pub struct FrameForDecode {
    pub stamp: Stamp,
    pub frame_index: u64,
    /// `num_code_groups` codes; `None` for a bare end marker.
    pub codes: Option<Vec<u32>>,
    /// First message of the request: code2wav opens its decoder state.
    pub first: bool,
    /// With `first`: the state to open it from (an ICL clone's decoder
    /// primed with the reference); None: a fresh one.
    pub decoder_start: Option<Box<DecoderState>>,
    /// Set on the request's final message.
    pub stop: Option<StopReason>,
    /// When the predictor finished the frame (TTFT / TPOT).
    pub produced_at: Instant,
    /// LM times so far (final on the message with `stop`).
    pub times: StageTimes,
}

/// A chunk of audio for one request. Made once by code2wav and handed on
/// unchanged through the router to the consumer ([`crate::AudioChunk`],
/// inside [`crate::Event::Audio`]).
#[derive(Clone, Debug, PartialEq)]
pub struct AudioChunk {
    pub request: RequestKey,
    /// Contiguous from 0 per request.
    pub seq: u64,
    /// Codec frames `first_frame .. first_frame + frames` made this audio.
    pub first_frame: u64,
    pub frames: usize,
    /// The codes of those frames (`frames × num_code_groups`, frame-major).
    pub codes: Vec<u32>,
    pub samples: Vec<f32>,
    pub sample_rate: u32,
    /// The request's last chunk (empty when the end was known only after
    /// the last audio went out).
    pub terminal: bool,
    /// Generation of the code2wav worker that decoded it.
    pub generation: Generation,
}

/// Code2wav → router.
pub enum AudioOut {
    /// Decoded audio. The chunk's `request` and `generation` are its
    /// stamp: the router checks them as it checks any sender's.
    Chunk(AudioChunk),
    /// The request is complete; always the last message for the key.
    Finished {
        stamp: Stamp,
        frames: u64,
        stop: StopReason,
        times: StageTimes,
        first_frame_at: Option<Instant>,
        last_frame_at: Option<Instant>,
    },
    /// A stage rejected the request without crashing (e.g. a code outside
    /// the codebook).
    Failed { stamp: Stamp, message: String },
    /// The codec decoded a NaN or infinite sample (broken weights): the
    /// request fails rather than deliver it. `seq` is the chunk's number,
    /// `index` the first bad sample in it.
    NonFinite {
        stamp: Stamp,
        seq: u64,
        index: usize,
        value: f32,
    },
}

/// A stage's data-path input, wrapped so every stage has one mailbox type.
pub struct Work<T>(pub T);

impl<T: Send + 'static> Message for Work<T> {
    type Result = ();
}

/// Router → each stage: forget a request (cancel, failure, disconnect).
/// Answers whether the stage held state for it.
pub struct DropRequest {
    pub key: RequestKey,
}

impl Message for DropRequest {
    type Result = bool;
}

/// Stage → router: the stage caught a panic; these requests lost state.
pub struct StageFailed {
    pub stage: StageKind,
    pub old_generation: Generation,
    pub new_generation: Generation,
    pub requests: Vec<RequestKey>,
    pub message: String,
}

impl Message for StageFailed {
    type Result = ();
}

impl AudioOut {
    /// The request and the sender's generation (the stamp's identity).
    pub fn origin(&self) -> (RequestKey, Generation) {
        match self {
            AudioOut::Chunk(c) => (c.request, c.generation),
            AudioOut::Finished { stamp, .. }
            | AudioOut::Failed { stamp, .. }
            | AudioOut::NonFinite { stamp, .. } => (stamp.key, stamp.generation),
        }
    }
}

impl Message for AudioOut {
    type Result = ();
}
