"""The x86 intrinsics the attention kernels' C (:mod:`.attention_kernels_c`) uses, for GCC
without ``<immintrin.h>``.

Parsing ``<immintrin.h>`` (every ISA extension's header) took ~0.12 s of each attention
library's compiler run, about a fifth of the forward's: part of a cold first compile's
critical path (:mod:`ember.graph.first_call` starts both builds at the first call). With
GCC 10 or later (``__has_builtin``), :data:`X86` defines the ~40 intrinsics the kernels
call as GCC's own header defines them: the same ``__builtin_ia32_*`` builtins or generic
vector operations, so the same instructions and bits. Any other compiler, an older GCC,
or a GCC that lacks one of the builtins includes the header instead (``EMBER_X86_SHIM``
unset). :data:`X86` also holds the kernels' two x86 helpers (an 8 x 8 float transpose in
AVX registers, an 8-lane float32 ``exp``); :data:`.attention_kernels_c.HEAD` includes it.
"""
from __future__ import annotations

#: the builtins the shim calls; all must exist (``__has_builtin``) for it to be used
_BUILTINS = (
    "unpcklps256", "unpckhps256", "shufps256", "vperm2f128_ps256", "minps256", "maxps256",
    "roundps256", "vfmaddps256", "vfnmaddps256", "cvtps2dq256", "psradi256", "pslldi256",
    "andnps256", "cmpps256", "blendvps256", "ps_ps256", "vextractf128_ps256", "movhlps",
    "addss", "movshdup", "pd_pd256", "vextractf128_pd256", "addsd", "unpckhpd")

X86 = r"""#if defined(__AVX__)

#if defined(__GNUC__) && !defined(__clang__) && defined(__has_builtin) && \
    !defined(_IMMINTRIN_H_INCLUDED)
#if """ + " && \\\n    ".join(f"__has_builtin(__builtin_ia32_{b})" for b in _BUILTINS) + r"""
#define EMBER_X86_SHIM 1
#endif
#endif

#if defined(EMBER_X86_SHIM)
/* GCC's <immintrin.h> definitions of the intrinsics used here (see attention_x86_c.py) */
typedef float __m256 __attribute__((__vector_size__(32), __may_alias__));
typedef float ember_m256u __attribute__((__vector_size__(32), __may_alias__, __aligned__(1)));
typedef long long __m256i __attribute__((__vector_size__(32), __may_alias__));
typedef double __m256d __attribute__((__vector_size__(32), __may_alias__));
typedef float __m128 __attribute__((__vector_size__(16), __may_alias__));
typedef double __m128d __attribute__((__vector_size__(16), __may_alias__));
typedef float ember_8f __attribute__((__vector_size__(32)));
typedef int ember_8i __attribute__((__vector_size__(32)));
typedef unsigned int ember_8u __attribute__((__vector_size__(32)));
typedef double ember_4d __attribute__((__vector_size__(32)));
typedef float ember_4f __attribute__((__vector_size__(16)));
typedef double ember_2d __attribute__((__vector_size__(16)));
#define _CMP_UNORD_Q 0x03
#define _CMP_LT_OQ 0x11
#define _CMP_GT_OQ 0x1e
#define _MM_FROUND_TO_NEAREST_INT 0x00
#define _MM_FROUND_NO_EXC 0x08
#define EMBER_B8(f, a, b) ((__m256)__builtin_ia32_##f((ember_8f)(a), (ember_8f)(b)))
#define EMBER_B8I(f, a, b, i) ((__m256)__builtin_ia32_##f((ember_8f)(a), (ember_8f)(b), (i)))
#define _mm256_loadu_ps(p) ((__m256)*(const ember_m256u *)(p))
#define _mm256_storeu_ps(p, v) (*(ember_m256u *)(p) = (ember_m256u)(v))
#define _mm256_set1_ps(x) ((__m256){x, x, x, x, x, x, x, x})
#define _mm256_set1_epi32(x) ((__m256i)(ember_8i){x, x, x, x, x, x, x, x})
#define _mm256_add_ps(a, b) ((__m256)((ember_8f)(a) + (ember_8f)(b)))
#define _mm256_mul_ps(a, b) ((__m256)((ember_8f)(a) * (ember_8f)(b)))
#define _mm256_unpacklo_ps(a, b) EMBER_B8(unpcklps256, a, b)
#define _mm256_unpackhi_ps(a, b) EMBER_B8(unpckhps256, a, b)
#define _mm256_shuffle_ps(a, b, m) EMBER_B8I(shufps256, a, b, m)
#define _mm256_permute2f128_ps(a, b, m) EMBER_B8I(vperm2f128_ps256, a, b, m)
#define _mm256_min_ps(a, b) EMBER_B8(minps256, a, b)
#define _mm256_max_ps(a, b) EMBER_B8(maxps256, a, b)
#define _mm256_andnot_ps(a, b) EMBER_B8(andnps256, a, b)
#define _mm256_cmp_ps(a, b, p) EMBER_B8I(cmpps256, a, b, p)
#define _mm256_round_ps(a, m) ((__m256)__builtin_ia32_roundps256((ember_8f)(a), (m)))
#define _mm256_fmadd_ps(a, b, c) \
    ((__m256)__builtin_ia32_vfmaddps256((ember_8f)(a), (ember_8f)(b), (ember_8f)(c)))
#define _mm256_fnmadd_ps(a, b, c) \
    ((__m256)__builtin_ia32_vfnmaddps256((ember_8f)(a), (ember_8f)(b), (ember_8f)(c)))
#define _mm256_blendv_ps(a, b, m) \
    ((__m256)__builtin_ia32_blendvps256((ember_8f)(a), (ember_8f)(b), (ember_8f)(m)))
#define _mm256_cvtps_epi32(a) ((__m256i)__builtin_ia32_cvtps2dq256((ember_8f)(a)))
#define _mm256_srai_epi32(a, n) ((__m256i)__builtin_ia32_psradi256((ember_8i)(a), (n)))
#define _mm256_slli_epi32(a, n) ((__m256i)__builtin_ia32_pslldi256((ember_8i)(a), (n)))
#define _mm256_add_epi32(a, b) ((__m256i)((ember_8u)(a) + (ember_8u)(b)))
#define _mm256_sub_epi32(a, b) ((__m256i)((ember_8u)(a) - (ember_8u)(b)))
#define _mm256_castsi256_ps(a) ((__m256)(a))
#define _mm256_castps256_ps128(a) ((__m128)__builtin_ia32_ps_ps256((ember_8f)(a)))
#define _mm256_extractf128_ps(a, n) \
    ((__m128)__builtin_ia32_vextractf128_ps256((ember_8f)(a), (n)))
#define _mm_add_ps(a, b) ((__m128)((ember_4f)(a) + (ember_4f)(b)))
#define _mm_movehl_ps(a, b) ((__m128)__builtin_ia32_movhlps((ember_4f)(a), (ember_4f)(b)))
#define _mm_add_ss(a, b) ((__m128)__builtin_ia32_addss((ember_4f)(a), (ember_4f)(b)))
#define _mm_movehdup_ps(a) ((__m128)__builtin_ia32_movshdup((ember_4f)(a)))
#define _mm_cvtss_f32(a) (((ember_4f)(a))[0])
#define _mm256_castpd256_pd128(a) ((__m128d)__builtin_ia32_pd_pd256((ember_4d)(a)))
#define _mm256_extractf128_pd(a, n) \
    ((__m128d)__builtin_ia32_vextractf128_pd256((ember_4d)(a), (n)))
#define _mm_add_pd(a, b) ((__m128d)((ember_2d)(a) + (ember_2d)(b)))
#define _mm_add_sd(a, b) ((__m128d)__builtin_ia32_addsd((ember_2d)(a), (ember_2d)(b)))
#define _mm_unpackhi_pd(a, b) ((__m128d)__builtin_ia32_unpckhpd((ember_2d)(a), (ember_2d)(b)))
#define _mm_cvtsd_f64(a) (((ember_2d)(a))[0])
#else
#include <immintrin.h>
#endif

/* dst[c * ldd + r] = src[r * lds + c] for an 8 x 8 float block */
static inline void ember_tr8(const float *src, int64_t lds, float *dst, int64_t ldd) {
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds),
        r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds),
        r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds),
        r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
        t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
        t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
        t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    r0 = _mm256_shuffle_ps(t0, t2, 0x44); r1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    r2 = _mm256_shuffle_ps(t1, t3, 0x44); r3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    r4 = _mm256_shuffle_ps(t4, t6, 0x44); r5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    r6 = _mm256_shuffle_ps(t5, t7, 0x44); r7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(r0, r4, 0x20));
    _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(r1, r5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(r2, r6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(r3, r7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(r0, r4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(r1, r5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(r2, r6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(r3, r7, 0x31));
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
/* exp of 8 floats, inline (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-5
   polynomial, 2^n through the exponent bits; within ~2 ulp of expf). A NaN stays NaN,
   x < -87.3 (-inf included) gives 0 (no subnormals: exp is a softmax's weight here),
   x > 88.7 gives +inf. NOTE: libmvec's call per 8 lanes was ~8% of the backward. */
static inline __m256 ember_exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.72283f), lo = _mm256_set1_ps(-87.33654f);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    xc = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    xc = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), xc);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, xc, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, xc, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, xc, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, xc, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, xc, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(xc, xc), _mm256_add_ps(xc, _mm256_set1_ps(1.0f)));
    /* 2^n in two steps: n = 128 (x near 88.7) does not fit one exponent */
    const __m256i ni = _mm256_cvtps_epi32(n), h = _mm256_srai_epi32(ni, 1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h,
                          _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(
                          _mm256_sub_epi32(ni, h), _mm256_set1_epi32(127)), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    y = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), y);             /* -> 0 */
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));       /* NaN */
}
#endif
"""
