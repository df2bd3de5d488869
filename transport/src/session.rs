//! One WebSocket connection: a protocol session on one engine `Session`.
//!
//! A single task owns everything (settings, contexts, the engine stream in
//! flight, the resampler, the VAD) and waits on four things at once: the
//! next client message, the next engine event, the segmentation deadline,
//! and the server's drain signal. Nothing is shared with other sessions, so
//! a bad message here can only ever produce an `error` event here.
//!
//! Contexts are served in creation order, one engine request at a time: the
//! first open context speaks until it is ended and its audio is out (or it
//! is cancelled), then the next. Frames are sent as soon as a chunk arrives;
//! a send that cannot complete within [`SEND_TIMEOUT`] closes the connection
//! (the client stopped reading).
//!
//! Memory: everything a context holds (segments, chunk times, ack map) is
//! dropped with the context; across contexts the session keeps only a ring
//! of the last [`REMEMBERED_IDS`] finished ids (to tell "append after end"
//! from a new context) and [`VAD_CLOCK`] input-audio arrival stamps.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use tokio::sync::OwnedSemaphorePermit;
use tts_actors::metrics::Outcome;
use tts_actors::{ErrorKind, Event, Stream};
use tts_audio::StreamResampler;
use tts_models::{GenOptions, Request};

use crate::protocol::{
    self, AudioFormat, AudioHeader, AudioTransport, CancelReason, Chunking, ChunkingUpdate,
    ClientMessage, ContextMetrics, ErrorCode, InputAudio, Limits, ProtocolError, ServerMessage,
    SessionSettings, SessionUpdate, TextMode, Vad, VadUpdate,
};
use crate::record::Recorder;
use crate::segment::Segmenter;
use crate::server::{AppState, Drain, Loaded};
use crate::vad::{EnergyVad, VadEvent, VoiceActivity};

/// A client that takes no frame for this long is gone.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished context ids remembered per session.
pub const REMEMBERED_IDS: usize = 64;
/// Input-audio arrival stamps kept to date a speech onset (a hard cap; in
/// practice only the stamps within the detector's confirmation delay stay).
pub const VAD_CLOCK: usize = 256;
/// Longest context id.
pub const MAX_CONTEXT_ID: usize = 128;

/// Why the loop stopped.
struct Closed;

type Res<T = ()> = Result<T, Closed>;

/// What a context needs from the session settings, captured at creation.
#[derive(Clone, Debug)]
struct CtxSettings {
    speaker: String,
    language: String,
    instruct: Option<String>,
    rate: u32,
    format: AudioFormat,
    transport: AudioTransport,
    acks: bool,
    options: GenOptions,
    text_mode: TextMode,
}

struct Ctx {
    s: CtxSettings,
    seg: Segmenter,
    ready: VecDeque<String>,
    ended: bool,
    stream_id: Option<u32>,
    /// Next outgoing frame number.
    seq: u64,
    rec: Recorder,
    last_sent: Option<Instant>,
    /// Frames sent and not yet acknowledged by the client: (frame seq,
    /// engine chunk seq), for the segment in flight (`audio_acks` only).
    acks: VecDeque<(u64, u64)>,
}

impl Ctx {
    fn pending_chars(&self) -> usize {
        self.seg.pending_chars() + self.ready.iter().map(|s| s.chars().count()).sum::<usize>()
    }

    /// The next segment, merged with those queued behind it up to
    /// `max_chars` (text that piled up while the engine was busy is better
    /// spoken as one request than several).
    fn next_segment(&mut self, max_chars: usize) -> Option<String> {
        let mut text = self.ready.pop_front()?;
        while let Some(next) = self.ready.front() {
            if text.chars().count() + 1 + next.chars().count() > max_chars {
                break;
            }
            text.push(' ');
            text.push_str(next);
            self.ready.pop_front();
        }
        Some(text)
    }
}

struct Active {
    ctx: String,
    stream: Stream,
}

struct Conn {
    st: Arc<AppState>,
    m: Arc<Loaded>,
    engine: tts_actors::Session,
    settings: SessionSettings,
    contexts: HashMap<String, Ctx>,
    order: VecDeque<String>,
    finished: VecDeque<String>,
    active: Option<Active>,
    next_stream: u32,
    resampler: Option<StreamResampler>,
    vad: Box<dyn VoiceActivity>,
    vad_events: Vec<VadEvent>,
    /// (input time at the start of a piece, when it arrived).
    vad_clock: VecDeque<(f64, Instant)>,
    draining: bool,
    /// Last values reported to the shared gauges.
    reported: (i64, i64),
    out: Vec<f32>,
}

/// Runs one connection to its end.
pub async fn run(
    st: Arc<AppState>,
    m: Arc<Loaded>,
    mut ws: WebSocket,
    _permit: OwnedSemaphorePermit,
) {
    let _live = st.track();
    st.metrics.session_opened();
    let engine = m.engine.open_session();
    let settings = SessionSettings {
        voice: m.voices.default_speaker().unwrap_or_default().to_string(),
        language: "auto".into(),
        instruct: None,
        sample_rate: m.native_rate,
        native_sample_rate: m.native_rate,
        format: AudioFormat::Pcm16,
        audio_transport: AudioTransport::Binary,
        chunking: Chunking::default(),
        vad: Vad::default(),
        audio_acks: false,
        greedy: false,
        seed: 0,
        max_frames: m.max_frames,
        text_mode: TextMode::default(),
    };
    let mut c = Conn {
        vad: Box::new(EnergyVad::new(settings.vad.clone())),
        st,
        m,
        engine,
        settings,
        contexts: HashMap::new(),
        order: VecDeque::new(),
        finished: VecDeque::new(),
        active: None,
        next_stream: 1,
        resampler: None,
        vad_events: Vec::new(),
        vad_clock: VecDeque::new(),
        draining: false,
        reported: (0, 0),
        out: Vec::new(),
    };
    let _ = c.run(&mut ws).await;
    // Disconnected (or closed by us): whatever is left is abandoned. Dropping
    // the engine stream cancels its request.
    for _ in 0..c.contexts.len() {
        c.st.metrics.finished(false, "abandoned", None, None, None);
    }
    c.active = None;
    c.contexts.clear();
    c.finished.clear();
    c.vad_clock.clear();
    c.report_gauges();
    c.st.metrics.session_closed();
}

async fn next_event(active: &mut Option<Active>) -> Option<Event> {
    match active {
        Some(a) => a.stream.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

fn engine_code(kind: ErrorKind) -> ErrorCode {
    match kind {
        ErrorKind::AtCapacity => ErrorCode::AtCapacity,
        ErrorKind::SlowConsumer => ErrorCode::SlowConsumer,
        ErrorKind::ShuttingDown => ErrorCode::ShuttingDown,
        _ => ErrorCode::SynthesisFailed,
    }
}

impl Conn {
    async fn run(&mut self, ws: &mut WebSocket) -> Res {
        let created = ServerMessage::SessionCreated {
            protocol_version: protocol::PROTOCOL_VERSION,
            session_id: self.engine.id(),
            model: self.m.model_id.clone(),
            voices: self.m.voices.speakers().to_vec(),
            openai_voices: crate::voices::OPENAI_VOICES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            languages: self.m.languages.clone(),
            limits: Limits {
                max_text_message_bytes: protocol::MAX_TEXT_MESSAGE_BYTES,
                max_binary_message_bytes: protocol::MAX_BINARY_MESSAGE_BYTES,
                max_contexts: self.st.max_contexts,
                max_pending_chars: self.st.max_pending_chars,
                max_frames: self.m.max_frames,
            },
            session: self.settings.clone(),
        };
        send_json(ws, &created).await?;
        let mut drain = self.st.drain.subscribe();
        let mut drain_open = true;
        let d = *drain.borrow_and_update();
        self.on_drain(ws, d).await?;
        loop {
            self.pump(ws).await?;
            if self.draining && self.contexts.is_empty() {
                return close(ws, 1001, "server shutting down").await;
            }
            self.report_gauges();
            let deadline = self.deadline();
            tokio::select! {
                msg = ws.recv() => match msg {
                    Some(Ok(m)) => self.on_message(ws, m).await?,
                    None | Some(Err(_)) => return Err(Closed),
                },
                ev = next_event(&mut self.active) => self.on_event(ws, ev).await?,
                _ = sleep_until(deadline) => self.on_deadline(),
                r = drain.changed(), if drain_open => match r {
                    Ok(()) => {
                        let d = *drain.borrow_and_update();
                        self.on_drain(ws, d).await?;
                    }
                    Err(_) => drain_open = false,
                },
            }
        }
    }

    async fn on_drain(&mut self, ws: &mut WebSocket, d: Drain) -> Res {
        match d {
            Drain::Running => Ok(()),
            Drain::Draining => {
                self.draining = true;
                Ok(())
            }
            Drain::Force => {
                let now = Instant::now();
                let ids: Vec<String> = self.order.iter().cloned().collect();
                for id in ids {
                    self.cancel_context(ws, &id, CancelReason::Shutdown, now, None)
                        .await?;
                }
                close(ws, 1001, "server shutting down").await
            }
        }
    }

    fn report_gauges(&mut self) {
        let pending: i64 = self.contexts.values().map(|c| c.ready.len() as i64).sum();
        let retained = (self.contexts.len()
            + self.finished.len()
            + self.vad_clock.len()
            + self.contexts.values().map(|c| c.acks.len()).sum::<usize>())
            as i64;
        let m = &self.st.metrics;
        m.pending_segments
            .fetch_add(pending - self.reported.0, Ordering::Relaxed);
        m.session_retained_items
            .fetch_add(retained - self.reported.1, Ordering::Relaxed);
        self.reported = (pending, retained);
    }

    /// Deadline of the context that would speak next, while the engine is
    /// idle (when it is busy, waiting longer costs nothing and gives the
    /// segmenter a better boundary).
    fn deadline(&self) -> Option<Instant> {
        if self.active.is_some() {
            return None;
        }
        let head = self.order.front()?;
        self.contexts.get(head)?.seg.deadline()
    }

    fn on_deadline(&mut self) {
        let Some(head) = self.order.front() else {
            return;
        };
        if let Some(c) = self.contexts.get_mut(head) {
            let mut out = Vec::new();
            c.seg.on_deadline(Instant::now(), &mut out);
            c.ready.extend(out);
        }
    }

    /// Starts the next segment or finishes the head context, while the
    /// engine is idle.
    async fn pump(&mut self, ws: &mut WebSocket) -> Res {
        while self.active.is_none() {
            let Some(head) = self.order.front().cloned() else {
                return Ok(());
            };
            let max_chars = self.settings.chunking.max_chars;
            let Some(c) = self.contexts.get_mut(&head) else {
                self.order.pop_front();
                continue;
            };
            if let Some(text) = c.next_segment(max_chars) {
                self.start_segment(ws, &head, text).await?;
            } else if c.ended && c.seg.is_empty() {
                self.finish_context(ws, &head).await?;
            } else {
                return Ok(());
            }
        }
        Ok(())
    }

    async fn start_segment(&mut self, ws: &mut WebSocket, id: &str, text: String) -> Res {
        let c = self.contexts.get_mut(id).expect("head context exists");
        let req = Request {
            text,
            speaker: Some(c.s.speaker.clone()),
            language: c.s.language.clone(),
            instruct: c.s.instruct.clone(),
            text_streaming: c.s.text_mode == TextMode::Streaming,
            options: c.s.options.clone(),
        };
        c.rec.submitted(Instant::now());
        match self.engine.synthesize(req).await {
            Ok(stream) => {
                let c = self.contexts.get_mut(id).expect("head context exists");
                if c.stream_id.is_none() {
                    let sid = self.next_stream;
                    self.next_stream = self.next_stream.wrapping_add(1).max(1);
                    c.stream_id = Some(sid);
                    let rate = c.s.rate;
                    let format = c.s.format;
                    let native = self.m.native_rate;
                    match &mut self.resampler {
                        Some(r) if r.output_rate() == rate => r.reset(),
                        r => {
                            *r = Some(StreamResampler::new(native, rate).expect("rates validated"));
                        }
                    }
                    send_json(
                        ws,
                        &ServerMessage::ContextStarted {
                            context_id: id.to_string(),
                            stream_id: sid,
                            sample_rate: rate,
                            format,
                        },
                    )
                    .await?;
                }
                self.active = Some(Active {
                    ctx: id.to_string(),
                    stream,
                });
                Ok(())
            }
            Err(e) => {
                if e.kind() == ErrorKind::AtCapacity {
                    self.st.metrics.refused("at_capacity");
                }
                self.fail_context(ws, id, engine_code(e.kind()), e.to_string())
                    .await
            }
        }
    }

    async fn on_event(&mut self, ws: &mut WebSocket, ev: Option<Event>) -> Res {
        let Some(a) = &self.active else {
            return Ok(());
        };
        let id = a.ctx.clone();
        match ev {
            None | Some(Event::Cancelled { .. }) => {
                self.active = None;
                Ok(())
            }
            Some(Event::Started { .. }) => Ok(()),
            Some(Event::Audio(chunk)) => {
                let c = self.contexts.get_mut(&id).expect("active context exists");
                self.out.clear();
                if let Some(r) = &mut self.resampler {
                    r.step(&chunk.samples, &mut self.out);
                }
                let acks = c.s.acks;
                if self.out.is_empty() {
                    // Nothing to send: acknowledged with the frame before
                    // it (or now, if that was acknowledged already).
                    match c.acks.back_mut() {
                        Some(last) if acks => last.1 = chunk.seq,
                        _ => self.active.as_ref().expect("active").stream.ack(chunk.seq),
                    }
                    c.rec.chunk(Instant::now(), &chunk.samples, 0);
                    return Ok(());
                }
                let seq = c.seq;
                let out = std::mem::take(&mut self.out);
                let r = self.send_audio(ws, &id, &out, false).await;
                self.out = out;
                r?;
                let c = self.contexts.get_mut(&id).expect("active context exists");
                let now = Instant::now();
                c.rec.chunk(now, &chunk.samples, self.out.len());
                c.last_sent = Some(now);
                if acks {
                    c.acks.push_back((seq, chunk.seq));
                } else {
                    self.active.as_ref().expect("active").stream.ack(chunk.seq);
                }
                Ok(())
            }
            Some(Event::Done { metrics, .. }) => {
                let c = self.contexts.get_mut(&id).expect("active context exists");
                c.rec.segment_done(&metrics);
                c.acks.clear();
                self.active = None;
                Ok(())
            }
            Some(Event::Error { kind, error, .. }) => {
                self.active = None;
                self.fail_context(ws, &id, engine_code(kind), error.to_string())
                    .await
            }
        }
    }

    /// Sends one frame of context `id` (binary or base64) and advances its
    /// sequence number.
    async fn send_audio(
        &mut self,
        ws: &mut WebSocket,
        id: &str,
        samples: &[f32],
        terminal: bool,
    ) -> Res {
        let c = self.contexts.get_mut(id).expect("context exists");
        let seq = c.seq;
        c.seq += 1;
        let header = AudioHeader {
            stream_id: c.stream_id.unwrap_or(0),
            seq: seq as u32,
            sample_rate: c.s.rate,
            format: c.s.format,
            terminal,
        };
        let msg = match c.s.transport {
            AudioTransport::Binary => {
                Message::Binary(protocol::audio_frame(&header, samples).into())
            }
            AudioTransport::Base64 => {
                let mut bytes = Vec::new();
                protocol::encode_samples(samples, header.format, &mut bytes);
                Message::Text(
                    ServerMessage::Audio {
                        context_id: id.to_string(),
                        stream_id: header.stream_id,
                        seq,
                        terminal,
                        sample_rate: header.sample_rate,
                        format: header.format,
                        audio: protocol::base64_encode(&bytes),
                    }
                    .to_json()
                    .into(),
                )
            }
        };
        send(ws, msg).await
    }

    /// The head context is ended and all its audio is out: terminal frame
    /// (with the resampler's tail), then `context.done`.
    async fn finish_context(&mut self, ws: &mut WebSocket, id: &str) -> Res {
        let started = self.contexts.get(id).is_some_and(|c| c.stream_id.is_some());
        if started {
            let mut tail = Vec::new();
            if let Some(r) = &mut self.resampler {
                r.flush(&mut tail);
            }
            self.send_audio(ws, id, &tail, true).await?;
            if let Some(c) = self.contexts.get_mut(id) {
                c.rec.tail(tail.len());
            }
        }
        let Some(c) = self.remove_context(id) else {
            return Ok(());
        };
        let metrics = self.metrics_of(&c, Outcome::Done);
        self.st.metrics.finished(
            false,
            "done",
            metrics.ttfp_ms,
            metrics.rtf,
            metrics.underruns,
        );
        send_json(
            ws,
            &ServerMessage::ContextDone {
                context_id: id.to_string(),
                stream_id: c.stream_id,
                metrics,
            },
        )
        .await
    }

    async fn fail_context(
        &mut self,
        ws: &mut WebSocket,
        id: &str,
        code: ErrorCode,
        message: String,
    ) -> Res {
        if self.active.as_ref().is_some_and(|a| a.ctx == id) {
            self.active = None;
        }
        let Some(c) = self.remove_context(id) else {
            return Ok(());
        };
        if c.stream_id.is_some() {
            if let Some(r) = &mut self.resampler {
                r.reset();
            }
        }
        let metrics = self.metrics_of(&c, Outcome::Error);
        self.st.metrics.finished(false, "failed", None, None, None);
        send_json(
            ws,
            &ServerMessage::ContextFailed {
                context_id: id.to_string(),
                stream_id: c.stream_id,
                code,
                message,
                metrics,
            },
        )
        .await
    }

    /// Cancels context `id`: the engine request (if it is the one in flight)
    /// is dropped by every stage before `context.cancelled` goes out, and
    /// the context is gone from this session, so no frame of it can follow.
    async fn cancel_context(
        &mut self,
        ws: &mut WebSocket,
        id: &str,
        reason: CancelReason,
        t0: Instant,
        onset: Option<Instant>,
    ) -> Res {
        let mut late = 0;
        if self.active.as_ref().is_some_and(|a| a.ctx == id) {
            let a = self.active.take().expect("active");
            if let Ok(ack) = a.stream.cancel().ack().await {
                late = ack.late_audio_samples;
            }
        }
        let Some(c) = self.remove_context(id) else {
            return Ok(());
        };
        if c.stream_id.is_some() {
            if let Some(r) = &mut self.resampler {
                r.reset();
            }
        }
        let interruption_ms = match (onset, c.stream_id) {
            (Some(on), Some(_)) => Some(
                c.last_sent
                    .map_or(0.0, |t| t.saturating_duration_since(on).as_secs_f64() * 1e3),
            ),
            _ => None,
        };
        let metrics = self.metrics_of(&c, Outcome::Cancelled);
        self.st
            .metrics
            .finished(false, "cancelled", None, None, None);
        send_json(
            ws,
            &ServerMessage::ContextCancelled {
                context_id: id.to_string(),
                stream_id: c.stream_id,
                reason,
                cancel_ack_ms: t0.elapsed().as_secs_f64() * 1e3,
                late_audio_samples: late,
                interruption_ms,
                metrics,
            },
        )
        .await
    }

    fn metrics_of(&self, c: &Ctx, outcome: Outcome) -> ContextMetrics {
        c.rec.finish(
            outcome,
            self.m.native_rate,
            self.m.samples_per_frame,
            c.s.rate,
            self.st.prebuffer_ms,
        )
    }

    fn remove_context(&mut self, id: &str) -> Option<Ctx> {
        let c = self.contexts.remove(id)?;
        self.order.retain(|x| x != id);
        if self.finished.len() == REMEMBERED_IDS {
            self.finished.pop_front();
        }
        self.finished.push_back(id.to_string());
        Some(c)
    }

    async fn refuse(
        &mut self,
        ws: &mut WebSocket,
        e: ProtocolError,
        context_id: Option<&str>,
    ) -> Res {
        self.st.metrics.protocol_error();
        send_json(ws, &e.to_message(context_id.map(str::to_string))).await
    }

    async fn on_message(&mut self, ws: &mut WebSocket, msg: Message) -> Res {
        match msg {
            Message::Text(t) => match protocol::parse_client_text(t.as_str()) {
                Ok(m) => self.on_client(ws, m).await,
                Err(e) => self.refuse(ws, e, None).await,
            },
            Message::Binary(b) => match protocol::parse_client_binary(&b) {
                Ok(a) => self.on_input_audio(ws, a).await,
                Err(e) => self.refuse(ws, e, None).await,
            },
            Message::Close(_) => Err(Closed),
            // tungstenite answers pings itself.
            Message::Ping(_) | Message::Pong(_) => Ok(()),
        }
    }

    /// The context a flush/end/cancel/ack names, or the error to send.
    fn existing(&self, id: &str) -> Result<(), ProtocolError> {
        if self.contexts.contains_key(id) {
            Ok(())
        } else if self.finished.contains(&id.to_string()) {
            Err(ProtocolError::new(
                ErrorCode::OutOfOrder,
                format!("context {id:?} has already finished (done, cancelled or failed)"),
            ))
        } else {
            Err(ProtocolError::new(
                ErrorCode::UnknownContext,
                format!("no context {id:?}; a context starts with context.append"),
            ))
        }
    }

    async fn on_client(&mut self, ws: &mut WebSocket, m: ClientMessage) -> Res {
        match m {
            ClientMessage::SessionUpdate { session } => match self.apply(session) {
                Ok(()) => {
                    let s = self.settings.clone();
                    send_json(ws, &ServerMessage::SessionUpdated { session: s }).await
                }
                Err(e) => self.refuse(ws, e, None).await,
            },
            ClientMessage::ContextAppend { context_id, text } => {
                match self.append(&context_id, &text) {
                    Ok(()) => Ok(()),
                    Err(e) => self.refuse(ws, e, Some(&context_id)).await,
                }
            }
            ClientMessage::ContextFlush { context_id } => {
                if let Err(e) = self.existing(&context_id) {
                    return self.refuse(ws, e, Some(&context_id)).await;
                }
                let c = self.contexts.get_mut(&context_id).expect("exists");
                let mut out = Vec::new();
                c.seg.flush(&mut out);
                c.ready.extend(out);
                Ok(())
            }
            ClientMessage::ContextEnd { context_id } => {
                if let Err(e) = self.existing(&context_id) {
                    return self.refuse(ws, e, Some(&context_id)).await;
                }
                let c = self.contexts.get_mut(&context_id).expect("exists");
                if c.ended {
                    let e = ProtocolError::new(
                        ErrorCode::OutOfOrder,
                        format!("context {context_id:?} was already ended"),
                    );
                    return self.refuse(ws, e, Some(&context_id)).await;
                }
                c.ended = true;
                let mut out = Vec::new();
                c.seg.flush(&mut out);
                c.ready.extend(out);
                Ok(())
            }
            ClientMessage::ContextCancel { context_id } => {
                if let Err(e) = self.existing(&context_id) {
                    return self.refuse(ws, e, Some(&context_id)).await;
                }
                self.cancel_context(ws, &context_id, CancelReason::Client, Instant::now(), None)
                    .await
            }
            ClientMessage::AudioAck { context_id, seq } => {
                if self.finished.contains(&context_id) {
                    // A player acknowledges the last frames after
                    // context.done went out: a race, not an error.
                    return Ok(());
                }
                if let Err(e) = self.existing(&context_id) {
                    return self.refuse(ws, e, Some(&context_id)).await;
                }
                let c = self.contexts.get_mut(&context_id).expect("exists");
                if seq >= c.seq {
                    let e = ProtocolError::new(
                        ErrorCode::OutOfOrder,
                        format!(
                            "audio.ack for seq {seq} of context {context_id:?}, but only {} frame(s) were sent",
                            c.seq
                        ),
                    );
                    return self.refuse(ws, e, Some(&context_id)).await;
                }
                let mut upto = None;
                while c.acks.front().is_some_and(|&(s, _)| s <= seq) {
                    upto = c.acks.pop_front().map(|p| p.1);
                }
                if let (Some(e), Some(a)) = (upto, &self.active) {
                    if a.ctx == context_id {
                        a.stream.ack(e);
                    }
                }
                Ok(())
            }
            ClientMessage::InputAudioAppend {
                audio,
                sample_rate,
                format,
            } => match protocol::decode_input_audio(&audio, sample_rate, format) {
                Ok(a) => self.on_input_audio(ws, a).await,
                Err(e) => self.refuse(ws, e, None).await,
            },
            ClientMessage::Ping { id } => send_json(ws, &ServerMessage::Pong { id }).await,
        }
    }

    fn append(&mut self, id: &str, text: &str) -> Result<(), ProtocolError> {
        if !self.contexts.contains_key(id) {
            // The shared state, not `self.draining`: a message that raced
            // the drain notification is refused too.
            if self.draining || self.st.drain_state() != Drain::Running {
                return Err(ProtocolError::new(
                    ErrorCode::ShuttingDown,
                    "the server is shutting down: no new contexts",
                ));
            }
            if self.finished.contains(&id.to_string()) {
                return Err(ProtocolError::new(
                    ErrorCode::OutOfOrder,
                    format!("context {id:?} has already finished; use a new context_id"),
                ));
            }
            if id.is_empty() || id.len() > MAX_CONTEXT_ID {
                return Err(ProtocolError::new(
                    ErrorCode::InvalidMessage,
                    format!(
                        "context_id must be 1..={MAX_CONTEXT_ID} bytes, got {}",
                        id.len()
                    ),
                ));
            }
            if self.contexts.len() >= self.st.max_contexts {
                return Err(ProtocolError::new(
                    ErrorCode::TooManyContexts,
                    format!(
                        "{} contexts are open (the limit); end or cancel one first",
                        self.contexts.len()
                    ),
                ));
            }
            let s = self.ctx_settings();
            self.contexts.insert(
                id.to_string(),
                Ctx {
                    seg: Segmenter::new(self.settings.chunking.clone()),
                    s,
                    ready: VecDeque::new(),
                    ended: false,
                    stream_id: None,
                    seq: 0,
                    rec: Recorder::new(Instant::now()),
                    last_sent: None,
                    acks: VecDeque::new(),
                },
            );
            self.order.push_back(id.to_string());
        }
        let limit = self.st.max_pending_chars;
        let c = self.contexts.get_mut(id).expect("just ensured");
        if c.ended {
            return Err(ProtocolError::new(
                ErrorCode::OutOfOrder,
                format!("context.append after context.end for context {id:?}; start a new context"),
            ));
        }
        let n = text.chars().count();
        if c.pending_chars() + n > limit {
            return Err(ProtocolError::new(
                ErrorCode::TextTooLong,
                format!(
                    "context {id:?} would have {} characters waiting (limit {limit}); wait for its audio before appending more",
                    c.pending_chars() + n
                ),
            ));
        }
        let mut out = Vec::new();
        c.seg.push(text, Instant::now(), &mut out);
        c.ready.extend(out);
        Ok(())
    }

    fn ctx_settings(&self) -> CtxSettings {
        let s = &self.settings;
        let mut options = self.m.model.default_options();
        if s.greedy {
            options = options.greedy();
        }
        options.seed = s.seed;
        options.max_frames = s.max_frames;
        CtxSettings {
            speaker: s.voice.clone(),
            language: s.language.clone(),
            instruct: s.instruct.clone(),
            rate: s.sample_rate,
            format: s.format,
            transport: s.audio_transport,
            acks: s.audio_acks,
            options,
            text_mode: s.text_mode,
        }
    }

    /// Validates a `session.update` completely, then applies it (all or
    /// nothing).
    fn apply(&mut self, u: SessionUpdate) -> Result<(), ProtocolError> {
        let mut s = self.settings.clone();
        let bad = |m: String| Err(ProtocolError::new(ErrorCode::InvalidSetting, m));
        if let Some(v) = u.voice {
            match self.m.voices.resolve(&v) {
                Some(sp) => s.voice = sp,
                None => {
                    let mut e =
                        ProtocolError::new(ErrorCode::InvalidVoice, format!("unknown voice {v:?}"));
                    e.valid = Some(self.m.voices.valid());
                    return Err(e);
                }
            }
        }
        if let Some(l) = u.language {
            let l = l.to_lowercase();
            if !self.m.languages.contains(&l) {
                let mut e = ProtocolError::new(
                    ErrorCode::InvalidLanguage,
                    format!("unknown language {l:?}"),
                );
                e.valid = Some(self.m.languages.clone());
                return Err(e);
            }
            s.language = l;
        }
        if let Some(i) = u.instruct {
            s.instruct = (!i.trim().is_empty()).then_some(i);
        }
        if let Some(r) = u.sample_rate {
            if !(protocol::MIN_SAMPLE_RATE..=protocol::MAX_SAMPLE_RATE).contains(&r) {
                return bad(format!(
                    "sample_rate {r} is out of range; use {}..={} Hz",
                    protocol::MIN_SAMPLE_RATE,
                    protocol::MAX_SAMPLE_RATE
                ));
            }
            s.sample_rate = r;
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
            if c.max_delay_ms > 60_000 {
                return bad(format!(
                    "chunking.max_delay_ms {} is over 60000",
                    c.max_delay_ms
                ));
            }
            if c.max_chars == 0 || c.max_chars > self.st.max_pending_chars {
                return bad(format!(
                    "chunking.max_chars {} must be 1..={}",
                    c.max_chars, self.st.max_pending_chars
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
                return bad(
                    "vad.min_speech_ms must be <= 5000 and vad.min_silence_ms <= 10000".into(),
                );
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
            if f == 0 || f > self.m.max_frames {
                return bad(format!("max_frames {f} must be 1..={}", self.m.max_frames));
            }
            s.max_frames = f;
        }
        if let Some(t) = u.text_mode {
            s.text_mode = t;
        }
        if s.vad != self.settings.vad {
            self.vad = Box::new(EnergyVad::new(s.vad.clone()));
            self.vad_clock.clear();
        }
        self.settings = s;
        Ok(())
    }

    async fn on_input_audio(&mut self, ws: &mut WebSocket, a: InputAudio) -> Res {
        let now = Instant::now();
        // An onset detected in this piece lies at most min_speech_ms (plus
        // two windows of rounding) before it: older stamps are never looked
        // up again, so the clock stays a few entries long.
        let pos = self.vad.position_ms();
        let horizon = pos - self.settings.vad.min_speech_ms as f64 - 2.0 * crate::vad::WINDOW_MS;
        while self.vad_clock.len() >= 2 && self.vad_clock[1].0 <= horizon {
            self.vad_clock.pop_front();
        }
        if self.vad_clock.len() == VAD_CLOCK {
            self.vad_clock.pop_front();
        }
        self.vad_clock.push_back((pos, now));
        let mut events = std::mem::take(&mut self.vad_events);
        events.clear();
        self.vad.push(&a.samples, a.sample_rate, &mut events);
        let r = self.on_vad(ws, &events, now).await;
        self.vad_events = events;
        r
    }

    async fn on_vad(&mut self, ws: &mut WebSocket, events: &[VadEvent], now: Instant) -> Res {
        for &e in events {
            match e {
                VadEvent::SpeechStarted {
                    onset_ms,
                    detected_ms,
                } => {
                    // The onset arrived with the latest piece that starts
                    // at or before it.
                    let onset = self
                        .vad_clock
                        .iter()
                        .rev()
                        .find(|(start, _)| *start <= onset_ms + 1e-9)
                        .map_or(now, |(_, t)| *t);
                    send_json(
                        ws,
                        &ServerMessage::SpeechStarted {
                            audio_start_ms: onset_ms,
                            detection_ms: detected_ms - onset_ms,
                        },
                    )
                    .await?;
                    if self.settings.vad.barge_in && !self.order.is_empty() {
                        self.st.metrics.barge_in();
                        let ids: Vec<String> = self.order.iter().cloned().collect();
                        for id in ids {
                            self.cancel_context(ws, &id, CancelReason::BargeIn, now, Some(onset))
                                .await?;
                        }
                    }
                }
                VadEvent::SpeechStopped { end_ms } => {
                    send_json(
                        ws,
                        &ServerMessage::SpeechStopped {
                            audio_end_ms: end_ms,
                        },
                    )
                    .await?;
                }
            }
        }
        Ok(())
    }
}

async fn send(ws: &mut WebSocket, msg: Message) -> Res {
    match tokio::time::timeout(SEND_TIMEOUT, ws.send(msg)).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(Closed),
    }
}

async fn send_json(ws: &mut WebSocket, m: &ServerMessage) -> Res {
    send(ws, Message::Text(m.to_json().into())).await
}

async fn close(ws: &mut WebSocket, code: u16, reason: &str) -> Res {
    let _ = send(
        ws,
        Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })),
    )
    .await;
    Err(Closed)
}
