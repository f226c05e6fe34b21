"""``ember.cuda.amp``: ``torch.cuda.amp``'s names (PyTorch deprecates them for ``torch.amp``).

Example:
    >>> with ember.cuda.amp.autocast():
    ...     y = model(x)
"""
from __future__ import annotations

from ..amp import GradScaler as _GradScaler
from ..amp import autocast as _autocast

__all__ = ["autocast", "GradScaler"]


class autocast(_autocast):
    """``ember.autocast("cuda", ...)`` (``torch.cuda.amp.autocast``)."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True):
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    """``ember.amp.GradScaler("cuda", ...)`` (``torch.cuda.amp.GradScaler``)."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> None:
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval,
                         enabled)
