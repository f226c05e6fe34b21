"""``ember.accelerator``: the current accelerator (``torch.accelerator``); none on CPU-only Ember.

Example:
    >>> ember.accelerator.is_available(), ember.accelerator.current_accelerator()
    (False, None)
"""
from __future__ import annotations

from . import cuda as _cuda

__all__ = ["is_available", "current_accelerator", "device_count", "current_device_index",
           "set_device_index", "synchronize"]


def is_available() -> bool:
    """Whether an accelerator (a CUDA device) can be used: False without one."""
    return _cuda.is_available()


def current_accelerator(check_available: bool = False):
    """The accelerator's device type, or None: Ember runs on the CPU alone today."""
    return None


def device_count() -> int:
    """Accelerator devices present: 0."""
    return _cuda.device_count()


def current_device_index() -> int:
    """Raise: there is no accelerator device."""
    return _cuda.current_device()


def set_device_index(device) -> None:
    """Raise: there is no accelerator device to select."""
    _cuda.set_device(device)


def synchronize(device=None) -> None:
    """Raise: there is no accelerator device to wait for."""
    _cuda.synchronize(device)
