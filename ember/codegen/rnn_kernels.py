"""C loops for one time step of the fused ``lstm_layer`` / ``gru_layer`` primitives.

The recurrent GEMM of a step stays NumPy's (BLAS); what follows it — the gate
nonlinearities and the state update forward, the local derivatives backward — is about
fifteen NumPy ufunc passes over strided ``(N, kH)`` slices per step, which cost more than
the GEMM itself. Here each is one loop per batch row (``#pragma omp simd`` over the
hidden units; float32 ``tanh`` is Ember's rational approximation from :mod:`.prelude`,
float64 libm's, vectorised by libmvec where the compiler has it; ``sigmoid(x) = 0.5 *
tanh(0.5 x) + 0.5``). Results agree with the NumPy kernels in ``ember/ops/rnn.py`` within
rounding, not bitwise.

Entry points (``ember_<name>_{f32,f64}(char **ptrs, const int64_t *g, int64_t)``), every
strided operand with a unit last stride and its row stride in ``g``:

* ``lstm_fwd``: ``pre = h W_hhᵀ`` (N, 4H, contiguous), ``x_t``, ``c_prev`` -> ``h_t``,
  ``c_t``, the activated gates ``a_t``; ``g = [N, H, sx, sc, sh, sco, sa]``.
* ``lstm_bwd``: ``a_t``, ``c_prev``, ``c_t``, ``gh``, ``gc``, ``ga`` (the gates' own
  gradient), ``dhr`` (the recurrent gradient ``dG_{t+1} W_hh``, contiguous), ``dc``
  (in/out, contiguous) -> ``dG_t`` (N, 4H, contiguous);
  ``g = [N, H, scp, sct, sgh, sgc, sa, sga]``.
* ``gru_fwd``: ``hp = h W_hhᵀ`` (contiguous), ``b_hh``, ``x_t``, ``h_prev`` -> ``h_t``;
  ``g = [N, H, sx, shp, sho]``.
* ``gru_bwd``: ``hp = h_prev W_hhᵀ + b_hh`` (contiguous), ``x_t``, ``h_prev``, ``gh``,
  ``dhr`` (``dHP_{t+1} W_hh``, contiguous), ``carry`` (in: ``dh_{t+1} z_{t+1}``, out:
  ``dh_t z_t``, contiguous) -> ``dX_t``, ``dHP_t`` (N, 3H, contiguous); ``g = [N, H, sx,
  shp, sgh]``.

:func:`kernels` returns None without a C compiler; the primitives then run NumPy.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import pool as _pool
from .prelude import prelude
from .toolchain import find_compiler

DTYPES = {np.dtype(np.float32): ("float", "ember_tanh_f32", "f32"),
          np.dtype(np.float64): ("double", "tanh", "f64")}
_NAMES = ("lstm_fwd", "lstm_bwd", "gru_fwd", "gru_bwd")
_state: dict = {}

_BODY = r"""
static inline T sig_{S}(T x) { return (T)0.5 * TANH((T)0.5 * x) + (T)0.5; }

void ember_lstm_fwd_{S}(char **p, const int64_t *g, int64_t nt) {
    const int64_t N = g[0], H = g[1];
    (void)nt;
    for (int64_t n = 0; n < N; n++) {
        const T *pre = (const T *)p[0] + n * 4 * H, *x = (const T *)p[1] + n * g[2],
            *cp = (const T *)p[2] + n * g[3];
        T *h = (T *)p[3] + n * g[4], *c = (T *)p[4] + n * g[5], *a = (T *)p[5] + n * g[6];
        #pragma omp simd
        for (int64_t j = 0; j < H; j++) {
            const T i = sig_{S}(pre[j] + x[j]), f = sig_{S}(pre[H + j] + x[H + j]),
                gg = TANH(pre[2 * H + j] + x[2 * H + j]),
                o = sig_{S}(pre[3 * H + j] + x[3 * H + j]);
            const T cn = f * cp[j] + i * gg;
            a[j] = i; a[H + j] = f; a[2 * H + j] = gg; a[3 * H + j] = o;
            c[j] = cn;
            h[j] = o * TANH(cn);
        }
    }
}

void ember_lstm_bwd_{S}(char **p, const int64_t *g, int64_t nt) {
    const int64_t N = g[0], H = g[1];
    (void)nt;
    for (int64_t n = 0; n < N; n++) {
        const T *a = (const T *)p[0] + n * g[6], *cp = (const T *)p[1] + n * g[2],
            *ct = (const T *)p[2] + n * g[3], *gh = (const T *)p[3] + n * g[4],
            *gc = (const T *)p[4] + n * g[5], *ga = (const T *)p[5] + n * g[7],
            *dhr = (const T *)p[6] + n * H;
        T *dc = (T *)p[7] + n * H, *dg = (T *)p[8] + n * 4 * H;
        #pragma omp simd
        for (int64_t j = 0; j < H; j++) {
            const T i = a[j], f = a[H + j], gg = a[2 * H + j], o = a[3 * H + j],
                tc = TANH(ct[j]);
            const T dh = gh[j] + dhr[j];
            const T dcv = gc[j] + dc[j] + dh * o * ((T)1 - tc * tc);
            dg[j] = (dcv * gg + ga[j]) * i * ((T)1 - i);
            dg[H + j] = (dcv * cp[j] + ga[H + j]) * f * ((T)1 - f);
            dg[2 * H + j] = (dcv * i + ga[2 * H + j]) * ((T)1 - gg * gg);
            dg[3 * H + j] = (dh * tc + ga[3 * H + j]) * o * ((T)1 - o);
            dc[j] = dcv * f;
        }
    }
}

void ember_gru_fwd_{S}(char **p, const int64_t *g, int64_t nt) {
    const int64_t N = g[0], H = g[1];
    (void)nt;
    const T *b = (const T *)p[1];
    for (int64_t n = 0; n < N; n++) {
        const T *hp = (const T *)p[0] + n * 3 * H, *x = (const T *)p[2] + n * g[2],
            *hprev = (const T *)p[3] + n * g[3];
        T *h = (T *)p[4] + n * g[4];
        #pragma omp simd
        for (int64_t j = 0; j < H; j++) {
            const T r = sig_{S}(x[j] + hp[j] + b[j]),
                z = sig_{S}(x[H + j] + hp[H + j] + b[H + j]),
                nn = TANH(x[2 * H + j] + r * (hp[2 * H + j] + b[2 * H + j]));
            h[j] = nn + z * (hprev[j] - nn);
        }
    }
}

void ember_gru_bwd_{S}(char **p, const int64_t *g, int64_t nt) {
    const int64_t N = g[0], H = g[1];
    (void)nt;
    for (int64_t n = 0; n < N; n++) {
        const T *hp = (const T *)p[0] + n * 3 * H, *x = (const T *)p[1] + n * g[2],
            *hprev = (const T *)p[2] + n * g[3], *gh = (const T *)p[3] + n * g[4],
            *dhr = (const T *)p[4] + n * H;
        T *carry = (T *)p[5] + n * H, *dx = (T *)p[6] + n * 3 * H,
            *dhp = (T *)p[7] + n * 3 * H;
        #pragma omp simd
        for (int64_t j = 0; j < H; j++) {
            const T r = sig_{S}(x[j] + hp[j]), z = sig_{S}(x[H + j] + hp[H + j]),
                hn = hp[2 * H + j], nn = TANH(x[2 * H + j] + r * hn);
            const T dh = gh[j] + dhr[j] + carry[j];
            const T dn = dh * ((T)1 - z) * ((T)1 - nn * nn);
            const T dz = dh * (hprev[j] - nn) * z * ((T)1 - z);
            const T dr = dn * hn * r * ((T)1 - r);
            dx[j] = dr; dx[H + j] = dz; dx[2 * H + j] = dn;
            dhp[j] = dr; dhp[H + j] = dz; dhp[2 * H + j] = dn * r;
            carry[j] = dh * z;
        }
    }
}
"""


def source(mvec=()) -> str:
    """The C source of the four step kernels for float32 and float64."""
    want = {name: arity for name, arity in mvec if name == "tanh"}
    body = "".join(f"#define T {t}\n#define TANH {th}\n" + _BODY.replace("{S}", s) +
                   "#undef T\n#undef TANH\n" for t, th, s in DTYPES.values())
    return prelude(mvec=want) + body


def kernels():
    """``{"lstm_fwd_f32": fn, ...}``, or None without a C compiler."""
    if "fns" not in _state:
        if find_compiler() is None:
            return None
        names = [f"{op}_{s}" for op in _NAMES for _, _, s in DTYPES.values()]
        loaded = _pool.load_kernels(lambda cc: source(cc.mvec), names)
        if loaded is None:
            return None
        _state["lib"], _state["fns"] = loaded
    return _state["fns"]


def fits(*arrays) -> bool:
    """One float32/float64 dtype, unit last strides (the step kernels' contract)."""
    dt = arrays[0].dtype
    return dt in DTYPES and all(a.dtype == dt and (a.ndim == 0 or a.shape[-1] <= 1 or
                                                   a.strides[-1] == a.itemsize)
                                for a in arrays)


class Step:
    """One step kernel bound to a dtype and a geometry (fixed over a sequence's steps):
    ``step(*addresses)`` with the operands' data addresses in the entry point's order
    (the pointer and geometry buffers are reused between calls)."""

    def __init__(self, name: str, dtype, nptr: int, geometry):
        self.fn = kernels()[f"{name}_{DTYPES[np.dtype(dtype)][2]}"]
        self.ptrs = (ctypes.c_void_p * nptr)()
        self.geom = np.asarray(geometry, dtype=np.int64)
        self.gp = self.geom.ctypes.data

    def __call__(self, *addresses) -> None:
        self.ptrs[:] = addresses
        self.fn(self.ptrs, self.gp, 1)


class Seq:
    """Data addresses of an array's sub-arrays ``a[t]`` without making views."""

    __slots__ = ("base", "step")

    def __init__(self, a):
        self.base, self.step = a.ctypes.data, a.strides[0]

    def __getitem__(self, t: int) -> int:
        return self.base + t * self.step


def rows(a) -> int:
    """Row stride of a 2-D step operand, in elements."""
    return a.strides[0] // a.itemsize if a.ndim == 2 else 0
