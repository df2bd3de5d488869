//! The vector vocabulary the fast kernels are written in: one trait,
//! implemented once per instruction set (`avx2.rs`, `avx512.rs`), plus the
//! vector maths built on it (exp, sin, erfc-based GELU) so each is written
//! once.
//!
//! An implementing type is a zero-sized *token* that can only be constructed
//! after run-time detection found its CPU features; that is what makes the
//! safe arithmetic methods sound. Kernels are generic `#[inline(always)]`
//! functions over the token and run inside [`Simd::vectorize`], a
//! `#[target_feature]` trampoline, so after inlining every intrinsic is
//! compiled for the detected ISA (the `pulp` crate's design).

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

pub(crate) trait Simd: Copy + Send + Sync + 'static {
    type V: Copy;
    const LANES: usize;

    /// Runs `f` inside a function compiled with this ISA's target features.
    ///
    /// `f` must be written `#[inline(always)] || ...` and everything it
    /// calls must be `#[inline(always)]` (no plain closures inside: use a
    /// trait method or a macro). Anything LLVM leaves out of line is
    /// compiled *without* the features, so each intrinsic in it becomes a
    /// function call with vectors passed through memory; this happened
    /// twice here (a large conv closure, the GELU/sin map closures) and
    /// made those paths 3-50x slower than scalar. Check with
    /// `objdump -d target/release/deps/kernels-* | grep 'call.*core_arch'`,
    /// which should find nothing.
    fn vectorize<R>(self, f: impl FnOnce() -> R) -> R;

    fn splat(self, x: f32) -> Self::V;
    /// # Safety
    /// `p` must be valid for reading `LANES` f32 (any alignment).
    unsafe fn load(self, p: *const f32) -> Self::V;
    /// Loads `LANES` bf16 bit patterns, widened to f32 (exact: a shift).
    /// # Safety
    /// `p` must be valid for reading `LANES` u16 (any alignment).
    unsafe fn load_bf16(self, p: *const u16) -> Self::V;
    /// Broadcasts the bf16 pair at `p` (odd channel in the high half) as
    /// two f32 vectors `(high, low)` (exact: a mask and a shift), without
    /// a round trip through a general register per half.
    /// # Safety
    /// `p` must be valid for reading one u32 (any alignment).
    unsafe fn splat_bf16_pair(self, p: *const u32) -> (Self::V, Self::V);
    /// Loads `LANES` i8, widened to f32 (exact).
    /// # Safety
    /// `p` must be valid for reading `LANES` i8 (any alignment).
    unsafe fn load_i8(self, p: *const i8) -> Self::V;
    /// Loads the first `n < LANES` lanes; the others are zero and their
    /// memory is not touched.
    /// # Safety
    /// `p` must be valid for reading `n` f32.
    unsafe fn load_part(self, p: *const f32, n: usize) -> Self::V;
    /// # Safety
    /// `p` must be valid for writing `LANES` f32 (any alignment).
    unsafe fn store(self, p: *mut f32, v: Self::V);
    /// Stores the first `n < LANES` lanes; other memory is not touched.
    /// # Safety
    /// `p` must be valid for writing `n` f32.
    unsafe fn store_part(self, p: *mut f32, n: usize, v: Self::V);

    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    fn div(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c`, one rounding.
    fn fma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    fn min(self, a: Self::V, b: Self::V) -> Self::V;
    fn abs(self, a: Self::V) -> Self::V;
    /// Round to nearest, ties to even.
    fn round(self, a: Self::V) -> Self::V;
    /// `2^n` for integral `n` in `[-126, 127]`.
    fn pow2i(self, n: Self::V) -> Self::V;
    /// `v` with its sign flipped in the lanes where the integral `n` is odd.
    fn flip_sign_if_odd(self, v: Self::V, n: Self::V) -> Self::V;
    /// Lane-wise `if x < 0 { a } else { b }`.
    fn select_neg(self, x: Self::V, a: Self::V, b: Self::V) -> Self::V;
    /// Horizontal sum in a fixed order (results never depend on anything but
    /// the vector's contents).
    fn reduce_add(self, v: Self::V) -> f32;
}

/// `e^x`, ~2 ulp (Cephes `expf` polynomial). Inputs are clamped to
/// `[-87.33, 88]`, so tiny results come out as ~1e-38 instead of 0 and
/// `x > 88` saturates at `e^88` instead of overflowing: both harmless where
/// it is used (softmax, sigmoid).
// Coefficients as published (Cephes), not trimmed to f32 digits.
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub(crate) fn exp<S: Simd>(s: S, x: S::V) -> S::V {
    let x = s.min(s.max(x, s.splat(-87.336_54)), s.splat(88.0));
    let n = s.round(s.mul(x, s.splat(std::f32::consts::LOG2_E)));
    // ln 2 in two parts (Cody-Waite): n * C1 is exact for |n| <= 127.
    let r = s.fma(n, s.splat(-0.693_359_4), x);
    let r = s.fma(n, s.splat(2.121_944_4e-4), r);
    let mut y = s.splat(1.987_569_1e-4);
    y = s.fma(y, r, s.splat(1.398_199_9e-3));
    y = s.fma(y, r, s.splat(8.333_452e-3));
    y = s.fma(y, r, s.splat(4.166_579_6e-2));
    y = s.fma(y, r, s.splat(1.666_666_5e-1));
    y = s.fma(y, r, s.splat(5.000_000_1e-1));
    let r2 = s.mul(r, r);
    y = s.fma(y, r2, s.add(r, s.splat(1.0)));
    s.mul(y, s.pow2i(n))
}

/// `sin x`, abs error < 3e-7 for `|x| <= 1e4` (tested to 1e3 against
/// `f32::sin`). Reduction `x = n*pi + r` with pi in two f32 parts and FMA
/// (the first product is exact, so `r` carries one rounding, ~6e-8 at
/// |r| <= pi/2), then the odd Taylor polynomial to `r^11`, whose truncation
/// error at pi/2 is 5.7e-8.
#[inline(always)]
pub(crate) fn sin<S: Simd>(s: S, x: S::V) -> S::V {
    const PI_A: f32 = std::f32::consts::PI; // 3.14159274 (rounded up)
    const PI_B: f32 = -8.742_278e-8; // pi - PI_A
    let n = s.round(s.mul(x, s.splat(std::f32::consts::FRAC_1_PI)));
    let r = s.fma(n, s.splat(-PI_A), x);
    let r = s.fma(n, s.splat(-PI_B), r);
    let r2 = s.mul(r, r);
    let mut p = s.splat(-2.505_210_8e-8); // -1/11!
    p = s.fma(p, r2, s.splat(2.755_732e-6)); // 1/9!
    p = s.fma(p, r2, s.splat(-1.984_127e-4)); // -1/7!
    p = s.fma(p, r2, s.splat(8.333_333e-3)); // 1/5!
    p = s.fma(p, r2, s.splat(-1.666_666_7e-1)); // -1/3!
    let y = s.fma(s.mul(p, r2), r, r);
    s.flip_sign_if_odd(y, n)
}

/// `x * sigmoid(x)`.
#[inline(always)]
pub(crate) fn silu<S: Simd>(s: S, x: S::V) -> S::V {
    let one = s.splat(1.0);
    s.div(x, s.add(one, exp(s, s.sub(s.splat(0.0), x))))
}

/// Exact (erf) GELU, relative error ~5e-7 everywhere it is a normal f32.
///
/// `gelu(x) = x - x/2 erfc(z)` for `x >= 0` and `x/2 erfc(|z|)` for `x < 0`,
/// `z = |x|/sqrt 2`, so nothing cancels. `erfc` is Numerical Recipes'
/// `erfcc` Chebyshev fit, `t exp(-z^2 + P(t))` with `t = 1/(1 + z/2)`,
/// fractional error < 1.2e-7 for all z >= 0. Two f32 traps are avoided:
/// `z^2` is taken as `x*x/2` with the product's rounding error recovered by
/// an FMA (a rounded `z` would cost `2 z^2 * 6e-8` relative, 1e-5 at x = -13),
/// and `exp(-z^2)` and `exp(P(t))` are separate exps so the big argument is
/// never rounded in a sum.
// Coefficients as published (Numerical Recipes), not trimmed to f32 digits.
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub(crate) fn gelu<S: Simd>(s: S, x: S::V) -> S::V {
    let half = s.splat(0.5);
    let z = s.mul(s.abs(x), s.splat(std::f32::consts::FRAC_1_SQRT_2));
    let t = s.div(s.splat(1.0), s.fma(half, z, s.splat(1.0)));
    let mut p = s.splat(0.170_872_77);
    for c in [
        -0.822_152_23,
        1.488_515_87,
        -1.135_203_98,
        0.278_868_07,
        -0.186_288_06,
        0.096_784_18,
        0.374_091_96,
    ] {
        p = s.fma(p, t, s.splat(c));
    }
    p = s.fma(p, t, s.splat(1.000_023_68));
    p = s.fma(p, t, s.splat(-1.265_512_23));
    let xx = s.mul(x, x);
    let xx_err = s.fma(x, x, s.sub(s.splat(0.0), xx)); // x*x - xx exactly
    let g = s.mul(exp(s, s.mul(s.splat(-0.5), xx)), exp(s, p));
    let g = s.mul(g, s.fma(s.splat(-0.5), xx_err, s.splat(1.0)));
    let erfc = s.mul(t, g);
    let hx_erfc = s.mul(s.mul(half, x), erfc);
    s.select_neg(x, hx_erfc, s.sub(x, hx_erfc))
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::avx2::Avx2;
    use super::avx512::Avx512;
    use super::*;

    /// `f` over `xs`, one vector at a time (partial tail).
    fn apply<S: Simd>(s: S, xs: &[f32], f: impl Fn(S, S::V) -> S::V) -> Vec<f32> {
        let mut out = xs.to_vec();
        s.vectorize(
            #[inline(always)]
            || {
                for c in out.chunks_mut(S::LANES) {
                    // SAFETY: `c` has `c.len() <= LANES` elements.
                    unsafe {
                        s.store_part(
                            c.as_mut_ptr(),
                            c.len(),
                            f(s, s.load_part(c.as_ptr(), c.len())),
                        )
                    }
                }
            },
        );
        out
    }

    fn check<S: Simd>(s: S, name: &str) {
        // sin: |x| <= 1e3, abs error vs the f64 sine of the same f32.
        let xs: Vec<f32> = (0..200_001)
            .map(|i| -1000.0 + i as f32 * 0.01 + 0.003)
            .collect();
        let got = apply(s, &xs, sin);
        let worst = xs
            .iter()
            .zip(&got)
            .map(|(&x, &g)| ((x as f64).sin() - g as f64).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-6, "{name}: sin abs error {worst:e}");
        // exp: relative error over the clamp-free range [-87, 87].
        let xs: Vec<f32> = (0..174_001).map(|i| -87.0 + i as f32 * 1e-3).collect();
        let got = apply(s, &xs, exp);
        let worst = xs
            .iter()
            .zip(&got)
            .map(|(&x, &g)| ((x as f64).exp() - g as f64).abs() / (x as f64).exp())
            .fold(0.0, f64::max);
        assert!(worst < 3e-7, "{name}: exp relative error {worst:e}");
    }

    #[test]
    fn vector_sin_and_exp_accuracy() {
        match Avx2::new() {
            Some(s) => check(s, "avx2"),
            None => eprintln!("skipping avx2: CPU lacks avx2+fma"),
        }
        match Avx512::new() {
            Some(s) => check(s, "avx512"),
            None => eprintln!("skipping avx512: CPU lacks avx512f"),
        }
    }
}
