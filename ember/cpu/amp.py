"""``ember.cpu.amp``: ``torch.cpu.amp``'s names (PyTorch deprecates them for ``torch.amp``).

Example:
    >>> with ember.cpu.amp.autocast():
    ...     y = model(x)                      # matmuls in bfloat16
"""
from __future__ import annotations

from ..amp import GradScaler as _GradScaler
from ..amp import autocast as _autocast
from ..dtypes import bfloat16

__all__ = ["autocast", "GradScaler"]


class autocast(_autocast):
    """``ember.autocast("cpu", ...)`` (``torch.cpu.amp.autocast``; bfloat16 by default)."""

    def __init__(self, enabled: bool = True, dtype=bfloat16, cache_enabled: bool = True):
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    """``ember.amp.GradScaler("cpu", ...)`` (``torch.cpu.amp.GradScaler``)."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> None:
        super().__init__("cpu", init_scale, growth_factor, backoff_factor, growth_interval,
                         enabled)
