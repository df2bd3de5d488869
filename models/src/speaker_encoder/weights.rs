//! The speaker encoder's tensors (`speaker_encoder.*` in the talker file),
//! each taken by name with the shape the config implies and widened to f32
//! (they are stored bf16 in the hub files).

use tts_kernels::Conv1dShape;

use crate::checkpoint::TensorStore;
use crate::config::SpeakerEncoderConfig;
use crate::error::Result;

/// Where the encoder lives in the checkpoint.
pub const PREFIX: &str = "speaker_encoder";

/// One `Conv1d(padding="same", padding_mode="reflect")` with bias.
pub(super) struct Conv {
    /// `[c_out, c_in, kernel]`.
    pub w: Vec<f32>,
    pub b: Vec<f32>,
    pub shape: Conv1dShape,
}

impl Conv {
    fn load(
        store: &TensorStore,
        name: &str,
        c_in: usize,
        c_out: usize,
        kernel: usize,
        dilation: usize,
    ) -> Result<Self> {
        Ok(Conv {
            w: store.vector(&format!("{name}.weight"), &[c_out, c_in, kernel])?,
            b: store.vector(&format!("{name}.bias"), &[c_out])?,
            shape: Conv1dShape {
                c_in,
                c_out,
                kernel,
                dilation,
                groups: 1,
            },
        })
    }

    /// A kernel-1 conv split into one on the first `c` input channels (with
    /// a zero bias) and one on the rest (with the bias).
    fn split_inputs(self, c: usize) -> (Conv, Conv) {
        let s = self.shape;
        debug_assert!(s.kernel == 1 && c <= s.c_in);
        let (mut head, mut tail) = (Vec::new(), Vec::new());
        for row in self.w.chunks_exact(s.c_in) {
            head.extend_from_slice(&row[..c]);
            tail.extend_from_slice(&row[c..]);
        }
        let shape = |c_in| Conv1dShape { c_in, ..s };
        (
            Conv {
                w: head,
                b: vec![0.0; s.c_out],
                shape: shape(c),
            },
            Conv {
                w: tail,
                b: self.b,
                shape: shape(s.c_in - c),
            },
        )
    }

    /// PyTorch's "same" padding: `d (k - 1)` columns in all, the smaller
    /// half on the left.
    pub fn same_pad(&self) -> (usize, usize) {
        let total = self.shape.dilation * (self.shape.kernel - 1);
        (total / 2, total - total / 2)
    }
}

/// `TDNN → Res2Net → TDNN → squeeze-excitation`, plus the residual.
pub(super) struct SeRes2NetBlock {
    pub tdnn1: Conv,
    /// `scale - 1` convolutions on `channels / scale` channels.
    pub res2net: Vec<Conv>,
    pub tdnn2: Conv,
    pub se_conv1: Conv,
    pub se_conv2: Conv,
    pub scale: usize,
}

/// Every tensor of the ECAPA-TDNN.
pub(super) struct Weights {
    /// `blocks.0`: the initial TDNN on the mel bins.
    pub tdnn0: Conv,
    /// `blocks.1..`.
    pub blocks: Vec<SeRes2NetBlock>,
    pub mfa: Conv,
    /// `asp.tdnn` (`3 C -> attention channels`, then ReLU and tanh) split
    /// by input: its input is the frames `m` followed by their mean and std
    /// repeated over time, so the statistics' columns give one constant per
    /// output channel. `asp_frames` holds the columns of `m` (`C -> att`,
    /// bias unused), `asp_stats` the others (`2 C -> att`, with the bias).
    pub asp_frames: Conv,
    pub asp_stats: Conv,
    /// `asp.conv`: `attention channels -> C`.
    pub asp_conv: Conv,
    /// `fc`: `2 C -> enc_dim`, kernel 1 on the single pooled column.
    pub fc: Conv,
}

impl Weights {
    pub fn load(store: &TensorStore, cfg: &SpeakerEncoderConfig) -> Result<Self> {
        let p = PREFIX;
        let ch = &cfg.enc_channels;
        let tdnn0 = Conv::load(
            store,
            &format!("{p}.blocks.0.conv"),
            cfg.mel_dim,
            ch[0],
            cfg.enc_kernel_sizes[0],
            cfg.enc_dilations[0],
        )?;
        let scale = cfg.enc_res2net_scale;
        let mut blocks = Vec::new();
        for (i, (c, k, d)) in cfg.res2net_blocks().enumerate() {
            let b = format!("{p}.blocks.{}", i + 1);
            let (cin, part, se) = (ch[i], c / scale, cfg.enc_se_channels);
            blocks.push(SeRes2NetBlock {
                tdnn1: Conv::load(store, &format!("{b}.tdnn1.conv"), cin, c, 1, 1)?,
                res2net: (0..scale - 1)
                    .map(|j| {
                        Conv::load(
                            store,
                            &format!("{b}.res2net_block.blocks.{j}.conv"),
                            part,
                            part,
                            k,
                            d,
                        )
                    })
                    .collect::<Result<_>>()?,
                tdnn2: Conv::load(store, &format!("{b}.tdnn2.conv"), c, c, 1, 1)?,
                se_conv1: Conv::load(store, &format!("{b}.se_block.conv1"), c, se, 1, 1)?,
                se_conv2: Conv::load(store, &format!("{b}.se_block.conv2"), se, c, 1, 1)?,
                scale,
            });
        }
        let n = ch.len();
        let m = cfg.mfa_channels();
        let att = cfg.enc_attention_channels;
        let asp = Conv::load(store, &format!("{p}.asp.tdnn.conv"), 3 * m, att, 1, 1)?;
        let (asp_frames, asp_stats) = asp.split_inputs(m);
        Ok(Weights {
            tdnn0,
            blocks,
            mfa: Conv::load(
                store,
                &format!("{p}.mfa.conv"),
                m,
                m,
                cfg.enc_kernel_sizes[n - 1],
                cfg.enc_dilations[n - 1],
            )?,
            asp_frames,
            asp_stats,
            asp_conv: Conv::load(store, &format!("{p}.asp.conv"), att, m, 1, 1)?,
            fc: Conv::load(store, &format!("{p}.fc"), 2 * m, cfg.enc_dim, 1, 1)?,
        })
    }
}
