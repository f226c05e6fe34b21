"""``ember.sparse``: sparse COO tensors and their products (``torch.sparse``'s core).

``ember.sparse_coo_tensor(indices, values, size)`` builds a :class:`SparseCOOTensor`;
``Tensor.to_sparse()`` converts a strided tensor. :func:`mm`/:func:`addmm` multiply a sparse
matrix by a dense one with SciPy's sparse kernels (the ``sparse_mm`` primitive,
``ember/ops/sparse.py``), with gradients to the dense operand and to the values;
:func:`sum` reduces. SciPy is imported on first use.

Example:
    >>> a = ember.sparse_coo_tensor([[0, 1], [1, 0]], [2., 3.], (2, 2))
    >>> ember.sparse.mm(a, ember.ones(2, 1)).flatten().tolist()
    [2.0, 3.0]
"""
from __future__ import annotations

import numpy as np

from ..ops import sparse as _sparse_ops
from ..tensor import Tensor
from ._coo import SparseCOOTensor, sparse_coo

__all__ = ["mm", "spmm", "addmm", "sum", "sparse_coo_tensor", "SparseCOOTensor",
           "sparse_coo"]


def _em():
    import ember
    return ember


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None,
                      requires_grad: bool = False, check_invariants=None,
                      is_coalesced: bool | None = None) -> SparseCOOTensor:
    """A sparse COO tensor (``torch.sparse_coo_tensor``).

    Args:
        indices: ``(sparse_dim, nnz)`` integer indices (duplicates sum).
        values: ``(nnz, *dense_dims)`` values; a tensor keeps its autograd history.
        size: the full size; inferred (max index + 1) when omitted.
        dtype, device: of the values.
        requires_grad: make the values a leaf requiring grad.
        is_coalesced: declare the indices sorted and unique.

    Raises:
        ValueError: shapes of indices, values and size disagree, or an index is out of range.
    """
    em = _em()
    idx = indices if isinstance(indices, Tensor) else em.tensor(np.asarray(indices))
    if idx.dtype.is_floating_point or idx.ndim != 2:
        raise ValueError(f"sparse_coo_tensor: indices must be a 2-D integer tensor "
                         f"(sparse_dim, nnz), got shape {tuple(idx.shape)}, dtype {idx.dtype}")
    idx = idx.to(em.int64)
    vals = values if isinstance(values, Tensor) else em.tensor(values, dtype=dtype)
    if dtype is not None or device is not None:
        vals = vals.to(device=device, dtype=dtype)
    if vals.ndim == 0 or vals.shape[0] != idx.shape[1]:
        raise ValueError(f"sparse_coo_tensor: values must have nnz={idx.shape[1]} rows "
                         f"(indices of shape {tuple(idx.shape)}), got values of shape "
                         f"{tuple(vals.shape)}")
    a = idx.cpu().numpy()     # NOTE: indices are checked on the host
    if size is None:
        size = tuple(int(m) + 1 for m in a.max(1)) if a.size else (0,) * idx.shape[0]
        size = tuple(size) + tuple(vals.shape[1:])
    size = tuple(int(s) for s in size)
    sd = idx.shape[0]
    if len(size) != sd + vals.ndim - 1 or tuple(vals.shape[1:]) != size[sd:]:
        raise ValueError(f"sparse_coo_tensor: size {size} does not match indices of shape "
                         f"{tuple(idx.shape)} and values of shape {tuple(vals.shape)}")
    if a.size and ((a < 0).any() or (a >= np.array(size[:sd])[:, None]).any()):
        raise ValueError(f"sparse_coo_tensor: indices out of range for size {size}: "
                         f"min {a.min(1).tolist()}, max {a.max(1).tolist()}")
    if requires_grad:
        vals = vals.detach().requires_grad_(True)
    return SparseCOOTensor(idx, vals, size, coalesced=bool(is_coalesced) or idx.shape[1] <= 1)


def _to_sparse(self: Tensor, sparse_dim: int | None = None, *, layout=None,
               blocksize=None, dense_dim=None) -> SparseCOOTensor:
    """This strided tensor as a sparse COO tensor of its nonzeros (``Tensor.to_sparse``;
    with ``sparse_dim`` < ndim, the slices along the first ``sparse_dim`` dims holding any
    nonzero). Differentiable in the values."""
    if layout is not None and layout is not sparse_coo:
        raise ValueError(f"to_sparse: only layout=ember.sparse_coo is supported, got {layout}")
    em = _em()
    sd = self.ndim if sparse_dim is None else int(sparse_dim)
    if not 0 < sd <= self.ndim:
        raise ValueError(f"to_sparse: sparse_dim must be in [1, {self.ndim}], got {sd}")
    mask = self.detach().cpu().numpy() != 0
    if sd < self.ndim:
        mask = mask.reshape(mask.shape[:sd] + (-1,)).any(-1)
    nz = np.stack(np.nonzero(mask)).astype(np.int64).reshape(sd, -1)
    vals = self[tuple(em.tensor(r, device=self.device) for r in nz)] if nz.shape[1] else \
        self.reshape((-1,) + tuple(self.shape[sd:]))[:0]
    return SparseCOOTensor(em.tensor(nz, device=self.device), vals, tuple(self.shape),
                           coalesced=True)


def _check_mm(op, sparse, dense):
    if not isinstance(sparse, SparseCOOTensor) or not isinstance(dense, Tensor):
        raise TypeError(f"{op}: expected (sparse COO matrix, strided matrix), got "
                        f"({type(sparse).__name__}, {type(dense).__name__})")
    if sparse.dim() != 2 or sparse.sparse_dim() != 2 or dense.ndim != 2 or \
            sparse.shape[1] != dense.shape[0]:
        raise RuntimeError(f"{op}: expected a 2-D sparse (m, k) and a 2-D dense (k, n) "
                           f"matrix, got sizes {tuple(sparse.shape)} and {tuple(dense.shape)}")


def mm(sparse: SparseCOOTensor, dense: Tensor) -> Tensor:
    """``sparse @ dense`` as a strided tensor (``torch.sparse.mm``), with gradients to
    ``dense`` and to the sparse values. SciPy's CSR kernel computes it.

    Raises:
        TypeError: the operands are not (sparse, dense).
        RuntimeError: shapes do not chain.
    """
    if isinstance(sparse, Tensor) and isinstance(dense, Tensor):
        return sparse @ dense
    _check_mm("sparse.mm", sparse, dense)
    em = _em()
    dt = em.promote_types(sparse.dtype, dense.dtype)
    return _sparse_ops.sparse_mm_p(sparse._values.to(dt), dense.to(dt), sparse._indices,
                                   m=int(sparse.shape[0]))


spmm = mm


def addmm(mat: Tensor, mat1: SparseCOOTensor, mat2: Tensor, *, beta=1, alpha=1) -> Tensor:
    """``beta * mat + alpha * (mat1 @ mat2)`` with sparse ``mat1`` (``torch.sparse.addmm``)."""
    prod = mm(mat1, mat2)
    if alpha != 1:
        prod = prod * alpha
    return prod + (mat * beta if beta != 1 else mat)


def sum(input: SparseCOOTensor, dim=None, dtype=None):  # noqa: A001 - torch.sparse.sum
    """Sum of a sparse tensor (``torch.sparse.sum``): all entries (a 0-d strided tensor),
    or over ``dim`` — a strided tensor when every sparse dim is reduced, else a sparse one
    (built from the reduced dense result: entries summing to exactly zero are dropped)."""
    if not isinstance(input, SparseCOOTensor):
        raise TypeError(f"sparse.sum: expected a sparse COO tensor, got {type(input).__name__}")
    vals = input._values if dtype is None else input._values.to(dtype)
    if dim is None:
        return vals.sum()
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(d % input.dim() for d in dims)
    out = input.to_dense(dtype).sum(dims)
    left = input.sparse_dim() - len([d for d in dims if d < input.sparse_dim()])
    return out if left == 0 else _to_sparse(out, left)


Tensor.to_sparse = _to_sparse
Tensor.to_sparse_coo = lambda self: _to_sparse(self)
