//! The iq4 and q6 weight formats on every path this CPU has: the SIMD and
//! portable kernels must give the reference's bits (exact integer sums)
//! for every shape, thread count and magnitude; the reference must be the
//! exact product of the int8-rounded activations with the dequantized
//! weights; and the quantizers must keep their error contracts. (q4 has
//! the same checks in differential.rs.)

use tts_kernels::q4::Q4_GROUP;
use tts_kernels::{quantize_a8_row, reference, GroupFormat, Isa, Kernels, Mat};

/// splitmix64 test data.
struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn f(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f() * scale).collect()
    }
    /// Approximately standard normal (sum of 4 uniforms, rescaled).
    fn gauss(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (0..4).map(|_| self.f()).sum::<f32>() * 0.866)
            .collect()
    }
}

/// Every path, the scalar one (the portable kernel) included.
fn paths() -> Vec<Kernels> {
    let mut ks = Vec::new();
    for isa in [Isa::Avx2, Isa::Avx512] {
        match Kernels::new(isa) {
            Some(k) => ks.push(k),
            None => eprintln!("skipping {}: this CPU lacks it", isa.name()),
        }
    }
    ks.push(Kernels::new(Isa::Scalar).expect("scalar is always available"));
    ks
}

fn bits_with_threads(threads: usize, f: impl FnOnce() -> Vec<f32> + Send) -> Vec<u32> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    pool.install(f).iter().map(|v| v.to_bits()).collect()
}

const NEW: [GroupFormat; 2] = [GroupFormat::Iq4, GroupFormat::Q6];

fn check_bit_exact(f: GroupFormat, x: &[f32], m: usize, wf: &[f32], n: usize, k: usize) {
    let q = f.quantize_rows(wf, n, k);
    // Unaligned data too.
    let du: Vec<u8> = std::iter::once(0).chain(q.data.iter().copied()).collect();
    let w = f.mat(&du[1..], &q.group_scales, &q.scales, n, k);
    let mut rng = Rng(n as u64 * 31 + k as u64);
    let bias = rng.vec(n, 1.0);
    for b in [None, Some(&bias[..])] {
        let mut want = vec![0f32; m * n];
        reference::matmul(x, m, &w, b, &mut want);
        let want: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
        for ks in paths() {
            for threads in [1, 3] {
                let got = bits_with_threads(threads, || {
                    let mut got = vec![f32::NAN; m * n];
                    ks.matmul(x, m, &w, b, &mut got);
                    got
                });
                assert_eq!(
                    got,
                    want,
                    "{} {f} m={m} n={n} k={k} bias={} threads={threads}: not bit-exact",
                    ks.isa().name(),
                    b.is_some()
                );
            }
        }
    }
}

/// Bit-exact on awkward shapes: partial groups and super-blocks, k past
/// the 8-super-block flush, m > 1 in every blocking remainder, sizes that
/// take the rayon path.
#[test]
fn iq4_and_q6_matmuls_are_bit_exact_on_every_path() {
    let mut rng = Rng(31);
    let mut shapes = vec![];
    for m in [1, 2, 3, 5] {
        for n in [1, 3, 4, 5, 9] {
            for k in [0, 1, 7, 31, 33, 100, 511, 512, 513] {
                shapes.push((m, n, k));
            }
        }
    }
    shapes.extend([
        (1, 301, 1024),
        (5, 131, 517),
        (16, 64, 1024),
        (1, 9, 9 * 512 + 33),
        (2, 5, 3 * 16384),
        (20, 6, 300),
        (9, 17, 3072),
    ]);
    for f in NEW {
        for &(m, n, k) in &shapes {
            let x = rng.vec(m * k, 1.0);
            let wf = rng.vec(n * k, 0.05);
            check_bit_exact(f, &x, m, &wf, n, k);
        }
    }
}

/// The largest integer sums each format can produce (every weight at the
/// format's extreme level and scale, every activation at +-127) over 40
/// super-blocks: i32 lanes must be flushed before they overflow.
#[test]
fn extreme_magnitudes_do_not_overflow_the_lanes() {
    let (n, k) = (9, 40 * 512);
    for f in NEW {
        for sign in [1.0f32, -1.0] {
            let wf: Vec<f32> = (0..n * k)
                .map(|i| if (i / k) % 2 == 0 { -sign } else { sign })
                .collect();
            let x: Vec<f32> = vec![sign; k];
            check_bit_exact(f, &x, 1, &wf, n, k);
            let q = f.quantize_rows(&wf, n, k);
            let w = f.mat(&q.data, &q.group_scales, &q.scales, n, k);
            let mut out = vec![0f32; n];
            Kernels::selected().matmul(&x, 1, &w, None, &mut out);
            for (j, &o) in out.iter().enumerate() {
                let want = if j % 2 == 0 { -(k as f32) } else { k as f32 };
                assert!(
                    (o - want).abs() <= 0.03 * k as f32,
                    "{f} row {j}: {o} vs {want}"
                );
            }
        }
    }
}

/// The reference is the exact product of the int8-rounded activations and
/// the dequantized weights: each x moves by at most `sx / 2`, so an output
/// by at most `sx / 2 * sum |w|` plus f32 rounding of the dot.
#[test]
fn reference_is_the_dequantized_product() {
    let mut rng = Rng(32);
    for f in NEW {
        for (m, n, k) in [(3, 7, 1000), (1, 5, 64), (2, 3, 33)] {
            let x = rng.vec(m * k, 1.0);
            let wf = rng.vec(n * k, 0.05);
            let q = f.quantize_rows(&wf, n, k);
            let w = f.mat(&q.data, &q.group_scales, &q.scales, n, k);
            let mut got = vec![0f32; m * n];
            reference::matmul(&x, m, &w, None, &mut got);
            let mut deq = vec![0f32; k];
            for j in 0..n {
                w.row_to_f32(j, &mut deq);
                for i in 0..m {
                    let xi = &x[i * k..(i + 1) * k];
                    let mut qi = vec![0i8; k];
                    let sx = quantize_a8_row(xi, &mut qi);
                    let dot: f64 = xi.iter().zip(&deq).map(|(a, b)| (a * b) as f64).sum();
                    let abs: f32 = deq.iter().map(|v| v.abs()).sum();
                    let mag: f32 = xi.iter().zip(&deq).map(|(a, b)| (a * b).abs()).sum();
                    let bound = sx / 2.0 * abs * 1.001 + 2e-5 * mag + 1e-6;
                    let e = (got[i * n + j] - dot as f32).abs();
                    assert!(e <= bound, "{f} m={m} n={n} k={k} ({i},{j}): {e} > {bound}");
                }
            }
        }
    }
}

/// Relative RMS error of the dequantized weights.
fn rel_error(f: GroupFormat, w: &[f32], rows: usize, cols: usize) -> f64 {
    let q = f.quantize_rows(w, rows, cols);
    let mat = f.mat(&q.data, &q.group_scales, &q.scales, rows, cols);
    let mut deq = vec![0f32; cols];
    let (mut e2, mut w2) = (0f64, 0f64);
    for r in 0..rows {
        mat.row_to_f32(r, &mut deq);
        for (&a, &b) in w[r * cols..(r + 1) * cols].iter().zip(&deq) {
            e2 += ((a - b) as f64).powi(2);
            w2 += (a as f64).powi(2);
        }
    }
    (e2 / w2).sqrt()
}

/// The formats' weight error on Gaussian and heavy-tailed weights: iq4
/// below q4 at the same 4.25 bits (the point of the non-linear grid and
/// least-squares scales), q6 well below both. Printed for docs/.
#[test]
fn iq4_beats_q4_and_q6_beats_both_in_weight_error() {
    let mut rng = Rng(33);
    let (rows, cols) = (64, 1024);
    let g = rng.gauss(rows * cols);
    // Heavy tails: a Gaussian cubed (kurtosis ~ 40).
    let t: Vec<f32> = g.iter().map(|v| v * v * v / 3.0).collect();
    for (name, w) in [("gaussian", &g), ("heavy-tailed", &t)] {
        let e: Vec<f64> = GroupFormat::ALL
            .iter()
            .map(|&f| rel_error(f, w, rows, cols))
            .collect();
        println!(
            "{name}: relative RMS weight error q4 {:.4}, iq4 {:.4}, q6 {:.4}",
            e[0], e[1], e[2]
        );
        assert!(e[1] < e[0] * 0.95, "{name}: iq4 {} vs q4 {}", e[1], e[0]);
        assert!(e[2] < e[0] * 0.3, "{name}: q6 {} vs q4 {}", e[2], e[0]);
    }
}

/// Zero rows and groups stay exactly zero, padding holds zero weights, a
/// non-finite row gets a NaN scale, and every q6 element is within half a
/// step of its weight (the no-clamp candidate bounds the winner by one
/// step; the clamp never triggers at the top scale).
#[test]
fn quantizers_keep_zeros_padding_and_nan() {
    let mut rng = Rng(34);
    let (rows, cols) = (6, 1100);
    let mut w = rng.vec(rows * cols, 3.0);
    w[cols..2 * cols].fill(0.0);
    w[2 * cols + 64..2 * cols + 96].fill(0.0);
    w[3 * cols + 5] = f32::NAN;
    for f in NEW {
        let q = f.quantize_rows(&w, rows, cols);
        let rg = f.row_groups(cols);
        assert_eq!(q.scales[1], 0.0, "{f}");
        assert!(q.scales[3].is_nan(), "{f}");
        assert_eq!(q.group_scales[2 * rg + 2], 0, "{f}");
        let mat = f.mat(&q.data, &q.group_scales, &q.scales, rows, cols);
        let kp = rg * Q4_GROUP;
        let mut deq = vec![0f32; kp];
        for r in [0, 1, 2, 4, 5] {
            // Past `cols` (padding) the stored weights dequantize to 0; for
            // iq4 (no zero level) only in whole padding groups: the tail of
            // a partial group holds the level nearest 0, which meets the
            // zero-padded activations.
            let wide = f.mat(&q.data, &q.group_scales, &q.scales, rows, kp);
            wide.row_to_f32(r, &mut deq);
            let pad = match f {
                GroupFormat::Iq4 => cols.next_multiple_of(Q4_GROUP),
                _ => cols,
            };
            assert!(deq[pad..].iter().all(|&v| v == 0.0), "{f} row {r} padding");
            mat.row_to_f32(r, &mut deq[..cols]);
            let row = &w[r * cols..(r + 1) * cols];
            for (g, (wg, dg)) in row.chunks(Q4_GROUP).zip(deq.chunks(Q4_GROUP)).enumerate() {
                if wg.iter().all(|&v| v == 0.0) {
                    assert!(dg.iter().all(|&v| v == 0.0), "{f} row {r} group {g}");
                }
                if f == GroupFormat::Q6 {
                    let step = q.scales[r] * q.group_scales[r * rg + g] as f32;
                    for (&a, &b) in wg.iter().zip(dg) {
                        assert!((a - b).abs() <= step * (1.0 + 1e-5) + 1e-12);
                    }
                }
            }
        }
    }
}

#[test]
fn mat_reports_bytes_and_bits_per_weight() {
    let (rows, cols) = (3, 1024);
    for f in GroupFormat::ALL {
        let q = f.quantize_rows(&vec![0.5; rows * cols], rows, cols);
        let m: Mat<'_> = f.mat(&q.data, &q.group_scales, &q.scales, rows, cols);
        assert_eq!(m.group_parts().map(|p| p.0), Some(f));
        let bits = (m.bytes() - 4 * rows) as f64 * 8.0 / (rows * cols) as f64;
        assert_eq!(bits, f.bits_per_weight(), "{f}");
    }
}
