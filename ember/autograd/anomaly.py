"""Anomaly mode: report the op — and the user's source line — that first produced NaN/Inf.

Forward: an op whose inputs are all finite but whose output is not raises at once.
Backward: a VJP whose incoming gradient is finite but which returns non-finite
gradients raises, naming the forward op's source line recorded when the node was made.
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
    if not d.is_floating_point or x._data.size == 0:
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


def check_forward(op, inputs, params, out) -> None:
    if getattr(_tls, "depth", 0) or _finite(out) or \
            not check_forward_inputs_finite(inputs, params):
        return
    raise AnomalyError(f"anomaly detected: {op.name} produced NaN/Inf in forward at "
                       f"{_where(capture_stack())}")


def check_forward_inputs_finite(inputs, params) -> bool:
    return all(_finite(x) for x in inputs) and all(_finite(v) for v in params.values()
                                                    if isinstance(v, (int, float)))


def check_backward(node, grads, g_in=None) -> None:
    if g_in is not None and hasattr(g_in, "_dtype") and not _finite(g_in):
        return
    for g in grads:
        if g is not None and hasattr(g, "_dtype") and not _finite(g):
            raise AnomalyError(
                f"anomaly detected: {node.name()} returned NaN/Inf gradients. The forward op "
                f"({node.op.name}) was created at {_where(node.stack)}")


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
