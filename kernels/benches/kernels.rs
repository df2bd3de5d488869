//! Criterion benches: each hot kernel at model sizes, scalar reference vs
//! every SIMD path the CPU has. `cargo bench -p tts-kernels -- matmul` etc.
//! Throughput is in elements = multiply-adds (x2 for FLOP/s) for matmul and
//! conv, elements for element-wise kernels.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tts_kernels::{f32_to_bf16, AttnShape, Conv1dShape, Isa, Kernels, Mat};

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

fn paths() -> Vec<Kernels> {
    Isa::available()
        .into_iter()
        .filter_map(Kernels::new)
        .collect()
}

fn matmul(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul");
    for (m, n, k) in [
        (1, 1024, 1024),
        (1, 3072, 1024),
        (1, 1024, 3072),
        (1, 2048, 2048),
        (16, 2048, 2048),
    ] {
        let x = data(m * k, 1);
        let wf = data(n * k, 2);
        let wb: Vec<u16> = wf.iter().map(|&v| f32_to_bf16(v)).collect();
        let mut out = vec![0f32; m * n];
        g.throughput(Throughput::Elements((m * n * k) as u64));
        for ks in paths() {
            for (dt, w) in [
                (
                    "bf16",
                    Mat::Bf16 {
                        data: &wb,
                        rows: n,
                        cols: k,
                    },
                ),
                (
                    "f32",
                    Mat::F32 {
                        data: &wf,
                        rows: n,
                        cols: k,
                    },
                ),
            ] {
                // The scalar reference is ~100x slower: only the smallest size.
                if ks.isa() == Isa::Scalar && n * k > 1024 * 1024 {
                    continue;
                }
                let id =
                    BenchmarkId::new(format!("{}/{dt}", ks.isa().name()), format!("m{m}_{n}x{k}"));
                g.bench_function(id, |b| {
                    b.iter(|| ks.matmul(black_box(&x), m, &w, None, &mut out))
                });
            }
        }
    }
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
    // Vocoder upsampling: 1536 -> 768, stride 8, kernel 16; 32 input frames
    // (offline) and 2 (streaming: one new frame plus one of history).
    for t_in in [32, 2] {
        let (ci, co, k, s) = (1536, 768, 16, 8);
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
                b.iter(|| {
                    ks.conv_transpose1d(black_box(&x), t_in, &w, None, ci, co, k, s, &mut out)
                })
            });
        }
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
    let mut out = vec![0f32; nh * hd];
    g.throughput(Throughput::Elements((2 * nh * n_kv * hd) as u64));
    for ks in paths() {
        let id = BenchmarkId::new(
            ks.isa().name(),
            format!("decode_kv{n_kv}_h{nh}_kv{nkv}_d{hd}"),
        );
        g.bench_function(id, |b| {
            b.iter(|| ks.attention(black_box(&q), 1, n_kv - 1, &k, &v, n_kv, 0, sh, &mut out))
        });
    }
    g.finish();
}

criterion_group!(benches, matmul, conv, elementwise, attention);
criterion_main!(benches);
