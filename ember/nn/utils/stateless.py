"""``ember.nn.utils.stateless.functional_call``: call a module with other parameters."""
from __future__ import annotations

import contextlib

from ...tensor import Tensor

__all__ = ["functional_call"]


def _merge(dicts) -> dict:
    if isinstance(dicts, dict):
        return dict(dicts)
    out: dict = {}
    for d in dicts:
        dup = set(out) & set(d)
        if dup:
            raise ValueError(f"functional_call: {sorted(dup)} appeared in multiple "
                             f"dictionaries; each key may be given once")
        out.update(d)
    return out


def _stores(module, name: str):
    prefix, _, leaf = name.rpartition(".")
    owner = module.get_submodule(prefix) if prefix else module
    for store in (owner._parameters, owner._buffers):
        if leaf in store:
            return store, leaf
    raise AttributeError(f"functional_call: {type(module).__name__} has no parameter or "
                         f"buffer '{name}'")


def _tied(module, given: dict) -> dict:
    # NOTE: names sharing one tensor (tied weights) all take the value given for any one
    names: dict = {}
    for n, t in list(module.named_parameters(remove_duplicate=False)) + \
            list(module.named_buffers(remove_duplicate=False)):
        names.setdefault(id(t), []).append(n)
    out = dict(given)
    for group in names.values():
        vals = {n: given[n] for n in group if n in given}
        if len({id(v) for v in vals.values()}) > 1:
            raise ValueError(f"functional_call: tied names {group} were given different "
                             f"values; give one, or pass tie_weights=False")
        if vals:
            v = next(iter(vals.values()))
            out.update({n: v for n in group})
    return out


@contextlib.contextmanager
def _swapped(module, values: dict):
    saved = []
    try:
        for name, value in values.items():
            store, leaf = _stores(module, name)
            saved.append((store, leaf, store[leaf]))
            store[leaf] = value
        yield
    finally:
        for store, leaf, old in reversed(saved):
            store[leaf] = old


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights: bool = True, strict: bool = False):
    """Call ``module`` with some parameters and buffers replaced (``torch.func`` style).

    Args:
        module: the module to call.
        parameter_and_buffer_dicts: ``{name: tensor}`` (or a tuple of them) by the names
            of ``named_parameters``/``named_buffers``.
        args: a positional argument or tuple of them.
        kwargs: keyword arguments.
        tie_weights: a value given for one of several tied names is used for all.
        strict: every parameter and buffer must be given, and nothing else.

    Returns:
        The module's output; the module's own tensors are restored afterwards.

    Raises:
        RuntimeError: ``strict`` and keys are missing or unexpected.
        AttributeError: a key names no parameter or buffer.
    """
    values = _merge(parameter_and_buffer_dicts)
    for k, v in values.items():
        if not isinstance(v, Tensor):
            raise TypeError(f"functional_call: value for '{k}' must be a Tensor, got "
                            f"{type(v).__name__}")
    if strict:
        names = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
        missing, unexpected = sorted(names - set(values)), sorted(set(values) - names)
        if missing or unexpected:
            raise RuntimeError(f"functional_call (strict): missing keys {missing}, "
                               f"unexpected keys {unexpected}")
    if tie_weights:
        values = _tied(module, values)
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    with _swapped(module, values):
        return module(*args, **(kwargs or {}))
