//! Every kernel on every path this CPU has, against `reference`, over awkward
//! sizes: 0 where meaningful, 1, lane counts +-1 (8 and 16), 15/17/33,
//! inputs offset by one element (unaligned), and sizes large enough to take
//! the rayon path.
//!
//! (One module of ~1400 lines on purpose: every kernel's cases share the
//! same helpers and tolerances.)
//!
//! Tolerances, and why:
//! - `DOT_REL = 2e-5` of `sum |a_i b_i|`, for dot-product shaped results
//!   (matmul, conv): reordering an f32 sum of n terms moves it by at most
//!   ~n * 6e-8 * sum|terms| and in practice ~sqrt(n) of that; the scale is
//!   the sum of magnitudes so cancellation to ~0 does not blow up a relative
//!   test.
//! - `ATTN_ABS = 2e-5` of `max |v|`: outputs are convex combinations of `v`;
//!   the SIMD exp is ~2 ulp and the sums reorder.
//! - `EW_REL = 2e-6` for exp-based element-wise kernels (silu, GELU): a few
//!   ulp from exp and the division; GELU's erfc is specified to 1.2e-7.
//! - snake: `2e-6 * inv_beta + 2.4e-7 * |x|`: the vector sin is accurate to
//!   3e-7 absolute (sin^2 doubles it) plus one rounding of the sum.

use tts_kernels::q4::{q4_row_bytes, q4_row_groups, Q4_GROUP};
use tts_kernels::{
    bf16_to_f32, f32_to_bf16, quantize_a8_row, quantize_q4_rows, quantize_q8_rows, reference,
    AttnSegment, AttnShape, Conv1dShape, ConvBf16, ConvQ8, ConvTranspose1dShape, GroupFormat, Isa,
    Kernels, KvData, KvLayout, KvRows, Mat, Q4Rows, StridedConv1dShape,
};

const DOT_REL: f32 = 2e-5;
const ATTN_ABS: f32 = 2e-5;
const EW_REL: f32 = 2e-6;
const GELU_REL: f32 = 1e-6;
const GELU_ABS: f32 = 1e-14;

/// splitmix64: tiny, deterministic, good enough for test data.
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
    /// `n` values uniform in `[-scale, scale)`.
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f() * scale).collect()
    }
}

/// A copy of `v` starting one element into its allocation, so SIMD loads
/// are misaligned w.r.t. vector width whatever the allocator returned.
fn unaligned(v: &[f32]) -> Vec<f32> {
    let mut b = Vec::with_capacity(v.len() + 1);
    b.push(0.0);
    b.extend_from_slice(v);
    b
}

/// The SIMD paths to test; prints why a path is skipped.
fn paths() -> Vec<Kernels> {
    let mut ks = Vec::new();
    for isa in [Isa::Avx2, Isa::Avx512] {
        match Kernels::new(isa) {
            Some(k) => ks.push(k),
            None => eprintln!("skipping {}: this CPU lacks it", isa.name()),
        }
    }
    // The scalar path must be the reference itself.
    ks.push(Kernels::new(Isa::Scalar).expect("scalar is always available"));
    ks
}

fn check_close(what: &str, got: &[f32], want: &[f32], tol: impl Fn(usize) -> f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for i in 0..got.len() {
        let (g, w) = (got[i], want[i]);
        let ok = (g - w).abs() <= tol(i) || (g.is_nan() && w.is_nan());
        assert!(ok, "{what}: element {i}: got {g}, want {w}, tol {}", tol(i));
    }
}

#[test]
fn matmul_f32_and_bf16() {
    let mut rng = Rng(1);
    let mut shapes = vec![];
    for m in [1, 2, 3, 4, 5, 9] {
        for n in [1, 3, 4, 5, 9] {
            for k in [0, 1, 7, 8, 9, 15, 16, 17, 33] {
                shapes.push((m, n, k));
            }
        }
    }
    // Parallel path, odd row counts and a k that is no lane multiple.
    shapes.extend([(1, 301, 1024), (5, 131, 517), (16, 64, 256), (3, 1030, 100)]);
    for ks in paths() {
        for &(m, n, k) in &shapes {
            let x = unaligned(&rng.vec(m * k, 1.0));
            let x = &x[1..];
            let wf = unaligned(&rng.vec(n * k, 1.0));
            let wb: Vec<u16> = std::iter::once(0)
                .chain(wf[1..].iter().map(|&v| f32_to_bf16(v)))
                .collect();
            let bias = rng.vec(n, 1.0);
            for (label, w) in [
                (
                    "f32",
                    Mat::F32 {
                        data: &wf[1..],
                        rows: n,
                        cols: k,
                    },
                ),
                (
                    "bf16",
                    Mat::Bf16 {
                        data: &wb[1..],
                        rows: n,
                        cols: k,
                    },
                ),
            ] {
                for b in [None, Some(&bias[..])] {
                    let mut want = vec![0f32; m * n];
                    reference::matmul(x, m, &w, b, &mut want);
                    let mut got = vec![f32::NAN; m * n];
                    ks.matmul(x, m, &w, b, &mut got);
                    let scale = |idx: usize| {
                        let (i, j) = (idx / n, idx % n);
                        let mut row2 = vec![0f32; k];
                        w.row_to_f32(j, &mut row2);
                        let s: f32 = x[i * k..(i + 1) * k]
                            .iter()
                            .zip(&row2)
                            .map(|(a, b)| (a * b).abs())
                            .sum();
                        DOT_REL * s + 1e-6
                    };
                    let what = format!(
                        "{} matmul {label} m={m} n={n} k={k} bias={}",
                        ks.isa().name(),
                        b.is_some()
                    );
                    check_close(&what, &got, &want, scale);
                }
            }
        }
    }
}

/// A decode step (m = 1: one stream per task for int8 on VNNI, 1 x 4 blocks
/// otherwise) gives each output the bits the same row gets inside a batch
/// (m = 2..5, 9, 11: blocked, with every rest block): batching sessions
/// must not change what any of them hears. f32, bf16 and int8 weights, a
/// parallel shape with a k that is no lane multiple.
#[test]
fn one_row_equals_its_row_in_a_batch() {
    let mut rng = Rng(5);
    let (n, k) = (301, 1024 + 3);
    let x = rng.vec(11 * k, 1.0);
    let wf = rng.vec(n * k, 0.5);
    let wb: Vec<u16> = wf.iter().map(|&v| f32_to_bf16(v)).collect();
    let (q, sc) = quantize_q8_rows(&wf, n, k);
    let mats = [
        (
            "f32",
            Mat::F32 {
                data: &wf,
                rows: n,
                cols: k,
            },
        ),
        (
            "bf16",
            Mat::Bf16 {
                data: &wb,
                rows: n,
                cols: k,
            },
        ),
        (
            "int8",
            Mat::Q8 {
                data: &q,
                scales: &sc,
                rows: n,
                cols: k,
            },
        ),
    ];
    // m = 2..5 (the rest blocks after none or one full block of the
    // widest kernel), 9 and 11 (a full block and its rest).
    for (ks, m) in paths()
        .into_iter()
        .flat_map(|ks| [2, 3, 4, 5, 9, 11].map(|m| (ks, m)))
    {
        let x = &x[..m * k];
        for (label, w) in &mats {
            let mut batch = vec![0f32; m * n];
            ks.matmul(x, m, w, None, &mut batch);
            for i in 0..m {
                let mut one = vec![0f32; n];
                ks.matmul(&x[i * k..(i + 1) * k], 1, w, None, &mut one);
                assert_eq!(
                    one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    batch[i * n..(i + 1) * n]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>(),
                    "{} {label}: row {i} of {m}",
                    ks.isa().name()
                );
            }
        }
    }
}

/// `matmul_shared` (several weights that read one `x`, one parallel
/// region for int8) gives every output the bits of its own `matmul`, on
/// every ISA path, at m = 1 (decode), 3 (three sessions) and 5: int8, bf16,
/// f32, q4, iq4 and q6 parts whose row counts split tasks across weights at
/// no block boundary, and a mix of int8 and bf16 (one `matmul` per weight).
#[test]
fn shared_matmul_equals_one_matmul_per_weight() {
    let mut rng = Rng(11);
    let k = 1024 + 3;
    let rows = [37usize, 5, 301];
    let wf: Vec<Vec<f32>> = rows.iter().map(|&n| rng.vec(n * k, 0.5)).collect();
    let q: Vec<(Vec<i8>, Vec<f32>)> = wf
        .iter()
        .zip(rows)
        .map(|(w, n)| quantize_q8_rows(w, n, k))
        .collect();
    let wbs: Vec<Vec<u16>> = wf
        .iter()
        .map(|w| w.iter().map(|&v| f32_to_bf16(v)).collect())
        .collect();
    let bf16: Vec<Mat<'_>> = wbs
        .iter()
        .zip(rows)
        .map(|(d, n)| Mat::Bf16 {
            data: d,
            rows: n,
            cols: k,
        })
        .collect();
    let f32s: Vec<Mat<'_>> = wf
        .iter()
        .zip(rows)
        .map(|(d, n)| Mat::F32 {
            data: d,
            rows: n,
            cols: k,
        })
        .collect();
    let int8: Vec<Mat<'_>> = q
        .iter()
        .zip(rows)
        .map(|((d, s), n)| Mat::Q8 {
            data: d,
            scales: s,
            rows: n,
            cols: k,
        })
        .collect();
    let grouped: Vec<(GroupFormat, Vec<Q4Rows>)> = GroupFormat::ALL
        .iter()
        .map(|&f| {
            let parts = wf
                .iter()
                .zip(rows)
                .map(|(w, n)| f.quantize_rows(w, n, k))
                .collect();
            (f, parts)
        })
        .collect();
    let groups: Vec<(&str, Vec<Mat<'_>>)> = grouped
        .iter()
        .map(|(f, parts)| {
            let mats = parts
                .iter()
                .zip(rows)
                .map(|(q, n)| f.mat(&q.data, &q.group_scales, &q.scales, n, k))
                .collect();
            (f.name(), mats)
        })
        .collect();
    let mixed = vec![int8[0], bf16[1], int8[2]];
    for m in [1, 3, 5] {
        let x = rng.vec(m * k, 1.0);
        for ks in paths() {
            let sets = [
                ("int8", &int8),
                ("bf16", &bf16),
                ("f32", &f32s),
                ("mixed", &mixed),
            ];
            for (label, mats) in sets.into_iter().chain(groups.iter().map(|(l, v)| (*l, v))) {
                let mut outs: Vec<Vec<f32>> = rows.iter().map(|&n| vec![f32::NAN; m * n]).collect();
                let mut parts: Vec<(&Mat<'_>, &mut [f32])> = mats
                    .iter()
                    .zip(outs.iter_mut())
                    .map(|(w, o)| (w, &mut o[..]))
                    .collect();
                ks.matmul_shared(&x, m, &mut parts);
                for (i, (w, got)) in mats.iter().zip(&outs).enumerate() {
                    let mut want = vec![0f32; m * rows[i]];
                    ks.matmul(&x, m, w, None, &mut want);
                    assert_eq!(
                        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{} {label} m = {m}: weight {i}",
                        ks.isa().name()
                    );
                }
            }
        }
    }
}

/// Int8 weights with per-row scales. `matmul` (int16 activations, exact
/// integer sums) must equal the reference bit for bit on every path, any k
/// (including k > 4096, where lanes are flushed to i64 blocks);
/// `matmul_q8_widened` (f32 activations) differs by summation order only:
/// `DOT_REL` of `scale_j * sum |x_i q_ij|`. Both must stay within the
/// activation-rounding bound of the exact product with the dequantized
/// weights: int16 rounding moves each x by at most max|x|/65534, so the
/// output by at most `scale_j * sum |q_ij| * max|x| / 65534` (+ f32 sums).
#[test]
fn matmul_q8() {
    let mut rng = Rng(11);
    let mut shapes = vec![];
    for m in [1, 2, 3, 4, 5, 7, 9] {
        for n in [1, 3, 4, 5, 9] {
            for k in [0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 65] {
                shapes.push((m, n, k));
            }
        }
    }
    shapes.extend([
        (1, 301, 1024),
        (5, 131, 517),
        (16, 64, 256),
        (3, 1030, 100),
        (1, 9, 4096 + 33),
        (2, 5, 3 * 4096),
        (20, 6, 300),
        // The one-row stream (m = 1): 64-weight steps, a 32-step and a
        // masked tail, blocks of 4096 with a tail block, many tasks.
        (1, 37, 191),
        (1, 21, 4096 + 100),
        (1, 600, 2048),
    ]);
    for ks in paths() {
        for &(m, n, k) in &shapes {
            let x = unaligned(&rng.vec(m * k, 1.0));
            let x = &x[1..];
            let wf = rng.vec(n * k, 0.05);
            let (q, sc) = quantize_q8_rows(&wf, n, k);
            // Unaligned int8 data too.
            let qu: Vec<i8> = std::iter::once(0).chain(q.iter().copied()).collect();
            let w = Mat::Q8 {
                data: &qu[1..],
                scales: &sc,
                rows: n,
                cols: k,
            };
            let bias = rng.vec(n, 1.0);
            for b in [None, Some(&bias[..])] {
                let what = format!(
                    "{} matmul q8 m={m} n={n} k={k} bias={}",
                    ks.isa().name(),
                    b.is_some()
                );
                let mut want = vec![0f32; m * n];
                reference::matmul(x, m, &w, b, &mut want);
                let mut got = vec![f32::NAN; m * n];
                ks.matmul(x, m, &w, b, &mut got);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{what}: int16-activation path is not bit-exact"
                );

                let mut want_w = vec![0f32; m * n];
                reference::matmul_q8_widened(x, m, &w, b, &mut want_w);
                let mut got_w = vec![f32::NAN; m * n];
                ks.matmul_q8_widened(x, m, &w, b, &mut got_w);
                let sum_abs = |i: usize, j: usize| -> f32 {
                    x[i * k..(i + 1) * k]
                        .iter()
                        .zip(&q[j * k..(j + 1) * k])
                        .map(|(a, &b)| (a * b as f32).abs())
                        .sum()
                };
                let tol = |idx: usize| DOT_REL * sum_abs(idx / n, idx % n) * sc[idx % n] + 1e-6;
                check_close(&format!("{what} widened"), &got_w, &want_w, tol);

                let a16_bound = |idx: usize| {
                    let (i, j) = (idx / n, idx % n);
                    let xmax = x[i * k..(i + 1) * k]
                        .iter()
                        .fold(0f32, |a, v| a.max(v.abs()));
                    let qsum: f32 = q[j * k..(j + 1) * k]
                        .iter()
                        .map(|&v| (v as f32).abs())
                        .sum();
                    sc[j] * (qsum * xmax / 65534.0 + DOT_REL * sum_abs(i, j)) + 1e-6
                };
                check_close(&format!("{what} a16 vs widened"), &got, &want_w, a16_bound);
            }
        }
    }
}

/// The quantizer's contract: |w - q * scale| <= scale / 2 (+ f32 rounding),
/// |q| <= 127, a zero row stays zero, and the row maximum maps to +-127.
#[test]
fn q8_quantization_error_is_half_a_step() {
    let mut rng = Rng(12);
    let (rows, cols) = (37, 129);
    let mut w = rng.vec(rows * cols, 3.0);
    w[5 * cols..6 * cols].fill(0.0);
    let (q, sc) = quantize_q8_rows(&w, rows, cols);
    assert_eq!(sc[5], 0.0);
    for r in 0..rows {
        let row = &w[r * cols..(r + 1) * cols];
        let qr = &q[r * cols..(r + 1) * cols];
        for (&v, &qi) in row.iter().zip(qr) {
            assert!(qi != -128, "row {r}: -128 produced");
            let err = (v - qi as f32 * sc[r]).abs();
            assert!(
                err <= sc[r] * 0.5 * (1.0 + 1e-5) + 1e-12,
                "row {r}: error {err} > scale/2 ({})",
                sc[r] / 2.0
            );
        }
        if sc[r] > 0.0 {
            assert_eq!(
                qr.iter().map(|v| v.unsigned_abs()).max(),
                Some(127),
                "row {r}"
            );
        }
    }
}

/// 4-bit group-wise weights. `matmul` (int8 activations, exact integer
/// sums) must equal the reference bit for bit on every path (the scalar
/// path runs the portable kernel, not the reference), any k: partial
/// groups and super-blocks (k not a multiple of 32 / 512), and k past
/// 32 super-blocks (16384), where i32 lanes are flushed to i64; m > 1 in
/// every blocking remainder; rayon-sized problems; 1 and 3 threads. And
/// the result must be the exact product of the int8-rounded activations
/// with the dequantized weights: each x moves by at most `sx / 2`, so the
/// output by at most `sx / 2 * sum_c |w_c|` (+ f32 rounding of the dot).
#[test]
fn matmul_q4() {
    let mut rng = Rng(21);
    let mut shapes = vec![];
    for m in [1, 2, 3, 4, 5, 7] {
        for n in [1, 3, 4, 5, 9] {
            for k in [0, 1, 7, 31, 32, 33, 64, 100, 511, 512, 513] {
                shapes.push((m, n, k));
            }
        }
    }
    shapes.extend([
        (1, 301, 1024),
        (5, 131, 517),
        (16, 64, 1024),
        (3, 1030, 100),
        (1, 9, 32 * 512 + 33),
        (2, 5, 3 * 16384),
        (20, 6, 300),
        (9, 17, 3072),
    ]);
    for ks in paths() {
        for &(m, n, k) in &shapes {
            let x = unaligned(&rng.vec(m * k, 1.0));
            let x = &x[1..];
            let wf = rng.vec(n * k, 0.05);
            let q = quantize_q4_rows(&wf, n, k);
            // Unaligned nibble data too.
            let du: Vec<u8> = std::iter::once(0).chain(q.data.iter().copied()).collect();
            let w = Mat::Q4 {
                data: &du[1..],
                group_scales: &q.group_scales,
                scales: &q.scales,
                rows: n,
                cols: k,
            };
            let bias = rng.vec(n, 1.0);
            for b in [None, Some(&bias[..])] {
                let what = format!(
                    "{} matmul q4 m={m} n={n} k={k} bias={}",
                    ks.isa().name(),
                    b.is_some()
                );
                let mut want = vec![0f32; m * n];
                reference::matmul(x, m, &w, b, &mut want);
                for threads in [1, 3] {
                    let got = bits_with_threads(threads, || {
                        let mut got = vec![f32::NAN; m * n];
                        ks.matmul(x, m, &w, b, &mut got);
                        got
                    });
                    assert_eq!(
                        got,
                        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{what} threads={threads}: not bit-exact"
                    );
                }
                // Against f32 arithmetic on the dequantized weights.
                let mut deq = vec![0f32; k];
                let mut exact = vec![0f32; m * n];
                let mut bound = vec![0f32; m * n];
                for j in 0..n {
                    w.row_to_f32(j, &mut deq);
                    for i in 0..m {
                        let xi = &x[i * k..(i + 1) * k];
                        let mut qi = vec![0i8; k];
                        let sx = quantize_a8_row(xi, &mut qi);
                        let dot: f64 = xi.iter().zip(&deq).map(|(a, b)| (a * b) as f64).sum();
                        let abs: f32 = deq.iter().map(|v| v.abs()).sum();
                        let mag: f32 = xi.iter().zip(&deq).map(|(a, b)| (a * b).abs()).sum();
                        exact[i * n + j] = dot as f32 + b.map_or(0.0, |b| b[j]);
                        bound[i * n + j] = sx / 2.0 * abs * (1.0 + 1e-3) + DOT_REL * mag + 1e-6;
                    }
                }
                check_close(&format!("{what} vs dequantized"), &want, &exact, |i| {
                    bound[i]
                });
            }
        }
    }
}

/// The 4-bit quantizer's contract (see `quantize_q4_row`): every element
/// within one step `d * s_g` of its weight, each group's squared error no
/// more than the no-clamp scale's bound (32 * (step / 2)^2 with
/// `step = d * ceil(a / 7d)`), group scales in 1..=255 (0 only for an
/// all-zero group), zero rows and groups stay zero, the nibbles of padding
/// hold q = 0, and a non-finite row gets a NaN scale.
#[test]
fn q4_quantization_error_is_bounded() {
    let mut rng = Rng(22);
    let (rows, cols) = (37, 1100);
    let mut w = rng.vec(rows * cols, 3.0);
    w[5 * cols..6 * cols].fill(0.0);
    w[7 * cols + 64..7 * cols + 96].fill(0.0);
    // Groups far below the row's largest, and one big outlier.
    for v in &mut w[9 * cols..10 * cols] {
        *v *= 1e-3;
    }
    w[9 * cols + 3] = 50.0;
    let q = quantize_q4_rows(&w, rows, cols);
    let (rb, rg) = (q4_row_bytes(cols), q4_row_groups(cols));
    assert_eq!(q.scales[5], 0.0);
    assert!(q.group_scales[5 * rg..6 * rg].iter().all(|&s| s == 0));
    assert_eq!(q.group_scales[7 * rg + 2], 0);
    let mat = Mat::Q4 {
        data: &q.data,
        group_scales: &q.group_scales,
        scales: &q.scales,
        rows,
        cols,
    };
    let mut deq = vec![0f32; cols];
    for r in 0..rows {
        mat.row_to_f32(r, &mut deq);
        let row = &w[r * cols..(r + 1) * cols];
        let d = q.scales[r];
        for (g, (wg, dg)) in row.chunks(Q4_GROUP).zip(deq.chunks(Q4_GROUP)).enumerate() {
            let s = q.group_scales[r * rg + g];
            let a = wg.iter().fold(0f32, |m, v| m.max(v.abs()));
            if a == 0.0 {
                assert_eq!(s, 0, "row {r} group {g}");
                assert!(dg.iter().all(|&v| v == 0.0));
                continue;
            }
            assert!(s >= 1, "row {r} group {g}: scale 0 for a non-zero group");
            let step = d * s as f32;
            let mut sse = 0f64;
            for (&v, &u) in wg.iter().zip(dg) {
                let e = (v - u).abs();
                assert!(
                    e <= step * (1.0 + 1e-5) + 1e-12,
                    "row {r} group {g}: error {e} > step {step}"
                );
                sse += (e as f64).powi(2);
            }
            let step0 = d as f64 * (a as f64 / (7.0 * d as f64)).ceil().min(255.0);
            let bound = wg.len() as f64 * (step0 / 2.0).powi(2) * (1.0 + 1e-4) + 1e-20;
            assert!(
                sse <= bound,
                "row {r} group {g}: squared error {sse} > no-clamp bound {bound}"
            );
        }
        // Padding past `cols` decodes to q = 0 (nibble 8).
        let stored = &q.data[r * rb..(r + 1) * rb];
        for c in cols..rb * 2 {
            assert_eq!(tts_kernels::q4::q4_get(stored, c), 0, "row {r} pad {c}");
        }
    }
    let mut bad = vec![1.0f32; 64];
    bad[3] = f32::NAN;
    assert!(quantize_q4_rows(&bad, 1, 64).scales[0].is_nan());
}

#[test]
fn matmul_is_deterministic_across_thread_counts() {
    let mut rng = Rng(2);
    let (m, n, k) = (3, 517, 777);
    let x = rng.vec(m * k, 1.0);
    let w = rng.vec(n * k, 1.0);
    let w = Mat::F32 {
        data: &w,
        rows: n,
        cols: k,
    };
    for ks in paths() {
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut out = vec![0f32; m * n];
            pool.install(|| ks.matmul(&x, m, &w, None, &mut out));
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        let one = run(1);
        assert_eq!(one, run(1), "{}: differs run to run", ks.isa().name());
        assert_eq!(
            one,
            run(3),
            "{}: differs with thread count",
            ks.isa().name()
        );
        // Row blocking must not matter either: a 1-row problem gives the
        // same bits as that row inside the big one.
        let mut single = vec![0f32; n];
        ks.matmul(&x[k..2 * k], 1, &w, None, &mut single);
        let single: Vec<u32> = single.iter().map(|v| v.to_bits()).collect();
        assert_eq!(
            &one[n..2 * n],
            &single[..],
            "{}: m-blocking changes bits",
            ks.isa().name()
        );
    }
}

/// Bits of `f()` run on a private pool of `threads` threads.
fn bits_with_threads(threads: usize, f: impl Fn() -> Vec<f32> + Send + Sync) -> Vec<u32> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| f().iter().map(|v| v.to_bits()).collect())
}

#[test]
fn conv_and_attention_are_deterministic_across_thread_counts() {
    let mut rng = Rng(11);
    let sh = Conv1dShape {
        c_in: 100,
        c_out: 36,
        kernel: 7,
        dilation: 3,
        groups: 1,
    };
    let (x, w) = (rng.vec(100 * 300, 1.0), rng.vec(36 * 100 * 7, 1.0));
    let (xt, wt) = (rng.vec(70 * 40, 1.0), rng.vec(70 * 24 * 10, 1.0));
    let ash = AttnShape {
        n_heads: 8,
        n_kv_heads: 2,
        head_dim: 64,
        scale: 0.125,
        window: Some(40),
    };
    let (q, k, v) = (
        rng.vec(3 * 8 * 64, 1.0),
        rng.vec(200 * 2 * 64, 1.0),
        rng.vec(200 * 2 * 64, 1.0),
    );
    for ks in paths() {
        let conv = || {
            let mut o = vec![0f32; 36 * 282];
            ks.conv1d(&x, 300, &w, None, sh, &mut o);
            o
        };
        let convt = || {
            let mut o = vec![0f32; 24 * (39 * 5 + 10)];
            ks.conv_transpose1d(
                &xt,
                40,
                &wt,
                None,
                ConvTranspose1dShape {
                    c_in: 70,
                    c_out: 24,
                    kernel: 10,
                    stride: 5,
                },
                &mut o,
            );
            o
        };
        let attn = || {
            let mut o = vec![0f32; 3 * 8 * 64];
            ks.attention(
                &q,
                3,
                197,
                KvRows {
                    k: k[..].into(),
                    v: v[..].into(),
                    n: 200,
                    pos0: 0,
                    layout: KvLayout::Positions,
                },
                ash,
                &mut o,
            );
            o
        };
        let name = ks.isa().name();
        assert_eq!(
            bits_with_threads(1, conv),
            bits_with_threads(3, conv),
            "{name}: conv1d"
        );
        assert_eq!(
            bits_with_threads(1, convt),
            bits_with_threads(3, convt),
            "{name}: conv_transpose1d"
        );
        assert_eq!(
            bits_with_threads(1, attn),
            bits_with_threads(3, attn),
            "{name}: attention"
        );
    }
}

#[test]
fn conv1d_all_shapes() {
    let mut rng = Rng(3);
    // (c_in, c_out, kernel, dilation, groups, t_in)
    let shapes: [(usize, usize, usize, usize, usize, usize); 23] = [
        (1, 1, 1, 1, 1, 1),
        (1, 1, 1, 1, 1, 0),
        (3, 5, 3, 1, 1, 20),
        (4, 8, 7, 3, 1, 50),
        (8, 8, 7, 1, 8, 40),    // depthwise
        (16, 16, 7, 9, 16, 70), // depthwise, dilation 9
        (4, 8, 3, 1, 4, 33),    // channel multiplier 2
        (6, 4, 3, 2, 2, 33),
        (6, 12, 5, 1, 3, 37), // groups with 4 channels out per group
        (5, 3, 7, 1, 1, 6),   // t_out = 0
        (17, 9, 7, 1, 1, 23), // t_out = 17
        (9, 4, 2, 1, 1, 16),  // t_out = 15
        (2, 4, 1, 1, 1, 33),
        (64, 36, 7, 3, 1, 300),   // parallel
        (96, 96, 7, 1, 96, 401),  // parallel depthwise
        (130, 9, 3, 1, 1, 75),    // 3 input-channel chunks
        (5, 5, 3, 2, 5, 21),      // depthwise k3: 17 outputs
        (3, 3, 5, 1, 3, 20),      // depthwise k5: 16 outputs
        (7, 7, 4, 1, 7, 12),      // depthwise, even kernel: block path
        (100, 64, 7, 1, 1, 7),    // t_out = 1: im2col + matmul path
        (33, 9, 7, 3, 1, 25),     // t_out = 7
        (300, 70, 7, 1, 1, 20),   // t_out = 14, parallel matmul
        (512, 12, 3, 2, 1, 1100), // several time slabs, a partial one
    ];
    for ks in paths() {
        for &(c_in, c_out, kernel, dilation, groups, t_in) in &shapes {
            let sh = Conv1dShape {
                c_in,
                c_out,
                kernel,
                dilation,
                groups,
            };
            let t_out = t_in.saturating_sub((kernel - 1) * dilation);
            let x = unaligned(&rng.vec(c_in * t_in, 1.0));
            let w = unaligned(&rng.vec(c_out * (c_in / groups) * kernel, 1.0));
            let bias = rng.vec(c_out, 1.0);
            for b in [None, Some(&bias[..])] {
                let mut want = vec![0f32; c_out * t_out];
                reference::conv1d(&x[1..], t_in, &w[1..], b, sh, &mut want);
                let mut got = vec![f32::NAN; c_out * t_out];
                ks.conv1d(&x[1..], t_in, &w[1..], b, sh, &mut got);
                // Terms per output: c_in/groups * kernel products of |x|,|w| <= 1.
                let terms = ((c_in / groups) * kernel) as f32;
                let what = format!("{} conv1d {sh:?} t_in={t_in}", ks.isa().name());
                check_close(&what, &got, &want, |_| DOT_REL * (terms + 1.0));
            }
        }
    }
}

#[test]
fn conv1d_strided_all_shapes() {
    let mut rng = Rng(14);
    // (c_in, c_out, kernel, stride, dilation, groups, t_in)
    let shapes: [(usize, usize, usize, usize, usize, usize, usize); 15] = [
        (1, 1, 1, 1, 1, 1, 1),
        (1, 1, 2, 2, 1, 1, 0),
        (1, 1, 2, 2, 1, 1, 1),  // shorter than the kernel: no output
        (2, 4, 8, 4, 1, 1, 8),  // exactly one output
        (2, 4, 8, 4, 1, 1, 37), // a partial last phase
        (4, 8, 10, 5, 1, 1, 51),
        (8, 16, 12, 6, 1, 1, 73),
        (16, 32, 16, 8, 1, 1, 129),
        (16, 16, 4, 2, 1, 1, 25),    // the 25 -> 12.5 Hz downsample
        (3, 5, 7, 3, 1, 1, 40),      // kernel not a multiple of the stride
        (3, 5, 3, 1, 2, 1, 20),      // stride 1: plain conv1d
        (4, 4, 3, 2, 2, 1, 21),      // dilated: reference path
        (4, 8, 4, 2, 1, 2, 21),      // grouped: reference path
        (64, 128, 8, 4, 1, 1, 2000), // parallel
        (512, 512, 4, 2, 1, 1, 40),  // t_out < lanes
    ];
    for ks in paths() {
        for &(c_in, c_out, kernel, stride, dilation, groups, t_in) in &shapes {
            let sh = StridedConv1dShape {
                conv: Conv1dShape {
                    c_in,
                    c_out,
                    kernel,
                    dilation,
                    groups,
                },
                stride,
            };
            let t_out = sh.t_out(t_in);
            let x = unaligned(&rng.vec(c_in * t_in, 1.0));
            let w = unaligned(&rng.vec(c_out * (c_in / groups) * kernel, 1.0));
            let bias = rng.vec(c_out, 1.0);
            for b in [None, Some(&bias[..])] {
                let mut want = vec![0f32; c_out * t_out];
                reference::conv1d_strided(&x[1..], t_in, &w[1..], b, sh, &mut want);
                let mut got = vec![f32::NAN; c_out * t_out];
                ks.conv1d_strided(&x[1..], t_in, &w[1..], b, sh, &mut got);
                let terms = ((c_in / groups) * kernel) as f32;
                let what = format!("{} conv1d_strided {sh:?} t_in={t_in}", ks.isa().name());
                check_close(&what, &got, &want, |_| DOT_REL * (terms + 1.0));
            }
        }
    }
}

#[test]
fn conv1d_strided_is_conv1d_subsampled() {
    // The reference strided conv is the stride-1 conv read every `stride`.
    let mut rng = Rng(15);
    let (c_in, c_out, kernel, t_in) = (3, 4, 6, 50);
    let conv = Conv1dShape {
        c_in,
        c_out,
        kernel,
        dilation: 1,
        groups: 1,
    };
    let x = rng.vec(c_in * t_in, 1.0);
    let w = rng.vec(c_out * c_in * kernel, 1.0);
    let t1 = conv.t_out(t_in);
    let mut dense = vec![0f32; c_out * t1];
    reference::conv1d(&x, t_in, &w, None, conv, &mut dense);
    for stride in 1..=4 {
        let sh = StridedConv1dShape { conv, stride };
        let t_out = sh.t_out(t_in);
        assert_eq!(t_out, (t1 - 1) / stride + 1);
        let mut got = vec![0f32; c_out * t_out];
        reference::conv1d_strided(&x, t_in, &w, None, sh, &mut got);
        for co in 0..c_out {
            for t in 0..t_out {
                assert_eq!(got[co * t_out + t], dense[co * t1 + t * stride]);
            }
        }
    }
}

#[test]
fn conv_transpose1d_all_shapes() {
    let mut rng = Rng(4);
    // (c_in, c_out, kernel, stride, t_in)
    let shapes = [
        (1, 1, 1, 1, 1),
        (1, 1, 1, 1, 0),
        (3, 5, 4, 2, 7),
        (4, 4, 16, 8, 5),
        (6, 5, 10, 5, 9),
        (3, 2, 3, 5, 4), // kernel < stride: some phases have no taps
        (2, 3, 5, 1, 10),
        (5, 7, 6, 3, 17),
        (64, 32, 8, 4, 100), // parallel
        (130, 6, 10, 5, 9),  // 3 input-channel chunks
        (70, 5, 16, 8, 2),
        (70, 9, 16, 8, 3),    // short path: 144 columns (partial vectors)
        (33, 40, 10, 5, 1),   // short path, 400 columns (2 column blocks)
        (20, 48, 6, 3, 4),    // short path, overlapping taps
        (512, 6, 10, 5, 700), // three slabs of phase columns
    ];
    for ks in paths() {
        for &(c_in, c_out, kernel, stride, t_in) in &shapes {
            let t_out = if t_in == 0 {
                0
            } else {
                (t_in - 1) * stride + kernel
            };
            let x = unaligned(&rng.vec(c_in * t_in, 1.0));
            let w = unaligned(&rng.vec(c_in * c_out * kernel, 1.0));
            let bias = rng.vec(c_out, 1.0);
            for b in [None, Some(&bias[..])] {
                let mut want = vec![0f32; c_out * t_out];
                reference::conv_transpose1d(
                    &x[1..],
                    t_in,
                    &w[1..],
                    b,
                    ConvTranspose1dShape {
                        c_in,
                        c_out,
                        kernel,
                        stride,
                    },
                    &mut want,
                );
                let mut got = vec![f32::NAN; c_out * t_out];
                ks.conv_transpose1d(
                    &x[1..],
                    t_in,
                    &w[1..],
                    b,
                    ConvTranspose1dShape {
                        c_in,
                        c_out,
                        kernel,
                        stride,
                    },
                    &mut got,
                );
                let terms = (c_in * kernel.div_ceil(stride)) as f32;
                let what = format!("{} conv_transpose1d c_in={c_in} c_out={c_out} k={kernel} s={stride} t_in={t_in}", ks.isa().name());
                check_close(&what, &got, &want, |_| DOT_REL * (terms + 1.0));
            }
        }
    }
}

/// An attention shape with the usual `head_dim^-0.5` scale.
fn attn_shape(
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    window: Option<usize>,
) -> AttnShape {
    AttnShape {
        n_heads,
        n_kv_heads,
        head_dim,
        scale: (head_dim as f32).powf(-0.5),
        window,
    }
}

#[test]
fn attention_all_shapes() {
    let mut rng = Rng(5);
    // (n_q, q_pos0, n_kv, kv_pos0, heads, kv_heads, head_dim, window)
    let cases = [
        (1, 0, 1, 0, 1, 1, 1, None),
        (1, 0, 1, 0, 2, 1, 16, None),
        (3, 5, 8, 0, 4, 2, 15, None),
        (4, 4, 8, 0, 4, 4, 17, Some(3)),
        (2, 20, 17, 5, 2, 1, 33, Some(8)),
        (1, 5, 4, 10, 2, 2, 8, None),   // query before every key: zeros
        (2, 3, 4, 0, 1, 1, 8, Some(0)), // empty window: zeros
        (5, 60, 64, 0, 8, 2, 64, Some(16)),
        (1, 511, 512, 0, 16, 8, 128, None), // decode shape, parallel
        (7, 100, 107, 0, 4, 1, 24, None),
    ];
    for ks in paths() {
        for &(n_q, q_pos0, n_kv, kv_pos0, n_heads, n_kv_heads, head_dim, window) in &cases {
            let sh = attn_shape(n_heads, n_kv_heads, head_dim, window);
            let q = unaligned(&rng.vec(n_q * n_heads * head_dim, 2.0));
            let k = unaligned(&rng.vec(n_kv * n_kv_heads * head_dim, 2.0));
            let v = unaligned(&rng.vec(n_kv * n_kv_heads * head_dim, 1.0));
            let mut want = vec![0f32; q.len() - 1];
            reference::attention(
                &q[1..],
                n_q,
                q_pos0,
                KvRows {
                    k: k[1..].into(),
                    v: v[1..].into(),
                    n: n_kv,
                    pos0: kv_pos0,
                    layout: KvLayout::Positions,
                },
                sh,
                &mut want,
            );
            let mut got = vec![f32::NAN; q.len() - 1];
            ks.attention(
                &q[1..],
                n_q,
                q_pos0,
                KvRows {
                    k: k[1..].into(),
                    v: v[1..].into(),
                    n: n_kv,
                    pos0: kv_pos0,
                    layout: KvLayout::Positions,
                },
                sh,
                &mut got,
            );
            let what = format!(
                "{} attention {sh:?} n_q={n_q}@{q_pos0} n_kv={n_kv}@{kv_pos0}",
                ks.isa().name()
            );
            check_close(&what, &got, &want, |_| ATTN_ABS);
        }
    }
}

/// `k`/`v` position-major (`[n, kv_heads, hd]`) laid out head-major with
/// `capacity` positions a head, the room past `n` filled with NaN (read,
/// it would show).
fn head_major(x: &[f32], n: usize, kv_heads: usize, hd: usize, capacity: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; kv_heads * capacity * hd];
    for j in 0..n {
        for h in 0..kv_heads {
            out[(h * capacity + j) * hd..][..hd]
                .copy_from_slice(&x[(j * kv_heads + h) * hd..][..hd]);
        }
    }
    out
}

/// A segment per `(n_q, q_pos0, n)` over its keys, values and layout.
fn segments<'a>(
    segs: &[(usize, usize, usize)],
    kv: impl Iterator<Item = (KvData<'a>, KvData<'a>, KvLayout)>,
) -> Vec<AttnSegment<'a>> {
    segs.iter()
        .zip(kv)
        .map(|(&(n_q, q_pos0, n), (k, v, layout))| AttnSegment {
            n_q,
            q_pos0,
            kv: KvRows {
                k,
                v,
                n,
                pos0: 0,
                layout,
            },
        })
        .collect()
}

/// Every path gives the same bits for keys and values laid out by position
/// or by head, and for sequences attended one call each or all in one
/// `attention_batch` (the LM caches are head-major, and a batched decode
/// step attends every sequence in one region).
#[test]
fn attention_layouts_and_batches_give_the_same_bits() {
    let mut rng = Rng(17);
    // (heads, kv_heads, head_dim, window, segments as (n_q, q_pos0, n_kv))
    type Segments = &'static [(usize, usize, usize)];
    let cases: [(usize, usize, usize, Option<usize>, Segments); 4] = [
        (
            16,
            8,
            128,
            None,
            &[(1, 269, 270), (1, 40, 41), (1, 511, 512)],
        ),
        (4, 2, 24, None, &[(3, 5, 8), (1, 0, 1), (2, 30, 32)]),
        (4, 1, 17, Some(6), &[(2, 20, 22), (5, 9, 14)]),
        (2, 2, 8, None, &[(1, 3, 4)]),
    ];
    for ks in paths() {
        for &(n_heads, n_kv_heads, head_dim, window, segs) in &cases {
            let sh = attn_shape(n_heads, n_kv_heads, head_dim, window);
            let width = n_heads * head_dim;
            let rows: usize = segs.iter().map(|s| s.0).sum();
            let q = rng.vec(rows * width, 2.0);
            let kvs: Vec<(Vec<f32>, Vec<f32>)> = segs
                .iter()
                .map(|&(_, _, n)| {
                    (
                        rng.vec(n * n_kv_heads * head_dim, 2.0),
                        rng.vec(n * n_kv_heads * head_dim, 1.0),
                    )
                })
                .collect();
            let heads: Vec<(Vec<f32>, Vec<f32>, usize)> = segs
                .iter()
                .zip(&kvs)
                .map(|(&(_, _, n), (k, v))| {
                    let cap = n + 3;
                    (
                        head_major(k, n, n_kv_heads, head_dim, cap),
                        head_major(v, n, n_kv_heads, head_dim, cap),
                        cap,
                    )
                })
                .collect();
            let what = format!("{} attention {sh:?} segments {segs:?}", ks.isa().name());
            // One call per segment, position-major: the reference bits.
            let mut want = vec![0f32; rows * width];
            let mut row = 0;
            for (&(n_q, q_pos0, n), (k, v)) in segs.iter().zip(&kvs) {
                let r = row * width..(row + n_q) * width;
                let kv = KvRows {
                    k: k.into(),
                    v: v.into(),
                    n,
                    pos0: 0,
                    layout: KvLayout::Positions,
                };
                ks.attention(&q[r.clone()], n_q, q_pos0, kv, sh, &mut want[r]);
                row += n_q;
            }
            assert!(want.iter().all(|x| x.is_finite()), "{what}: non-finite");
            // One call per segment, head-major.
            let mut got = vec![f32::NAN; rows * width];
            let mut row = 0;
            for (&(n_q, q_pos0, n), (k, v, cap)) in segs.iter().zip(&heads) {
                let r = row * width..(row + n_q) * width;
                let layout = KvLayout::Heads { capacity: *cap };
                let kv = KvRows {
                    k: k.into(),
                    v: v.into(),
                    n,
                    pos0: 0,
                    layout,
                };
                ks.attention(&q[r.clone()], n_q, q_pos0, kv, sh, &mut got[r]);
                row += n_q;
            }
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{what}: head-major layout");
            // All segments in one call, head-major.
            let batch = segments(
                segs,
                heads
                    .iter()
                    .map(|(k, v, cap)| (k.into(), v.into(), KvLayout::Heads { capacity: *cap })),
            );
            let mut got = vec![f32::NAN; rows * width];
            ks.attention_batch(&q, &batch, sh, &mut got);
            assert_eq!(bits(&got), bits(&want), "{what}: one batched call");
            // bf16 keys and values, head-major, in one batched call: the
            // bits of f32 attention over the rounded values (a bf16
            // element is widened exactly as it is read).
            let round = |x: &[f32]| x.iter().map(|&x| f32_to_bf16(x)).collect::<Vec<u16>>();
            let widen = |x: &[u16]| x.iter().map(|&b| bf16_to_f32(b)).collect::<Vec<f32>>();
            let halves: Vec<(Vec<u16>, Vec<u16>, usize)> = heads
                .iter()
                .map(|(k, v, cap)| (round(k), round(v), *cap))
                .collect();
            let widened: Vec<(Vec<f32>, Vec<f32>)> = kvs
                .iter()
                .map(|(k, v)| (widen(&round(k)), widen(&round(v))))
                .collect();
            let wide = segments(
                segs,
                widened
                    .iter()
                    .map(|(k, v)| (k.into(), v.into(), KvLayout::Positions)),
            );
            let mut want16 = vec![0f32; rows * width];
            ks.attention_batch(&q, &wide, sh, &mut want16);
            let batch = segments(
                segs,
                halves
                    .iter()
                    .map(|(k, v, cap)| (k.into(), v.into(), KvLayout::Heads { capacity: *cap })),
            );
            let mut got = vec![f32::NAN; rows * width];
            ks.attention_batch(&q, &batch, sh, &mut got);
            assert_eq!(bits(&got), bits(&want16), "{what}: bf16 keys and values");
            // The reference reads bf16 as the fast paths do.
            let mut refd = vec![f32::NAN; rows * width];
            reference::attention_batch(&q, &batch, sh, &mut refd);
            let mut ref32 = vec![f32::NAN; rows * width];
            reference::attention_batch(&q, &wide, sh, &mut ref32);
            assert_eq!(bits(&refd), bits(&ref32), "{what}: bf16 in the reference");
        }
    }
}

#[test]
fn rms_norm_rows() {
    let mut rng = Rng(6);
    for ks in paths() {
        for (rows, d) in [
            (0, 8),
            (1, 1),
            (3, 7),
            (2, 8),
            (2, 9),
            (4, 15),
            (1, 16),
            (3, 17),
            (2, 33),
            (5, 1024),
            (70, 1000),
        ] {
            let x = unaligned(&rng.vec(rows * d, 3.0));
            let w = rng.vec(d, 1.0);
            let mut want = vec![0f32; rows * d];
            reference::rms_norm(&x[1..], &w, 1e-6, &mut want);
            let mut got = vec![f32::NAN; rows * d];
            ks.rms_norm(&x[1..], &w, 1e-6, &mut got);
            // One reduction (1e-5 relative to the result) per row.
            check_close(
                &format!("{} rms_norm {rows}x{d}", ks.isa().name()),
                &got,
                &want,
                |i| 1e-5 * want[i].abs() + 1e-7,
            );
        }
    }
}

/// Element-wise inputs: random, plus edges (0, +-tiny, large magnitudes).
fn ew_inputs(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    let mut v = rng.vec(n, scale);
    let edges = [
        0.0, -0.0, 1e-30, -1e-30, 1e-3, -1e-3, 5.0, -5.0, 10.0, -10.0, 13.0, -13.0, 20.0, -20.0,
        88.0, -88.0,
    ];
    for (d, e) in v.iter_mut().zip(edges) {
        *d = e;
    }
    v
}

const EW_SIZES: [usize; 12] = [0, 1, 7, 8, 9, 15, 16, 17, 33, 100, 4097, 70_000];

#[test]
fn silu_mul_elementwise() {
    let mut rng = Rng(7);
    for ks in paths() {
        for n in EW_SIZES {
            let g = unaligned(&ew_inputs(&mut rng, n, 12.0));
            let u = unaligned(&rng.vec(n, 2.0));
            let mut want = vec![0f32; n];
            reference::silu_mul(&g[1..], &u[1..], &mut want);
            let mut got = vec![f32::NAN; n];
            ks.silu_mul(&g[1..], &u[1..], &mut got);
            check_close(
                &format!("{} silu_mul n={n}", ks.isa().name()),
                &got,
                &want,
                |i| EW_REL * want[i].abs() + 1e-30,
            );
        }
    }
}

#[test]
fn gelu_elementwise() {
    let mut rng = Rng(8);
    for ks in paths() {
        for n in EW_SIZES {
            let x = unaligned(&ew_inputs(&mut rng, n, 8.0));
            let mut want = x[1..].to_vec();
            reference::gelu(&mut want);
            let mut got = x.clone();
            ks.gelu(&mut got[1..]);
            // GELU_ABS below: the reference's f64 `1 + erf` is itself only
            // good to ~1e-16 absolute (it returns -0 from x ~ -8.5 where the
            // fast path still gives the true ~1e-17).
            check_close(
                &format!("{} gelu n={n}", ks.isa().name()),
                &got[1..],
                &want,
                |i| GELU_REL * want[i].abs() + GELU_ABS,
            );
        }
        // A dense sweep of the interesting range [-14, 14].
        let x: Vec<f32> = (0..28_001).map(|i| -14.0 + i as f32 * 1e-3).collect();
        let mut want = x.clone();
        reference::gelu(&mut want);
        let mut got = x.clone();
        ks.gelu(&mut got);
        check_close(
            &format!("{} gelu sweep", ks.isa().name()),
            &got,
            &want,
            |i| GELU_REL * want[i].abs() + GELU_ABS,
        );
    }
}

#[test]
fn snake_beta_rows() {
    let mut rng = Rng(9);
    for ks in paths() {
        for (c, t) in [
            (0, 5),
            (1, 1),
            (3, 7),
            (2, 8),
            (2, 9),
            (4, 15),
            (3, 16),
            (3, 17),
            (2, 33),
            (96, 1000),
        ] {
            let x = unaligned(&rng.vec(c * t, 30.0));
            let alpha: Vec<f32> = (0..c).map(|_| (rng.f() * 3.0).exp()).collect();
            let inv_beta: Vec<f32> = (0..c)
                .map(|_| 1.0 / ((rng.f() * 2.0).exp() + 1e-9))
                .collect();
            let mut want = x[1..].to_vec();
            reference::snake_beta(&mut want, t, &alpha, &inv_beta);
            let mut got = x.clone();
            ks.snake_beta(&mut got[1..], t, &alpha, &inv_beta);
            check_close(
                &format!("{} snake_beta {c}x{t}", ks.isa().name()),
                &got[1..],
                &want,
                |i| 2e-6 * inv_beta[i / t] + 2.4e-7 * x[1 + i].abs(),
            );
        }
    }
}

/// The fused concatenation + SnakeBeta has, on every path, the bits of
/// concatenating and then calling that path's `snake_beta`; `add_assign`
/// those of a serial loop.
#[test]
fn snake_beta_concat_and_add_assign_give_the_unfused_bits() {
    let mut rng = Rng(19);
    for ks in paths() {
        for (c, h, n) in [(1, 0, 5), (3, 6, 1), (4, 54, 40), (96, 6, 1000), (2, 3, 0)] {
            let head = rng.vec(c * h, 4.0);
            let x = rng.vec(c * n, 4.0);
            let alpha: Vec<f32> = (0..c).map(|_| (rng.f() * 3.0).exp()).collect();
            let inv_beta: Vec<f32> = (0..c)
                .map(|_| 1.0 / ((rng.f() * 2.0).exp() + 1e-9))
                .collect();
            let w = h + n;
            let mut want = vec![0f32; c * w];
            for ch in 0..c {
                want[ch * w..ch * w + h].copy_from_slice(&head[ch * h..(ch + 1) * h]);
                want[ch * w + h..(ch + 1) * w].copy_from_slice(&x[ch * n..(ch + 1) * n]);
            }
            ks.snake_beta(&mut want, w.max(1), &alpha, &inv_beta);
            let mut got = vec![f32::NAN; c * w];
            ks.snake_beta_concat(&head, h, &x, n, &alpha, &inv_beta, &mut got);
            let name = ks.isa().name();
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{name} snake_beta_concat {c}x({h}+{n})"
            );
        }
        for len in [0, 1, 17, (1 << 14) + 3, 3 * (1 << 14)] {
            let a = rng.vec(len, 10.0);
            let b = rng.vec(len, 10.0);
            let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
            let mut got = a.clone();
            ks.add_assign(&mut got, &b);
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{} add_assign {len}",
                ks.isa().name()
            );
        }
    }
}

/// A transposed conv as a dense conv over its phases
/// (`ConvTranspose1dShape::phase_weights`, then `interleave_phases`) gives
/// the outputs of the new columns that the transposed conv computes and
/// trims, within f32 rounding (the sums run in another order); the
/// interleave is a copy, the same bits on every path.
#[test]
fn a_transposed_conv_over_its_phases_gives_the_trimmed_outputs() {
    let mut rng = Rng(23);
    for (c_in, c_out, stride, taps, n) in [
        (3, 2, 2, 1, 5),
        (5, 4, 3, 2, 7),
        (16, 8, 8, 2, 4),
        (12, 6, 5, 3, 1),
        (7, 3, 4, 2, 0),
    ] {
        let kernel = taps * stride;
        let h = taps - 1;
        let t_in = h + n;
        let sh = ConvTranspose1dShape {
            c_in,
            c_out,
            kernel,
            stride,
        };
        let w = rng.vec(c_in * c_out * kernel, 0.5);
        let b = rng.vec(c_out, 0.5);
        let x = rng.vec(c_in * t_in, 2.0);
        // The transposed conv, trimmed to the new columns' outputs.
        let t_full = sh.t_out(t_in);
        let mut full = vec![0f32; c_out * t_full];
        reference::conv_transpose1d(&x, t_in, &w, Some(&b), sh, &mut full);
        let want: Vec<f32> = full
            .chunks_exact(t_full.max(1))
            .take(if t_full == 0 { 0 } else { c_out })
            .flat_map(|row| row[h * stride..(h + n) * stride].to_vec())
            .collect();
        // The phase rows, then time order.
        let rows = c_out * stride;
        let pb: Vec<f32> = b
            .iter()
            .flat_map(|&v| std::iter::repeat_n(v, stride))
            .collect();
        let conv = Conv1dShape {
            c_in,
            c_out: rows,
            kernel: taps,
            dilation: 1,
            groups: 1,
        };
        let mut ph = vec![f32::NAN; rows * n];
        reference::conv1d(&x, t_in, &sh.phase_weights(&w), Some(&pb), conv, &mut ph);
        let mut got = vec![f32::NAN; c_out * n * stride];
        reference::interleave_phases(&ph, c_out, stride, n, &mut got);
        assert_eq!(got.len(), want.len());
        let tag = format!("c_in={c_in} c_out={c_out} s={stride} taps={taps} n={n}");
        let (err, norm) = got
            .iter()
            .zip(&want)
            .fold((0f64, 0f64), |(e, s), (&g, &w)| {
                (e + ((g - w) as f64).powi(2), s + (w as f64).powi(2))
            });
        assert!(
            err <= 1e-12 * norm.max(1e-30),
            "{tag}: rel-L2^2 {}",
            err / norm
        );
        // The packed copies built from the transposed weight are the ones
        // built from the dense phase weight (the same outputs, bit for bit).
        let dense = sh.phase_weights(&w);
        let layout = tts_kernels::bf16_layout();
        let (a, b) = (
            ConvBf16::from_transpose1d_phases(&w, sh, layout),
            ConvBf16::from_conv1d(&dense, rows, c_in, taps, layout),
        );
        let (mut oa, mut ob) = (vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]);
        tts_kernels::conv1d_bf16(&x, t_in, &a, Some(&pb), 1, &mut oa);
        tts_kernels::conv1d_bf16(&x, t_in, &b, Some(&pb), 1, &mut ob);
        assert!(
            oa.iter().zip(&ob).all(|(p, q)| p.to_bits() == q.to_bits()),
            "bf16 {tag}"
        );
        let (qa, qb) = (
            ConvQ8::from_transpose1d_phases(&w, sh),
            ConvQ8::from_conv1d(&dense, rows, c_in, taps),
        );
        let (mut oa, mut ob) = (vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]);
        tts_kernels::conv1d_q8(&x, t_in, &qa, Some(&pb), 1, &mut oa);
        tts_kernels::conv1d_q8(&x, t_in, &qb, Some(&pb), 1, &mut ob);
        assert!(
            oa.iter().zip(&ob).all(|(p, q)| p.to_bits() == q.to_bits()),
            "int8 {tag}"
        );
        interleaves_alike(&ph, (c_out, stride, n), &got, &tag);
    }
    // Large enough for several parallel tasks.
    let (c_out, stride, n) = (96, 3, 640);
    let ph = rng.vec(c_out * stride * n, 1.0);
    let mut want = vec![f32::NAN; ph.len()];
    reference::interleave_phases(&ph, c_out, stride, n, &mut want);
    interleaves_alike(&ph, (c_out, stride, n), &want, "96x3x640");
}

/// Every path's `interleave_phases` of `ph` gives `want`'s bits.
fn interleaves_alike(
    ph: &[f32],
    (c_out, stride, n): (usize, usize, usize),
    want: &[f32],
    tag: &str,
) {
    for ks in paths() {
        let mut got = vec![f32::NAN; want.len()];
        ks.interleave_phases(ph, c_out, stride, n, &mut got);
        let same = got
            .iter()
            .zip(want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{} interleave_phases {tag}", ks.isa().name());
    }
}

#[test]
fn layer_norm_and_rope_match_reference() {
    let mut rng = Rng(10);
    for ks in paths() {
        let x = rng.vec(3 * 17, 2.0);
        let (w, b) = (rng.vec(17, 1.0), rng.vec(17, 1.0));
        let (mut want, mut got) = (vec![0f32; 51], vec![0f32; 51]);
        reference::layer_norm(&x, &w, &b, 1e-5, &mut want);
        ks.layer_norm(&x, &w, &b, 1e-5, &mut got);
        assert_eq!(want, got);
        let (cos, sin) = (rng.vec(8, 1.0), rng.vec(8, 1.0));
        let mut a = rng.vec(4 * 16, 1.0);
        let mut bb = a.clone();
        reference::rope(&mut a, 16, &cos, &sin);
        ks.rope(&mut bb, 16, &cos, &sin);
        assert_eq!(a, bb);
    }
}

#[test]
fn free_functions_use_the_selected_path() {
    let sel = Kernels::selected();
    assert_eq!(sel.isa(), tts_kernels::isa());
    assert!(sel.isa().is_supported());
    assert_eq!(Isa::available()[0], Isa::Scalar);
}

/// Prints the weight-reconstruction error of the 4-bit format against
/// alternatives (not a test of behaviour: `cargo test -p tts-kernels --release
/// --test it -- --ignored --nocapture differential::q4_format_error_report`),
/// for the group-size choice in docs/performance.md. Relative RMS error
/// `||w - deq|| / ||w||` over 256 rows x 3072 of uniform weights (what
/// `tts-rt gen-checkpoint` writes), Gaussian ones and heavy-tailed
/// (Student-t, 3 dof) ones with one 20x outlier per row.
#[test]
#[ignore]
fn q4_format_error_report() {
    let mut rng = Rng(23);
    let (rows, cols) = (256, 3072);
    let gauss = |rng: &mut Rng| {
        // Box-Muller.
        let u1 = (rng.f() * 0.5 + 0.5).max(1e-12);
        let u2 = rng.f() * 0.5 + 0.5;
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    };
    let g: Vec<f32> = (0..rows * cols).map(|_| gauss(&mut rng)).collect();
    let mut t: Vec<f32> = (0..rows * cols)
        .map(|_| {
            let z = gauss(&mut rng);
            let chi: f32 = (0..3).map(|_| gauss(&mut rng).powi(2)).sum();
            z / (chi / 3.0).sqrt()
        })
        .collect();
    for r in 0..rows {
        t[r * cols + (r * 37) % cols] = 20.0;
    }
    let rel = |w: &[f32], deq: &[f32]| {
        let e: f64 = w
            .iter()
            .zip(deq)
            .map(|(a, b)| ((a - b) as f64).powi(2))
            .sum();
        let n: f64 = w.iter().map(|a| (*a as f64).powi(2)).sum();
        (e / n).sqrt()
    };
    // Float group scale, same candidate search, no u8 rounding.
    let float_groups = |w: &[f32], group: usize, search: bool| {
        let mut out = vec![0f32; w.len()];
        for (src, dst) in w.chunks(group).zip(out.chunks_mut(group)) {
            let a = src.iter().fold(0f32, |m, v| m.max(v.abs()));
            if a == 0.0 {
                continue;
            }
            let cands: Vec<f32> = if search {
                (0..6).map(|c| a / (7.0 + c as f32 / 5.0)).collect()
            } else {
                vec![a / 7.0]
            };
            let mut best = (f32::INFINITY, vec![0f32; src.len()]);
            for s in cands {
                let d: Vec<f32> = src
                    .iter()
                    .map(|v| (v / s).round().clamp(-8.0, 7.0) * s)
                    .collect();
                let e: f32 = src.iter().zip(&d).map(|(a, b)| (a - b).powi(2)).sum();
                if e < best.0 {
                    best = (e, d);
                }
            }
            dst.copy_from_slice(&best.1);
        }
        out
    };
    let u: Vec<f32> = (0..rows * cols).map(|_| rng.f()).collect();
    for (name, w) in [
        ("uniform", &u),
        ("gaussian", &g),
        ("student-t3 + outlier", &t),
    ] {
        // This thread's CPU time (Linux schedstat; busy machines make
        // wall time meaningless), 0 elsewhere.
        let cpu_ns = || {
            std::fs::read_to_string("/proc/thread-self/schedstat")
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let t0 = cpu_ns();
        let q = quantize_q4_rows(w, rows, cols);
        let ns = (cpu_ns() - t0) / (rows * cols) as f64;
        println!("{name}: quantize_q4_rows {ns:.1} CPU ns/weight");
        let mat = Mat::Q4 {
            data: &q.data,
            group_scales: &q.group_scales,
            scales: &q.scales,
            rows,
            cols,
        };
        let mut deq = vec![0f32; rows * cols];
        for r in 0..rows {
            mat.row_to_f32(r, &mut deq[r * cols..(r + 1) * cols]);
        }
        let (q8, sc) = quantize_q8_rows(w, rows, cols);
        let d8: Vec<f32> = q8
            .iter()
            .enumerate()
            .map(|(i, &v)| v as f32 * sc[i / cols])
            .collect();
        println!(
            "{name}: shipped q4 (g32, u8 group scale, search): {:.4}",
            rel(w, &deq)
        );
        for group in [32, 64, 128] {
            println!(
                "{name}: g{group} f32 scale, absmax/7: {:.4}; with search: {:.4}",
                rel(w, &float_groups(w, group, false)),
                rel(w, &float_groups(w, group, true))
            );
        }
        println!("{name}: int8 per row: {:.4}", rel(w, &d8));
    }
}

// ---------------------------------------------------------------------------
// bf16 convolutions (tts_kernels::conv_bf16): every path, the AVX-512 BF16
// instruction and the f32-FMA emulation alike, must give the reference's
// bits exactly (the module docs say why; the data here keep every partial
// sum far from the f32 subnormal range, the one place the emulation may
// differ). Shapes: odd c_in (a zero partner channel), pair counts across
// the 32-pair chunk, time lengths around the 16-lane vector and the 48-wide
// tile, t_out = 0, parallel sizes, transposed phases without taps.

/// Every path this CPU has, plus the emulation on AVX-512 where the CPU
/// runs `vdpbf16ps` natively.
fn bf16_paths() -> Vec<Kernels> {
    // AMX tiles have bits of their own (`amx_bf16_paths`).
    let mut ks: Vec<Kernels> = paths().into_iter().map(Kernels::without_amx).collect();
    if let Some(k) = Kernels::new(Isa::Avx512).map(Kernels::without_amx) {
        if k.bf16_conv_path() == "avx512_bf16" {
            ks.push(k.with_emulated_bf16());
        } else {
            eprintln!("this CPU lacks avx512_bf16: only the emulation is tested");
        }
    }
    ks
}

/// The AMX path where this CPU and OS grant it (else none).
fn amx_bf16_paths() -> Vec<Kernels> {
    match Kernels::new(Isa::Avx512) {
        Some(k) if k.bf16_conv_path() == "amx_bf16" => vec![k],
        _ => {
            eprintln!("this CPU or OS does not grant AMX: the AMX path is not tested");
            vec![]
        }
    }
}

fn assert_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// (c_in, c_out, kernel, dilation, t_in)
const CONV1D_BF16_SHAPES: [(usize, usize, usize, usize, usize); 21] = [
    (1, 1, 1, 1, 1),
    (1, 1, 1, 1, 0),
    (3, 5, 3, 1, 20),
    (4, 8, 7, 3, 50),
    (5, 3, 7, 1, 6),   // t_out = 0
    (17, 9, 7, 1, 23), // t_out = 17, odd c_in
    (9, 4, 2, 1, 16),  // t_out = 15
    (2, 4, 1, 1, 33),
    (64, 36, 7, 3, 300),   // parallel
    (131, 9, 7, 1, 75),    // 66 pairs: 3 chunks, odd c_in
    (300, 20, 3, 1, 40),   // 150 pairs at k3: 5 chunks
    (501, 24, 1, 1, 40),   // 251 pairs at k1: 8 chunks, the last partial, odd c_in
    (100, 64, 7, 1, 7),    // t_out = 1
    (33, 13, 7, 9, 80),    // dilation 9, 26 outputs
    (96, 1, 7, 1, 200),    // one output channel (conv_out)
    (48, 24, 1, 1, 97),    // 1x1
    (512, 12, 3, 2, 1100), // several time slabs (256 pairs), a partial one
    // Channel tiles (t_out <= 16): a full and a partial pair of 16-channel
    // groups, a group of 8, and 9 outputs (8 + 1 columns).
    (64, 40, 7, 1, 10), // t_out = 4: 32 + 8 channels
    (33, 50, 3, 2, 9),  // t_out = 5: 32 + 18 channels, odd c_in
    (70, 17, 1, 1, 9),  // t_out = 9: tiles of 8 and 1 columns
    (40, 20, 3, 1, 19), // t_out = 17: time tiles, just past the threshold
];

// int8 convolutions: exact i32 sums per tap and the same f32 operations
// in the same order on every path (`tts_kernels::conv_q8`), so the VNNI
// tiles and the portable kernel give the reference's bits. Shapes: the bf16
// list (c_in around the quad, t_out around the 16-lane vector and the
// 64-wide tile, t_out = 0, parallel sizes) plus channel counts around the
// 4-channel tile and the 16-channel block, and a silent (all-zero) input.
#[test]
fn conv1d_q8_is_bit_exact_on_every_path() {
    let mut rng = Rng(23);
    let extra = [
        (8, 7, 7, 1, 90),    // 7 channels: a 4-tile and three single channels
        (6, 21, 3, 2, 100),  // one block of 16 and 5 more; c_in not a multiple of 4
        (96, 96, 7, 9, 400), // the last vocoder block's widest dilation
        (192, 192, 1, 1, 130),
    ];
    for ks in paths() {
        for &(c_in, c_out, kernel, dilation, t_in) in CONV1D_BF16_SHAPES.iter().chain(&extra) {
            let t_out = t_in.saturating_sub((kernel - 1) * dilation);
            let mut x = rng.vec(c_in * t_in, 2.0);
            // A silent column and a loud one: zero and large scales.
            if t_in > 2 {
                for c in 0..c_in {
                    x[c * t_in + 1] = 0.0;
                    x[c * t_in + 2] *= 1e3;
                }
            }
            let x = unaligned(&x);
            let w = ConvQ8::from_conv1d(&rng.vec(c_out * c_in * kernel, 0.5), c_out, c_in, kernel);
            let bias = rng.vec(c_out, 1.0);
            for b in [None, Some(&bias[..])] {
                let mut want = vec![0f32; c_out * t_out];
                reference::conv1d_q8(&x[1..], t_in, &w, b, dilation, &mut want);
                let mut got = vec![f32::NAN; c_out * t_out];
                ks.conv1d_q8(&x[1..], t_in, &w, b, dilation, &mut got);
                let what = format!(
                    "{} ({}) conv1d_q8 c_in={c_in} c_out={c_out} k={kernel} d={dilation} t_in={t_in}",
                    ks.isa().name(),
                    ks.q8_conv_name()
                );
                assert_bits(&what, &got, &want);
            }
        }
    }
}

/// The int8 conv against the f32 one: the error of 8-bit weights and
/// per-column 8-bit activations, well under 2% of the output's RMS on
/// uniform data (each of the two roundings adds ~0.5-1%).
#[test]
fn conv1d_q8_is_close_to_f32() {
    let mut rng = Rng(29);
    let (c_in, c_out, kernel, dilation, t_in) = (96, 40, 7, 3, 300);
    let t_out = t_in - (kernel - 1) * dilation;
    let x = rng.vec(c_in * t_in, 1.0);
    let wf = rng.vec(c_out * c_in * kernel, 0.1);
    let w = ConvQ8::from_conv1d(&wf, c_out, c_in, kernel);
    let sh = Conv1dShape {
        c_in,
        c_out,
        kernel,
        dilation,
        groups: 1,
    };
    let mut want = vec![0f32; c_out * t_out];
    reference::conv1d(&x, t_in, &wf, None, sh, &mut want);
    let mut got = vec![0f32; c_out * t_out];
    Kernels::selected().conv1d_q8(&x, t_in, &w, None, dilation, &mut got);
    let rms = |v: &[f32]| (v.iter().map(|a| a * a).sum::<f32>() / v.len() as f32).sqrt();
    let diff: Vec<f32> = got.iter().zip(&want).map(|(a, b)| a - b).collect();
    let rel = rms(&diff) / rms(&want);
    assert!(rel < 0.02, "int8 conv relative RMS error {rel}");
}

#[test]
fn conv1d_bf16_is_bit_exact_on_every_path() {
    let mut rng = Rng(21);
    for ks in bf16_paths() {
        for &(c_in, c_out, kernel, dilation, t_in) in &CONV1D_BF16_SHAPES {
            let t_out = t_in.saturating_sub((kernel - 1) * dilation);
            let x = unaligned(&rng.vec(c_in * t_in, 2.0));
            let w = ConvBf16::from_conv1d(
                &rng.vec(c_out * c_in * kernel, 0.5),
                c_out,
                c_in,
                kernel,
                tts_kernels::bf16_layout(),
            );
            let bias = rng.vec(c_out, 1.0);
            for b in [None, Some(&bias[..])] {
                let mut want = vec![0f32; c_out * t_out];
                reference::conv1d_bf16(&x[1..], t_in, &w, b, dilation, &mut want);
                let mut got = vec![f32::NAN; c_out * t_out];
                ks.conv1d_bf16(&x[1..], t_in, &w, b, dilation, &mut got);
                let what = format!(
                    "{} ({}) conv1d_bf16 c_in={c_in} c_out={c_out} k={kernel} d={dilation} t_in={t_in}",
                    ks.isa().name(),
                    ks.bf16_conv_path()
                );
                assert_bits(&what, &got, &want);
            }
        }
    }
}

/// The AMX path against the scalar reference: the same bf16 products in
/// another order and with the instruction's own rounding, so within the
/// f32 accumulation error of a sum of `n` terms, `n 2^-23 sum |x w|` (a
/// wrong layout, pair, tap or phase is off by the size of the output).
/// `conv(kernels, x, w, bias, out)` runs the case (the reference for
/// `None`); `w` is the weight and the same weight's absolute values.
#[allow(clippy::type_complexity, reason = "one test helper's callback")]
fn check_amx(
    what: &str,
    ks: &Kernels,
    (x, w, wa): (&[f32], &ConvBf16, &ConvBf16),
    bias: &[f32],
    (n_out, terms): (usize, usize),
    conv: &dyn Fn(Option<&Kernels>, &[f32], &ConvBf16, Option<&[f32]>, &mut [f32]),
) {
    let xa: Vec<f32> = x.iter().map(|v| v.abs()).collect();
    let bias_abs: Vec<f32> = bias.iter().map(|v| v.abs()).collect();
    let rel = terms as f32 * (1.0 / (1u32 << 23) as f32);
    for (b, ba) in [(None, None), (Some(bias), Some(&bias_abs[..]))] {
        let mut want = vec![0f32; n_out];
        conv(None, x, w, b, &mut want);
        let mut abs = vec![0f32; n_out];
        conv(None, &xa, wa, ba, &mut abs);
        let mut got = vec![f32::NAN; n_out];
        conv(Some(ks), x, w, b, &mut got);
        check_close(what, &got, &want, |i| rel * abs[i] + 1e-30);
    }
}

fn abs_vec(v: &[f32]) -> Vec<f32> {
    v.iter().map(|v| v.abs()).collect()
}

#[test]
fn conv1d_bf16_amx_is_within_rounding_of_the_reference() {
    let mut rng = Rng(21);
    for ks in amx_bf16_paths() {
        for &(c_in, c_out, kernel, dilation, t_in) in &CONV1D_BF16_SHAPES {
            let t_out = t_in.saturating_sub((kernel - 1) * dilation);
            let x = unaligned(&rng.vec(c_in * t_in, 2.0));
            let wf = rng.vec(c_out * c_in * kernel, 0.5);
            let w = ConvBf16::from_conv1d(&wf, c_out, c_in, kernel, tts_kernels::bf16_layout());
            let wa = ConvBf16::from_conv1d(
                &abs_vec(&wf),
                c_out,
                c_in,
                kernel,
                tts_kernels::bf16_layout(),
            );
            let conv =
                |k: Option<&Kernels>, x: &[f32], w: &ConvBf16, b: Option<&[f32]>, o: &mut [f32]| {
                    match k {
                        Some(k) => k.conv1d_bf16(x, t_in, w, b, dilation, o),
                        None => reference::conv1d_bf16(x, t_in, w, b, dilation, o),
                    }
                };
            let what = format!(
                "amx conv1d_bf16 c_in={c_in} c_out={c_out} k={kernel} d={dilation} t_in={t_in}"
            );
            let bias = rng.vec(c_out, 1.0);
            let sizes = (c_out * t_out, c_in * kernel + 1);
            check_amx(&what, &ks, (&x[1..], &w, &wa), &bias, sizes, &conv);
        }
    }
}

/// Every AMX output is computed the same way wherever it falls in a tile
/// or slab: a window of the input gives the bits of the same outputs of
/// the whole input (what makes a streamed decode equal its one-shot one).
#[test]
fn conv_bf16_amx_output_bits_do_not_depend_on_the_window() {
    let mut rng = Rng(27);
    for ks in amx_bf16_paths() {
        let (c_in, c_out, k, d, t_in) = (70, 40, 7, 3, 700);
        let x = rng.vec(c_in * t_in, 1.0);
        let w = ConvBf16::from_conv1d(
            &rng.vec(c_out * c_in * k, 0.5),
            c_out,
            c_in,
            k,
            tts_kernels::bf16_layout(),
        );
        let bias = rng.vec(c_out, 1.0);
        let t_out = t_in - (k - 1) * d;
        let mut whole = vec![0f32; c_out * t_out];
        ks.conv1d_bf16(&x, t_in, &w, Some(&bias), d, &mut whole);
        for (s0, len) in [(0, 19), (5, 1), (37, 40), (250, 333), (600, 100)] {
            let win: Vec<f32> = (0..c_in)
                .flat_map(|c| x[c * t_in + s0..c * t_in + s0 + len].iter().copied())
                .collect();
            let n = len.saturating_sub((k - 1) * d);
            let mut part = vec![0f32; c_out * n];
            ks.conv1d_bf16(&win, len, &w, Some(&bias), d, &mut part);
            for co in 0..c_out {
                for t in 0..n {
                    assert_eq!(
                        part[co * n + t].to_bits(),
                        whole[co * t_out + s0 + t].to_bits(),
                        "window {s0}+{len}: channel {co}, column {t}"
                    );
                }
            }
        }
    }
}

/// bf16 convolution vs the f32 one on the same (unrounded) data: within
/// the bf16 rounding of both operands. Each product carries a relative
/// error of at most 2 * 2^-9 (two RNE roundings to 8 significant bits), so
/// `|bf16 - f32| <= 2^-8 * sum |x w|` plus the f32 sums' own reordering
/// (`DOT_REL`); random signs make it ~sqrt(terms) smaller in practice.
#[test]
fn conv_bf16_is_within_bf16_rounding_of_f32() {
    let mut rng = Rng(23);
    let (c_in, c_out, kernel, t_in) = (40, 12, 7, 60);
    let x = rng.vec(c_in * t_in, 1.0);
    let wf = rng.vec(c_out * c_in * kernel, 1.0);
    let w = ConvBf16::from_conv1d(&wf, c_out, c_in, kernel, tts_kernels::bf16_layout());
    let sh = Conv1dShape {
        c_in,
        c_out,
        kernel,
        dilation: 1,
        groups: 1,
    };
    let t_out = t_in - kernel + 1;
    let (mut a, mut b) = (vec![0f32; c_out * t_out], vec![0f32; c_out * t_out]);
    reference::conv1d(&x, t_in, &wf, None, sh, &mut a);
    Kernels::selected().conv1d_bf16(&x, t_in, &w, None, 1, &mut b);
    let terms = (c_in * kernel) as f32;
    check_close("conv1d_bf16 vs f32", &b, &a, |_| {
        (1.0 / 256.0 + DOT_REL) * terms
    });
}

#[test]
fn conv_bf16_is_deterministic_across_thread_counts() {
    let mut rng = Rng(24);
    let (x, wf) = (rng.vec(100 * 300, 1.0), rng.vec(36 * 100 * 7, 1.0));
    let w = ConvBf16::from_conv1d(&wf, 36, 100, 7, tts_kernels::bf16_layout());
    for ks in bf16_paths().into_iter().chain(amx_bf16_paths()) {
        let conv = || {
            let mut o = vec![0f32; 36 * 282];
            ks.conv1d_bf16(&x, 300, &w, None, 3, &mut o);
            o
        };
        let name = format!("{} ({})", ks.isa().name(), ks.bf16_conv_path());
        assert_eq!(
            bits_with_threads(1, conv),
            bits_with_threads(3, conv),
            "{name}"
        );
    }
}

/// The scalar model of `vdpbf16ps` in `conv_bf16::dp_step` against the
/// instruction on this CPU: `acc + hi*hi` rounded, then `+ lo*lo` rounded
/// (Intel's pseudocode order). Operands span 2^-20..2^20 so that the two
/// orders, and a single rounding of both products, give different bits on
/// a good share of the cases: the test can tell the models apart. Skipped
/// without avx512_bf16.
#[test]
fn dpbf16_instruction_matches_the_scalar_model() {
    use tts_kernels::conv_bf16::{dp_step, round_bf16};
    if Kernels::dpbf16_lane(0.0, 0, 0).is_none() {
        eprintln!("skipping: this CPU lacks avx512_bf16");
        return;
    }
    let mut rng = Rng(25);
    let wide = |r: &mut Rng| {
        let e = (r.next_u64() % 41) as i32 - 20;
        r.f() * 2f32.powi(e)
    };
    let (mut n, mut order_matters) = (0, 0);
    for _ in 0..200_000 {
        let acc = wide(&mut rng);
        let [a0, a1, b0, b1] = [0; 4].map(|_| round_bf16(wide(&mut rng)));
        let (a, b) = (a0 as u32 | (a1 as u32) << 16, b0 as u32 | (b1 as u32) << 16);
        let f = |h: u16| f32::from_bits((h as u32) << 16);
        let want = dp_step(dp_step(acc, f(a1), f(b1)), f(a0), f(b0));
        let other = dp_step(dp_step(acc, f(a0), f(b0)), f(a1), f(b1));
        order_matters += (want.to_bits() != other.to_bits()) as usize;
        let got = Kernels::dpbf16_lane(acc, a, b).unwrap();
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "acc {acc:e} a ({:e}, {:e}) b ({:e}, {:e}): instruction {got:e}, model {want:e}",
            f(a1),
            f(a0),
            f(b1),
            f(b0)
        );
        n += 1;
    }
    eprintln!("{n} cases, {order_matters} where the other order gives other bits");
    assert!(
        order_matters > n / 100,
        "the test data cannot tell the orders apart"
    );
}

/// CPU seconds of the calling thread (utime + stime from
/// /proc/thread-self/stat, 10 ms ticks): a rate that a busy machine's time
/// sharing does not distort, unlike wall time.
fn thread_cpu_s() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let f: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
    let t: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(t as f64 / 100.0)
}

/// Multiply-adds per CPU second of one thread, f32 vs bf16 (native and
/// emulated) on vocoder shapes (not run by default):
/// `cargo test --release -p tts-kernels --test it differential::conv_bf16_cpu_rate_report -- --ignored --nocapture`.
#[test]
#[ignore]
fn conv_bf16_cpu_rate_report() {
    let Some(_) = thread_cpu_s() else {
        eprintln!("no /proc/thread-self/stat");
        return;
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let mut rng = Rng(26);
    let ks = Kernels::selected();
    // (name, c_in, c_out, kernel, dilation, t_out)
    for (name, ci, co, k, d, t) in [
        ("unit768_k7_d3", 768, 768, 7, 3, 1280),
        ("unit192_k7_d9", 192, 192, 7, 9, 25600),
        ("unit96_k7_d1", 96, 96, 7, 1, 76800),
        ("pw384_k1", 384, 384, 1, 1, 6400),
    ] {
        let sh = Conv1dShape {
            c_in: ci,
            c_out: co,
            kernel: k,
            dilation: d,
            groups: 1,
        };
        let t_in = t + (k - 1) * d;
        let x = rng.vec(ci * t_in, 1.0);
        let wf = rng.vec(co * ci * k, 1.0);
        let w = ConvBf16::from_conv1d(&wf, co, ci, k, tts_kernels::bf16_layout());
        let mut out = vec![0f32; co * t];
        let macs = (co * ci * k * t) as f64;
        let rate = |f: &mut (dyn FnMut() + Send)| {
            pool.install(|| {
                f();
                let (c0, mut n) = (thread_cpu_s().unwrap(), 0);
                while thread_cpu_s().unwrap() - c0 < 1.0 {
                    f();
                    n += 1;
                }
                n as f64 * macs / (thread_cpu_s().unwrap() - c0) / 1e9
            })
        };
        let f32r = rate(&mut || ks.conv1d(&x, t_in, &wf, None, sh, &mut out));
        let bf = rate(&mut || ks.conv1d_bf16(&x, t_in, &w, None, d, &mut out));
        let na = ks.without_amx();
        let nar = rate(&mut || na.conv1d_bf16(&x, t_in, &w, None, d, &mut out));
        let em = ks.with_emulated_bf16();
        let emr = rate(&mut || em.conv1d_bf16(&x, t_in, &w, None, d, &mut out));
        println!(
            "{name}: G multiply-adds per CPU s: f32 {f32r:.1}, bf16 {} {bf:.1}, bf16 {} {nar:.1}, bf16 emulated {emr:.1}",
            ks.bf16_conv_path(),
            na.bf16_conv_path()
        );
    }
    // Vocoder upsampling (blocks 1 and 3 at 40 frames), as the decoder
    // runs it below f32: the dense conv over its phases on `[history |
    // new]`, then the interleave into time order.
    for (ci, co, k, st, n) in [(768, 384, 10, 5, 6400), (192, 96, 6, 3, 25600)] {
        let sh = ConvTranspose1dShape {
            c_in: ci,
            c_out: co,
            kernel: k,
            stride: st,
        };
        let (taps, rows) = (k / st, co * st);
        let t_in = n + taps - 1;
        let x = rng.vec(ci * t_in, 1.0);
        let wf = rng.vec(ci * co * k, 1.0);
        let w = ConvBf16::from_transpose1d_phases(&wf, sh, tts_kernels::bf16_layout());
        let mut full = vec![0f32; co * ((t_in - 1) * st + k)];
        let (mut ph, mut out) = (vec![0f32; rows * n], vec![0f32; co * n * st]);
        let macs = (co * ci * k * n) as f64;
        let rate = |f: &mut (dyn FnMut() + Send)| {
            pool.install(|| {
                f();
                let (c0, mut i) = (thread_cpu_s().unwrap(), 0);
                while thread_cpu_s().unwrap() - c0 < 1.0 {
                    f();
                    i += 1;
                }
                i as f64 * macs / (thread_cpu_s().unwrap() - c0) / 1e9
            })
        };
        let f32r = rate(&mut || ks.conv_transpose1d(&x, t_in, &wf, None, sh, &mut full));
        let mut phases = |k: &Kernels| {
            k.conv1d_bf16(&x, t_in, &w, None, 1, &mut ph);
            k.interleave_phases(&ph, co, st, n, &mut out);
        };
        let bf = rate(&mut || phases(&ks));
        let na = ks.without_amx();
        let nar = rate(&mut || phases(&na));
        println!(
            "transpose{ci}to{co}_k{k}s{st}_n{n} over its phases: G multiply-adds per CPU s: f32 (transposed) {f32r:.1}, bf16 {} {bf:.1}, bf16 {} {nar:.1}",
            ks.bf16_conv_path(),
            na.bf16_conv_path()
        );
    }
}
