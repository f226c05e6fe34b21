"""The sparse-times-dense product primitive behind ``ember.sparse.mm`` (COO @ dense).

``sparse_mm(values, dense, indices, m=)`` multiplies the ``(m, K)`` COO matrix with
``indices`` (``(2, nnz)``, int64; duplicates sum) and ``values`` (``(nnz,)``) by ``dense``
(``(K, N)``) with SciPy's sparse kernel (``coo_matrix @ dense``, what graph networks use for
adjacency products). It is linear in ``values`` and in ``dense``: the VJP to ``dense`` is
the transposed product (the same primitive on swapped indices), the VJP to ``values`` the
gathered row-products ``sum(g[row] * dense[col], 1)``. Values come first so the dtype rule
``same`` leaves the integer indices alone (``ember.sparse.mm`` casts values and dense to
one dtype first).
"""
from __future__ import annotations

import numpy as np

from .registry import defop


def _kernel(xp, values, dense, indices, m):
    from scipy import sparse as sp     # NOTE: SciPy imported on first use
    k = dense.shape[0]
    a = sp.coo_matrix((values, (indices[0], indices[1])), shape=(m, k))
    out = np.asarray(a.tocsr() @ dense)
    return out.astype(np.result_type(values.dtype, dense.dtype), copy=False).reshape(
        m, dense.shape[1])


def _shape(v, d, i, m):
    return (m, d[1])


def _swap(indices):
    return indices.flip(0)


def _grad_values(g, dense, indices):
    return (g.index_select(0, indices[0]) * dense.index_select(0, indices[1])).sum(1)


sparse_mm_p = defop(   # NOTE: a "cpu" kernel: on cuda it runs on host copies
    "sparse_mm", nin=3, kernels={"cpu": _kernel}, params={"m": 0}, dtype="same", shape=_shape,
    save="inputs", nondiff_argnums=(2,), batch="loop",
    vjp=(lambda g, out, v, d, i, m: _grad_values(g, d, i),
         lambda g, out, v, d, i, m: sparse_mm_p(v, g, _swap(i), m=d.shape[0]),
         None),
    jvp=lambda t, out, v, d, i, m: sparse_mm_p(t[0], d, i, m=m) + sparse_mm_p(v, t[1], i, m=m))
