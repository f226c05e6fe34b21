"""Batching rules of the primitives (``ember.func.vmap``), JAX's ``batching.primitive_batchers``.

A rule runs on *physical* tensors: ``rule(inputs, bdims, **params) -> (out, out_bdim)``,
where ``bdims[i]`` is the batch dim of input ``i`` (``None``: the input is the same for every
example). It calls primitives on the physical tensors (below the vmap level that asked), so
autograd, forward mode and tracers see ordinary ops. An op's entry names its rule with
``defop(..., batch=...)``: a function, a generic rule's name from :data:`GENERIC`
(``"elementwise"`` — the default of elementwise ops, also right for ops that broadcast
leading dims over equal-rank cores —, ``"front"`` for ops on trailing dims only,
``"materialize"``/``"materialize_dim"`` for n-ary ops whose inputs must all carry the
batch, ``"dynamic_shape"`` for ops whose output size depends on values), or ``"loop"`` (run
per example and stack, with a one-time warning: ``ctc_loss``, whose per-example targets
have no batched layout). Rules needing more live in :mod:`.batching_rules`; a rule may
return ``NotImplemented`` for the batching patterns it does not cover (then the loop runs).

Example (``softmax``'s rule: move the batch dim first and shift ``dim`` past it)::

    defop("softmax", ..., batch=dim_rule("dim"))
"""
from __future__ import annotations

import functools

from ..autograd.grad_mode import state
from . import registry

__all__ = ["GENERIC", "rule_of", "front", "logical_ndim", "batch_size", "materialize",
           "dim_rule", "dims_rule", "pad_rank", "per_example"]


def _p(name):
    return registry.REGISTRY[name]


def logical_ndim(x, bd) -> int:
    """Rank of the per-example value of physical ``x`` with batch dim ``bd``."""
    return x.ndim - (bd is not None)


def batch_size(inputs, bdims) -> int:
    for x, d in zip(inputs, bdims):
        if d is not None:
            return x.shape[d]
    raise ValueError("batching rule called with no batched input")


def front(x, bd):
    """``x`` with its batch dim ``bd`` moved to dim 0 (unchanged if ``bd`` is 0 or None)."""
    if not bd:
        return x
    dims = (bd,) + tuple(i for i in range(x.ndim) if i != bd)
    return _p("permute")(x, dims=dims)


def pad_rank(x, rank: int):
    """Front-batched ``x`` reshaped to ``rank`` logical dims by inserting size-1 dims after
    the batch dim (NumPy-style right-aligned broadcasting of the per-example values)."""
    r = x.ndim - 1
    if r >= rank:
        return x
    s = tuple(x.shape)
    return _p("reshape")(x, shape=(s[0],) + (1,) * (rank - r) + s[1:])


def materialize(x, bd, size: int):
    """``x`` with a batch dim of ``size`` at 0: moved there, or broadcast (an expand view)."""
    if bd is not None:
        return front(x, bd)
    s = tuple(x.shape)
    return _p("expand")(_p("reshape")(x, shape=(1,) + s), shape=(size,) + s)


def _shift(d, rank):
    """Logical dim ``d`` (may be negative) as a physical dim of a front-batched tensor."""
    if rank == 0:
        return 1 if d in (0, -1) else d + 1
    return d % rank + 1


# ---------------------------------------------------------------------------- generic rules
def _maker(fn):
    """Mark ``fn(op) -> rule`` so :func:`rule_of` builds the rule from the op."""
    fn._makes_rule = True
    return fn


def _elementwise(op):
    def rule(inputs, bdims, **params):
        if len(inputs) == 1:
            return op(front(inputs[0], bdims[0]), **params), 0
        rank = max((logical_ndim(x, d) for x, d in zip(inputs, bdims)
                    if hasattr(x, "ndim")), default=0)
        args = [x if d is None else pad_rank(front(x, d), rank)
                for x, d in zip(inputs, bdims)]
        return op(*args, **params), 0
    return rule


def dim_rule(param: str, front_all: bool = False):
    """Rule of a one-input op with one logical dim parameter (``softmax``, ``cumsum``)."""
    def make(op):
        def rule(inputs, bdims, **params):
            x = front(inputs[0], bdims[0])
            r = x.ndim - 1
            d = params.get(param)
            if r == 0 and d is not None:      # a 0-d example acts as a 1-element dim
                n = x.shape[0]
                out = op(_p("reshape")(x, shape=(n, 1)), **dict(params, **{param: 1}))
                return _p("reshape")(out, shape=(n,)), 0
            if d is not None:
                params = dict(params, **{param: _shift(d, r)})
            return op(x, *inputs[1:], **params), 0
        return rule
    return _maker(make)


def dims_rule(param: str = "dim", none_means_all: bool = True):
    """Rule of a reduction over a tuple of logical dims (``None`` or ``()``: all of them)."""
    def make(op):
        def rule(inputs, bdims, **params):
            x = front(inputs[0], bdims[0])
            r = x.ndim - 1
            d = params.get(param)
            if d is None or (none_means_all and d == ()):
                d = tuple(range(1, r + 1))
            elif isinstance(d, int):
                d = _shift(d, r)
            else:
                d = tuple(_shift(i, r) for i in d)
            return op(x, **dict(params, **{param: d})), 0
        return rule
    return _maker(make)


def _front_only(op):
    """Ops acting on trailing dims only (``tril``, ``triu``): batch dim first, params kept."""
    def rule(inputs, bdims, **params):
        return op(front(inputs[0], bdims[0]), **params), 0
    return rule


def _materialize_all(shift_param=None):
    """n-ary ops whose inputs must all carry the batch dim (``cat``, gathers)."""
    def make(op):
        def rule(inputs, bdims, **params):
            n = batch_size(inputs, bdims)
            xs = [materialize(x, d, n) for x, d in zip(inputs, bdims)]
            if shift_param is not None:
                params = dict(params, **{shift_param: _shift(params[shift_param],
                                                             xs[0].ndim - 1)})
            return op(*xs, **params), 0
        return rule
    return make


def _error(op):
    def rule(inputs, bdims, **params):
        raise RuntimeError(f"vmap: We do not support batching operators that can output "
                           f"dynamic shape. Attempted to vmap over {op.name}: its output's "
                           f"size depends on each example's values. Use a fixed-size "
                           f"alternative (ember.where, a mask multiply) inside vmap.")
    return rule


#: generic rules by name: ``defop(..., batch="elementwise")`` (each takes the op).
GENERIC = {
    "elementwise": _elementwise,
    "front": _front_only,
    "materialize": _materialize_all(),
    "materialize_dim": _materialize_all("dim"),
    "dynamic_shape": _error,
}

_CACHE: dict = {}


def rule_of(op):
    """``op``'s batching rule as a function, ``"loop"``, or None when it declares none."""
    b = op.batch
    if b is None or b == "loop":
        return b
    r = _CACHE.get(op.name)
    if r is None or r[0] is not b:
        if isinstance(b, str):
            if b not in GENERIC:
                raise ValueError(f"{op.name}: unknown generic batching rule {b!r}; valid: "
                                 f"{sorted(GENERIC)} or 'loop'")
            fn = GENERIC[b](op)
        elif getattr(b, "_makes_rule", False):
            fn = b(op)
        else:
            fn = b
        r = _CACHE[op.name] = (b, fn)
    return r[1]


def per_example(fn):
    """Decorate a *composite* that reads tensor values on the host (NumPy code on
    ``.numpy()``, a ``bool()`` check): inside ``vmap`` it runs once per example and the
    results are stacked (with a one-time warning, as a primitive's loop fallback), where it
    would otherwise raise vmap's data-dependent error. Outside vmap it costs one check.

    Example:
        >>> @per_example
        ... def mode(input, dim=-1, keepdim=False): ...
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if state.modes:
            hook = getattr(state.modes[-1], "per_example", None)
            if hook is not None:
                return hook(fn, wrapper, args, kwargs)
        return fn(*args, **kwargs)
    return wrapper
