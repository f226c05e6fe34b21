"""In-place activation forms PyTorch's ``nn.functional`` has beside the ``inplace=``
arguments (``celu_``, ``selu_``) and ATen's channel dropout (``torch.feature_dropout``)."""
from __future__ import annotations

from ._activation import celu, selu
from ._layers import _check_p, _keep_mask, _masked

__all__ = ["celu_", "selu_"]


def celu_(input, alpha: float = 1.0):
    """In-place :func:`celu` (``torch.nn.functional.celu_``)."""
    return celu(input, alpha, inplace=True)


def selu_(input):
    """In-place :func:`selu` (``torch.nn.functional.selu_``)."""
    return selu(input, inplace=True)


def feature_dropout(input, p: float, train: bool, inplace: bool = False):
    """Zero whole channels (dim 1; each ``(n, c)`` slice together) with probability ``p``
    and scale the rest by ``1 / (1 - p)`` (ATen's ``feature_dropout``, any rank >= 2)."""
    _check_p(p, "feature_dropout")
    if not train or p == 0.0:
        return input
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    mask = _keep_mask(input, shape, p)
    return _masked(input, mask, 0.0 if p == 1.0 else 1.0 / (1.0 - p), inplace)
