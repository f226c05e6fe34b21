"""Flatten and Unflatten modules."""
from __future__ import annotations

from ..module import Module

__all__ = ['Flatten', 'Unflatten']


class Flatten(Module):
    """Flatten dims ``start_dim..end_dim`` into one (the batch dim is kept by default).

    Example:
        >>> ember.nn.Flatten()(ember.ones(2, 3, 4)).shape
        ember.Size([2, 12])
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Expand dim ``dim`` into ``unflattened_size``.

    Example:
        >>> ember.nn.Unflatten(1, (3, 4))(ember.ones(2, 12)).shape
        ember.Size([2, 3, 4])
    """

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        if not isinstance(dim, int):
            raise TypeError(f"Unflatten: invalid type {type(dim).__name__} for dim (int "
                            f"expected; named dims are not supported)")
        if not isinstance(unflattened_size, (tuple, list)) or \
                not all(isinstance(s, int) for s in unflattened_size):
            raise TypeError(f"Unflatten: unflattened_size must be a tuple of ints, got "
                            f"{unflattened_size!r}")
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
