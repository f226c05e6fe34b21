"""Reverse-mode transforms: ``grad``, ``grad_and_value``, ``value_and_grad``, ``vjp``, ``jacrev``.

Each call differentiates with fresh stand-ins for the chosen inputs, so inputs need
not require grad and transforms compose (``grad(grad(f))``). The backward pass is
recorded (``create_graph``) only when the result must stay differentiable: when it
depends on tensors an outer graph tracks, or while forward-mode AD is active.

Example:
    >>> df = ember.func.grad(lambda x: (x ** 3).sum())
    >>> df(ember.tensor([2.0]))              # tensor([12.])
    >>> ember.func.grad(ember.func.grad(lambda x: x ** 3))(ember.tensor(2.0))   # tensor(12.)
"""
from __future__ import annotations

import functools

from ..autograd.engine import grad as _autograd_grad
from ..autograd.grad_mode import enable_grad, state
from ..errors import ShapeError
from ..tensor import Tensor
from ._basis import basis_rows, check_chunk_size, chunks, split_rows
from ._common import (check_argnums, detach_keep_tangent, prepare, reaches_outside, regroup,
                      retire, split_aux)
from ._tree import tree_flatten, tree_map, tree_unflatten

__all__ = ["grad", "grad_and_value", "value_and_grad", "vjp", "jacrev", "jacobian"]


def _grads(outs, cots, inputs, create):
    """Gradients of ``outs`` (with cotangents) wrt ``inputs``; zeros where unused."""
    pairs = [(o, c) for o, c in zip(outs, cots) if isinstance(o, Tensor) and o._requires_grad]
    res = [None] * len(inputs)
    if pairs:
        res = list(_autograd_grad([p[0] for p in pairs], inputs, [p[1] for p in pairs],
                                  retain_graph=True, create_graph=create, allow_unused=True))
    from ..ops.factories import zeros_like
    return [zeros_like(x) if g is None else g
            for g, x in zip(res, inputs)]


def _finish(tree, keep: bool):
    return tree if keep else tree_map(detach_keep_tangent, tree)


def _grad_and_value(func, argnums, has_aux, where, args, kwargs):
    outer = state.grad_enabled
    nums = check_argnums(argnums, len(args), where)
    with enable_grad():
        new_args, leaves, specs = prepare(args, nums, outer, where)
        out = func(*new_args, **kwargs)
        out, aux = split_aux(out, has_aux, where)
        if not isinstance(out, Tensor) or out.numel() != 1 or \
                not out._dtype.is_inexact:
            what = (f"a tensor of shape {tuple(out.shape)} and dtype {out.dtype}"
                    if isinstance(out, Tensor) else type(out).__name__)
            raise ShapeError(f"{where}(f)(*args): expected f(*args) to return a scalar "
                             f"floating point Tensor, got {what}")
        keep = outer and reaches_outside([out], leaves)
        gs = _grads([out], [None], leaves, keep or bool(state.fw_levels))
    retire(leaves)
    g = regroup(_finish(gs, keep), specs, isinstance(argnums, int))
    value = _finish(out, keep)
    if has_aux:
        return g, (value, _finish(aux, keep))
    return g, value


def grad_and_value(func, argnums=0, has_aux: bool = False):
    """``func`` -> function returning ``(gradient, value)`` (``torch.func.grad_and_value``).

    With ``has_aux=True`` ``func`` returns ``(output, aux)`` and the result is
    ``(gradient, (value, aux))``.
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return _grad_and_value(func, argnums, has_aux, "grad_and_value", args, kwargs)
    return wrapper


def grad(func, argnums=0, has_aux: bool = False):
    """``func`` -> its gradient function (``torch.func.grad`` / ``jax.grad``).

    ``func`` must return a scalar tensor. ``argnums`` (int or tuple) picks the inputs;
    each may be a tensor or a tuple/list/dict of tensors.

    Example:
        >>> ember.func.grad(lambda x, y: (x * y).sum(), argnums=(0, 1))(a, b)   # (b, a)
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = _grad_and_value(func, argnums, has_aux, "grad", args, kwargs)
        return (g, value[1]) if has_aux else g
    return wrapper


def value_and_grad(func, argnums=0, has_aux: bool = False):
    """JAX's spelling: returns ``(value, gradient)`` (``((value, aux), gradient)``)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = _grad_and_value(func, argnums, has_aux, "value_and_grad", args, kwargs)
        return value, g
    return wrapper


def vjp(func, *primals, has_aux: bool = False):
    """``(func(*primals), vjp_fn)``; ``vjp_fn(cotangents)`` returns a tuple, one per primal.

    Example:
        >>> out, vjp_fn = ember.func.vjp(ember.exp, x)
        >>> (gx,) = vjp_fn(ember.ones_like(out))      # exp(x)
    """
    outer = state.grad_enabled
    with enable_grad():
        new_args, leaves, specs = prepare(primals, tuple(range(len(primals))), outer, "vjp")
        out = func(*new_args)
        out, aux = split_aux(out, has_aux, "vjp")
        out_leaves, out_spec = tree_flatten(out)
        for o in out_leaves:
            if not isinstance(o, Tensor):
                raise TypeError(f"vjp(f, *primals): expected f to return Tensors (or tuples, "
                                f"lists, dicts of them), got {type(o).__name__}")
        keep = outer and reaches_outside(out_leaves, leaves)

    def vjp_fn(cotangents, *, retain_graph: bool = True, create_graph=None):
        cot_leaves, cot_spec = tree_flatten(cotangents)
        if len(cot_leaves) != len(out_leaves):
            raise ValueError(f"vjp_fn: expected cotangents with the structure of the output "
                             f"({len(out_leaves)} tensors), got {len(cot_leaves)}")
        for o, c in zip(out_leaves, cot_leaves):
            if not isinstance(c, Tensor) or tuple(c.shape) != tuple(o.shape):
                got = tuple(c.shape) if isinstance(c, Tensor) else type(c).__name__
                raise ShapeError(f"vjp_fn: cotangent of shape {got} does not match the "
                                 f"output's shape {tuple(o.shape)}")
        with enable_grad():
            cot_tracked = state.grad_enabled and any(c._requires_grad for c in cot_leaves)
            create = create_graph if create_graph is not None else \
                keep or cot_tracked or bool(state.fw_levels)
            gs = _grads(out_leaves, cot_leaves, leaves, create)
        keep_g = keep or cot_tracked or bool(create_graph)
        res = regroup(_finish(gs, keep_g), specs, False)
        return tuple(res)

    out = _finish(out, keep)
    retire(leaves)
    if has_aux:
        return out, vjp_fn, _finish(aux, keep)
    return out, vjp_fn


def jacrev(func, argnums=0, *, has_aux: bool = False, chunk_size=None):
    """Jacobian by reverse mode: one batched VJP over the outputs' basis (``torch.func.jacrev``).

    The VJP runs once under :func:`~ember.func.vmap` with the rows of the identity as
    cotangents (``chunk_size`` rows at a time when given; ``chunk_size=1`` is a plain loop
    of VJPs, as in PyTorch). For an output of shape ``O`` and an input of shape ``I`` the
    Jacobian has shape ``O + I``. Outputs and inputs may be pytrees; the result nests
    output structure outside input structure (a tuple over ``argnums`` when it is a tuple).

    Example:
        >>> ember.func.jacrev(ember.exp)(ember.tensor([0.0, 1.0]))   # diag(exp(x))
    """
    chunk_size = check_chunk_size(chunk_size, "jacrev")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        outer = state.grad_enabled
        nums = check_argnums(argnums, len(args), "jacrev")
        with enable_grad():
            new_args, leaves, specs = prepare(args, nums, outer, "jacrev")
            out = func(*new_args, **kwargs)
            out, aux = split_aux(out, has_aux, "jacrev")
            out_leaves, out_spec = tree_flatten(out)
            for o in out_leaves:
                if not isinstance(o, Tensor):
                    raise TypeError(f"jacrev: expected f to return Tensors (or tuples, lists, "
                                    f"dicts of them), got {type(o).__name__}")
            keep = outer and reaches_outside(out_leaves, leaves)
            create = keep or bool(state.fw_levels)
            per_leaf = _stacked_vjps(out_leaves, leaves, create, chunk_size)
        retire(leaves)
        # per input leaf (total_out, *x.shape) -> per output leaf, per input leaf O + I
        by_out = list(zip(*[split_rows(_finish(j, keep), out_leaves) for j in per_leaf]))
        jacs = [regroup(list(js), specs, isinstance(argnums, int)) for js in by_out]
        res = tree_unflatten(jacs, out_spec)
        return (res, _finish(aux, keep)) if has_aux else res
    return wrapper


def _stacked_vjps(out_leaves, leaves, create, chunk_size):
    """``[(total_out, *x.shape) for x in leaves]``: the VJP of every basis cotangent."""
    from ..ops.factories import zeros
    total = sum(o.numel() for o in out_leaves)
    if total == 0:
        return [zeros((0,) + tuple(x.shape), dtype=x.dtype, device=x.device) for x in leaves]

    def vjp_of(*cots):
        return tuple(_grads(out_leaves, list(cots), leaves, create))

    pieces = []
    for a, b in chunks(total, chunk_size):
        basis = basis_rows(out_leaves, a, b)
        if chunk_size == 1:
            pieces.append([g.unsqueeze(0) for g in vjp_of(*[e[0] for e in basis])])
        else:
            from ._vmap import vmap
            pieces.append(list(vmap(vjp_of)(*basis)))
    if len(pieces) == 1:
        return pieces[0]
    from ..ops.join import cat
    return [cat([p[k] for p in pieces]) for k in range(len(leaves))]


jacobian = jacrev
