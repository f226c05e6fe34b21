"""More in-place random fills: ``cauchy_``, ``log_normal_`` and ``geometric_``
(``Tensor.cauchy_`` ...), drawn from the tensor's generator like ``uniform_``/``exponential_``
(:mod:`ember.ops.misc`), so they are seeded by ``ember.manual_seed`` and traced as random
nodes by ``ember.compile``.

Example:
    >>> ember.empty(3).log_normal_(0.0, 0.25).min().item() > 0
    True
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import DTypeError
from ..random import _gen
from ..tensor import Tensor
from .misc import _need_float, _write

__all__: list = []


def _compute_dtype(dt: _dt.DType) -> np.dtype:
    return dt.np if dt in (_dt.float32, _dt.float64) else np.dtype(np.float32)


def cauchy_(self: Tensor, median: float = 0.0, sigma: float = 1.0, *, generator=None):
    """Fill with samples of the Cauchy distribution ``median + sigma * tan(pi (u - 1/2))``."""
    dt = _need_float(self, "cauchy_")
    if not sigma > 0:
        raise ValueError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    ct, shape = _compute_dtype(dt), tuple(self.shape)
    return _write(self, lambda: (median + sigma * np.tan(
        np.pi * (_gen(generator).random(shape, dtype=ct) - ct.type(0.5)))).astype(dt.np),
        "cauchy_")


def log_normal_(self: Tensor, mean: float = 1.0, std: float = 2.0, *, generator=None):
    """Fill with ``exp(N(mean, std**2))`` samples (``Tensor.log_normal_``)."""
    dt = _need_float(self, "log_normal_")
    if not std > 0:
        raise ValueError(f"log_normal_ expects std > 0.0, but found std={std}")
    ct, shape = _compute_dtype(dt), tuple(self.shape)
    return _write(self, lambda: np.exp(mean + std * _gen(generator).standard_normal(
        shape, dtype=ct)).astype(dt.np), "log_normal_")


def geometric_(self: Tensor, p: float, *, generator=None):
    """Fill with the number of Bernoulli(``p``) trials up to the first success (>= 1)."""
    if self.dtype is _dt.bool_:
        raise DTypeError("geometric_: expected a numeric tensor, got bool")
    if not 0 < p < 1:
        raise ValueError(f"geometric_ expects p to be in (0, 1), got p={p}")
    shape = tuple(self.shape)
    return _write(self, lambda: _gen(generator).geometric(p, shape).astype(self.dtype.np),
                  "geometric_")


Tensor.cauchy_ = cauchy_
Tensor.log_normal_ = log_normal_
Tensor.geometric_ = geometric_
