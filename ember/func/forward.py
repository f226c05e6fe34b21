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
from ._common import check_argnums, detach_keep_tangent, split_aux, tracked
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


def jacfwd(func, argnums=0, *, has_aux: bool = False, randomness: str = "error"):
    """Jacobian by forward mode, one JVP per input element (``torch.func.jacfwd``).

    Shapes and structure as :func:`~ember.func.jacrev`.
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums = check_argnums(argnums, len(args), "jacfwd")
        per_arg = []
        aux = None
        out_spec = None
        for a in nums:
            leaves, spec = tree_flatten(args[a])
            per_leaf = []
            for k, x in enumerate(leaves):
                cols, out_spec, aux = _columns(func, args, kwargs, a, leaves, spec, k,
                                               has_aux)
                per_leaf.append(cols)
            per_arg.append((spec, leaves, per_leaf))
        res = _release(_assemble(per_arg, out_spec, isinstance(argnums, int)))
        return (res, _release(aux)) if has_aux else res
    return wrapper


def _columns(func, args, kwargs, a, leaves, spec, k, has_aux):
    """Output tangents (one list per output leaf) for each basis tangent of leaf ``k``."""
    from ..ops.factories import zeros_like
    x = leaves[k]
    if not isinstance(x, Tensor) or not x._dtype.is_floating_point:
        raise TypeError(f"jacfwd: differentiated inputs must be floating point Tensors, got "
                        f"{type(x).__name__ if not isinstance(x, Tensor) else x.dtype}")
    cols = None
    out_spec = aux = None
    for c in range(x.numel()):
        e = zeros_like(x)
        e._data.reshape(-1)[c] = 1
        with fwad.dual_level() as level:
            new_leaves = list(leaves)
            new_leaves[k] = fwad.make_dual(x, e, level=level)
            new_args = list(args)
            new_args[a] = tree_unflatten(new_leaves, spec)
            out = func(*new_args, **kwargs)
            out, aux_c = split_aux(out, has_aux, "jacfwd")
            prim, tan = _unpack(out, level)
            if has_aux:
                aux = _strip_aux(aux_c, level)
        t_leaves, out_spec = tree_flatten(tan)
        if cols is None:
            cols = [[] for _ in t_leaves]
        for j, t in enumerate(t_leaves):
            cols[j].append(t)
    if cols is None:   # zero-element input: run once for shapes
        out = func(*args, **kwargs)
        out, aux = split_aux(out, has_aux, "jacfwd")
        o_leaves, out_spec = tree_flatten(out)
        cols = [(o, None) for o in o_leaves]
    return (x, cols), out_spec, aux


def _jac_from_cols(x, cols):
    from ..ops.factories import zeros
    if isinstance(cols, tuple):   # zero-element input
        o = cols[0]
        return zeros(tuple(o.shape) + tuple(x.shape), dtype=o.dtype)
    from ..ops.join import stack
    return stack(cols, dim=-1).reshape(tuple(cols[0].shape) + tuple(x.shape))


def _assemble(per_arg, out_spec, argnums_was_int):
    n_out = None
    for _, _, per_leaf in per_arg:
        for (_, cols) in per_leaf:
            n_out = len(cols)
    if n_out is None:
        raise ValueError("jacfwd: no inputs to differentiate")
    jac_per_out = []
    for j in range(n_out):
        groups = []
        for spec, leaves, per_leaf in per_arg:
            groups.append(tree_unflatten([_jac_from_cols(x, cols[j]) for x, cols in per_leaf],
                                         spec))
        jac_per_out.append(groups[0] if argnums_was_int else tuple(groups))
    return tree_unflatten(jac_per_out, out_spec)


def hessian(func, argnums=0):
    """Second derivatives, forward-over-reverse: ``jacfwd(jacrev(func))`` (``torch.func``).

    Example:
        >>> ember.func.hessian(lambda x: (x ** 3).sum())(ember.tensor([1.0, 2.0]))
        tensor([[ 6.,  0.],
                [ 0., 12.]])
    """
    return jacfwd(jacrev(func, argnums), argnums)
