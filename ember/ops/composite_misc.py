"""More of ``torch.Tensor``'s surface: ``unfold`` (sliding windows as a view), ``nanmedian``,
``index_reduce``, ``xlogy``, ``logit``, ``sinc``, ``diff``, ``kron``, ``cross``, ``dist``,
the conjugate transposes (``adjoint``/``mH``/``H``; ``conj``, ``real``, ``sgn`` come from
``complex.py``) and the device
predicates a CPU build answers False (``is_sparse``, ``is_quantized``...).

All differentiable results are Ember ops (views through ``as_strided``, gathers from
``sort``), so autograd and forward mode need no rules of their own.

Example:
    >>> ember.arange(5.).unfold(0, 2, 2)
    tensor([[0., 1.],
            [2., 3.]])
"""
from __future__ import annotations

import math
from collections import namedtuple

from .. import dtypes as _dt
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .batching import per_example
from ._util import wrap_dim
from .complex import (IMAG_PROPERTY, REAL_PROPERTY, conj, conj_physical,  # noqa: F401
                      is_conj, real, resolve_conj, sgn)
from .composite_data import scatter_reduce
from .inplace import copy_into_out, inplace_from
from .join import cat
from .reduce_stats import norm
from .scatter import gather
from .select import where
from .sort import sort
from .unary import log, sin
from .special_fns import xlogy  # noqa: F401 - a primitive (PyTorch's gradients at 0)

__all__ = ["nanmedian", "index_reduce", "xlogy", "logit", "sinc", "diff", "kron", "cross",
           "dist", "sgn", "positive", "conj", "conj_physical", "resolve_conj", "resolve_neg",
           "is_conj", "is_neg", "real", "adjoint"]

nanmedian_result = namedtuple("nanmedian", ["values", "indices"])


def _out(r, out):
    return r if out is None else copy_into_out(out, r)


def unfold(self, dimension: int, size: int, step: int) -> Tensor:
    """A view of every ``size``-long window along ``dimension``, ``step`` apart, as a new last
    dimension (``Tensor.unfold``)."""
    d = wrap_dim(dimension, max(self.ndim, 1), "unfold")
    shape, strides = list(self.shape) or [1], list(self.stride()) or [1]
    n = shape[d]
    if size < 0 or size > n:
        raise ShapeError(f"unfold: maximum size for tensor at dimension {d} is {n} but size "
                         f"is {size}")
    if step <= 0:
        raise ShapeError(f"unfold: step is {step} but must be > 0")
    shape[d] = (n - size) // step + 1
    new_strides = strides[:d] + [strides[d] * step] + strides[d + 1:] + [strides[d]]
    try:
        return self.as_strided(tuple(shape) + (size,), tuple(new_strides),
                               self.storage_offset())
    except ShapeError:
        # NOTE: as_strided only re-strides within a contiguous span; a strided tensor with
        # no Ember base (a non-contiguous NumPy view) gets the windows of a copy instead.
        return unfold(self.contiguous(), dimension, size, step)


def nanmedian(input, dim=None, keepdim=False):
    """Lower median of the non-NaN values (``torch.nanmedian``); NaN where all are NaN.

    With ``dim``, a ``(values, indices)`` namedtuple like :func:`ember.median`.
    """
    if dim is None:
        return nanmedian(input.reshape(-1), 0).values
    d = wrap_dim(dim, max(input.ndim, 1), "nanmedian")
    x = input.reshape(1) if input.ndim == 0 else input
    if x.shape[d] == 0:
        raise ShapeError(f"nanmedian(): expected a non-empty dimension {d}, got shape "
                         f"{tuple(x.shape)}")
    vals, idx = sort(x, d)                      # NOTE: NaN sorts last
    k = (~x.isnan()).sum(d, keepdim=True)
    pos = ((k - 1) // 2).clamp_min(0)
    values, indices = gather(vals, d, pos), gather(idx, d, pos)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    if input.ndim == 0:
        values, indices = values.reshape(()), indices.reshape(())
    return nanmedian_result(values, indices)


@per_example
def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """Reduce ``source``'s slices into ``input`` at the positions ``index`` names along
    ``dim`` (``torch.index_reduce``); ``reduce`` is "prod", "mean", "amax" or "amin"."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise ValueError(f"index_reduce(): reduce argument must be one of prod, mean, amax, "
                         f"amin, got {reduce!r}")
    d = wrap_dim(dim, max(input.ndim, 1), "index_reduce")
    if index.ndim != 1 or index.shape[0] != source.shape[d]:
        raise ShapeError(f"index_reduce(): index must be 1-D with source.shape[{d}] = "
                         f"{source.shape[d]} entries, got shape {tuple(index.shape)}")
    view = [1] * source.ndim
    view[d] = -1
    full = index.reshape(view).expand(source.shape)
    return scatter_reduce(input, d, full, source, reduce, include_self=include_self)


def logit(input, eps=None, *, out=None):
    """``log(p / (1 - p))``, with ``p`` clamped to ``[eps, 1 - eps]`` if ``eps`` is given."""
    if input.dtype.is_complex:
        raise DTypeError(f"logit: not implemented for complex dtype {input.dtype.name} (as in "
                         f"PyTorch); valid dtypes: bool, integer and floating")
    p = input if input.dtype.is_floating_point else input.to(_dt.get_default_dtype())
    if eps is not None:
        p = p.clamp(eps, 1 - eps)
    return _out(log(p / (1 - p)), out)


def sinc(input, *, out=None):
    """Normalised sinc ``sin(pi x) / (pi x)``, 1 at 0 (``torch.sinc``); complex too."""
    x = input if input.dtype.is_floating_point or input.dtype.is_complex else \
        input.to(_dt.get_default_dtype())
    px = x * math.pi
    safe = where(x == 0, 1.0, px)
    return _out(where(x == 0, 1.0, sin(safe) / safe), out)


def diff(input, n=1, dim=-1, prepend=None, append=None):
    """``n``-th forward difference along ``dim`` (``torch.diff``)."""
    d = wrap_dim(dim, max(input.ndim, 1), "diff")
    x = cat([t for t in (prepend, input, append) if t is not None], d) \
        if prepend is not None or append is not None else input
    for _ in range(n):
        m = x.shape[d]
        a, b = x.narrow(d, 1, max(m - 1, 0)), x.narrow(d, 0, max(m - 1, 0))
        x = (a != b) if x.dtype is _dt.bool_ else a - b
    return x


def kron(input, other):
    """Kronecker product (``torch.kron``)."""
    nd = max(input.ndim, other.ndim)
    a = input.reshape((1,) * (nd - input.ndim) + tuple(input.shape))
    b = other.reshape((1,) * (nd - other.ndim) + tuple(other.shape))
    a_sh = sum(((s, 1) for s in a.shape), ())
    b_sh = sum(((1, s) for s in b.shape), ())
    out = a.reshape(a_sh) * b.reshape(b_sh)
    return out.reshape(tuple(sa * sb for sa, sb in zip(a.shape, b.shape)))


def cross(input, other, dim=None):
    """Cross product of 3-vectors along ``dim`` (the first size-3 dim if None) (``torch.cross``)."""
    if dim is None:
        dims = [i for i, s in enumerate(input.shape) if s == 3]
        if not dims:
            raise ShapeError(f"cross(): no dimension of size 3 in input of shape "
                             f"{tuple(input.shape)}")
        dim = dims[0]
    d = wrap_dim(dim, input.ndim, "cross")
    if input.shape[d] != 3 or other.shape[d] != 3:
        raise ShapeError(f"cross(): dimension {d} must have size 3, got {tuple(input.shape)} "
                         f"and {tuple(other.shape)}")
    a = [input.select(d, i) for i in range(3)]
    b = [other.select(d, i) for i in range(3)]
    parts = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    from .join import stack
    return stack(parts, d)


def dist(input, other, p=2):
    """The ``p``-norm of ``input - other`` (``torch.dist``)."""
    return norm(input - other, p)


def positive(input):
    """``input`` itself (``torch.positive``); refused for bool like PyTorch."""
    if input.dtype is _dt.bool_:
        raise DTypeError("positive(): the + operator on a bool tensor is not supported")
    return input


def resolve_neg(input):
    """``input``: Ember tensors carry no lazy-negation bit."""
    return input


def is_neg(input) -> bool:
    """False: real tensors carry no lazy-negation bit."""
    return False


def adjoint(input):
    """The conjugate transpose of the last two dims (a view for real tensors; Ember has no
    lazy conjugation bit, so a complex result is a copy)."""
    if input.ndim < 2:
        raise ShapeError(f"adjoint(): expected a tensor with at least 2 dims, got shape "
                         f"{tuple(input.shape)}")
    return conj(input.transpose(-2, -1))


def get_device(self) -> int:
    """The CUDA device index, or -1 for a CPU tensor (``Tensor.get_device``)."""
    return -1 if self.device.type == "cpu" else (self.device.index or 0)


for _name in __all__:
    setattr(Tensor, _name, globals()[_name])
Tensor.unfold = unfold
Tensor.real = REAL_PROPERTY
Tensor.get_device = get_device
Tensor.mH = property(adjoint)
Tensor.H = property(lambda self: conj(self.t()) if self.ndim == 2 else _h_error(self))
Tensor.imag = IMAG_PROPERTY
for _flag in ("is_sparse", "is_sparse_csr", "is_quantized", "is_mkldnn",
              "is_nested", "is_xla", "is_mps", "is_vulkan", "is_ipu", "is_xpu", "is_mtia",
              "is_maia"):
    setattr(Tensor, _flag, property(lambda self: False))
for _name, _alias in (("multiply_", "mul_"), ("subtract_", "sub_"), ("divide_", "div_"),
                      ("true_divide_", "div_"), ("negative_", "neg_")):
    setattr(Tensor, _name, getattr(Tensor, _alias))
for _name in ("xlogy", "logit", "sinc", "sgn"):
    setattr(Tensor, _name + "_", inplace_from(globals()[_name], _name))
Tensor.tril_ = inplace_from(Tensor.tril, "tril")
Tensor.triu_ = inplace_from(Tensor.triu, "triu")
Tensor.index_reduce_ = inplace_from(index_reduce, "index_reduce")


def _h_error(self):
    raise ShapeError(f"tensor.H is only supported on matrices (2-D tensors), got shape "
                     f"{tuple(self.shape)}")
