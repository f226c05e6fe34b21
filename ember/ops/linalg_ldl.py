"""LAPACK primitives with no derivative in PyTorch either: the LDLᵀ factorization
(``sytrf``/``sytrs``) and the Householder QR in LAPACK's compact form (``geqrf``).

``linalg_ldl_factor`` packs (*batch, n + 2, n): LD (lower), then LAPACK's 1-based pivots
(negative for 2×2 blocks) as floats, then ``info`` in the last row's first entry.
``linalg_geqrf`` packs (*batch, m + 1, n): the compact QR, then tau (min(m, n) entries).
"""
from __future__ import annotations

import math

import numpy as np

from . import batching_rules as _vb
from .registry import defop

__all__ = []


def _lapack_fn(name, *arrays):
    from scipy.linalg import lapack  # noqa: PLC0415 - lazy SciPy
    return lapack.get_lapack_funcs(name, arrays)


def _ldl_factor_kernel(xp, a, hermitian=False):
    # NOTE: complex input: LDLᴴ (hetrf) with hermitian=True, else LDLᵀ (sytrf), as PyTorch
    sytrf = _lapack_fn("hetrf" if hermitian and a.dtype.kind == "c" else "sytrf", a)
    batch, n = a.shape[:-2], a.shape[-1]
    mats = a.reshape((math.prod(batch), n, n))
    out = np.zeros((len(mats), n + 2, n), dtype=a.dtype)
    for i, m in enumerate(mats):
        if n == 0:
            continue
        ld, ipiv, info = sytrf(m, lower=1)
        out[i, :n] = np.tril(ld)
        out[i, n] = ipiv
        out[i, n + 1, 0] = max(int(info), 0)
    return out.reshape(batch + (n + 2, n))


def _ldl_solve_kernel(xp, ld, piv, b, hermitian=False):
    cplx = np.result_type(ld, b).kind == "c"
    sytrs = _lapack_fn("hetrs" if hermitian and cplx else "sytrs", ld, b)
    batch = np.broadcast_shapes(ld.shape[:-2], piv.shape[:-1], b.shape[:-2])
    n = ld.shape[-1]
    nb = math.prod(batch)
    lds = np.broadcast_to(ld, batch + ld.shape[-2:]).reshape((nb, n, n))
    pivs = np.broadcast_to(piv, batch + piv.shape[-1:]).reshape((nb, n))
    bs = np.broadcast_to(b, batch + b.shape[-2:]).reshape((nb,) + b.shape[-2:])
    out = np.empty(bs.shape, dtype=np.result_type(ld, b))
    for i in range(len(bs)):
        if out[i].size:
            out[i] = sytrs(lds[i], pivs[i].astype(np.int32), bs[i], lower=1)[0]
    return out.reshape(batch + b.shape[-2:])


def _geqrf_kernel(xp, a):
    geqrf = _lapack_fn("geqrf", a)
    batch, (m, n) = a.shape[:-2], a.shape[-2:]
    k = min(m, n)
    mats = a.reshape((math.prod(batch), m, n))
    out = np.zeros((len(mats), m + 1, n), dtype=a.dtype)
    for i, x in enumerate(mats):
        if x.size:
            qr, tau, _, _ = geqrf(x)
            out[i, :m], out[i, m, :k] = qr, tau[:k]
    return out.reshape(batch + (m + 1, n))


ldl_factor_p = defop(
    "linalg_ldl_factor", nin=1, kernels={"cpu": _ldl_factor_kernel}, dtype="same", save=None,
    batch="front", params={"hermitian": False},
    shape=lambda a, **_: tuple(a[:-2]) + (a[-1] + 2, a[-1]), differentiable=False,
    doc="packed (..., n+2, n): LD, pivots row, info row")

ldl_solve_p = defop(
    "linalg_ldl_solve", nin=3, kernels={"cpu": _ldl_solve_kernel}, dtype="same", save=None,
    batch=_vb.leading("linalg_ldl_solve", 2, 1, 2), params={"hermitian": False},
    shape=lambda ld, piv, b, **_: tuple(np.broadcast_shapes(ld[:-2], piv[:-1], b[:-2])) +
    tuple(b[-2:]), differentiable=False, doc="A X = B from ldl_factor's LD and pivots")

geqrf_p = defop(
    "linalg_geqrf", nin=1, kernels={"cpu": _geqrf_kernel}, dtype="same", save=None,
    batch="front",
    shape=lambda a: tuple(a[:-2]) + (a[-2] + 1, a[-1]), differentiable=False,
    doc="packed (..., m+1, n): compact QR, then tau")
