"""``swap_in_optimizer_params_and_state`` (``torch.optim``'s): run an optimizer on other
parameter tensors and an ``optimizer.state_dict()``-shaped state, restoring it after."""
from __future__ import annotations

import contextlib
from collections import defaultdict

__all__ = ["swap_in_optimizer_params_and_state"]

_NAME = "swap_in_optimizer_params_and_state"


def _check_state(state) -> dict:
    from ..tensor import Tensor
    if not isinstance(state, dict):
        raise RuntimeError(f"{_NAME} requires swapin_optim_state['state'] to be a dict mapping "
                           f"packed parameter ids to per-param state dicts, got "
                           f"{type(state).__name__}.")
    if any(isinstance(k, Tensor) for k in state):
        raise RuntimeError(f"{_NAME} requires optimizer.state_dict()-style state keyed by "
                           f"packed parameter ids.")
    if any(isinstance(k, int) and not isinstance(v, dict) for k, v in state.items()):
        raise RuntimeError(f"{_NAME} requires per-parameter optimizer state entries to be "
                           f"dictionaries.")
    return state


def _check_group(idx, group, swap) -> list:
    if not isinstance(swap, dict):
        raise RuntimeError(f"{_NAME} requires each optimizer param group to be a dictionary.")
    ids = swap.get("params")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise RuntimeError(f"{_NAME} requires optimizer.state_dict()-style "
                           f"param_groups[*]['params'] entries keyed by packed parameter ids.")
    if len(group["params"]) != len(ids):
        raise RuntimeError(f"swapin_optim_state param group {idx} has a different number of "
                           f"params than the live optimizer param group.")
    only_swap = [k for k in swap if k not in group]
    only_live = [k for k in group if k not in swap]
    if only_swap or only_live:
        raise RuntimeError(f"{_NAME} requires param group keys to exactly match the live "
                           f"optimizer group keys for group {idx}. Keys only in swap-in: "
                           f"{only_swap}. Keys only in live: {only_live}.")
    return ids


def _prepare(optimizer, params: dict, osd: dict):
    """Validated ``(state by packed id, [(live group, swap group, swap params)])``."""
    if not optimizer.state:
        raise RuntimeError(f"{_NAME} requires initialized optimizer state.")
    if not isinstance(osd, dict):
        raise RuntimeError(f"{_NAME} requires an optimizer state_dict()-shaped dict.")
    state = _check_state(osd.get("state"))
    groups = osd.get("param_groups")
    if not isinstance(groups, list) or len(groups) != len(optimizer.param_groups):
        raise RuntimeError("swapin_optim_state has a different number of parameter groups "
                           "than the live optimizer (or param_groups is not a list).")
    flat, offset, seen, infos = list(params.values()), 0, set(), []
    for idx, (group, swap) in enumerate(zip(optimizer.param_groups, groups)):
        ids = _check_group(idx, group, swap)
        seen.update(ids)
        if offset + len(ids) > len(flat):
            raise RuntimeError(f"{_NAME} requires the explicit parameter state to match "
                               f"optimizer.param_groups ordering.")
        infos.append((group, swap, flat[offset:offset + len(ids)]))
        offset += len(ids)
    extra = [k for k in state if k not in seen]
    if extra:
        raise RuntimeError(f"{_NAME} requires swapin_optim_state['state'] to be keyed only by "
                           f"packed parameter ids from param_groups[*]['params']; got extra "
                           f"keys {extra!r}.")
    return state, infos


@contextlib.contextmanager
def swap_in_optimizer_params_and_state(optimizer, swapin_parameters: dict,
                                       swapin_optim_state: dict):
    """Temporarily give ``optimizer`` other parameters and state (restored on exit).

    Args:
        optimizer: the live optimizer; its state must already be initialised.
        swapin_parameters: tensors to use as parameters, in the order of the optimizer's
            parameters (e.g. ``dict(model.named_parameters())`` of a copy).
        swapin_optim_state: an ``optimizer.state_dict()``-shaped dict; in-place updates of
            its tensors during the context are what ``step()`` leaves in it.

    Example:
        >>> with swap_in_optimizer_params_and_state(opt, params_copy, state_copy):
        ...     opt.step()       # updates params_copy and state_copy, not the live model
    """
    state, infos = _prepare(optimizer, swapin_parameters, swapin_optim_state)
    original_state = optimizer.state
    snapshots = [dict(g) for g in optimizer.param_groups]
    try:
        swapped = defaultdict(dict)
        for live, swap, params in infos:
            live["params"] = params
            live.update((k, v) for k, v in swap.items() if k != "params")
            for p, pid in zip(params, swap["params"]):
                swapped[p] = dict(state.get(pid, {}))
        optimizer.state = swapped
        yield
    finally:
        for group, snap in zip(optimizer.param_groups, snapshots):
            group.clear()
            group.update(snap)
        optimizer.state = original_state
