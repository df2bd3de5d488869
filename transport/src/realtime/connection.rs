//! [`RealtimeConnection`]: one WebSocket connection on one engine session —
//! the loop that waits on the socket, the engine, the segmentation deadline
//! and the drain signal; the dispatch of each client message; and each
//! context's life on the wire (`context.started`, frames, `context.done` /
//! `failed` / `cancelled`). The rules it applies live beside it: settings
//! in `settings`, the context queue in `queue`, barge-in decisions in
//! `barge_in`, frame encoding and bounded sends in `output`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::ws::{Message, WebSocket};
use tokio::sync::OwnedSemaphorePermit;
use tts_actors::metrics::Outcome;
use tts_actors::Request;
use tts_actors::{ErrorKind, Event, Stream};
use tts_audio::StreamResampler;

use crate::protocol::{
    self, CancelReason, ClientMessage, ContextMetrics, ErrorCode, InputAudio, Limits,
    ProtocolError, ServerMessage, SessionSettings, TextMode,
};
use crate::state::{AppState, Drain, Loaded};
use crate::vad::{EnergyVad, VadEvent, VoiceActivity};

use super::barge_in::{self, VadClock};
use super::output::{audio_message, close, send, send_json, Closed, Res};
use super::queue::{ContextQueue, Ctx, Next, QueueLimits};
use super::settings::{self, Bounds};

/// The engine request in flight, and the context it speaks for.
struct Active {
    ctx: String,
    stream: Stream,
}

/// One realtime WebSocket connection (the transport's session; the engine's
/// is the `tts_actors::Session` inside it).
struct RealtimeConnection {
    st: Arc<AppState>,
    m: Arc<Loaded>,
    engine: tts_actors::Session,
    settings: SessionSettings,
    queue: ContextQueue,
    active: Option<Active>,
    next_stream: u32,
    resampler: Option<StreamResampler>,
    vad: Box<dyn VoiceActivity>,
    vad_events: Vec<VadEvent>,
    vad_clock: VadClock,
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
    let mut settings = settings::initial(&m.voices, m.native_rate, m.max_frames);
    // The family's official text mode (Base streams its text in).
    if m.kind().default_text_streaming() {
        settings.text_mode = TextMode::Streaming;
    }
    let mut c = RealtimeConnection {
        vad: Box::new(EnergyVad::new(settings.vad.clone())),
        st,
        m,
        engine,
        settings,
        queue: ContextQueue::default(),
        active: None,
        next_stream: 1,
        resampler: None,
        vad_events: Vec::new(),
        vad_clock: VadClock::default(),
        draining: false,
        reported: (0, 0),
        out: Vec::new(),
    };
    let _ = c.run(&mut ws).await;
    // Disconnected (or closed by us): whatever is left is abandoned. Dropping
    // the engine stream cancels its request.
    for _ in 0..c.queue.len() {
        c.st.metrics.finished(false, "abandoned", None, None, None);
    }
    c.active = None;
    c.queue.clear();
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

// The connection loop and message routing.
impl RealtimeConnection {
    async fn run(&mut self, ws: &mut WebSocket) -> Res {
        let created = ServerMessage::SessionCreated {
            protocol_version: protocol::PROTOCOL_VERSION,
            session_id: self.engine.id(),
            model: self.m.model_id.clone(),
            voices: self
                .m
                .voices
                .speakers()
                .iter()
                .cloned()
                .chain(
                    self.m
                        .library
                        .iter()
                        .flat_map(|l| l.list())
                        .map(|r| r.name.as_str().to_string()),
                )
                .collect(),
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
            if self.draining && self.queue.is_empty() {
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
                _ = sleep_until(deadline) => self.queue.on_deadline(Instant::now()),
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
                for id in self.queue.ids() {
                    self.cancel_context(ws, &id, CancelReason::Shutdown, now, None)
                        .await?;
                }
                close(ws, 1001, "server shutting down").await
            }
        }
    }

    fn report_gauges(&mut self) {
        let pending = self.queue.pending_segments() as i64;
        let retained = (self.queue.retained() + self.vad_clock.len()) as i64;
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
        self.queue.deadline()
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

    async fn on_client(&mut self, ws: &mut WebSocket, m: ClientMessage) -> Res {
        match m {
            ClientMessage::SessionUpdate { session } => {
                let b = Bounds::of(&self.m, self.st.max_pending_chars);
                match settings::apply(&self.settings, session, &b) {
                    Ok(s) => {
                        if s.vad != self.settings.vad {
                            self.vad = Box::new(EnergyVad::new(s.vad.clone()));
                            self.vad_clock.clear();
                        }
                        self.settings = s;
                        let s = self.settings.clone();
                        send_json(ws, &ServerMessage::SessionUpdated { session: s }).await
                    }
                    Err(e) => self.refuse(ws, e, None).await,
                }
            }
            ClientMessage::ContextAppend { context_id, text } => {
                // The shared state, not only `self.draining`: a message that
                // raced the drain notification is refused too.
                let draining = self.draining || self.st.drain_state() != Drain::Running;
                let limits = QueueLimits {
                    max_contexts: self.st.max_contexts,
                    max_pending_chars: self.st.max_pending_chars,
                };
                let now = Instant::now();
                let (settings, m) = (&self.settings, &self.m);
                let new_ctx = || {
                    Ctx::new(
                        settings::ctx_settings(settings, m),
                        settings.chunking.clone(),
                        now,
                    )
                };
                match self
                    .queue
                    .append(&context_id, &text, now, draining, limits, new_ctx)
                {
                    Ok(()) => Ok(()),
                    Err(e) => self.refuse(ws, e, Some(&context_id)).await,
                }
            }
            ClientMessage::ContextFlush { context_id } => {
                if let Err(e) = self.queue.existing(&context_id) {
                    return self.refuse(ws, e, Some(&context_id)).await;
                }
                self.queue.get_mut(&context_id).expect("exists").flush();
                Ok(())
            }
            ClientMessage::ContextEnd { context_id } => match self.queue.end(&context_id) {
                Ok(()) => Ok(()),
                Err(e) => self.refuse(ws, e, Some(&context_id)).await,
            },
            ClientMessage::ContextCancel { context_id } => {
                if let Err(e) = self.queue.existing(&context_id) {
                    return self.refuse(ws, e, Some(&context_id)).await;
                }
                self.cancel_context(ws, &context_id, CancelReason::Client, Instant::now(), None)
                    .await
            }
            ClientMessage::AudioAck { context_id, seq } => self.on_ack(ws, context_id, seq).await,
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

    /// `audio.ack`: the client played frames up to `seq`; the engine may
    /// run ahead by what that frees.
    async fn on_ack(&mut self, ws: &mut WebSocket, context_id: String, seq: u64) -> Res {
        if self.queue.is_finished(&context_id) {
            // A player acknowledges the last frames after context.done went
            // out: a race, not an error.
            return Ok(());
        }
        if let Err(e) = self.queue.existing(&context_id) {
            return self.refuse(ws, e, Some(&context_id)).await;
        }
        let c = self.queue.get_mut(&context_id).expect("exists");
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

    async fn on_input_audio(&mut self, ws: &mut WebSocket, a: InputAudio) -> Res {
        let now = Instant::now();
        let pos = self.vad.position_ms();
        self.vad_clock
            .stamp(pos, self.settings.vad.min_speech_ms, now);
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
                    let onset = self.vad_clock.arrival(onset_ms).unwrap_or(now);
                    send_json(
                        ws,
                        &ServerMessage::SpeechStarted {
                            audio_start_ms: onset_ms,
                            detection_ms: detected_ms - onset_ms,
                        },
                    )
                    .await?;
                    if barge_in::interrupts(&self.settings.vad, self.queue.len()) {
                        self.st.metrics.barge_in();
                        for id in self.queue.ids() {
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

// Each context's life on the wire.
impl RealtimeConnection {
    /// Starts the next segment or finishes the head context, while the
    /// engine is idle.
    async fn pump(&mut self, ws: &mut WebSocket) -> Res {
        while self.active.is_none() {
            match self.queue.next(self.settings.chunking.max_chars) {
                Next::Start { id, text } => self.start_segment(ws, &id, text).await?,
                Next::Finish { id } => self.finish_context(ws, &id).await?,
                Next::Wait => return Ok(()),
            }
        }
        Ok(())
    }

    async fn start_segment(&mut self, ws: &mut WebSocket, id: &str, text: String) -> Res {
        let c = self.queue.get_mut(id).expect("head context exists");
        let req = Request {
            text,
            speaker: c.s.speaker.clone(),
            language: c.s.language.clone(),
            instruct: c.s.instruct.clone(),
            voice_clone: c.s.voice_clone.clone(),
            text_streaming: c.s.text_mode == TextMode::Streaming,
            options: c.s.options.clone(),
        };
        c.rec.submitted(Instant::now());
        match self.engine.synthesize(req).await {
            Ok(stream) => {
                let c = self.queue.get_mut(id).expect("head context exists");
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
                let c = self.queue.get_mut(&id).expect("active context exists");
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
                let c = self.queue.get_mut(&id).expect("active context exists");
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
                let c = self.queue.get_mut(&id).expect("active context exists");
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
        let c = self.queue.get_mut(id).expect("context exists");
        let seq = c.take_seq();
        let msg = audio_message(id, c.stream_id, seq, &c.s, samples, terminal);
        send(ws, msg).await
    }

    /// The head context is ended and all its audio is out: terminal frame
    /// (with the resampler's tail), then `context.done`.
    async fn finish_context(&mut self, ws: &mut WebSocket, id: &str) -> Res {
        let started = self.queue.get(id).is_some_and(|c| c.stream_id.is_some());
        if started {
            let mut tail = Vec::new();
            if let Some(r) = &mut self.resampler {
                r.flush(&mut tail);
            }
            self.send_audio(ws, id, &tail, true).await?;
            if let Some(c) = self.queue.get_mut(id) {
                c.rec.tail(tail.len());
            }
        }
        let Some(c) = self.queue.remove(id) else {
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
        let Some(c) = self.queue.remove(id) else {
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
        let Some(c) = self.queue.remove(id) else {
            return Ok(());
        };
        if c.stream_id.is_some() {
            if let Some(r) = &mut self.resampler {
                r.reset();
            }
        }
        let interruption_ms = barge_in::interruption_ms(onset, c.stream_id.is_some(), c.last_sent);
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
}
