//! `config.json`'s `speaker_encoder_config`: the ECAPA-TDNN speaker encoder
//! of Base checkpoints, with the official class defaults
//! (`Qwen3TTSSpeakerEncoderConfig`) for every absent key.
//!
//! The hub files set only `enc_dim` and `sample_rate`; the other keys are
//! honoured when present. Everything the network needs to be consistent
//! (matching list lengths, residual widths, the Res2Net split, the MFA
//! width) is checked here, so a config the official code would fail on at
//! construction or forward time is a config error naming its key.

use super::json::Obj;
use crate::error::Result;

/// The speaker encoder's hyper-parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpeakerEncoderConfig {
    /// Input mel bins (the front end computes 128).
    pub mel_dim: usize,
    /// The x-vector size; equals the talker hidden size in Base checkpoints.
    pub enc_dim: usize,
    /// Output channels of the initial TDNN, each SE-Res2Net block, and the
    /// multi-layer feature aggregation (last).
    pub enc_channels: Vec<usize>,
    /// Kernel size per entry of `enc_channels`.
    pub enc_kernel_sizes: Vec<usize>,
    /// Dilation per entry of `enc_channels`.
    pub enc_dilations: Vec<usize>,
    /// Hidden channels of the attentive statistics pooling.
    pub enc_attention_channels: usize,
    /// Number of Res2Net splits per SE-Res2Net block.
    pub enc_res2net_scale: usize,
    /// Squeeze width of the squeeze-excitation blocks.
    pub enc_se_channels: usize,
    /// The sample rate the encoder's input must have.
    pub sample_rate: u32,
}

impl Default for SpeakerEncoderConfig {
    /// The official class defaults (what a Base config without the key gets).
    fn default() -> Self {
        SpeakerEncoderConfig {
            mel_dim: 128,
            enc_dim: 1024,
            enc_channels: vec![512, 512, 512, 512, 1536],
            enc_kernel_sizes: vec![5, 3, 3, 3, 1],
            enc_dilations: vec![1, 2, 3, 4, 1],
            enc_attention_channels: 128,
            enc_res2net_scale: 8,
            enc_se_channels: 128,
            sample_rate: 24_000,
        }
    }
}

/// The mel bins and sample rate the front end
/// ([`crate::speaker_encoder::mel_spectrogram`]) produces and expects; the
/// official `extract_speaker_embedding` hard-codes both.
const FRONT_END_MELS: usize = 128;
const FRONT_END_RATE: u32 = 24_000;

impl SpeakerEncoderConfig {
    /// Parses `o` (the `speaker_encoder_config` object), defaults filling
    /// absent keys.
    pub(super) fn parse(o: &Obj<'_>) -> Result<Self> {
        let d = Self::default();
        let list = |key: &str, default: &[usize]| -> Result<Vec<usize>> {
            if o.get(key).is_none() {
                return Ok(default.to_vec());
            }
            let v = o.usize_list(key)?;
            if v.contains(&0) {
                return Err(o.err(key, format!("must hold positive integers, found {v:?}")));
            }
            Ok(v)
        };
        let positive_or = |key: &str, default: usize| -> Result<usize> {
            let x = o.usize_or(key, default)?;
            if x == 0 {
                return Err(o.err(key, "must be positive"));
            }
            Ok(x)
        };
        let sample_rate = o.usize_or("sample_rate", d.sample_rate as usize)?;
        let cfg = SpeakerEncoderConfig {
            mel_dim: positive_or("mel_dim", d.mel_dim)?,
            enc_dim: positive_or("enc_dim", d.enc_dim)?,
            enc_channels: list("enc_channels", &d.enc_channels)?,
            enc_kernel_sizes: list("enc_kernel_sizes", &d.enc_kernel_sizes)?,
            enc_dilations: list("enc_dilations", &d.enc_dilations)?,
            enc_attention_channels: positive_or(
                "enc_attention_channels",
                d.enc_attention_channels,
            )?,
            enc_res2net_scale: positive_or("enc_res2net_scale", d.enc_res2net_scale)?,
            enc_se_channels: positive_or("enc_se_channels", d.enc_se_channels)?,
            sample_rate: u32::try_from(sample_rate)
                .map_err(|_| o.err("sample_rate", "is too large"))?,
        };
        cfg.validate(o)?;
        Ok(cfg)
    }

    fn validate(&self, o: &Obj<'_>) -> Result<()> {
        if self.mel_dim != FRONT_END_MELS {
            return Err(o.err(
                "mel_dim",
                format!(
                    "is {}; the mel front end computes {FRONT_END_MELS} bins",
                    self.mel_dim
                ),
            ));
        }
        if self.sample_rate != FRONT_END_RATE {
            return Err(o.err(
                "sample_rate",
                format!(
                    "is {}; the speaker encoder's front end is defined at {FRONT_END_RATE} Hz only",
                    self.sample_rate
                ),
            ));
        }
        let n = self.enc_channels.len();
        for (key, len) in [
            ("enc_kernel_sizes", self.enc_kernel_sizes.len()),
            ("enc_dilations", self.enc_dilations.len()),
        ] {
            if len != n {
                return Err(o.err(key, format!("has {len} entries, but enc_channels has {n}")));
            }
        }
        if n < 3 {
            return Err(o.err(
                "enc_channels",
                format!(
                    "has {n} entries; at least 3 are needed (initial TDNN, one SE-Res2Net block, aggregation)"
                ),
            ));
        }
        let scale = self.enc_res2net_scale;
        for i in 1..n - 1 {
            let (cin, c) = (self.enc_channels[i - 1], self.enc_channels[i]);
            if cin != c {
                return Err(o.err(
                    "enc_channels",
                    format!(
                        "entry {i} ({c}) differs from entry {} ({cin}); an SE-Res2Net block adds its input back, so the widths must match",
                        i - 1
                    ),
                ));
            }
            if c % scale != 0 {
                return Err(o.err(
                    "enc_channels",
                    format!("entry {i} ({c}) is not divisible by enc_res2net_scale ({scale})"),
                ));
            }
        }
        let blocks_sum: usize = self.enc_channels[1..n - 1].iter().sum();
        let mfa = self.enc_channels[n - 1];
        if mfa != blocks_sum {
            return Err(o.err(
                "enc_channels",
                format!(
                    "last entry ({mfa}) must equal the sum of the SE-Res2Net widths ({blocks_sum}): the aggregation concatenates them"
                ),
            ));
        }
        Ok(())
    }

    /// The SE-Res2Net blocks: `(channels, kernel, dilation)` each.
    pub fn res2net_blocks(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let n = self.enc_channels.len();
        (1..n - 1).map(|i| {
            (
                self.enc_channels[i],
                self.enc_kernel_sizes[i],
                self.enc_dilations[i],
            )
        })
    }

    /// The MFA (and pooling) width: the last `enc_channels` entry.
    pub fn mfa_channels(&self) -> usize {
        self.enc_channels[self.enc_channels.len() - 1]
    }

    /// The fewest mel frames the network accepts: every "same" reflect pad
    /// must be shorter than its input (PyTorch's rule), and the largest pad
    /// is `ceil(d * (k - 1) / 2)` over all convolutions.
    pub fn min_frames(&self) -> usize {
        let max_pad = self
            .enc_kernel_sizes
            .iter()
            .zip(&self.enc_dilations)
            .map(|(&k, &d)| (d * (k - 1)).div_ceil(2))
            .max()
            .unwrap_or(0);
        max_pad + 1
    }
}
