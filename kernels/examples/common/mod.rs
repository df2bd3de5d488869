//! What the kernel examples and benches share: reproducible test data.

/// `n` values in [-1, 1) from a xorshift stream seeded by `seed` (the same
/// data for the same seed on every run and host).
pub fn data(n: usize, seed: u32) -> Vec<f32> {
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
