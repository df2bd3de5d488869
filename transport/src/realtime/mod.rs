//! The realtime session: one per connection, which owns everything it
//! uses (settings, contexts, the engine stream in flight, the resampler,
//! the VAD) and waits on four things at once: the next input from its
//! port, the next engine event, the segmentation deadline, and the
//! server's drain signal. Nothing is shared with other connections, so a
//! bad message here can only ever produce an `error` event here.
//!
//! The session talks to a [`Port`], never to a socket: `/v1/realtime`'s
//! WebSocket is the native port; the ElevenLabs and Cartesia sockets are
//! ports that translate their clients' messages (`crate::dialects`); the
//! session's own tests run it on a port of channels, with time under their
//! control.
//!
//! Frames are sent as soon as a chunk arrives; a send that cannot complete
//! within [`output::SEND_TIMEOUT`] closes the connection (the client stopped
//! reading).
//!
//! Memory: everything a context holds (segments, chunk times, ack map) is
//! dropped with the context; across contexts the connection keeps only a
//! ring of the last [`queue::REMEMBERED_IDS`] finished ids and
//! [`barge_in::VAD_CLOCK`] input-audio arrival stamps.
//!
//! Files, each depending only on those below it:
//! - `lifecycle`: each context's life on the wire (segments, frames,
//!   done/failed/cancelled) and the `audio_acks` bound over a context
//!   (methods of the connection's type).
//! - `connection`: `RealtimeConnection` — the loop and message routing.
//! - `native`: the native port (`/v1/realtime`'s JSON and binary frames).
//! - `port`: what a session talks to — typed input in, typed events and
//!   encoded audio out, a close with a reason.
//! - `output`: native frame headers, and the bound on every send.
//! - `queue`: open contexts in creation order, segments, finished ids.
//! - `timings`: a context's word and character timings (`timings: true`,
//!   `tts_audio::timing`) in the protocol's shapes.
//! - `settings`: defaults, `session.update` validation (all or nothing),
//!   the per-context snapshot.
//! - `live`: a live context's text (`chunking.mode: live`): what its live
//!   request takes when, and the long-context cut at a sentence end.
//! - `barge_in`: the input clock that dates a speech onset, and whether it
//!   interrupts.
//! - `encode`: each context's encoder (`format`: pcm16/f32 samples, or
//!   mp3, opus, opus_packets, flac, aac, mulaw, alaw bytes), fed chunk by
//!   chunk on the session's task, its flush in the terminal frame; the
//!   dialects' audio is encoded here too.
//! - `liveness`: server pings, the pong deadline, the idle timeout.
//! - `upgrade`: the WebSocket handshake, and the close (1009, 1007, ...)
//!   that drains what the client still sends so the socket ends cleanly.
//! - `tests`: the session's lifecycle through a test port, the clock
//!   paused.

mod barge_in;
mod connection;
mod encode;
mod lifecycle;
mod live;
mod liveness;
mod native;
mod output;
mod port;
mod queue;
mod settings;
#[cfg(test)]
mod tests;
mod timings;
mod upgrade;

pub(crate) use connection::run;
#[cfg(test)]
pub(crate) use encode::FrameEncoder;
pub(crate) use liveness::Timeouts;
pub(crate) use native::{socket_error, NativePort};
pub(crate) use output::SEND_TIMEOUT;
pub(crate) use port::{AudioOut, Closed, Incoming, Port, Res};
pub(crate) use queue::MAX_CONTEXT_ID;
pub(crate) use settings::{apply as apply_settings, initial as initial_settings, Bounds};
pub(crate) use upgrade::{admit, close_and_drain, drain_reads, fit_close_reason, Socket};
