"""Identity bases for ``jacrev``/``jacfwd``: rows of ``eye(total)`` split per pytree leaf.

A Jacobian is one batched VJP (``jacrev``) or JVP (``jacfwd``) over the standard basis of
the outputs' (inputs') flattened elements. The basis is built in chunks of at most
``chunk_size`` rows, so a large Jacobian never holds the whole ``total x total`` identity.
"""
from __future__ import annotations

from ..tensor import Tensor

__all__ = ["chunks", "basis_rows", "split_rows"]


def check_chunk_size(chunk_size, where: str):
    if chunk_size is None:
        return None
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"{where}: chunk_size should be None or a positive int, got "
                         f"{chunk_size!r}")
    return chunk_size


def chunks(total: int, chunk_size):
    """``(start, stop)`` row ranges covering ``range(total)``, each at most ``chunk_size``."""
    step = total if chunk_size is None else chunk_size
    return [(a, min(a + step, total)) for a in range(0, total, max(step, 1))]


def basis_rows(leaves, start: int, stop: int) -> list:
    """Rows ``start:stop`` of the identity over all elements of ``leaves``, one block each.

    Block ``j`` has shape ``(stop - start, *leaves[j].shape)`` and ``leaves[j]``'s dtype.
    """
    from ..ops.factories import arange
    rows = arange(start, stop, device=leaves[0].device).unsqueeze(1)
    out, offset = [], 0
    for x in leaves:
        n = x.numel()
        cols = arange(offset, offset + n, device=x.device).unsqueeze(0)
        out.append((rows == cols).to(x.dtype).reshape((stop - start,) + tuple(x.shape)))
        offset += n
    return out


def split_rows(stacked: Tensor, leaves, dim: int = 0) -> list:
    """``stacked`` (``total`` along ``dim``) split into one piece per leaf, that leaf's
    shape replacing ``dim``."""
    out, offset = [], 0
    for x in leaves:
        n = x.numel()
        piece = stacked.narrow(dim, offset, n)
        shape = tuple(stacked.shape)
        d = dim % stacked.ndim
        out.append(piece.reshape(shape[:d] + tuple(x.shape) + shape[d + 1:]))
        offset += n
    return out
