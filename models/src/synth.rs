//! Compatibility re-exports for downstream imports of the old `synth`
//! module, to be removed once they use the canonical paths:
//! [`crate::talker`] (`TalkerState`, `TalkerOutput`, `TalkerWork`,
//! `Prompt`), [`crate::code_predictor`] (`PredictorState`),
//! [`crate::request`] (`Request`, `GenOptions`, `StopReason`),
//! [`crate::model`] (`Qwen3Tts`, `LoadOptions`) and [`crate::generator`]
//! (`FrameGenerator`, `GenStats`).

pub use crate::code_predictor::PredictorState as PredictorSession;
pub use crate::generator::{FrameGenerator, GenStats};
pub use crate::model::{LoadOptions, Qwen3Tts};
pub use crate::request::{GenOptions, Request, StopReason, MAX_TEXT_TOKENS};
pub use crate::talker::{Prompt, TalkerOutput, TalkerState as TalkerSession, TalkerWork};
