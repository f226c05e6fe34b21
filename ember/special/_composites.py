"""``torch.special`` functions that are composites of Ember ops (no rules of their own)."""
from __future__ import annotations

from .. import dtypes as _dt
from ..ops.inplace import copy_into_out
from ..ops.select import where
from ..ops.special_gamma import mvlgamma
from ..ops.unary import log1p
from ..tensor import Tensor


def _out(r, out):
    return r if out is None else copy_into_out(out, r)


def xlog1py(input, other, *, out=None):
    """``input * log1p(other)``, 0 where ``input`` is 0 unless ``other`` is NaN
    (``torch.special.xlog1py``). Either argument may be a Python number; differentiable in
    both (the gradient in ``input`` is 0 where ``input`` is 0, as PyTorch).

    Example:
        >>> ember.special.xlog1py(ember.tensor([0.0, 2.0]), ember.tensor([-1.0, 1.0]))
        tensor([0.0000, 1.3863])
    """
    x = input if isinstance(input, Tensor) else other.new_tensor(input)
    y = other if isinstance(other, Tensor) else x.new_tensor(other)
    if not x.dtype.is_floating_point:
        x = x.to(_dt.result_type(y) if y.dtype.is_floating_point else _dt.get_default_dtype())
    zero = (x == 0) & ~y.isnan()
    return _out(where(zero, 0.0, x * log1p(where(zero, 0.0, y))), out)


def multigammaln(input, p, *, out=None):
    """Multivariate log-gamma of dimension ``p`` (``torch.special.multigammaln``, which is
    ``torch.mvlgamma``).

    Example:
        >>> ember.special.multigammaln(ember.tensor([2.5]), 2)
        tensor([1.2389])
    """
    return _out(mvlgamma(input, p), out)
