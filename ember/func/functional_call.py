"""``functional_call``: call a module with other parameters and buffers (``torch.func``).

The module's own tensors are swapped out for the call and back in afterwards (even when
the call raises), so ``grad``, ``vjp``, ``jacrev`` and ``vmap`` can differentiate or batch
with respect to a dict of weights. ``ember.nn.utils.stateless.functional_call`` is the
same code with a single dict.

Example:
    >>> model = ember.nn.Linear(3, 2)
    >>> params = {k: v.detach() for k, v in model.named_parameters()}
    >>> loss = lambda p, x: functional_call(model, p, (x,)).sum()
    >>> grads = ember.func.grad(loss)(params, ember.randn(4, 3))   # {'bias': ..., 'weight': ...}
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence

from ..tensor import Tensor

__all__ = ["functional_call"]

_MISSING = object()


def merge_dicts(dicts) -> dict:
    """One ``{name: tensor}`` from a dict or a sequence of dicts with distinct keys."""
    if isinstance(dicts, dict):
        return dicts
    if not isinstance(dicts, Sequence) or isinstance(dicts, str):
        raise ValueError(f"functional_call: expected parameter_and_buffer_dicts to be a dict, "
                         f"or a list/tuple of dicts, but got {type(dicts).__name__}")
    if not all(isinstance(d, dict) for d in dicts):
        raise ValueError("functional_call: expected all elements of parameter_and_buffer_dicts "
                         "to be dictionaries")
    out: dict = {}
    repeated: list = []
    for d in dicts:
        repeated += [k for k in d if k in out and k not in repeated]
        out.update(d)
    if repeated:
        raise ValueError(f"functional_call: {repeated} appeared in multiple dictionaries; "
                         f"behavior of functional call is ambiguous (give each key once)")
    return out


def _all_named(module) -> dict:
    """Every parameter and buffer name (tied aliases included) -> its tensor."""
    named = dict(module.named_parameters(remove_duplicate=False))
    named.update(module.named_buffers(remove_duplicate=False))
    return named


def untie(module, values: dict) -> dict:
    """``values`` with every tied alias of a given name mapped to the given value.

    Raises:
        ValueError: two names of one tied tensor were given different values.
    """
    groups: dict = {}
    for name, t in _all_named(module).items():
        if t is not None:
            groups.setdefault(id(t), []).append(name)
    out = dict(values)
    for names in groups.values():
        given = [n for n in names if n in values]
        if len(names) < 2 or not given:
            continue
        if len({id(values[n]) for n in given}) > 1:
            raise ValueError(f"functional_call got multiple values for keys {sorted(names)}, "
                             f"which are tied. Consider using tie_weights=False")
        out.update({n: values[given[0]] for n in names})
    return out


def check_strict(module, values: dict) -> None:
    """Raise ``RuntimeError`` naming missing and unexpected keys (``strict=True``)."""
    valid = set(_all_named(module))
    missing, unexpected = sorted(valid - set(values)), sorted(set(values) - valid)
    if missing or unexpected:
        raise RuntimeError(
            f"functional_call (strict): Error(s) in reparametrizing for "
            f"{type(module).__name__}: missing keys {missing}, unexpected keys {unexpected}; "
            f"give exactly the names of named_parameters() and named_buffers(), or "
            f"strict=False")


def _owner(module, name: str):
    prefix, _, leaf = name.rpartition(".")
    try:
        owner = module.get_submodule(prefix) if prefix else module
    except AttributeError as e:
        raise AttributeError(f"functional_call: {type(module).__name__} has no submodule "
                             f"'{prefix}' (for key '{name}')") from e
    return owner, leaf


def _swap(module, name: str, value):
    """Put ``value`` at ``name``; returns what was there."""
    owner, leaf = _owner(module, name)
    for store in (owner._parameters, owner._buffers):
        if leaf in store:
            old = store[leaf]
            store[leaf] = value
            return old
    # NOTE: PyTorch sets a new attribute for an unknown name; a typo would then be ignored
    old = owner.__dict__.get(leaf, _MISSING)
    if not isinstance(old, Tensor):
        raise AttributeError(f"functional_call: {type(module).__name__} has no parameter or "
                             f"buffer '{name}' (nor a tensor attribute of that name)")
    owner.__dict__[leaf] = value
    return old


def _current(module, name: str):
    owner, leaf = _owner(module, name)
    for store in (owner._parameters, owner._buffers):
        if leaf in store:
            return store[leaf]
    return owner.__dict__.get(leaf)


@contextlib.contextmanager
def reparametrize(module, values: dict, write_back=()):
    """Swap ``values`` into ``module`` for the ``with`` body, then restore its own tensors.

    A name the module rebinds during the call (``self.foo = self.foo + 1``) has its new
    value written back into each dict of ``write_back`` that holds the name, as PyTorch
    reflects such updates in the given dict.
    """
    saved = []
    try:
        for name, value in values.items():
            saved.append((name, _swap(module, name, value)))
        yield
    finally:
        for name, _ in saved:
            new = _current(module, name)
            for d in write_back:
                if name in d and d[name] is not new:
                    d[name] = new
        for name, old in reversed(saved):
            _swap(module, name, old)


def _check_values(values: dict) -> None:
    for k, v in values.items():
        if v is not None and not isinstance(v, Tensor):
            raise TypeError(f"functional_call: value for '{k}' must be a Tensor or None, got "
                            f"{type(v).__name__}")


def call_with(module, values: dict, args, kwargs, tie_weights: bool, strict: bool,
              write_back=()):
    """The shared body of both ``functional_call``s (one merged dict of values)."""
    _check_values(values)
    if tie_weights:
        values = untie(module, values)
    if strict:
        check_strict(module, values)
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    with reparametrize(module, values, write_back):
        return module(*args, **(kwargs or {}))


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights: bool = True, strict: bool = False):
    """Call ``module`` with its parameters and buffers replaced (``torch.func.functional_call``).

    Args:
        module: the ``nn.Module`` to call.
        parameter_and_buffer_dicts: ``{name: tensor}`` by the names of ``named_parameters()``
            and ``named_buffers()``, or a tuple/list of such dicts with distinct keys.
        args: the positional argument, or a tuple of them.
        kwargs: keyword arguments of the call.
        tie_weights: names sharing one tensor in ``module`` (tied weights) all take the
            value given for any of them; different values for tied names are an error.
        strict: the keys must be exactly the module's parameter and buffer names.

    Returns:
        Whatever ``module(*args, **kwargs)`` returns. The module's own tensors are back in
        place afterwards, even when the call raised. In-place updates during the call
        (BatchNorm's running statistics in training mode) land in the given tensors; a
        name the module rebinds is written back into the dict that gave it (each of
        several dicts, where PyTorch only updates its merged copy).

    Raises:
        ValueError: duplicate keys across dicts, or different values for tied names.
        RuntimeError: ``strict`` and keys are missing or unexpected (both are named).
        AttributeError: a key names no parameter, buffer or tensor attribute (PyTorch
            would set a new attribute for the call; here a typo is not silently ignored).

    Example:
        >>> m = ember.nn.Linear(3, 2)
        >>> w = {"weight": ember.zeros(2, 3), "bias": ember.ones(2)}
        >>> ember.func.functional_call(m, w, ember.randn(4, 3))   # all ones
    """
    values = merge_dicts(parameter_and_buffer_dicts)
    dicts = (parameter_and_buffer_dicts,) if isinstance(parameter_and_buffer_dicts, dict) \
        else tuple(parameter_and_buffer_dicts)
    return call_with(module, values, args, kwargs, tie_weights, strict, dicts)
