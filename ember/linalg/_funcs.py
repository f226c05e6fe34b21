"""``ember.linalg``: matrix functions and products (composites of Ember ops, except
``matrix_exp``, a primitive through SciPy's ``expm``)."""
from __future__ import annotations

from ..errors import ShapeError
from ..ops.dispatch import apply as _apply
from ..ops.factories import eye
from ..ops.join import stack
from ..ops.linalg_lapack2 import matrix_exp_p
from . import _checks as C
from ._solve import inv

__all__ = ["matrix_power", "matrix_exp", "cross", "vecdot", "multi_dot", "diagonal",
           "vander", "householder_product"]


def matrix_exp(A):
    """Matrix exponential (``torch.linalg.matrix_exp``; SciPy's Padé ``expm``). Its
    gradient is the Fréchet derivative, the corner of ``exp([[A^H, G], [0, A^H]])``."""
    C.square("linalg.matrix_exp", A)
    return _apply(matrix_exp_p, (A,), {})


@C.outable
def matrix_power(A, n, *, out=None):
    """``A`` to the integer power ``n`` by repeated squaring; ``n < 0`` inverts first,
    ``n == 0`` gives the identity (``torch.linalg.matrix_power``)."""
    C.square("linalg.matrix_power", A)
    if not isinstance(n, int):
        raise TypeError(f"linalg.matrix_power: n must be an int, got {type(n).__name__}")
    if n == 0:
        return eye(A.shape[-1], dtype=A.dtype, device=A.device) + A * 0
    if n == 1:
        return A.clone()
    if n < 0:
        A, n = inv(A), -n
    result, base = None, A
    while n:
        if n & 1:
            result = base if result is None else result @ base
        n >>= 1
        if n:
            base = base @ base
    return result


@C.outable
def cross(input, other, *, dim=-1, out=None):
    """Cross product of 3-vectors along ``dim`` (default -1, unlike ``ember.cross``), batch
    dims broadcasting (``torch.linalg.cross``)."""
    if input.shape[dim] != 3 or other.shape[dim] != 3:
        raise ShapeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                         f"{input.shape[dim]} and {other.shape[dim]}")
    nd = max(input.ndim, other.ndim)
    d = dim % nd
    a = [input.select(dim, i) for i in range(3)]
    b = [other.select(dim, i) for i in range(3)]
    r = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    return stack(r, d)


@C.outable
def vecdot(x, y, *, dim=-1, out=None):
    """``sum(conj(x) * y, dim)`` with broadcasting (``torch.linalg.vecdot``)."""
    return (x * y).sum(dim)


def _chain_order(dims):
    """Optimal parenthesisation of a matrix chain (the classic O(n^3) dynamic program)."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = float("inf")
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


@C.outable
def multi_dot(tensors, *, out=None):
    """Product of a chain of matrices in the cheapest order; the first / last may be 1-D
    (a row / column vector) (``torch.linalg.multi_dot``)."""
    ts = list(tensors)
    if len(ts) < 2:
        raise ValueError(f"multi_dot(): expected at least 2 tensors but got {len(ts)}")
    first_vec, last_vec = ts[0].ndim == 1, ts[-1].ndim == 1
    if first_vec:
        ts[0] = ts[0].unsqueeze(0)
    if last_vec:
        ts[-1] = ts[-1].unsqueeze(-1)
    for i, t in enumerate(ts):
        if t.ndim != 2:
            raise ShapeError(f"multi_dot(): tensor {i} must be 2D but got {t.ndim}D")
    for i in range(len(ts) - 1):
        if ts[i].shape[1] != ts[i + 1].shape[0]:
            raise ShapeError(f"multi_dot(): tensors {i} and {i + 1} with shapes "
                             f"{tuple(ts[i].shape)} and {tuple(ts[i + 1].shape)} cannot be "
                             f"multiplied")
    split = _chain_order([ts[0].shape[0]] + [t.shape[1] for t in ts])

    def prod(i, j):
        if i == j:
            return ts[i]
        k = split[i][j]
        return prod(i, k) @ prod(k + 1, j)
    r = prod(0, len(ts) - 1)
    if first_vec:
        r = r.squeeze(0)
    if last_vec:
        r = r.squeeze(-1)
    return r


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """``A.diagonal(offset, dim1, dim2)`` with the last two dims as default
    (``torch.linalg.diagonal``)."""
    return A.diagonal(offset, dim1, dim2)


def vander(x, *, N=None):
    """Vandermonde matrix ``[1, x, x^2, ..., x^(N-1)]`` along a new last dim (increasing
    powers, as ``torch.linalg.vander``)."""
    if x.ndim < 1:
        raise ShapeError("linalg.vander: x must have at least one dimension")
    N = x.shape[-1] if N is None else N
    if N <= 1:
        if N < 1:
            raise ValueError(f"linalg.vander: N must be greater than 1, got {N}")
        return (x * 0 + 1).unsqueeze(-1)
    cols = [x * 0 + 1, x]
    for _ in range(N - 2):
        cols.append(cols[-1] * x)
    return stack(cols, -1)


@C.outable
def householder_product(A, tau, *, out=None):
    """First n columns of ``H_1 ... H_k`` with ``H_i = I - tau_i v_i v_iᴴ``, ``v_i`` the
    i-th column of ``A`` below the diagonal with a 1 on it (``torch.linalg.
    householder_product``; a composite, so differentiable in both arguments)."""
    C.matrices("linalg.householder_product", A)
    m, n = A.shape[-2:]
    k = tau.shape[-1]
    if not (m >= n >= k):
        raise ShapeError(f"torch.linalg.householder_product: requires m >= n >= k, got "
                         f"A {tuple(A.shape)} and tau {tuple(tau.shape)}")
    V = A.narrow(-1, 0, k).tril(-1) + eye(m, k, dtype=A.dtype)
    Q = eye(m, dtype=A.dtype) + A.narrow(-1, 0, 1).narrow(-2, 0, 1) * 0
    for i in range(k):
        v = V.narrow(-1, i, 1)
        Q = Q - (Q @ v) * tau.narrow(-1, i, 1).unsqueeze(-1) @ v.mH
    return Q.narrow(-1, 0, n)
