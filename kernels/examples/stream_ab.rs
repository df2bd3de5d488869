//! Decode matvec from DRAM, one format per process, for A/B runs of the
//! kernels' environment switches (`TTS_RT_PREFETCH`, `TTS_RT_ISA`,
//! `TTS_RT_TEAMS`; read at start as `tts-rt` reads them, a malformed value
//! refused):
//! `cargo run --release -p tts-kernels --example stream_ab -- FORMAT [REPS [M [LAYERS]]]`
//! with FORMAT one of f32, bf16, q8, q4. Prints the median and best pass in
//! GiB/s of weight bytes over LAYERS (48) matrices of 1024x3072 (the criterion
//! `streaming` bench's shape; 48 is far past a 32 MB L3, 400 past 480 MB) at m = M activation rows
//! (1, decode; 3, three sessions' batched step). Interleave the arms
//! in a shell loop; one process per arm keeps the switches honest.

use std::time::Instant;
use tts_kernels::{f32_to_bf16, quantize_q4_rows, quantize_q8_rows, Kernels, Mat, Q4Rows};

mod common;
use common::data;

enum W {
    F32(Vec<f32>),
    Bf16(Vec<u16>),
    Q8(Vec<i8>, Vec<f32>),
    Q4(Q4Rows),
}

fn main() {
    common::install_kernel_settings();
    let args: Vec<String> = std::env::args().collect();
    let fmt = args
        .get(1)
        .map(String::as_str)
        .unwrap_or("bf16")
        .to_string();
    let reps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(15);
    let rows: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    // LAYERS (4th argument): 48 is 151 MB of int8, past a 32 MB L3; a
    // host with a larger L3 needs more (400: 1.26 GB).
    let layers: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(48);
    let (n, k) = (1024, 3072);
    let ws: Vec<W> = (0..layers)
        .map(|l| {
            let f = data(n * k, 100 + l as u32);
            match fmt.as_str() {
                "f32" => W::F32(f),
                "bf16" => W::Bf16(f.iter().map(|&v| f32_to_bf16(v)).collect()),
                "q8" => {
                    let (q, s) = quantize_q8_rows(&f, n, k);
                    W::Q8(q, s)
                }
                "q4" => W::Q4(quantize_q4_rows(&f, n, k)),
                other => {
                    eprintln!("unknown format {other:?}: f32, bf16, q8 or q4");
                    std::process::exit(2)
                }
            }
        })
        .collect();
    let mats: Vec<Mat<'_>> = ws
        .iter()
        .map(|w| match w {
            W::F32(d) => Mat::F32 {
                data: d,
                rows: n,
                cols: k,
            },
            W::Bf16(d) => Mat::Bf16 {
                data: d,
                rows: n,
                cols: k,
            },
            W::Q8(d, s) => Mat::Q8 {
                data: d,
                scales: s,
                rows: n,
                cols: k,
            },
            W::Q4(q) => Mat::Q4 {
                data: &q.data,
                group_scales: &q.group_scales,
                scales: &q.scales,
                rows: n,
                cols: k,
            },
        })
        .collect();
    let bytes: usize = mats.iter().map(|m| m.bytes()).sum();
    let ks = Kernels::selected();
    let x = data(rows * k, 1);
    let mut out = vec![0f32; rows * n];
    let mut rates = Vec::new();
    // On a kernel team, as the engine runs its steps (`TTS_RT_TEAMS=off`:
    // rayon's pool, one wake-up per region from this thread).
    let team = tts_kernels::teams_enabled()
        .then(|| tts_kernels::Team::new(rayon::current_num_threads(), "stream-ab").unwrap());
    let run = |f: &mut dyn FnMut()| match &team {
        Some(t) => t.install(f),
        None => f(),
    };
    for r in 0..reps + 2 {
        let t = Instant::now();
        run(&mut || {
            for m in &mats {
                ks.matmul(&x, rows, m, None, &mut out);
            }
        });
        let s = t.elapsed().as_secs_f64();
        if r >= 2 {
            rates.push(bytes as f64 / s / (1u64 << 30) as f64);
        }
    }
    rates.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{fmt} isa={} threads={} {} median {:.2} GiB/s best {:.2} worst {:.2} (n={reps}, {:.0} MB, m={rows})",
        ks.isa().name(),
        rayon::current_num_threads(),
        if team.is_some() { "team" } else { "rayon" },
        rates[rates.len() / 2],
        rates[rates.len() - 1],
        rates[0],
        bytes as f64 / 1e6
    );
}
