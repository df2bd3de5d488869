//! The context queue of one connection: open contexts in creation order,
//! each with its segmenter, the segments ready to speak and its frame
//! bookkeeping, and a ring of recently finished ids. Pure (no socket, no
//! engine): the connection asks it what to do next and reports back.
//!
//! Contexts are served in creation order, one engine request at a time: the
//! head speaks until it is ended and its audio is out (or it is cancelled),
//! then the next. Everything a context holds is dropped with it; across
//! contexts only the last [`REMEMBERED_IDS`] finished ids stay (to tell
//! "append after end" from a new context).

use std::collections::{HashMap, VecDeque};
use tokio::time::Instant;

use crate::protocol::{Chunking, ErrorCode, ProtocolError};
use crate::record::Recorder;
use crate::segment::Segmenter;

use super::encode::FrameEncoder;
use super::live::LiveCtx;
use super::settings::CtxSettings;
use super::timings::CtxTimings;

/// Finished context ids remembered per session.
pub const REMEMBERED_IDS: usize = 64;
/// Longest context id.
pub const MAX_CONTEXT_ID: usize = 128;

/// One open context.
pub struct Ctx {
    pub s: CtxSettings,
    pub seg: Segmenter,
    pub ready: VecDeque<String>,
    pub ended: bool,
    pub stream_id: Option<u32>,
    /// Next outgoing frame number.
    pub seq: u64,
    pub rec: Recorder,
    pub last_sent: Option<Instant>,
    /// Frames sent and not yet acknowledged by the client, over all the
    /// context's segments (`audio_acks` only), oldest first.
    pub acks: VecDeque<Unacked>,
    /// Model-rate samples in `acks`: the context's unacknowledged audio.
    pub unacked_samples: u64,
    /// Segments submitted so far (the one in flight is number `segments`).
    pub segments: u64,
    /// A live context (`chunking.mode: live`): its text and live requests
    /// instead of segments.
    pub live: Option<LiveCtx>,
    /// Characters appended over the context's life (for its log line).
    pub text_chars: u64,
    /// The context's encoder, made when its first segment starts (one per
    /// context, dropped with it: a cancelled context's codec state is gone).
    pub enc: Option<FrameEncoder>,
    /// Its word and character timings (`timings: true`).
    pub timing: Option<CtxTimings>,
}

/// A frame sent and not yet acknowledged (`audio_acks`).
#[derive(Clone, Copy, Debug)]
pub struct Unacked {
    /// Its frame number.
    pub seq: u64,
    /// The last engine chunk it carries, and the segment that chunk is of
    /// (the engine is acknowledged only for the segment in flight).
    pub chunk: u64,
    pub segment: u64,
    /// Model-rate samples it carries.
    pub samples: u64,
    pub sent: Instant,
}

impl Ctx {
    /// A context whose first text arrives at `now`.
    pub fn new(s: CtxSettings, chunking: Chunking, now: Instant) -> Self {
        let timing = s.timings.then(|| CtxTimings::new(s.rate, 1.0));
        Ctx {
            seg: Segmenter::new(chunking),
            s,
            ready: VecDeque::new(),
            ended: false,
            stream_id: None,
            seq: 0,
            rec: Recorder::new(now),
            last_sent: None,
            acks: VecDeque::new(),
            unacked_samples: 0,
            segments: 0,
            live: None,
            text_chars: 0,
            enc: None,
            timing,
        }
    }

    /// The client played frames up to `seq`: forgets them, and returns the
    /// last engine chunk among them that belongs to the segment in flight
    /// (what the engine may be acknowledged up to).
    pub fn acknowledge(&mut self, seq: u64) -> Option<u64> {
        let mut upto = None;
        while let Some(f) = self.acks.front().copied().filter(|f| f.seq <= seq) {
            self.acks.pop_front();
            self.unacked_samples = self.unacked_samples.saturating_sub(f.samples);
            if f.segment == self.segments {
                upto = Some(f.chunk);
            }
        }
        upto
    }

    /// The context ends unheard (failed, cancelled, its session over): its
    /// live request is given up with its stream (`LiveRequest::abandon`),
    /// so a request parked waiting for text is not woken to speak what
    /// nobody will hear, and its engine slot is free as soon as the
    /// stream's cancel releases it.
    pub fn abandon_live(&mut self) {
        if let Some(r) = self.live.as_mut().and_then(|l| l.req.take()) {
            r.abandon();
        }
    }

    /// When the oldest unacknowledged frame went out.
    pub fn oldest_unacked(&self) -> Option<Instant> {
        self.acks.front().map(|f| f.sent)
    }

    pub fn pending_chars(&self) -> usize {
        self.seg.pending_chars()
            + self.ready.iter().map(|s| s.chars().count()).sum::<usize>()
            + self.live.as_ref().map_or(0, LiveCtx::pending_chars)
    }

    /// The next segment, merged with those queued behind it up to
    /// `max_chars` (text that piled up while the engine was busy is better
    /// spoken as one request than several).
    pub fn next_segment(&mut self, max_chars: usize) -> Option<String> {
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

    /// Whatever the segmenter holds becomes ready now (`context.flush`,
    /// `context.end`); a live context's utterance ends there.
    pub fn flush(&mut self) {
        if let Some(l) = &mut self.live {
            l.flush();
        }
        let mut out = Vec::new();
        self.seg.flush(&mut out);
        self.ready.extend(out);
    }

    /// The frame number for the next frame sent, advancing it.
    pub fn take_seq(&mut self) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        seq
    }
}

/// What the connection should do while the engine is idle.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// Synthesize `text` for context `id`.
    Start { id: String, text: String },
    /// Context `id` is ended and spoken: terminal frame, `context.done`.
    Finish { id: String },
    /// Context `id` is live: the connection feeds its text to its live
    /// request (and starts, continues or finishes it).
    Live { id: String },
    /// Nothing to do until more text, an end, or the segment deadline.
    Wait,
}

/// The limits a new context and an append are checked against.
#[derive(Clone, Copy, Debug)]
pub struct QueueLimits {
    pub max_contexts: usize,
    pub max_pending_chars: usize,
}

#[derive(Default)]
pub struct ContextQueue {
    contexts: HashMap<String, Ctx>,
    order: VecDeque<String>,
    finished: VecDeque<String>,
}

impl ContextQueue {
    pub fn len(&self) -> usize {
        self.contexts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.contexts.is_empty()
    }

    pub fn get(&self, id: &str) -> Option<&Ctx> {
        self.contexts.get(id)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Ctx> {
        self.contexts.get_mut(id)
    }

    /// Open context ids in creation order (a copy: the caller removes them).
    pub fn ids(&self) -> Vec<String> {
        self.order.iter().cloned().collect()
    }

    /// `id` finished (done, cancelled or failed) recently.
    pub fn is_finished(&self, id: &str) -> bool {
        self.finished.iter().any(|f| f == id)
    }

    /// The context a flush/end/cancel/ack names, or the error to send.
    pub fn existing(&self, id: &str) -> Result<(), ProtocolError> {
        if self.contexts.contains_key(id) {
            Ok(())
        } else if self.is_finished(id) {
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

    /// `context.append`: opens context `id` if it is new (refused while
    /// `draining`, for a finished id, a bad id, or past the context limit;
    /// `new_ctx` builds it from the session settings), then appends `text`
    /// within the pending-character limit.
    pub fn append(
        &mut self,
        id: &str,
        text: &str,
        now: Instant,
        draining: bool,
        limits: QueueLimits,
        new_ctx: impl FnOnce() -> Ctx,
    ) -> Result<(), ProtocolError> {
        if !self.contexts.contains_key(id) {
            if draining {
                return Err(ProtocolError::new(
                    ErrorCode::ShuttingDown,
                    "the server is shutting down: no new contexts",
                ));
            }
            if self.is_finished(id) {
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
            if self.contexts.len() >= limits.max_contexts {
                return Err(ProtocolError::new(
                    ErrorCode::TooManyContexts,
                    format!(
                        "{} contexts are open (the limit); end or cancel one first",
                        self.contexts.len()
                    ),
                ));
            }
            self.contexts.insert(id.to_string(), new_ctx());
            self.order.push_back(id.to_string());
        }
        let limit = limits.max_pending_chars;
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
        c.text_chars += n as u64;
        if let Some(t) = &mut c.timing {
            t.append(text);
        }
        if let Some(l) = &mut c.live {
            l.append(text);
            return Ok(());
        }
        let mut out = Vec::new();
        c.seg.push(text, now, &mut out);
        c.ready.extend(out);
        Ok(())
    }

    /// `context.end`: no more text; what the segmenter holds is ready.
    pub fn end(&mut self, id: &str) -> Result<(), ProtocolError> {
        self.existing(id)?;
        let c = self.contexts.get_mut(id).expect("exists");
        if c.ended {
            return Err(ProtocolError::new(
                ErrorCode::OutOfOrder,
                format!("context {id:?} was already ended"),
            ));
        }
        c.ended = true;
        c.flush();
        if let Some(l) = &mut c.live {
            l.end();
        }
        Ok(())
    }

    /// What to do next while the engine is idle: the head's next segment
    /// (taken from the queue), or its finish once ended and spoken.
    pub fn next(&mut self, max_chars: usize) -> Next {
        loop {
            let Some(head) = self.order.front() else {
                return Next::Wait;
            };
            let Some(c) = self.contexts.get_mut(head) else {
                self.order.pop_front();
                continue;
            };
            if c.live.is_some() {
                return Next::Live { id: head.clone() };
            }
            return if let Some(text) = c.next_segment(max_chars) {
                Next::Start {
                    id: head.clone(),
                    text,
                }
            } else if c.ended && c.seg.is_empty() {
                Next::Finish { id: head.clone() }
            } else {
                Next::Wait
            };
        }
    }

    /// The context that speaks now (or next).
    pub fn head(&self) -> Option<&str> {
        self.order.front().map(String::as_str)
    }

    /// The segmentation deadline of the context that would speak next.
    pub fn deadline(&self) -> Option<Instant> {
        let head = self.order.front()?;
        self.contexts.get(head)?.seg.deadline()
    }

    /// The deadline passed: the head's segmenter cuts what it holds.
    pub fn on_deadline(&mut self, now: Instant) {
        let Some(head) = self.order.front() else {
            return;
        };
        if let Some(c) = self.contexts.get_mut(head) {
            let mut out = Vec::new();
            c.seg.on_deadline(now, &mut out);
            c.ready.extend(out);
        }
    }

    /// Takes context `id` out of the queue and remembers its id.
    pub fn remove(&mut self, id: &str) -> Option<Ctx> {
        let c = self.contexts.remove(id)?;
        self.order.retain(|x| x != id);
        if self.finished.len() == REMEMBERED_IDS {
            self.finished.pop_front();
        }
        self.finished.push_back(id.to_string());
        Some(c)
    }

    /// Segments ready and not yet submitted, over all contexts.
    pub fn pending_segments(&self) -> usize {
        self.contexts.values().map(|c| c.ready.len()).sum()
    }

    /// Items the queue keeps (contexts, remembered ids, unacknowledged
    /// frames): what the `session_retained_items` gauge watches for growth.
    pub fn retained(&self) -> usize {
        self.contexts.len()
            + self.finished.len()
            + self.contexts.values().map(|c| c.acks.len()).sum::<usize>()
    }

    /// Forgets everything (the connection is gone).
    pub fn clear(&mut self) {
        self.contexts.clear();
        self.order.clear();
        self.finished.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::protocol::{AudioTransport, ChunkingMode};

    const LIMITS: QueueLimits = QueueLimits {
        max_contexts: 2,
        max_pending_chars: 40,
    };

    fn ctx(chunking: Chunking, now: Instant) -> Ctx {
        let s = CtxSettings::for_tests(AudioTransport::Binary);
        Ctx::new(s, chunking, now)
    }

    fn manual() -> Chunking {
        Chunking {
            mode: ChunkingMode::Manual,
            ..Chunking::default()
        }
    }

    /// Appends to a queue whose new contexts cut only on flush/end.
    fn append(q: &mut ContextQueue, id: &str, text: &str) -> Result<(), ProtocolError> {
        let now = Instant::now();
        q.append(id, text, now, false, LIMITS, || ctx(manual(), now))
    }

    fn code(r: Result<(), ProtocolError>) -> ErrorCode {
        r.expect_err("refused").code
    }

    #[test]
    fn contexts_speak_in_creation_order_one_after_the_other() {
        let mut q = ContextQueue::default();
        append(&mut q, "b", "second").unwrap();
        append(&mut q, "a", "first").unwrap();
        assert_eq!(q.ids(), ["b", "a"]);
        q.get_mut("a").unwrap().flush();
        assert_eq!(q.next(300), Next::Wait, "the head has nothing ready yet");
        q.end("b").unwrap();
        assert_eq!(
            q.next(300),
            Next::Start {
                id: "b".into(),
                text: "second".into()
            }
        );
        assert_eq!(q.next(300), Next::Finish { id: "b".into() });
        assert!(q.remove("b").is_some());
        assert_eq!(
            q.next(300),
            Next::Start {
                id: "a".into(),
                text: "first".into()
            }
        );
    }

    #[test]
    fn ready_segments_merge_up_to_max_chars() {
        let mut c = ctx(manual(), Instant::now());
        c.ready
            .extend(["one".to_string(), "two".into(), "three".into()]);
        // "one two" is 7 characters; adding " three" would make 13.
        assert_eq!(c.next_segment(12).as_deref(), Some("one two"));
        assert_eq!(c.next_segment(12).as_deref(), Some("three"));
        assert_eq!(c.next_segment(12), None);
    }

    #[test]
    fn new_context_refusals_in_order_of_checks() {
        let mut q = ContextQueue::default();
        let now = Instant::now();
        let draining = q.append("a", "x", now, true, LIMITS, || ctx(manual(), now));
        assert_eq!(code(draining), ErrorCode::ShuttingDown);
        assert!(q.is_empty(), "nothing opened while draining");
        assert_eq!(code(append(&mut q, "", "x")), ErrorCode::InvalidMessage);
        let long = "x".repeat(MAX_CONTEXT_ID + 1);
        assert_eq!(code(append(&mut q, &long, "x")), ErrorCode::InvalidMessage);
        append(&mut q, &"x".repeat(MAX_CONTEXT_ID), "x").unwrap();
        append(&mut q, "b", "x").unwrap();
        assert_eq!(code(append(&mut q, "c", "x")), ErrorCode::TooManyContexts);
        // An open context still takes text while the server drains.
        assert!(q
            .append("b", "y", now, true, LIMITS, || unreachable!())
            .is_ok());
    }

    #[test]
    fn finished_ids_are_refused_and_forgotten_after_the_ring() {
        let mut q = ContextQueue::default();
        append(&mut q, "a", "x").unwrap();
        q.remove("a");
        assert_eq!(code(append(&mut q, "a", "x")), ErrorCode::OutOfOrder);
        assert_eq!(code(q.existing("a")), ErrorCode::OutOfOrder);
        assert_eq!(code(q.existing("never")), ErrorCode::UnknownContext);
        for i in 0..REMEMBERED_IDS {
            let id = format!("n{i}");
            append(&mut q, &id, "x").unwrap();
            q.remove(&id);
        }
        assert!(!q.is_finished("a"), "the oldest id left the ring");
        assert_eq!(code(q.existing("a")), ErrorCode::UnknownContext);
        assert_eq!(q.retained(), REMEMBERED_IDS);
    }

    #[test]
    fn append_after_end_and_double_end_are_out_of_order() {
        let mut q = ContextQueue::default();
        append(&mut q, "a", "x").unwrap();
        q.end("a").unwrap();
        assert_eq!(code(q.end("a")), ErrorCode::OutOfOrder);
        assert_eq!(code(append(&mut q, "a", "more")), ErrorCode::OutOfOrder);
        assert_eq!(code(q.end("b")), ErrorCode::UnknownContext);
    }

    #[test]
    fn pending_text_is_capped_per_context_in_characters() {
        let mut q = ContextQueue::default();
        // 40 characters, four bytes each: counted as characters.
        append(&mut q, "a", &"é".repeat(39)).unwrap();
        let e = append(&mut q, "a", "éé").expect_err("over");
        assert_eq!(e.code, ErrorCode::TextTooLong);
        assert!(
            e.message.contains("41 characters waiting (limit 40)"),
            "{}",
            e.message
        );
        append(&mut q, "a", "é").unwrap();
        // Ready segments count too.
        q.get_mut("a").unwrap().flush();
        assert_eq!(q.get("a").unwrap().pending_chars(), 40);
        assert_eq!(code(append(&mut q, "a", "x")), ErrorCode::TextTooLong);
    }

    #[test]
    fn segmentation_deadline_is_the_head_contexts_and_cuts_at_a_word() {
        let t0 = Instant::now();
        let clause = Chunking::default();
        let mut q = ContextQueue::default();
        assert_eq!(q.deadline(), None);
        let cfg = clause.clone();
        q.append("a", "no boundary yet", t0, false, LIMITS, || ctx(cfg, t0))
            .unwrap();
        let due = t0 + Duration::from_millis(clause.max_delay_ms);
        assert_eq!(q.deadline(), Some(due));
        q.on_deadline(due - Duration::from_millis(1));
        assert_eq!(q.next(300), Next::Wait, "not due yet");
        q.on_deadline(due);
        assert_eq!(
            q.next(300),
            Next::Start {
                id: "a".into(),
                text: "no boundary".into()
            }
        );
    }

    #[test]
    fn unacknowledged_audio_is_counted_across_segments() {
        let t0 = Instant::now();
        let mut c = ctx(manual(), t0);
        let frame = |seq, segment, chunk| Unacked {
            seq,
            chunk,
            segment,
            samples: 100,
            sent: t0,
        };
        c.segments = 1;
        c.acks.extend([frame(0, 1, 0), frame(1, 1, 1)]);
        c.segments = 2;
        c.acks.extend([frame(2, 2, 0), frame(3, 2, 1)]);
        c.unacked_samples = 400;
        // Frames of an earlier segment are forgotten without an engine ack.
        assert_eq!(c.acknowledge(1), None);
        assert_eq!(c.unacked_samples, 200);
        assert_eq!(c.acknowledge(2), Some(0));
        assert_eq!(c.acknowledge(3), Some(1));
        assert_eq!(c.unacked_samples, 0);
        assert_eq!(c.oldest_unacked(), None);
    }

    #[test]
    fn manual_chunking_has_no_deadline() {
        let mut q = ContextQueue::default();
        append(&mut q, "a", "waits for flush").unwrap();
        assert_eq!(q.deadline(), None);
        assert_eq!(q.pending_segments(), 0);
        q.get_mut("a").unwrap().flush();
        assert_eq!(q.pending_segments(), 1);
    }
}
