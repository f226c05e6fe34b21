"""Forward-mode transforms: ``jvp``, ``jacfwd`` and ``hessian`` (forward-over-reverse).

They open a forward-AD level (:mod:`ember.autograd.forward_ad`), attach tangents to
the primals and read the output's tangent. Levels nest, so ``jvp`` of ``jvp`` and
``jacfwd(jacrev(f))`` are exact.

Example:
    >>> out, t = ember.func.jvp(ember.exp, (x,), (ember.ones_like(x),))   # t == exp(x)
"""
from __future__ import annotations

import functools

from ..autograd import forward_ad as fwad
from ..autograd.grad_mode import state
from ..errors import ShapeError
from ..tensor import Tensor
from ._basis import basis_rows, check_chunk_size, chunks, split_rows
from ._common import check_argnums, detach_keep_tangent, regroup, split_aux, tracked
from ._tree import tree_flatten, tree_map, tree_unflatten
from .reverse import jacrev

__all__ = ["jvp", "jacfwd", "hessian"]


def _unpack(tree, level):
    """(primals, tangents) of every leaf of ``tree``; zero tangents where none."""
    from ..ops.factories import zeros_like
    leaves, spec = tree_flatten(tree)
    prim, tan = [], []
    for o in leaves:
        if not isinstance(o, Tensor):
            raise TypeError(f"jvp: expected f to return Tensors (or tuples, lists, dicts of "
                            f"them), got {type(o).__name__}")
        p, t = fwad.unpack_dual(o, level=level)
        prim.append(p)
        tan.append(zeros_like(p) if t is None else t)
    return tree_unflatten(prim, spec), tree_unflatten(tan, spec)


def _release(tree):
    """Results detached unless they depend on a tensor an outer graph tracks.

    NOTE: tangents computed through a reverse transform inside (``hessian`` is
    ``jacfwd(jacrev(f))``) hang off that transform's own stand-in leaves; keeping that
    graph would hand the user tensors that require grad (PyTorch's do not).
    """
    keep = state.grad_enabled
    return tree_map(lambda t: t if keep and tracked(t) else detach_keep_tangent(t), tree)


def _strip_aux(aux, level):
    leaves, spec = tree_flatten(aux)
    return tree_unflatten([fwad.unpack_dual(x, level=level).primal if isinstance(x, Tensor)
                           else x for x in leaves], spec)


def jvp(func, primals, tangents, *, has_aux: bool = False):
    """``(func(*primals), J @ tangents)`` by forward mode (``torch.func.jvp``).

    ``primals`` and ``tangents`` are tuples of the same structure (tensors or pytrees).

    Example:
        >>> ember.func.jvp(lambda x: x ** 2, (ember.tensor(3.0),), (ember.tensor(1.0),))
        (tensor(9.), tensor(6.))
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp(f, primals, tangents): primals and tangents must be tuples")
    p_leaves, p_spec = tree_flatten(tuple(primals))
    t_leaves, t_spec = tree_flatten(tuple(tangents))
    if p_spec != t_spec:
        raise ValueError("jvp(f, primals, tangents): primals and tangents must have the "
                         "same structure")
    with fwad.dual_level() as level:
        duals = []
        for p, t in zip(p_leaves, t_leaves):
            if not isinstance(p, Tensor) or not isinstance(t, Tensor):
                raise TypeError("jvp: primals and tangents must be Tensors")
            if tuple(p.shape) != tuple(t.shape):
                raise ShapeError(f"jvp: tangent of shape {tuple(t.shape)} does not match "
                                 f"its primal's shape {tuple(p.shape)}")
            duals.append(fwad.make_dual(p, t, level=level))
        out = func(*tree_unflatten(duals, p_spec))
        out, aux = split_aux(out, has_aux, "jvp")
        prim, tan = _release(_unpack(out, level))
        if has_aux:
            return prim, tan, _release(_strip_aux(aux, level))
    return prim, tan


def jacfwd(func, argnums=0, *, has_aux: bool = False, randomness: str = "error",
           chunk_size=None):
    """Jacobian by forward mode: one batched JVP over the inputs' basis (``torch.func.jacfwd``).

    The JVP runs once under :func:`~ember.func.vmap` (with ``randomness``) with the rows of
    the identity as tangents. ``chunk_size`` (an Ember extra, as ``jacrev``'s) bounds the
    rows per batched pass; ``chunk_size=1`` is a plain loop of JVPs. Shapes and structure
    as :func:`~ember.func.jacrev`.

    Example:
        >>> ember.func.jacfwd(ember.sin)(ember.tensor([0.0, 1.0]))   # diag(cos(x))
    """
    chunk_size = check_chunk_size(chunk_size, "jacfwd")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums = check_argnums(argnums, len(args), "jacfwd")
        flat, specs = [], []
        for a in nums:
            leaves, spec = tree_flatten(args[a])
            for x in leaves:
                if not isinstance(x, Tensor) or not x._dtype.is_inexact:
                    what = x.dtype if isinstance(x, Tensor) else type(x).__name__
                    raise TypeError(f"jacfwd: differentiated inputs must be floating point "
                                    f"Tensors, got {what}")
            flat.extend(leaves)
            specs.append((spec, len(leaves)))
        push = _pusher(func, args, kwargs, nums, specs, has_aux)
        per_out, out_spec, aux = _stacked_jvps(push, flat, randomness, chunk_size, args, kwargs,
                                               func, has_aux)
        jacs = []
        for j in per_out:   # (total_in, *o.shape) -> O + I per input leaf
            pieces = split_rows(j.movedim(0, -1), flat, dim=-1)
            jacs.append(regroup(pieces, specs, isinstance(argnums, int)))
        res = _release(tree_unflatten(jacs, out_spec))
        return (res, _release(aux)) if has_aux else res
    return wrapper


def _pusher(func, args, kwargs, nums, specs, has_aux):
    """``push(*tangent_leaves) -> (output tangents, aux tensors)`` for the differentiated
    inputs; ``push.aux`` holds aux's structure and its non-tensor leaves (which cannot
    leave a ``vmap``)."""
    def push(*tangents):
        with fwad.dual_level() as level:
            new_args, i = list(args), 0
            for a, (spec, n) in zip(nums, specs):
                prim = tree_flatten(args[a])[0]
                duals = [fwad.make_dual(p, t, level=level)
                         for p, t in zip(prim, tangents[i:i + n])]
                new_args[a] = tree_unflatten(duals, spec)
                i += n
            out = func(*new_args, **kwargs)
            out, aux = split_aux(out, has_aux, "jacfwd")
            _, tan = _unpack(out, level)
            aux_leaves, push.aux = tree_flatten(_strip_aux(aux, level) if has_aux else None)
        push.aux = (push.aux, aux_leaves)
        return tan, [x for x in aux_leaves if isinstance(x, Tensor)]
    return push


def _aux_of(push, tensors):
    """Aux rebuilt from ``push.aux`` with its tensor leaves taken from ``tensors``."""
    spec, leaves = push.aux
    it = iter(tensors)
    return tree_unflatten([next(it) if isinstance(x, Tensor) else x for x in leaves], spec)


def _stacked_jvps(push, flat, randomness, chunk_size, args, kwargs, func, has_aux):
    """(per output leaf ``(total_in, *o.shape)``, output spec, aux) of every basis tangent."""
    total = sum(x.numel() for x in flat)
    if total == 0:   # nothing to push: run once for the output's shapes
        out, aux = split_aux(func(*args, **kwargs), has_aux, "jacfwd")
        o_leaves, out_spec = tree_flatten(out)
        from ..ops.factories import zeros
        return ([zeros((0,) + tuple(o.shape), dtype=o.dtype, device=o.device)
                 for o in o_leaves], out_spec, aux)
    pieces, out_spec, aux = [], None, None
    for a, b in chunks(total, chunk_size):
        basis = basis_rows(flat, a, b)
        if chunk_size == 1:
            tan, aux_t = push(*[e[0] for e in basis])
            t_leaves, out_spec = tree_flatten(tan)
            pieces.append([t.unsqueeze(0) for t in t_leaves])
        else:
            from ._vmap import vmap
            tan, aux_t = vmap(push, randomness=randomness)(*basis)
            t_leaves, out_spec = tree_flatten(tan)
            pieces.append(t_leaves)
            aux_t = [v[0] for v in aux_t]   # the same for every basis row: keep the first
        aux = _aux_of(push, aux_t) if has_aux else None
    if len(pieces) == 1:
        return pieces[0], out_spec, aux
    from ..ops.join import cat
    return [cat([p[k] for p in pieces]) for k in range(len(pieces[0]))], out_spec, aux


def hessian(func, argnums=0):
    """Second derivatives, forward-over-reverse: ``jacfwd(jacrev(func))`` (``torch.func``).

    Example:
        >>> ember.func.hessian(lambda x: (x ** 3).sum())(ember.tensor([1.0, 2.0]))
        tensor([[ 6.,  0.],
                [ 0., 12.]])
    """
    return jacfwd(jacrev(func, argnums), argnums)
