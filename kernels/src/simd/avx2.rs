//! AVX2 + FMA: 8 f32 lanes.

use super::Simd;
use core::arch::x86_64::*;

/// Token proving the CPU has AVX2 and FMA. Only [`Avx2::new`] builds one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2 {
    _detected: (),
}

impl Avx2 {
    pub(crate) fn new() -> Option<Self> {
        (is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
            .then_some(Avx2 { _detected: () })
    }
}

/// Calls a register-only AVX/AVX2/FMA intrinsic.
macro_rules! feat {
    ($e:expr) => {
        // SAFETY: an `Avx2` token exists only after `Avx2::new` detected
        // avx2 and fma on this CPU, and the intrinsic touches no memory.
        unsafe { $e }
    };
}

/// `MASK[8 - n..][..8]` enables the first `n` lanes of a masked load/store.
static MASK: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

impl Avx2 {
    #[inline(always)]
    fn mask(self, n: usize) -> __m256i {
        debug_assert!(n <= 8);
        // SAFETY: `8 - n + 8 <= 16`, so the 8 loaded i32 are inside MASK;
        // avx is present (token).
        unsafe { _mm256_loadu_si256(MASK.as_ptr().add(8 - n) as *const __m256i) }
    }
}

impl Simd for Avx2 {
    type V = __m256;
    const LANES: usize = 8;

    #[inline(always)]
    fn vectorize<R>(self, f: impl FnOnce() -> R) -> R {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn run<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        // SAFETY: the token proves avx2 and fma are present.
        unsafe { run(f) }
    }

    #[inline(always)]
    fn splat(self, x: f32) -> __m256 {
        feat!(_mm256_set1_ps(x))
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn load_bf16(self, p: *const u16) -> __m256 {
        let h = _mm_loadu_si128(p as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }
    #[inline(always)]
    unsafe fn splat_bf16_pair(self, p: *const u32) -> (__m256, __m256) {
        let b = _mm256_set1_epi32(p.read_unaligned() as i32);
        let hi = _mm256_and_si256(b, _mm256_set1_epi32(0xffff_0000u32 as i32));
        (
            _mm256_castsi256_ps(hi),
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(b)),
        )
    }
    #[inline(always)]
    unsafe fn load_i8(self, p: *const i8) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i)))
    }
    #[inline(always)]
    unsafe fn load_part(self, p: *const f32, n: usize) -> __m256 {
        // Masked-off lanes are not accessed (no fault past the slice end).
        _mm256_maskload_ps(p, self.mask(n))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: __m256) {
        _mm256_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn store_part(self, p: *mut f32, n: usize, v: __m256) {
        _mm256_maskstore_ps(p, self.mask(n), v)
    }
    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        feat!(_mm256_add_ps(a, b))
    }
    #[inline(always)]
    fn sub(self, a: __m256, b: __m256) -> __m256 {
        feat!(_mm256_sub_ps(a, b))
    }
    #[inline(always)]
    fn mul(self, a: __m256, b: __m256) -> __m256 {
        feat!(_mm256_mul_ps(a, b))
    }
    #[inline(always)]
    fn div(self, a: __m256, b: __m256) -> __m256 {
        feat!(_mm256_div_ps(a, b))
    }
    #[inline(always)]
    fn fma(self, a: __m256, b: __m256, c: __m256) -> __m256 {
        feat!(_mm256_fmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn max(self, a: __m256, b: __m256) -> __m256 {
        feat!(_mm256_max_ps(a, b))
    }
    #[inline(always)]
    fn min(self, a: __m256, b: __m256) -> __m256 {
        feat!(_mm256_min_ps(a, b))
    }
    #[inline(always)]
    fn abs(self, a: __m256) -> __m256 {
        feat!(_mm256_andnot_ps(_mm256_set1_ps(-0.0), a))
    }
    #[inline(always)]
    fn round(self, a: __m256) -> __m256 {
        feat!(_mm256_round_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(a))
    }
    #[inline(always)]
    fn pow2i(self, n: __m256) -> __m256 {
        feat!(_mm256_castsi256_ps(_mm256_slli_epi32::<23>(
            _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127))
        )))
    }
    #[inline(always)]
    fn flip_sign_if_odd(self, v: __m256, n: __m256) -> __m256 {
        feat!(_mm256_xor_ps(
            v,
            _mm256_castsi256_ps(_mm256_slli_epi32::<31>(_mm256_cvtps_epi32(n)))
        ))
    }
    #[inline(always)]
    fn select_neg(self, x: __m256, a: __m256, b: __m256) -> __m256 {
        feat!(_mm256_blendv_ps(
            b,
            a,
            _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps())
        ))
    }
    #[inline(always)]
    fn reduce_add(self, v: __m256) -> f32 {
        feat!({
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<0b01>(s, s)))
        })
    }
}
