"""Random numbers generated on a GPU: Philox4x32-10 kernels over a (seed, offset) pair.

A compiled GPU graph's uniform, Bernoulli, normal and integer draws (dropout's mask,
``rand``, ``bernoulli_``, ``uniform_``, ``randn``, ``normal_``, ``randint``, ``random_``)
run these kernels instead of drawing on the host and copying the sample
(:mod:`ember.graph.passes.philox`). Philox4x32-10
(Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011; cuRAND's and
PyTorch's CUDA generator) maps a 128-bit counter and a 64-bit key to four 32-bit words
with ten rounds of two 32x32->64-bit products; any element can be computed alone, so a
kernel needs no state but the key (the seed) and where its counters start (the offset).

The kernels read ``(seed, offset)`` from a two-word device array (``uint64``; the
executor refills it each run from the generator, on the host, so a CUDA graph replaying
the launch draws new numbers, as PyTorch's graph-safe Philox reads its offset from device
memory). Elements ``4g .. 4g+3`` come from the four words of counter ``offset + g``
(counter words 2 and 3 are zero; key = the seed's low and high words): all 128 bits
of each Philox call are used, as cuRAND's ``curand_uniform4``/``curand_normal4`` do, so
a draw of ``n`` elements uses ``ceil(n / 4)`` counters (:func:`counters`).

* uniform: ``(word >> 8) * 2**-24``, float32 in [0, 1) (never 1.0), then ``* span + lo``
  (no FMA);
* bernoulli: ``uniform < p`` (``p`` a double), 1 or 0;
* normal: Box–Muller on word pairs (0, 1) and (2, 3): ``u1 = ((w0 >> 8) + 1) * 2**-24``
  in (0, 1], ``r = sqrt(-2 ln u1)``, ``r cos(2 pi u2)`` and ``r sin(2 pi u2)``, then
  ``* std + mean`` (float32 math: the GPU's ``logf``/``sinf``/``cosf``, within a few ulp
  of the host's).

Outputs are float32, float16 or bfloat16 (computed in float32, rounded once on store; a
half-precision uniform has the dtype's digits, ``w >> 21`` / ``w >> 24``, so it never
rounds up to 1.0, as eager's), or float64: those take two words an element, elements
``2g, 2g+1`` from words (0, 1) and (2, 3) of counter ``offset + g`` (``ceil(n / 2)``
counters, :func:`per_counter`), ``x = w_hi * 2**32 + w_lo``:

* uniform: ``(x >> 11) * 2**-53`` in [0, 1) (53 bits, as NumPy's and PyTorch's float64
  uniforms), then ``* span + lo`` (no FMA); bernoulli: ``u53 < p``;
* normal: Box-Muller in double on the element pair: ``u1 = ((x0 >> 11) + 1) * 2**-53``,
  ``u2`` from ``x1`` (``log``/``sin``/``cos`` of double).

randint writes ``low + k``, ``k`` uniform on ``[0, span)``, int32 or int64, by
multiply-shift with no rejection (Lemire, "Fast random integer generation in an
interval", 2019, without its rejection step): ``k = (w * span) >> 32`` of one word for
``span <= 2**32`` (kind ``randint``, four elements a counter), ``k = (x * span) >> 64``
(the high word of the 128-bit product) of a 64-bit word for wider ranges (``randint64``,
two a counter). Each ``k`` is the image of ``floor(2**32 / span)`` or ``ceil(2**32 /
span)`` words (``2**64`` for ``randint64``), so its probability is within ``2**-32``
(``2**-64``) of ``1 / span``: a relative bias of at most ``span / 2**32`` — exact for a
power-of-two span, under 2.4e-7 for a span of 1000 (PyTorch's CUDA ``random_``, a modulo
of one word for spans under 2**32, has the same bound). Other dtypes keep the host draw.

Example:
    >>> fn = function("uniform")                   # doctest: +SKIP (needs a GPU)
    >>> fn((blocks,), (BLOCK,), (key, out, np.int64(n), np.float32(0), np.float32(1)))
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["BLOCK", "DEVICE_TEXT", "DTYPES", "INT_DTYPES", "KINDS", "LEAF_TEXT", "counters",
           "function", "launch", "leaf_c", "per_counter", "reference", "source", "words"]

#: threads per block; grids are capped at :data:`MAX_BLOCKS` (grid-stride loops).
BLOCK = 256
MAX_BLOCKS = 1 << 16

#: Philox4x32-10 as a device function: ``philox4x32_10(ctr, key)`` -> the four words.
DEVICE_TEXT = r"""
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define EMBER_MULHI(a, b) __umulhi((a), (b))
#else
#define EMBER_MULHI(a, b) ((uint32_t)(((uint64_t)(a) * (uint64_t)(b)) >> 32))
#endif
struct ember_u32x4 { uint32_t x, y, z, w; };
__device__ __forceinline__ ember_u32x4 philox4x32_10(ember_u32x4 c, uint32_t k0, uint32_t k1) {
    #pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        uint32_t hi0 = EMBER_MULHI(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        uint32_t hi1 = EMBER_MULHI(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        ember_u32x4 n = {hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
        c = n;
    }
    return c;
}
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define EMBER_MULHI64(a, b) __umul64hi((a), (b))
#else
#define EMBER_MULHI64(a, b) ((uint64_t)(((unsigned __int128)(a) * (b)) >> 64))
#endif
/* a 64-bit word from two 32-bit ones (w0 high), and its 53-bit uniform in [0, 1) */
__device__ __forceinline__ uint64_t ember_w64(uint32_t hi, uint32_t lo) {
    return ((uint64_t)hi << 32) | lo;
}
__device__ __forceinline__ double ember_u53(uint64_t x) {
    return (double)(x >> 11) * 1.1102230246251565404236316680908203125e-16;   /* 2**-53 */
}
__device__ __forceinline__ float ember_u01(uint32_t w) {
    return (float)(w >> 8) * 5.9604644775390625e-08f;   /* 2**-24: [0, 1) */
}
/* uniforms with the output type's digits, so rounding never makes 1.0 (eager's rule) */
#define ember_u01_f32 ember_u01
__device__ __forceinline__ float ember_u01_f16(uint32_t w) {
    return (float)(w >> 21) * 4.8828125e-04f;           /* 2**-11 */
}
__device__ __forceinline__ float ember_u01_bf16(uint32_t w) {
    return (float)(w >> 24) * 3.90625e-03f;             /* 2**-8 */
}
"""

#: one element of a draw, for kernels holding :class:`~ember.codegen.ir.Philox` leaves:
#: element ``f`` is word ``f % 4`` of counter ``off + f / 4`` (normal: its counter's word
#: pair), the same float32 operations as the entries below, so the same bits.
LEAF_TEXT = r"""
__device__ __forceinline__ ember_u32x4 ember_philox_at(uint64_t seed, uint64_t off, int64_t f) {
    const uint64_t c = off + ((uint64_t)f >> 2);
    ember_u32x4 ctr = {(uint32_t)c, (uint32_t)(c >> 32), 0u, 0u};
    return philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
}
__device__ __forceinline__ uint32_t ember_philox_word(uint64_t seed, uint64_t off, int64_t f) {
    const ember_u32x4 b = ember_philox_at(seed, off, f);
    const int j = (int)(f & 3);
    return j == 0 ? b.x : j == 1 ? b.y : j == 2 ? b.z : b.w;
}
#define EMBER_PHILOX_UNIFORM(SFX) \
__device__ __forceinline__ float ember_philox_uniform_##SFX(uint64_t s, uint64_t o, int64_t f, \
                                                           float lo, float span) { \
    return __fadd_rn(__fmul_rn(ember_u01_##SFX(ember_philox_word(s, o, f)), span), lo); \
}
EMBER_PHILOX_UNIFORM(f32)
EMBER_PHILOX_UNIFORM(f16)
EMBER_PHILOX_UNIFORM(bf16)
#undef EMBER_PHILOX_UNIFORM
__device__ __forceinline__ float ember_philox_bernoulli(uint64_t s, uint64_t o, int64_t f,
                                                        double p) {
    return (double)ember_u01(ember_philox_word(s, o, f)) < p ? 1.f : 0.f;
}
__device__ __forceinline__ float ember_philox_normal(uint64_t s, uint64_t o, int64_t f,
                                                     float mean, float sd) {
    const ember_u32x4 b = ember_philox_at(s, o, f);
    const int j = (int)(f & 3);
    const uint32_t w1 = j < 2 ? b.x : b.z, w2 = j < 2 ? b.y : b.w;
    float u1 = (float)((w1 >> 8) + 1u) * 5.9604644775390625e-08f;
    float t = ember_u01(w2) * 6.2831853071795864f;
    float r = sqrtf(-2.0f * logf(u1));
    float v = (j & 1) ? r * sinf(t) : r * cosf(t);
    return __fadd_rn(__fmul_rn(v, sd), mean);
}
"""

#: per output dtype: (entry suffix, C type, store of a value ``x``).
_TYPES = {np.dtype(np.float32): ("f32", "float", "{x}"),
          np.dtype(np.float16): ("f16", "__half", "__float2half_rn({x})"),
          np.dtype(ml_dtypes.bfloat16): ("bf16", "__nv_bfloat16", "__float2bfloat16_rn({x})"),
          np.dtype(np.float64): ("f64", "double", "{x}"),
          np.dtype(np.int32): ("i32", "int32_t", "(int32_t)({x})"),
          np.dtype(np.int64): ("i64", "int64_t", "{x}")}
#: the dtypes the uniform, Bernoulli and normal kernels write (float64: 2 elements a
#: counter); :data:`INT_DTYPES`: the randint kernels'.
DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64))
INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))

#: per kind, 32-bit draws (four elements a counter, float32 math for the float ones): (extra
#: parameters, the values ``v`` of group ``g`` from words ``b``).
_BODY = {
    "uniform": ("float lo, float span",
                "    float v[4] = {U01(b.x), U01(b.y), U01(b.z), U01(b.w)};\n"
                "    for (int j = 0; j < 4; ++j) v[j] = __fadd_rn(__fmul_rn(v[j], span), lo);\n"),
    "bernoulli": ("double p",
                  "    float v[4] = {(double)ember_u01(b.x) < p ? 1.f : 0.f,\n"
                  "                  (double)ember_u01(b.y) < p ? 1.f : 0.f,\n"
                  "                  (double)ember_u01(b.z) < p ? 1.f : 0.f,\n"
                  "                  (double)ember_u01(b.w) < p ? 1.f : 0.f};\n"),
    "normal": ("float mean, float sd",
               "    float v[4];\n"
               "    for (int j = 0; j < 2; ++j) {\n"
               "        uint32_t w1 = j ? b.z : b.x, w2 = j ? b.w : b.y;\n"
               "        float u1 = (float)((w1 >> 8) + 1u) * 5.9604644775390625e-08f;\n"
               "        float t = ember_u01(w2) * 6.2831853071795864f;\n"
               "        float r = sqrtf(-2.0f * logf(u1));\n"
               "        v[2 * j] = r * cosf(t);\n"
               "        v[2 * j + 1] = r * sinf(t);\n"
               "    }\n"
               "    for (int j = 0; j < 4; ++j) v[j] = __fadd_rn(__fmul_rn(v[j], sd), mean);\n"),
    "randint": ("int64_t lo, uint64_t span",
                "    const uint32_t w[4] = {b.x, b.y, b.z, b.w};\n"
                "    int64_t v[4];\n"
                "    for (int j = 0; j < 4; ++j)\n"
                "        v[j] = (int64_t)((uint64_t)lo + (((uint64_t)w[j] * span) >> 32));\n"),
}

_X64 = "    const uint64_t x[2] = {ember_w64(b.x, b.y), ember_w64(b.z, b.w)};\n"
#: per kind, 64-bit draws (two elements a counter, words (0, 1) and (2, 3): float64, and
#: randint over a range wider than 2**32).
_BODY64 = {
    "uniform": ("double lo, double span",
                _X64 + "    double v[2];\n"
                "    for (int j = 0; j < 2; ++j)\n"
                "        v[j] = __dadd_rn(__dmul_rn(ember_u53(x[j]), span), lo);\n"),
    "bernoulli": ("double p",
                  _X64 + "    double v[2] = {ember_u53(x[0]) < p ? 1.0 : 0.0,\n"
                  "                   ember_u53(x[1]) < p ? 1.0 : 0.0};\n"),
    "normal": ("double mean, double sd",
               _X64 + "    const double u1 = ember_u53(x[0]) +   /* (0, 1] */\n"
               "        1.1102230246251565404236316680908203125e-16;\n"
               "    const double t = ember_u53(x[1]) * 6.283185307179586;\n"
               "    const double r = sqrt(-2.0 * log(u1));\n"
               "    double v[2] = {r * cos(t), r * sin(t)};\n"
               "    for (int j = 0; j < 2; ++j) v[j] = __dadd_rn(__dmul_rn(v[j], sd), mean);\n"),
    "randint64": ("int64_t lo, uint64_t span",
                  _X64 + "    int64_t v[2];\n"
                  "    for (int j = 0; j < 2; ++j)\n"
                  "        v[j] = (int64_t)((uint64_t)lo + EMBER_MULHI64(x[j], span));\n"),
}
#: the draw kinds (``randint``: a range of at most 2**32 integers, ``randint64``: wider).
KINDS = ("uniform", "bernoulli", "normal", "randint", "randint64")
#: (kind, entry suffix) of every entry.
_ENTRIES = tuple((k, sfx) for sfx in ("f32", "f16", "bf16", "f64")
                 for k in ("uniform", "bernoulli", "normal")) + \
    (("randint", "i32"), ("randint", "i64"), ("randint64", "i64"))

_ENTRY = """#define U01 ember_u01_{sfx}
extern "C" __global__ void ember_philox_{kind}_{sfx}(const uint64_t *key, {T} *out,
        int64_t n, {params}) {{
    const uint64_t seed = key[0], off = key[1];
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const int64_t groups = (n + {per} - 1) / {per};
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
         g += (int64_t)blockDim.x * gridDim.x) {{
    const uint64_t c = off + (uint64_t)g;
    ember_u32x4 ctr = {{(uint32_t)c, (uint32_t)(c >> 32), 0u, 0u}};
    ember_u32x4 b = philox4x32_10(ctr, k0, k1);
{body}    const int64_t e = {per} * g;
    if (e + {per} <= n) {{
        for (int j = 0; j < {per}; ++j) out[e + j] = {store};
    }} else {{
        for (int j = 0; e + j < n; ++j) out[e + j] = {store};
    }}
    }}
}}
#undef U01
"""

_BITS = """extern "C" __global__ void ember_philox_bits(const uint64_t *key, uint32_t *out,
        int64_t n) {
    const uint64_t seed = key[0], off = key[1];
    const int64_t groups = (n + 3) / 4;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
         g += (int64_t)blockDim.x * gridDim.x) {
        const uint64_t c = off + (uint64_t)g;
        ember_u32x4 ctr = {(uint32_t)c, (uint32_t)(c >> 32), 0u, 0u};
        ember_u32x4 b = philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
        uint32_t v[4] = {b.x, b.y, b.z, b.w};
        for (int j = 0; j < 4 && 4 * g + j < n; ++j) out[4 * g + j] = v[j];
    }
}
"""

_module: dict = {}


def per_counter(kind: str, dtype) -> int:
    """Elements a Philox counter gives a ``kind`` draw of ``dtype``: 4 (a 32-bit word
    each), or 2 (two words each: float64 draws, ``randint64``)."""
    return 2 if kind == "randint64" or np.dtype(dtype) == np.float64 else 4


def counters(n: int, per: int = 4) -> int:
    """Philox counters a draw of ``n`` elements uses (what the offset advances by);
    ``per``: elements a counter (:func:`per_counter`)."""
    return -(-int(n) // per)


def source() -> str:
    """The CUDA C text of every entry: ``ember_philox_{uniform,bernoulli,normal}_{f32,f16,
    bf16,f64}``, ``ember_philox_randint_{i32,i64}``, ``ember_philox_randint64_i64`` and
    ``ember_philox_bits`` (the raw words, for tests)."""
    from .render_cuda import NVRTC_HEAD
    parts = [NVRTC_HEAD, DEVICE_TEXT]
    for kind, sfx in _ENTRIES:
        t, st = next((t, st) for s, t, st in _TYPES.values() if s == sfx)
        per = per_counter(kind, np.float64 if sfx == "f64" else np.float32)
        params, body = (_BODY64 if per == 2 else _BODY)[kind]
        parts.append(_ENTRY.format(kind=kind, params=params, body=body, sfx=sfx, T=t, per=per,
                                   store=st.format(x="v[j]")))
    parts.append(_BITS)
    return "".join(parts)


def function(kind: str, dtype=np.float32):
    """The loaded entry of ``kind`` (one of :data:`KINDS`, or ``"bits"``) writing
    ``dtype`` (one of :data:`DTYPES`; :data:`INT_DTYPES` for the randint kinds)."""
    name = "ember_philox_bits" if kind == "bits" else \
        f"ember_philox_{kind}_{_TYPES[np.dtype(dtype)][0]}"
    fns = _module.get("fns")
    if fns is None or _module.get("loader") is not _loader():
        from .cuda_cache import load_module
        _module["mod"] = load_module(source(), "ember_philox")
        _module["loader"] = _loader()
        fns = _module["fns"] = {}
    fn = fns.get(name)
    if fn is None:
        fn = fns[name] = _module["mod"].get_function(name)
    return fn


def _loader():
    from . import cuda_cache
    return cuda_cache.module_loader     # NOTE: tests swap it: reload under a new one


def launch(xp, key, kind: str, shape, scalars=(), out=None, dtype=np.float32):
    """An array of ``shape`` and ``dtype`` drawn by entry ``kind`` from device array
    ``key`` (``(seed, offset)``, two 64-bit words); ``scalars``: the entry's extra
    parameters (randint: ``(low, span)``, the integers ``low .. low + span - 1``);
    ``out``: a C-contiguous array of ``shape`` and ``dtype`` to write (default: a new
    one).

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS`, or ``dtype`` not one of its
            dtypes (:data:`DTYPES`, :data:`INT_DTYPES` for randint), or a ``randint``
            span over 2**32.
    """
    if kind not in KINDS:
        raise ValueError(f"cuda_philox.launch: kind must be one of {KINDS}, got {kind!r}")
    ints = kind.startswith("randint")
    dtype = np.dtype(dtype)
    if (kind, _TYPES.get(dtype, ("",))[0]) not in _ENTRIES:
        raise ValueError(f"cuda_philox.launch: a {kind} draw's dtype must be one of "
                         f"{'int32, int64' if ints else 'float32, float16, bfloat16, float64'}"
                         f"{' (randint64: int64)' if kind == 'randint64' else ''}, got {dtype}")
    if kind == "randint" and not 0 < int(scalars[1]) <= 1 << 32:
        raise ValueError(f"cuda_philox.launch: randint's span must be in [1, 2**32] "
                         f"(randint64 for wider ranges), got {scalars[1]}")
    if out is None:
        out = xp.empty(shape, dtype)
    n = out.size
    if n:
        if not isinstance(key, xp.ndarray):     # NOTE: a host key (no host-step path)
            key = xp.asarray(key)
        grid = (min(-(-counters(n, per_counter(kind, dtype)) // BLOCK), MAX_BLOCKS),)
        if ints:
            args = (np.int64(scalars[0]), np.uint64(scalars[1]))
        elif kind == "bernoulli" or dtype == np.float64:
            args = tuple(np.float64(v) for v in scalars)
        else:
            args = tuple(np.float32(v) for v in scalars)
        function(kind, dtype)(grid, (BLOCK,), (key, out, np.int64(n)) + args)
    return out


def leaf_c(kind: str, seed: str, off: str, flat: str, scalars, dtype) -> str:
    """C (a float) of element ``flat`` of a ``kind`` draw of ``dtype`` under the uint64
    words ``seed``/``off`` (C expressions): what :data:`LEAF_TEXT` computes, rounded to
    a half-precision ``dtype`` as the entries' store rounds it."""
    from .cexpr import literal
    from .. import dtypes as _dt
    if kind == "bernoulli":
        args = [literal(float(scalars[0]), _dt.float64)]
    else:
        args = [literal(float(v), _dt.float32) for v in scalars]
    sfx = _TYPES[np.dtype(dtype)][0]
    fn = f"ember_philox_uniform_{sfx}" if kind == "uniform" else f"ember_philox_{kind}"
    v = f"{fn}((uint64_t)({seed}), (uint64_t)({off}), (int64_t)({flat}), {', '.join(args)})"
    if sfx != "f32":
        v = f"ember_round_{sfx}({v})"
    return v


def words(seed: int, offset: int, n: int) -> np.ndarray:
    """NumPy Philox4x32-10: the ``n`` uint32 words the kernels use (element ``4g + j`` =
    word ``j`` of counter ``offset + g``, key = ``seed``'s two words)."""
    g = np.arange(counters(n), dtype=np.uint64)
    with np.errstate(over="ignore"):
        c = np.uint64(offset % 2**64) + g
    m32 = np.uint64(0xffffffff)
    x = [c & m32, c >> np.uint64(32), 0 * c, 0 * c]
    k0, k1 = np.uint64(seed % 2**64 & 0xffffffff), np.uint64(seed % 2**64 >> 32)
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m32, (k1 + np.uint64(0xBB67AE85)) & m32
        p0, p1 = np.uint64(0xD2511F53) * x[0], np.uint64(0xCD9E8D57) * x[2]
        x = [(p1 >> np.uint64(32)) ^ x[1] ^ k0, p1 & m32, (p0 >> np.uint64(32)) ^ x[3] ^ k1,
             p0 & m32]
    return np.stack(x, axis=1).astype(np.uint32).reshape(-1)[:n]


_DIGITS = {"f32": 8, "f16": 21, "bf16": 24}


def _mulhi64(a: np.ndarray, b: int) -> np.ndarray:
    """The high 64 bits of the 128-bit products ``a * b`` (uint64), from 32-bit limbs."""
    m32, s32 = np.uint64(0xffffffff), np.uint64(32)
    a0, a1 = a & m32, a >> s32
    b0, b1 = np.uint64(b & 0xffffffff), np.uint64(b >> 32)
    with np.errstate(over="ignore"):
        lh, hl = a0 * b1, a1 * b0
        mid = ((a0 * b0) >> s32) + (lh & m32) + (hl & m32)
        return a1 * b1 + (lh >> s32) + (hl >> s32) + (mid >> s32)


def reference(kind: str, seed: int, offset: int, n: int, scalars, dtype=np.float32):
    """The ``n`` elements a ``kind`` draw of ``dtype`` gives (NumPy; uniforms, Bernoulli
    and integers bit for bit, normals within the host libm's rounding)."""
    per = per_counter(kind, dtype)
    w = words(seed, offset, 4 * counters(n, per))
    f32 = np.float32
    with np.errstate(all="ignore"):
        if per == 2:       # NOTE: element 2c + j: words (2j, 2j + 1) of counter c, high first
            x = (w[0::2].astype(np.uint64) << np.uint64(32)) | w[1::2]
            u = (x >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
            if kind == "randint64":
                v = (np.uint64(int(scalars[0]) % 2**64) + _mulhi64(x, int(scalars[1])))
                v = v.view(np.int64)
            elif kind == "normal":
                u1 = ((x[0::2] >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0 ** -53
                t = u[1::2] * 6.283185307179586
                r = np.sqrt(-2.0 * np.log(u1))
                v = np.stack([r * np.cos(t), r * np.sin(t)], axis=1).reshape(-1)
                v = v * float(scalars[1]) + float(scalars[0])
            elif kind == "bernoulli":
                v = (u < float(scalars[0])).astype(np.float64)
            else:
                v = u * float(scalars[1]) + float(scalars[0])
        elif kind == "randint":
            k = (w.astype(np.uint64) * np.uint64(int(scalars[1]))) >> np.uint64(32)
            v = (np.uint64(int(scalars[0]) % 2**64) + k).view(np.int64)
        elif kind == "normal":
            u1 = ((w[0::2] >> 8) + 1).astype(f32) * f32(2.0**-24)
            t = (w[1::2] >> 8).astype(f32) * f32(2.0**-24) * f32(6.2831853071795864)
            r = np.sqrt(f32(-2.0) * np.log(u1))
            v = np.stack([r * np.cos(t), r * np.sin(t)], axis=1).reshape(-1)
            v = v * f32(scalars[1]) + f32(scalars[0])
        elif kind == "bernoulli":
            u = (w >> 8).astype(f32) * f32(2.0**-24)
            v = (u.astype(np.float64) < float(scalars[0])).astype(f32)
        else:
            bits = _DIGITS[_TYPES[np.dtype(dtype)][0]]
            v = (w >> bits).astype(f32) * f32(2.0 ** (bits - 32))
            v = v * f32(scalars[1]) + f32(scalars[0])
    return v[:n].astype(dtype)
