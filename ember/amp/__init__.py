"""Mixed precision: autocast regions (``ember.autocast``) and loss scaling (``GradScaler``),
like ``torch.amp``.

Example:
    >>> model = ember.nn.Linear(8, 2)
    >>> with ember.autocast("cpu", dtype=ember.bfloat16):
    ...     loss = model(ember.randn(4, 8)).float().sum()
    >>> loss.backward()          # outside the region, in the forward's dtypes
"""
from .autocast_mode import (autocast, clear_autocast_cache, custom_bwd, custom_fwd,
                            get_autocast_dtype, is_autocast_available,
                            is_autocast_cache_enabled, is_autocast_enabled,
                            set_autocast_cache_enabled, set_autocast_dtype,
                            set_autocast_enabled)
from .grad_scaler import GradScaler, OptState
from .op_lists import OP_LISTS
from .skip_report import OverflowedParam, SkipReport

__all__ = ["autocast", "custom_fwd", "custom_bwd", "is_autocast_available",
           "is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled", "set_autocast_dtype", "is_autocast_cache_enabled",
           "set_autocast_cache_enabled", "clear_autocast_cache", "OP_LISTS", "GradScaler",
           "OptState", "SkipReport", "OverflowedParam"]
