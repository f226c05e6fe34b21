"""Global autograd switches: grad mode, inference mode, anomaly mode, forward-AD levels.

They live in one small mutable object so the dispatcher reads them with one
attribute lookup each on its hot path.
"""
from __future__ import annotations

import functools
import threading


class _State(threading.local):
    def __init__(self):
        self.grad_enabled = True
        self.inference = False
        self.anomaly = False
        self.anomaly_check_nan = True
        self.fw_levels: list = []     # active forward-AD levels, innermost last
        self.modes: list = []         # dispatch modes (tracers); innermost last
        self.saved_hooks: list = []   # (pack, unpack) pairs for saved tensors
        self.autocast = None          # op name -> autocast policies (ember.amp), None: off
        self.profiler = None          # the recording ember.profiler (its Recorder), None: off


state = _State()


class _DecoratorContext:
    """A context manager that also works as a decorator (like torch.no_grad)."""

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._args):
                return fn(*args, **kwargs)
        return wrapper

    _args: tuple = ()


class set_grad_enabled(_DecoratorContext):
    """Enable or disable gradient recording (context manager, decorator or function)."""

    def __init__(self, mode: bool):
        self._args = (mode,)
        self.prev = state.grad_enabled
        state.grad_enabled = bool(mode)

    def __call__(self, fn):
        state.grad_enabled = self.prev  # used as a decorator: don't change mode now
        return super().__call__(fn)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        state.grad_enabled = self.prev
        return False


class no_grad(_DecoratorContext):
    """Disable gradient recording inside the block.

    Example:
        >>> with ember.no_grad():
        ...     y = x * 2      # y.requires_grad is False
    """

    def __enter__(self):
        self.prev = state.grad_enabled
        state.grad_enabled = False
        return self

    def __exit__(self, *exc):
        state.grad_enabled = self.prev
        return False


class enable_grad(_DecoratorContext):
    """Enable gradient recording inside the block (e.g. within ``no_grad``)."""

    def __enter__(self):
        self.prev = state.grad_enabled
        state.grad_enabled = True
        return self

    def __exit__(self, *exc):
        state.grad_enabled = self.prev
        return False


class inference_mode(_DecoratorContext):
    """Like ``no_grad``; tensors made inside are marked ``is_inference``."""

    def __init__(self, mode: bool = True):
        self._args = (mode,)
        self.mode = mode

    def __enter__(self):
        self.prev = (state.grad_enabled, state.inference)
        if self.mode:
            state.grad_enabled, state.inference = False, True
        return self

    def __exit__(self, *exc):
        state.grad_enabled, state.inference = self.prev
        return False


class set_multithreading_enabled(_DecoratorContext):
    """Accepted for PyTorch's API (``torch.autograd.set_multithreading_enabled``): PyTorch
    runs each device's backward on a worker thread unless this is off; Ember's backward
    always runs on the calling thread, so either mode behaves as PyTorch's ``False``.

    Example:
        >>> with ember.autograd.set_multithreading_enabled(False):
        ...     pass
    """

    def __init__(self, mode: bool):
        self._args = (mode,)
        self.mode = bool(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def is_multithreading_enabled() -> bool:
    """False: Ember's backward runs on the calling thread (PyTorch's
    ``torch.autograd.is_multithreading_enabled`` is True by default, a worker thread per
    device)."""
    return False


def is_grad_enabled() -> bool:
    return state.grad_enabled


def is_inference_mode_enabled() -> bool:
    return state.inference
