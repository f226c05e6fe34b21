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
from ._common import (check_argnums, detach_keep_tangent, prepare, reaches_outside, regroup,
                      retire, split_aux, stack_rows)
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
                not out._dtype.is_floating_point:
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


def _one_hot(o, r):
    from ..ops.factories import zeros_like
    e = zeros_like(o)
    e._data.reshape(-1)[r] = 1
    return e


def jacrev(func, argnums=0, *, has_aux: bool = False, chunk_size=None):
    """Jacobian by reverse mode, one VJP per output element (``torch.func.jacrev``).

    For an output of shape ``O`` and an input of shape ``I`` the Jacobian has shape
    ``O + I``. Outputs and inputs may be pytrees; the result nests output structure
    outside input structure (a tuple over ``argnums`` when it is a tuple).

    Example:
        >>> ember.func.jacrev(ember.exp)(ember.tensor([0.0, 1.0]))   # diag(exp(x))
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        outer = state.grad_enabled
        nums = check_argnums(argnums, len(args), "jacrev")
        with enable_grad():
            new_args, leaves, specs = prepare(args, nums, outer, "jacrev")
            out = func(*new_args, **kwargs)
            out, aux = split_aux(out, has_aux, "jacrev")
            out_leaves, out_spec = tree_flatten(out)
            keep = outer and reaches_outside(out_leaves, leaves)
            create = keep or bool(state.fw_levels)
            jacs = [_jac_rows(o, leaves, create) for o in out_leaves]
        retire(leaves)
        jacs = [regroup(_finish(j, keep), specs, isinstance(argnums, int)) for j in jacs]
        res = tree_unflatten(jacs, out_spec)
        return (res, _finish(aux, keep)) if has_aux else res
    return wrapper


def _jac_rows(o, leaves, create):
    """Jacobians of one output ``o`` with respect to each leaf: ``o.shape + x.shape``."""
    if not isinstance(o, Tensor):
        raise TypeError(f"jacrev: expected f to return Tensors, got {type(o).__name__}")
    n = o.numel()
    rows = [[] for _ in leaves]
    for r in range(n):
        gs = _grads([o], [_one_hot(o, r)], leaves, create)
        for k, g in enumerate(gs):
            rows[k].append(g)
    out = []
    for x, rs in zip(leaves, rows):
        if n == 0:
            from ..ops.factories import zeros
            out.append(zeros(tuple(o.shape) + tuple(x.shape), dtype=x.dtype))
            continue
        out.append(stack_rows(rs).reshape(tuple(o.shape) + tuple(x.shape)))
    return out


jacobian = jacrev
