"""Linear-algebra primitives: matmul (with every broadcasting case of torch.matmul)."""
from __future__ import annotations

from ..errors import ShapeError
from ..tensor import Tensor
from . import dispatch
from .registry import defop

__all__ = ['matmul']

_apply = dispatch.apply


def _matmul_check(x, y):
    xs, ys = x._data.shape, y._data.shape
    if len(xs) == 0 or len(ys) == 0:
        raise ShapeError(f"matmul: both arguments need at least 1 dimension, got shapes "
                         f"{tuple(xs)} and {tuple(ys)}")
    k1 = xs[-1]
    k2 = ys[-2] if len(ys) > 1 else ys[0]
    if k1 != k2:
        raise ShapeError(f"matmul: shapes {tuple(xs)} and {tuple(ys)} cannot be multiplied "
                         f"({k1} != {k2}: the last dim of the first must equal the "
                         f"{'first' if len(ys) == 1 else 'second-to-last'} dim of the second)")
    if len(xs) > 2 and len(ys) > 2 or (len(xs) > 2 and len(ys) == 2) or len(ys) > 2:
        from .dispatch import broadcast_shapes
        broadcast_shapes(xs[:-2], ys[:-2], op="matmul (batch dims)")


def _mm_grad_x(g, out, x, y):
    if y.ndim == 1:
        g = g.unsqueeze(-1)
        y = y.unsqueeze(0)        # (k,) -> (1, k): grad_x = g (…,n,1) @ (1,k)
        r = g @ y
    elif x.ndim == 1:
        r = (g.unsqueeze(-2) @ y.mT).squeeze(-2)
    else:
        r = g @ y.mT
    return r


def _mm_grad_y(g, out, x, y):
    if x.ndim == 1:
        xm = x.unsqueeze(-1)                     # (k, 1)
        gm = g.unsqueeze(-2) if y.ndim > 1 else g.reshape(1)
        r = xm @ gm if y.ndim > 1 else x * g
    elif y.ndim == 1:
        r = (x.mT @ g.unsqueeze(-1)).squeeze(-1)
    else:
        r = x.mT @ g
    return r


matmul_p = defop(
    "matmul", nin=2, check=_matmul_check,
    kernel=lambda xp, x, y: xp.matmul(x, y),
    vjp=(_mm_grad_x, _mm_grad_y),
    jvp=lambda t, out, x, y: t[0] @ y + x @ t[1])


def matmul(input, other, *, out=None):
    """Matrix product with NumPy/PyTorch broadcasting semantics (``torch.matmul``)."""
    r = _apply(matmul_p, (input, other), {})
    if out is not None:
        from .inplace import copy_into_out
        return copy_into_out(out, r)
    return r


Tensor.__matmul__ = lambda self, other: _apply(matmul_p, (self, other), {})
Tensor.__rmatmul__ = lambda self, other: _apply(matmul_p, (other, self), {})
Tensor.matmul = matmul
