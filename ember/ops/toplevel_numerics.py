"""Top-level numerics names PyTorch has beside the ``Tensor`` methods (issue 18, item 6):
``histogramdd``, ``gradient`` and the functional in-place forms ``torch.exp_(x)``,
``torch.xlogy_(x, y)``...

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

from .. import dtypes as _dt
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

__all__ = [n + "_" for n in INPLACE] + ["histogramdd", "fill", "gradient"]

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
        out.append(np.asarray(b.detach().cpu().numpy(), np.float64) if isinstance(b, Tensor)
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
    pts = np.asarray(input.detach().cpu().numpy(), np.float64).reshape(-1, n)
    w = None
    if weight is not None:
        if tuple(weight.shape) != tuple(input.shape[:-1]):
            raise ShapeError(f"torch.histogramdd: if weight tensor is provided it should have "
                             f"the same shape as the input tensor excluding its innermost "
                             f"dimension, got {tuple(weight.shape)} for input "
                             f"{tuple(input.shape)}")
        w = np.asarray(weight.detach().cpu().numpy(), np.float64).reshape(-1)
    edges, pairs = _edges(bins, n, range)
    hist, e = np.histogramdd(pts, bins=edges, range=pairs, weights=w, density=density)
    dt, dev = input.dtype, input.device
    return histogramdd_result(_tensor(hist, dtype=dt, device=dev),
                              tuple(_tensor(x, dtype=dt, device=dev) for x in e))


del _name


def _dims(dim, ndim):
    if dim is None:
        return list(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    out = [d + ndim if d < 0 else d for d in dims]
    if any(not 0 <= d < ndim for d in out) or len(set(out)) != len(out):
        raise IndexError(f"torch.gradient: dim {dim} is out of range or repeated for a "
                         f"{ndim}-D input")
    return out


def _spacings(spacing, dims):
    """One spacing per differentiated dim: a Python number or a 1-D coordinate tensor."""
    if isinstance(spacing, (int, float)) and not isinstance(spacing, bool):
        return [float(spacing)] * len(dims)
    if isinstance(spacing, Tensor) and spacing.ndim == 0:
        return [float(spacing)] * len(dims)
    sp = list(spacing)
    if len(sp) == 1 and len(dims) > 1 and not isinstance(sp[0], Tensor):
        sp = sp * len(dims)
    if len(sp) != len(dims):
        raise ValueError(f"torch.gradient expected spacing to be unspecified, a scalar or a "
                         f"list of length equal to the number of dimensions of dim "
                         f"({len(dims)}), but got a list of length {len(sp)}")
    return [x if isinstance(x, Tensor) and x.ndim == 1 else float(x) for x in sp]


def _uniform(f, d, h, edge_order):
    n = f.shape[d]
    mid = (f.narrow(d, 2, n - 2) - f.narrow(d, 0, n - 2)) / (2 * h)
    a, b, c = (f.narrow(d, i, 1) for i in (0, 1, 2))
    x, y, z = (f.narrow(d, n - i, 1) for i in (3, 2, 1))
    if edge_order == 1:
        return (b - a) / h, mid, (z - y) / h
    return (-1.5 * a + 2 * b - 0.5 * c) / h, mid, (0.5 * x - 2 * y + 1.5 * z) / h


def _coords(f, d, x, edge_order):
    """numpy.gradient's second-order formulas for unevenly spaced coordinates ``x``."""
    n = f.shape[d]
    view = [1] * f.ndim
    view[d] = -1
    x = x.to(f.dtype)
    hd = (x[1:-1] - x[:-2]).reshape(view)
    hs = (x[2:] - x[1:-1]).reshape(view)
    mid = (-hs / (hd * (hd + hs)) * f.narrow(d, 0, n - 2) + (hs - hd) / (hd * hs)
           * f.narrow(d, 1, n - 2) + hd / (hs * (hd + hs)) * f.narrow(d, 2, n - 2))
    f0, f1, f2 = (f.narrow(d, i, 1) for i in (0, 1, 2))
    g0, g1, g2 = (f.narrow(d, n - i, 1) for i in (3, 2, 1))
    if edge_order == 1:
        return (f1 - f0) / (x[1] - x[0]), mid, (g2 - g1) / (x[-1] - x[-2])
    d1, d2 = x[1] - x[0], x[2] - x[1]
    lo = (-(2 * d1 + d2) / (d1 * (d1 + d2)) * f0 + (d1 + d2) / (d1 * d2) * f1
          - d1 / (d2 * (d1 + d2)) * f2)
    d1, d2 = x[-2] - x[-3], x[-1] - x[-2]
    hi = (d2 / (d1 * (d1 + d2)) * g0 - (d2 + d1) / (d1 * d2) * g1
          + (2 * d2 + d1) / (d2 * (d1 + d2)) * g2)
    return lo, mid, hi


def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """Second-order central differences of ``input`` along each of ``dim`` (all dims by
    default), one-sided of order ``edge_order`` (1 or 2) at the ends (``torch.gradient``,
    ``numpy.gradient``'s formulas). ``spacing`` is a number, a list of numbers (one per dim)
    or a list of 1-D coordinate tensors. Returns a tuple of tensors; differentiable.

    Example:
        >>> ember.gradient(ember.tensor([1., 4., 9., 16., 25.]))
        (tensor([3., 4., 6., 8., 9.]),)
    """
    from .join import cat
    if edge_order not in (1, 2):
        raise ValueError(f"torch.gradient only supports edge_order=1 and edge_order=2, got "
                         f"{edge_order}")
    f = input if input.dtype.is_floating_point or input.dtype.is_complex else \
        input.to(_dt.get_default_dtype())
    dims = _dims(dim, f.ndim)
    out = []
    for d, h in zip(dims, _spacings(spacing, dims)):
        if f.shape[d] < edge_order + 1:
            raise ValueError(f"torch.gradient expected each dimension size to be at least "
                             f"edge_order+1, got size {f.shape[d]} at dim {d} of shape "
                             f"{tuple(f.shape)}")
        if isinstance(h, Tensor) and h.shape[0] != f.shape[d]:
            raise ValueError(f"torch.gradient expected the coordinates of dim {d} to have "
                             f"{f.shape[d]} entries, got {tuple(h.shape)}")
        if f.shape[d] == 2:          # NOTE: only the one-sided differences exist
            g = (f.narrow(d, 1, 1) - f.narrow(d, 0, 1)) / (
                h if not isinstance(h, Tensor) else (h[1] - h[0]).to(f.dtype))
            out.append(cat([g, g], d))
            continue
        parts = _coords(f, d, h, edge_order) if isinstance(h, Tensor) else \
            _uniform(f, d, h, edge_order)
        out.append(cat(list(parts), d))
    return tuple(out)
