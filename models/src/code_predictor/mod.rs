//! The code predictor stage ("sub-talker"): for each frame, fills codebooks
//! 1..G-1 from the talker's hidden state and the frame's codebook-0 token.
//!
//! - `weights`: the weights and forward pass ([`CodePredictor`],
//!   [`PredictScratch`]), shared by every request.
//! - `state`: one request's part ([`PredictorState`]): sampler, RNG stream
//!   and scratch KV cache; one frame alone or batched across requests.

mod state;
mod weights;

pub use state::{PredictorModels, PredictorState};
pub use weights::{CodePredictor, PredictScratch};
