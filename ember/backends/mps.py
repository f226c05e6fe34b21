"""``ember.backends.mps``: Apple's Metal backend (``torch.backends.mps``): not available."""
from __future__ import annotations


def is_available() -> bool:
    """False: Ember has no Metal backend."""
    return False


def is_built() -> bool:
    """False: Ember has no Metal backend."""
    return False
