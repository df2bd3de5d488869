//! The talker stage: a Qwen3 decoder over summed text/codec embeddings that
//! emits codebook 0 of each frame.
//!
//! - `weights`: the weights and forward pass ([`Talker`]), shared by every
//!   request.
//! - `state`: one request's part ([`TalkerState`]): the [`Prompt`] it is
//!   fed, its KV cache, history and sampler; one step alone or batched
//!   across requests; the [`TalkerOutput`] handed to the code predictor.
//! - `prefix`: KV of prompts' shared leading rows, kept between requests
//!   ([`PrefixCache`]), so a stored voice's requests prefill only their
//!   own text.

mod prefix;
mod state;
mod weights;

pub use prefix::{
    PrefixCache, PrefixCacheStats, PrefixEntry, DEFAULT_PREFIX_CACHE_BYTES, MIN_PREFIX_ROWS,
};
pub use state::{Prompt, TalkerModels, TalkerOutput, TalkerState, TalkerWork};
pub use weights::Talker;
