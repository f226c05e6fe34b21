"""Whole-tensor update kernels for the optimizers (``addcmul_``, ``addcdiv_``, ``lerp_``...).

Optimizer updates run under ``no_grad`` on plain tensors, so each helper writes straight
into its target with the backend's ``out=`` ufuncs (no dispatch, at most one temporary),
the same fast path ``Tensor.add_`` takes. When autograd, forward-mode AD or a dispatch
mode (a tracer) is active, or the operands differ in dtype/device, the helper falls back to
the equivalent composition of Ember ops so that the update is recorded like any other op.

These are plain functions, not ``Tensor`` methods, on purpose: the core owns the methods.
"""
from __future__ import annotations

import numpy as np

from ..autograd.grad_mode import state
from ..device.base import _backends
from ..tensor import Tensor, _wrap

__all__ = ["add", "add_", "addcmul_", "addcdiv_", "lerp_", "maximum_", "div", "div_", "sqrt",
           "sqrt_", "abs", "sign", "neg", "clone", "kernel_arrays", "on_gpu", "bump"]


def _xp(t: Tensor, *others):
    """The array module for a raw in-place update of ``t``, or None to take the slow path."""
    for o in others:
        if isinstance(o, complex) and not t._dtype.is_complex:
            # NOTE: NumPy would fail with a casting error (or the slow path write garbage);
            # a complex factor comes from a corrupt state, e.g. Adam's bias correction
            # sqrt(1 - beta2**step) with a negative step
            raise TypeError(f"optimizer update: result type complex can't be cast to the "
                            f"{t._dtype} tensor being updated in place (scalar {o}); check "
                            "the optimizer state (a negative 'step'?)")
    if state.grad_enabled or state.fw_levels or state.modes:
        return None
    for o in others:
        if isinstance(o, Tensor) and (o._dtype is not t._dtype or o._device != t._device):
            return None
    be = _backends[t._device.type]
    return be.xp if "no_data" not in be.capabilities else None   # meta: through the ops


def _raw(o):
    return o._data if isinstance(o, Tensor) else o


def kernel_arrays(t: Tensor, *others: Tensor):
    """The raw arrays of ``t`` and ``others`` for a one-pass update loop
    (:mod:`ember.codegen.optim_kernels`), or None: autograd, forward AD or a dispatch mode
    is active, a tensor is missing, of another dtype/device, not contiguous, or its device
    runs neither host kernels nor generated CUDA kernels (:func:`on_gpu`)."""
    if state.grad_enabled or state.fw_levels or state.modes:
        return None
    dev = t._device
    caps = _backends[dev.type].capabilities
    if "host_kernels" not in caps and "cuda_kernels" not in caps:
        return None
    arrays = [t._data]
    for o in others:
        # NOTE: identity first: Device.__eq__ is a Python call (~0.5 us per operand)
        if not isinstance(o, Tensor) or o._dtype is not t._dtype or (
                o._device is not dev and o._device != dev):
            return None
        arrays.append(o._data)
    from ..codegen.optim_kernels import fits
    return arrays if fits(*arrays) else None


def on_gpu(t: Tensor) -> bool:
    """Whether ``t``'s one-pass update runs as a generated CUDA kernel
    (:mod:`ember.codegen.cuda_optim`) rather than a C loop."""
    return "cuda_kernels" in _backends[t._device.type].capabilities


def bump(*ts: Tensor) -> None:
    """Count a raw in-place write of each tensor (its storage's version)."""
    for t in ts:
        t._storage.version += 1


def _done(t: Tensor) -> Tensor:
    t._storage.version += 1
    return t


def _new(arr, like: Tensor) -> Tensor:
    return _wrap(_a(arr), like._dtype, like._device)


def _a(r):
    """``r`` as an array. NOTE: a NumPy ufunc on 0-d operands returns a scalar, not a 0-d
    array, which ``out=`` and ``Tensor`` refuse (0-d parameters' updates failed)."""
    return np.asarray(r) if isinstance(r, np.generic) else r


def add_(t: Tensor, other, alpha=1) -> Tensor:
    """``t += alpha * other`` in place (``Tensor.add_`` already has the raw fast path)."""
    return t.add_(other, alpha=alpha)


def add(t: Tensor, other, alpha=1) -> Tensor:
    """``t + alpha * other`` as a new tensor."""
    xp = _xp(t, other)
    if xp is None:
        return t.add(other, alpha=alpha)
    o = _raw(other)
    if alpha != 1:
        o = xp.multiply(o, alpha)
    return _new(xp.add(t._data, o), t)


def addcmul_(t: Tensor, a: Tensor, b: Tensor, value=1) -> Tensor:
    """``t += value * a * b`` in place (``torch.Tensor.addcmul_``)."""
    xp = _xp(t, a, b)
    if xp is None:
        return t.add_(a * b * value)
    tmp = _a(xp.multiply(_raw(a), _raw(b)))
    if value != 1:
        xp.multiply(tmp, value, out=tmp)
    xp.add(t._data, tmp, out=t._data)
    return _done(t)


def addcdiv_(t: Tensor, a: Tensor, b: Tensor, value=1) -> Tensor:
    """``t += value * (a / b)`` in place (``torch.Tensor.addcdiv_``)."""
    xp = _xp(t, a, b)
    if xp is None:
        return t.add_(a / b * value)
    tmp = _a(xp.divide(_raw(a), _raw(b)))
    if value != 1:
        xp.multiply(tmp, value, out=tmp)
    xp.add(t._data, tmp, out=t._data)
    return _done(t)


def lerp_(t: Tensor, end: Tensor, weight: float) -> Tensor:
    """``t += weight * (end - t)`` in place with PyTorch's two-sided formula."""
    xp = _xp(t, end)
    if xp is None:
        return t.lerp_(end, weight)
    d = _a(xp.subtract(_raw(end), t._data))
    if weight < 0.5:
        xp.multiply(d, weight, out=d)
        xp.add(t._data, d, out=t._data)
    else:   # NOTE: exact at weight == 1, as torch.lerp
        xp.multiply(d, 1 - weight, out=d)
        xp.subtract(_raw(end), d, out=t._data)
    return _done(t)


def maximum_(t: Tensor, other: Tensor) -> Tensor:
    """``t = max(t, other)`` elementwise, in place."""
    xp = _xp(t, other)
    if xp is None:
        from ..ops.binary import maximum
        return t.copy_(maximum(t, other))
    xp.maximum(t._data, _raw(other), out=t._data)
    return _done(t)


def div_(t: Tensor, other) -> Tensor:
    """``t /= other`` in place."""
    xp = _xp(t, other)
    if xp is None:
        return t.div_(other)
    xp.divide(t._data, _raw(other), out=t._data)
    return _done(t)


def div(t: Tensor, other) -> Tensor:
    """``t / other`` as a new tensor."""
    xp = _xp(t, other)
    if xp is None:
        return t / other
    return _new(xp.divide(t._data, _raw(other)), t)


def sqrt_(t: Tensor) -> Tensor:
    """``t = sqrt(t)`` in place."""
    xp = _xp(t)
    if xp is None:
        return t.sqrt_()
    xp.sqrt(t._data, out=t._data)
    return _done(t)


def _unary(name):
    def fn(t: Tensor) -> Tensor:
        xp = _xp(t)
        if xp is None:
            return getattr(t, name)()
        return _new(getattr(xp, {"neg": "negative", "abs": "absolute"}.get(name, name))(
            t._data), t)
    fn.__name__ = name
    fn.__doc__ = f"``{name}(t)`` as a new tensor."
    return fn


sqrt, abs, sign, neg = _unary("sqrt"), _unary("abs"), _unary("sign"), _unary("neg")


def clone(t: Tensor) -> Tensor:
    """A contiguous copy of ``t`` that shares nothing with it."""
    xp = _xp(t)
    if xp is None:
        return t.detach().clone()
    return _new(xp.array(t._data, copy=True, order="C"), t)
