//! The vocoder's bf16 convolutions at the shapes a streaming step gives
//! them (full-size 0.6B decoder; 1- and 4-frame steps; the transposed
//! ones over their phases, interleave included), wall time per call
//! on a kernel team of `RAYON_NUM_THREADS` (default: all cores):
//! `cargo run --release -p tts-kernels --example conv_short [-- REPS]`.
//! Prints the median and best of REPS (30) calls per shape. Each call
//! reads the whole weight; the weights partly stay in the last-level cache
//! between calls, so memory-bound shapes read optimistic. Build the arms
//! of an A/B separately and alternate their runs.

use std::time::Instant;
use tts_kernels::{ConvBf16, ConvTranspose1dShape};

mod common;
use common::data;

/// (name, transposed, c_in, c_out, kernel, stride or dilation, t_in)
const SHAPES: [(&str, bool, usize, usize, usize, usize, usize); 16] = [
    ("block0_trans_1f", true, 1536, 768, 16, 8, 5),
    ("block0_trans_4f", true, 1536, 768, 16, 8, 17),
    ("decoder0_1f", false, 1024, 1536, 7, 1, 10),
    ("decoder0_4f", false, 1024, 1536, 7, 1, 22),
    ("block0_k7_1f", false, 768, 768, 7, 1, 38),
    ("block0_k7_4f", false, 768, 768, 7, 1, 134),
    ("block1_trans_4f", true, 768, 384, 10, 5, 129),
    ("upsample_1f", true, 1024, 1024, 2, 2, 1),
    ("block0_1x1_1f", false, 768, 768, 1, 1, 32),
    ("block1_1x1_1f", false, 384, 384, 1, 1, 160),
    ("block2_1x1_1f", false, 192, 192, 1, 1, 640),
    ("block3_1x1_1f", false, 96, 96, 1, 1, 1920),
    ("block1_k7_1f", false, 384, 384, 7, 1, 166),
    ("block2_k7_1f", false, 192, 192, 7, 1, 646),
    ("block3_k7_1f", false, 96, 96, 7, 1, 1926),
    ("block3_k7_d9_1f", false, 96, 96, 7, 9, 1974),
];

fn main() {
    common::install_kernel_settings();
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
        .max(1);
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let team = tts_kernels::Team::new(threads, "conv-short").expect("start the kernel team");
    println!(
        "bf16 conv path {}, {threads} threads",
        tts_kernels::bf16_conv_path()
    );
    team.install(|| {
        for &(name, transposed, c_in, c_out, k, sd, t_in) in &SHAPES {
            let w = data(c_in * c_out * k, 1);
            let layout = tts_kernels::bf16_layout();
            // A transposed conv runs as the decoder runs it: the dense conv
            // over its phases (`c_out * stride` rows of `k / stride` taps,
            // `t_in` = history and new columns), then the interleave.
            let (cw, rows, dil, taps) = if transposed {
                let sh = ConvTranspose1dShape {
                    c_in,
                    c_out,
                    kernel: k,
                    stride: sd,
                };
                let cw = ConvBf16::from_transpose1d_phases(&w, sh, layout);
                (cw, c_out * sd, 1, k / sd)
            } else {
                (
                    ConvBf16::from_conv1d(&w, c_out, c_in, k, layout),
                    c_out,
                    sd,
                    k,
                )
            };
            let x = data(c_in * t_in, 2);
            let t_out = t_in - (taps - 1) * dil;
            let mut out = vec![0f32; rows * t_out];
            let mut time_order = vec![0f32; rows * t_out];
            let mut ms: Vec<f64> = (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    tts_kernels::conv1d_bf16(&x, t_in, &cw, None, dil, &mut out);
                    if transposed {
                        tts_kernels::interleave_phases(&out, c_out, sd, t_out, &mut time_order);
                    }
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            ms.sort_by(f64::total_cmp);
            let macs = (rows * c_in * taps * t_out) as f64;
            println!(
                "{name:16} median {:.3} ms  best {:.3}  {:.0} G multiply-adds/s",
                ms[ms.len() / 2],
                ms[0],
                macs / ms[ms.len() / 2] / 1e6
            );
        }
    });
}
