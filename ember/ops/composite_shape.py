"""Shape composites: ``diag``/``diag_embed``/``diagflat``, ``rot90``, ``split_with_sizes``,
``hsplit``/``vsplit``/``dsplit`` and the scatters ``select_scatter``/``diagonal_scatter``.

The scatters write ``src`` into a copy of ``input`` at positions that depend on shapes
alone: those positions are computed once on the host (``np.diagonal`` of an ``arange``)
and the write is an ``index_put`` of the flattened input, so gradients reach both inputs.

Example:
    >>> ember.diag(ember.tensor([1, 2]))
    tensor([[1, 0],
            [0, 2]])
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import ShapeError
from ..tensor import Tensor
from ._util import wrap_dim
from .factories import tensor as _tensor, zeros
from .index import index_put
from .join import flip, split, tensor_split

__all__ = ["diag", "diag_embed", "diagflat", "rot90", "split_with_sizes", "hsplit", "vsplit",
           "dsplit", "select_scatter", "diagonal_scatter"]


def _scatter_at(input: Tensor, positions: np.ndarray, src: Tensor, op: str) -> Tensor:
    """``input`` with ``src`` written at the flat ``positions`` (same shape as ``src``)."""
    if tuple(src.shape) != positions.shape:
        raise ShapeError(f"{op}: expected src to have a size equal to the slice of self, "
                         f"{list(positions.shape)}, but got {list(src.shape)}")
    pos = _tensor(positions.reshape(-1), dtype=_dt.int64, device=input.device)
    flat = index_put(input.reshape(-1), (pos,), src.reshape(-1).to(input.dtype))
    return flat.reshape(input.shape)


def _positions(shape) -> np.ndarray:
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """``input`` with ``src`` written on its diagonal (``torch.diagonal_scatter``).

    ``src`` has the shape of ``input.diagonal(offset, dim1, dim2)``.
    """
    d1 = wrap_dim(dim1, input.ndim, "diagonal_scatter")
    d2 = wrap_dim(dim2, input.ndim, "diagonal_scatter")
    if d1 == d2:
        raise ShapeError(f"diagonal_scatter: dim1 and dim2 cannot be the same dimension "
                         f"({dim1}, {dim2})")
    pos = np.diagonal(_positions(tuple(input.shape)), offset, d1, d2)
    return _scatter_at(input, pos, src, "diagonal_scatter")


def select_scatter(input, src, dim, index):
    """``input`` with ``src`` written at ``input.select(dim, index)`` (``torch.select_scatter``)."""
    d = wrap_dim(dim, input.ndim, "select_scatter")
    n = input.shape[d]
    if not -n <= index < n:
        raise IndexError(f"select_scatter(): index {index} out of range for tensor of size "
                         f"{list(input.shape)} at dimension {d}")
    pos = np.take(_positions(tuple(input.shape)), index % n, axis=d)
    return _scatter_at(input, pos, src, "select_scatter")


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """Tensor whose ``(dim1, dim2)`` diagonals are the last dim of ``input`` (``torch.diag_embed``).

    Example:
        >>> ember.diag_embed(ember.tensor([[1., 2.]])).shape
        ember.Size([1, 2, 2])
    """
    nd = input.ndim + 1
    d1, d2 = wrap_dim(dim1, nd, "diag_embed"), wrap_dim(dim2, nd, "diag_embed")
    if d1 == d2:
        raise ShapeError(f"diag_embed: diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = input.shape[-1] + abs(offset)
    rest = iter(input.shape[:-1])
    shape = tuple(n if i in (d1, d2) else next(rest) for i in range(nd))
    return diagonal_scatter(zeros(shape, dtype=input.dtype, device=input.device), input,
                            offset, d1, d2)


def diag(input, diagonal=0):
    """1-D input: a square matrix with it on a diagonal; 2-D: a copy of that diagonal."""
    if input.ndim == 1:
        return diag_embed(input, diagonal, 0, 1)
    if input.ndim == 2:
        return input.diagonal(diagonal).clone()
    raise ShapeError(f"diag(): expected a 1-D or 2-D tensor, got shape {tuple(input.shape)}")


def diagflat(input, offset=0):
    """A 2-D matrix with the flattened ``input`` on a diagonal (``torch.diagflat``)."""
    return diag_embed(input.reshape(-1), offset, 0, 1)


def rot90(input, k=1, dims=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``dims``, from the first axis toward
    the second (``torch.rot90``)."""
    dims = tuple(dims)
    if len(dims) != 2:
        raise ShapeError(f"rot90(): expected exactly 2 rotation dims, got {len(dims)}")
    if input.ndim < 2:
        raise ShapeError(f"rot90(): expected total dims >= 2, got shape {tuple(input.shape)}")
    d0, d1 = (wrap_dim(d, input.ndim, "rot90") for d in dims)
    if d0 == d1:
        raise ShapeError(f"rot90(): expected rotation dims to be different, got {dims}")
    k %= 4
    if k == 1:
        return flip(input, (d1,)).transpose(d0, d1)
    if k == 2:
        return flip(input, (d0, d1))
    if k == 3:
        return flip(input, (d0,)).transpose(d0, d1)
    return input.clone()


def split_with_sizes(input, split_sizes, dim=0):
    """Views of the given sizes along ``dim``; they must sum to its length."""
    d = wrap_dim(dim, input.ndim, "split_with_sizes")
    sizes = [int(s) for s in split_sizes]
    if sum(sizes) != input.shape[d] or any(s < 0 for s in sizes):
        raise ShapeError(f"split_with_sizes: expected non-negative split_sizes summing exactly "
                         f"to {input.shape[d]} (input tensor's size at dimension {d}), but got "
                         f"split_sizes={sizes}")
    return split(input, sizes, d)


def _nsplit(input, sections, dim: int, min_dim: int, op: str):
    if input.ndim < min_dim:
        raise ShapeError(f"{op}: torch.{op} requires a tensor with at least {min_dim} "
                         f"dimension{'s' if min_dim > 1 else ''}, but got a tensor with "
                         f"{input.ndim} dimensions")
    if isinstance(sections, int):
        if sections <= 0 or input.shape[dim] % sections:
            raise ShapeError(f"{op}: attempted to split along dimension {dim}, but the size of "
                             f"the dimension {input.shape[dim]} is not divisible by the "
                             f"split_size {sections}!")
    return tensor_split(input, sections, dim)


def hsplit(input, indices_or_sections):
    """Split along dim 1 (dim 0 for 1-D tensors) (``torch.hsplit``)."""
    return _nsplit(input, indices_or_sections, 1 if input.ndim > 1 else 0, 1, "hsplit")


def vsplit(input, indices_or_sections):
    """Split along dim 0 of an at least 2-D tensor (``torch.vsplit``)."""
    return _nsplit(input, indices_or_sections, 0, 2, "vsplit")


def dsplit(input, indices_or_sections):
    """Split along dim 2 of an at least 3-D tensor (``torch.dsplit``)."""
    return _nsplit(input, indices_or_sections, 2, 3, "dsplit")


for _name in __all__:
    setattr(Tensor, _name, globals()[_name])
