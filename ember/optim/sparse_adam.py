"""SparseAdam (``torch.optim.SparseAdam``) and the sparse-gradient update SGD shares.

Both consume the COO gradients ``Embedding(sparse=True)`` produces: only the touched rows of
the parameter (and of SparseAdam's moments) are read and written.
"""
from __future__ import annotations

import math

from .optimizer import Optimizer, _check

__all__ = ["SparseAdam"]


def _flat(t, sparse_dim: int):
    """``t`` as ``(prod(sparse dims), *dense dims)``, a view (parameters are contiguous)."""
    return t.view((-1,) + tuple(t.shape[sparse_dim:]))


def _lin(g):
    import ember
    return ember.tensor(g._linear(), dtype=ember.int64)


def sparse_add_(p, g, alpha: float) -> None:
    """``p += alpha * g`` for a sparse COO ``g`` (duplicate indices accumulate)."""
    _flat(p, g.sparse_dim()).index_add_(0, _lin(g), g._values.detach().to(p.dtype) * alpha)


def sgd_sparse_update(p, g, group, lr: float):
    """SGD with a sparse ``g``: plain SGD updates only the touched rows (``p -= lr * g``)
    and returns None; with momentum or weight decay it returns ``g`` densified for the
    dense update — PyTorch's sparse momentum buffer and ``grad + wd * p`` hold the same
    numbers as the dense ones (untouched rows are zeros that stay zeros)."""
    if group["momentum"] != 0 or group["weight_decay"] != 0:
        return g.to_dense().detach().to(p.dtype)
    sparse_add_(p, g, lr if group["maximize"] else -lr)
    return None


class SparseAdam(Optimizer):
    """Adam for sparse gradients (``torch.optim.SparseAdam``): only the rows a gradient
    touches update their moments and values (PyTorch's "lazy" Adam)::

        m[rows] += (1 - b1) * (g - m[rows]);  v[rows] += (1 - b2) * (g*g - v[rows])
        p[rows] -= lr * sqrt(1 - b2**t) / (1 - b1**t) * m[rows] / (sqrt(v[rows]) + eps)

    Example:
        >>> emb = ember.nn.Embedding(10, 3, sparse=True)
        >>> opt = ember.optim.SparseAdam(emb.parameters(), lr=0.01)
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, maximize: bool = False) -> None:
        _check(0.0 < lr, "learning rate", lr)
        _check(0.0 < eps, "epsilon value", eps)
        _check(0.0 <= betas[0] < 1.0, "beta parameter at index 0", betas[0])
        _check(0.0 <= betas[1] < 1.0, "beta parameter at index 1", betas[1])
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, maximize=maximize))

    def _update_group(self, group) -> None:
        from ..ops.factories import zeros_like
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            if not getattr(g, "is_sparse", False):
                raise RuntimeError("SparseAdam does not support dense gradients, please "
                                   "consider Adam instead")
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = zeros_like(p)
                state["exp_avg_sq"] = zeros_like(p)
            state["step"] += 1
            g = g.coalesce()
            sd, lin = g.sparse_dim(), _lin(g)
            vals = g._values.detach()
            if group["maximize"]:
                vals = -vals
            m, v = _flat(state["exp_avg"], sd), _flat(state["exp_avg_sq"], sd)
            old_m, old_v = m.index_select(0, lin), v.index_select(0, lin)
            dm, dv = (vals - old_m) * (1 - b1), (vals * vals - old_v) * (1 - b2)
            m.index_add_(0, lin, dm)
            v.index_add_(0, lin, dv)
            t = state["step"]
            step_size = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
            upd = (dm + old_m) / ((dv + old_v).sqrt() + eps)
            _flat(p, sd).index_add_(0, lin, upd * -step_size)
