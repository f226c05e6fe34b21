"""``F.embedding(..., sparse=True)``: the weight's gradient as a COO tensor of the touched rows.

The looked-up rows are a fresh leaf (a copy of ``weight[indices]``); once a ``backward()``
has accumulated its gradient, a post-accumulate hook turns it into a sparse COO gradient
``(indices=[[i...]], values=rows' gradients, size=weight.shape)`` and adds it into
``weight.grad`` (sparse + sparse concatenates, as PyTorch's uncoalesced accumulation).
Limitation: only ``backward()`` into ``.grad`` sees this gradient; ``autograd.grad(out,
weight)`` does not reach ``weight`` through a sparse lookup (use ``sparse=False``).
"""
from __future__ import annotations

from ..tensor import Tensor
from ._coo import SparseCOOTensor


def sparse_embedding(flat: Tensor, weight: Tensor, padding_idx: int | None) -> Tensor:
    """``weight[flat]`` whose backward deposits a sparse gradient into ``weight.grad``."""
    rows = weight.detach().index_select(0, flat).requires_grad_(True)

    def deposit(leaf: Tensor) -> None:
        g, leaf.grad = leaf.grad, None
        idx = flat
        if padding_idx is not None:     # NOTE: PyTorch drops the padding entries
            keep = (flat != padding_idx).nonzero().reshape(-1)
            idx, g = flat.index_select(0, keep), g.index_select(0, keep)
        sg = SparseCOOTensor(idx.reshape(1, -1).clone(), g.detach(), tuple(weight.shape))
        old = weight._grad
        if old is None:
            weight._grad = sg
        elif isinstance(old, SparseCOOTensor):
            weight._grad = old + sg
        else:
            weight._grad = old + sg.to_dense()

    rows.register_post_accumulate_grad_hook(deposit)
    return rows
