"""Helpers shared by the distributions (``torch.distributions.utils``)."""
from __future__ import annotations

import functools
import numbers

import ember
from ember.tensor import Tensor

__all__ = ["broadcast_all", "logits_to_probs", "probs_to_logits", "clamp_probs",
           "lazy_property", "tril_matrix_to_vec", "vec_to_tril_matrix", "euler_constant"]

euler_constant = 0.57721566490153286060  # Euler-Mascheroni constant


def broadcast_all(*values):
    """Broadcast numbers and tensors to one shape; numbers become tensors of the first
    tensor's dtype (else the default dtype).

    Example:
        >>> a, b = broadcast_all(ember.zeros(3), 1.0)
        >>> tuple(b.shape)
        (3,)
    """
    if not all(isinstance(v, (Tensor, numbers.Number)) for v in values):
        raise ValueError("Input arguments must all be instances of numbers.Number or "
                         f"ember.Tensor, got {[type(v).__name__ for v in values]}")
    if not all(isinstance(v, Tensor) for v in values):
        like = next((v for v in values if isinstance(v, Tensor)), None)
        dtype = like.dtype if like is not None else ember.get_default_dtype()
        values = [v if isinstance(v, Tensor) else ember.tensor(float(v), dtype=dtype)
                  for v in values]
    return ember.broadcast_tensors(*values)


def _standard_normal(shape, dtype, device=None):
    return ember.randn(tuple(shape), dtype=dtype, device=device)


def _sum_rightmost(value, dim: int):
    """Sum out the ``dim`` rightmost dimensions of ``value``."""
    if dim == 0:
        return value
    return value.reshape(tuple(value.shape[:value.ndim - dim]) + (-1,)).sum(-1)


def logits_to_probs(logits, is_binary: bool = False):
    """Probabilities from logits: sigmoid if ``is_binary`` else softmax over the last dim."""
    if is_binary:
        return ember.sigmoid(logits)
    return ember.softmax(logits, dim=-1)


def clamp_probs(probs):
    """Clamp into ``[eps, 1 - eps]`` of ``probs``' dtype."""
    eps = ember.finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary: bool = False):
    """Logits from probabilities (log-odds if ``is_binary``, else log)."""
    ps = clamp_probs(probs)
    if is_binary:
        return ember.log(ps) - ember.log1p(-ps)
    return ember.log(ps)


class lazy_property:
    """A property computed once per instance and then stored as an attribute (it may be
    a parameter, e.g. ``probs`` computed from ``logits``)."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        functools.update_wrapper(self, wrapped)

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        with ember.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


def tril_matrix_to_vec(mat, diag: int = 0):
    """The lower triangle (to diagonal ``diag``) of ``mat``'s last two dims, row by row."""
    n = mat.shape[-1]
    if not -n <= diag < n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    import numpy as np
    rows, cols = np.tril_indices(n, k=diag)
    return mat[..., ember.tensor(rows.tolist()), ember.tensor(cols.tolist())]


def vec_to_tril_matrix(vec, diag: int = 0):
    """Inverse of :func:`tril_matrix_to_vec`."""
    import numpy as np
    m = vec.shape[-1]
    n = int(round((-(1 + 2 * diag) + ((1 + 2 * diag) ** 2 + 8 * m + 4 * abs(diag) * (diag + 1))
                   ** 0.5) / 2))
    rows, cols = np.tril_indices(n, k=diag)
    if len(rows) != m:
        raise ValueError(f"vec_to_tril_matrix: size {m} is not a triangular number for "
                         f"diag={diag}")
    flat = ember.zeros(tuple(vec.shape[:-1]) + (n * n,), dtype=vec.dtype)
    idx = ember.tensor((rows * n + cols).tolist()).expand(tuple(vec.shape[:-1]) + (m,))
    return flat.scatter(-1, idx, vec).reshape(tuple(vec.shape[:-1]) + (n, n))
