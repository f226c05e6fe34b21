"""The *signature* ``ember.compile`` caches a captured graph under, and the ``.grad``
bookkeeping around it.

A signature is a dict of what a graph was specialised on (see :mod:`ember.graph.compile`):
each tensor argument's shape, dtype, device and ``requires_grad``; Python scalars by value;
the grad mode and autocast state; each reachable module's ``training`` flag, which
parameters have a ``.grad``, the optimizers' hyper-parameters (the learning rate excepted)
and which parameters have optimizer state.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..autograd.grad_mode import state as _state
from ..tensor import Tensor

if TYPE_CHECKING:
    from .capture import Entry
    from .discover import Roots

__all__ = ["signature", "signature_diff", "grad_key", "arg_leaves", "stable", "set_grad_keys",
           "touches_grads"]


def signature(flat, spec, roots: "Roots", grad_keys: bool) -> dict:
    """The signature of a call with flattened arguments ``flat`` (tree structure ``spec``).

    Args:
        flat: the call's ``(args, kwargs)``, flattened.
        spec: their tree structure.
        roots: what the function reaches (:func:`ember.graph.discover.discover`).
        grad_keys: whether ``.grad`` fields count (False once a capture showed the
            function never touches them).
    """
    sig = {"grad_enabled": _state.grad_enabled, "structure": repr(spec)}
    if _state.autocast is not None:   # the graph holds the casts autocast chose
        from ..amp.autocast_mode import signature_key
        sig["autocast"] = signature_key()
    for i, x in enumerate(flat):
        if isinstance(x, Tensor):
            sig[f"arg{i}"] = (f"{x._dtype.name}[{', '.join(map(str, x._data.shape))}] "
                              f"{x._device}" + (" requires_grad" if x._requires_grad
                                                 else ""))
        elif isinstance(x, (bool, int, float, str, type(None))):
            sig[f"arg{i}"] = repr(x)
        else:
            sig[f"arg{i}"] = f"{type(x).__name__}@{id(x):x}"
    if grad_keys:      # a leaf argument's .grad: like a parameter's (see below)
        for i, x in enumerate(flat):
            if isinstance(x, Tensor) and x._requires_grad and x._grad_fn is None:
                sig[f"arg{i}.grad"] = grad_key(x)
    sig.update(_state_keys(roots, grad_keys))
    return sig


def _state_keys(r: "Roots", grad_keys: bool) -> dict:
    """The signature's entries for the modules and optimizers the function reaches."""
    sig = {}
    for label, m in r.modules:
        sig[f"{label}.training"] = m.training
    for label, p in (r.params if grad_keys else ()):
        sig[f"{label}.grad"] = grad_key(p)
    for label, opt in r.optimizers:
        for gi, g in enumerate(opt.param_groups):
            hp = tuple((k, v) for k, v in sorted(g.items()) if k not in ("params", "lr"))
            sig[f"{label}.param_groups[{gi}]"] = repr(hp)
            sig[f"{label}.state[{gi}]"] = tuple(len(opt.state.get(p, ())) if p in opt.state
                                                else 0 for p in g["params"])
    return sig


def signature_diff(last: dict, sig: dict, why=None, wrote=()) -> dict:
    """What changed from signature ``last`` to ``sig``: ``{key: (old, new)}``, plus a failed
    guard's entries (``why``) and the first Python paths a traced call wrote (``wrote``:
    ``(path, old, new)``), as ``explain()`` lists them."""
    diff = {k: (last.get(k), v) for k, v in sig.items() if last.get(k) != v}
    diff.update({k: (v, None) for k, v in last.items() if k not in sig})
    diff.update(why or {})          # a failed guard
    diff.update({f"{p} (written by the traced call)": (a, b) for p, a, b in wrote[:4]})
    return diff


def touches_grads(e: "Entry") -> bool:
    """Whether the captured graph reads or writes any ``.grad`` field."""
    return bool(e.grads) or any(s.kind == "grad" for s in e.sources) or any(
        t[0] == "grad" for t, _ in e.writes)


def set_grad_keys(e: "Entry", r: "Roots", flat) -> set:
    """The signature keys of the ``.grad`` fields the graph sets (anew or to None)."""
    owners = {id(p) for p, _, _ in e.grads}
    keys = {f"{label}.grad" for label, p in r.params if id(p) in owners}
    return keys | {f"arg{i}.grad" for i, x in enumerate(flat) if id(x) in owners}


def stable(before: dict, after: dict, replayed: set) -> bool:
    """Whether a call with signature ``before`` can be replayed by its graph: it left the
    signature as it found it, up to the ``.grad`` fields the graph itself sets each run
    (``backward()`` filling a None gradient, ``zero_grad()`` clearing one)."""
    return before.keys() == after.keys() and all(
        after[k] == v for k, v in before.items() if k not in replayed)


def grad_key(p: Tensor) -> str:
    """What a signature records of ``p.grad``: None, or its dtype and shape."""
    g = p.grad
    return "None" if g is None else f"{g._dtype.name}[{', '.join(map(str, g._data.shape))}]"


def arg_leaves(flat) -> list:
    """The tensor arguments whose ``.grad`` a ``backward()`` in the function may fill."""
    return [x for x in flat if isinstance(x, Tensor) and x._requires_grad and x._grad_fn is None]
