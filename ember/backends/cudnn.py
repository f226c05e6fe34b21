"""``ember.backends.cudnn``: cuDNN's flags (``torch.backends.cudnn``), kept but unused.

Ember has no cuDNN; the flags exist so PyTorch programs can set them, with PyTorch's
defaults.

Example:
    >>> ember.backends.cudnn.benchmark = True
"""
from __future__ import annotations

import contextlib

#: settable like PyTorch's; read by nothing until a CUDA backend exists.
enabled = True
benchmark = False
deterministic = False
allow_tf32 = True
benchmark_limit = 10


def is_available() -> bool:
    """False: cuDNN is not available."""
    return False


def version():
    """None: no cuDNN library is loaded (as PyTorch without cuDNN)."""
    return None


@contextlib.contextmanager
def flags(enabled=False, benchmark=False, deterministic=False, allow_tf32=True):
    """Set the flags inside a ``with`` block and restore them after (``cudnn.flags``)."""
    g = globals()
    names = ("enabled", "benchmark", "deterministic", "allow_tf32")
    old = {k: g[k] for k in names}
    g.update(zip(names, (enabled, benchmark, deterministic, allow_tf32)))
    try:
        yield
    finally:
        g.update(old)
