//! Code2wav: the speech tokenizer's decoder, codes `[T, Q]` -> 24 kHz PCM.
//!
//! The graph is the official `Qwen3TTSTokenizerV2Decoder` (reference notes
//! §3.1): split-RVQ dequantization, a causal conv, an 8-layer sliding-window
//! transformer, two ×2 upsamplers with ConvNeXt blocks, and four SnakeBeta
//! vocoder blocks. Every stage is causal, which gives three ways to decode
//! that share one forward ([`forward`]):
//!
//! - [`Code2Wav::decode`]: the whole utterance in one forward.
//! - [`Code2Wav::decode_chunked`]: the official `chunked_decode` (independent
//!   300-frame windows with 25 frames of re-decoded left context). This is
//!   what the official `Qwen3TTSTokenizer.decode` runs, so it reproduces
//!   official audio; beyond 300 frames it differs slightly from `decode`
//!   because 25 frames of context are fewer than the 72-frame attention
//!   window. [`Code2Wav::decode_padded`] adds the official `-1` padding rule.
//! - [`StreamingDecoder`] / [`DecoderState`]: frame-by-frame decoding whose
//!   concatenated output equals [`Code2Wav::decode`] of the whole sequence for
//!   any chunking. Each step's samples are final: there is nothing to flush.
//!   [`Code2Wav::decode_step_batch`] steps several streams in one call,
//!   layer by layer across streams, with each stream's samples bit-identical
//!   to its own [`Code2Wav::decode_step`].

mod forward;
mod primed;
mod weights;

#[cfg(test)]
mod tests;

use std::path::Path;

pub use forward::{BatchScratch, DecoderState};
pub use primed::{PrimedDecoders, DEFAULT_PRIMED_DECODERS};

use crate::checkpoint::TensorStore;
use crate::config::CodecConfig;
use crate::error::{ModelError, Result};
use crate::quant::Code2WavPrecision;

/// `chunk_size` of the official `chunked_decode` as called by
/// `Qwen3TTSTokenizerV2Model.decode` (not in any config file).
pub const OFFICIAL_CHUNK_FRAMES: usize = 300;
/// `left_context_size` of the same call.
pub const OFFICIAL_LEFT_CONTEXT_FRAMES: usize = 25;

/// The decoder's weights and config. Immutable and `Sync`: share it (by
/// reference or `Arc`) between any number of streams, each with its own
/// [`DecoderState`].
pub struct Code2Wav {
    cfg: CodecConfig,
    w: weights::Weights,
    precision: Code2WavPrecision,
}

impl std::fmt::Debug for Code2Wav {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Code2Wav")
            .field("config", &self.cfg)
            .field("precision", &self.precision)
            .finish_non_exhaustive()
    }
}

impl Code2Wav {
    /// Loads `dir/config.json` and `dir/model.safetensors` (the checkpoint's
    /// `speech_tokenizer/` directory). Every `decoder.*` tensor is checked by
    /// name and shape; the Mimi `encoder.*` is skipped (synthesis never
    /// encodes); anything else is an error.
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_with(dir, Code2WavPrecision::F32)
    }

    /// [`Self::load`] with the convolutions at `precision` (bf16: converted
    /// once here; see [`Code2WavPrecision`]).
    pub fn load_with(dir: &Path, precision: Code2WavPrecision) -> Result<Self> {
        let cfg = CodecConfig::load(&dir.join("config.json"))?;
        let store = TensorStore::open_dir(dir, "model")?;
        let c2w = Self::from_store_with(cfg, &store, precision)?;
        store.ignore_prefix("encoder.");
        store.finish()?;
        Ok(c2w)
    }

    /// Takes the `decoder.*` tensors from an open store without calling
    /// [`TensorStore::finish`], for loaders that own the store's other parts.
    pub fn from_store(cfg: CodecConfig, store: &TensorStore) -> Result<Self> {
        Self::from_store_with(cfg, store, Code2WavPrecision::F32)
    }

    /// [`Self::from_store`] with the convolutions at `precision`.
    pub fn from_store_with(
        cfg: CodecConfig,
        store: &TensorStore,
        precision: Code2WavPrecision,
    ) -> Result<Self> {
        let w = weights::Weights::load(&cfg, store, precision)?;
        Ok(Code2Wav { cfg, w, precision })
    }

    /// The precision the convolutions run at.
    pub fn precision(&self) -> Code2WavPrecision {
        self.precision
    }

    /// A stream's samples are the same bits however it is cut into steps:
    /// below f32, where every bf16 and int8 kernel computes an output the
    /// same way at any length (`int8_stream_equals_decode`). At f32 (or
    /// int8 with an f32 rest) the fast kernels' order depends on a call's
    /// length, so a stream agrees with the one-shot decode within 1e-5, not
    /// bit for bit.
    pub fn chunking_exact(&self) -> bool {
        match self.precision {
            Code2WavPrecision::F32 => false,
            Code2WavPrecision::Bf16 => true,
            Code2WavPrecision::Int8 { rest_bf16, .. } => rest_bf16,
        }
    }

    pub fn config(&self) -> &CodecConfig {
        &self.cfg
    }
    pub fn sample_rate(&self) -> u32 {
        self.cfg.output_sample_rate
    }
    pub fn samples_per_frame(&self) -> usize {
        self.cfg.samples_per_frame
    }
    pub fn num_quantizers(&self) -> usize {
        self.cfg.num_quantizers
    }
    pub fn codebook_size(&self) -> usize {
        self.cfg.codebook_size
    }
    /// Vocoder blocks (upsampling stages after `decoder.0`): 4 at the
    /// official size.
    pub fn vocoder_blocks(&self) -> usize {
        self.cfg.upsample_rates.len()
    }

    /// Checks `codes` is `[n_frames, num_quantizers]` with every code inside
    /// the codebook.
    fn validate(&self, codes: &[u32], n_frames: usize) -> Result<()> {
        let q = self.cfg.num_quantizers;
        if Some(codes.len()) != n_frames.checked_mul(q) {
            return Err(ModelError::InvalidRequest(format!(
                "code2wav: {} codes for {n_frames} frames; expected frames x {q} quantizers = {} \
                 (codes are frame-major: all {q} codebooks of frame 0, then frame 1, ...)",
                codes.len(),
                n_frames.saturating_mul(q)
            )));
        }
        if let Some(i) = codes
            .iter()
            .position(|&c| c as usize >= self.cfg.codebook_size)
        {
            return Err(ModelError::InvalidRequest(format!(
                "code2wav: code {} at frame {}, codebook {} is outside the codebook (size {}); \
                 control tokens such as codec EOS must be stripped before decoding",
                codes[i],
                i / q,
                i % q,
                self.cfg.codebook_size
            )));
        }
        Ok(())
    }

    /// A fresh per-stream state for [`Self::decode_step`].
    pub fn new_state(&self) -> DecoderState {
        DecoderState::new(&self.w)
    }

    /// A state that has decoded `codes` (`[n_frames, Q]`) and dropped their
    /// samples: decoding more frames from it gives exactly what a
    /// whole-utterance decode of `codes ++ more` gives for `more`. An ICL
    /// clone's decoder is primed with the reference codes this way once per
    /// voice, instead of decoding the reference again on every request.
    pub fn primed_state(&self, codes: &[u32], n_frames: usize) -> Result<DecoderState> {
        let mut state = self.new_state();
        let mut scratch = Vec::new();
        self.decode_step(&mut state, codes, n_frames, &mut scratch)?;
        Ok(state)
    }

    /// Decodes the next `n_frames` of a stream and appends exactly
    /// `n_frames * samples_per_frame()` samples to `out`. The lower-level
    /// form of [`StreamingDecoder::step`] for callers that keep states apart
    /// from the model (several sessions over one shared `Code2Wav`).
    pub fn decode_step(
        &self,
        state: &mut DecoderState,
        codes: &[u32],
        n_frames: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        self.validate(codes, n_frames)?;
        out.reserve(n_frames * self.cfg.samples_per_frame);
        forward::step(&self.w, state, codes, n_frames, out);
        Ok(())
    }

    /// Checks one step's input: `codes` is `[n_frames, num_quantizers]`
    /// (frame-major) with every code inside the codebook. The error names
    /// the offending frame and codebook.
    pub fn check_step(&self, codes: &[u32], n_frames: usize) -> Result<()> {
        self.validate(codes, n_frames)
    }

    /// [`Self::decode_step`] for several streams at once: each job's
    /// `n_frames` new frames are decoded against its own state and their
    /// samples appended to its `out`. The decoder runs **layer-major**
    /// across the jobs: the transformer's and ConvNeXt's linears are one
    /// matmul over all streams' rows (their weights read once per batch,
    /// which is what saves time on short steps); every other layer runs per
    /// stream, back to back, so its weights are reused from cache where
    /// they fit. Jobs may differ in frame count and in how far their
    /// streams are; a job with 0 frames is left untouched.
    ///
    /// Every job's samples and state are bit-identical to calling
    /// [`Self::decode_step`] on it alone.
    ///
    /// All inputs are validated before any state is touched: on a bad job
    /// the call returns an error naming it (`job i of the batch: ...`,
    /// then the frame and codebook of a bad code) and every state
    /// and output buffer is left as it was, so the caller can drop that job
    /// and retry the rest (or check each input first with
    /// [`Self::check_step`]).
    pub fn decode_step_batch(
        &self,
        jobs: &mut [StepJob<'_>],
        scratch: &mut BatchScratch,
    ) -> Result<()> {
        for (i, j) in jobs.iter().enumerate() {
            self.validate(j.codes, j.n_frames).map_err(|e| match e {
                ModelError::InvalidRequest(m) => {
                    ModelError::InvalidRequest(format!("job {i} of the batch: {m}"))
                }
                e => e,
            })?;
        }
        let spf = self.cfg.samples_per_frame;
        let mut segs: Vec<forward::Seg<'_>> = jobs
            .iter_mut()
            .filter(|j| j.n_frames > 0)
            .map(|j| {
                j.out.reserve(j.n_frames * spf);
                forward::Seg {
                    st: &mut *j.state,
                    codes: j.codes,
                    n: j.n_frames,
                    out: &mut *j.out,
                }
            })
            .collect();
        forward::run_batch(&self.w, &mut segs, scratch);
        Ok(())
    }

    /// One whole-utterance forward (the official `decoder(codes)`):
    /// `n_frames * samples_per_frame()` samples in [-1, 1]. Computed in
    /// passes of a few frames (`forward::PASS_FRAMES`), which gives the same
    /// samples faster and bounds the scratch memory (the last vocoder
    /// block's ~5 buffers hold 3.7 MB per frame of a pass at the official
    /// size).
    pub fn decode(&self, codes: &[u32], n_frames: usize) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        self.decode_step(&mut self.new_state(), codes, n_frames, &mut out)?;
        Ok(out)
    }

    /// The official `chunked_decode(codes, chunk_size, left_context_size)`:
    /// windows start every `chunk` frames; each is decoded from scratch
    /// (zero padding, positions from 0) with `min(start, left_context)`
    /// earlier frames prepended, whose samples are then dropped. With
    /// [`OFFICIAL_CHUNK_FRAMES`] / [`OFFICIAL_LEFT_CONTEXT_FRAMES`] this is the
    /// official decode of an unpadded sequence.
    pub fn decode_chunked(
        &self,
        codes: &[u32],
        n_frames: usize,
        chunk: usize,
        left_context: usize,
    ) -> Result<Vec<f32>> {
        if chunk == 0 {
            return Err(ModelError::InvalidRequest(
                "code2wav: chunk size must be at least one frame".into(),
            ));
        }
        self.validate(codes, n_frames)?;
        let (q, spf) = (self.cfg.num_quantizers, self.cfg.samples_per_frame);
        let mut out = Vec::with_capacity(n_frames * spf);
        let mut state = self.new_state();
        let mut wav = Vec::new();
        let mut start = 0;
        while start < n_frames {
            let end = (start + chunk).min(n_frames);
            let ctx = left_context.min(start);
            state.reset();
            wav.clear();
            forward::step(
                &self.w,
                &mut state,
                &codes[(start - ctx) * q..end * q],
                end - start + ctx,
                &mut wav,
            );
            out.extend_from_slice(&wav[ctx * spf..]);
            start = end;
        }
        Ok(out)
    }

    /// The official `Qwen3TTSTokenizerV2Model.decode` for one batch row of
    /// `i64` codes `[n_frames, Q]` as the official wrapper pads them: the
    /// output is trimmed to `spf ×` the number of frames whose codebook-0
    /// code is not negative, negative codes are decoded as 0, and decoding
    /// is [`Self::decode_chunked`] with the official 300/25 windows.
    pub fn decode_padded(&self, codes: &[i64], n_frames: usize) -> Result<Vec<f32>> {
        let q = self.cfg.num_quantizers;
        let valid = codes.chunks(q).take(n_frames).filter(|f| f[0] > -1).count();
        let clamped = codes
            .iter()
            .map(|&c| u32::try_from(c.max(0)).unwrap_or(u32::MAX))
            .collect::<Vec<u32>>();
        let mut wav = self.decode_chunked(
            &clamped,
            n_frames,
            OFFICIAL_CHUNK_FRAMES,
            OFFICIAL_LEFT_CONTEXT_FRAMES,
        )?;
        wav.truncate(valid * self.cfg.samples_per_frame);
        Ok(wav)
    }

    /// A stateful frame-by-frame decoder borrowing these weights.
    pub fn streaming(&self) -> StreamingDecoder<'_> {
        StreamingDecoder {
            model: self,
            state: self.new_state(),
        }
    }

    /// A finished utterance decoded in one call, on a thread of the kernel
    /// pool ([`tts_kernels::on_pool`]) so the decode's parallel regions fork
    /// in place instead of waking the pool from outside once per kernel:
    /// the official 300/25-frame [`Self::decode_chunked`], or with
    /// `streaming` one step of a fresh [`StreamingDecoder`] (identical up to
    /// 300 frames; beyond, equal to [`Self::decode`]).
    pub fn decode_on_pool(
        &self,
        codes: &[u32],
        n_frames: usize,
        streaming: bool,
    ) -> Result<Vec<f32>> {
        tts_kernels::on_pool(|| {
            if streaming {
                self.streaming().step(codes, n_frames)
            } else {
                self.decode_chunked(
                    codes,
                    n_frames,
                    OFFICIAL_CHUNK_FRAMES,
                    OFFICIAL_LEFT_CONTEXT_FRAMES,
                )
            }
        })
    }
}

/// One stream's part in [`Code2Wav::decode_step_batch`].
pub struct StepJob<'a> {
    /// The stream's state (from [`Code2Wav::new_state`]).
    pub state: &'a mut DecoderState,
    /// Its new frames' codes, `[n_frames, num_quantizers]` frame-major.
    pub codes: &'a [u32],
    pub n_frames: usize,
    /// Receives exactly `n_frames * samples_per_frame()` more samples.
    pub out: &'a mut Vec<f32>,
}

/// Streaming code2wav: feed frames as they are generated, get their audio at
/// once. `step` outputs concatenate to exactly [`Code2Wav::decode`] of all
/// frames fed so far (up to float rounding), whatever the step sizes.
pub struct StreamingDecoder<'a> {
    model: &'a Code2Wav,
    state: DecoderState,
}

impl StreamingDecoder<'_> {
    /// Decodes `n_new_frames` more frames (`[n, Q]` frame-major) and returns
    /// their `n * samples_per_frame` samples. Zero frames give no samples.
    pub fn step(&mut self, new_codes: &[u32], n_new_frames: usize) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        self.step_into(new_codes, n_new_frames, &mut out)?;
        Ok(out)
    }

    /// Like [`Self::step`], appending to a caller-owned buffer.
    pub fn step_into(
        &mut self,
        new_codes: &[u32],
        n_new_frames: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        self.model
            .decode_step(&mut self.state, new_codes, n_new_frames, out)
    }

    /// Starts a new utterance (keeps buffer capacity).
    pub fn reset(&mut self) {
        self.state.reset();
    }

    /// Frames decoded since the start or the last reset.
    pub fn frames(&self) -> usize {
        self.state.frames()
    }

    pub fn model(&self) -> &Code2Wav {
        self.model
    }
}
