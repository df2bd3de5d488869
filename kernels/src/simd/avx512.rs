//! AVX-512F (with AVX2 + FMA for the 256-bit bf16 load): 16 f32 lanes.

use super::Simd;
use core::arch::x86_64::*;

/// Token proving the CPU has AVX-512F, AVX2 and FMA. Only [`Avx512::new`]
/// builds one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512 {
    _detected: (),
}

impl Avx512 {
    pub(crate) fn new() -> Option<Self> {
        (is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma"))
        .then_some(Avx512 { _detected: () })
    }
}

/// Calls a register-only AVX-512F intrinsic.
macro_rules! feat {
    ($e:expr) => {
        // SAFETY: an `Avx512` token exists only after `Avx512::new` detected
        // avx512f, avx2 and fma on this CPU, and the intrinsic touches no
        // memory.
        unsafe { $e }
    };
}

#[inline(always)]
fn mask(n: usize) -> __mmask16 {
    debug_assert!(n <= 16);
    ((1u32 << n) - 1) as __mmask16
}

impl Simd for Avx512 {
    type V = __m512;
    const LANES: usize = 16;

    #[inline(always)]
    fn vectorize<R>(self, f: impl FnOnce() -> R) -> R {
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn run<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        // SAFETY: the token proves avx512f, avx2 and fma are present.
        unsafe { run(f) }
    }

    #[inline(always)]
    fn splat(self, x: f32) -> __m512 {
        feat!(_mm512_set1_ps(x))
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn load_bf16(self, p: *const u16) -> __m512 {
        let h = _mm256_loadu_si256(p as *const __m256i);
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }
    #[inline(always)]
    unsafe fn splat_bf16_pair(self, p: *const u32) -> (__m512, __m512) {
        let b = _mm512_set1_epi32(p.read_unaligned() as i32);
        let hi = _mm512_and_si512(b, _mm512_set1_epi32(0xffff_0000u32 as i32));
        (
            _mm512_castsi512_ps(hi),
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(b)),
        )
    }
    #[inline(always)]
    unsafe fn load_i8(self, p: *const i8) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i)))
    }
    #[inline(always)]
    unsafe fn load_part(self, p: *const f32, n: usize) -> __m512 {
        // Masked-off lanes are not accessed (no fault past the slice end).
        _mm512_maskz_loadu_ps(mask(n), p)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: __m512) {
        _mm512_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn store_part(self, p: *mut f32, n: usize, v: __m512) {
        _mm512_mask_storeu_ps(p, mask(n), v)
    }
    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        feat!(_mm512_add_ps(a, b))
    }
    #[inline(always)]
    fn sub(self, a: __m512, b: __m512) -> __m512 {
        feat!(_mm512_sub_ps(a, b))
    }
    #[inline(always)]
    fn mul(self, a: __m512, b: __m512) -> __m512 {
        feat!(_mm512_mul_ps(a, b))
    }
    #[inline(always)]
    fn div(self, a: __m512, b: __m512) -> __m512 {
        feat!(_mm512_div_ps(a, b))
    }
    #[inline(always)]
    fn fma(self, a: __m512, b: __m512, c: __m512) -> __m512 {
        feat!(_mm512_fmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn max(self, a: __m512, b: __m512) -> __m512 {
        feat!(_mm512_max_ps(a, b))
    }
    #[inline(always)]
    fn min(self, a: __m512, b: __m512) -> __m512 {
        feat!(_mm512_min_ps(a, b))
    }
    #[inline(always)]
    fn abs(self, a: __m512) -> __m512 {
        feat!(_mm512_abs_ps(a))
    }
    #[inline(always)]
    fn round(self, a: __m512) -> __m512 {
        feat!(_mm512_roundscale_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(a))
    }
    #[inline(always)]
    fn pow2i(self, n: __m512) -> __m512 {
        feat!(_mm512_castsi512_ps(_mm512_slli_epi32::<23>(
            _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127))
        )))
    }
    #[inline(always)]
    fn flip_sign_if_odd(self, v: __m512, n: __m512) -> __m512 {
        feat!(_mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(v),
            _mm512_slli_epi32::<31>(_mm512_cvtps_epi32(n))
        )))
    }
    #[inline(always)]
    fn select_neg(self, x: __m512, a: __m512, b: __m512) -> __m512 {
        feat!(_mm512_mask_blend_ps(
            _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps()),
            b,
            a
        ))
    }
    #[inline(always)]
    fn reduce_add(self, v: __m512) -> f32 {
        feat!(_mm512_reduce_add_ps(v))
    }
}
