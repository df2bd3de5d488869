//! The runtime's stages: the generic supervised actor, the wiring that
//! addresses stages by the message they take, and one room per model
//! stage holding its [`actor::StageLogic`] and the per-request state it
//! owns.
//!
//! - [`actor`]: [`actor::StageActor`], generic over the stage (bounded
//!   mailbox, local work queue in rounds, panic boundary, health atomics,
//!   gathering of the partner stage's in-flight requests).
//! - [`wiring`]: the directory of current recipients, one per message type.
//! - [`talker`], [`predictor`], [`code2wav`]: the three model stages;
//!   [`pace`]: when code2wav lets a chunk leave short of its schedule.
//!
//! Stop rules mirror `FrameGenerator::next_frame` exactly: no frames (and no
//! prefill) when `max_frames == 0`; the talker's codebook-0 token equal to
//! codec EOS ends the request; after the `max_frames`-th frame the talker is
//! not stepped again.

pub mod actor;
pub mod code2wav;
pub mod pace;
pub mod predictor;
pub mod talker;
pub mod wiring;
