"""Bijective (and a few non-bijective) transforms with log-det-Jacobians
(``torch.distributions.transforms``).

A transform ``t`` maps ``x`` to ``y = t(x)``; ``t.inv(y)`` maps back; with ``cache_size=1``
the last ``(x, y)`` pair is remembered so ``t.inv(t(x))`` returns ``x`` itself (the sample
of a :class:`TransformedDistribution` is scored without inverting).
``log_abs_det_jacobian(x, y)`` has the shape of ``x`` minus ``domain.event_dim`` dims.

Example:
    >>> t = ExpTransform()
    >>> float(t.log_abs_det_jacobian(ember.tensor(0.5), t(ember.tensor(0.5))))
    0.5
"""
from __future__ import annotations

import math
import numbers

import ember
import ember.nn.functional as F

from . import constraints
from ._transform_base import (ComposeTransform, IndependentTransform,  # noqa: F401
                              ReshapeTransform, Transform, _InverseTransform,
                              identity_transform)
from ._transforms_structured import (CatTransform, CorrCholeskyTransform,  # noqa: F401
                                     CumulativeDistributionTransform,
                                     PositiveDefiniteTransform, StackTransform)

__all__ = ["AbsTransform", "AffineTransform", "CatTransform", "ComposeTransform",
           "CorrCholeskyTransform", "CumulativeDistributionTransform", "ExpTransform",
           "IndependentTransform", "LowerCholeskyTransform", "PositiveDefiniteTransform",
           "PowerTransform",
           "ReshapeTransform", "SigmoidTransform", "SoftmaxTransform", "SoftplusTransform",
           "StackTransform", "StickBreakingTransform", "TanhTransform", "Transform",
           "identity_transform"]


class ExpTransform(Transform):
    """``y = exp(x)``."""

    domain = constraints.real
    codomain = constraints.positive
    bijective = True
    sign = +1

    def __eq__(self, other):
        return isinstance(other, ExpTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        return x.exp()

    def _inverse(self, y):
        return y.log()

    def log_abs_det_jacobian(self, x, y):
        return x


class PowerTransform(Transform):
    """``y = x ** exponent`` on the positive reals."""

    domain = constraints.positive
    codomain = constraints.positive
    bijective = True

    def __init__(self, exponent, cache_size: int = 0):
        super().__init__(cache_size=cache_size)
        # NOTE: a number stays a Python float in the math (no float32 rounding of 1/exponent)
        self._exp = exponent if isinstance(exponent, ember.Tensor) else float(exponent)
        self.exponent = exponent if isinstance(exponent, ember.Tensor) else ember.tensor(
            float(exponent))

    def with_cache(self, cache_size=1):
        return self if self._cache_size == cache_size else PowerTransform(
            self.exponent, cache_size=cache_size)

    @property
    def sign(self):
        return self.exponent.sign()

    def _call(self, x):
        return x.pow(self._exp)

    def _inverse(self, y):
        return y.pow(1 / self._exp)

    def log_abs_det_jacobian(self, x, y):
        return (self._exp * y / x).abs().log()

    def forward_shape(self, shape):
        return tuple(ember.broadcast_shapes(tuple(shape), tuple(self.exponent.shape)))

    inverse_shape = forward_shape


class SigmoidTransform(Transform):
    """``y = sigmoid(x)``; the inverse clamps to ``[tiny, 1 - eps]`` before ``logit``."""

    domain = constraints.real
    codomain = constraints.unit_interval
    bijective = True
    sign = +1

    def __eq__(self, other):
        return isinstance(other, SigmoidTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        fi = ember.finfo(x.dtype)
        return ember.sigmoid(x).clamp(min=fi.tiny, max=1.0 - fi.eps)

    def _inverse(self, y):
        fi = ember.finfo(y.dtype)
        y = y.clamp(min=fi.tiny, max=1.0 - fi.eps)
        return y.log() - (-y).log1p()

    def log_abs_det_jacobian(self, x, y):
        return -F.softplus(-x) - F.softplus(x)


class SoftplusTransform(Transform):
    """``y = log(1 + exp(x))``."""

    domain = constraints.real
    codomain = constraints.positive
    bijective = True
    sign = +1

    def __eq__(self, other):
        return isinstance(other, SoftplusTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        return F.softplus(x)

    def _inverse(self, y):
        return (-y).expm1().neg().log() + y

    def log_abs_det_jacobian(self, x, y):
        return -F.softplus(-x)


class TanhTransform(Transform):
    """``y = tanh(x)``; log-det ``2 (log 2 - x - softplus(-2x))`` (stable for large |x|)."""

    domain = constraints.real
    codomain = constraints.interval(-1.0, 1.0)
    bijective = True
    sign = +1

    def __eq__(self, other):
        return isinstance(other, TanhTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        return ember.atanh(y)

    def log_abs_det_jacobian(self, x, y):
        return 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))


class AbsTransform(Transform):
    """``y = |x|`` (not bijective: the inverse returns the positive root)."""

    domain = constraints.real
    codomain = constraints.positive

    def __eq__(self, other):
        return isinstance(other, AbsTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        return x.abs()

    def _inverse(self, y):
        return y


class AffineTransform(Transform):
    """``y = loc + scale * x`` (``event_dim`` rightmost dims form one event)."""

    bijective = True

    def __init__(self, loc, scale, event_dim: int = 0, cache_size: int = 0):
        super().__init__(cache_size=cache_size)
        self.loc, self.scale, self._event_dim = loc, scale, event_dim

    @property
    def event_dim(self):
        return self._event_dim

    @property
    def domain(self):
        return constraints.real if self._event_dim == 0 else constraints.independent(
            constraints.real, self._event_dim)

    codomain = domain

    def with_cache(self, cache_size=1):
        return self if self._cache_size == cache_size else AffineTransform(
            self.loc, self.scale, self._event_dim, cache_size=cache_size)

    @property
    def sign(self):
        if isinstance(self.scale, numbers.Real):
            return 1 if float(self.scale) > 0 else -1 if float(self.scale) < 0 else 0
        return self.scale.sign()

    def _call(self, x):
        return self.loc + self.scale * x

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x, y):
        shape = tuple(x.shape)
        scale = self.scale
        if isinstance(scale, numbers.Real):
            result = ember.full_like(x, math.log(abs(scale)))
        else:
            result = scale.abs().log()
        if self._event_dim:
            result_size = tuple(result.shape[:result.ndim - self._event_dim]) + (-1,)
            result = result.reshape(result_size).sum(-1)
            shape = shape[:len(shape) - self._event_dim]
        return result.expand(shape)

    def forward_shape(self, shape):
        return tuple(ember.broadcast_shapes(tuple(shape), tuple(getattr(self.loc, "shape", ())),
                                            tuple(getattr(self.scale, "shape", ()))))

    inverse_shape = forward_shape


class SoftmaxTransform(Transform):
    """Unconstrained vectors to the simplex by ``softmax`` (not bijective)."""

    domain = constraints.real_vector
    codomain = constraints.simplex

    def __eq__(self, other):
        return isinstance(other, SoftmaxTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        logprobs = x
        probs = (logprobs - logprobs.amax(-1, keepdim=True)).exp()
        return probs / probs.sum(-1, keepdim=True)

    def _inverse(self, y):
        return y.log()


class StickBreakingTransform(Transform):
    """Unconstrained ``K-1`` vectors to the ``K``-simplex by stick breaking (bijective)."""

    domain = constraints.real_vector
    codomain = constraints.simplex
    bijective = True

    def __eq__(self, other):
        return isinstance(other, StickBreakingTransform)

    __hash__ = object.__hash__

    @staticmethod
    def _log_offset(x):
        """log(n - i) for i < n = x.shape[-1]: centres the logits so that x = 0 maps to the
        uniform point of the simplex."""
        n = x.shape[-1]
        return (n - ember.arange(n, dtype=x.dtype)).log()

    def _call(self, x):
        z = ember.sigmoid(x - self._log_offset(x))
        z_cumprod = (1 - z).cumprod(-1)
        return F.pad(z, [0, 1], value=1) * F.pad(z_cumprod, [1, 0], value=1)

    def _inverse(self, y):
        y_crop = y[..., :-1]
        sf = (1 - y_crop.cumsum(-1)).clamp(min=ember.finfo(y.dtype).tiny)
        return y_crop.log() - sf.log() + self._log_offset(y_crop)

    def log_abs_det_jacobian(self, x, y):
        x = x - self._log_offset(x)
        return (-x + F.logsigmoid(x) + y[..., :-1].log()).sum(-1)

    def forward_shape(self, shape):
        return tuple(shape[:-1]) + (shape[-1] + 1,)

    def inverse_shape(self, shape):
        return tuple(shape[:-1]) + (shape[-1] - 1,)


class LowerCholeskyTransform(Transform):
    """Unconstrained square matrices to lower-triangular ones with a positive diagonal
    (strict lower part kept, diagonal exponentiated; not bijective on all matrices)."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.lower_cholesky

    def __eq__(self, other):
        return isinstance(other, LowerCholeskyTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        return x.tril(-1) + x.diagonal(dim1=-2, dim2=-1).exp().diag_embed()

    def _inverse(self, y):
        return y.tril(-1) + y.diagonal(dim1=-2, dim2=-1).log().diag_embed()
