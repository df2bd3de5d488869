//! Criterion benches: each hot kernel at model sizes, scalar reference vs
//! every SIMD path the CPU has. `cargo bench -p tts-kernels -- matmul` etc.
//! (`-- matmul_group`: q4, iq4 and q6 at the 0.6B's decode shapes.)
//! Throughput is in elements = multiply-adds (x2 for FLOP/s) for matmul and
//! conv, elements for element-wise kernels.

use criterion::{black_box, criterion_group, BenchmarkId, Criterion, Throughput};
use tts_kernels::{
    f32_to_bf16, quantize_q4_rows, quantize_q8_rows, AttnShape, Conv1dShape, ConvTranspose1dShape,
    GroupFormat, Isa, Kernels, KvLayout, KvRows, Mat, Q4Rows, StridedConv1dShape,
};

#[path = "../examples/common/mod.rs"]
mod common;
use common::data;

fn paths() -> Vec<Kernels> {
    Isa::available()
        .into_iter()
        .filter_map(Kernels::new)
        .collect()
}

/// One weight matrix in every storage format the kernels take.
struct Formats {
    f32: Vec<f32>,
    bf16: Vec<u16>,
    q8: Vec<i8>,
    scales: Vec<f32>,
    q4: Q4Rows,
    n: usize,
    k: usize,
}

impl Formats {
    fn new(n: usize, k: usize, seed: u32) -> Formats {
        let f32 = data(n * k, seed);
        let bf16 = f32.iter().map(|&v| f32_to_bf16(v)).collect();
        let (q8, scales) = quantize_q8_rows(&f32, n, k);
        let q4 = quantize_q4_rows(&f32, n, k);
        Formats {
            f32,
            bf16,
            q8,
            scales,
            q4,
            n,
            k,
        }
    }
    fn mats(&self) -> [(&'static str, Mat<'_>); 4] {
        let (rows, cols) = (self.n, self.k);
        [
            (
                "bf16",
                Mat::Bf16 {
                    data: &self.bf16,
                    rows,
                    cols,
                },
            ),
            (
                "f32",
                Mat::F32 {
                    data: &self.f32,
                    rows,
                    cols,
                },
            ),
            (
                "q8",
                Mat::Q8 {
                    data: &self.q8,
                    scales: &self.scales,
                    rows,
                    cols,
                },
            ),
            (
                "q4",
                Mat::Q4 {
                    data: &self.q4.data,
                    group_scales: &self.q4.group_scales,
                    scales: &self.q4.scales,
                    rows,
                    cols,
                },
            ),
        ]
    }
}

fn matmul(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul");
    g.warm_up_time(std::time::Duration::from_secs(1));
    g.measurement_time(std::time::Duration::from_secs(2));
    // The LM shapes (0.6B: hidden 1024, q 2048, MLP 3072; 1.7B: 2048) at
    // decode (m = 1) and small batches. All fit in this machine's 32 MB L3
    // once warm, so these measure the kernels, not DRAM: see `streaming`.
    for (n, k) in [(1024, 1024), (3072, 1024), (1024, 3072), (2048, 2048)] {
        let w = Formats::new(n, k, 2);
        for m in [1, 2, 3, 4, 16] {
            let x = data(m * k, 1);
            let mut out = vec![0f32; m * n];
            g.throughput(Throughput::Elements((m * n * k) as u64));
            for ks in paths() {
                for (dt, mat) in w.mats() {
                    // The scalar reference is ~100x slower: only the smallest size.
                    if ks.isa() == Isa::Scalar && (n * k > 1024 * 1024 || m > 1) {
                        continue;
                    }
                    let id = BenchmarkId::new(
                        format!("{}/{dt}", ks.isa().name()),
                        format!("m{m}_{n}x{k}"),
                    );
                    g.bench_function(id, |b| {
                        b.iter(|| ks.matmul(black_box(&x), m, &mat, None, &mut out))
                    });
                    if dt == "q8" {
                        let id = BenchmarkId::new(
                            format!("{}/q8_widened", ks.isa().name()),
                            format!("m{m}_{n}x{k}"),
                        );
                        g.bench_function(id, |b| {
                            b.iter(|| ks.matmul_q8_widened(black_box(&x), m, &mat, None, &mut out))
                        });
                    }
                }
            }
        }
    }
    g.finish();
}

/// Decode as the model runs it: m = 1 over a stack of weight matrices far
/// larger than the L3 (here 48 x 1024x3072 = 151M weights: 302 MB bf16),
/// so every byte comes from DRAM. Throughput in weight *bytes*: compare
/// with `bandwidth` for the fraction of the memory floor reached.
/// The group-wise formats side by side (q4, iq4, q6, with int8 as the
/// yardstick) at the 0.6B's decode shapes, `n x k` = out x in: MLP down
/// (1024x3072), gate/up (3072x1024), attention output (1024x2048) and
/// query (2048x1024); m = 1 (decode) and 4. In cache once warm: these
/// measure the kernels' per-weight work, which is what separates the
/// formats (iq4 adds a `vpshufb` per 64 weights, q6 the high-pair unpack).
fn matmul_group(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul_group");
    g.warm_up_time(std::time::Duration::from_secs(1));
    g.measurement_time(std::time::Duration::from_secs(2));
    for (n, k) in [(1024, 3072), (3072, 1024), (1024, 2048), (2048, 1024)] {
        let w = data(n * k, 3);
        let (q8, scales) = quantize_q8_rows(&w, n, k);
        let groups: Vec<(GroupFormat, Q4Rows)> = GroupFormat::ALL
            .iter()
            .map(|&f| (f, f.quantize_rows(&w, n, k)))
            .collect();
        for m in [1, 4] {
            let x = data(m * k, 1);
            let mut out = vec![0f32; m * n];
            g.throughput(Throughput::Elements((m * n * k) as u64));
            for ks in paths().into_iter().filter(|k| k.isa() != Isa::Scalar) {
                let mut mats = vec![(
                    "q8",
                    Mat::Q8 {
                        data: &q8,
                        scales: &scales,
                        rows: n,
                        cols: k,
                    },
                )];
                for (f, q) in &groups {
                    mats.push((f.name(), f.mat(&q.data, &q.group_scales, &q.scales, n, k)));
                }
                for (dt, mat) in mats {
                    let id = BenchmarkId::new(
                        format!("{}/{dt}", ks.isa().name()),
                        format!("m{m}_{n}x{k}"),
                    );
                    g.bench_function(id, |b| {
                        b.iter(|| ks.matmul(black_box(&x), m, &mat, None, &mut out))
                    });
                }
            }
        }
    }
    g.finish();
}

fn streaming(c: &mut Criterion) {
    let mut g = c.benchmark_group("streaming");
    g.sample_size(10);
    let (layers, n, k) = (48, 1024, 3072);
    let ws: Vec<Formats> = (0..layers).map(|l| Formats::new(n, k, 100 + l)).collect();
    let x = data(k, 1);
    let mut out = vec![0f32; n];
    for ks in paths().into_iter().filter(|k| k.isa() != Isa::Scalar) {
        for fi in 0..5 {
            // 0..4: each format through `matmul`; 4: int8 through the
            // widened (f32-activation) kernel.
            let (dt, fm) = if fi == 4 {
                ("q8_widened", 2)
            } else {
                (ws[0].mats()[fi].0, fi)
            };
            let bytes: usize = ws.iter().map(|w| w.mats()[fm].1.bytes()).sum();
            g.throughput(Throughput::Bytes(bytes as u64));
            let id = BenchmarkId::new(
                format!("{}/{dt}", ks.isa().name()),
                format!("{layers}x{n}x{k}_m1"),
            );
            g.bench_function(id, |b| {
                b.iter(|| {
                    for w in &ws {
                        let mat = w.mats()[fm].1;
                        if fi == 4 {
                            ks.matmul_q8_widened(black_box(&x), 1, &mat, None, &mut out);
                        } else {
                            ks.matmul(black_box(&x), 1, &mat, None, &mut out);
                        }
                    }
                })
            });
        }
        // Three sessions' batched decode step: the same bytes, three
        // activation rows (int8, the `fast` preset's format).
        let (m, fm) = (3, 2);
        let x3 = data(m * k, 1);
        let mut out3 = vec![0f32; m * n];
        let bytes: usize = ws.iter().map(|w| w.mats()[fm].1.bytes()).sum();
        g.throughput(Throughput::Bytes(bytes as u64));
        let id = BenchmarkId::new(
            format!("{}/{}", ks.isa().name(), ws[0].mats()[fm].0),
            format!("{layers}x{n}x{k}_m{m}"),
        );
        g.bench_function(id, |b| {
            b.iter(|| {
                for w in &ws {
                    ks.matmul(black_box(&x3), m, &w.mats()[fm].1, None, &mut out3);
                }
            })
        });
    }
    g.finish();
}

/// This machine's memory read bandwidth: a sum over a 1 GiB buffer (well
/// past the L3), on one thread and on rayon's pool. The sum is of u64 in
/// 8 independent lanes so it is bound by memory, not by the adds.
fn bandwidth(c: &mut Criterion) {
    use rayon::prelude::*;
    let mut g = c.benchmark_group("bandwidth");
    g.sample_size(10);
    let buf: Vec<u64> = (0..(1usize << 30) / 8).map(|i| i as u64).collect();
    g.throughput(Throughput::Bytes((buf.len() * 8) as u64));
    use tts_kernels::probe::sum_u64 as sum;
    g.bench_function("read_1GiB/1thread", |b| b.iter(|| sum(black_box(&buf))));
    let threads = rayon::current_num_threads();
    g.bench_function(format!("read_1GiB/{threads}threads"), |b| {
        b.iter(|| {
            black_box(&buf)
                .par_chunks(1 << 20)
                .map(sum)
                .reduce(|| 0, u64::wrapping_add)
        })
    });
    g.finish();
}

fn conv(c: &mut Criterion) {
    let mut g = c.benchmark_group("conv1d");
    g.sample_size(10);
    // (name, c_in, c_out, kernel, dilation, groups, t_out): t_out = 1 is the
    // frame-rate streaming shape (one new column per call).
    for (name, ci, co, k, d, gr, t) in [
        ("dense1536_k7", 1536, 1536, 7, 1, 1, 256),
        ("dense1536_k7", 1536, 1536, 7, 1, 1, 1),
        ("depthwise1024_k7", 1024, 1024, 7, 1, 1024, 256),
    ] {
        let sh = Conv1dShape {
            c_in: ci,
            c_out: co,
            kernel: k,
            dilation: d,
            groups: gr,
        };
        let t_in = t + (k - 1) * d;
        let x = data(ci * t_in, 3);
        let w = data(co * (ci / gr) * k, 4);
        let bias = data(co, 5);
        let mut out = vec![0f32; co * t];
        g.throughput(Throughput::Elements((co * (ci / gr) * k * t) as u64));
        for ks in paths() {
            let id = BenchmarkId::new(ks.isa().name(), format!("{name}_t{t}"));
            g.bench_function(id, |b| {
                b.iter(|| ks.conv1d(black_box(&x), t_in, &w, Some(&bias), sh, &mut out))
            });
        }
    }
    // SEANet encoder downsampling (kernel 2 * stride) over 1 s of audio:
    // 64 -> 128 at stride 4 (24000 input columns) and 512 -> 1024 at
    // stride 8 (200 columns).
    for (name, ci, co, s, t_in) in [
        ("seanet64_s4", 64, 128, 4, 24000),
        ("seanet512_s8", 512, 1024, 8, 200),
    ] {
        let sh = StridedConv1dShape {
            conv: Conv1dShape {
                c_in: ci,
                c_out: co,
                kernel: 2 * s,
                dilation: 1,
                groups: 1,
            },
            stride: s,
        };
        let t = sh.t_out(t_in);
        let x = data(ci * t_in, 8);
        let w = data(co * ci * 2 * s, 9);
        let bias = data(co, 10);
        let mut out = vec![0f32; co * t];
        g.throughput(Throughput::Elements((co * ci * 2 * s * t) as u64));
        for ks in paths() {
            let id = BenchmarkId::new(ks.isa().name(), format!("{name}_t{t}"));
            g.bench_function(id, |b| {
                b.iter(|| ks.conv1d_strided(black_box(&x), t_in, &w, Some(&bias), sh, &mut out))
            });
        }
    }
    // Vocoder upsampling: 1536 -> 768, stride 8, kernel 16; 32 input frames
    // (offline) and 2 (streaming: one new frame plus one of history).
    for t_in in [32, 2] {
        let (ci, co, k, s) = (1536, 768, 16, 8);
        let sh = ConvTranspose1dShape {
            c_in: ci,
            c_out: co,
            kernel: k,
            stride: s,
        };
        let x = data(ci * t_in, 6);
        let w = data(ci * co * k, 7);
        let mut out = vec![0f32; co * ((t_in - 1) * s + k)];
        g.throughput(Throughput::Elements((ci * co * k * t_in) as u64));
        for ks in paths() {
            let id = BenchmarkId::new(
                ks.isa().name(),
                format!("transpose{ci}to{co}_k{k}s{s}_t{t_in}"),
            );
            g.bench_function(id, |b| {
                b.iter(|| ks.conv_transpose1d(black_box(&x), t_in, &w, None, sh, &mut out))
            });
        }
    }
    g.finish();
}

/// bf16 convolutions (`vdpbf16ps` and the f32-FMA emulation) and the int8
/// one (`vpdpbusd` or portable) next to the f32 kernel on the same vocoder shapes (code2wav with 40 frames: block
/// 1's residual units at 768 channels and 1280 samples, block 3's at 192 and
/// block 4's at 96 channels over 25600, a 1x1, and block 1's upsampling
/// over its phases). Scalar is left out: the
/// reference is far too slow at these sizes.
fn conv_bf16(c: &mut Criterion) {
    use tts_kernels::ConvBf16;
    let mut g = c.benchmark_group("conv_bf16");
    g.sample_size(10);
    let simd = || paths().into_iter().filter(|k| k.isa() != Isa::Scalar);
    // (name, c_in, c_out, kernel, dilation, t_out)
    for (name, ci, co, k, d, t) in [
        ("dense768_k7", 768, 768, 7, 3, 1280),
        ("dense192_k7", 192, 192, 7, 9, 25600),
        ("dense96_k7", 96, 96, 7, 9, 25600),
        ("dense384_k1", 384, 384, 1, 1, 6400),
    ] {
        let sh = Conv1dShape {
            c_in: ci,
            c_out: co,
            kernel: k,
            dilation: d,
            groups: 1,
        };
        let t_in = t + (k - 1) * d;
        let x = data(ci * t_in, 3);
        let w = data(co * ci * k, 4);
        let wb = ConvBf16::from_conv1d(&w, co, ci, k, tts_kernels::bf16_layout());
        let wq = tts_kernels::ConvQ8::from_conv1d(&w, co, ci, k);
        let bias = data(co, 5);
        let mut out = vec![0f32; co * t];
        g.throughput(Throughput::Elements((co * ci * k * t) as u64));
        for ks in simd() {
            let id = BenchmarkId::new(format!("{} f32", ks.isa().name()), name);
            g.bench_function(id, |b| {
                b.iter(|| ks.conv1d(black_box(&x), t_in, &w, Some(&bias), sh, &mut out))
            });
            for ks in bf16_variants(ks) {
                let id = BenchmarkId::new(
                    format!("{} bf16 {}", ks.isa().name(), ks.bf16_conv_path()),
                    name,
                );
                g.bench_function(id, |b| {
                    b.iter(|| ks.conv1d_bf16(black_box(&x), t_in, &wb, Some(&bias), d, &mut out))
                });
            }
            let id = BenchmarkId::new(
                format!("{} int8 {}", ks.isa().name(), ks.q8_conv_name()),
                name,
            );
            g.bench_function(id, |b| {
                b.iter(|| ks.conv1d_q8(black_box(&x), t_in, &wq, Some(&bias), d, &mut out))
            });
        }
    }
    // Block 1's upsampling: the f32 transposed kernel, and below f32 the
    // dense conv over its phases on `[history | new]` with the interleave
    // (what the decoder runs).
    let (ci, co, k, s, n) = (768, 384, 10, 5, 320);
    let sh = ConvTranspose1dShape {
        c_in: ci,
        c_out: co,
        kernel: k,
        stride: s,
    };
    let (taps, rows) = (k / s, co * s);
    let t_in = n + taps - 1;
    let x = data(ci * t_in, 6);
    let w = data(ci * co * k, 7);
    let wb = ConvBf16::from_transpose1d_phases(&w, sh, tts_kernels::bf16_layout());
    let wq = tts_kernels::ConvQ8::from_transpose1d_phases(&w, sh);
    let mut full = vec![0f32; co * ((t_in - 1) * s + k)];
    let (mut ph, mut out) = (vec![0f32; rows * n], vec![0f32; co * n * s]);
    g.throughput(Throughput::Elements((ci * co * k * n) as u64));
    let name = format!("transpose{ci}to{co}_k{k}s{s}_n{n}");
    for ks in simd() {
        let id = BenchmarkId::new(format!("{} f32", ks.isa().name()), &name);
        g.bench_function(id, |b| {
            b.iter(|| ks.conv_transpose1d(black_box(&x), t_in, &w, None, sh, &mut full))
        });
        for ks in bf16_variants(ks) {
            let id = BenchmarkId::new(
                format!("{} bf16 {} phases", ks.isa().name(), ks.bf16_conv_path()),
                &name,
            );
            g.bench_function(id, |b| {
                b.iter(|| {
                    ks.conv1d_bf16(black_box(&x), t_in, &wb, None, 1, &mut ph);
                    ks.interleave_phases(&ph, co, s, n, &mut out)
                })
            });
        }
        let id = BenchmarkId::new(
            format!("{} int8 {} phases", ks.isa().name(), ks.q8_conv_name()),
            &name,
        );
        g.bench_function(id, |b| {
            b.iter(|| {
                ks.conv1d_q8(black_box(&x), t_in, &wq, None, 1, &mut ph);
                ks.interleave_phases(&ph, co, s, n, &mut out)
            })
        });
    }
    g.finish();
}

fn elementwise(c: &mut Criterion) {
    let mut g = c.benchmark_group("elementwise");
    let (ch, t) = (384, 2048);
    let x0: Vec<f32> = data(ch * t, 8).iter().map(|v| v * 4.0).collect();
    let alpha: Vec<f32> = data(ch, 9).iter().map(|v| v.exp()).collect();
    let inv_beta: Vec<f32> = data(ch, 10).iter().map(|v| 1.0 / v.exp()).collect();
    let up = data(ch * t, 11);
    let mut x = x0.clone();
    let mut out = vec![0f32; ch * t];
    g.throughput(Throughput::Elements((ch * t) as u64));
    for ks in paths() {
        let name = ks.isa().name();
        g.bench_function(
            BenchmarkId::new(name, format!("snake_beta_{ch}x{t}")),
            |b| {
                b.iter(|| {
                    x.copy_from_slice(&x0);
                    ks.snake_beta(black_box(&mut x), t, &alpha, &inv_beta)
                })
            },
        );
        g.bench_function(BenchmarkId::new(name, format!("gelu_{}", ch * t)), |b| {
            b.iter(|| {
                x.copy_from_slice(&x0);
                ks.gelu(black_box(&mut x))
            })
        });
        g.bench_function(
            BenchmarkId::new(name, format!("silu_mul_{}", ch * t)),
            |b| b.iter(|| ks.silu_mul(black_box(&x0), &up, &mut out)),
        );
        let w = data(1024, 12);
        g.bench_function(
            BenchmarkId::new(name, format!("rms_norm_{}x1024", ch * t / 1024)),
            |b| b.iter(|| ks.rms_norm(black_box(&x0), &w, 1e-6, &mut out)),
        );
    }
    g.finish();
}

fn attention(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention");
    let (n_kv, nh, nkv, hd) = (512, 16, 8, 128);
    let sh = AttnShape {
        n_heads: nh,
        n_kv_heads: nkv,
        head_dim: hd,
        scale: (hd as f32).powf(-0.5),
        window: None,
    };
    let q = data(nh * hd, 13);
    let k = data(n_kv * nkv * hd, 14);
    let v = data(n_kv * nkv * hd, 15);
    // The LM caches' layout: each head's positions in one run.
    let by_head = |x: &[f32]| -> Vec<f32> {
        (0..nkv)
            .flat_map(|h| (0..n_kv).flat_map(move |j| (j * nkv + h) * hd..(j * nkv + h + 1) * hd))
            .map(|i| x[i])
            .collect()
    };
    let (kh, vh) = (by_head(&k), by_head(&v));
    // The head-major cache in bf16 (the talker's KV cache below f32).
    let half = |x: &[f32]| {
        x.iter()
            .map(|&x| tts_kernels::f32_to_bf16(x))
            .collect::<Vec<u16>>()
    };
    let (kb, vb) = (half(&kh), half(&vh));
    let mut out = vec![0f32; nh * hd];
    g.throughput(Throughput::Elements((2 * nh * n_kv * hd) as u64));
    for ks in paths() {
        for (name, kk, vv, layout) in [
            ("positions", (&k).into(), (&v).into(), KvLayout::Positions),
            (
                "heads",
                (&kh).into(),
                (&vh).into(),
                KvLayout::Heads { capacity: n_kv },
            ),
            (
                "heads_bf16",
                (&kb).into(),
                (&vb).into(),
                KvLayout::Heads { capacity: n_kv },
            ),
        ] {
            let id = BenchmarkId::new(
                ks.isa().name(),
                format!("decode_kv{n_kv}_h{nh}_kv{nkv}_d{hd}_{name}"),
            );
            g.bench_function(id, |b| {
                b.iter(|| {
                    ks.attention(
                        black_box(&q),
                        1,
                        n_kv - 1,
                        KvRows {
                            k: kk,
                            v: vv,
                            n: n_kv,
                            pos0: 0,
                            layout,
                        },
                        sh,
                        &mut out,
                    )
                })
            });
        }
    }
    g.finish();
}

criterion_group!(
    benches,
    matmul,
    matmul_group,
    streaming,
    bandwidth,
    conv,
    conv_bf16,
    elementwise,
    attention
);
/// `criterion_main!(benches)`, after installing the kernel switches from
/// the environment (`TTS_RT_PREFETCH`, `TTS_RT_TEAMS`, ...) as `tts-rt`
/// does.
fn main() {
    common::install_kernel_settings();
    benches();
    Criterion::default().configure_from_args().final_summary();
}

/// The distinct bf16 convolution paths of `ks`: its own (AMX tiles where
/// granted), `vdpbf16ps`, and the f32-FMA emulation.
fn bf16_variants(ks: Kernels) -> Vec<Kernels> {
    let mut v: Vec<Kernels> = Vec::new();
    for k in [ks, ks.without_amx(), ks.with_emulated_bf16()] {
        if v.iter().all(|o| o.bf16_conv_path() != k.bf16_conv_path()) {
            v.push(k);
        }
    }
    v
}
