//! [`RealtimeConnection`]: one WebSocket connection on one engine session —
//! the loop that waits on the socket, the engine, the segmentation and ack
//! deadlines, the liveness timers, eviction and the drain signal; and the
//! dispatch of each client message. Each context's life on the wire
//! (`context.started`, frames, `context.done` / `failed` / `cancelled`) is
//! in `lifecycle`. The rules it applies live beside it: settings in
//! `settings`, the context queue in `queue`, barge-in decisions in
//! `barge_in`, liveness in `liveness`, frame encoding and bounded sends in
//! `output`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::OwnedSemaphorePermit;
use tts_actors::{Event, Session, Stream};
use tts_audio::StreamResampler;

use crate::protocol::{
    self, CancelReason, ChunkingMode, ClientMessage, ErrorCode, InputAudio, Limits, ProtocolError,
    ServerMessage, SessionSettings, TextMode,
};
use crate::state::{AppState, Drain, Loaded};
use crate::vad::{EnergyVad, VadEvent, VoiceActivity};
use crate::validate::engine_message;

use super::barge_in::{self, VadClock};
use super::live::LiveCtx;
use super::liveness::{Due, Liveness};
use super::port::{close, Closed, Incoming, Port, Res};
use super::queue::{ContextQueue, Ctx, QueueLimits};
use super::settings::{self, Bounds, CtxSettings};

/// The engine request in flight, and the context it speaks for.
pub(super) struct Active {
    pub(super) ctx: String,
    pub(super) stream: Stream,
}

/// One realtime WebSocket connection (the transport's session; the engine's
/// is the `tts_actors::Session` inside it).
pub(super) struct RealtimeConnection {
    pub(super) st: Arc<AppState>,
    pub(super) m: Arc<Loaded>,
    pub(super) engine: tts_actors::Session,
    pub(super) settings: SessionSettings,
    pub(super) queue: ContextQueue,
    pub(super) active: Option<Active>,
    pub(super) next_stream: u32,
    pub(super) resampler: Option<StreamResampler>,
    pub(super) vad: Box<dyn VoiceActivity>,
    pub(super) vad_events: Vec<VadEvent>,
    pub(super) vad_clock: VadClock,
    pub(super) draining: bool,
    /// Last values reported to the shared gauges.
    pub(super) reported: (i64, i64),
    pub(super) out: Vec<f32>,
    /// The last time the open contexts moved: the client's text (an append
    /// with words in it, a flush, an end) or the engine's audio. With
    /// contexts open and nothing moving for `AppState::text_wait`, they
    /// fail with `text_timeout` ([`Self::on_text_wait`]).
    pub(super) last_progress: Instant,
}

/// The engine session as a context's listener sees it: its declared
/// prebuffer (`session.update` `prebuffer_ms`) paces its chunks, counts its
/// continuity and is what the scheduler models its player as holding; a
/// context that declared none is the engine's (the same `--prebuffer-ms`
/// for pacing and continuity, a player that starts at the first chunk).
pub(super) fn listener(engine: &Session, s: &CtxSettings) -> Session {
    if s.prebuffer_declared {
        engine.with_prebuffer(Duration::from_secs_f64(s.prebuffer_ms / 1e3))
    } else {
        engine.clone()
    }
}

/// Runs one session on `port` to its end.
pub async fn run(
    st: Arc<AppState>,
    m: Arc<Loaded>,
    mut port: impl Port,
    _permit: OwnedSemaphorePermit,
) {
    let _live = st.track();
    st.metrics.session_opened();
    tracing::info!(target: "tts_transport::realtime", "session open");
    let engine = m.engine.open_session();
    let mut settings = settings::initial(&m.speakers, m.native_rate, m.max_frames, st.prebuffer_ms);
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
        last_progress: Instant::now(),
    };
    let _ = c.run(&mut port).await;
    // Disconnected (or closed by us): whatever is left is abandoned. Dropping
    // the engine stream cancels its request.
    for _ in 0..c.queue.len() {
        c.st.metrics.finished(false, "abandoned", None, None, None);
    }
    c.active = None;
    for id in c.queue.ids() {
        if let Some(mut ctx) = c.queue.remove(&id) {
            ctx.abandon_live();
        }
    }
    c.queue.clear();
    c.vad_clock.clear();
    c.report_gauges();
    c.st.metrics.session_closed();
    tracing::info!(target: "tts_transport::realtime", "session closed");
}

async fn next_event(active: &mut Option<Active>) -> Option<Event> {
    match active {
        Some(a) => a.stream.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

// The connection loop and message routing.
impl RealtimeConnection {
    async fn run(&mut self, ws: &mut impl Port) -> Res {
        let created = ServerMessage::SessionCreated {
            protocol_version: protocol::PROTOCOL_VERSION,
            session_id: self.engine.id(),
            model: self.m.model_id.clone(),
            voices: self
                .m
                .speakers
                .names()
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
            openai_voices: crate::speakers::OPENAI_VOICES
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
        ws.send(&created).await?;
        let mut drain = self.st.drain.subscribe();
        let mut drain_open = true;
        let d = *drain.borrow_and_update();
        self.on_drain(ws, d).await?;
        let st = self.st.clone();
        let registered = st.registry.register();
        let epoch = st.registry.epoch();
        let mut live = Liveness::new(st.liveness, Instant::now());
        let mut got_message = false;
        loop {
            self.pump(ws).await?;
            ws.flush().await?;
            if self.draining && self.queue.is_empty() {
                return close(ws, 1001, "server shutting down").await;
            }
            self.report_gauges();
            live.activity(!self.queue.is_empty(), got_message, Instant::now());
            got_message = false;
            registered
                .slot
                .set_idle(live.idle_since().map(Instant::into_std), epoch);
            if self.queue.is_empty() {
                // Nothing waits: the text-wait clock starts with the next
                // context.
                self.last_progress = Instant::now();
            }
            let text_deadline = (!self.queue.is_empty()).then(|| self.last_progress + st.text_wait);
            let deadline = self.deadline();
            let held = self.held();
            let ack_deadline = self.ack_deadline();
            let wake = live.next_wake();
            tokio::select! {
                input = ws.recv() => {
                    live.heard(Instant::now());
                    got_message = input.is_message();
                    self.on_input(ws, input).await?
                }
                _ = tokio::time::sleep_until(wake) => match live.poll(Instant::now()) {
                    Due::Ping(payload) => ws.ping(payload).await?,
                    Due::DeadPeer => {
                        let t = st.liveness.pong_within.as_secs_f64();
                        return close(ws, 1001, &format!("no answer to a ping within {t:.0} s")).await;
                    }
                    Due::Idle => {
                        let t = st.liveness.idle_after.as_secs_f64();
                        return close(ws, 1001, &format!("idle for {t:.0} s (no message, no open context)")).await;
                    }
                    Due::Nothing => {}
                },
                _ = registered.slot.evicted() => {
                    return close(ws, 1001, "idle session closed to make room for a new client").await;
                }
                ev = next_event(&mut self.active), if !held => {
                    self.last_progress = Instant::now();
                    self.on_event(ws, ev).await?
                }
                _ = sleep_until(text_deadline) => self.on_text_wait(ws).await?,
                _ = sleep_until(deadline) => self.queue.on_deadline(Instant::now()),
                _ = sleep_until(ack_deadline) => self.on_ack_stall(ws).await?,
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

    /// The open contexts waited `text_wait` for the client's text with
    /// nothing to speak: each fails with `text_timeout`, freeing its engine
    /// request, its memory and (with no context left) the session's claim
    /// to its slot. Keepalives (pings, acks, whitespace-only appends, input
    /// audio) do not reset the clock: a client that holds a context open
    /// without text cannot hold a slot for ever.
    async fn on_text_wait(&mut self, ws: &mut impl Port) -> Res {
        let wait = self.st.text_wait;
        if self.last_progress.elapsed() < wait {
            return Ok(());
        }
        let message = format!(
            "no text for {:.0} s while this context waited for it, and nothing left to speak (the server's --text-wait-timeout-s); \
             send context.end (or flush) when the text is complete, and open a new context for the next reply",
            wait.as_secs_f64()
        );
        for id in self.queue.ids() {
            self.fail_context(ws, &id, ErrorCode::TextTimeout, message.clone())
                .await?;
        }
        self.last_progress = Instant::now();
        Ok(())
    }

    async fn on_drain(&mut self, ws: &mut impl Port, d: Drain) -> Res {
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

    pub(super) async fn refuse(
        &mut self,
        ws: &mut impl Port,
        e: ProtocolError,
        context_id: Option<&str>,
    ) -> Res {
        self.st.metrics.protocol_error();
        ws.send(&e.to_message(context_id.map(str::to_string))).await
    }

    async fn on_input(&mut self, ws: &mut impl Port, input: Incoming) -> Res {
        match input {
            Incoming::Client(m) => self.on_client(ws, m).await,
            Incoming::InputAudio(a) => self.on_input_audio(ws, a).await,
            Incoming::Settings(s) => self.install(ws, *s).await,
            Incoming::Refused(e) => self.refuse(ws, e, None).await,
            Incoming::Heard { .. } => Ok(()),
            Incoming::Close(code, reason) => close(ws, code, &reason).await,
            Incoming::Closed => Err(Closed),
        }
    }

    /// Settings that passed `settings::apply`: in force from the next
    /// context on, answered with `session.updated`.
    async fn install(&mut self, ws: &mut impl Port, s: SessionSettings) -> Res {
        if s.vad != self.settings.vad {
            self.vad = Box::new(EnergyVad::new(s.vad.clone()));
            self.vad_clock.clear();
        }
        self.settings = s;
        let s = self.settings.clone();
        ws.send(&ServerMessage::SessionUpdated { session: s }).await
    }

    async fn on_client(&mut self, ws: &mut impl Port, m: ClientMessage) -> Res {
        match m {
            ClientMessage::SessionUpdate { session } => {
                let b = Bounds::of(&self.m, self.st.max_pending_chars);
                match settings::apply(&self.settings, *session, &b) {
                    Ok(s) => self.install(ws, s).await,
                    Err(e) => self.refuse(ws, e, None).await,
                }
            }
            ClientMessage::ContextAppend { context_id, text } => {
                if !text.trim().is_empty() {
                    self.last_progress = Instant::now();
                }
                // The shared state, not only `self.draining`: a message that
                // raced the drain notification is refused too.
                let draining = self.draining || self.st.drain_state() != Drain::Running;
                let limits = QueueLimits {
                    max_contexts: self.st.max_contexts,
                    max_pending_chars: self.st.max_pending_chars,
                };
                let now = Instant::now();
                let opens = self.queue.get(&context_id).is_none();
                let ctx_settings = opens.then(|| settings::ctx_settings(&self.settings, &self.m));
                // A new live context: its request is made (and checked) now,
                // so a refusal names the problem before any audio.
                let live = if let Some(cs) = ctx_settings
                    .as_ref()
                    .filter(|_| self.settings.chunking.mode == ChunkingMode::Live)
                    .filter(|_| !self.queue.is_finished(&context_id))
                {
                    if let Some(why) = &cs.voice_error {
                        let e = ProtocolError::new(
                            ErrorCode::InvalidSetting,
                            format!("chunking.mode live: {why}"),
                        );
                        return self.refuse(ws, e, Some(&context_id)).await;
                    }
                    let template = live_template(cs);
                    match listener(&self.engine, cs).live(template.clone()) {
                        Ok(first) => Some(LiveCtx::new(template, first, &self.settings.chunking)),
                        Err(e) => {
                            let e = ProtocolError::new(
                                ErrorCode::InvalidSetting,
                                format!("chunking.mode live: {}", engine_message(&e)),
                            );
                            return self.refuse(ws, e, Some(&context_id)).await;
                        }
                    }
                } else {
                    None
                };
                let chunking = self.settings.chunking.clone();
                let new_ctx = move || {
                    let cs = ctx_settings.expect("made for a context that opens");
                    let mut c = Ctx::new(cs, chunking, now);
                    c.live = live;
                    c
                };
                match self
                    .queue
                    .append(&context_id, &text, now, draining, limits, new_ctx)
                {
                    Ok(()) => self.drive_if_live(ws, &context_id).await,
                    Err(e) => self.refuse(ws, e, Some(&context_id)).await,
                }
            }
            ClientMessage::ContextFlush { context_id } => {
                self.last_progress = Instant::now();
                if let Err(e) = self.queue.existing(&context_id) {
                    return self.refuse(ws, e, Some(&context_id)).await;
                }
                self.queue.get_mut(&context_id).expect("exists").flush();
                self.drive_if_live(ws, &context_id).await
            }
            ClientMessage::ContextEnd { context_id } => {
                self.last_progress = Instant::now();
                match self.queue.end(&context_id) {
                    Ok(()) => self.drive_if_live(ws, &context_id).await,
                    Err(e) => self.refuse(ws, e, Some(&context_id)).await,
                }
            }
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
            ClientMessage::Ping { id } => ws.send(&ServerMessage::Pong { id }).await,
        }
    }

    /// A live context's text changed: feed it on (if it speaks now).
    async fn drive_if_live(&mut self, ws: &mut impl Port, id: &str) -> Res {
        if self.queue.get(id).is_some_and(|c| c.live.is_some()) {
            self.drive_live(ws, id).await?;
        }
        Ok(())
    }

    async fn on_input_audio(&mut self, ws: &mut impl Port, a: InputAudio) -> Res {
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

    async fn on_vad(&mut self, ws: &mut impl Port, events: &[VadEvent], now: Instant) -> Res {
        for &e in events {
            match e {
                VadEvent::SpeechStarted {
                    onset_ms,
                    detected_ms,
                } => {
                    let onset = self.vad_clock.arrival(onset_ms).unwrap_or(now);
                    ws.send(&ServerMessage::SpeechStarted {
                        audio_start_ms: onset_ms,
                        detection_ms: detected_ms - onset_ms,
                    })
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
                    ws.send(&ServerMessage::SpeechStopped {
                        audio_end_ms: end_ms,
                    })
                    .await?;
                }
            }
        }
        Ok(())
    }
}

/// The engine request a live context's utterances are made from (its text
/// arrives through the live request).
fn live_template(s: &CtxSettings) -> tts_actors::Request {
    tts_actors::Request {
        text: String::new(),
        speaker: s.speaker.clone(),
        language: s.language.clone(),
        instruct: s.instruct.clone(),
        voice_clone: s.voice_clone.clone(),
        text_streaming: s.text_mode == TextMode::Streaming,
        options: s.options.clone(),
    }
}
