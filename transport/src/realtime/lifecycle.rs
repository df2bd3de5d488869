//! Each context's life on the wire, for [`RealtimeConnection`]: starting
//! segments, turning engine events into frames, `context.done` / `failed` /
//! `cancelled`; and the `audio_acks` bound, counted over a whole context
//! (the pause once enough audio is unacknowledged, the failure once a frame
//! has waited too long for its ack). The loop and message routing that call
//! these are in `connection`.

use std::time::Duration;

use tokio::time::Instant;

use tts_actors::metrics::Outcome;
use tts_actors::Request;
use tts_actors::{ErrorKind, Event, Stream};
use tts_audio::StreamResampler;

use crate::protocol::{
    CancelReason, ContextMetrics, ErrorCode, ProtocolError, ServerMessage, TextMode,
};
use crate::validate::engine_message;

use super::barge_in;
use super::connection::{listener, Active, RealtimeConnection};
use super::encode::FrameEncoder;
use super::port::{AudioOut, Port, Res};
use super::queue::{Ctx, Next, Unacked};
use super::timings::{to_msg, Settled};

fn engine_code(kind: ErrorKind) -> ErrorCode {
    match kind {
        ErrorKind::AtCapacity => ErrorCode::AtCapacity,
        ErrorKind::SlowConsumer => ErrorCode::SlowConsumer,
        ErrorKind::ShuttingDown => ErrorCode::ShuttingDown,
        _ => ErrorCode::SynthesisFailed,
    }
}

// Each context's life on the wire, and the audio_acks bound.
impl RealtimeConnection {
    /// `audio.ack`: the client played frames up to `seq`; the engine may
    /// run ahead by what that frees.
    pub(super) async fn on_ack(&mut self, ws: &mut impl Port, context_id: String, seq: u64) -> Res {
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
        let upto = c.acknowledge(seq);
        if let (Some(e), Some(a)) = (upto, &self.active) {
            if a.ctx == context_id {
                a.stream.ack(e);
            }
        }
        Ok(())
    }

    /// Whether the speaking context has the pause bound of unacknowledged
    /// audio out (`audio_acks`): its engine events wait in the engine's
    /// bounded stream, and its next segment does not start.
    pub(super) fn held(&self) -> bool {
        let pause = (self.st.ack_pause_s * self.m.native_rate as f64) as u64;
        self.queue
            .head()
            .and_then(|id| self.queue.get(id))
            .is_some_and(|c| c.s.acks && c.unacked_samples >= pause.max(1))
    }

    /// When the speaking context's oldest unacknowledged frame passes the
    /// failure bound.
    pub(super) fn ack_deadline(&self) -> Option<Instant> {
        let c = self.queue.get(self.queue.head()?)?;
        Some(c.oldest_unacked()? + Duration::from_secs_f64(self.st.ack_fail_s))
    }

    /// A frame sent `ack_fail_s` ago is still unacknowledged: the client is
    /// not playing what it was sent, and the context fails.
    pub(super) async fn on_ack_stall(&mut self, ws: &mut impl Port) -> Res {
        let Some(id) = self.queue.head().map(str::to_string) else {
            return Ok(());
        };
        let Some(c) = self.queue.get(&id) else {
            return Ok(());
        };
        let limit = Duration::from_secs_f64(self.st.ack_fail_s);
        if c.oldest_unacked().is_none_or(|t| t.elapsed() < limit) {
            return Ok(());
        }
        let message = format!(
            "slow consumer: {:.2} s of audio unacknowledged, the oldest frame (seq {}) sent {:.1} s ago \
             (limit {:.1} s; generation pauses at {:.1} s unacknowledged); send audio.ack as frames play",
            c.unacked_samples as f64 / self.m.native_rate as f64,
            c.acks.front().map_or(0, |f| f.seq),
            limit.as_secs_f64(),
            limit.as_secs_f64(),
            self.st.ack_pause_s,
        );
        self.fail_context(ws, &id, ErrorCode::SlowConsumer, message)
            .await
    }

    /// Starts the next segment or finishes the head context, while the
    /// engine is idle.
    pub(super) async fn pump(&mut self, ws: &mut impl Port) -> Res {
        while self.active.is_none() {
            if self.held() {
                // The client is a pause's worth of audio behind: the next
                // segment waits for its acknowledgements.
                return Ok(());
            }
            match self.queue.next(self.settings.chunking.max_chars) {
                Next::Start { id, text } => self.start_segment(ws, &id, text).await?,
                Next::Finish { id } => self.finish_context(ws, &id).await?,
                Next::Live { id } => {
                    self.drive_live(ws, &id).await?;
                    if self.active.is_none() && self.queue.head() == Some(id.as_str()) {
                        // Waiting for text (or for its first word).
                        return Ok(());
                    }
                }
                Next::Wait => return Ok(()),
            }
        }
        Ok(())
    }

    pub(super) async fn start_segment(
        &mut self,
        ws: &mut impl Port,
        id: &str,
        text: String,
    ) -> Res {
        let c = self.queue.get_mut(id).expect("head context exists");
        if let Some(why) = c.s.voice_error.clone() {
            // Its stored voice is gone: the same failure the model would
            // give a request without a voice, saying which and why.
            return self
                .fail_context(ws, id, ErrorCode::SynthesisFailed, why)
                .await;
        }
        if let Some(t) = &mut c.timing {
            t.speak(&text);
        }
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
        c.segments += 1;
        let session = listener(&self.engine, &c.s);
        match session.synthesize(req).await {
            Ok(stream) => self.attach_stream(ws, id, stream).await,
            Err(e) => {
                if e.kind() == ErrorKind::AtCapacity {
                    self.st.metrics.refused("at_capacity");
                }
                self.fail_context(ws, id, engine_code(e.kind()), engine_message(&e))
                    .await
            }
        }
    }

    /// The engine request for context `id` is running: its first one sends
    /// `context.started`; its events are read from now on.
    pub(super) async fn attach_stream(
        &mut self,
        ws: &mut impl Port,
        id: &str,
        stream: Stream,
    ) -> Res {
        let c = self.queue.get_mut(id).expect("head context exists");
        if c.s.acks {
            // `audio.ack` is sent as frames are played: the engine
            // schedules this stream by what its listener has left.
            stream.acks_report_playback();
        }
        if c.stream_id.is_none() {
            let sid = self.next_stream;
            self.next_stream = self.next_stream.wrapping_add(1).max(1);
            c.stream_id = Some(sid);
            let rate = c.s.rate;
            let format = c.s.format;
            let native = self.m.native_rate;
            match FrameEncoder::new(format, rate) {
                Ok(e) => c.enc = Some(e),
                Err(e) => {
                    // Rates were validated with the settings: a codec that
                    // still refuses fails this context only.
                    drop(stream); // cancels its request
                    let msg = format!("cannot encode {format} at {rate} Hz: {e}");
                    return self.fail_context(ws, id, ErrorCode::Internal, msg).await;
                }
            }
            match &mut self.resampler {
                Some(r) if r.output_rate() == rate => r.reset(),
                r => {
                    *r = Some(StreamResampler::new(native, rate).expect("rates validated"));
                }
            }
            ws.send(&ServerMessage::ContextStarted {
                context_id: id.to_string(),
                stream_id: sid,
                sample_rate: rate,
                format,
            })
            .await?;
        }
        self.active = Some(Active {
            ctx: id.to_string(),
            stream,
        });
        Ok(())
    }

    /// Live context `id` (the head): hands the text it has to its live
    /// request as the cut rule allows, closes the request at a flush, the
    /// end or a cut, starts the next request once the previous one is done,
    /// and finishes the context when all is spoken.
    pub(super) async fn drive_live(&mut self, ws: &mut impl Port, id: &str) -> Res {
        if self.queue.head() != Some(id) || self.active.as_ref().is_some_and(|a| a.ctx != id) {
            // Another context speaks first: the text waits.
            return Ok(());
        }
        let (rate, spf) = (self.m.native_rate, self.m.samples_per_frame);
        loop {
            let Some(c) = self.queue.get_mut(id) else {
                return Ok(());
            };
            let max_frames = c.s.options.max_frames;
            let Some(l) = c.live.as_mut() else {
                return Ok(());
            };
            if l.req.is_none() {
                if l.spoken() {
                    if self.active.is_none() {
                        return self.finish_context(ws, id).await;
                    }
                    return Ok(());
                }
                if !l.wants_request() || self.active.is_some() {
                    return Ok(());
                }
                // The text after a cut or a flush: a new utterance.
                match listener(&self.engine, &c.s).live(l.template.clone()) {
                    Ok(r) => l.next_request(r),
                    Err(e) => {
                        let msg = engine_message(&e);
                        return self.fail_context(ws, id, engine_code(e.kind()), msg).await;
                    }
                }
            }
            let Some(t) = l.take(l.progress(rate, spf, max_frames)) else {
                return Ok(());
            };
            if t.cut {
                self.st.metrics.live_cut();
            }
            if let Some(tm) = &mut c.timing {
                tm.speak(&t.text);
            }
            let req = l.req.as_mut().expect("a request takes the text");
            if t.close && !req.started() && format!("{}{}", req.text(), t.text).trim().is_empty() {
                // An utterance of nothing (a flush or end with only
                // whitespace): no request.
                l.req = None;
                l.closed = false;
                continue;
            }
            let mut r = if t.text.is_empty() {
                Ok(None)
            } else {
                req.push(&t.text).await
            };
            if t.close {
                r = match r {
                    Ok(s) => req.close().await.map(|s2| s.or(s2)),
                    e => e,
                };
            }
            match r {
                Ok(Some(stream)) => {
                    l.utterances += 1;
                    c.rec.submitted(Instant::now());
                    c.segments += 1;
                    self.attach_stream(ws, id, stream).await?;
                }
                Ok(None) => {}
                Err(e) => {
                    if e.kind() == ErrorKind::AtCapacity {
                        self.st.metrics.refused("at_capacity");
                    }
                    let msg = engine_message(&e);
                    return self.fail_context(ws, id, engine_code(e.kind()), msg).await;
                }
            }
        }
    }

    pub(super) async fn on_event(&mut self, ws: &mut impl Port, ev: Option<Event>) -> Res {
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
                let samples = chunk.samples.len() as u64;
                if let Some(l) = &mut c.live {
                    l.heard(samples);
                }
                let mut payloads = Vec::new();
                let encoded = match &mut c.enc {
                    Some(e) => e.push(&self.out, &mut payloads),
                    None => Ok(()),
                };
                if let Err(e) = encoded {
                    let msg = format!("the {} encoder failed: {e}", c.s.format);
                    return self.fail_context(ws, &id, ErrorCode::Internal, msg).await;
                }
                // The timings this audio settles go out before it.
                if let Some(settled) = c.timing.as_mut().map(|t| t.audio(&self.out)) {
                    self.send_timings(ws, &id, settled).await?;
                }
                let c = self.queue.get_mut(&id).expect("active context exists");
                if payloads.is_empty() {
                    // Nothing to send (no samples yet, or a codec holding
                    // a partial frame): acknowledged with the frame before
                    // it (or now, if that was acknowledged already).
                    let segment = c.segments;
                    match c.acks.back_mut() {
                        Some(last) if acks && last.segment == segment => {
                            last.chunk = chunk.seq;
                            last.samples += samples;
                            c.unacked_samples += samples;
                        }
                        _ => self.active.as_ref().expect("active").stream.ack(chunk.seq),
                    }
                    c.rec.chunk(Instant::now(), &chunk.samples, 0);
                    return Ok(());
                }
                // The chunk is played once its last frame is.
                let seq = c.seq + payloads.len() as u64 - 1;
                let mut r = Ok(());
                for p in &payloads {
                    r = self.send_audio(ws, &id, p, false).await;
                    if r.is_err() {
                        break;
                    }
                }
                r?;
                let c = self.queue.get_mut(&id).expect("active context exists");
                let now = Instant::now();
                c.rec.chunk(now, &chunk.samples, self.out.len());
                c.last_sent = Some(now);
                if acks {
                    c.acks.push_back(Unacked {
                        seq,
                        chunk: chunk.seq,
                        segment: c.segments,
                        samples,
                        sent: now,
                    });
                    c.unacked_samples += samples;
                } else {
                    self.active.as_ref().expect("active").stream.ack(chunk.seq);
                }
                Ok(())
            }
            Some(Event::Done { metrics, .. }) => {
                let c = self.queue.get_mut(&id).expect("active context exists");
                if let Some(settled) = c.timing.as_mut().map(|t| t.utterance_done()) {
                    self.send_timings(ws, &id, settled).await?;
                }
                let c = self.queue.get_mut(&id).expect("active context exists");
                c.rec.segment_done(&metrics);
                if let Some(l) = &mut c.live {
                    l.request_done(metrics.frames.unwrap_or(0));
                }
                // Unacknowledged frames stay counted: the bound is the
                // context's, across its segments.
                self.active = None;
                Ok(())
            }
            Some(Event::Error { kind, error, .. }) => {
                self.active = None;
                self.fail_context(ws, &id, engine_code(kind), engine_message(&error))
                    .await
            }
        }
    }

    /// Sends the timings `s` settled for context `id` (nothing when none).
    pub(super) async fn send_timings(&mut self, ws: &mut impl Port, id: &str, s: Settled) -> Res {
        if s.is_empty() {
            return Ok(());
        }
        let Some(c) = self.queue.get(id) else {
            return Ok(());
        };
        let (words, chars) = to_msg(&s);
        ws.send(&ServerMessage::Timings {
            context_id: id.to_string(),
            stream_id: c.stream_id,
            seq: c.seq,
            words,
            chars,
        })
        .await
    }

    /// Sends one frame of context `id` (binary or base64; `payload` in the
    /// context's format) and advances its sequence number.
    pub(super) async fn send_audio(
        &mut self,
        ws: &mut impl Port,
        id: &str,
        payload: &[u8],
        terminal: bool,
    ) -> Res {
        let c = self.queue.get_mut(id).expect("context exists");
        let seq = c.take_seq();
        ws.send_audio(AudioOut {
            context_id: id,
            stream_id: c.stream_id,
            seq,
            settings: &c.s,
            payload,
            terminal,
        })
        .await
    }

    /// The head context is ended and all its audio is out: the resampler's
    /// tail and the encoder's flush, the last frame terminal, then
    /// `context.done`.
    pub(super) async fn finish_context(&mut self, ws: &mut impl Port, id: &str) -> Res {
        let started = self.queue.get(id).is_some_and(|c| c.stream_id.is_some());
        let settled = self
            .queue
            .get_mut(id)
            .and_then(|c| c.timing.as_mut().map(|t| t.finish()));
        if let Some(settled) = settled {
            self.send_timings(ws, id, settled).await?;
        }
        if started {
            let mut tail = Vec::new();
            if let Some(r) = &mut self.resampler {
                r.flush(&mut tail);
            }
            let c = self.queue.get_mut(id).expect("head context exists");
            let mut payloads = Vec::new();
            let flushed = match &mut c.enc {
                Some(e) => e.finish(&tail, &mut payloads),
                None => FrameEncoder::new(c.s.format, c.s.rate)
                    .and_then(|mut e| e.finish(&tail, &mut payloads)),
            };
            if let Err(e) = flushed {
                let msg = format!("the {} encoder failed: {e}", c.s.format);
                return self.fail_context(ws, id, ErrorCode::Internal, msg).await;
            }
            let last = payloads.len().saturating_sub(1);
            for (i, p) in payloads.iter().enumerate() {
                self.send_audio(ws, id, p, i == last).await?;
            }
            if let Some(c) = self.queue.get_mut(id) {
                c.rec.tail(tail.len());
            }
        }
        let Some(c) = self.queue.remove(id) else {
            return Ok(());
        };
        let metrics = self.metrics_of(&c, Outcome::Done);
        log_context(id, c.s.speaker.as_deref(), c.text_chars, "done", &metrics);
        self.st.metrics.finished(
            false,
            "done",
            metrics.ttfp_ms,
            metrics.rtf,
            metrics.underruns,
        );
        ws.send(&ServerMessage::ContextDone {
            context_id: id.to_string(),
            stream_id: c.stream_id,
            metrics,
        })
        .await
    }

    pub(super) async fn fail_context(
        &mut self,
        ws: &mut impl Port,
        id: &str,
        code: ErrorCode,
        message: String,
    ) -> Res {
        if self.active.as_ref().is_some_and(|a| a.ctx == id) {
            self.active = None;
        }
        let Some(mut c) = self.queue.remove(id) else {
            return Ok(());
        };
        c.abandon_live();
        if c.stream_id.is_some() {
            if let Some(r) = &mut self.resampler {
                r.reset();
            }
        }
        let metrics = self.metrics_of(&c, Outcome::Error);
        log_context(id, c.s.speaker.as_deref(), c.text_chars, "failed", &metrics);
        tracing::warn!(target: "tts_transport::realtime", context = id, code = ?code, %message, "context failed");
        self.st.metrics.finished(false, "failed", None, None, None);
        ws.send(&ServerMessage::ContextFailed {
            context_id: id.to_string(),
            stream_id: c.stream_id,
            code,
            message,
            metrics,
        })
        .await
    }

    /// Cancels context `id`: the engine request (if it is the one in flight)
    /// is dropped by every stage before `context.cancelled` goes out, and
    /// the context is gone from this session, so no frame of it can follow.
    pub(super) async fn cancel_context(
        &mut self,
        ws: &mut impl Port,
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
        let Some(mut c) = self.queue.remove(id) else {
            return Ok(());
        };
        c.abandon_live();
        if c.stream_id.is_some() {
            if let Some(r) = &mut self.resampler {
                r.reset();
            }
        }
        let interruption_ms = barge_in::interruption_ms(onset, c.stream_id.is_some(), c.last_sent);
        // What the listener heard: the audio sent, less what the client
        // has not acknowledged playing.
        let unplayed = if c.s.acks {
            c.unacked_samples as f64 / self.m.native_rate.max(1) as f64
        } else {
            0.0
        };
        let played = c.timing.as_ref().map(|t| {
            let s = (t.audio_seconds() - unplayed).max(0.0);
            (t.played_text(s), (s * 10_000.0).round() / 10.0)
        });
        let metrics = self.metrics_of(&c, Outcome::Cancelled);
        log_context(
            id,
            c.s.speaker.as_deref(),
            c.text_chars,
            "cancelled",
            &metrics,
        );
        self.st
            .metrics
            .finished(false, "cancelled", None, None, None);
        ws.send(&ServerMessage::ContextCancelled {
            context_id: id.to_string(),
            stream_id: c.stream_id,
            reason,
            cancel_ack_ms: t0.elapsed().as_secs_f64() * 1e3,
            late_audio_samples: late,
            interruption_ms,
            played_text: played.as_ref().map(|p| p.0.clone()),
            played_ms: played.map(|p| p.1),
            metrics,
        })
        .await
    }

    pub(super) fn metrics_of(&self, c: &Ctx, outcome: Outcome) -> ContextMetrics {
        let mut m = c.rec.finish(
            outcome,
            self.m.native_rate,
            self.m.samples_per_frame,
            c.s.rate,
            c.s.prebuffer_ms,
        );
        if let Some(l) = &c.live {
            let pauses = l.pauses();
            let ms: Vec<f64> = pauses.iter().map(|p| p.ms).collect();
            self.st.metrics.live_finished(m.ttfp_from_text_ms, &ms);
            m.pauses = Some(pauses);
            m.utterances = Some(l.utterances);
        }
        m
    }
}

/// A realtime context's one log line, at its end (the session's span adds
/// the upgrade request's id).
fn log_context(
    id: &str,
    speaker: Option<&str>,
    text_chars: u64,
    outcome: &str,
    m: &crate::protocol::ContextMetrics,
) {
    tracing::info!(
        target: "tts_transport::realtime",
        context = id,
        voice = speaker.unwrap_or(""),
        text_chars,
        outcome,
        segments = m.segments,
        audio_s = m.audio_s,
        ttfp_ms = m.ttfp_ms,
        rtf = m.rtf,
        "context"
    );
}
