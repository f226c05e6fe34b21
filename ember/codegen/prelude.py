"""C helpers every generated kernel includes: NumPy's semantics where C's differ.

``{S}`` in a helper's name is the compute-type suffix: ``f32`` (float; float16/bfloat16
compute in float too), ``f64`` (double) or ``i64`` (every integer and bool type: the
kernel widens to int64_t, NumPy's results fit back). The same text serves C and CUDA:
``EMBER_FN`` qualifies the helpers for either.
"""
from __future__ import annotations

# NOTE: float floor division and Python modulo follow NumPy's npy_divmod exactly (fmod,
# sign fix-up, snap to the nearest integer), so results match bit for bit, inf/nan included.
_DIVMOD = r"""
#define EMBER_DIVMOD(T, S, FMOD, FLOOR, COPYSIGN, TRUNC) \
EMBER_FN T ember_divmod_##S(T a, T b, T *modulus) { \
    T mod = FMOD(a, b), div, floordiv; \
    if (!b) { *modulus = mod; return a / b; } \
    div = (a - mod) / b; \
    if (mod) { if ((b < 0) != (mod < 0)) { mod += b; div -= (T)1; } } \
    else { mod = COPYSIGN((T)0, b); } \
    if (div) { floordiv = FLOOR(div); if (div - floordiv > (T)0.5) floordiv += (T)1; } \
    else { floordiv = COPYSIGN((T)0, a / b); } \
    *modulus = mod; return floordiv; \
} \
EMBER_FN T ember_floor_div_##S(T a, T b) { T m; if (!b) return a / b; \
    return ember_divmod_##S(a, b, &m); } \
EMBER_FN T ember_pymod_##S(T a, T b) { T m; if (!b) return FMOD(a, b); \
    ember_divmod_##S(a, b, &m); return m; } \
EMBER_FN T ember_trunc_div_##S(T a, T b) { return TRUNC(a / b); } \
EMBER_FN T ember_clamp_##S(T x, T lo, T hi) { \
    if (x != x) return x; x = x < lo ? lo : x; return x > hi ? hi : x; }
EMBER_DIVMOD(float, f32, fmodf, floorf, copysignf, truncf)
EMBER_DIVMOD(double, f64, fmod, floor, copysign, trunc)
"""

# NOTE: integer helpers never trap: x / 0 is 0 (NumPy's result; eager Ember raises before
# the kernel runs) and INT64_MIN / -1 wraps instead of raising SIGFPE.
_INT = r"""
EMBER_FN int64_t ember_neg_i64(int64_t a) { return (int64_t)(0ULL - (uint64_t)a); }
EMBER_FN int64_t ember_floor_div_i64(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return ember_neg_i64(a);
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
EMBER_FN int64_t ember_trunc_div_i64(int64_t a, int64_t b) {
    return b == 0 ? 0 : b == -1 ? ember_neg_i64(a) : a / b;
}
EMBER_FN int64_t ember_pymod_i64(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
EMBER_FN int64_t ember_fmod_i64(int64_t a, int64_t b) {
    return (b == 0 || b == -1) ? 0 : a % b;
}
EMBER_FN int64_t ember_pow_i64(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)a;
    while (b) { if (b & 1) r *= x; x *= x; b >>= 1; }
    return (int64_t)r;
}
EMBER_FN int64_t ember_abs_i64(int64_t a) { return a < 0 ? ember_neg_i64(a) : a; }
EMBER_FN int64_t ember_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
EMBER_FN int64_t ember_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
EMBER_FN int64_t ember_clamp_i64(int64_t x, int64_t lo, int64_t hi) {
    x = x < lo ? lo : x; return x > hi ? hi : x;
}
EMBER_FN int64_t ember_shl_i64(int64_t a, int64_t b) {
    return (uint64_t)b < 64 ? (int64_t)((uint64_t)a << b) : 0;
}
EMBER_FN int64_t ember_shr_i64(int64_t a, int64_t b) {
    return (uint64_t)b < 64 ? a >> b : (a < 0 ? -1 : 0);
}
EMBER_FN int ember_isnan_i64(int64_t a) { (void)a; return 0; }
EMBER_FN int ember_isinf_i64(int64_t a) { (void)a; return 0; }
EMBER_FN int ember_isfinite_i64(int64_t a) { (void)a; return 1; }
EMBER_FN int ember_signbit_i64(int64_t a) { return a < 0; }
"""

# NOTE: float32 tanh as Eigen's/XLA's rational approximation (clamped at +-7.9988, where
# it reaches 1): pure FMAs and one division, <= 4.5 ulp on a dense sweep (libmvec's tanhf is
# ~1.7x slower and bounds W4 GELU by compute, not memory). NaN, +-inf and -0.0 come out right.
_TANH = r"""
EMBER_FN float ember_tanh_f32(float x) {
    const float c = 7.99881172180175781f;
    const float xc = x > c ? c : (x < -c ? -c : x), x2 = xc * xc;
    float p = -2.76076847742355e-16f;
    p = fmaf(x2, p, 2.00018790482477e-13f);
    p = fmaf(x2, p, -8.60467152213735e-11f);
    p = fmaf(x2, p, 5.12229709037114e-08f);
    p = fmaf(x2, p, 1.48572235717979e-05f);
    p = fmaf(x2, p, 6.37261928875436e-04f);
    p = fmaf(x2, p, 4.89352455891786e-03f);
    float q = 1.19825839466702e-06f;
    q = fmaf(x2, q, 1.18534705686654e-04f);
    q = fmaf(x2, q, 2.26843463243900e-03f);
    q = fmaf(x2, q, 4.89352518554385e-03f);
    const float r = xc * p / q;
    return fabsf(x) < 0.0004f ? x : r;
}
"""

# NOTE: float32 erf is Ember's own, never libm/libmvec's erff: glibc 2.36's AVX-512 variant
# (_ZGVeN16v_erff, picked when GCC vectorises 512 bits wide) returns exactly +-1.0 for
# |x| in [3.74, 3.92], 4 ulp off, while the SSE/AVX2 ones are within 2 - so the bits and
# the bound depended on the CPU. It is evaluated in float32 (issue 19: the float64 form,
# Eigen's rational one that eager NumPy keeps in ember/ops/_special.py, cost ~0.5 ms of a
# (16, 64, 512) GELU): for |x| < 1, x + x * P(x^2) (P of degree 6); beyond,
# 1 - 2^Q(|x|) with Q of degree 7 (a fit of log2(erfc)) and 2^Q Ember's own (exact
# reduction to |f| <= 0.5, a degree-6 polynomial, the exponent added to the bits), |x|
# clamped at 3.92 where erf rounds to +-1. Coefficients: Ember's weighted minimax fits
# (Lawson), rounded to float. Every multiply-add is an explicit fmaf and no product feeds a
# plain add, so FP contraction cannot change a bit: the same bits with or without FMA
# hardware (without it fmaf is glibc's correctly rounded one, slower), SSE2 to AVX-512, any
# vector width; NaN stays NaN, -0.0 stays -0.0, +-inf gives +-1. Checked on every float32
# in [1e-30, 4.25) against SciPy's float64 erf: <= 1.30 ulp (at x = 1.01013), monotone
# but for 4 one-ulp steps back (x near 0.96-0.99 and 1.97); subnormals,
# the rest and the signs on a strided sweep: tests/codegen/test_erf_f32.py.
# CUDA keeps its own erff (<= 2 ulp, one implementation on every GPU).
_ERF32_CUDA = "EMBER_FN float ember_erf_f32(float x) { return erff(x); }\n"
_ERF32 = r"""
EMBER_FN float ember_erf_f32(float x) {
    const float a = fabsf(x), s = x * x;
    /* |x| < 1.0: x + x * P(x^2) */
    float p = 0x1.4ae4acp-14f;
    p = fmaf(p, s, -0x1.a485dep-11f);
    p = fmaf(p, s, 0x1.5419f4p-8f);
    p = fmaf(p, s, -0x1.b7fbb4p-6f);
    p = fmaf(p, s, 0x1.ce2d20p-4f);
    p = fmaf(p, s, -0x1.81273ep-2f);
    p = fmaf(p, s, 0x1.06eba8p-3f);
    const float small = fmaf(p, x, x);
    /* else 1 - 2^Q(|x|), |x| clamped at 3.92 (erf rounds to 1 beyond) */
    const float t = a > 3.92f ? 3.92f : a;
    float q = -0x1.06756cp-15f;
    q = fmaf(q, t, 0x1.4dd248p-11f);
    q = fmaf(q, t, -0x1.8d88eep-8f);
    q = fmaf(q, t, 0x1.29ecdcp-5f);
    q = fmaf(q, t, -0x1.40567ap-3f);
    q = fmaf(q, t, -0x1.d3bbf0p-1f);
    q = fmaf(q, t, -0x1.a12fe8p+0f);
    q = fmaf(q, t, 0x1.1c767cp-12f);
    const float n = (q + 0x1.8p23f) - 0x1.8p23f, f = q - n;    /* exact: |f| <= 0.5 */
    float e = 0x1.41d32ep-13f;
    e = fmaf(e, f, 0x1.5f456cp-10f);
    e = fmaf(e, f, 0x1.3b2dbcp-7f);
    e = fmaf(e, f, 0x1.c6aed4p-5f);
    e = fmaf(e, f, 0x1.ebfbdap-3f);
    e = fmaf(e, f, 0x1.62e430p-1f);
    e = fmaf(e, f, 0x1.000000p+0f);
    union { float f; int32_t i; } u; u.f = e; u.i += (int32_t)n * (1 << 23);
    const float big = copysignf(1.0f - u.f, x);
    return a < 1.0f ? small : (a == a ? big : x);
}
"""

# erfinv: Wichura's AS241 start and one Halley step, as ember/ops/_special.py does.
_ERFINV = r"""
EMBER_FN double ember_ratio8(double r, const double *n, const double *d) {
    double a = n[0], b = d[0];
    for (int i = 1; i < 8; i++) { a = a * r + n[i]; b = b * r + d[i]; }
    return a / b;
}
EMBER_FN double ember_erfinv_f64(double y) {
    const double A[8] = {2.5090809287301226727e+3, 3.3430575583588128105e+4,
        6.7265770927008700853e+4, 4.5921953931549871457e+4, 1.3731693765509461125e+4,
        1.9715909503065514427e+3, 1.3314166789178437745e+2, 3.3871328727963666080e+0};
    const double B[8] = {5.2264952788528545610e+3, 2.8729085735721942674e+4,
        3.9307895800092710610e+4, 2.1213794301586595867e+4, 5.3941960214247511077e+3,
        6.8718700749205790830e+2, 4.2313330701600911252e+1, 1.0};
    const double C[8] = {7.7454501427834140764e-4, 2.2723844989269184583e-2,
        2.4178072517745061177e-1, 1.2704582524523683826e+0, 3.6478483247632046050e+0,
        5.7694972214606914055e+0, 4.6303378461565452959e+0, 1.4234371107496835773e+0};
    const double D[8] = {1.0507500716444168432e-9, 5.4759380849953449460e-4,
        1.5198666563616457197e-2, 1.4810397642748007459e-1, 6.8976733498510000455e-1,
        1.6763848301838038494e+0, 2.0531916266377588219e+0, 1.0};
    const double E[8] = {2.0103343992922881327e-7, 2.7115555687434875782e-5,
        1.2426609473880784386e-3, 2.6532189526576123093e-2, 2.9656057182850489123e-1,
        1.7848265399172913358e+0, 5.4637849111641143699e+0, 6.6579046435011037772e+0};
    const double F[8] = {2.0442631033899397856e-15, 1.4215117583164458887e-7,
        1.8463183175100546818e-5, 7.8686913114561325910e-4, 1.4875361290850614853e-2,
        1.3692988092273580531e-1, 5.9983220655588793769e-1, 1.0};
    double a = fabs(y), x;
    if (!(a < 1.0)) return a == 1.0 ? copysign(INFINITY, y) : NAN;
    if (a <= 0.85) {
        double q = 0.5 * a;
        x = q * ember_ratio8(0.180625 - q * q, A, B);
    } else {
        double r = sqrt(-log(0.5 * (1.0 - a)));
        x = r <= 5.0 ? ember_ratio8(r - 1.6, C, D) : ember_ratio8(r - 5.0, E, F);
    }
    x *= 0.70710678118654752440;
    double res = a <= 0.5 ? erf(x) - a : (1.0 - a) - erfc(x);
    double step = res / (1.1283791670955125739 * exp(-x * x));
    x = x - step / (1.0 + x * step);
    return copysign(x, y);
}
EMBER_FN float ember_erfinv_f32(float y) { return (float)ember_erfinv_f64((double)y); }
"""

# bfloat16 <-> float with round-to-nearest-even; a NaN becomes 0x7FC0 with its sign, the
# bits ml_dtypes (eager Ember's bfloat16) gives.
_BF16 = r"""
EMBER_FN float ember_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v; v.u = (uint32_t)h << 16; return v.f;
}
EMBER_FN uint16_t ember_f32_to_bf16(float f) {
    union { uint32_t u; float f; } v; v.f = f;
    if (f != f) return (uint16_t)(((v.u >> 16) & 0x8000u) | 0x7FC0u);
    return (uint16_t)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16);
}
EMBER_FN float ember_round_bf16(float f) { return ember_bf16_to_f32(ember_f32_to_bf16(f)); }
"""

# float16 (stored as uint16_t) <-> float in plain integer/float arithmetic, so GCC
# vectorises a kernel's loads and stores: it cannot vectorise ``_Float16`` conversions
# without AVX512-FP16 and calls scalar libm in every lane instead (float16 exp measured
# 20x slower than NumPy). Round to nearest even; bit-identical to NumPy for every
# non-NaN value (all 65,536 halves; float32 ties, overflow, subnormals: tests/amp); a NaN
# stays a NaN with its sign (float -> half: 0x7E00, the payload is not kept).
# ember_f32_to_f16 is the FP16 library's fp16_ieee_from_fp32_value (M. Dukhan, MIT).
_F16 = r"""
EMBER_FN float ember_f16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v, r;
    const uint32_t em = h & 0x7fffu;
    v.u = em << 13;
    r.f = v.f * 0x1p112f;                    /* normals and subnormals, exactly */
    if (em >= 0x7c00u) r.u = 0x7f800000u | (em << 13);
    r.u |= (uint32_t)(h & 0x8000u) << 16;
    return r.f;
}
EMBER_FN uint16_t ember_f32_to_f16(float f) {
    union { uint32_t u; float f; } w, b, s;
    w.f = f;
    const float base = (fabsf(f) * 0x1p112f) * 0x1p-110f;
    const uint32_t shl1 = w.u + w.u;
    uint32_t bias = shl1 & 0xff000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    s.u = (bias >> 1) + 0x07800000u;
    b.f = s.f + base;
    const uint32_t nonsign = ((b.u >> 13) & 0x7c00u) + (b.u & 0x0fffu);
    return (uint16_t)(((w.u & 0x80000000u) >> 16) | (shl1 > 0xff000000u ? 0x7e00u : nonsign));
}
EMBER_FN float ember_round_f16(float f) { return ember_f16_to_f32(ember_f32_to_f16(f)); }
"""

C_HEAD = r"""#include <math.h>
#include <stdint.h>
#include <float.h>
#define EMBER_FN static inline
/* 512-bit vectors for the loops render_c.py marks (Ember's own float32 polynomials, no libm
   call): GCC's -march tuning prefers 256 bits on AVX-512 CPUs; same bits at either width. */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define EMBER_WIDE_BEGIN _Pragma("GCC push_options") \
    _Pragma("GCC target(\"prefer-vector-width=512\")")
#define EMBER_WIDE_END _Pragma("GCC pop_options")
#else
#define EMBER_WIDE_BEGIN
#define EMBER_WIDE_END
#endif
/* Threads: the loader points this at Ember's pool (ember/codegen/pool.py); null = serial. */
typedef void (*ember_run_fn)(char **, const int64_t *, const int64_t *, int64_t, int64_t);
void (*ember_parallel_hook)(ember_run_fn, char **, const int64_t *, const int64_t *,
                            int64_t, int64_t, int64_t) = 0;
"""

CUDA_HEAD = r"""typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef signed char int8_t;
typedef unsigned char uint8_t;
#include <cuda_fp16.h>
#define EMBER_FN __device__ static inline
EMBER_FN float ember_round_f16(float f) { return __half2float(__float2half_rn(f)); }
"""


def mvec_decls(funcs: dict) -> str:
    """``#pragma omp declare simd`` redeclarations of libm functions libmvec vectorises.

    ``funcs`` maps a C function name to its arity. Without them GCC calls the scalar
    function in every lane (glibc's headers only declare the SIMD variants under
    ``-ffast-math``, which Ember must not use: it changes NaN/Inf semantics).
    """
    out = []
    for name, arity in sorted(funcs.items()):
        t = "float" if name.endswith("f") and name[:-1] in _MATH else "double"
        args = ", ".join([t] * arity)
        out.append(f"#pragma omp declare simd notinbranch\nextern {t} {name}({args});")
    return "\n".join(out) + "\n" if out else ""


#: libm functions the templates use (their float versions add an ``f``).
_MATH = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos",
         "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "erf", "erfc", "fabs",
         "floor", "ceil", "trunc", "rint", "pow", "atan2", "hypot", "copysign", "fmod",
         "fmin", "fmax")


def prelude(cuda: bool = False, mvec: dict | None = None) -> str:
    """The helper text that starts every generated source file."""
    head = CUDA_HEAD if cuda else C_HEAD + mvec_decls(mvec or {})
    return head + _DIVMOD + _INT + _TANH + (_ERF32_CUDA if cuda else _ERF32) + _ERFINV + _BF16 \
        + ("" if cuda else _F16)
