"""The rest of the commonly used tensor surface: ``quantile``/``nanquantile``, ``isin``,
integer ``gcd``/``lcm``, ``ldexp``/``frexp``/``nextafter``, ``fill_diagonal_``, ``put``,
``angle``/``isreal``, ``unravel_index``, ``combinations``, ``chain_matmul``, window
functions, ``empty_strided``/``scalar_tensor``/``asarray``, the legacy ``Tensor.new`` and
the ``unsafe_*`` split aliases.

Example:
    >>> ember.quantile(ember.tensor([1., 2., 3., 4.]), 0.5)
    tensor(2.5000)
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .. import dtypes as _dt
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .batching import per_example
from ._util import wrap_dim
from .complex import angle, isreal  # noqa: F401 - in __all__ and bound below
from .composite_shape import split_with_sizes
from .dispatch import autocast_entry
from .factories import arange, as_tensor, empty, tensor as _tensor
from .inplace import check_inplace, commit, inplace_from
from .join import chunk, split
from .scatter import gather
from .select import where
from .sort import sort
from ..random import bernoulli, multinomial

__all__ = ["quantile", "nanquantile", "isin", "gcd", "lcm", "ldexp", "frexp", "nextafter",
           "angle", "isreal", "unravel_index", "combinations", "chain_matmul", "hann_window",
           "hamming_window", "blackman_window", "bartlett_window", "kaiser_window",
           "empty_strided", "scalar_tensor", "asarray", "narrow_copy", "unsafe_chunk",
           "unsafe_split", "unsafe_split_with_sizes", "is_signed", "put", "rsub",
           "logcumsumexp", "histogram"]

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


# ------------------------------------------------------------------ quantiles
def _quantile(input, q, dim, keepdim, interpolation, ignore_nan, op):
    if not input.dtype.is_floating_point:
        raise DTypeError(f"{op}(): input must be a floating point tensor, got {input.dtype.name}")
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"{op}(): interpolation must be one of {_INTERPOLATIONS}, got "
                         f"{interpolation!r}")
    scalar_q = not isinstance(q, Tensor) or q.ndim == 0
    qa = np.atleast_1d(np.asarray(q.detach().cpu().numpy() if isinstance(q, Tensor) else q,
                                  np.float64))
    if qa.ndim != 1 or ((qa < 0) | (qa > 1)).any():
        raise ValueError(f"{op}(): q must be a scalar or 1-D tensor with values in [0, 1], "
                         f"got {qa.tolist()}")
    x = input.reshape(-1) if dim is None else input
    d = -1 if dim is None else wrap_dim(dim, max(input.ndim, 1), op)
    xs = x.reshape(1) if x.ndim == 0 else x.movedim(d, -1)
    if xs.shape[-1] == 0:
        raise ShapeError(f"{op}(): input tensor must be non-empty along the reduced dim")
    vals = sort(xs, -1).values                 # NOTE: NaN sorts last
    nan = xs.isnan()
    k = (~nan).sum(-1, keepdim=True) if ignore_nan else xs.shape[-1] + 0 * nan.sum(
        -1, keepdim=True)
    # NOTE: a tensor q stays in the graph: the linear weight makes quantile differentiable in q
    qt = q.reshape(-1).to(input.dtype) if isinstance(q, Tensor) else \
        _tensor(qa, dtype=input.dtype, device=input.device)
    pos = qt * (k - 1).to(input.dtype)
    p = pos.detach()
    lo, hi = p.floor().clamp_min(0), p.ceil().clamp_min(0)
    if interpolation == "nearest":
        lo = hi = p.round().clamp_min(0)
    v_lo, v_hi = gather(vals, -1, lo.long()), gather(vals, -1, hi.long())
    w = {"linear": pos - lo, "lower": 0.0 * pos, "higher": 0.0 * pos + 1,
         "midpoint": 0.0 * pos + 0.5, "nearest": 0.0 * pos}[interpolation]
    r = v_lo + (v_hi - v_lo) * w
    if not ignore_nan:
        r = where(nan.any(-1, keepdim=True), math.nan, r)
    r = r.movedim(-1, 0)                       # (Q, ...)
    if keepdim:
        r = r.reshape((len(qa),) + ((1,) * input.ndim if dim is None else tuple(
            1 if i == d else s for i, s in enumerate(input.shape))))
    return r.squeeze(0) if scalar_q else r


@autocast_entry("quantile")
@per_example
def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The ``q``-th quantiles along ``dim`` (all elements if None); NaN if a slice has NaN
    (``torch.quantile``). A 1-D ``q`` adds a leading dim of its length."""
    return _quantile(input, q, dim, keepdim, interpolation, False, "quantile")


@autocast_entry("nanquantile")
@per_example
def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """:func:`quantile` ignoring NaNs (NaN only where a slice is all NaN)."""
    return _quantile(input, q, dim, keepdim, interpolation, True, "nanquantile")


def logcumsumexp(input, dim, *, out=None):
    """``log(cumsum(exp(input)))`` along ``dim`` without overflow or underflow
    (``torch.logcumsumexp``).

    A Hillis-Steele scan of ``logaddexp``: ``ceil(log2 n)`` shifted pairwise steps, each
    exact in log space, so an element far below the running maximum is not lost (as it
    would be by one global shift) and autograd follows ``logaddexp``.
    """
    from .composite_math import logaddexp
    from .factories import full
    x = input if input.dtype.is_floating_point else input.to(_dt.get_default_dtype())
    if x.ndim == 0:
        return x.clone()
    d = wrap_dim(dim, x.ndim, "logcumsumexp")
    n, k, y = x.shape[d], 1, x
    while k < n:
        pad_shape = tuple(k if i == d else s for i, s in enumerate(y.shape))
        pad = full(pad_shape, -math.inf, dtype=y.dtype, device=y.device)
        shifted = _cat_along([pad, y.narrow(d, 0, n - k)], d)
        y = logaddexp(y, shifted)
        k *= 2
    return y if out is None else out.copy_(y)


def _cat_along(ts, d):
    from .join import cat
    return cat(ts, d)


def histogram(input, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    """Histogram of a tensor's values: ``(hist, bin_edges)`` (``torch.histogram``).

    ``bins`` is a count of equal bins over ``range`` (the data's min and max by default)
    or a 1-D tensor of increasing edges.
    """
    if not input.dtype.is_floating_point:
        raise DTypeError(f"histogram(): expected a floating point input, got "
                         f"{input.dtype.name}")
    a = _host(input).reshape(-1)
    b = _host(bins) if isinstance(bins, Tensor) else int(bins)
    w = None if weight is None else _host(weight).reshape(-1)
    hist, edges = np.histogram(a, bins=b, range=range, weights=w, density=density)
    return (_tensor(hist, dtype=input.dtype, device=input.device),
            _tensor(edges, dtype=input.dtype, device=input.device))


# ------------------------------------------------------------------ integer / float bits
def _device_of(*xs):
    """The device of the first tensor among ``xs`` (None: the default)."""
    return next((x.device for x in xs if isinstance(x, Tensor)), None)


def _host(x):
    """``x``'s values in host memory (a copy of a device tensor's)."""
    return np.asarray(x.detach().cpu().numpy()) if isinstance(x, Tensor) else np.asarray(x)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element of ``elements`` is in ``test_elements`` (``torch.isin``)."""
    r = np.isin(_host(elements), _host(test_elements), invert=invert)
    return _tensor(r, dtype=_dt.bool_, device=_device_of(elements, test_elements))


def _int_binary(fn, name):
    def op(input, other):
        a, b = _host(input), _host(other)
        if a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
            raise DTypeError(f"{name}(): expected integer tensors, got {a.dtype} and {b.dtype}")
        dt = _dt.result_type(input, other)
        return _tensor(fn(a, b), dtype=dt, device=_device_of(input, other))
    op.__name__ = name
    op.__doc__ = f"Elementwise {name} of integer tensors (``torch.{name}``)."
    return op


gcd = _int_binary(np.gcd, "gcd")
lcm = _int_binary(np.lcm, "lcm")


def ldexp(input, other):
    """``input * 2**other`` (``torch.ldexp``); differentiable in ``input``."""
    x = input if input.dtype.is_floating_point else input.to(_dt.get_default_dtype())
    return x * (2.0 ** other.to(x.dtype) if isinstance(other, Tensor) else 2.0 ** other)


def frexp(input):
    """Mantissa in [0.5, 1) and integer exponent with ``input = mantissa * 2**exponent``."""
    if not input.dtype.is_floating_point:
        raise DTypeError(f"frexp(): expected a floating point tensor, got {input.dtype.name}")
    m, e = np.frexp(_host(input))
    return (_tensor(m, dtype=input.dtype, device=input.device),
            _tensor(e.astype(np.int32), dtype=_dt.int32, device=input.device))


def nextafter(input, other):
    """The next representable value after ``input`` toward ``other`` (``torch.nextafter``)."""
    a, b = _host(input), _host(other)
    dt = _dt.result_type(input, other)
    return _tensor(np.nextafter(a.astype(dt.np), b.astype(dt.np)), dtype=dt,
                   device=_device_of(input, other))


def is_signed(input) -> bool:
    """Whether the dtype is signed (``torch.is_signed``)."""
    return input.dtype.is_signed


# ------------------------------------------------------------------ index helpers
def unravel_index(indices, shape):
    """Coordinates of flat ``indices`` in ``shape``, one tensor per dim."""
    idx = _host(indices)
    if idx.dtype.kind not in "iu":
        raise DTypeError(f"unravel_index(): expected an integer tensor, got {idx.dtype}")
    n = int(np.prod(shape))
    if ((idx < -n) | (idx >= n)).any():
        raise ValueError(f"unravel_index(): index out of bounds for shape {tuple(shape)}")
    return tuple(_tensor(c.astype(np.int64), device=_device_of(indices))
                 for c in np.unravel_index(idx % max(n, 1), shape))


def combinations(input, r=2, with_replacement=False):
    """Length-``r`` combinations of a 1-D tensor's elements as rows (``torch.combinations``)."""
    if input.ndim != 1:
        raise ShapeError(f"combinations(): expected a 1-D tensor, got shape {tuple(input.shape)}")
    if r < 0:
        raise ValueError(f"combinations(): r must be non-negative, got {r}")
    if r == 0:
        return input.new_empty((0,))
    make = itertools.combinations_with_replacement if with_replacement else \
        itertools.combinations
    rows = np.array(list(make(range(input.shape[0]), r)), np.int64).reshape(-1, r)
    if rows.shape[0] == 0:
        return input.new_empty((0, r))
    idx = _tensor(rows.reshape(-1), device=input.device)
    return input[idx].reshape(-1, r)


def chain_matmul(*matrices):
    """Product of 2-D matrices left to right (``torch.chain_matmul``)."""
    if not matrices:
        raise ShapeError("chain_matmul(): expected one or more matrices")
    out = matrices[0]
    for m in matrices[1:]:
        out = out @ m
    return out


def put(input, index, source, accumulate=False):
    """A copy of ``input`` with ``source`` written at flat ``index`` (``torch.put``)."""
    from .index import index_put
    flat = index_put(input.reshape(-1), (index.reshape(-1) % max(input.numel(), 1),),
                     source.reshape(-1), accumulate)
    return flat.reshape(input.shape)


# ------------------------------------------------------------------ windows
def _window(name, fn, window_length, periodic, dtype, device, requires_grad):
    if window_length < 0:
        raise ValueError(f"{name}(): window_length must be non-negative, got {window_length}")
    n = window_length + 1 if periodic and window_length > 1 else window_length
    w = fn(n) if n > 1 else np.ones(n)
    w = w[:window_length]
    return _tensor(w, dtype=dtype or _dt.get_default_dtype(), device=device,
                   requires_grad=requires_grad)


def hann_window(window_length, periodic=True, *, dtype=None, device=None, requires_grad=False):
    """Hann window (``torch.hann_window``)."""
    return _window("hann_window", np.hanning, window_length, periodic, dtype, device,
                   requires_grad)


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None,
                   device=None, requires_grad=False):
    """Hamming window ``alpha - beta cos(2 pi n / (N - 1))`` (``torch.hamming_window``)."""
    fn = lambda n: alpha - beta * np.cos(2 * np.pi * np.arange(n) / (n - 1))  # noqa: E731
    return _window("hamming_window", fn, window_length, periodic, dtype, device, requires_grad)


def blackman_window(window_length, periodic=True, *, dtype=None, device=None,
                    requires_grad=False):
    """Blackman window (``torch.blackman_window``)."""
    return _window("blackman_window", np.blackman, window_length, periodic, dtype, device,
                   requires_grad)


def bartlett_window(window_length, periodic=True, *, dtype=None, device=None,
                    requires_grad=False):
    """Bartlett (triangular) window (``torch.bartlett_window``)."""
    return _window("bartlett_window", np.bartlett, window_length, periodic, dtype, device,
                   requires_grad)


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, device=None,
                  requires_grad=False):
    """Kaiser window (``torch.kaiser_window``)."""
    return _window("kaiser_window", lambda n: np.kaiser(n, beta), window_length, periodic,
                   dtype, device, requires_grad)


# ------------------------------------------------------------------ factories and aliases
def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False):
    """An uninitialised tensor with the given strides (``torch.empty_strided``)."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise ShapeError(f"empty_strided(): size {size} and stride {stride} differ in length")
    span = 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
    base = empty(span, dtype=dtype, device=device)
    t = base.as_strided(size, stride, 0).detach()
    return t.requires_grad_(requires_grad)


def scalar_tensor(s, *, dtype=None, device=None, requires_grad=False):
    """A 0-d tensor holding ``s`` in the default float dtype unless ``dtype`` is given."""
    return _tensor(s, dtype=dtype or _dt.get_default_dtype(), device=device,
                   requires_grad=requires_grad)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """Convert ``obj`` to a tensor, sharing memory when possible unless ``copy=True``."""
    t = _tensor(obj, dtype=dtype, device=device) if copy else as_tensor(obj, dtype, device)
    return t.requires_grad_(requires_grad) if requires_grad else t


def narrow_copy(input, dim, start, length):
    """A copy of ``input.narrow(dim, start, length)``."""
    return input.narrow(dim, start, length).clone()


def rsub(input, other, *, alpha=1):
    """``other - alpha * input`` (``torch.rsub``)."""
    return other - (input * alpha if alpha != 1 else input)


unsafe_chunk, unsafe_split, unsafe_split_with_sizes = chunk, split, split_with_sizes


def _new(self, *args, **kw):
    """Legacy ``t.new(...)``: the legacy constructor of ``self``'s dtype (``t.new(2, 3)``
    uninitialised, ``t.new([1, 2])`` a copy)."""
    from .tensor_api import _legacy_new
    return _legacy_new(self.dtype, args, kw.get("device", self.device), "new")


def _fill_diagonal_(self, fill_value, wrap=False):
    """Fill the main diagonal in place (``Tensor.fill_diagonal_``); all dims equal for n-D."""
    if self.ndim < 2 or (self.ndim > 2 and len(set(self.shape)) != 1):
        raise ShapeError(f"fill_diagonal_: dimensions must all be of equal length (or 2-D), "
                         f"got shape {tuple(self.shape)}")
    check_inplace(self, "fill_diagonal_")
    n = self.numel()
    if self.ndim == 2:
        rows, cols = self.shape
        step = cols + 1
        end = n if wrap and rows > cols else min(rows, cols) * cols
    else:
        step = sum(int(np.prod(self.shape[i + 1:])) for i in range(self.ndim))
        end = n
    pos = arange(0, end, step)
    mask = _tensor(np.isin(np.arange(n), _host(pos)).reshape(tuple(self.shape)),
                   device=self.device)
    return commit(self, where(mask, fill_value, self), "fill_diagonal_")


def _float_power_(self, exponent):
    if self.dtype is not _dt.float64:
        raise DTypeError(f"float_power_(): the base has dtype {self.dtype.name} but the "
                         f"operation's result requires dtype float64")
    from .composite_math import float_power
    check_inplace(self, "float_power_")
    return commit(self, float_power(self, exponent), "float_power_")


for _name in ("quantile", "nanquantile", "isin", "gcd", "lcm", "ldexp", "frexp",
              "nextafter", "angle", "isreal", "narrow_copy", "unsafe_chunk", "unsafe_split",
              "unsafe_split_with_sizes", "put", "logcumsumexp", "histogram"):
    setattr(Tensor, _name, globals()[_name])
for _name in ("gcd", "lcm", "ldexp", "nextafter", "put"):
    setattr(Tensor, _name + "_", inplace_from(globals()[_name], _name))
Tensor.new = _new
Tensor.to_dense = lambda self, dtype=None, *, masked_grad=None: \
    self if dtype is None else self.to(dtype)   # NOTE: a strided tensor is already dense
Tensor.bernoulli = bernoulli
Tensor.multinomial = multinomial
Tensor.fill_diagonal_ = _fill_diagonal_
Tensor.float_power_ = _float_power_
Tensor.addmm_ = inplace_from(Tensor.addmm, "addmm")
Tensor.baddbmm_ = inplace_from(Tensor.baddbmm, "baddbmm")
Tensor.output_nr = property(lambda self: self._out_nr)
Tensor.const_data_ptr = Tensor.data_ptr
Tensor.is_distributed = lambda self: False
Tensor.is_shared = lambda self: False   # NOTE: storages are private memory (no share_memory_)
Tensor.nonzero_static = lambda self, *, size, fill_value=-1: _nonzero_static(
    self, size, fill_value)
Tensor.new_empty_strided = lambda self, size, stride, *, dtype=None, device=None, \
    requires_grad=False: empty_strided(size, stride, dtype=dtype or self.dtype,
                                       device=device or self.device,
                                       requires_grad=requires_grad)
Tensor.is_set_to = lambda self, other: (
    self.untyped_storage() is other.untyped_storage() and self.shape == other.shape
    and self.stride() == other.stride() and self.storage_offset() == other.storage_offset())


def _nonzero_static(self, size: int, fill_value: int = -1):
    """``nonzero`` padded with ``fill_value`` (or truncated) to ``size`` rows."""
    nz = np.argwhere(_host(self))
    out = np.full((int(size), max(self.ndim, 0)), fill_value, np.int64)
    out[:min(len(nz), int(size))] = nz[:int(size)]
    return _tensor(out, device=self.device)
Tensor.dim_order = lambda self: tuple(sorted(range(self.ndim), key=lambda i: -self.stride(i)))
