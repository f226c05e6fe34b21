"""Validation of a loaded optimizer state (``Optimizer.load_state_dict``).

A state dict read back from a file can be truncated, hand-edited or written by a run that
diverged. Loading it must fail right away, naming the entry, rather than at the next
``step()`` with a raw ``KeyError``, a NumPy casting error (a negative ``step`` makes Adam's
bias correction complex) or silently NaN parameters.
"""
from __future__ import annotations

import math

from .. import dtypes as _dt
from ..tensor import Tensor

__all__ = ["check_groups", "check_state"]

_COUNTERS = ("step",)          # integer counters, >= 0
_SCALARS = ("step", "mu_product", "eta", "mu")   # NOTE: eta, mu: ASGD's 0-d state


def check_groups(opt, groups: list) -> None:
    """Fill hyper-parameters missing from loaded ``groups`` from ``opt.defaults`` (as
    PyTorch's ``__setstate__`` does) and range-check each group like the constructor."""
    from .optimizer import required
    name = type(opt).__name__
    for i, group in enumerate(groups):
        for key, default in opt.defaults.items():
            if key not in group:
                if default is required:
                    raise ValueError(f"{name}.load_state_dict: param_groups[{i}] has no "
                                     f"{key!r} (a required hyper-parameter)")
                group[key] = default
        lr = group.get("lr")
        if isinstance(lr, (int, float)) and not math.isfinite(lr):
            raise ValueError(f"{name}.load_state_dict: param_groups[{i}]['lr'] is {lr}; "
                             "a learning rate must be a finite number >= 0")
        try:
            opt._validate_group(group)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{name}.load_state_dict: param_groups[{i}]: {e}") from None


def check_state(opt, index: int, p: Tensor, state: dict, group: dict) -> None:
    """Check one parameter's loaded ``state`` (``state_dict()["state"][index]``).

    A non-empty state must hold every entry ``opt._state_keys(group)`` names; those entries
    must be finite tensors of ``p``'s shape and a floating dtype; ``step`` must be a finite
    integer >= 0. Python numbers for ``step`` become 0-d tensors, as in PyTorch.
    """
    if not state:
        return
    where = f"{type(opt).__name__}.load_state_dict: state[{index}]"
    keys = tuple(opt._state_keys(group))
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"{where} (parameter of shape {tuple(p.shape)}) is missing "
                         f"{', '.join(map(repr, missing))}; a {type(opt).__name__} state "
                         f"holds {', '.join(map(repr, keys))}")
    for key in state:
        if key in _SCALARS:
            state[key] = _check_scalar(where, key, state[key])
        elif key in keys and state[key] is not None:
            _check_buffer(where, key, state[key], p)


def _check_scalar(where: str, key: str, value):
    from ..ops.factories import tensor
    from .optimizer import _scalar_dtype
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = tensor(float(value), dtype=_scalar_dtype())
    if not isinstance(value, Tensor) or value.ndim != 0 or value.dtype is _dt.bool \
            or value.dtype.is_complex:
        got = f"a {value.dtype} tensor of shape {tuple(value.shape)}" \
            if isinstance(value, Tensor) else type(value).__name__
        raise TypeError(f"{where}[{key!r}] must be a real number or 0-d real tensor, got {got}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{where}[{key!r}] is {v}; it must be finite")
    if key in _COUNTERS and (v < 0 or v != int(v)):
        raise ValueError(f"{where}[{key!r}] is {v}; a step count must be an integer >= 0")
    return value


def _check_buffer(where: str, key: str, value, p: Tensor) -> None:
    if not isinstance(value, Tensor):
        raise TypeError(f"{where}[{key!r}] must be a tensor of shape {tuple(p.shape)}, "
                        f"got {type(value).__name__}")
    if tuple(value.shape) != tuple(p.shape):
        raise ValueError(f"{where}[{key!r}] has shape {tuple(value.shape)}, but its "
                         f"parameter has shape {tuple(p.shape)}")
    if p.is_floating_point() and not (value.is_floating_point() or value.dtype.is_complex):
        raise TypeError(f"{where}[{key!r}] has dtype {value.dtype}; the {p.dtype} parameter "
                        "needs a floating-point state")
    if value.is_floating_point() and not bool(value.detach().isfinite().all()):
        raise ValueError(f"{where}[{key!r}] holds NaN or Inf values; the run that saved it "
                         "diverged")
