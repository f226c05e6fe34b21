"""Single-kernel backward primitives of the common unary ops (PyTorch's ``*_backward``).

``tanh``'s VJP written in Ember ops, ``g * (1 - out * out)``, is three primitives: three
dispatches, three autograd-free NumPy calls and two temporaries per backward step. PyTorch
runs it as one kernel (``aten::tanh_backward``); so does Ember with the primitives here:

* ``tanh_backward(g, y)    = g * (1 - y * y)``      (``y = tanh(x)``)
* ``sigmoid_backward(g, y) = g * (y * (1 - y))``    (``y = sigmoid(x)``)
* ``threshold_backward(g, y, t) = y <= t ? 0 : g`` (``relu``'s, with ``y = relu(x)``, ``t = 0``)

Each keeps the old composite's order of operations, so results are bitwise equal to it in
eager mode, and its C ``expr`` is the composite's fused expression, so compiled graphs fuse
and round it exactly as before. Their own VJPs/JVPs are Ember ops (second order works).

They are real-valued primitives (complex inputs are refused): the unary VJPs call them
for real gradients only and keep the ``g * conj(f'(z))`` composite for complex ones.
"""
from __future__ import annotations

import numpy as np

from ..autograd.grad_mode import state as _state
from ..tensor import _wrap
from . import dispatch
from .complex import real_only
from .registry import defop

__all__ = ["tanh_backward", "sigmoid_backward", "threshold_backward"]

_NOPARAMS: dict = {}


#: smallest size worth the one-temporary kernels: below it NumPy's ``out=`` keyword costs
#: more than the temporaries it saves (crossover ~4K float32 elements, one thread)
_INPLACE_MIN = 4096

_nd = np.ndarray
_ONES: dict = {}   # dtype -> 0-d array of 1


def _one(dt):
    """1 as a 0-d array of ``dt``: ``one - y`` on a small array costs ~0.2 us less than with
    the Python int 1 (NumPy's scalar conversion), with the same bits."""
    one = _ONES.get(dt)
    if one is None:
        one = _ONES[dt] = np.ones((), dt)
    return one


def _plain(g, y) -> bool:
    """Whether the kernel takes its general path: a Python number or a complex value (which
    ``real_only`` refuses) among its operands."""
    return (g.__class__ is not _nd or y.__class__ is not _nd or g.dtype.kind == "c"
            or y.dtype.kind == "c")


def _small(g, y) -> bool:
    """Whether to compute the plain expression (small, broadcast or mixed operands) rather
    than in one temporary of ``y``'s shape."""
    return (y.size < _INPLACE_MIN or g.shape != y.shape or g.dtype != y.dtype
            or y.ndim == 0)


_tanh_bw_general = real_only("tanh_backward", lambda xp, g, y: g * (1 - y * y))
_sigmoid_bw_general = real_only("sigmoid_backward", lambda xp, g, y: g * (y * (1 - y)))


def _tanh_bw_kernel(xp, g, y):
    if _plain(g, y):
        return _tanh_bw_general(xp, g, y)
    if _small(g, y):
        return g * (_one(y.dtype) - y * y)
    t = np.multiply(y, y)
    np.subtract(1, t, out=t)
    return np.multiply(g, t, out=t)


def _sigmoid_bw_kernel(xp, g, y):
    if _plain(g, y):
        return _sigmoid_bw_general(xp, g, y)
    if _small(g, y):
        return g * (y * (_one(y.dtype) - y))
    t = np.subtract(1, y)
    np.multiply(y, t, out=t)
    return np.multiply(g, t, out=t)


def _tanh_bw_vjp_y(gg, out, g, y):
    return gg * g * y * -2


def _tanh_bw_jvp(t, out, g, y):
    terms = []
    if t[0] is not None:
        terms.append(tanh_backward(t[0], y))
    if t[1] is not None:
        terms.append(t[1] * g * y * -2)
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _sigmoid_bw_vjp_y(gg, out, g, y):
    return gg * g * (1 - 2 * y)


def _sigmoid_bw_jvp(t, out, g, y):
    terms = []
    if t[0] is not None:
        terms.append(sigmoid_backward(t[0], y))
    if t[1] is not None:
        terms.append(t[1] * g * (1 - 2 * y))
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


# NOTE: the xp kernel (CuPy on cuda) is the plain expression; the CPU one saves temporaries.
tanh_backward_p = defop(
    "tanh_backward", nin=2, elementwise=True, dtype="promote", save="inputs",
    kernels={"xp": _tanh_bw_general, "cpu": _tanh_bw_kernel},
    expr="({0} * (1 - ({1} * {1})))",
    vjp=(lambda gg, out, g, y: tanh_backward(gg, y), _tanh_bw_vjp_y), jvp=_tanh_bw_jvp)

sigmoid_backward_p = defop(
    "sigmoid_backward", nin=2, elementwise=True, dtype="promote", save="inputs",
    kernels={"xp": _sigmoid_bw_general, "cpu": _sigmoid_bw_kernel},
    expr="({0} * ({1} * (1 - {1})))",
    vjp=(lambda gg, out, g, y: sigmoid_backward(gg, y), _sigmoid_bw_vjp_y),
    jvp=_sigmoid_bw_jvp)


def tanh_backward(grad_output, output):
    """``grad_output * (1 - output ** 2)`` in one kernel (``aten::tanh_backward``).

    Args:
        grad_output: gradient with respect to ``tanh``'s output (real floating tensor).
        output: ``tanh(x)``; broadcasts with ``grad_output``.

    Returns:
        The gradient with respect to ``x``.

    Example:
        >>> y = ember.tanh(ember.tensor([0.5]))
        >>> tanh_backward(ember.ones(1), y)
    """
    return dispatch.apply(tanh_backward_p, (grad_output, output), _NOPARAMS)


def sigmoid_backward(grad_output, output):
    """``grad_output * output * (1 - output)`` in one kernel (``aten::sigmoid_backward``).

    Args:
        grad_output: gradient with respect to ``sigmoid``'s output (real floating tensor).
        output: ``sigmoid(x)``; broadcasts with ``grad_output``.

    Returns:
        The gradient with respect to ``x``.

    Example:
        >>> y = ember.sigmoid(ember.tensor([0.5]))
        >>> sigmoid_backward(ember.ones(1), y)
    """
    return dispatch.apply(sigmoid_backward_p, (grad_output, output), _NOPARAMS)


# ------------------------------------------------------------------ threshold_backward
def _threshold_bw_kernel(xp, g, y, threshold):
    # NOTE: PyTorch's ``y <= t ? 0 : g``: a NaN ``y`` passes ``g`` on, and a masked-out
    # inf/NaN ``g`` gives +0 (``g * (y > t)`` would give NaN). The result is ``g``'s bits
    # or +0 whichever kernel runs (the eager C kernel, this one, CuPy's ``where``).
    return xp.where(y <= threshold, xp.zeros((), g.dtype), g)


def _threshold_bw_cpu(xp, g, y, threshold):
    """The NumPy kernel: ``g``'s bits AND a mask of all ones (kept) or zeros (``y <= t``).

    NumPy's ``where`` branches per element (~5 ns each on a random mask, 10x this); the
    mask ``(y <= t) - 1`` is 0 or -1 in an integer of ``g``'s width.
    """
    if (g.__class__ is not _nd or y.__class__ is not _nd or g.dtype.kind != "f"
            or not g.ndim or not y.ndim):
        return _threshold_bw_kernel(xp, g, y, threshold)
    it = _INTS[g.dtype.itemsize]
    k = np.subtract(np.less_equal(y, threshold), 1, dtype=it)
    gi = g.view(it)
    if k.shape == gi.shape:
        return np.bitwise_and(k, gi, out=k).view(g.dtype)
    return np.bitwise_and(k, gi).view(g.dtype)


_INTS = {2: np.int16, 4: np.int32, 8: np.int64}


def _threshold_bw_jvp(t, out, g, y, threshold):
    if t[0] is None:
        return _zeros_like(out)
    return threshold_backward(t[0], y, threshold)


def _zeros_like(x):
    from .factories import zeros_like
    return zeros_like(x)


threshold_backward_p = defop(
    "threshold_backward", nin=2, elementwise=True, dtype="promote", save="inputs",
    params={"threshold": 0.0},
    kernels={"xp": real_only("threshold_backward", _threshold_bw_kernel),
             "cpu": real_only("threshold_backward", _threshold_bw_cpu)},
    expr="(({1} <= {threshold}) ? 0 : {0})",
    vjp=(lambda gg, out, g, y, threshold: threshold_backward(gg, y, threshold),
         lambda gg, out, g, y, threshold: _zeros_like(y)),
    jvp=_threshold_bw_jvp)


def threshold_backward(grad_output, self, threshold):
    """``0 where self <= threshold else grad_output`` in one kernel (``aten::threshold_backward``).

    ``relu``'s backward is ``threshold_backward(g, relu(x), 0)``, PyTorch's: a NaN input
    passes its gradient on, and a gradient is exactly 0 (never NaN) where ``self <= threshold``.

    Args:
        grad_output: gradient with respect to the thresholded output (real floating tensor).
        self: the tensor compared with ``threshold`` (``relu``'s output); broadcasts.
        threshold: Python number.

    Returns:
        The gradient with respect to the input.

    Example:
        >>> threshold_backward(ember.ones(3), ember.tensor([-1.0, 0.0, 2.0]), 0)
        tensor([0., 0., 1.])
    """
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise TypeError(f"threshold_backward(): threshold must be a Python number, got "
                        f"{type(threshold).__name__}")
    return dispatch.apply(threshold_backward_p, (grad_output, self),
                          {"threshold": float(threshold)})


def relu_backward(grad_output, output):
    """``relu``'s VJP, ``threshold_backward(g, out, 0)`` (PyTorch's): one kernel; a NaN
    input passes its gradient on, and a masked-out gradient is exactly 0 even if inf/NaN
    (``g * (out > 0)``, the composite it replaces, gave NaN there and 0 for a NaN input).
    Graph passes match this form (the ``pool`` pass's relu mask)."""
    return dispatch.apply(threshold_backward_p, (grad_output, output), _ZERO_THRESHOLD)


_ZERO_THRESHOLD = {"threshold": 0.0}
_F3264 = (np.dtype(np.float32), np.dtype(np.float64))


def relu_eager_vjp(nxt, g, out, x):
    """``relu``'s VJP in a plain eager backward (the engine's ``eager_vjp``): the
    ``threshold_backward`` :func:`relu_backward` dispatches, run as the dispatcher runs it
    for float32/float64 CPU operands of one dtype and shape (the eager C kernel where that
    path takes it, else the CPU kernel; the same arrays and params): the same bits, without
    the dispatch. None elsewhere (a dispatch mode, forward AD, other dtypes, broadcasting)."""
    st = _state.__dict__
    if st["modes"] or st["fw_levels"] or nxt[0] is None or out is None:
        return None
    ga, oa = g._data, out._data
    if (ga.__class__ is not _nd or oa.__class__ is not _nd or ga.dtype != oa.dtype
            or ga.dtype not in _F3264 or ga.shape != oa.shape or g._dtype is not out._dtype
            or g._device.type != "cpu" or out._device.type != "cpu"):
        return None
    res = None
    if ga.size >= dispatch._EAGER_MIN and "threshold_backward" in dispatch._EAGER_OPS:
        res = dispatch._eager_kernel(threshold_backward_p, [ga, oa], _ZERO_THRESHOLD)
    if res is None:
        res = threshold_backward_p.kernel_for("cpu")(np, ga, oa, threshold=0.0)
        if res.__class__ is not _nd:
            res = np.asarray(res)
    return (_wrap(res, g._dtype, g._device),)
