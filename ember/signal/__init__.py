"""``ember.signal``: signal-processing helpers (``torch.signal``); so far ``windows``."""
from . import windows  # noqa: F401

__all__ = ["windows"]
