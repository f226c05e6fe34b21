"""Finding the ``cuda`` backend for ``ember.cuda``'s functions, and the no-device error."""
from __future__ import annotations

from ..device.base import _backends, cuda_backend


class NoCUDADeviceError(RuntimeError):
    """Raised by calls that need a CUDA device when there is none."""


def backend_or_none(probe: bool = True):
    """The ``cuda`` backend, or None (``probe=False``: only if already made)."""
    if not probe:
        return _backends.get("cuda")
    return cuda_backend()[0]


def need(op: str):
    """The ``cuda`` backend, or :class:`NoCUDADeviceError` naming ``op`` and why."""
    be, why = cuda_backend()
    if be is None:
        raise NoCUDADeviceError(
            f"ember.cuda.{op}(): no CUDA device is present ({why}; ember.cuda.is_available() "
            f"is False). Valid: run on device 'cpu', or set EMBER_FAKE_CUDA=1 for the CPU "
            f"stand-in of a CUDA device.")
    return be
