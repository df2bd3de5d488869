//! The talker stage: a Qwen3 decoder over summed text/codec embeddings that
//! emits codebook 0 of each frame.
//!
//! - `weights`: the weights and forward pass ([`Talker`]), shared by every
//!   request.
//! - `state`: one request's part ([`TalkerState`]): the [`Prompt`] it is
//!   fed, its KV cache, history and sampler; one step alone or batched
//!   across requests; the [`TalkerOutput`] handed to the code predictor.

mod state;
mod weights;

pub use state::{Prompt, TalkerModels, TalkerOutput, TalkerState, TalkerWork};
pub use weights::Talker;
