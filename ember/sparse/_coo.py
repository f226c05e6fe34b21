"""The sparse COO tensor: a small type of its own beside the strided ``Tensor``.

A :class:`SparseCOOTensor` holds ``indices`` (``(sparse_dim, nnz)`` int64), ``values``
(``(nnz, *dense_dims)``, an ordinary tensor that keeps its autograd history, so gradients
reach it through ``to_dense``, ``ember.sparse.mm``...) and ``size``. Duplicate indices sum
(as in PyTorch; ``coalesce()`` merges them). Only the sparse operations are defined; any
other tensor method raises a ``TypeError`` naming it and suggesting ``.to_dense()``.
"""
from __future__ import annotations

import sys

import numpy as np

from .._torch_globals import layout
from ..tensor import Tensor

sparse_coo = layout("sparse_coo")

_NOT_SPARSE = ("{op}: not supported on a sparse COO tensor (layout=ember.sparse_coo, size "
               "{size}); call .to_dense() first, or use ember.sparse.mm/addmm/sum")


def _calling_op() -> str:
    """The primitive being dispatched when a dense op reads a sparse tensor's fields."""
    f = sys._getframe(2)
    while f is not None:
        op = f.f_locals.get("op")
        if getattr(op, "name", None) and type(op).__name__ == "Op":
            return op.name
        f = f.f_back
    return "a dense op"


def _ember():
    import ember
    return ember


class SparseCOOTensor:
    """A sparse tensor in COO layout (``torch.sparse_coo_tensor``'s result).

    Example:
        >>> s = ember.sparse_coo_tensor([[0, 1], [1, 2]], [3., 4.], (3, 3))
        >>> s.to_dense()[1, 2].item()
        4.0
    """

    is_sparse = True
    is_sparse_csr = False
    layout = sparse_coo

    def __init__(self, indices: Tensor, values: Tensor, size, coalesced: bool = False):
        self._indices, self._values = indices, values
        self._size = tuple(int(s) for s in size)
        self._coalesced = coalesced

    # ------------------------------------------------------------ structure
    @property
    def shape(self):
        return _ember().Size(self._size)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self._size[dim]

    def dim(self) -> int:
        return len(self._size)

    ndim = property(dim)
    dtype = property(lambda self: self._values.dtype)
    device = property(lambda self: self._values.device)
    requires_grad = property(lambda self: self._values.requires_grad)
    grad_fn = property(lambda self: self._values.grad_fn)
    is_leaf = property(lambda self: self._values.is_leaf)

    def sparse_dim(self) -> int:
        return int(self._indices.shape[0])

    def dense_dim(self) -> int:
        return self.dim() - self.sparse_dim()

    def _nnz(self) -> int:
        return int(self._values.shape[0])

    def indices(self) -> Tensor:
        """The ``(sparse_dim, nnz)`` int64 indices (PyTorch requires a coalesced tensor)."""
        if not self._coalesced:
            raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call "
                               ".coalesce() first")
        return self._indices

    def values(self) -> Tensor:
        """The ``(nnz, *dense_dims)`` values (gradients flow through them)."""
        if not self._coalesced:
            raise RuntimeError("Cannot get values on an uncoalesced tensor, please call "
                               ".coalesce() first")
        return self._values

    def is_coalesced(self) -> bool:
        return self._coalesced

    def numel(self) -> int:
        return int(np.prod(self._size))

    def requires_grad_(self, requires_grad: bool = True) -> "SparseCOOTensor":
        self._values.requires_grad_(requires_grad)
        return self

    @property
    def grad(self):
        """The gradient with respect to this tensor, sparse over its positions (or None).

        Every op reads the matrix the entries sum to, so duplicate entries of one position
        get the same value gradient, which is the position's gradient (not their sum).
        """
        g = self._values.grad
        if g is None or self._coalesced:
            return None if g is None else SparseCOOTensor(self._indices, g, self._size, True)
        em = _ember()
        uniq, first = np.unique(self._linear(), return_index=True)
        idx = np.stack(np.unravel_index(uniq, self._size[:self.sparse_dim()])).reshape(
            self.sparse_dim(), len(uniq)).astype(np.int64)
        dev = self._values.device
        return SparseCOOTensor(em.tensor(idx, device=dev),
                               g[em.tensor(first, dtype=em.int64, device=dev)],
                               self._size, coalesced=True)

    def detach(self) -> "SparseCOOTensor":
        return SparseCOOTensor(self._indices, self._values.detach(), self._size,
                               self._coalesced)

    def to(self, *args, **kwargs) -> "SparseCOOTensor":
        return SparseCOOTensor(self._indices, self._values.to(*args, **kwargs), self._size,
                               self._coalesced)

    def clone(self) -> "SparseCOOTensor":
        return SparseCOOTensor(self._indices.clone(), self._values.clone(), self._size,
                               self._coalesced)

    def zero_(self) -> "SparseCOOTensor":
        """Drop every entry (nnz becomes 0), in place."""
        self._indices = self._indices[:, :0]
        self._values = self._values.detach()[:0]
        self._coalesced = True
        return self

    def detach_(self) -> "SparseCOOTensor":
        self._values = self._values.detach()
        return self

    # ------------------------------------------------------------ conversions
    def _linear(self) -> np.ndarray:
        """Each entry's row-major position among the sparse dims."""
        idx = self._indices.cpu().numpy()     # NOTE: indices are read on the host
        sizes = self._size[:self.sparse_dim()]
        return np.ravel_multi_index(tuple(idx), sizes) if idx.size else np.zeros(0, np.int64)

    def coalesce(self) -> "SparseCOOTensor":
        """Sorted unique indices, duplicates' values summed (differentiable in values)."""
        if self._coalesced:
            return self
        em = _ember()
        uniq, inv = np.unique(self._linear(), return_inverse=True)
        dense_shape = tuple(self._values.shape[1:])
        vals = em.zeros((len(uniq),) + dense_shape, dtype=self.dtype, device=self.device)
        vals = vals.index_add(0, em.tensor(inv.reshape(-1), dtype=em.int64, device=self.device),
                              self._values)
        idx = np.stack(np.unravel_index(uniq, self._size[:self.sparse_dim()])).reshape(
            self.sparse_dim(), len(uniq)).astype(np.int64)
        return SparseCOOTensor(em.tensor(idx, device=self.device), vals, self._size,
                               coalesced=True)

    def to_dense(self, dtype=None) -> Tensor:
        """The strided tensor (duplicates summed; differentiable in values)."""
        em = _ember()
        sd = self.sparse_dim()
        n = int(np.prod(self._size[:sd]))
        flat = em.zeros((n,) + self._size[sd:], dtype=self.dtype, device=self.device)
        lin = em.tensor(self._linear(), dtype=em.int64, device=self.device)
        out = flat.index_add(0, lin, self._values).reshape(self._size)
        return out if dtype is None else out.to(dtype)

    def to_sparse(self, sparse_dim: int | None = None) -> "SparseCOOTensor":
        return self

    to_sparse_coo = to_sparse

    # ------------------------------------------------------------ arithmetic
    def t(self) -> "SparseCOOTensor":
        if self.dim() != 2 or self.sparse_dim() != 2:
            raise RuntimeError(f"t: expected a 2-D sparse matrix, got size {self._size}")
        return SparseCOOTensor(self._indices.flip(0), self._values, self._size[::-1])

    def __matmul__(self, other):
        from . import mm
        return mm(self, other)

    def __add__(self, other):
        if isinstance(other, SparseCOOTensor):
            if other._size != self._size:
                raise RuntimeError(f"add: sparse sizes differ, {self._size} and {other._size}")
            em = _ember()
            return SparseCOOTensor(em.cat([self._indices, other._indices], 1),
                                   em.cat([self._values, other._values.to(self.dtype)], 0),
                                   self._size)
        if isinstance(other, Tensor) and tuple(other.shape) == self._size:
            return self.to_dense() + other     # NOTE: PyTorch: sparse + dense is dense
        raise TypeError(_NOT_SPARSE.format(op="add", size=self._size))

    def __mul__(self, other):
        if isinstance(other, (int, float)) or (isinstance(other, Tensor) and other.ndim == 0):
            return SparseCOOTensor(self._indices, self._values * other, self._size,
                                   self._coalesced)
        raise TypeError(_NOT_SPARSE.format(op="mul", size=self._size))

    __rmul__ = __mul__

    def __truediv__(self, other):
        if isinstance(other, (int, float)) or (isinstance(other, Tensor) and other.ndim == 0):
            return self * (1.0 / other)
        raise TypeError(_NOT_SPARSE.format(op="div", size=self._size))

    def __neg__(self):
        return self * -1

    def __sub__(self, other):
        if isinstance(other, SparseCOOTensor):
            return self + (-other)
        raise TypeError(_NOT_SPARSE.format(op="sub", size=self._size))

    def __getattr__(self, name):
        if name.startswith("__") or not hasattr(Tensor, name):
            raise AttributeError(f"'SparseCOOTensor' object has no attribute {name!r}")
        op = _calling_op() if name.startswith("_") else name
        raise TypeError(_NOT_SPARSE.format(op=op, size=self._size))

    def __len__(self) -> int:
        return self._size[0]

    def __repr__(self) -> str:
        ind = repr(self._indices).replace("\n", "\n" + " " * 15)
        val = repr(self._values.detach()).replace("\n", "\n" + " " * 14)
        extra = ""
        if self._values.grad_fn is not None:
            extra = f", grad_fn=<{type(self._values.grad_fn).__name__}>"
        elif self._values.requires_grad:
            extra = ", requires_grad=True"
        return (f"tensor(indices={ind},\n       values={val},\n       size={self._size}, "
                f"nnz={self._nnz()}, layout=ember.sparse_coo{extra})")

    __str__ = __repr__


for _op in ("__radd__", "__rtruediv__", "__pow__", "__lt__", "__le__",
            "__gt__", "__ge__", "__getitem__", "__setitem__", "__abs__", "__rmatmul__",
            "__rsub__", "__iadd__", "__imul__"):
    def _refuse(self, *args, _op=_op):
        raise TypeError(_NOT_SPARSE.format(op=_op.strip("_"), size=self._size))
    setattr(SparseCOOTensor, _op, _refuse)
