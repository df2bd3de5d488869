//! The Base checkpoints' speaker encoder: 24 kHz reference audio to the
//! x-vector that fills the talker's speaker row in voice cloning.
//!
//! - `mel` ([`mel_spectrogram`], [`Mel`]): the official STFT / Slaney-mel
//!   front end with its fixed parameters.
//! - `network`: the ECAPA-TDNN forward pass (TDNN, SE-Res2Net blocks,
//!   feature aggregation, attentive statistics pooling, projection).
//! - `weights`: the `speaker_encoder.*` tensors, checked by name and shape.
//!
//! The x-vector is used raw (no norm, no projection): its size is the talker
//! hidden size, checked when the config is read.

mod mel;
mod network;
#[cfg(test)]
mod tests;
mod weights;

pub use mel::{
    frame_count, hann_window, mel_basis, mel_spectrogram, Mel, HOP, MEL_MIN_SAMPLES, N_BINS, N_FFT,
    N_MELS, SAMPLE_RATE,
};
pub use weights::PREFIX;

use crate::checkpoint::TensorStore;
use crate::config::SpeakerEncoderConfig;
use crate::error::Result;

/// The fewest 24 kHz samples the official-size network accepts: 5 mel
/// frames (`5 * 256`), since its largest reflect pad (kernel 3, dilation 4)
/// is 4 frames and PyTorch needs a pad shorter than its input. A config
/// with other kernels or dilations has its own minimum
/// ([`SpeakerEncoder::min_samples`]).
pub const MIN_SAMPLES: usize = 5 * HOP;

/// A loaded speaker encoder.
pub struct SpeakerEncoder {
    weights: weights::Weights,
    dim: usize,
    min_samples: usize,
}

impl SpeakerEncoder {
    /// Takes every `speaker_encoder.*` tensor from `store` (widened to f32)
    /// with the shape `cfg` implies. `store` is only borrowed: it is the
    /// talker's, whose loader goes on to take the rest and `finish` it.
    pub fn load(store: &TensorStore, cfg: &SpeakerEncoderConfig) -> Result<Self> {
        Ok(SpeakerEncoder {
            weights: weights::Weights::load(store, cfg)?,
            dim: cfg.enc_dim,
            min_samples: (cfg.min_frames() * HOP).max(MEL_MIN_SAMPLES),
        })
    }

    /// The x-vector (`[dim()]`) of 24 kHz mono `samples` (the official
    /// `extract_speaker_embedding`, in f32). Fewer than
    /// [`Self::min_samples`] samples, or a non-finite one, is an error.
    pub fn embed(&self, samples_24k: &[f32]) -> Result<Vec<f32>> {
        mel::check_samples(samples_24k, self.min_samples)?;
        let mel = mel_spectrogram(samples_24k)?;
        Ok(self.embed_mel(&mel))
    }

    /// The x-vector of a front-end mel (`mel.frames` must be at least
    /// `min_samples() / HOP`; [`Self::embed`] guarantees it).
    fn embed_mel(&self, mel: &Mel) -> Vec<f32> {
        let (t, bins) = (mel.frames, mel.bins);
        // Frame-major [F, bins] to the network's channel-major [bins, F].
        let mut x = vec![0f32; bins * t];
        for (f, frame) in mel.data.chunks_exact(bins).enumerate() {
            for (b, &v) in frame.iter().enumerate() {
                x[b * t + f] = v;
            }
        }
        tts_kernels::on_pool(|| self.weights.forward(&x, t))
    }

    /// The x-vector size (`enc_dim`, the talker hidden size).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The fewest samples [`Self::embed`] accepts for this config
    /// ([`MIN_SAMPLES`] for the official one).
    pub fn min_samples(&self) -> usize {
        self.min_samples
    }
}
