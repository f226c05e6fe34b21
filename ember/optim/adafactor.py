"""Adafactor (``torch.optim.Adafactor``, Shazeer & Stern 2018; PyTorch's variant)."""
from __future__ import annotations

from .. import dtypes as _dt
from ..ops.factories import zeros, zeros_like
from . import _ops as O
from .adam import _new_step
from .optimizer import Optimizer

__all__ = ["Adafactor"]


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


class Adafactor(Optimizer):
    """Adafactor (``torch.optim.Adafactor``): second moments of matrices kept factored as a
    row and a column average, so the state of an ``(n, m)`` weight is ``n + m`` numbers.

    At step ``t``, with ``beta2_t = 1 - t**beta2_decay``, ``rho_t = min(lr, 1 / sqrt(t))``
    and ``alpha = max(eps2, RMS(p)) * rho_t``::

        p = p * (1 - lr * weight_decay)
        R = lerp(R, mean(g**2, -1), 1 - beta2_t);  C = lerp(C, mean(g**2, -2), 1 - beta2_t)
        V = R @ C / max(mean(R, -2), eps1)        (matrices; vectors keep V = lerp(V, g**2))
        u = g / sqrt(max(V, eps1**2));  p = p - alpha * u / max(1, RMS(u) / d)

    ``eps1=None`` means the parameter dtype's machine epsilon. ``foreach`` is accepted for
    PyTorch compatibility.

    Example:
        >>> opt = ember.optim.Adafactor(model.parameters(), lr=1e-2)
    """

    def __init__(self, params, lr: float = 1e-2, beta2_decay: float = -0.8,
                 eps: tuple = (None, 1e-3), d: float = 1.0, weight_decay: float = 0.0, *,
                 foreach=None, maximize: bool = False) -> None:
        defaults = dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d,
                        weight_decay=weight_decay, foreach=foreach, maximize=maximize)
        super().__init__(params, defaults)

    def _validate_group(self, group) -> None:
        lr = group["lr"]
        _require(not isinstance(lr, (int, float)) or lr >= 0.0,
                 f"Learning rate should be >= 0 but is: {lr}")
        super()._validate_group(group)
        _require(group["beta2_decay"] <= 0.0,
                 f"beta2_decay should be <= 0 but is: {group['beta2_decay']}")
        eps1, eps2 = group["eps"]
        _require(eps1 is None or eps1 >= 0.0, f"epsilon1 should be >= 0 but is: {eps1}")
        _require(eps2 >= 0.0, f"epsilon2 should be >= 0 but is: {eps2}")
        _require(group["d"] >= 1.0, f"Clipping threshold d should be >= 1 but is: {group['d']}")
        _require(group["weight_decay"] >= 0.0,
                 f"weight_decay should be >= 0 but is: {group['weight_decay']}")

    _complex_as_real = False   # NOTE: refuses complex parameters (below), as PyTorch

    def _state_keys(self, group) -> tuple:
        return ("step",)

    def load_state_dict(self, state_dict) -> None:
        """Load a :meth:`state_dict`, also checking the factored second moments: a matrix
        parameter needs ``row_var``/``col_var`` of its shape with the last (resp. second
        to last) dimension 1, a vector ``variance`` of its shape."""
        saved = state_dict["state"]
        keys = [k for g in state_dict["param_groups"] for k in g["params"]]
        params = [q for g in self.param_groups for q in g["params"]]
        for k, p in zip(keys, params):   # NOTE: before loading, so a failure changes nothing
            st = saved.get(k, saved.get(str(k)))
            if st:
                _check_factored(k, p, st)
        super().load_state_dict(state_dict)

    def _update_group(self, group) -> None:
        lr = group["lr"]
        for p, g, state in self._grads(group):
            if p.dtype.is_complex:
                raise RuntimeError("Adafactor does not support complex parameters")
            if not state:
                state["step"] = _new_step(p, group)
                if g.ndim > 1:
                    state["row_var"] = zeros(*g.shape[:-1], 1, dtype=g.dtype, device=g.device)
                    state["col_var"] = zeros(*g.shape[:-2], 1, g.shape[-1], dtype=g.dtype,
                                             device=g.device)
                else:
                    state["variance"] = zeros_like(g)
            if group["maximize"]:
                g = O.neg(g)
            _adafactor_update(p, g, state, group, lr)


def _check_factored(index: int, p, state: dict) -> None:
    shape = tuple(p.shape)
    if len(shape) > 1:
        want = {"row_var": shape[:-1] + (1,), "col_var": shape[:-2] + (1, shape[-1])}
    else:
        want = {"variance": shape}
    for key, expect in want.items():
        got = state.get(key)
        if got is None or tuple(got.shape) != expect:
            raise ValueError(
                f"Adafactor.load_state_dict: state[{index}] (parameter of shape {shape}) "
                f"needs {key!r} of shape {expect}, got "
                f"{'nothing' if got is None else tuple(got.shape)}")


def _rms(t) -> float:
    return t.norm(2).item() / (t.numel() ** 0.5)


def _adafactor_update(p, g, state, group, lr) -> None:
    eps1, eps2 = group["eps"]
    if eps1 is None:
        eps1 = _dt.finfo(p.dtype).eps
    state["step"].add_(1)
    step = state["step"].item()
    one_minus_beta2_t = step ** group["beta2_decay"]
    rho_t = min(lr, 1 / (step ** 0.5))
    alpha = max(eps2, _rms(p)) * rho_t
    if group["weight_decay"] != 0:
        p.mul_(1 - lr * group["weight_decay"])
    if g.ndim > 1:
        row_var, col_var = state["row_var"], state["col_var"]
        row_mean = g.norm(dim=-1, keepdim=True).square_().div_(g.shape[-1])
        O.lerp_(row_var, row_mean, one_minus_beta2_t)
        col_mean = g.norm(dim=-2, keepdim=True).square_().div_(g.shape[-2])
        O.lerp_(col_var, col_mean, one_minus_beta2_t)
        var_estimate = row_var @ col_var
        var_estimate.div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1))
    else:
        O.lerp_(state["variance"], g * g, one_minus_beta2_t)
        var_estimate = O.clone(state["variance"])
    update = var_estimate.clamp_(min=eps1 * eps1).rsqrt_()
    update.mul_(g)
    denom = max(1.0, update.norm(2).item() / ((update.numel() ** 0.5) * group["d"]))
    p.add_(update, alpha=-alpha / denom)
