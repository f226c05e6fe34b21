"""``nll_loss`` and ``nll_loss_backward``: the mean/sum negative log-likelihood of class
indices as one primitive each (PyTorch's ``aten::nll_loss_forward``/``_backward``).

Why primitives (``F.nll_loss`` is otherwise a composite): eager ``F.cross_entropy`` on a
small batch (W1's (128, 10) logits) spent most of its time in dispatch — gather, sum,
divide forward and their three backward nodes — not in arithmetic. Only the eager fast
path of ``nn/functional/_loss.py`` calls them (no dispatch mode, no class weight, no
smoothing, no target equal to ``ignore_index``, float32/float64), and the kernels run the
composite's NumPy operations in the same order: the gather (``take_along_dim``'s kernel),
the sum (``sum``'s kernel), then ``/ -n`` (mean) or a negation (sum); backward ``g / -n``
(or ``-g``) scattered by ``scatter_add_along_dim``'s kernel. So the bits are the
composite's, forward and backward. Traced code keeps the composite.

Both are linear in their float input and each other's transpose: ``nll_loss``'s VJP is
``nll_loss_backward`` and ``nll_loss_backward``'s VJP is ``nll_loss`` (JAX's ``deflinear``
pattern), so higher-order gradients stay in these two ops.
"""
from __future__ import annotations

import numpy as _np

from .. import dtypes as _dt
from ..autograd.grad_mode import state as _state
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor, _wrap
from . import dispatch
from .reduce import _sum_kernel
from .registry import defop
from .sort import _scatter_add_kernel, _take_kernel

__all__ = ["nll_loss_p", "nll_loss_backward_p"]

_REDUCTIONS = ("mean", "sum")


def _check_target(op, target, want, reduction):
    if not isinstance(target, Tensor) or target._dtype is not _dt.int64:
        raise DTypeError(f"{op}: expected int64 class indices, got "
                         f"{getattr(target, 'dtype', type(target).__name__)}")
    if tuple(target._data.shape) != want:
        raise ShapeError(f"{op}: target of shape {tuple(target._data.shape)} does not fit: "
                         f"expected {want}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _fwd_check(logp, target, dim=1, reduction="mean"):
    s = tuple(logp._data.shape)
    if not s or not 0 <= dim < len(s):
        raise ShapeError(f"nll_loss: input of shape {s} has no class dim {dim}")
    _check_target("nll_loss", target, s[:dim] + s[dim + 1:], reduction)


def _bwd_check(g, target, shape=(), dim=1, reduction="mean"):
    if tuple(g._data.shape) != ():
        raise ShapeError(f"nll_loss_backward: expected a 0-d gradient, got shape "
                         f"{tuple(g._data.shape)}")
    s = tuple(shape)
    if not s or not 0 <= dim < len(s):
        raise ShapeError(f"nll_loss_backward: shape {s} has no class dim {dim}")
    _check_target("nll_loss_backward", target, s[:dim] + s[dim + 1:], reduction)


def _scale(xp, v, n, reduction):
    """``v / -n`` (mean) or ``-v`` (sum): the composite's last operation."""
    return xp.negative(v) if reduction == "sum" else xp.true_divide(v, -n)


def _idx(xp, target, dim):
    """``target`` with the class dim put back (size 1): ``take_along_dim``'s indices."""
    return target.reshape(target.shape[:dim] + (1,) + target.shape[dim:])


def _nll_kernel(xp, logp, target, dim=1, reduction="mean"):
    """``-sum(logp[target]) / n`` (mean) or ``-sum(...)`` (sum); indices valid (checked by
    the caller, as for ``take_along_dim``)."""
    if logp.ndim == 2 and dim == 1:
        # NOTE: the same (n, 1) values as take_along_axis (one fancy index, no index grid)
        picked = logp[xp.arange(logp.shape[0]), target].reshape(-1, 1)
    else:
        picked = _take_kernel(xp, logp, _idx(xp, target, dim), dim)
    return xp.asarray(_scale(xp, xp.asarray(_sum_kernel(xp, picked)), target.size, reduction))


def _nll_bw_kernel(xp, g, target, shape=(), dim=1, reduction="mean"):
    """The gradient of :func:`_nll_kernel`: ``g / -n`` (or ``-g``) at each target, 0 else."""
    shape = tuple(shape)
    v = xp.asarray(_scale(xp, g, target.size, reduction), dtype=g.dtype)
    if len(shape) == 2 and dim == 1:
        # NOTE: one index per row, so scatter-add's sum is one term: its bits are v's
        # (the bitwise select for 2-16 classes) or 0.0 + v (bincount's: -0.0 -> +0.0)
        out = xp.zeros(shape, g.dtype)
        out[xp.arange(shape[0]), target] = v if 2 <= shape[1] <= 16 else v + 0.0
        return out
    idx = _idx(xp, target, dim)
    return _scatter_add_kernel(xp, xp.broadcast_to(v, idx.shape), idx, dim, shape)


def _nll_eager_vjp(nxt, g, out, logp, target, dim, reduction):
    """``nll_loss``'s VJP in a plain eager backward (the engine's ``eager_vjp``):
    ``nll_loss_backward``'s kernel on the raw arrays, as its dispatch runs it (the same
    bits; the forward validated the target), without the dispatch. None elsewhere."""
    st = _state.__dict__
    if st["modes"] or st["fw_levels"] or nxt[0] is None or not isinstance(logp, Tensor):
        return None
    ga, ta = g._data, target._data
    if (ga.__class__ is not _np.ndarray or ta.__class__ is not _np.ndarray or ga.ndim
            or g._dtype is not logp._dtype or g._device.type != "cpu"):
        return None
    res = _nll_bw_kernel(_np, ga, ta, shape=logp._data.shape, dim=dim, reduction=reduction)
    return (_wrap(res, g._dtype, g._device), None)


nll_loss_p = defop(
    "nll_loss", nin=2, params={"dim": 1, "reduction": "mean"}, dtype="same",
    eager_vjp=_nll_eager_vjp,
    check=_fwd_check, batch="loop", kernel=_nll_kernel, shape=lambda ls, ts, **_: (),
    save="inputs", nondiff_argnums=(1,), jvp="linear",
    vjp=(lambda g, out, logp, t, dim, reduction: dispatch.apply(
        nll_loss_backward_p, (g, t), {"shape": tuple(logp.shape), "dim": dim,
                                      "reduction": reduction}), None),
    doc="mean/sum of -logp at class indices (the eager cross-entropy's loss)")

nll_loss_backward_p = defop(
    "nll_loss_backward", nin=2, params={"shape": (), "dim": 1, "reduction": "mean"},
    dtype="same", check=_bwd_check, batch="loop", kernel=_nll_bw_kernel,
    shape=lambda gs, ts, shape=(), **_: tuple(shape), save="inputs", nondiff_argnums=(1,),
    jvp="linear",
    vjp=(lambda gg, out, g, t, shape, dim, reduction: dispatch.apply(
        nll_loss_p, (gg, t), {"dim": dim, "reduction": reduction}), None),
    doc="the gradient of nll_loss: g / -n (mean) or -g (sum) at each target, 0 elsewhere")
