"""The *signature* ``ember.compile`` caches a captured graph under, and the ``.grad``
bookkeeping around it.

A signature is a dict of what a graph was specialised on (see :mod:`ember.graph.compile`):
each tensor argument's shape, dtype, device, ``requires_grad`` and strides (where not
row-major); Python scalars by value;
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
    names = _arg_names(len(flat))
    for i, x in enumerate(flat):
        if isinstance(x, Tensor):
            sig[names[i]] = _tensor_key(x)
        elif isinstance(x, (bool, int, float, str, type(None))):
            sig[names[i]] = repr(x)
        else:
            sig[names[i]] = f"{type(x).__name__}@{id(x):x}"
    if grad_keys:      # a leaf argument's .grad: like a parameter's (see below)
        for i, x in enumerate(flat):
            if isinstance(x, Tensor) and x._requires_grad and x._grad_fn is None:
                sig[f"arg{i}.grad"] = grad_key(x)
    sig.update(_state_keys(roots, grad_keys))
    return sig


# NOTE: a compiled call builds its signature on every call (~14 us for the W1 step, issue
# 19 item 7): the strings below are remembered (same text, built once) instead of being
# formatted again — a tensor's description by its (dtype, shape, device, requires_grad),
# the key names by the position or label they are made from, an optimizer group's
# hyper-parameters while the group holds the very same immutable values.
_ARG_NAMES: list = []
_TENSOR_KEYS: dict = {}
_GRAD_KEYS: dict = {}


def _arg_names(n: int) -> list:
    while len(_ARG_NAMES) < n:
        _ARG_NAMES.append(f"arg{len(_ARG_NAMES)}")
    return _ARG_NAMES


def _tensor_key(x: Tensor) -> str:
    d = x._device
    a = x._data
    # NOTE: the layout too (strides unless row-major; a meta array has none): a graph's
    # outputs keep the layout its capture gave them (capture.out_tensor), as torch.compile
    # specialises on strides
    st = None if d.type == "meta" or a.flags.c_contiguous else a.strides
    # NOTE: the device by type and index as written: device('cuda') == device('cuda:0'),
    # but they print differently, and the text is what a signature holds
    k = (x._dtype, a.shape, d.type, d.index, x._requires_grad, st)
    s = _TENSOR_KEYS.get(k)
    if s is None:
        s = (f"{x._dtype.name}[{', '.join(map(str, a.shape))}] {x._device}"
             + (" requires_grad" if x._requires_grad else "")
             + ("" if st is None else
                f" strides({', '.join(str(b // a.itemsize) for b in st)})"))
        if len(_TENSOR_KEYS) < 4096:
            _TENSOR_KEYS[k] = s
    return s


class _Keys:
    """The key names of one :class:`~ember.graph.discover.Roots` (made once per roots)."""

    __slots__ = ("sizes", "training", "grads", "groups", "states", "hp")

    def __init__(self, r: "Roots"):
        self.sizes = (len(r.modules), len(r.params), len(r.optimizers))
        self.training = [f"{label}.training" for label, _ in r.modules]
        self.grads = [f"{label}.grad" for label, _ in r.params]
        self.groups = [f"{label}.param_groups" for label, _ in r.optimizers]
        self.states = [f"{label}.state" for label, _ in r.optimizers]
        self.hp: dict = {}       # id(group) -> (group, len, its values, their repr)


def _keys(r: "Roots") -> _Keys:
    k = getattr(r, "_sig_keys", None)
    if k is None or k.sizes != (len(r.modules), len(r.params), len(r.optimizers)):
        k = r._sig_keys = _Keys(r)
    return k


_IMMUTABLE = (int, float, str, type(None))


def _immutable(v) -> bool:
    if isinstance(v, tuple):
        return all(_immutable(e) for e in v)
    return isinstance(v, _IMMUTABLE)


def _hp_key(keys: _Keys, g: dict) -> str:
    """``repr`` of group ``g``'s hyper-parameters (the learning rate and params excepted),
    remembered while ``g`` holds the same immutable value objects."""
    hit = keys.hp.get(id(g))
    if hit is not None and hit[0] is g and hit[1] == len(g) and \
            all(g.get(k, hit) is v for k, v in hit[2]):
        return hit[3]
    vals = tuple((k, v) for k, v in g.items() if k not in ("params", "lr"))
    text = repr(tuple(sorted(vals, key=lambda kv: kv[0])))
    if all(_immutable(v) for _, v in vals):
        keys.hp[id(g)] = (g, len(g), vals, text)
    return text


def _state_keys(r: "Roots", grad_keys: bool) -> dict:
    """The signature's entries for the modules and optimizers the function reaches."""
    keys = _keys(r)
    sig = {}
    for name, (_, m) in zip(keys.training, r.modules):
        sig[name] = m.training
    if grad_keys:
        for name, (_, p) in zip(keys.grads, r.params):
            sig[name] = grad_key(p)
    for gname, sname, (_, opt) in zip(keys.groups, keys.states, r.optimizers):
        state = opt.state
        for gi, g in enumerate(opt.param_groups):
            sig[f"{gname}[{gi}]"] = _hp_key(keys, g)
            sig[f"{sname}[{gi}]"] = tuple(len(state.get(p, ())) if p in state else 0
                                          for p in g["params"])
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
    if g is None:
        return "None"
    k = (g._dtype, g._data.shape)
    s = _GRAD_KEYS.get(k)
    if s is None:
        s = f"{g._dtype.name}[{', '.join(map(str, g._data.shape))}]"
        if len(_GRAD_KEYS) < 4096:
            _GRAD_KEYS[k] = s
    return s


def arg_leaves(flat) -> list:
    """The tensor arguments whose ``.grad`` a ``backward()`` in the function may fill."""
    return [x for x in flat if isinstance(x, Tensor) and x._requires_grad and x._grad_fn is None]
