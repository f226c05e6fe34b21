"""softmax and log_softmax (primitives) and logsumexp (composite).

NOTE: softmax and log_softmax are primitives, not composites of amax/sub/exp/sum/div: the
kernel makes one stable (max-shifted) pass with in-place temporaries instead of five ops and
five full-size intermediates, and the VJP is one fused formula over the saved output instead of
a chain of five backward nodes. Classifier training steps spend much of their time here.
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..errors import DTypeError
from ..tensor import Tensor
from . import dispatch
from ._util import wrap_dim
from .reduce import _dims, amax, sum
from . import batching_rules as _vb
from .registry import defop
from .select import where
from .unary import exp, log
from .dispatch import autocast_entry

__all__ = ['softmax', 'log_softmax', 'logsumexp']

_apply = dispatch.apply


def _shifted(xp, x, dim):
    """``x - max(x, dim)`` as a new array (0-d inputs are treated as shape (1,))."""
    if x.size == 0:
        return x.astype(x.dtype, copy=True)
    return x - xp.max(x, axis=dim, keepdims=True)


#: narrow floats compute in float32 and round once, like PyTorch (acc type float):
#: float16 softmax([1, 2]) rounded per step is 1 ulp off the correctly rounded result.
_NARROW = ("float16", "bfloat16")


def _widened(kernel):
    def run(xp, x, dim):
        if x.dtype.name in _NARROW:
            return kernel(xp, x.astype(xp.float32), dim).astype(x.dtype)
        return kernel(xp, x, dim)
    return run


@_widened
def _softmax_kernel(xp, x, dim):
    if x.ndim == 0:
        return _softmax_kernel(xp, x.reshape(1), 0).reshape(())
    e = _shifted(xp, x, dim)
    xp.exp(e, out=e)
    e /= e.sum(axis=dim, keepdims=True)
    return e


@_widened
def _log_softmax_kernel(xp, x, dim):
    if x.ndim == 0:
        return _log_softmax_kernel(xp, x.reshape(1), 0).reshape(())
    s = _shifted(xp, x, dim)
    s -= xp.log(xp.exp(s).sum(axis=dim, keepdims=True))
    return s


def _ksum(t, dim):
    return sum(t, dim if t.ndim else None, keepdim=True)


softmax_p = defop(
    "softmax", nin=1, params={"dim": -1}, dtype="float", kernel=_softmax_kernel,
    batch=_vb.one_dim,
    shape=lambda s, dim: tuple(s), save="output",
    vjp=lambda g, out, x, dim: (out * (g - _ksum(g * out, dim)),),
    jvp=lambda t, out, x, dim: out * (t[0] - _ksum(t[0] * out, dim)))

log_softmax_p = defop(
    "log_softmax", nin=1, params={"dim": -1}, dtype="float", kernel=_log_softmax_kernel,
    batch=_vb.one_dim,
    shape=lambda s, dim: tuple(s), save="output",
    vjp=lambda g, out, x, dim: (g - exp(out) * _ksum(g, dim),),
    jvp=lambda t, out, x, dim: t[0] - _ksum(exp(out) * t[0], dim))


def _prep(input, dim, dtype, op):
    if dtype is not None:
        input = input.to(dtype)
    elif input._dtype.category != _dt.FLOAT:
        raise DTypeError(f"{op}: expected a floating point input, got {input._dtype.name} "
                         f"(pass dtype= or convert with .float())")
    if dim is None:
        raise TypeError(f"{op}: missing required argument 'dim'")
    return input, wrap_dim(dim, input.ndim, op)


def softmax(input, dim, dtype=None):
    """``exp(x) / exp(x).sum(dim)``, computed stably (``torch.softmax``).

    Example:
        >>> ember.tensor([1000., 1000.]).softmax(0)
        tensor([0.5000, 0.5000])
    """
    x, d = _prep(input, dim, dtype, "softmax")
    return _apply(softmax_p, (x,), {"dim": d})


def log_softmax(input, dim, dtype=None):
    """``x - logsumexp(x, dim)``, computed stably (``torch.log_softmax``)."""
    x, d = _prep(input, dim, dtype, "log_softmax")
    return _apply(log_softmax_p, (x,), {"dim": d})


@autocast_entry("logsumexp")
def logsumexp(input, dim=None, keepdim=False):
    """``log(exp(x).sum(dim))`` without overflow: shifted by the max (``torch.logsumexp``).

    Example:
        >>> ember.tensor([1000., 1000.]).logsumexp(0)
        tensor(1000.6931)
    """
    if input._dtype.is_complex:
        raise DTypeError(f"logsumexp: expected a floating point input, got "
                         f"{input._dtype.name}; complex inputs are not supported")
    x = input if input._dtype.category == _dt.FLOAT else input.to(_dt.get_default_dtype())
    dims = _dims(dim, x.ndim, "logsumexp")
    if x._data.size == 0:
        return log(sum(exp(x), dims, keepdim))
    # NOTE: the shift is a constant (its gradient cancels exactly), hence detach(); an
    # infinite max (all -inf, or +inf present) is replaced by 0 so that x - m stays valid.
    m = amax(x, dims, keepdim=True).detach()
    m = where((m - m) == 0, m, 0)
    s = log(sum(exp(x - m), dims, keepdim))
    return s + (m if keepdim else m.reshape(s.shape))


Tensor.softmax = softmax
Tensor.log_softmax = log_softmax
Tensor.logsumexp = logsumexp
