"""Reductions: sum, prod, amax/amin, argmax/argmin, all/any, cumsum/cumprod (primitives), and
the composites built on them: mean, max/min (with indices), var/std, norm, count_nonzero.

Reduction primitives keep their params normalised: ``dim`` is a sorted tuple of non-negative
dims (``()`` for a 0-d input), ``keepdim`` a bool. Single-dim ops (argmax, cumsum) take an int.
"""
from __future__ import annotations

import math
from collections import namedtuple

from .. import dtypes as _dt
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from . import dispatch
from ._util import f32_to_lowp, is_lowp, lowp_to_f32, wrap_dim, wrap_dims
from .complex import cj, real_only
from . import batching_rules as _vb
from .registry import defop
from .select import where
from .sort import take_along_dim_p
from .dispatch import autocast_entry

__all__ = ['sum', 'mean', 'prod', 'amax', 'amin', 'max', 'min', 'aminmax', 'argmax', 'argmin',
           'all', 'any', 'var', 'std', 'var_mean', 'std_mean', 'norm', 'count_nonzero',
           'cumsum', 'cumprod']

_apply = dispatch.apply

#: ``torch.return_types`` equivalents.
max_result = namedtuple("max", ["values", "indices"])
min_result = namedtuple("min", ["values", "indices"])
aminmax_result = namedtuple("aminmax", ["min", "max"])


# ------------------------------------------------------------------ shared rules
def _sum_dtype(x, dim=None, keepdim=False, dtype=None, **_):
    if dtype is not None:
        return dtype, dtype
    d = x._dtype
    return None, (_dt.int64 if d.category < _dt.FLOAT else d)


def _sum_kernel(xp, x, dim=None, keepdim=False, dtype=None):
    if dtype is None and is_lowp(x):
        # NOTE: float32 sums rounded once; NumPy's float16/bfloat16 loops round after every
        # add when the summed dim is not the innermost (a conv's batch-summed weight grad).
        if dim == (0,) and not keepdim:
            from ..codegen.lowp_reduce import sum_rows0     # NOTE: codegen sits above ops
            r = sum_rows0(x)        # a bias gradient: one pass, bit-identical to below
            if r is not None:
                return r
        r = xp.sum(lowp_to_f32(x), axis=dim, keepdims=keepdim)
        return f32_to_lowp(xp.asarray(r), x.dtype)
    return xp.sum(x, axis=dim, keepdims=keepdim, dtype=dtype.np if dtype is not None else None)


def _sum_cuda(xp, x, dim=None, keepdim=False, dtype=None):
    """A GPU's sum: a large one over leading or trailing dims runs a generated kernel
    (``codegen/cuda_reduce.py``: CuPy's axis sums are slow); else :func:`_sum_kernel`."""
    if dtype is None and x.size >= _CUDA_SUM_MIN:
        backends, cuda_reduce = _GPU_MODULES or _gpu_modules()
        if backends["cuda"].has("cuda_kernels"):
            r = cuda_reduce.sum(xp, x, dim, keepdim)
            if r is not None:
                return r
    return _sum_kernel(xp, x, dim, keepdim, dtype)


#: what ``_sum_cuda`` reads, imported on its first call (NOTE: function-level imports
#: were ~2 us of each of a compiled GPT step's ~100 gradient sums: host-bound).
_GPU_MODULES: tuple = ()


def _gpu_modules() -> tuple:
    global _GPU_MODULES
    from ..device.base import _backends
    from ..codegen import cuda_reduce          # NOTE: codegen sits above ops
    _GPU_MODULES = (_backends, cuda_reduce)
    return _GPU_MODULES


#: smallest input ``_sum_cuda`` asks the generated kernels about (cuda_reduce.THRESHOLD
#: decides; this only keeps small sums from importing it).
_CUDA_SUM_MIN = 1 << 12


def _sum_shape(s, dim=None, keepdim=False, **_):
    dims = range(len(s)) if dim is None else dim
    if keepdim:
        return tuple(1 if i in dims else n for i, n in enumerate(s))
    return tuple(n for i, n in enumerate(s) if i not in dims)


def _sum_vjp(g, out, x, dim=None, keepdim=False, dtype=None):
    if not keepdim and dim != ():
        dims = range(x.ndim) if dim is None else dim
        shape = tuple(1 if i in dims else n for i, n in enumerate(x.shape))
        g = g.reshape(shape)
    return (g.expand(x.shape),)


def _dims(dim, ndim: int, op: str) -> tuple:
    """Normalised reduction dims; None or ``()`` means all (like PyTorch)."""
    if ndim == 0:
        if dim is not None and not (isinstance(dim, (tuple, list)) and not dim):
            wrap_dims(dim, 0, op)     # validates: only 0 / -1 are valid for a 0-d tensor
        return ()
    if dim is None or isinstance(dim, (tuple, list)) and len(dim) == 0:
        return tuple(range(ndim))
    return wrap_dims(dim, ndim, op)


def _keep(t, shape, dims, keepdim):
    """``t`` (a reduction over ``dims`` of a ``shape`` tensor) with the reduced dims kept."""
    if keepdim:
        return t
    return t.reshape(tuple(1 if i in dims else n for i, n in enumerate(shape)))


def _out(r, out):
    if out is None:
        return r
    from .inplace import copy_into_out
    return copy_into_out(out, r)


def _need_float(x, op):
    if x._dtype.category < _dt.FLOAT:
        raise DTypeError(f"{op}(): could not infer output dtype. Input dtype must be either a "
                         f"floating point or complex dtype. Got: {x._dtype.name} (pass dtype= "
                         f"or convert with .float())")


# ------------------------------------------------------------------ sum
sum_p = defop(
    "sum", nin=1, params={"dim": None, "keepdim": False, "dtype": None}, dtype=_sum_dtype,
    batch=_vb.reduce_dims, kernels={"xp": _sum_kernel, "cuda": _sum_cuda},
    shape=_sum_shape, save=None, vjp=_sum_vjp, jvp="linear")


def sum(input, dim=None, keepdim=False, *, dtype=None, out=None):  # noqa: A001 - PyTorch name
    """Sum over ``dim`` (all dims if None) (``torch.sum``).

    Example:
        >>> ember.ones(2, 3).sum(1)
        tensor([3., 3.])
    """
    dims = _dims(dim, input.ndim, "sum")
    if len(dims) == input.ndim and not keepdim:
        dims = None
    if dtype is not None:
        dtype = _dt.as_dtype(dtype)
    return _out(_apply(sum_p, (input,), {"dim": dims, "keepdim": bool(keepdim), "dtype": dtype}),
                out)


def sum_to(x: Tensor, shape: tuple) -> Tensor:
    """Sum ``x`` down to ``shape`` (the inverse of broadcasting ``shape`` to ``x.shape``)."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    lead = x.ndim - len(shape)
    if lead < 0:
        raise ValueError(f"sum_to: cannot reduce shape {tuple(x.shape)} to {shape}")
    inner = tuple(lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
    if not inner:   # only leading dims: one reduction, no reshape (the common bias-grad case)
        return _apply(sum_p, (x,), {"dim": tuple(range(lead)), "keepdim": False, "dtype": None})
    dims = tuple(range(lead)) + inner
    r = _apply(sum_p, (x,), {"dim": dims, "keepdim": True, "dtype": None})
    return r.reshape(shape) if tuple(r.shape) != shape else r


def mean(input, dim=None, keepdim=False, *, dtype=None, out=None):
    """Arithmetic mean over ``dim`` (``torch.mean``); the mean of nothing is nan.

    Example:
        >>> ember.tensor([[1., 2.], [3., 5.]]).mean(0)
        tensor([2., 3.5])
    """
    x = input.to(dtype) if dtype is not None else input
    _need_float(x, "mean")
    dims = _dims(dim, x.ndim, "mean")
    n = math.prod(x.shape[d] for d in dims)
    return _out(sum(x, dims, keepdim) / n, out)


# ------------------------------------------------------------------ prod
def _prod_partials(x, out, dims):
    """d prod / d x, exact when ``x`` has zeros: the product of the *other* elements.

    NOTE: no zero in the slice: out / x; exactly one zero: the product of the non-zeros at the
    zero, 0 elsewhere; two or more: 0. (Second derivatives are exact only away from zeros.)
    """
    nonzero = x.to(_dt.bool_)
    x1 = where(nonzero, x, 1)
    p1 = _apply(prod_p, (x1,), {"dim": dims, "keepdim": True, "dtype": None})
    n = math.prod(x.shape[d] for d in dims)
    zeros = n - nonzero.sum(dims, keepdim=True)
    return where(nonzero, where(zeros == 0, p1 / x1, 0), where(zeros == 1, p1, 0))


prod_p = defop(
    "prod", nin=1, params={"dim": (), "keepdim": False, "dtype": None}, dtype=_sum_dtype,
    batch=_vb.reduce_dims,
    kernel=lambda xp, x, dim, keepdim, dtype: xp.prod(
        x, axis=dim, keepdims=keepdim, dtype=dtype.np if dtype is not None else None),
    shape=_sum_shape, save="inputs",
    vjp=lambda g, out, x, dim, keepdim, dtype: (
        _keep(g, x.shape, dim, keepdim) * cj(_prod_partials(x, None, dim)),),
    jvp=lambda t, out, x, dim, keepdim, dtype: sum(
        t[0] * _prod_partials(x, None, dim), dim, keepdim))


@autocast_entry("prod")
def prod(input, dim=None, keepdim=False, *, dtype=None, out=None):
    """Product over ``dim`` (all if None) (``torch.prod``); ints and bools give int64.

    Example:
        >>> ember.tensor([[1., 2.], [3., 4.]]).prod(1)
        tensor([ 2., 12.])
    """
    dims = _dims(dim, input.ndim, "prod")
    dtype = _dt.as_dtype(dtype) if dtype is not None else None
    return _out(_apply(prod_p, (input,), {"dim": dims, "keepdim": bool(keepdim),
                                          "dtype": dtype}), out)


# ------------------------------------------------------------------ amax / amin
def _tie_mask(x, out, dims, keepdim):
    mask = x == _keep(out, x.shape, dims, keepdim)
    return mask, mask.sum(dims, keepdim=True)


def _amax_vjp(g, out, x, dim, keepdim):
    # NOTE: like PyTorch, the gradient is split equally among tied extrema.
    mask, count = _tie_mask(x, out, dim, keepdim)
    return (where(mask, _keep(g, x.shape, dim, keepdim) / count, 0),)


def _amax_jvp(t, out, x, dim, keepdim):
    mask, count = _tie_mask(x, out, dim, keepdim)
    return sum(where(mask, t[0], 0), dim, keepdim) / (count if keepdim else
                                                      count.reshape(out.shape))


def _nonempty(name):
    def check(x, dim=(), keepdim=False):
        for d in dim:
            if x._data.shape[d] == 0:
                raise ShapeError(f"{name}(): Expected reduction dim {d} to have non-zero size "
                                 f"(input shape {tuple(x.shape)}); it has no identity value")
    return check


def _extremum_kernel(fn):
    def kernel(xp, x, dim, keepdim):
        if is_lowp(x):
            # NOTE: exact in float32 (every value converts exactly), where NumPy's float16
            # and ml_dtypes' bfloat16 reductions are scalar loops: 10-30x slower
            r = getattr(xp, fn)(lowp_to_f32(x), axis=dim, keepdims=keepdim)
            return f32_to_lowp(xp.asarray(r), x.dtype)
        return getattr(xp, fn)(x, axis=dim, keepdims=keepdim)
    return kernel


def _extremum(name, fn):
    return defop(
        name, nin=1, params={"dim": (), "keepdim": False}, dtype="same", save="both",
        batch=_vb.reduce_dims,
        kernel=real_only(name, _extremum_kernel(fn)),
        shape=_sum_shape, check=_nonempty(name), vjp=_amax_vjp, jvp=_amax_jvp)


amax_p = _extremum("amax", "amax")
amin_p = _extremum("amin", "amin")


def amax(input, dim=(), keepdim=False, *, out=None):
    """Maximum over ``dim`` (all if ``()``/None); ties share the gradient (``torch.amax``).

    Example:
        >>> ember.tensor([[1., 5.], [3., 2.]]).amax(1)
        tensor([5., 3.])
    """
    return _out(_apply(amax_p, (input,), {"dim": _dims(dim, input.ndim, "amax"),
                                          "keepdim": bool(keepdim)}), out)


def amin(input, dim=(), keepdim=False, *, out=None):
    """Minimum over ``dim`` (all if ``()``/None) (``torch.amin``)."""
    return _out(_apply(amin_p, (input,), {"dim": _dims(dim, input.ndim, "amin"),
                                          "keepdim": bool(keepdim)}), out)


# ------------------------------------------------------------------ argmax / argmin
_SHORT_AXIS = 16          # reduction lengths the slice-by-slice argmax kernel handles
_SHORT_MIN_SIZE = 16384   # below this many elements NumPy's own argmax is faster


def _short_arg(xp, x, dim, ext):
    """argmax/argmin along a short ``dim`` (2..16), or None when ``x`` holds a NaN.

    NOTE: NumPy's argmax runs one tiny inner loop per output element (and transposes first
    when ``dim`` is not last): 12 ms for the (2048, 4, 256) windows of a 2x2 max-pool. Here
    the extremum is built with ``n - 1`` elementwise passes over the ``n`` slices, and the
    first index holding it is the number of leading slices that differ from it. A NaN is
    the extremum in PyTorch (and NumPy): such inputs go back to ``xp.argmax``.
    """
    n = x.shape[dim]
    lead = (slice(None),) * dim
    sl = [x[lead + (i,)] for i in range(n)]
    m = ext(sl[0], sl[1])
    for s in sl[2:]:
        ext(m, s, out=m)
    if x.dtype.kind == "f" and xp.isnan(m).any():
        return None
    miss = sl[0] != m
    idx = miss.astype(xp.int8)
    for s in sl[1:-1]:
        miss &= s != m
        idx += miss
    return idx.astype(xp.int64)


def _arg_kernel(fn):
    ext = "maximum" if fn == "argmax" else "minimum"

    def kernel(xp, x, dim=None, keepdim=False):
        if is_lowp(x):
            x = lowp_to_f32(x)         # NOTE: exact; float32 compares in SIMD (see amax)
        if dim is None or x.ndim == 0:
            r = xp.asarray(getattr(xp, fn)(x))
            return r.reshape((1,) * x.ndim) if keepdim else r
        if 2 <= x.shape[dim] <= _SHORT_AXIS and x.size >= _SHORT_MIN_SIZE:
            r = _short_arg(xp, x, dim, getattr(xp, ext))
            if r is not None:
                return xp.expand_dims(r, dim) if keepdim else r
        return getattr(xp, fn)(x, axis=dim, keepdims=keepdim)
    return kernel


def _arg_shape(s, dim=None, keepdim=False):
    if dim is None:
        return (1,) * len(s) if keepdim else ()
    return _sum_shape(s, (dim,), keepdim)


def _arg_check(name):
    def check(x, dim=None, keepdim=False):
        if dim is None and x._data.size == 0:
            raise ShapeError(f"{name}(): Expected reduction dim to be specified for "
                             f"input.numel() == 0 (input shape {tuple(x.shape)})")
        if dim is not None and x.ndim and x._data.shape[dim] == 0:
            raise ShapeError(f"{name}(): Expected reduction dim {dim} to have non-zero size "
                             f"(input shape {tuple(x.shape)})")
    return check


argmax_p = defop("argmax", nin=1, params={"dim": None, "keepdim": False}, dtype="int64",
                 batch=_vb.argmax,
                 kernel=real_only("argmax", _arg_kernel("argmax")), shape=_arg_shape,
                 check=_arg_check("argmax"))
argmin_p = defop("argmin", nin=1, params={"dim": None, "keepdim": False}, dtype="int64",
                 batch=_vb.argmin,
                 kernel=real_only("argmin", _arg_kernel("argmin")), shape=_arg_shape,
                 check=_arg_check("argmin"))


def argmax(input, dim=None, keepdim=False):
    """Index of the (first) maximum; ``dim=None`` indexes the flattened input (``torch.argmax``).

    Example:
        >>> ember.tensor([[1., 5.], [3., 2.]]).argmax(1)
        tensor([1, 0])
    """
    d = None if dim is None else wrap_dim(dim, input.ndim, "argmax")
    return _apply(argmax_p, (input,), {"dim": d, "keepdim": bool(keepdim)})


def argmin(input, dim=None, keepdim=False):
    """Index of the (first) minimum (``torch.argmin``)."""
    d = None if dim is None else wrap_dim(dim, input.ndim, "argmin")
    return _apply(argmin_p, (input,), {"dim": d, "keepdim": bool(keepdim)})


# ------------------------------------------------------------------ max / min (all call forms)
def _select(input, dim, keepdim, arg_p, result, name):
    """``(values, indices)`` of max/min along ``dim``: values gather at the argmax index, so
    (like PyTorch) the gradient goes to that one index."""
    d = wrap_dim(dim, input.ndim, name)
    x = input.reshape(1) if input.ndim == 0 else input
    idx = _apply(arg_p, (x,), {"dim": d, "keepdim": True})
    vals = _apply(take_along_dim_p, (x, idx), {"dim": d})
    if not keepdim or input.ndim == 0:
        shape = _sum_shape(input.shape, (d,) if input.ndim else (), keepdim)
        vals, idx = vals.reshape(shape), idx.reshape(shape)
    return result(vals, idx)


def _extreme_call(name, red_p, arg_p, result, binary):
    def fn(input, dim=None, keepdim=False, *, out=None):
        if isinstance(dim, Tensor):
            from . import binary as _binary
            return _out(getattr(_binary, binary)(input, dim), out)
        if dim is None:
            if input._data.size == 0:
                raise ShapeError(f"{name}(): Expected reduction dim to be specified for "
                                 f"input.numel() == 0. Specify the reduction dim with the 'dim' "
                                 f"argument.")
            return _out(_apply(red_p, (input,), {"dim": _dims(None, input.ndim, name),
                                                 "keepdim": False}), out)
        return _select(input, dim, keepdim, arg_p, result, name)
    fn.__name__ = name
    fn.__doc__ = (f"``{name}(x)``: the {name}imum over all elements (ties share the gradient); "
                  f"``{name}(x, dim, keepdim=False)``: namedtuple ``(values, indices)``; "
                  f"``{name}(x, other)``: elementwise ``{binary}`` (``torch.{name}``).\n\n"
                  f"Example:\n    >>> ember.tensor([[1., 5.], [3., 2.]]).{name}(dim=1).values\n")
    return fn


max = _extreme_call("max", amax_p, argmax_p, max_result, "maximum")  # noqa: A001
min = _extreme_call("min", amin_p, argmin_p, min_result, "minimum")  # noqa: A001


def aminmax(input, *, dim=None, keepdim=False):
    """``(min, max)`` over ``dim`` (all if None) (``torch.aminmax``)."""
    return aminmax_result(amin(input, dim, keepdim), amax(input, dim, keepdim))


# ------------------------------------------------------------------ all / any
def _logical_dtype(x, dim=(), keepdim=False):
    return None, (_dt.uint8 if x._dtype is _dt.uint8 else _dt.bool_)   # PyTorch keeps uint8


all_p = defop("all", nin=1, params={"dim": (), "keepdim": False}, dtype=_logical_dtype,
              batch=_vb.reduce_dims,
              kernel=lambda xp, x, dim, keepdim: xp.all(x, axis=dim, keepdims=keepdim),
              shape=_sum_shape)
any_p = defop("any", nin=1, params={"dim": (), "keepdim": False}, dtype=_logical_dtype,
              batch=_vb.reduce_dims,
              kernel=lambda xp, x, dim, keepdim: xp.any(x, axis=dim, keepdims=keepdim),
              shape=_sum_shape)


def all(input, dim=None, keepdim=False):  # noqa: A001 - PyTorch name
    """True where every element over ``dim`` is non-zero (``torch.all``)."""
    return _apply(all_p, (input,), {"dim": _dims(dim, input.ndim, "all"),
                                    "keepdim": bool(keepdim)})


def any(input, dim=None, keepdim=False):  # noqa: A001 - PyTorch name
    """True where some element over ``dim`` is non-zero (``torch.any``)."""
    return _apply(any_p, (input,), {"dim": _dims(dim, input.ndim, "any"),
                                    "keepdim": bool(keepdim)})


def count_nonzero(input, dim=None):
    """Number of non-zero elements over ``dim`` (int64) (``torch.count_nonzero``)."""
    return sum(input.to(_dt.bool_), _dims(dim, input.ndim, "count_nonzero"))


# NOTE: statistics and scans live in reduce_stats (split by concept); re-exported from here.
from .reduce_stats import (cumprod, cumsum, norm, std, std_mean, var,  # noqa: E402,F401
                           var_mean)

Tensor.sum = sum
Tensor.sum_to_size = lambda self, *size: sum_to(self, size[0] if len(size) == 1 and
                                                 isinstance(size[0], (tuple, list)) else size)
for _n in ("mean", "prod", "amax", "amin", "max", "min", "aminmax", "argmax", "argmin", "all",
           "any", "count_nonzero"):
    setattr(Tensor, _n, globals()[_n])
