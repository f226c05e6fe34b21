"""Transforms built from other transforms or distributions, and matrix-valued ones:
``CatTransform``, ``StackTransform``, ``CumulativeDistributionTransform``,
``PositiveDefiniteTransform`` and ``CorrCholeskyTransform`` (re-exported by
:mod:`ember.distributions.transforms`)."""
from __future__ import annotations

import math

import ember
import ember.nn.functional as F

from . import constraints
from ._transform_base import Transform
from .utils import _sum_rightmost, tril_matrix_to_vec, vec_to_tril_matrix

__all__ = ["CatTransform", "CorrCholeskyTransform", "CumulativeDistributionTransform",
           "PositiveDefiniteTransform", "StackTransform"]


class CatTransform(Transform):
    """Apply ``tseq[i]`` to the ``i``-th slice (of size ``lengths[i]``) along ``dim``.

    Example:
        >>> from ember.distributions.transforms import ExpTransform, AffineTransform
        >>> t = CatTransform([ExpTransform(), AffineTransform(1.0, 2.0)], dim=0)
        >>> t(ember.tensor([0.0, 1.0])).tolist()
        [1.0, 3.0]
    """

    def __init__(self, tseq, dim: int = 0, lengths=None, cache_size: int = 0):
        tseq = list(tseq)
        if cache_size:
            tseq = [t.with_cache(cache_size) for t in tseq]
        super().__init__(cache_size=cache_size)
        self.transforms = tseq
        self.lengths = list(lengths) if lengths is not None else [1] * len(tseq)
        if len(self.lengths) != len(self.transforms):
            raise ValueError(f"CatTransform: {len(self.transforms)} transforms but "
                             f"{len(self.lengths)} lengths")
        self.dim = dim

    @property
    def event_dim(self):
        return max(t.event_dim for t in self.transforms)

    @property
    def length(self):
        return sum(self.lengths)

    def with_cache(self, cache_size=1):
        return self if self._cache_size == cache_size else CatTransform(
            self.transforms, self.dim, self.lengths, cache_size)

    def _slices(self, *zs):
        start = 0
        for t, length in zip(self.transforms, self.lengths):
            yield (t,) + tuple(z.narrow(self.dim, start, length) for z in zs)
            start += length

    def _check(self, x):
        if x.shape[self.dim] != self.length:
            raise ValueError(f"CatTransform: expected size {self.length} along dim "
                             f"{self.dim}, got shape {tuple(x.shape)}")

    def _call(self, x):
        self._check(x)
        return ember.cat([t(s) for t, s in self._slices(x)], self.dim)

    def _inverse(self, y):
        self._check(y)
        return ember.cat([t.inv(s) for t, s in self._slices(y)], self.dim)

    def log_abs_det_jacobian(self, x, y):
        parts = [_sum_rightmost(t.log_abs_det_jacobian(xs, ys), self.event_dim - t.event_dim)
                 for t, xs, ys in self._slices(x, y)]
        dim = (self.dim - x.ndim if self.dim >= 0 else self.dim) + self.event_dim
        if dim < 0:
            return ember.cat(parts, dim)
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        return total

    @property
    def bijective(self):
        return all(t.bijective for t in self.transforms)

    @property
    def domain(self):
        return constraints.cat([t.domain for t in self.transforms], self.dim, self.lengths)

    @property
    def codomain(self):
        return constraints.cat([t.codomain for t in self.transforms], self.dim, self.lengths)


class StackTransform(Transform):
    """Apply ``tseq[i]`` to ``x.select(dim, i)`` and stack the results along ``dim``.

    Example:
        >>> from ember.distributions.transforms import ExpTransform, AffineTransform
        >>> t = StackTransform([ExpTransform(), AffineTransform(1.0, 2.0)], dim=0)
        >>> t(ember.tensor([0.0, 1.0])).tolist()
        [1.0, 3.0]
    """

    def __init__(self, tseq, dim: int = 0, cache_size: int = 0):
        tseq = list(tseq)
        if cache_size:
            tseq = [t.with_cache(cache_size) for t in tseq]
        super().__init__(cache_size=cache_size)
        self.transforms, self.dim = tseq, dim

    def with_cache(self, cache_size=1):
        return self if self._cache_size == cache_size else StackTransform(
            self.transforms, self.dim, cache_size)

    def _slice(self, z):
        if z.shape[self.dim] != len(self.transforms):
            raise ValueError(f"StackTransform: expected size {len(self.transforms)} along dim "
                             f"{self.dim}, got shape {tuple(z.shape)}")
        return [z.select(self.dim, i) for i in range(z.shape[self.dim])]

    def _call(self, x):
        return ember.stack([t(s) for s, t in zip(self._slice(x), self.transforms)], self.dim)

    def _inverse(self, y):
        return ember.stack([t.inv(s) for s, t in zip(self._slice(y), self.transforms)],
                           self.dim)

    def log_abs_det_jacobian(self, x, y):
        return ember.stack([t.log_abs_det_jacobian(xs, ys) for xs, ys, t in zip(
            self._slice(x), self._slice(y), self.transforms)], self.dim)

    @property
    def bijective(self):
        return all(t.bijective for t in self.transforms)

    @property
    def domain(self):
        return constraints.stack([t.domain for t in self.transforms], self.dim)

    @property
    def codomain(self):
        return constraints.stack([t.codomain for t in self.transforms], self.dim)


class CumulativeDistributionTransform(Transform):
    """``y = distribution.cdf(x)`` (inverse ``icdf``; log-det ``log_prob``): maps a
    distribution's support to the unit interval (for copulas).

    Example:
        >>> import ember.distributions as D
        >>> t = CumulativeDistributionTransform(D.Normal(0.0, 1.0))
        >>> t(ember.tensor(0.0)).item()
        0.5
    """

    bijective = True
    codomain = constraints.unit_interval
    sign = +1

    def __init__(self, distribution, cache_size: int = 0):
        super().__init__(cache_size=cache_size)
        self.distribution = distribution

    @property
    def domain(self):
        return self.distribution.support

    def with_cache(self, cache_size=1):
        return self if self._cache_size == cache_size else CumulativeDistributionTransform(
            self.distribution, cache_size)

    def _call(self, x):
        return self.distribution.cdf(x)

    def _inverse(self, y):
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x, y):
        return self.distribution.log_prob(x)


class PositiveDefiniteTransform(Transform):
    """Unconstrained square matrices to positive definite ones: ``L L^T`` for ``L`` from
    :class:`LowerCholeskyTransform` (the inverse takes the Cholesky factor)."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.positive_definite

    def __eq__(self, other):
        return isinstance(other, PositiveDefiniteTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        from .transforms import LowerCholeskyTransform
        L = LowerCholeskyTransform()(x)
        return L @ L.mT

    def _inverse(self, y):
        from .transforms import LowerCholeskyTransform
        return LowerCholeskyTransform().inv(ember.linalg.cholesky(y))


class CorrCholeskyTransform(Transform):
    """Unconstrained vectors of length ``D(D-1)/2`` to Cholesky factors of ``D x D``
    correlation matrices: ``tanh`` to (-1, 1), then per row a stick-breaking that gives the
    rows unit norm (``L[i, j] = r[i, j] sqrt(1 - sum_{k<j} L[i, k]^2)``, the diagonal takes
    what is left).

    Example:
        >>> L = CorrCholeskyTransform()(ember.tensor([0.3, -1.0, 2.0]))
        >>> [round(v, 6) for v in (L @ L.mT).diagonal().tolist()]
        [1.0, 1.0, 1.0]
    """

    domain = constraints.real_vector
    codomain = constraints.corr_cholesky
    bijective = True

    def __eq__(self, other):
        return isinstance(other, CorrCholeskyTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        eps = ember.finfo(x.dtype).eps
        r = vec_to_tril_matrix(x.tanh().clamp(min=-1 + eps, max=1 - eps), diag=-1)
        # NOTE: prod_{k<j} sqrt(1 - r_ik^2): the length of row i left for column j
        left = (1 - r.square()).sqrt().cumprod(-1)
        left = ember.cat([ember.ones_like(left[..., :1]), left[..., :-1]], -1)
        eye = ember.eye(r.shape[-1], dtype=r.dtype, device=r.device)
        return (r + eye) * left

    def _left_sq(self, y):
        """1 - sum_{k<j} y_ik^2 for every (i, j)."""
        c = 1 - (y * y).cumsum(-1)
        return ember.cat([ember.ones_like(c[..., :1]), c[..., :-1]], -1)

    def _inverse(self, y):
        t = tril_matrix_to_vec(y, diag=-1) / tril_matrix_to_vec(self._left_sq(y), diag=-1).sqrt()
        return ember.atanh(t)

    def log_abs_det_jacobian(self, x, y):
        stick = 0.5 * tril_matrix_to_vec(1 - (y * y).cumsum(-1), diag=-2).log().sum(-1)
        tanh = (2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))).sum(-1)
        return stick + tanh

    def forward_shape(self, shape):
        n = shape[-1]
        d = round((0.25 + 2 * n) ** 0.5 + 0.5)
        if d * (d - 1) // 2 != n:
            raise ValueError(f"CorrCholeskyTransform: the last dim ({n}) is not D(D-1)/2")
        return tuple(shape[:-1]) + (d, d)

    def inverse_shape(self, shape):
        d = shape[-1]
        if shape[-2] != d:
            raise ValueError(f"CorrCholeskyTransform: expected square matrices, got "
                             f"{tuple(shape)}")
        return tuple(shape[:-2]) + (d * (d - 1) // 2,)
