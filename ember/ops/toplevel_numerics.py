"""Top-level numerics names PyTorch has beside the ``Tensor`` methods (issue 18, item 6):
``histogramdd`` and the functional in-place forms ``torch.exp_(x)``, ``torch.xlogy_(x, y)``...

The in-place functions are the ``Tensor`` methods themselves (``torch.exp_(x)`` is
``x.exp_()``), so autograd's in-place rules and version counters are the methods'.

Example:
    >>> x = ember.tensor([0.0, 1.0])
    >>> ember.exp_(x)
    tensor([1.0000, 2.7183])
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .factories import full_like, tensor as _tensor

#: ``torch.<name>_(input, *args)`` for these names calls ``input.<name>_(*args)``.
INPLACE = ("abs", "acos", "acosh", "arccos", "arccosh", "arcsin", "arcsinh", "arctan",
           "arctanh", "asin", "asinh", "atan", "atanh", "ceil", "clamp", "clamp_max",
           "clamp_min", "clip", "cos", "cosh", "deg2rad", "erf", "erfc", "exp", "exp2", "expm1",
           "fix", "floor", "frac", "gcd", "i0", "lcm", "ldexp", "log", "log10", "log1p", "log2",
           "logit", "nan_to_num", "neg", "negative", "rad2deg", "reciprocal", "round", "rsqrt",
           "sigmoid", "sin", "sinc", "sinh", "sqrt", "square", "tan", "tanh", "trunc", "xlogy",
           "zero", "fill")

__all__ = [n + "_" for n in INPLACE] + ["histogramdd", "fill"]

histogramdd_result = namedtuple("histogramdd", ["hist", "bin_edges"])


def _inplace_function(name):
    def f(input, *args, **kwargs):
        # NOTE: looked up per call: the methods are bound by many modules, some after this one
        return getattr(input, name + "_")(*args, **kwargs)
    f.__name__ = f.__qualname__ = name + "_"
    f.__doc__ = f"In-place ``{name}`` of ``input`` (``torch.{name}_``, i.e. ``input.{name}_()``)."
    return f


for _name in INPLACE:
    globals()[_name + "_"] = _inplace_function(_name)


def fill(input, value):
    """A new tensor like ``input`` filled with ``value`` (``torch.fill``, out of place)."""
    v = value.item() if isinstance(value, Tensor) else value
    return full_like(input, v)


def _edges(bins, n, rng):
    """Per-dimension bin edges (NumPy's ``histogramdd`` form) from ints or 1-D tensors."""
    if isinstance(bins, (int, np.integer)):
        bins = [int(bins)] * n
    bins = list(bins)
    if len(bins) != n:
        raise ShapeError(f"torch.histogramdd: expected {n} sequences of bin edges for each of "
                         f"the {n} bin dimensions, but got {len(bins)} sequences")
    if rng is not None and len(rng) != 2 * n:
        raise ShapeError(f"torch.histogramdd: range should have 2 * {n} = {2 * n} elements "
                         f"(min and max per dimension), got {len(rng)}")
    out = []
    for b in bins:
        out.append(np.asarray(b.detach().numpy(), np.float64) if isinstance(b, Tensor)
                   else int(b))
    pairs = None if rng is None else [(float(rng[2 * i]), float(rng[2 * i + 1]))
                                      for i in range(n)]
    return out, pairs


def histogramdd(input, bins, *, range=None, weight=None, density=False):  # noqa: A002
    """N-dimensional histogram of the points in ``input``'s rows (``torch.histogramdd``).

    ``input`` has shape ``(..., N)``: every row of its last dimension is a point. ``bins`` is
    an int (equal bins in every dimension), a sequence of N ints, or a sequence of N 1-D
    tensors of increasing edges; ``range`` is ``[min_0, max_0, ..., min_{N-1}, max_{N-1}]``.
    Returns ``(hist, bin_edges)`` with ``bin_edges`` a tuple of N tensors. Not
    differentiable (PyTorch has no gradient either).

    Example:
        >>> h = ember.histogramdd(ember.tensor([[0., 0.], [1., 1.]]), bins=2)
        >>> h.hist
        tensor([[1., 0.],
                [0., 1.]])
    """
    if input.ndim < 2:
        raise ShapeError(f"torch.histogramdd: input tensor should have at least 2 dimensions, "
                         f"got shape {tuple(input.shape)}")
    if not input.dtype.is_floating_point:
        raise DTypeError(f'"histogramdd" not implemented for {input.dtype.name!r}: expected '
                         f'a floating point input')
    n = input.shape[-1]
    pts = np.asarray(input.detach().numpy(), np.float64).reshape(-1, n)
    w = None
    if weight is not None:
        if tuple(weight.shape) != tuple(input.shape[:-1]):
            raise ShapeError(f"torch.histogramdd: if weight tensor is provided it should have "
                             f"the same shape as the input tensor excluding its innermost "
                             f"dimension, got {tuple(weight.shape)} for input "
                             f"{tuple(input.shape)}")
        w = np.asarray(weight.detach().numpy(), np.float64).reshape(-1)
    edges, pairs = _edges(bins, n, range)
    hist, e = np.histogramdd(pts, bins=edges, range=pairs, weights=w, density=density)
    dt, dev = input.dtype, input.device
    return histogramdd_result(_tensor(hist, dtype=dt, device=dev),
                              tuple(_tensor(x, dtype=dt, device=dev) for x in e))


del _name
