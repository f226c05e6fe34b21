"""Hand-written C loops for the convolution and pooling primitives of compiled graphs.

``unfold`` (im2col) and ``fold`` (col2im) run in NumPy as strided copies and strided adds:
``kh*kw`` passes over the image with short inner loops. Max pooling is built from them
(windows -> argmax -> gather forward, scatter -> fold backward: several full-size passes).
Here each is one pass over the data, parallel over the ``N*C`` image planes on Ember's
worker pool (:mod:`.pool`):

* ``unfold(x) -> cols``   and ``fold(cols) -> x``   (any kernel/dilation/padding/stride);
* ``maxpool(x[, bias]) -> (vals, arg)``: the max of each window and its first maximal position
  (NumPy's ``argmax``: the first NaN wins, else the first maximum), padding read as
  ``pad_value`` — what ``take_along_dim(unfold(x), argmax(unfold(x)))`` gives; with a
  per-channel ``bias``, of ``relu(x + bias)`` without storing it;
* ``maxpool_grad(g, arg) -> dx``: ``fold(scatter_add(g, arg))`` (indices outside the
  window are dropped, like the padding ``fold`` crops).

Geometry is one int64 array ``g = [planes, H, W, kh, kw, dh, dw, sh, sw, pt, pl, oh, ow, C,
cf]`` (``pt``/``pl``: the top/left padding; bottom/right padding only changes ``oh``/``ow``;
``C``: channels, ``cf``: a channel-first layout, below).

Channel-first variants (``channel_first=True``) serve convolutions as single 2-D GEMMs
(:mod:`ember.graph.passes.conv_gemm`): ``unfold``/``fold`` columns laid out
(C*kh*kw, N*L) instead of (N, C*kh*kw, L) — ``weight @ cols`` is then one GEMM for the
whole batch, not N — and ``maxpool`` reading / ``maxpool_grad`` writing the full-size
planes in (c, n) order (the layout of that GEMM's (Co, N*L) output and of the gradient it
wants), while the pooled values stay in (n, c) order.
float32 and float64 only; :func:`kernels` returns None without a C compiler, and callers
(:mod:`ember.graph.passes.pool`) keep the NumPy primitives then.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import cache
from . import pool as _pool
from .runtime import num_threads
from .toolchain import find_compiler

_HEAD = r"""#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* relu as NumPy's maximum(v, 0): NaN passes through, -0 becomes +0 (the "+ 0").
   One compare, so it can be a select (`v > 0 || v != v ? v : 0` is two). */
#define EMBER_RELU(v) (((v) < 0 ? 0 : (v)) + 0)
typedef void (*ember_run_fn)(char **, const int64_t *, const int64_t *, int64_t, int64_t);
void (*ember_parallel_hook)(ember_run_fn, char **, const int64_t *, const int64_t *,
                            int64_t, int64_t, int64_t) = 0;

#define GEOM const int64_t H = g[1], W = g[2], KH = g[3], KW = g[4], DH = g[5], DW = g[6], \
    SH = g[7], SW = g[8], PT = g[9], PL = g[10], OH = g[11], OW = g[12]; (void)st

/* [*lo, *hi): the output columns ox whose input column ox*SW - PL + j*DW is inside [0, W). */
static void ember_cols(int64_t W, int64_t SW, int64_t PL, int64_t j, int64_t DW, int64_t OW,
                       int64_t *lo, int64_t *hi) {
    const int64_t off = j * DW - PL;                 /* ix = ox*SW + off */
    int64_t a = off >= 0 ? 0 : (-off + SW - 1) / SW;
    int64_t b = W - 1 - off < 0 ? 0 : (W - 1 - off) / SW + 1;
    if (b > OW) b = OW;
    if (a > b) a = b;
    *lo = a; *hi = b;
}

/* The plane (image, channel) p = n*C + c (C = g[13]) is stored at this index: p itself,
   or, with g[14] set, c*N + n (channel-first: all images' planes of channel c together). */
static inline int64_t ember_plane(int64_t p, const int64_t *g) {
    return g[14] ? (p % g[13]) * (g[0] / g[13]) + p / g[13] : p;
}

static void ember_launch_planes(ember_run_fn run, char **ptrs, const int64_t *g,
                                int64_t nthreads) {
    if (nthreads > 1 && g[0] > 1 && ember_parallel_hook)
        ember_parallel_hook(run, ptrs, g, g, g[0], 1, nthreads);
    else
        run(ptrs, g, g, 0, g[0]);
}
"""

# One copy per dtype: T is the element type, U the unsigned integer of its size, S the
# suffix.
_BODY = r"""
static void ember_unfold_S_run(char **ptrs, const int64_t *g, const int64_t *st,
                               int64_t lo, int64_t hi) {
    GEOM;
    const T *x = (const T *)ptrs[0];
    T *out = (T *)ptrs[1];
    const T pad = (T)(*(const double *)ptrs[2]);
    const int64_t L = OH * OW, C = g[13], NB = g[0] / C;
    /* columns (N, C*kh*kw, L), or with g[14] channel-first (C*kh*kw, N, L): one GEMM
       `weight @ cols` for the whole batch then. NOTE: channel-first, p runs over (c, n):
       consecutive planes then write consecutive rows of each tap (kh*kw sequential write
       streams, not 1 KiB pieces scattered over the whole array: 1.5x slower) */
    const int64_t ts = g[14] ? NB * L : L;
    for (int64_t p = lo; p < hi; p++) {
        const T *xp = x + (g[14] ? (p % NB) * C + p / NB : p) * H * W;
        T *op = g[14] ? out + ((p / NB) * KH * KW * NB + p % NB) * L : out + p * KH * KW * L;
        for (int64_t i = 0; i < KH; i++)
        for (int64_t j = 0; j < KW; j++) {
            T *row = op + (i * KW + j) * ts;
            int64_t a, b;
            ember_cols(W, SW, PL, j, DW, OW, &a, &b);
            const int64_t off = j * DW - PL;
            for (int64_t oy = 0; oy < OH; oy++) {
                const int64_t iy = oy * SH - PT + i * DH;
                T *r = row + oy * OW;
                if (iy < 0 || iy >= H) {
                    for (int64_t ox = 0; ox < OW; ox++) r[ox] = pad;
                    continue;
                }
                const T *xr = xp + iy * W;
                for (int64_t ox = 0; ox < a; ox++) r[ox] = pad;
                if (SW == 1) {        /* NOTE: a loop, not memcpy: rows are short (2x) */
                    const T *xs = xr + off;
                    for (int64_t ox = a; ox < b; ox++) r[ox] = xs[ox];
                } else {
                    for (int64_t ox = a; ox < b; ox++) r[ox] = xr[ox * SW + off];
                }
                for (int64_t ox = b; ox < OW; ox++) r[ox] = pad;
            }
        }
    }
}

void ember_unfold_S(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_launch_planes(ember_unfold_S_run, ptrs, g, nthreads);
}

/* Taps are added in (i, j) order at every pixel, like the NumPy kernel's strided adds. */
static void ember_fold_S_run(char **ptrs, const int64_t *g, const int64_t *st,
                             int64_t lo, int64_t hi) {
    GEOM;
    const T *cols = (const T *)ptrs[0];
    T *out = (T *)ptrs[1];
    const int64_t L = OH * OW, C = g[13], NB = g[0] / C;
    const int64_t ts = g[14] ? NB * L : L;    /* channel-first columns: as in unfold */
    for (int64_t p = lo; p < hi; p++) {
        T *op = out + (g[14] ? (p % NB) * C + p / NB : p) * H * W;
        const T *cp = g[14] ? cols + ((p / NB) * KH * KW * NB + p % NB) * L
                            : cols + p * KH * KW * L;
        memset(op, 0, (size_t)(H * W) * sizeof(T));
        for (int64_t i = 0; i < KH; i++)
        for (int64_t j = 0; j < KW; j++) {
            const T *row = cp + (i * KW + j) * ts;
            int64_t a, b;
            ember_cols(W, SW, PL, j, DW, OW, &a, &b);
            const int64_t off = j * DW - PL;
            for (int64_t oy = 0; oy < OH; oy++) {
                const int64_t iy = oy * SH - PT + i * DH;
                if (iy < 0 || iy >= H) continue;
                T *orow = op + iy * W;
                const T *r = row + oy * OW;
                if (SW == 1) {
                    T *o = orow + off;
                    for (int64_t ox = a; ox < b; ox++) o[ox] += r[ox];
                } else {
                    for (int64_t ox = a; ox < b; ox++) orow[ox * SW + off] += r[ox];
                }
            }
        }
    }
}

void ember_fold_S(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_launch_planes(ember_fold_S_run, ptrs, g, nthreads);
}

/* NumPy's argmax: the first NaN, else the first maximum (padding reads as pad).
   One row of windows, exactly, with bounds checks: the path for rows holding a NaN. */
static void ember_maxpool_row_S(const T *xp, T *best, int64_t *bi, const int64_t *g,
                                int64_t oy, T pad) {
    const int64_t *st = g;
    GEOM;
    for (int64_t ox = 0; ox < OW; ox++) {
        T bv = pad;
        int64_t bk = -1;
        for (int64_t i = 0; i < KH; i++) {
            const int64_t iy = oy * SH - PT + i * DH;
            for (int64_t j = 0; j < KW; j++) {
                const int64_t ix = ox * SW - PL + j * DW;
                const T v = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? xp[iy * W + ix] : pad;
                if (bk < 0 || (bv == bv && (v > bv || v != v))) {
                    bv = v;
                    bk = i * KW + j;
                }
            }
        }
        best[ox] = bv;
        bi[ox] = bk;
    }
}

static const T *ember_relu_plane_S(T *tmp, const T *x, T b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const T v = x[i] + b;
        tmp[i] = EMBER_RELU(v);
    }
    return tmp;
}

/* NOTE: NaN-aware selects (take v if v > best or v is NaN, unless best is NaN) compile to
   unpredictable branches, 8x slower than a plain `v > best`. So each row runs with the
   plain compare (right whenever no NaN is involved) while OR-ing a "saw a NaN" flag, and
   a row that saw one is redone by the exact loop above. Taps are outermost and output
   columns innermost: each tap is one vectorisable pass comparing into the output row. */
static void ember_maxpool_S_run(char **ptrs, const int64_t *g, const int64_t *st,
                                int64_t lo, int64_t hi) {
    GEOM;
    const T *x = (const T *)ptrs[0];
    T *vals = (T *)ptrs[1];
    int64_t *arg = (int64_t *)ptrs[2];
    const T pad = (T)(*(const double *)ptrs[3]);
    const int64_t L = OH * OW;
    const int padnan = pad != pad;
    /* optional prologue relu(x + bias[channel]) (the conv block before the pool), computed
       with the same single rounding as the unfused add; the full-size result is never
       stored (a plane is, in `tmp`, only for the generic path and NaN rows) */
    const T *bias = (const T *)ptrs[4];
    const int64_t C = g[13];
    T *tmp = bias ? (T *)malloc((size_t)(H * W) * sizeof(T)) : 0;
    if (bias && !tmp) return;
    /* with g[14] the input planes are channel-first (a conv's one-GEMM output), the
       outputs in (n, c) order all the same */
#define PLANE(p) (bias ? ember_relu_plane_S(tmp, x + ember_plane(p, g) * H * W, bias[(p) % C], \
                                            H * W) : x + ember_plane(p, g) * H * W)
    if (KH == 2 && KW == 2 && SH == 2 && SW == 2 && DH == 1 && DW == 1 && PT == 0
            && PL == 0 && 2 * OH <= H && 2 * OW <= W) {
        /* the common 2x2 / stride 2 pool, no padding: one pass, no bounds checks */
        for (int64_t p = lo; p < hi; p++)
        for (int64_t oy = 0; oy < OH; oy++) {
            const T *r0 = x + ember_plane(p, g) * H * W + 2 * oy * W, *r1 = r0 + W;
            T *vp = vals + p * L + oy * OW;
            int64_t *ap = arg + p * L + oy * OW;
            int bad = 0;
            if (bias) {
                /* NOTE: the prologue into a two-row buffer first: inlined into the
                   compares below, it stops the compiler's if-conversion (15x slower) */
                const T bv = bias[p % C];
                for (int64_t i = 0; i < W; i++) {
                    const T u = r0[i] + bv, v = r1[i] + bv;
                    tmp[i] = EMBER_RELU(u);
                    tmp[W + i] = EMBER_RELU(v);
                }
                r0 = tmp;
                r1 = tmp + W;
            }
            for (int64_t ox = 0; ox < OW; ox++) {
                const T c0 = r0[2 * ox], c1 = r0[2 * ox + 1], c2 = r1[2 * ox],
                    c3 = r1[2 * ox + 1];
                T best = c0;
                int64_t bi = 0;
                int take = c1 > best;
                best = take ? c1 : best; bi = take ? 1 : bi;
                take = c2 > best;
                best = take ? c2 : best; bi = take ? 2 : bi;
                take = c3 > best;
                best = take ? c3 : best; bi = take ? 3 : bi;
                bad |= (c0 != c0) | (c1 != c1) | (c2 != c2) | (c3 != c3);
                vp[ox] = best;
                ap[ox] = bi;
            }
            if (bad) ember_maxpool_row_S(PLANE(p), vp, ap, g, oy, pad);
        }
        free(tmp);
        return;
    }
    for (int64_t p = lo; p < hi; p++) {
        const T *xp = PLANE(p);
        for (int64_t oy = 0; oy < OH; oy++) {
            T *best = vals + p * L + oy * OW;
            int64_t *bi = arg + p * L + oy * OW;
            int bad = padnan;
            for (int64_t i = 0; i < KH; i++) {
                const int64_t iy = oy * SH - PT + i * DH;
                const int ry = iy >= 0 && iy < H;
                const T *xr = xp + (ry ? iy : 0) * W;
                for (int64_t j = 0; j < KW; j++) {
                    const int64_t k = i * KW + j, off = j * DW - PL;
                    int64_t a = 0, b = 0;
                    if (ry) ember_cols(W, SW, PL, j, DW, OW, &a, &b);
                    if (k == 0) {
                        for (int64_t ox = 0; ox < OW; ox++) {
                            best[ox] = (ox >= a && ox < b) ? xr[ox * SW + off] : pad;
                            bi[ox] = 0;
                        }
                        continue;
                    }
                    for (int64_t ox = 0; ox < a; ox++) {
                        const int take = pad > best[ox];
                        best[ox] = take ? pad : best[ox];
                        bi[ox] = take ? k : bi[ox];
                    }
                    for (int64_t ox = a; ox < b; ox++) {
                        const T v = xr[ox * SW + off], bv = best[ox];
                        const int take = v > bv;
                        bad |= v != v;
                        best[ox] = take ? v : bv;
                        bi[ox] = take ? k : bi[ox];
                    }
                    for (int64_t ox = b; ox < OW; ox++) {
                        const int take = pad > best[ox];
                        best[ox] = take ? pad : best[ox];
                        bi[ox] = take ? k : bi[ox];
                    }
                }
            }
            if (bad) ember_maxpool_row_S(xp, best, bi, g, oy, pad);
        }
    }
    free(tmp);
#undef PLANE
}

void ember_maxpool_S(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_launch_planes(ember_maxpool_S_run, ptrs, g, nthreads);
}

static void ember_maxpool_grad_S_run(char **ptrs, const int64_t *g, const int64_t *st,
                                     int64_t lo, int64_t hi) {
    GEOM;
    const T *gr = (const T *)ptrs[0];
    const int64_t *arg = (const int64_t *)ptrs[1];
    T *out = (T *)ptrs[2];
    const int64_t L = OH * OW, K = KH * KW;
    /* with g[14] the output planes are written channel-first (for a conv's one-GEMM
       weight and input gradients), the inputs read in (n, c) order */
    if (SH == KH && SW == KW && DH == 1 && DW == 1 && PT == 0 && PL == 0
            && OH * KH <= H && OW * KW <= W) {
        /* windows tiling the image (a pool with stride == kernel): every pixel is written
           once, the gradient or 0 — one pass instead of zeroing and scattering */
        for (int64_t p = lo; p < hi; p++) {
            T *op = out + ember_plane(p, g) * H * W;
            const T *gp = gr + p * L;
            const int64_t *ap = arg + p * L;
            for (int64_t oy = 0; oy < OH && KH == 2 && KW == 2; oy++) {
                U *r0 = (U *)(op + 2 * oy * W), *r1 = r0 + W;
                const U *gu = (const U *)gp + oy * OW;
                const int64_t *ak = ap + oy * OW;
                for (int64_t ox = 0; ox < OW; ox++) {
                    const U gv = gu[ox];
                    const int32_t k = (int32_t)ak[ox];
                    r0[2 * ox] = gv & (U)(-(U)(k == 0));
                    r0[2 * ox + 1] = gv & (U)(-(U)(k == 1));
                    r1[2 * ox] = gv & (U)(-(U)(k == 2));
                    r1[2 * ox + 1] = gv & (U)(-(U)(k == 3));
                }
                for (int64_t x = OW * 2; x < W; x++) r0[x] = r1[x] = 0;
            }
            for (int64_t oy = 0; oy < OH && !(KH == 2 && KW == 2); oy++)
            for (int64_t i = 0; i < KH; i++) {
                T *row = op + (oy * KH + i) * W;
                /* NOTE: bit masks, not `k == tap ? g : 0` (unpredictable branches, 5x
                   slower) nor `g * (k == tap)` (inf * 0 would leave NaN, not 0) */
                const U *gu = (const U *)gp + oy * OW;
                U *ru = (U *)row;
                const int64_t *ak = ap + oy * OW;
                for (int64_t ox = 0; ox < OW; ox++)
                for (int64_t j = 0; j < KW; j++)
                    ru[ox * KW + j] = gu[ox] & (U)(-(int64_t)(ak[ox] == i * KW + j));
                for (int64_t x = OW * KW; x < W; x++) row[x] = 0;
            }
            memset(op + OH * KH * W, 0, (size_t)((H - OH * KH) * W) * sizeof(T));
        }
        return;
    }
    for (int64_t p = lo; p < hi; p++) {
        T *op = out + ember_plane(p, g) * H * W;
        const T *gp = gr + p * L;
        const int64_t *ap = arg + p * L;
        memset(op, 0, (size_t)(H * W) * sizeof(T));
        for (int64_t oy = 0; oy < OH; oy++)
        for (int64_t ox = 0; ox < OW; ox++) {
            const int64_t k = ap[oy * OW + ox];
            if (k < 0 || k >= K) continue;
            const int64_t iy = oy * SH - PT + (k / KW) * DH;
            const int64_t ix = ox * SW - PL + (k % KW) * DW;
            if (iy >= 0 && iy < H && ix >= 0 && ix < W) op[iy * W + ix] += gp[oy * OW + ox];
        }
    }
}

void ember_maxpool_grad_S(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_launch_planes(ember_maxpool_grad_S_run, ptrs, g, nthreads);
}
"""

SOURCE = _HEAD + "".join(
    f"#define T {t}\n#define U {u}\n"
    + _BODY.replace("_S_run", f"_{s}_run").replace("_S(", f"_{s}(") + "#undef T\n#undef U\n"
    for s, t, u in (("f32", "float", "uint32_t"), ("f64", "double", "uint64_t")))

#: dtypes with a kernel.
DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_state: dict = {}
_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_int64)


def kernels():
    """``{name_suffix: ctypes function}`` of the compiled library, or None (no compiler)."""
    if "lib" not in _state:
        cc = find_compiler()
        if cc is None:
            return None
        lib = cache.load(SOURCE, cc)
        _pool.install(lib)
        fns = {}
        for op in ("unfold", "fold", "maxpool", "maxpool_grad"):
            for s in DTYPES.values():
                f = getattr(lib, f"ember_{op}_{s}")
                f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
                f.restype = None
                fns[f"{op}_{s}"] = f
        _state["lib"], _state["fns"] = lib, fns
    return _state["fns"]


def available() -> bool:
    """Whether the kernels can be built here (a working C compiler)."""
    return find_compiler() is not None


def blocks(size, k, d, pads, s) -> int:
    """Windows along one dim (``ember.ops.conv._blocks``)."""
    return (size + pads[0] + pads[1] - d * (k - 1) - 1) // s + 1


def geometry(planes, h, w, kernel_size, dilation, padding, stride, channels=1,
             channel_first=False) -> np.ndarray:
    (kh, kw), (dh, dw), (sh, sw) = kernel_size, dilation, stride
    oh, ow = blocks(h, kh, dh, padding[0], sh), blocks(w, kw, dw, padding[1], sw)
    return np.array([planes, h, w, kh, kw, dh, dw, sh, sw, padding[0][0], padding[1][0],
                     max(oh, 0), max(ow, 0), max(channels, 1), int(channel_first)], np.int64)


def _call(name, dtype, arrays, g, pad=None, extra=()):
    fn = _state["fns"][f"{name}_{DTYPES[dtype]}"]
    ptrs = [a.ctypes.data for a in arrays]
    if pad is not None:
        ptrs.append(ctypes.addressof(pad))
    ptrs.extend(extra)
    fn((ctypes.c_void_p * len(ptrs))(*ptrs), g.ctypes.data, num_threads())


def unfold(x, kernel_size, dilation, padding, stride, pad_value, out=None,
           channel_first=False):
    """im2col of (N, C, H, W) ``x`` -> (N, C*kh*kw, oh*ow), like the ``unfold`` primitive;
    ``channel_first``: the same columns as one (C*kh*kw, N*oh*ow) matrix."""
    x = np.ascontiguousarray(x)
    n, c, h, w = x.shape
    g = geometry(n * c, h, w, kernel_size, dilation, padding, stride, c, channel_first)
    k = kernel_size[0] * kernel_size[1]
    ll = int(g[11] * g[12])
    shape = (c * k, n * ll) if channel_first else (n, c * k, ll)
    out = np.empty(shape, x.dtype) if out is None else out
    if out.size:
        _call("unfold", x.dtype, (x, out), g, ctypes.c_double(pad_value))
    return out


def fold(cols, output_size, kernel_size, dilation, padding, stride, out=None, batch=None):
    """col2im of (N, C*kh*kw, L) ``cols`` -> (N, C, H, W), like the ``fold`` primitive;
    with ``batch`` = N, of channel-first (C*kh*kw, N*L) columns (``unfold``'s)."""
    cols = np.ascontiguousarray(cols)
    if batch is None:
        n, ck, _ = cols.shape
    else:
        (ck, _), n = cols.shape, batch
    h, w = output_size
    k = kernel_size[0] * kernel_size[1]
    g = geometry(n * (ck // k), h, w, kernel_size, dilation, padding, stride, ck // k,
                 batch is not None)
    out = np.empty((n, ck // k, h, w), cols.dtype) if out is None else out
    if out.size:
        _call("fold", cols.dtype, (cols, out), g)
    return out


def maxpool(x, kernel_size, dilation, padding, stride, pad_value, bias=None, channels=None):
    """(vals, arg), each (P, 1, L), of the windows of (P, 1, H, W) ``x``.

    With ``bias`` (C values, C dividing P), the windows are those of
    ``relu(x + bias[plane % C])``: a conv block's bias and relu before its pool. With
    ``channels`` = C, ``x``'s planes are channel-first (plane (n, c) at ``c*N + n``);
    the outputs' are in (n, c) order.
    """
    x = np.ascontiguousarray(x)
    p, c, h, w = x.shape
    extra = [None]
    nch = 1 if channels is None else channels
    if bias is not None:
        bias = np.ascontiguousarray(bias, dtype=x.dtype).reshape(-1)
        if channels is not None and bias.size != channels:
            raise ValueError(f"maxpool: bias of {bias.size} values for {channels} channels")
        nch = bias.size
    if nch < 1 or (p * c) % nch:
        what = f"bias of {nch} values does" if bias is not None else f"{nch} channels do"
        raise ValueError(f"maxpool: {what} not divide the {p * c} planes of input shape "
                         f"{x.shape}")
    if bias is not None:
        extra = [bias.ctypes.data]
    g = geometry(p * c, h, w, kernel_size, dilation, padding, stride, nch, channels is not None)
    shape = (p, c, int(g[11] * g[12]))
    vals, arg = np.empty(shape, x.dtype), np.empty(shape, np.int64)
    if vals.size:
        _call("maxpool", x.dtype, (x, vals, arg), g, ctypes.c_double(pad_value), extra)
    return vals, arg


def maxpool_grad(grad, arg, output_size, kernel_size, dilation, padding, stride, out=None,
                 channels=None):
    """(P, 1, H, W) ``fold(scatter_add(grad, arg))`` of (P, 1, L) ``grad`` and ``arg``;
    with ``channels`` = C, the output planes are written channel-first (plane (n, c) at
    ``c*N + n``)."""
    grad = np.ascontiguousarray(grad)
    arg = np.ascontiguousarray(arg, dtype=np.int64)
    p, c, _ = grad.shape
    h, w = output_size
    if channels is not None and (channels < 1 or (p * c) % channels):
        raise ValueError(f"maxpool_grad: {channels} channels do not divide the {p * c} "
                         f"planes of gradient shape {grad.shape}")
    g = geometry(p * c, h, w, kernel_size, dilation, padding, stride,
                 1 if channels is None else channels, channels is not None)
    out = np.empty((p, c, h, w), grad.dtype) if out is None else out
    if out.size:
        _call("maxpool_grad", grad.dtype, (grad, arg, out), g)
    return out
