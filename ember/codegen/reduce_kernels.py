"""Hand-written C loops for two small reductions of a training step: column sums and
row scatter-adds.

* ``colsum(x)`` / ``colsum_mul(a, b)``: ``x.sum(0)`` / ``(a * b).sum(0)`` of C-contiguous
  ``(rows, n)`` arrays — the bias and LayerNorm-weight gradients (``sum_rows`` pass,
  :mod:`ember.graph.passes.matmul`). The rows are cut into fixed blocks of ``block_rows``
  rows (a function of ``rows`` only, never of the thread count); each block's column sums
  go into its own partial row, blocks spread over Ember's worker pool (:mod:`.pool`), and
  the partials are added in block order at the end. So the result is the same bits
  however many threads ran and however they were scheduled. Inside a block, columns are
  summed 8 SIMD vectors at a time, each column's rows in order (8 independent add chains
  keep the adder busy); columns left over after whole 8-vector tiles are summed a vector
  (or, past the last whole vector, an element) at a time with 4 accumulators over rows
  ``r % 4``, added ``(a0 + a1) + (a2 + a3)`` at the end. The product variant
  may contract ``acc += a * b`` into one FMA (GCC's default): the sums agree with NumPy
  within ``rows`` roundings, not bitwise.
* ``add_rows(out, values, rows)``: ``out[rows[i]] += values[i]`` for ``i`` in order (an
  embedding's gradient: ``index_put`` with ``accumulate=True`` of whole rows; repeated
  rows add up, negative rows wrap). Every output element is a sequential sum in index
  order, exactly ``np.add.at``'s: bitwise equal to it. Threads own disjoint column ranges
  (whole 64-byte lines), so no two ever add into one element. Indices are checked first;
  an out-of-range one changes nothing and is reported (:class:`IndexError` here,
  ``EmberIndexError`` from the op).

float32 and float64 only; :func:`kernels` returns None without a C compiler and callers
keep their NumPy paths. Each shape's call is planned once (geometry array, entry point);
calls go through :mod:`.launch`'s one-call launcher when it works here (``a.ctypes.data``
alone costs ~1.7 us per array).
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import launch as _launch
from . import pool as _pool
from .runtime import num_threads
from .toolchain import find_compiler

_HEAD = r"""#include <stdint.h>
#include <stdlib.h>
#include <string.h>
typedef void (*ember_run_fn)(char **, const int64_t *, const int64_t *, int64_t, int64_t);
void (*ember_parallel_hook)(ember_run_fn, char **, const int64_t *, const int64_t *,
                            int64_t, int64_t, int64_t) = 0;

/* Below this many elements a kernel runs on the calling thread alone (PARALLEL_MIN). */
#define EMBER_PAR_MIN ((int64_t)PARALLEL_MIN)

static void ember_launch_work(ember_run_fn run, char **ptrs, const int64_t *g, int64_t work,
                              int64_t size, int64_t nthreads) {
    if (nthreads > 1 && work > 1 && size >= EMBER_PAR_MIN && ember_parallel_hook)
        ember_parallel_hook(run, ptrs, g, g, work, 1, nthreads);
    else
        run(ptrs, g, g, 0, work);
}
"""

# One copy per dtype and variant: T the element type, {S} the suffix, {V} the variant's
# name, LD(i) / VLD(i) the term (a scalar / a vector) at element i: x[i], or x[i] * y[i]
# for the product.
_COLSUM = r"""
typedef T ember_v{S}{V} __attribute__((vector_size(32)));
typedef T ember_u{S}{V} __attribute__((vector_size(32), aligned(sizeof(T))));
#define VT ember_v{S}{V}
#define VU ember_u{S}{V}
#define VL ((int64_t)(32 / sizeof(T)))

/* Column sums of rows [r0, r1) into dst[0, N). */
static void ember_{V}_block_{S}(const T *restrict x, const T *restrict y, int64_t r0,
                                int64_t r1, int64_t N, T *restrict dst) {
    (void)y;
    int64_t c = 0;
    for (; c + 8 * VL <= N; c += 8 * VL) {          /* 8 vectors, rows in order */
        VT a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
        for (int64_t r = r0; r < r1; r++) {
            const int64_t o = r * N + c;
            a0 += VLD(o); a1 += VLD(o + VL); a2 += VLD(o + 2 * VL); a3 += VLD(o + 3 * VL);
            a4 += VLD(o + 4 * VL); a5 += VLD(o + 5 * VL); a6 += VLD(o + 6 * VL);
            a7 += VLD(o + 7 * VL);
        }
        VU *d = (VU *)(dst + c);
        d[0] = a0; d[1] = a1; d[2] = a2; d[3] = a3; d[4] = a4; d[5] = a5; d[6] = a6;
        d[7] = a7;
    }
    for (; c + VL <= N; c += VL) {                   /* a vector, 4 rows at a time */
        VT a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        int64_t r = r0;
        for (; r + 3 < r1; r += 4) {
            const int64_t o = r * N + c;
            a0 += VLD(o); a1 += VLD(o + N); a2 += VLD(o + 2 * N); a3 += VLD(o + 3 * N);
        }
        for (; r < r1; r++) a0 += VLD(r * N + c);
        *(VU *)(dst + c) = (a0 + a1) + (a2 + a3);
    }
    for (; c < N; c++) {                             /* the last columns, 4 rows at a time */
        T a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int64_t r = r0;
        for (; r + 3 < r1; r += 4) {
            const int64_t o = r * N + c;
            a0 += LD(o); a1 += LD(o + N); a2 += LD(o + 2 * N); a3 += LD(o + 3 * N);
        }
        for (; r < r1; r++) a0 += LD(r * N + c);
        dst[c] = (a0 + a1) + (a2 + a3);
    }
}

/* Blocks [lo, hi) of g = [rows, N, block_rows, nblocks]: block k's sums into ptrs[3] + k*N
   (the output itself when there is one block). */
static void ember_{V}_{S}_run(char **ptrs, const int64_t *g, const int64_t *st,
                              int64_t lo, int64_t hi) {
    (void)st;
    const int64_t R = g[0], N = g[1], B = g[2];
    const T *x = (const T *)ptrs[0], *y = (const T *)ptrs[1];
    T *p = (T *)ptrs[3];
    for (int64_t k = lo; k < hi; k++)
        ember_{V}_block_{S}(x, y, k * B, (k + 1) * B < R ? (k + 1) * B : R, N, p + k * N);
}

/* ptrs = x, y (x again for the plain sum), out, part (nblocks x N scratch; unused with
   one block), g as above. */
static void ember_{V}_{S}_go(char **ptrs, const int64_t *g, int64_t nthreads) {
    const int64_t R = g[0], N = g[1], NB = g[3];
    T *out = (T *)ptrs[2], *part = (T *)ptrs[3];
    if (NB <= 1) {
        ember_{V}_block_{S}((const T *)ptrs[0], (const T *)ptrs[1], 0, R, N, out);
        return;
    }
    ember_launch_work(ember_{V}_{S}_run, ptrs, g, NB, R * N, nthreads);
    for (int64_t c = 0; c < N; c++) out[c] = part[c];
    for (int64_t k = 1; k < NB; k++) {               /* partials added in block order */
        const T *pk = part + k * N;
        for (int64_t c = 0; c < N; c++) out[c] += pk[c];
    }
}

void ember_{V}_{S}(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_{V}_{S}_go(ptrs, g, nthreads);
}

/* the same through ember_launch (codegen/launch.py): ptrs = x y out part g */
void ember_{V}_{S}_fast(char **ptrs, const int64_t *shape, const int64_t *st,
                        int64_t nthreads) {
    (void)shape; (void)st;
    ember_{V}_{S}_go(ptrs, (const int64_t *)ptrs[4], nthreads);
}
#undef VT
#undef VU
#undef VL
"""

_ADD_ROWS = r"""
/* Column chunks [lo, hi) (g[3] columns each) of out[rows[i]] += values[i], i in order.
   g = [M (indices), R (rows of out), N (columns), chunk]. */
static void ember_add_rows_{S}_run(char **ptrs, const int64_t *g, const int64_t *st,
                                   int64_t lo, int64_t hi) {
    (void)st;
    const int64_t M = g[0], R = g[1], N = g[2], CH = g[3];
    const T *v = (const T *)ptrs[0];
    const int64_t *rows = (const int64_t *)ptrs[1];
    T *out = (T *)ptrs[2];
    const int64_t c0 = lo * CH, c1 = hi * CH < N ? hi * CH : N;
    for (int64_t i = 0; i < M; i++) {
        const int64_t r = rows[i] < 0 ? rows[i] + R : rows[i];
        T *restrict o = out + r * N;
        const T *restrict s = v + i * N;
        #pragma omp simd
        for (int64_t c = c0; c < c1; c++) o[c] += s[c];
    }
}

/* ptrs = values, rows, out, err (int64[3]: 1 and the rows' min and max when one is out
   of range; then out is untouched), g. */
static void ember_add_rows_{S}_go(char **ptrs, const int64_t *g, int64_t nthreads) {
    const int64_t M = g[0], R = g[1], N = g[2], CH = g[3];
    const int64_t *rows = (const int64_t *)ptrs[1];
    int64_t lo = M ? rows[0] : 0, hi = lo;
    for (int64_t i = 1; i < M; i++) {
        lo = rows[i] < lo ? rows[i] : lo;
        hi = rows[i] > hi ? rows[i] : hi;
    }
    if (M && (lo < -R || hi >= R)) {
        int64_t *err = (int64_t *)ptrs[3];
        err[0] = 1; err[1] = lo; err[2] = hi;
        return;
    }
    ember_launch_work(ember_add_rows_{S}_run, ptrs, g, (N + CH - 1) / CH, M * N, nthreads);
}

void ember_add_rows_{S}(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_add_rows_{S}_go(ptrs, g, nthreads);
}

void ember_add_rows_{S}_fast(char **ptrs, const int64_t *shape, const int64_t *st,
                             int64_t nthreads) {
    (void)shape; (void)st;
    ember_add_rows_{S}_go(ptrs, (const int64_t *)ptrs[4], nthreads);
}
"""

_LOADS = {
    "colsum": ("#define LD(i) (x[i])\n#define VLD(i) (*(const VU *)(x + (i)))\n"),
    "colsum_mul": ("#define LD(i) (x[i] * y[i])\n"
                   "#define VLD(i) (*(const VU *)(x + (i)) * *(const VU *)(y + (i)))\n"),
}

#: dtypes with a kernel: (C type, suffix).
DTYPES = {np.dtype(np.float32): ("float", "f32"), np.dtype(np.float64): ("double", "f64")}
NAMES = ("colsum", "colsum_mul", "add_rows")
#: elements of work (x's, or values') below which a kernel runs on the calling thread only.
#: NOTE: measured on the 2-core machine (medians of 3000 interleaved calls): handing half of
#: a (1024, 512) float32 column sum to the pool's worker took 49 us against 34 us on one
#: thread, and an embedding gradient's 1024 x 128 row adds 38 us against 18 us — the
#: worker sleeps on a condition variable and OpenBLAS's threads, still spinning after the
#: step's last GEMM, hold the other core. With OpenBLAS on one thread, two threads did win
#: from (2048, 512) up (55 vs 70 us). So only arrays far beyond the W1-W3 sizes split.
PARALLEL_MIN = 1 << 20
_state: dict = {}


def source() -> str:
    """The C source of every kernel for both dtypes."""
    parts = [f"#define PARALLEL_MIN {PARALLEL_MIN}\n", _HEAD]
    for t, s in DTYPES.values():
        parts.append(f"#define T {t}\n")
        for v, loads in _LOADS.items():
            parts.append(loads + _COLSUM.replace("{S}", s).replace("{V}", v)
                         + "#undef LD\n#undef VLD\n")
        parts.append(_ADD_ROWS.replace("{S}", s) + "#undef T\n")
    return "".join(parts)


def kernels():
    """``{"colsum_f32": fn, ...}``: the compiled library's entry points, or None (no compiler)."""
    if "fns" not in _state:
        names = [f"{op}_{s}" for op in NAMES for _, s in DTYPES.values()]
        loaded = _pool.load_kernels(source(), names)
        if loaded is None or find_compiler() is None:
            return None
        lib, fns = loaded
        fast = _pool.fast_addresses(lib, names)
        _state["lib"], _state["fns"], _state["fast"] = lib, fns, fast
        _state["raw"] = _launch.raw()
    return _state["fns"]


def available() -> bool:
    """Whether the kernels can be built here (a working C compiler)."""
    return find_compiler() is not None


def block_rows(rows: int) -> int:
    """Rows per block of a column sum: at least 64 (a block is some work), at most 64
    blocks (the partials stay small). A function of ``rows`` alone: the summation order,
    hence the result, never depends on the thread count."""
    return max(64, -(-rows // 64))


class _Plan:
    """What a call of one kernel on one shape needs, built once: the entry points, the
    geometry array (read by C, never written), the scratch size and the thread rule."""

    __slots__ = ("fast", "fn", "g", "scratch", "par")

    def __init__(self, key: str, g: list, scratch: int, size: int):
        self.fast, self.fn = _state["fast"][key], _state["fns"][key]
        self.g = np.array(g, np.int64)
        self.scratch = scratch
        self.par = size >= PARALLEL_MIN


def _plan(name: str, dtype, dims: tuple) -> _Plan:
    plans = _state.setdefault("plans", {})      # NOTE: with the library they point into
    key = (name, dtype) + dims
    p = plans.get(key)
    if p is None:
        sym = f"{name}_{DTYPES[dtype][1]}"
        if name == "add_rows":
            m, r, n = dims
            p = _Plan(sym, [m, r, n, max(64 // dtype.itemsize, 1)], 0, m * n)  # 64-byte chunks
        else:
            rows, n = dims
            b = block_rows(rows)
            nb = -(-rows // b)
            p = _Plan(sym, [rows, n, b, nb], nb * n if nb > 1 else 0, rows * n)
        if len(plans) >= 1024:
            plans.clear()
        plans[key] = p
    return p


def _call(p: _Plan, args: tuple) -> None:
    """Run a plan on ``args`` (the arrays its kernel reads, C-contiguous ndarrays)."""
    # NOTE: num_threads() reads the environment (~1.5 us): asked only when it can matter
    nt = num_threads() if p.par else 1
    raw = _state["raw"]
    if raw is not None:
        raw(p.fast, args + (p.g,), None, None, nt, len(args) + 1, _launch.ITEMS_OFF,
            _launch.DATA_OFF)
    else:
        ptrs = [a.ctypes.data for a in args]
        p.fn((ctypes.c_void_p * len(ptrs))(*ptrs), p.g.ctypes.data, nt)


def _loaded(name: str) -> None:
    if "fns" not in _state and kernels() is None:
        raise RuntimeError(f"reduce_kernels.{name}: no C compiler; check available() first")


def _operand(a, like) -> bool:
    """``a`` is an ndarray the kernels read as ``like`` (dtype, shape, C order)."""
    return isinstance(a, np.ndarray) and a.dtype == like.dtype and a.shape == like.shape \
        and a.flags.c_contiguous


def _check2d(name: str, x, y) -> None:
    if not (isinstance(x, np.ndarray) and x.dtype in DTYPES and x.ndim == 2
            and x.flags.c_contiguous and (y is x or _operand(y, x))):
        arrays = (x,) if y is x else (x, y)
        raise ValueError(f"reduce_kernels.{name}: need C-contiguous (rows, n) float32/float64 "
                         f"arrays of one shape and dtype, got "
                         f"{', '.join(f'{a.shape} {a.dtype}' for a in arrays)}")


def colsum_fn(rows: int, n: int, dtype, mul: bool = False):
    """The column sum of ``(rows, n)`` arrays of ``dtype`` as ``fn(x, y, out=None) -> out``
    (``x`` twice for a plain sum; ``out`` a contiguous ``(n,)`` array or None), built once
    per shape; None without a C compiler or for another dtype.

    Unchecked: ``x``, ``y`` and ``out`` must be C-contiguous ndarrays of ``dtype`` holding
    ``rows * n`` (``n``) elements, any shape (a graph's ``(B, T, n)`` value needs no
    reshape). :func:`colsum` and :func:`colsum_mul` are the checked entry points.
    """
    dtype = np.dtype(dtype)
    if dtype not in DTYPES or kernels() is None:
        return None
    runs = _state.setdefault("runs", {})
    key = (rows, n, dtype, mul)
    fn = runs.get(key)
    if fn is None:
        if len(runs) >= 1024:
            runs.clear()
        fn = runs[key] = _colsum_run(rows, n, dtype, mul)
    return fn


def _colsum_run(rows, n, dtype, mul):
    p = _plan("colsum_mul" if mul else "colsum", dtype, (rows, n))
    empty = np.empty
    if rows == 0 or n == 0:
        def run(x, y, out=None):
            out = empty(n, dtype) if out is None else out
            out[...] = 0
            return out
        return run
    raw, scratch = _state["raw"], p.scratch
    if raw is None:
        def run(x, y, out=None):
            out = empty(n, dtype) if out is None else out
            _call(p, (x, y, out, empty(scratch, dtype) if scratch else out))
            return out
        return run
    fast, g, par, items, data = p.fast, p.g, p.par, _launch.ITEMS_OFF, _launch.DATA_OFF

    def run(x, y, out=None):
        out = empty(n, dtype) if out is None else out
        raw(fast, (x, y, out, empty(scratch, dtype) if scratch else out, g), None, None,
            num_threads() if par else 1, 5, items, data)
        return out
    return run


def _colsum(name: str, x: np.ndarray, y: np.ndarray, out):
    _loaded(name)
    _check2d(name, x, y)
    rows, n = x.shape
    if out is not None and not (isinstance(out, np.ndarray) and out.shape == (n,)
                                and out.dtype == x.dtype and out.flags.c_contiguous):
        raise ValueError(f"reduce_kernels.{name}: out must be a contiguous ({n},) {x.dtype} "
                         f"array, got {out.shape} {out.dtype}")
    return colsum_fn(rows, n, x.dtype, name == "colsum_mul")(x, y, out)


def colsum(x: np.ndarray, out=None) -> np.ndarray:
    """``x.sum(0)`` of a C-contiguous ``(rows, n)`` float32/float64 array (deterministic).

    Example:
        >>> colsum(np.arange(6.0).reshape(3, 2))
        array([6., 9.])
    """
    return _colsum("colsum", x, x, out)


def colsum_mul(a: np.ndarray, b: np.ndarray, out=None) -> np.ndarray:
    """``(a * b).sum(0)`` of two C-contiguous ``(rows, n)`` arrays, without the product."""
    return _colsum("colsum_mul", a, b, out)


def add_rows(out: np.ndarray, values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``out[rows[i]] += values[i]`` for every ``i`` in order, in place; returns ``out``.

    ``out`` is ``(R, ...)`` and ``values`` ``(len(rows), ...)``, both C-contiguous with one
    float32/float64 dtype; ``rows`` is 1-D int64 (negative rows wrap). An index outside
    ``[-R, R)`` raises :class:`IndexError` and leaves ``out`` as it was.
    """
    _loaded("add_rows")
    if not all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in (out, values, rows)) \
            or out.dtype not in DTYPES or values.dtype != out.dtype or rows.dtype != np.int64 \
            or rows.ndim != 1 or out.ndim < 1 or values.shape != rows.shape + out.shape[1:]:
        raise ValueError(f"reduce_kernels.add_rows: need C-contiguous out (R, ...) and values "
                         f"(len(rows), ...) of one float32/float64 dtype and 1-D int64 rows, "
                         f"got out {out.shape} {out.dtype}, values {values.shape} "
                         f"{values.dtype}, rows {rows.shape} {rows.dtype}")
    m, r = rows.shape[0], out.shape[0]
    n = out.size // r if r else 0
    if m == 0 or (n == 0 and r > 0):
        return out
    err = np.zeros(3, np.int64)
    _call(_plan("add_rows", out.dtype, (m, r, n)), (values, rows, out, err))
    if err[0]:
        bad = int(err[2]) if err[2] >= r else int(err[1])
        raise IndexError(f"index {bad} is out of bounds for dimension 0 with size {r}")
    return out
