"""``vmap``: vectorising map with ``torch.func.vmap``'s signature and semantics.

Inputs are pytrees (tuples, lists, dicts); ``in_dims`` picks the mapped dim of each leaf
(``None``: passed unchanged to every example), ``out_dims`` where each output's batch dim
goes. Inside, every primitive runs once on the whole batch through its batching rule (see
:mod:`ember.ops.batching`), so ``vmap`` composes with ``grad``, ``jvp``, ``vjp`` and itself.

Example:
    >>> x, w = ember.randn(8, 3), ember.randn(3)
    >>> ember.func.vmap(ember.dot, in_dims=(0, None))(x, w).shape     # one dot per row
    ember.Size([8])
"""
from __future__ import annotations

import functools
import itertools

from ..tensor import Tensor
from ._batched import BatchedTensor, make_batched
from ._tree import tree_flatten, tree_unflatten
from ._vmap_mode import VmapMode

__all__ = ["vmap"]

_next_level = itertools.count(1)
_RANDOMNESS = ("error", "different", "same")


def vmap(func, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None,
         allow_fallback: bool = True):
    """``func`` mapped over a batch dim of its inputs (``torch.func.vmap``).

    Args:
        func: a function of tensors (pytrees of them) returning tensors (pytrees of them).
        in_dims: the mapped dim of each input: an int or ``None`` for all of them, or a
            tuple with one entry per positional argument (an int, ``None`` or a pytree
            matching that argument). Negative dims count from the end.
        out_dims: where the batch dim goes in each output (an int, ``None`` for outputs
            that are the same for every example, or a tuple matching the outputs).
        randomness: ``"error"`` (random ops raise), ``"different"`` (independent draws
            per example) or ``"same"`` (one draw shared by the batch).
        chunk_size: run the batch in chunks of this many examples (bounds memory);
            ``None`` runs it at once.
        allow_fallback: Ember's switch (not in torch.func): with ``False`` a primitive
            without a batching rule raises instead of looping over the batch.

    Returns:
        the vectorised function.

    Semantics follow torch.func: writing a batched value in place into a tensor that is
    not batched raises; reading a batched value into Python (``item()``, ``bool()``,
    ``numpy()``) raises; ops whose output size depends on values (``nonzero``, boolean
    masks) raise. One deliberate difference: a tensor a factory (``zeros``, ``empty``...)
    made inside the vmapped function becomes batched when a batched value is written into
    it, as each example's own copy would (torch.func raises there).

    Example:
        >>> per_sample = ember.func.vmap(ember.func.grad(loss), in_dims=(None, 0, 0))
        >>> grads = per_sample(w, xs, ys)            # one gradient per example
    """
    if randomness not in _RANDOMNESS:
        raise ValueError(f"vmap: only the randomness modes {_RANDOMNESS} are supported, got "
                         f"{randomness!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or
                                   isinstance(chunk_size, bool) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0, got "
                         f"{chunk_size!r}")
    _check_dims_type(in_dims, "in_dims")
    _check_dims_type(out_dims, "out_dims")

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        leaves, spec, dims = _flat_in_dims(func, in_dims, args)
        n = _batch_size(func, in_dims, leaves, dims)
        if chunk_size is None or n <= chunk_size:
            outs, ospec = _run(func, leaves, spec, dims, n, out_dims, randomness,
                               allow_fallback, kwargs)
            return tree_unflatten(outs, ospec)
        return _chunked(func, leaves, spec, dims, n, chunk_size, out_dims, randomness,
                        allow_fallback, kwargs)
    return wrapped


def _name(func) -> str:
    return getattr(func, "__name__", repr(func))


def _check_dims_type(dims, what):
    leaves, _ = tree_flatten(dims)
    for d in leaves:
        if d is not None and (not isinstance(d, int) or isinstance(d, bool)):
            raise ValueError(f"vmap: expected {what} to be an int, None, or a (nested) tuple "
                             f"of them matching the structure of the "
                             f"{'inputs' if what == 'in_dims' else 'outputs'}, got "
                             f"{dims!r}")


def _flat_in_dims(func, in_dims, args):
    """Flat input leaves, their structure, and the mapped dim of each (or None)."""
    leaves, spec = tree_flatten(tuple(args))
    if isinstance(in_dims, int) or in_dims is None:
        return leaves, spec, [in_dims] * len(leaves)
    if not isinstance(in_dims, (tuple, list)) or len(in_dims) != len(args):
        raise ValueError(f"vmap({_name(func)}, in_dims={in_dims!r}, ...)(<inputs>): in_dims is "
                         f"not compatible with the structure of `inputs`: expected one entry "
                         f"per positional argument ({len(args)}), got {in_dims!r}")
    dims = []
    for a, d in zip(args, in_dims):
        a_leaves, a_spec = tree_flatten(a)
        if d is None or isinstance(d, int):
            dims.extend([d] * len(a_leaves))
            continue
        d_leaves, d_spec = tree_flatten(d)
        if d_spec != a_spec:
            raise ValueError(f"vmap({_name(func)}, in_dims={in_dims!r}, ...)(<inputs>): in_dims "
                             f"is not compatible with the structure of `inputs`: {d!r} vs an "
                             f"argument of structure {a_spec}")
        dims.extend(d_leaves)
    return leaves, spec, dims


def _batch_size(func, in_dims, leaves, dims) -> int:
    sizes = []
    for x, d in zip(leaves, dims):
        if d is None:
            continue
        if not isinstance(x, Tensor):
            raise ValueError(f"vmap({_name(func)}, in_dims={in_dims!r}, ...)(<inputs>): Got "
                             f"in_dim={d} for an input but the input is of type "
                             f"{type(x)}. We cannot vmap over non-Tensor arguments, please use "
                             f"None as the respective in_dim")
        nd = x.ndim
        if not -nd <= d < nd:
            raise ValueError(f"vmap({_name(func)}, in_dims={in_dims!r}, ...)(<inputs>): Got "
                             f"in_dim={d} for some input, but that input is a Tensor of "
                             f"dimensionality {nd} so expected in_dim to satisfy "
                             f"-{nd} <= in_dim < {nd}.")
        sizes.append(x.shape[d])
    if not sizes:
        raise ValueError(f"vmap({_name(func)}, in_dims={in_dims!r}, ...)(<inputs>): Got "
                         f"in_dims={in_dims!r}, but none of the inputs are Tensors over which "
                         f"vmap can be performed: at least one input must be a Tensor with a "
                         f"mapped (non-None) dim")
    if len(set(sizes)) > 1:
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped "
                         f"dimension, got sizes {sizes} for the mapped dimension (in_dims="
                         f"{in_dims!r})")
    return sizes[0]


def _run(func, leaves, spec, dims, n, out_dims, randomness, allow_fallback, kwargs):
    """One vmap level: wrap, call, unwrap. Returns (flat outputs, output structure)."""
    level = next(_next_level)
    with VmapMode(level, n, randomness, allow_fallback):
        ins = [x if d is None else make_batched(x, d % x.ndim, level)
               for x, d in zip(leaves, dims)]
        out = func(*tree_unflatten(ins, spec), **kwargs)
    outs, ospec = tree_flatten(out)
    return [_unwrap(o, od, level, n, func) for o, od in
            zip(outs, _flat_out_dims(func, out_dims, out, outs))], ospec


def _flat_out_dims(func, out_dims, out, outs):
    if isinstance(out_dims, int) or out_dims is None:
        return [out_dims] * len(outs)
    if not isinstance(out, (tuple, list)) and len(out_dims) == 1:
        return [out_dims[0]]
    d_leaves, d_spec = tree_flatten(tuple(out_dims))
    _, o_spec = tree_flatten(out if isinstance(out, (tuple, list)) else (out,))
    if d_spec == o_spec:
        return d_leaves
    if isinstance(out, (tuple, list)) and len(out_dims) == len(out):
        res = []
        for o, d in zip(out, out_dims):
            k = len(tree_flatten(o)[0])
            res.extend([d] * k if d is None or isinstance(d, int) else tree_flatten(d)[0])
        if len(res) == len(outs):
            return res
    raise ValueError(f"vmap({_name(func)}, ..., out_dims={out_dims!r})(<inputs>): out_dims is "
                     f"not compatible with the structure of `outputs`")


def _unwrap(o, od, level, n, func):
    if not isinstance(o, Tensor):
        raise ValueError(f"vmap({_name(func)}, ...): `{_name(func)}` must only return Tensors, "
                         f"got type {type(o)}. Did you mean to set out_dims= to None for "
                         f"output?")
    batched = o.__class__ is BatchedTensor and o._level == level
    if od is None:
        if batched:
            raise ValueError(f"vmap({_name(func)}, ...): `{_name(func)}` can not return a "
                             f"BatchedTensor when out_dim is None")
        return o
    nd = o.ndim + 1
    if not -nd <= od < nd:
        raise IndexError(f"vmap: out_dim={od} is out of range for an output of logical "
                         f"dimensionality {o.ndim} (expected -{nd} <= out_dim < {nd})")
    od %= nd
    if batched:
        return o._phys if o._bdim == od else o._phys.movedim(o._bdim, od)
    shape = list(o.shape)
    shape.insert(od, n)
    return o.unsqueeze(od).expand(tuple(shape))


def _chunked(func, leaves, spec, dims, n, chunk, out_dims, randomness, allow_fallback,
             kwargs):
    from ..ops.join import cat
    from ..random import get_rng_state, set_rng_state
    # NOTE: randomness="same" means one draw for the whole batch: every chunk replays it
    saved = get_rng_state() if randomness == "same" else None
    parts, ospec, od = [], None, None
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        if saved is not None:
            set_rng_state(saved)
        sub = [x if d is None else x.narrow(d, start, k) for x, d in zip(leaves, dims)]
        outs, ospec = _run(func, sub, spec, dims, k, out_dims, randomness, allow_fallback,
                           kwargs)
        if od is None:
            out = tree_unflatten(outs, ospec)
            od = _flat_out_dims(func, out_dims, out, outs)
        parts.append(outs)
    flat = []
    for j, d in enumerate(od):
        if d is None:
            flat.append(parts[0][j])
        else:
            flat.append(cat([p[j] for p in parts], dim=d))
    return tree_unflatten(flat, ospec)
