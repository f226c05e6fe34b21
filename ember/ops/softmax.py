"""softmax and log_softmax (primitives) and logsumexp (composite).

NOTE: softmax and log_softmax are primitives, not composites of amax/sub/exp/sum/div: the
kernel makes one stable (max-shifted) pass with in-place temporaries instead of five ops and
five full-size intermediates, and the VJP is one fused formula over the saved output instead of
a chain of five backward nodes. Classifier training steps spend much of their time here.
"""
from __future__ import annotations

import numpy as _np

from .. import dtypes as _dt
from ..autograd.grad_mode import state as _state
from ..errors import DTypeError
from ..tensor import Tensor, _wrap
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
    return x - _rowmax(xp, x, dim)


#: short rows (a classifier's (batch, classes) logits) whose max is taken over a transposed
#: copy: NumPy reduces a short contiguous last axis one row at a time (an inner-loop call
#: per row: (128, 10) 7.7 us), but the columns of the copy in vector passes (2.0 us);
#: measured crossover near 64-128 columns, and no gain below ~16 rows.
_ROWMAX_COLS = (2, 64)
_ROWMAX_ROWS = 16


def _rowmax(xp, x, dim):
    """``max(x, dim, keepdims=True)``. A 2-D NumPy ``x`` of many short rows, reduced over
    its last dim, goes through a transposed copy: a max is exact and NaN-propagating in any
    order, so softmax/log_softmax keep their bits. (Only a row whose max is a zero of both
    signs can get the other zero; its ``exp`` sum is then >= 2, so ``exp(x - max)`` and
    ``x - max - lse`` do not see the sign. A row of several NaNs with different payloads
    may pass on another one of them.)"""
    if (x.ndim == 2 and (dim == 1 or dim == -1) and x.__class__ is _np.ndarray
            and _ROWMAX_COLS[0] <= x.shape[1] <= _ROWMAX_COLS[1]
            and x.shape[0] >= _ROWMAX_ROWS and x.dtype.kind == "f"):
        return _np.ascontiguousarray(x.T).max(axis=0).reshape(-1, 1)
    return xp.max(x, axis=dim, keepdims=True)


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

#: largest size the eager VJP runs as one ``log_softmax_backward``: below every eager C
#: kernel's threshold (``codegen.eager.THRESHOLDS``), so its NumPy ``exp`` is the composite's
_LSM_BW_MAX = 1 << 15
_LSM_BW_DTYPES = (_dt.float32, _dt.float64)


def _lsm_bw_kernel(xp, g, out, dim):
    """``g - exp(out) * g.sum(dim)``: the composite VJP's operations in its order (bitwise)."""
    e = xp.exp(out)
    e *= xp.sum(g, axis=(dim,), keepdims=True)
    return xp.subtract(g, e, out=e) if e.shape == g.shape and e.dtype == g.dtype else g - e


def _lsm_vjp(g, out, x, dim):
    """The composite ``g - exp(out) * sum(g)``, or, eagerly on a small float32/float64 CPU
    value (W1's logits), the same arithmetic as one ``log_softmax_backward`` dispatch (also
    under ``estimate_memory``'s mode, ``eager_vjps``, so its estimate follows eager)."""
    st = _state.__dict__
    modes = st["modes"]
    if ((modes and not all(getattr(m, "eager_vjps", False) for m in modes)) or st["fw_levels"]
            or g.__class__ is not Tensor or out.__class__ is not Tensor
            or g._dtype is not out._dtype or g._dtype not in _LSM_BW_DTYPES
            or g._data.size > _LSM_BW_MAX or not g._data.ndim or g.shape != out.shape
            or g._device.type != "cpu"):
        return (g - exp(out) * _ksum(g, dim),)
    return (_apply(log_softmax_backward_p, (g, out), {"dim": dim}),)


def _lsm_eager_vjp(nxt, g, out, x, dim):
    """:func:`_lsm_vjp`'s one-dispatch case in a plain eager backward (the engine's
    ``eager_vjp``): ``log_softmax_backward``'s kernel on the raw arrays, as that dispatch
    runs it (the same bits), without the dispatch. None where ``_lsm_vjp`` decides."""
    st = _state.__dict__
    if st["modes"] or st["fw_levels"] or nxt[0] is None or out is None:
        return None
    ga, oa = g._data, out._data
    if (ga.__class__ is not _np.ndarray or oa.__class__ is not _np.ndarray
            or g._dtype is not out._dtype or g._dtype not in _LSM_BW_DTYPES
            or ga.size > _LSM_BW_MAX or not ga.ndim or ga.shape != oa.shape
            or g._device.type != "cpu" or out._device.type != "cpu"):
        return None
    return (_wrap(_lsm_bw_kernel(_np, ga, oa, dim), g._dtype, g._device),)


log_softmax_p = defop(
    "log_softmax", nin=1, params={"dim": -1}, dtype="float", kernel=_log_softmax_kernel,
    batch=_vb.one_dim, eager_vjp=_lsm_eager_vjp,
    shape=lambda s, dim: tuple(s), save="output",
    vjp=_lsm_vjp,
    jvp=lambda t, out, x, dim: t[0] - _ksum(exp(out) * t[0], dim))


def _lsm_bw_jvp(t, out, g, y, dim):
    terms = []
    if t[0] is not None:
        terms.append(t[0] - exp(y) * _ksum(t[0], dim))
    if t[1] is not None:
        terms.append(-(t[1] * exp(y) * _ksum(g, dim)))
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


log_softmax_backward_p = defop(
    "log_softmax_backward", nin=2, params={"dim": -1}, dtype="promote", batch="loop",
    kernel=_lsm_bw_kernel, shape=lambda gs, ys, dim: tuple(gs), save="inputs",
    vjp=(lambda gg, out, g, y, dim: gg - _ksum(gg * exp(y), dim),
         lambda gg, out, g, y, dim: -(gg * exp(y) * _ksum(g, dim))),
    jvp=_lsm_bw_jvp)


def log_softmax_backward(grad_output, output, dim):
    """``grad_output - exp(output) * grad_output.sum(dim, keepdim=True)`` in one kernel
    (``aten::_log_softmax_backward_data``): ``log_softmax``'s VJP from its output.

    Args:
        grad_output: gradient with respect to ``log_softmax``'s output (floating tensor).
        output: ``log_softmax(x, dim)``, of ``grad_output``'s shape.
        dim: the softmax dimension.

    Returns:
        The gradient with respect to ``x``.

    Example:
        >>> y = ember.log_softmax(ember.randn(2, 3), 1)
        >>> log_softmax_backward(ember.ones(2, 3), y, 1).shape
        ember.Size([2, 3])
    """
    if not isinstance(grad_output, Tensor) or not isinstance(output, Tensor):
        raise TypeError("log_softmax_backward(): grad_output and output must be Tensors")
    if grad_output.shape != output.shape or not grad_output.ndim:
        raise ValueError(f"log_softmax_backward: grad_output of shape "
                         f"{tuple(grad_output.shape)} and output of shape "
                         f"{tuple(output.shape)} must have one shape of at least one dim")
    return _apply(log_softmax_backward_p, (grad_output, output),
                  {"dim": wrap_dim(dim, output.ndim, "log_softmax_backward")})


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
