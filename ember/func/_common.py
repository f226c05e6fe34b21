"""Shared plumbing of the transforms: fresh inputs, argnums, outer-graph detection."""
from __future__ import annotations

from ..errors import DTypeError
from ..tensor import Tensor, _alias
from ._tree import tree_flatten, tree_unflatten


def check_argnums(argnums, nargs: int, where: str):
    """Normalised argnums (int or tuple of ints), validated against ``nargs``."""
    items = argnums if isinstance(argnums, tuple) else (argnums,)
    if not items:
        raise ValueError(f"{where}: argnums must be non-empty")
    for a in items:
        if not isinstance(a, int) or isinstance(a, bool):
            raise TypeError(f"{where}: argnums must be an int or a tuple of ints, got "
                            f"{argnums!r}")
        if not -nargs <= a < nargs:
            raise ValueError(f"{where}: got argnums={argnums!r} but only {nargs} positional "
                             f"inputs")
    return tuple(a % nargs for a in items)


def fresh(x, outer_grad: bool, where: str) -> Tensor:
    """A new differentiable stand-in for ``x``.

    If ``x`` is tracked by an outer graph (an enclosing transform or the user's own),
    the stand-in is an identity view of it, so results stay differentiable with
    respect to ``x``; otherwise it is a detached leaf. Tangents are kept either way.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{where}: expected the differentiated inputs to be Tensors, got "
                        f"{type(x).__name__}")
    if not x._dtype.is_inexact:
        raise DTypeError(f"{where}: only floating point inputs can be differentiated, got "
                         f"{x._dtype}")
    if outer_grad and x._requires_grad:
        return x.view(tuple(x.shape))
    t = _alias(x, keep_grad=False)
    if x._fw:
        t._fw = dict(x._fw)
    t._requires_grad = True
    t._func_live = True          # NOTE: the transform is running; see retire()
    return t


def retire(leaves) -> None:
    """Mark a finished transform's stand-ins: graphs reaching only them are its own, and
    a result depending on nothing else must not require grad (:func:`tracked`)."""
    for t in leaves:
        if "_func_live" in t.__dict__:
            t._func_live = False


def tracked(t) -> bool:
    """Whether ``t``'s graph reaches a tensor that requires grad outside every finished
    transform: one of the user's, or a stand-in of a transform still running."""
    if not isinstance(t, Tensor) or not t._requires_grad:
        return False
    if t._grad_fn is None:
        return t.__dict__.get("_func_live", True)
    return _reaches_leaf([t._grad_fn], lambda leaf: leaf.__dict__.get("_func_live", True))


def _reaches_leaf(nodes, pred) -> bool:
    """Whether the autograd graph below ``nodes`` reaches a leaf tensor ``pred`` accepts."""
    stack, seen = list(nodes), set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        for e in n.next:
            if e is None:
                continue
            if not isinstance(e[0], Tensor):
                stack.append(e[0])
            elif pred(e[0]):
                return True
    return False


def prepare(args, argnums, outer_grad, where):
    """``(new_args, leaves, spec)``: args with fresh stand-ins at ``argnums``."""
    new_args = list(args)
    leaves, specs = [], []
    for a in argnums:
        ls, spec = tree_flatten(args[a])
        fl = [fresh(x, outer_grad, where) for x in ls]
        new_args[a] = tree_unflatten(fl, spec)
        leaves.extend(fl)
        specs.append((spec, len(fl)))
    return new_args, leaves, specs


def regroup(flat, specs, argnums_was_int: bool):
    """Split per-leaf results back into one pytree per argnum (a tuple unless an int)."""
    out, i = [], 0
    for spec, n in specs:
        out.append(tree_unflatten(flat[i:i + n], spec))
        i += n
    return out[0] if argnums_was_int else tuple(out)


def reaches_outside(outputs, inside) -> bool:
    """Does the graph of ``outputs`` depend on a tensor requiring grad not in ``inside``?

    Stand-ins of finished inner transforms do not count (:func:`retire`): the gradient
    of ``lambda w: grad(f)(x, w).sum()`` need not stay differentiable when nothing outside
    requires grad.
    """
    inside_ids = {id(t) for t in inside}

    def outside(leaf):
        return id(leaf) not in inside_ids and leaf.__dict__.get("_func_live", True)

    if any(isinstance(o, Tensor) and o._requires_grad and o._grad_fn is None and outside(o)
           for o in outputs):
        return True
    roots = [o._grad_fn for o in outputs if isinstance(o, Tensor) and o._grad_fn is not None]
    return _reaches_leaf(roots, outside)


def detach_keep_tangent(t):
    """``t.detach()`` that keeps forward-AD tangents (for results of a transform)."""
    if not isinstance(t, Tensor):
        return t
    d = _alias(t, keep_grad=False)
    if t._fw:
        d._fw = dict(t._fw)
    return d


def split_aux(out, has_aux: bool, where: str):
    if not has_aux:
        return out, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{where}(f, ...)(*args): output of function f should be a tuple: "
                        f"(output, aux) if has_aux is True")
    return out[0], out[1]


def stack_rows(rows):
    """Stack equal-shaped tensors along a new leading dim (differentiable, keeps tangents)."""
    from ..ops.join import stack
    return stack(rows)
