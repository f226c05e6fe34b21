"""Anomaly mode: report the op — and the user's source line — that first produced NaN/Inf.

Forward: an op whose inputs are all finite but whose output is not raises at once.
Backward: a VJP whose incoming gradient is finite but which returns non-finite
gradients raises, naming the forward op's source line recorded when the node was made.

A *recorder* (``set_recorder``) turns the raise into a record on this thread: a
``GradScaler`` between ``scale()`` and ``update()`` expects overflows (it skips the step)
and keeps the first one to say which op and line produced it.
"""
from __future__ import annotations

import os
import threading
import traceback

from .grad_mode import state

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def capture_stack():
    """The user's frames (outside the ember package), innermost last."""
    frames = traceback.extract_stack()[:-1]
    return [f for f in frames if not os.path.abspath(f.filename).startswith(_PKG + os.sep)]


def _where(stack) -> str:
    if not stack:
        return "<unknown location>"
    f = stack[-1]
    return f"{f.filename}:{f.lineno} ({f.line})"


def _finite(x) -> bool:
    d = getattr(x, "_dtype", None)
    if d is None:
        try:
            import math
            return math.isfinite(x) if isinstance(x, (int, float)) else True
        except TypeError:
            return True
    if not d.is_inexact or x._data.size == 0:
        return True
    from ..device import get_backend
    xp = get_backend(x._device).xp
    return bool(xp.isfinite(x._data).all())


class AnomalyError(RuntimeError):
    """Raised in anomaly mode where NaN/Inf first appears."""


_tls = threading.local()


class in_backward:
    """While a VJP runs, forward checks are off: a NaN there is reported as the node's."""

    def __enter__(self):
        _tls.depth = getattr(_tls, "depth", 0) + 1

    def __exit__(self, *exc):
        _tls.depth -= 1
        return False


class AnomalyEvent:
    """Where NaN/Inf first appeared: ``phase`` ('forward'/'backward'), ``op``, ``where``."""

    def __init__(self, phase: str, op: str, where: str, message: str):
        self.phase, self.op, self.where, self.message = phase, op, where, message

    def __repr__(self) -> str:
        return f"AnomalyEvent({self.message!r})"


def set_recorder(fn):
    """Make anomaly checks on this thread call ``fn(AnomalyEvent)``; they raise only when
    ``fn`` returns False (nobody took the event). ``None`` restores raising. Returns the
    previous recorder.
    """
    prev = getattr(_tls, "recorder", None)
    _tls.recorder = fn
    return prev


def _anomaly(phase: str, op: str, where: str, message: str) -> None:
    rec = getattr(_tls, "recorder", None)
    if rec is None or not rec(AnomalyEvent(phase, op, where, message)):
        raise AnomalyError(message)


def check_forward(op, inputs, params, out) -> None:
    if getattr(_tls, "depth", 0) or _finite(out) or \
            not check_forward_inputs_finite(inputs, params):
        return
    where = _where(capture_stack())
    _anomaly("forward", op.name, where,
             f"anomaly detected: {op.name} produced NaN/Inf in forward at {where}")


def check_forward_inputs_finite(inputs, params) -> bool:
    return all(_finite(x) for x in inputs) and all(_finite(v) for v in params.values()
                                                    if isinstance(v, (int, float)))


def check_backward(node, grads, g_in=None) -> None:
    if g_in is not None and hasattr(g_in, "_dtype") and not _finite(g_in):
        return
    for g in grads:
        if g is not None and hasattr(g, "_dtype") and not _finite(g):
            where = _where(getattr(node, "stack", None))
            _anomaly("backward", node.op.name, where,
                     f"anomaly detected: {node.name()} returned NaN/Inf gradients. The "
                     f"forward op ({node.op.name}) was created at {where}")
            return


class detect_anomaly:
    """Context manager enabling anomaly detection (``torch.autograd.detect_anomaly``)."""

    def __init__(self, check_nan: bool = True):
        self.check_nan = check_nan

    def __enter__(self):
        self.prev = (state.anomaly, state.anomaly_check_nan)
        state.anomaly, state.anomaly_check_nan = True, self.check_nan
        return self

    def __exit__(self, *exc):
        state.anomaly, state.anomaly_check_nan = self.prev
        return False


def set_detect_anomaly(mode: bool) -> None:
    state.anomaly = bool(mode)


def is_anomaly_enabled() -> bool:
    return state.anomaly
