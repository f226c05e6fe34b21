"""Channel-wise functionals: ``channel_shuffle``, ``local_response_norm``, ``rrelu``, ``pdist``
and the deprecated ``upsample_nearest`` / ``upsample_bilinear`` aliases of ``interpolate``.

All are composites of Ember ops, so autograd, forward mode and ``ember.compile`` see
ordinary primitives.
"""
from __future__ import annotations

from ...errors import ShapeError
from ...tensor import Tensor
from ._resample import interpolate

__all__ = ['channel_shuffle', 'native_channel_shuffle', 'local_response_norm', 'rrelu',
           'rrelu_', 'upsample_nearest', 'upsample_bilinear', 'pdist']


def _shape(x) -> tuple:
    return tuple(getattr(x, "shape", ()))


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """Split the C channels of ``(N, C, *)`` ``input`` into ``groups`` and interleave them.

    Example:
        >>> F.channel_shuffle(ember.arange(4.).reshape(1, 4, 1), 2).flatten()
        tensor([0., 2., 1., 3.])
    """
    if not isinstance(input, Tensor) or input.ndim < 3:
        raise ShapeError(f"channel_shuffle: expected an input of shape (N, C, *) with at least "
                         f"3 dims, got {_shape(input)}")
    if not isinstance(groups, int) or groups < 1 or input.shape[1] % groups:
        raise ValueError(f"channel_shuffle: groups must be a positive int dividing the "
                         f"{input.shape[1]} channels of input {_shape(input)}, got {groups!r}")
    n, c, *rest = input.shape
    x = input.reshape(n, groups, c // groups, *rest).transpose(1, 2)
    return x.reshape(n, c, *rest)


native_channel_shuffle = channel_shuffle


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> Tensor:
    """Normalise each channel by the squares of its ``size`` neighbouring channels:
    ``x / (k + alpha / size * sum_{c'} x_{c'}^2) ** beta`` (zero-padded at the edges).

    Example:
        >>> F.local_response_norm(ember.ones(1, 4, 2, 2), size=2).shape
        ember.Size([1, 4, 2, 2])
    """
    if not isinstance(input, Tensor) or input.ndim < 3:
        raise ShapeError(f"local_response_norm: expected 3D or higher dimensional input, got "
                         f"shape {_shape(input)}")
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"local_response_norm: size must be a positive int, got {size!r}")
    if input.numel() == 0:
        return input
    from ...ops.pad import pad
    c = input.shape[1]
    sq = input * input
    # NOTE: PyTorch's window is (size // 2 before, (size - 1) // 2 after) the channel
    pads = [0, 0] * (input.ndim - 2) + [size // 2, (size - 1) // 2]
    sq = pad(sq, tuple(pads))
    acc = sq.narrow(1, 0, c)
    for j in range(1, size):
        acc = acc + sq.narrow(1, j, c)
    div = (acc * (alpha / size) + k) ** beta
    return input / div


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3,
          training: bool = False, inplace: bool = False) -> Tensor:
    """Randomized leaky ReLU: in training each negative element is scaled by a slope drawn
    from U(lower, upper); in eval by ``(lower + upper) / 2``.

    Example:
        >>> F.rrelu(ember.tensor([-2., 3.]))
        tensor([-0.4583,  3.0000])
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"rrelu(): argument 'input' must be a Tensor, not "
                        f"{type(input).__name__}")
    if not lower <= upper:
        raise ValueError(f"rrelu: lower bound must be less than or equal to upper bound, got "
                         f"lower={lower}, upper={upper}")
    if not input.dtype.is_floating_point:
        raise TypeError(f"rrelu: expected a floating point input, got {input.dtype.name}")
    from ...ops import select
    if training:
        from ...ops.factories import empty
        slope = empty(tuple(input.shape), dtype=input.dtype,
                      device=input.device).uniform_(lower, upper)
    else:
        slope = (lower + upper) / 2
    r = select.where(input >= 0, input, input * slope)
    if inplace:
        return input.copy_(r)
    return r


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3,
           training: bool = False) -> Tensor:
    """In-place :func:`rrelu`."""
    return rrelu(input, lower, upper, training, inplace=True)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """Deprecated: ``interpolate(input, size, scale_factor, mode="nearest")``."""
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """Deprecated: ``interpolate(..., mode="bilinear", align_corners=True)``."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """p-norm distances between all pairs of rows ``i < j`` of an (N, M) ``input``, as the
    N·(N-1)/2 upper-triangle entries, row by row.

    Example:
        >>> F.pdist(ember.tensor([[0., 0.], [3., 4.], [0., 1.]]))
        tensor([5.0000, 1.0000, 4.2426])
    """
    if not isinstance(input, Tensor) or input.ndim != 2:
        raise ShapeError(f"pdist: only supports 2D tensors, got shape {_shape(input)}")
    if not input.dtype.is_floating_point:
        raise TypeError(f"pdist: only supports floating-point dtypes, got {input.dtype.name}")
    if p < 0:
        raise ValueError(f"pdist: only supports non-negative p values, got p={p}")
    from ...ops.composite_grid import triu_indices
    n = input.shape[0]
    i, j = triu_indices(n, n, 1, device=input.device)
    return (input.index_select(0, i) - input.index_select(0, j)).norm(p, dim=-1)
