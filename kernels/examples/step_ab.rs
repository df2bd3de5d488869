//! One LM decode step's matmuls in sequence, for A/B runs of how a layer
//! dispatches them: `split` (seven `matmul` calls per layer: q, k, v, o,
//! gate, up, down) or `shared` (q/k/v and gate/up as one `matmul_shared`
//! call each: four parallel regions per layer):
//! `cargo run --release -p tts-kernels --example step_ab -- split|shared [LAYERS [HIDDEN [INTER]]]`
//! Defaults are the code predictor's shapes (5 layers, hidden 1024, MLP
//! 3072, q 2048, k/v 1024; int8). Env: `M` activation rows (1; 3 for three
//! sessions), `STEPS` steps per timed pass (15, one frame of the code
//! predictor; 1 with `28 2048 6144` for a 1.7B talker step), `EVICT_MB`
//! (0): before each pass, read that many MB of other int8 weights, as a
//! talker step does between two code predictor frames. Prints the median
//! and best pass of 8+ timed passes; interleave the arms in a shell loop.

use std::time::Instant;
use tts_kernels::{quantize_q8_rows, Kernels, Mat, Team};

mod common;
use common::data;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    common::install_kernel_settings();
    let args: Vec<String> = std::env::args().collect();
    let shared = match args.get(1).map(String::as_str) {
        Some("split") | None => false,
        Some("shared") => true,
        Some(other) => {
            eprintln!("unknown arm {other:?}: split or shared");
            std::process::exit(2)
        }
    };
    let arg = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (layers, h, inter) = (arg(2, 5), arg(3, 1024), arg(4, 3072));
    let (qd, kvd) = (2048, 1024);
    let (m, steps, evict) = (env("M", 1), env("STEPS", 15).max(1), env("EVICT_MB", 0));
    // Per layer: q, k, v, o, gate, up, down as [rows, cols].
    let shapes = [
        (qd, h),
        (kvd, h),
        (kvd, h),
        (h, qd),
        (inter, h),
        (inter, h),
        (h, inter),
    ];
    let q: Vec<(Vec<i8>, Vec<f32>)> = (0..layers * shapes.len())
        .map(|i| {
            let (n, k) = shapes[i % shapes.len()];
            quantize_q8_rows(&data(n * k, 7 + i as u32), n, k)
        })
        .collect();
    let mats: Vec<Mat<'_>> = q
        .iter()
        .enumerate()
        .map(|(i, (d, s))| {
            let (rows, cols) = shapes[i % shapes.len()];
            Mat::Q8 {
                data: d,
                scales: s,
                rows,
                cols,
            }
        })
        .collect();
    let bytes: usize = mats.iter().map(|w| w.bytes()).sum();
    let other: Vec<(Vec<i8>, Vec<f32>)> = (0..evict / 4)
        .map(|i| quantize_q8_rows(&data(2048 * 2048, 999 + i as u32), 2048, 2048))
        .collect();
    let others: Vec<Mat<'_>> = other
        .iter()
        .map(|(d, s)| Mat::Q8 {
            data: d,
            scales: s,
            rows: 2048,
            cols: 2048,
        })
        .collect();
    let ks = Kernels::selected();
    let width = qd.max(inter).max(h) + 2 * kvd + inter;
    let x = data(m * width, 1);
    let mut out = vec![0f32; m * width];
    let team = Team::new(rayon::current_num_threads(), "step-ab").unwrap();
    let mut times = Vec::new();
    let passes = (600 / steps).max(8);
    for r in 0..passes + 2 {
        team.install(|| {
            for w in &others {
                ks.matmul(&x[..m * 2048], m, w, None, &mut out[..m * 2048]);
            }
        });
        let t = Instant::now();
        team.install(|| {
            for _ in 0..steps {
                for layer in mats.chunks_exact(shapes.len()) {
                    let xi = &x[..m * h];
                    if shared {
                        let (q, rest) = out.split_at_mut(m * qd);
                        let (k, rest) = rest.split_at_mut(m * kvd);
                        ks.matmul_shared(
                            xi,
                            m,
                            &mut [
                                (&layer[0], q),
                                (&layer[1], k),
                                (&layer[2], &mut rest[..m * kvd]),
                            ],
                        );
                    } else {
                        for (w, n) in layer[..3].iter().zip([qd, kvd, kvd]) {
                            ks.matmul(xi, m, w, None, &mut out[..m * n]);
                        }
                    }
                    ks.matmul(&x[..m * qd], m, &layer[3], None, &mut out[..m * h]);
                    if shared {
                        let (g, u) = out.split_at_mut(m * inter);
                        ks.matmul_shared(
                            xi,
                            m,
                            &mut [(&layer[4], g), (&layer[5], &mut u[..m * inter])],
                        );
                    } else {
                        for w in &layer[4..6] {
                            ks.matmul(xi, m, w, None, &mut out[..m * inter]);
                        }
                    }
                    ks.matmul(&x[..m * inter], m, &layer[6], None, &mut out[..m * h]);
                }
            }
        });
        if r >= 2 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    println!(
        "{} m={m} layers={layers} {:.1} MB per step, {steps} steps: median {med:.2} ms ({:.1} GB/s) best {:.2} (n={}, evict {evict} MB)",
        if shared { "shared" } else { "split" },
        bytes as f64 / 1e6,
        (bytes * steps) as f64 / med / 1e6,
        times[0],
        times.len()
    );
}
