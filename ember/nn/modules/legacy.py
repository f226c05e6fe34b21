"""PyTorch's legacy layers kept for old programs: ``Container`` (deprecated: subclass
``Module``) and ``CrossMapLRN2d`` (Lua Torch's cross-channel LRN, 4-D input only)."""
from __future__ import annotations

import warnings

from ..module import Module

__all__ = ["Container", "CrossMapLRN2d"]


class Container(Module):
    """Deprecated (as in PyTorch): a Module with children given as keyword arguments.

    Example:
        >>> c = ember.nn.Container(fc=ember.nn.Linear(2, 2))   # warns
    """

    def __init__(self, **kwargs):
        super().__init__()
        warnings.warn("nn.Container is deprecated. All of it's functionality is now "
                      "implemented in nn.Module. Subclass that instead.", stacklevel=2)
        for key, value in kwargs.items():
            self.add_module(key, value)


def _window_matrix(channels: int, size: int):
    """(C, C) 0/1 matrix whose row c marks the squares summed into channel c's scale.

    NOTE: follows PyTorch's running-sum recurrence exactly (``torch.nn._functions.
    CrossMapLRN2d.forward``): channel 0's square is never subtracted, so for
    ``c > pre_pad`` the window is ``{0} ∪ [c - pre_pad + 1, c + pre_pad - 1]`` (clipped),
    which differs from :class:`LocalResponseNorm`'s symmetric window.
    """
    import numpy as np
    pre_pad = int((size - 1) / 2 + 1)
    m = np.zeros((channels, channels))
    if channels == 0:
        return m
    m[0, :min(pre_pad, channels)] = 1
    for c in range(1, channels):
        m[c] = m[c - 1]
        if c < channels - pre_pad + 1:
            m[c, c + pre_pad - 1] += 1
        if c > pre_pad:
            m[c, c - pre_pad] -= 1
    return m


class CrossMapLRN2d(Module):
    """Cross-channel local response normalisation of ``(N, C, H, W)`` input:
    ``x / (k + alpha / size * S)^beta`` with ``S`` PyTorch's running window sum of squares
    over channels (see :func:`_window_matrix` for its window). Ember deliberately differs
    in the backward: gradients are the derivative of that forward, whereas PyTorch's
    hand-written backward assumes another window (it fails ``torch.autograd.gradcheck``
    for more than one channel, and raises for ``size=1``); values agree with PyTorch.

    Example:
        >>> ember.nn.CrossMapLRN2d(3)(ember.ones(1, 4, 2, 2)).shape
        ember.Size([1, 4, 2, 2])
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        from ...ops.factories import tensor
        if input.ndim != 4:
            raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.ndim}D "
                             f"instead.")
        m = tensor(_window_matrix(input.shape[1], self.size), dtype=input.dtype,
                   device=input.device)
        sq = (input * input).movedim(1, -1)                      # (N, H, W, C)
        scale = (sq @ m.T).movedim(-1, 1) * (self.alpha / self.size) + self.k
        return input * scale.pow(-self.beta)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
