"""Devices: a small ``device`` descriptor plus one backend object per device type.

A backend owns the array module ``xp`` kernels are written against, the
allocator, streams/events and capability flags. The ``cuda`` backend (``cuda.py``: CuPy,
or the ``EMBER_FAKE_CUDA`` CPU stand-in) is made and registered on first use
(``base.cuda_backend``), so importing Ember never imports CuPy. The ``meta`` device
(``meta.py``) holds shapes and dtypes without data.
"""
from .base import Backend, Event, Stream, device, get_backend, register_backend
from .cpu import CPUBackend
from .meta import MetaBackend

register_backend(CPUBackend())
register_backend(MetaBackend())

__all__ = ["device", "Backend", "Stream", "Event", "get_backend", "register_backend"]
