"""``ember.utils.hooks``: the handle every ``register_*hook`` returns (``torch.utils.hooks``).

Example:
    >>> handle = model.register_forward_hook(fn)
    >>> isinstance(handle, ember.utils.hooks.RemovableHandle)
    True
"""
from __future__ import annotations

from ..nn._hooks import RemovableHandle  # noqa: F401

__all__ = ["RemovableHandle", "unserializable_hook"]


def unserializable_hook(f):
    """Mark hook ``f`` as one that must not be serialised (PyTorch's marker; Ember never
    pickles hooks, so it only sets the flag)."""
    f.__torch_unserializable__ = True
    return f
