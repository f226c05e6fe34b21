"""Ember's exception types and the helper that describes op inputs in messages.

Each error subclasses the nearest built-in exceptions, so ``except ValueError`` and
PyTorch-style ``except RuntimeError`` both work.
"""
from __future__ import annotations


class EmberError(Exception):
    """Base of errors raised deliberately by Ember (never re-wrapped by the dispatcher)."""


class ShapeError(EmberError, ValueError, RuntimeError):
    """Shapes that do not fit the op (broadcasting, matmul, reshape...)."""


class DTypeError(EmberError, TypeError, RuntimeError):
    """A dtype the op does not accept or cannot cast to."""


class DeviceError(EmberError, RuntimeError):
    """Tensors on different devices, or an unavailable device."""


class EmberIndexError(EmberError, IndexError):
    """An index out of range or of the wrong kind."""


class IntegerDivisionByZero(EmberError, ZeroDivisionError, RuntimeError):
    """Integer division (``//``, ``%``, ``fmod``) by zero, which PyTorch also rejects."""


class GraphError(EmberError, RuntimeError):
    """Misuse of the autograd graph (second backward, stale saved tensor...)."""


def describe(inputs) -> str:
    """``'Tensor(shape=(2, 3), dtype=float32), 2.5'`` for an op's inputs."""
    parts = []
    for x in inputs:
        d = getattr(x, "_dtype", None)
        if d is not None:
            parts.append(f"Tensor(shape={tuple(x._data.shape)}, dtype={d.name})")
        elif isinstance(x, (list, tuple)):
            parts.append("[" + describe(x) + "]")
        else:
            parts.append(repr(x))
    return ", ".join(parts)
