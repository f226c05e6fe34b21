"""``parametrizations.orthogonal``'s maps: matrix exponential, Cayley, Householder.

Built from Ember matmuls (so they differentiate like any composite); the one-off QR of
``right_inverse`` runs in NumPy (LAPACK's Householder QR, the same factors as
``torch.geqrf``) without gradient.
"""
from __future__ import annotations

import math

import numpy as np

from ...autograd.grad_mode import no_grad
from ...ops.factories import eye, tensor, zeros, zeros_like
from ...ops.join import cat
from ...random import randn
from ...tensor import Tensor
from ..module import Module

_MAPS = ("matrix_exp", "cayley", "householder")


def _matrix_exp(a: Tensor) -> Tensor:
    # NOTE: scaling and squaring with a degree-18 Taylor polynomial: ||a/2^s|| <= 1/2 makes
    # the truncation error below float64's epsilon
    norm = float(a.detach().abs().sum(-1).max()) if a.numel() else 0.0
    s = max(0, math.ceil(math.log2(norm / 0.5))) if norm > 0.5 else 0
    b = a / (2.0 ** s)
    ident = eye(a.shape[-1], dtype=a.dtype, device=a.device)
    out, term = ident + b, b
    for j in range(2, 19):
        term = (term @ b) / j
        out = out + term
    for _ in range(s):
        out = out @ out
    return out


def _householder_product(a: Tensor, tau: Tensor) -> Tensor:
    """The first k columns of ``H_1 ... H_k``, ``H_i = I - tau_i v_i v_iᵀ`` with ``v_i`` the
    i-th column of ``a`` below the diagonal and 1 on it (``torch.linalg.householder_product``
    for a strictly lower-triangular ``a``)."""
    n, k = a.shape[-2], a.shape[-1]
    ident = eye(n, dtype=a.dtype, device=a.device)
    q = ident[:, :k] + zeros_like(a)
    for i in range(k - 1, -1, -1):
        v = a[..., :, i:i + 1] + ident[:, i:i + 1]
        q = q - tau[..., i:i + 1].unsqueeze(-1) * (v @ (v.transpose(-2, -1) @ q))
    return q


def _make_orthogonal(a: Tensor) -> Tensor:
    q, r = np.linalg.qr(a.detach().cpu().numpy())      # NOTE: host LAPACK, a GPU's too
    d = np.sign(np.diagonal(r, axis1=-2, axis2=-1))
    return tensor(q * d[..., None, :], dtype=a.dtype, device=a.device)


def _is_orthogonal(q: Tensor) -> bool:
    n, k = q.shape[-2], q.shape[-1]
    x = q.detach().cpu().numpy()
    eps = 10.0 * n * np.finfo(x.dtype).eps
    return bool(np.allclose(np.swapaxes(x, -2, -1) @ x, np.eye(k), atol=eps, rtol=1e-5))


class _Orthogonal(Module):
    def __init__(self, weight: Tensor, orthogonal_map: str, *, use_trivialization=True):
        super().__init__()
        self.shape = tuple(weight.shape)
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, x: Tensor) -> Tensor:
        n, k = x.shape[-2], x.shape[-1]
        transposed = n < k
        if transposed:
            x, n, k = x.transpose(-2, -1), k, n
        if self.orthogonal_map in ("matrix_exp", "cayley"):
            x = x.tril()
            if n != k:
                x = cat([x, zeros(*x.shape[:-2], n, n - k, dtype=x.dtype)], -1)
            a = x - x.transpose(-2, -1)
            if self.orthogonal_map == "matrix_exp":
                q = _matrix_exp(a)
            else:
                raise NotImplementedError("orthogonal: the 'cayley' map needs a linear solve "
                                          "Ember does not have yet; use 'matrix_exp' or "
                                          "'householder'")
            q = q[..., :k] if n != k else q
        else:
            a = x.tril(-1)
            tau = 2.0 / (1.0 + (a * a).sum(-2))
            q = _householder_product(a, tau)
            q = q * x.diagonal(dim1=-2, dim2=-1).int().to(q.dtype).unsqueeze(-2)
        if "base" in self._buffers:
            q = self.base @ q
        return q.transpose(-2, -1) if transposed else q

    def right_inverse(self, q: Tensor) -> Tensor:
        if tuple(q.shape) != self.shape:
            raise ValueError(f"orthogonal: expected a matrix or batch of matrices of shape "
                             f"{self.shape}, got {tuple(q.shape)}")
        if "base" not in self._buffers:
            raise NotImplementedError("orthogonal: assigning with use_trivialization=False "
                                      "is not supported")
        with no_grad():
            q_init = q
            n, k = q.shape[-2], q.shape[-1]
            if n < k:
                q, n, k = q.transpose(-2, -1), k, n
            if n == k:
                q = q.clone() if _is_orthogonal(q) else _make_orthogonal(q)
            else:
                extra = randn(*q.shape[:-2], n, n - k, dtype=q.dtype, device=q.device)
                q = _make_orthogonal(cat([q, extra], -1))
            self.base = q
            r, c = q_init.shape[-2], q_init.shape[-1]
            neg = -np.broadcast_to(np.eye(r, c), tuple(q_init.shape))
            return tensor(np.ascontiguousarray(neg), dtype=q_init.dtype)
