"""Algebraic simplification: a table of local identities, applied in one forward walk.

Every rule is exact — the simplified graph computes bitwise what the original computed —
except those in :data:`FAST_MATH` (``simplify_fast``), which only hold up to rounding.
A node is replaced by one of its inputs only when shape and dtype agree; a non-view node
whose value is a graph output is kept (replacing it would hand the caller an alias of
another value, where eager returned a fresh tensor).

Identities deliberately left out (they are not exact in floating point):

* ``x + 0 -> x`` for floats: ``-0.0 + 0 = +0.0`` (kept for integers; ``x - 0`` is exact).
* ``x * 0 -> 0`` for floats: ``inf * 0`` and ``nan * 0`` are nan (kept for integer/bool).
* ``sum(expand(x)) -> n * x`` for floats: a sum of n copies rounds differently from one
  product (kept for int64, where both wrap identically).
* ``exp(log(x)) -> x``: wrong for ``x < 0`` (nan); not even in fast math.
* ``log(exp(x)) -> x``: only up to rounding, and ``exp`` overflows for ``x > 88`` (float32):
  fast math only.
"""
from __future__ import annotations

import numpy as np

from ..ir import CONSTANT, Graph, Var
from ._util import Rewrite, is_all, is_float


def _same(n, x) -> bool:
    """Whether ``x`` can stand for ``n``'s output: a Var of the same shape and dtype."""
    o = n.outs[0]
    return x.__class__ is Var and x.shape == o.shape and x.dtype is o.dtype


def _replace(rw, n, x):
    """``(x,)`` when ``n`` may be replaced by ``x``; non-view graph outputs are kept."""
    if not _same(n, x) or (not n.op.view and n.outs[0].id in rw.outputs):
        return None
    return (x,)


def _inner(rw, x, name):
    """The new-graph node of op ``name`` that makes ``x``, or None."""
    p = rw.producer(x)
    return p if p is not None and p.op.name == name else None


def _mul(rw, n, ins):
    a, b = ins
    p = rw.producer
    for x, c in ((a, b), (b, a)):
        if is_all(p, c, 1):                                  # x * 1 = 1 * x = x
            r = _replace(rw, n, x)
            if r:
                return r
        o = n.outs[0]
        if is_all(p, c, 0) and not is_float(o.dtype) and o.id not in rw.outputs:
            return (_zeros(rw, o),)                          # x * 0 = 0 (integers, bool)
    return None


def _add(rw, n, ins):
    a, b = ins
    if is_float(n.outs[0].dtype):
        return _add_scaled_neg(rw, n, ins)
    for x, c in ((a, b), (b, a)):
        if is_all(rw.producer, c, 0):                        # x + 0 = 0 + x = x (integers)
            r = _replace(rw, n, x)
            if r:
                return r
    return None


def _add_scaled_neg(rw, n, ins):
    """``b + a * (-s)`` -> ``b - a * s`` when the product and the negation are read only
    there (SGD's ``p.add_(g, alpha=-lr)``: one ``neg`` node fewer). Exact: negation is,
    and ``b + (-y)`` is ``b - y`` (an FMA contracts either into the same single rounding)."""
    if n.outs[0].dtype.name.startswith("complex"):
        return None
    uses = _uses(rw)
    for k in (0, 1):
        m = n.inputs[k]
        pm = _old_producer(rw, m)
        if pm is None or pm.op.name != "mul" or uses.get(m.id) != 1 or m.id in rw.outputs:
            continue
        for j in (0, 1):
            v = pm.inputs[j]
            pn = _old_producer(rw, v)
            if pn is None or pn.op.name != "neg" or pn.inputs[0].__class__ is not Var:
                continue
            w = pm.inputs[1 - j]
            prod = rw.emit("mul", (rw.env[w.id] if w.__class__ is Var else w,
                                   rw.env[pn.inputs[0].id]))
            if prod.dtype is not m.dtype or prod.shape != m.shape:
                return None
            out = rw.emit("sub", (ins[1 - k], prod))
            return (out,) if _same(n, out) else None
    return None


def _uses(rw) -> dict:
    """Old graph: var id -> number of reads (cached on the walker)."""
    u = getattr(rw, "_uses", None)
    if u is None:
        u = {}
        for nd in rw.old.nodes:
            for x in nd.inputs:
                if x.__class__ is Var:
                    u[x.id] = u.get(x.id, 0) + 1
        rw._uses = u
    return u


def _old_producer(rw, v):
    if v.__class__ is not Var:
        return None
    p = getattr(rw, "_oldprod", None)
    if p is None:
        p = rw._oldprod = {o.id: nd for nd in rw.old.nodes for o in nd.outs}
    return p.get(v.id)


def _sub(rw, n, ins):
    return _replace(rw, n, ins[0]) if is_all(rw.producer, ins[1], 0) else None   # x - 0 = x


def _div(rw, n, ins):
    return _replace(rw, n, ins[0]) if is_all(rw.producer, ins[1], 1) else None   # x / 1 = x


def _neg(rw, n, ins):
    p = _inner(rw, ins[0], "neg")                            # -(-x) = x
    return _replace(rw, n, p.inputs[0]) if p is not None else None


def _clone(rw, n, ins):
    """``clone(x) -> x`` when ``x`` is a fresh array nobody else can see.

    The autograd engine stores ``p.grad = g.clone()`` so a leaf's gradient never aliases a
    caller's tensor; in a compiled step ``g`` is a matmul's (or a kernel's) own new array,
    and the copy — a full-size write per parameter each step — protects nothing. Kept when
    ``x`` is a graph input or output, a view (of anything), a constant, or already handed
    out by another clone.
    """
    x = ins[0]
    p = rw.producer(x)
    if x.__class__ is not Var or p is None or p.op is CONSTANT or p.op.view or \
            len(p.outs) != 1 or n.inputs[0].id in rw.outputs:
        return None
    handed = rw.__dict__.setdefault("handed", set())
    if x.id in handed:
        return None
    out = (x,) if _same(n, x) else None
    if out is not None:
        handed.add(x.id)
    return out


def _permute(rw, n, ins):
    x, dims = ins[0], tuple(n.params["dims"])
    p = _inner(rw, x, "permute")
    if p is not None:                                        # permute(permute(x)) = one permute
        x, inner = p.inputs[0], tuple(p.params["dims"])
        dims = tuple(inner[d] for d in dims)
    if dims == tuple(range(len(dims))):                      # identity permutation
        return _replace(rw, n, x)
    return (rw.emit("permute", (x,), dims=dims),) if p is not None else None


def _reshape(rw, n, ins):
    x = ins[0]
    p = _inner(rw, x, "reshape")
    if p is not None:                                        # reshape(reshape(x)) = one reshape
        x = p.inputs[0]
    if x.shape == n.outs[0].shape:                           # reshape to the same shape
        return _replace(rw, n, x)
    return _reshape_of_first(rw, n, x, p) or (
        (rw.emit("reshape", (x,), shape=n.outs[0].shape),) if p is not None else None)


def _reshape_of_first(rw, n, x, p):
    """``reshape(x, s2) -> reshape(reshape(x, s1), s2)`` for the first ``reshape(x, s1)``.

    Each reshape of a view ``x`` that is not contiguous (a permute's output, say) is a
    copy: two reshapes of it to different shapes (the W3 GPT's attention output, to
    ``(B, T, C)`` for the projection and, in the backward, to ``(B*T, C)`` for its weight
    gradient) copied it twice. As a reshape of the first, the second is a view of that
    copy (or of the same bytes when ``x`` was contiguous after all). Bitwise exact: only
    movement. Only for ``x`` made by a view op (where a copy can happen); a chain whose
    inner reshape nobody else reads is still composed (``p``: that inner reshape).
    """
    px = rw.producer(x)
    if px is None or not px.op.view or px.op.name == "reshape":
        return None
    seen = rw.__dict__.setdefault("first_reshape", [0, {}])   # [nodes scanned, {x id: var}]
    for m in rw.b.nodes[seen[0]:]:
        if m.op.name == "reshape" and m.inputs[0].__class__ is Var:
            seen[1].setdefault(m.inputs[0].id, m.outs[0])
    seen[0] = len(rw.b.nodes)
    first, shape = seen[1].get(x.id), n.outs[0].shape
    if first is None:
        return None
    old = n.inputs[0]
    if p is not None and p.outs[0] is first and old.id not in rw.outputs and \
            len(rw.old.users().get(old.id, ())) == 1:
        seen[1][x.id] = y = rw.emit("reshape", (x,), shape=shape)   # the inner one dies
        return (y,)
    return _replace(rw, n, first) if first.shape == shape else \
        (rw.emit("reshape", (first,), shape=shape),)


def _expand(rw, n, ins):
    return _replace(rw, n, ins[0])                           # expand to the same shape


def _cast(rw, n, ins):
    return _replace(rw, n, ins[0])                           # cast to the same dtype


def _sum(rw, n, ins):
    """``sum(expand(x), broadcast dims) = count * x`` for int64 (exact, wraps alike)."""
    p = _inner(rw, ins[0], "expand")
    o = n.outs[0]
    if p is None or o.dtype.name != "int64" or p.inputs[0].dtype is not o.dtype \
            or o.id in rw.outputs:
        return None
    x, big = p.inputs[0], p.outs[0].shape
    lead = len(big) - x.ndim
    bcast = {d for d in range(len(big)) if d < lead or (x.shape[d - lead] == 1 and big[d] != 1)}
    dims = n.params["dim"]
    dims = set(range(len(big))) if dims is None else {d % len(big) for d in dims}
    if not bcast or not bcast <= dims or any(big[d] != 1 for d in dims - bcast):
        return None
    count = int(np.prod([big[d] for d in bcast]))
    y = x if x.shape == o.shape else rw.emit("reshape", (x,), shape=o.shape)
    return (rw.emit("mul", (y, count)),)


def _log(rw, n, ins):
    p = _inner(rw, ins[0], "exp")                            # log(exp(x)) ~ x (fast math)
    return _replace(rw, n, p.inputs[0]) if p is not None and _same(n, p.inputs[0]) else None


def _unexpand(rw, n, ins):
    """``f(a, expand(b)) -> f(a, b)`` for an elementwise ``f`` that broadcasts ``b`` to the
    same output shape anyway (exact: the same values meet).

    The VJP of a ``keepdim`` sum is ``expand``; the layer norm's and softmax's backward add
    that expanded row value to a full one. As a view node the ``expand`` sat between the
    reduction kernel and the ``add``, so the ``add`` could not join the kernel. Likewise
    ``f(a, reshape(s))`` of a one-element ``s`` (cross-entropy's 0-d gradient reshaped to
    ``(1, 1)`` before its masked ``where``): every element of either is the one value.
    """
    if len(ins) < 2:
        return ins
    new = list(ins)
    for i, x in enumerate(ins):
        while True:                 # NOTE: expand(reshape(s)) too
            p = _inner(rw, new[i], "expand") or _inner(rw, new[i], "reshape")
            if p is None or p.inputs[0].__class__ is not Var or (
                    p.op.name == "reshape" and any(d != 1 for d in p.inputs[0].shape)):
                break
            new[i] = p.inputs[0]
    if new == list(ins):
        return ins
    shapes = [v.shape for v in new if v.__class__ is Var]
    try:
        if tuple(np.broadcast_shapes(*shapes)) != tuple(n.outs[0].shape):
            return ins
    except ValueError:
        return ins
    return tuple(new)


def _zeros(rw, o):
    z = np.zeros((), o.dtype.np)
    if o.device is not None and o.device.type != "cpu":   # NOTE: a GPU graph's: on the GPU
        from ...device.base import get_backend
        z = get_backend(o.device).asarray(z)
    z = rw.b.constant(z, o.dtype, o.device)
    return z if o.shape == () else rw.emit("expand", (z,), shape=o.shape)


#: op name -> rule(rw, node, new inputs) -> new outputs or None. All exact.
RULES = {"mul": _mul, "add": _add, "sub": _sub, "div": _div, "neg": _neg, "clone": _clone,
         "permute": _permute, "reshape": _reshape, "expand": _expand, "cast": _cast,
         "sum": _sum}
#: rules that hold only up to rounding / overflow (``simplify_fast``).
FAST_MATH = {"log": _log}


def _run(graph: Graph, rules: dict):
    hits = 0

    def rule(rw, n, ins):
        nonlocal hits
        if len(n.outs) != 1 or n.is_random():
            return None
        f = rules.get(n.op.name)
        new = _unexpand(rw, n, ins) if getattr(n.op, "elementwise", False) else ins
        outs = f(rw, n, new) if f is not None else None
        if outs is None and new is not ins:
            outs = rw.copy(n, new)
        if outs is not None:
            hits += 1
        return outs

    out = Rewrite(graph).run(rule)
    return (out if hits else graph), {"simplified": hits}


def simplify(graph: Graph):
    """Apply the exact identities of :data:`RULES`. Returns ``(graph, {"simplified": n})``."""
    return _run(graph, RULES)


def simplify_fast(graph: Graph):
    """:func:`simplify` plus :data:`FAST_MATH` (results may differ in the last bits)."""
    return _run(graph, {**RULES, **FAST_MATH})
