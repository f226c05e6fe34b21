"""GPU fusion groups: column sums join the row reduction over the same rows.

A layer norm's backward on a GPU was five kernels over ``(N, d)`` data: the row
reduction making ``dx``, ``dy`` cast to float32, ``dy * x_hat`` and two column sums
(``dbeta = dy.sum(0)``, ``dgamma = (dy * x_hat).sum(0)``) each reading its operand once
more. :func:`absorb_colsums` moves such a column sum — a ``sum`` over every axis but the
last of a value with a row reduction group's shape — into that group as a ``"col"``
member, with the elementwise nodes that make its operand (a full-shape group or lone
node; and a lone cast or elementwise node feeding them that nothing else reads): the
kernel (:class:`~ember.codegen.cuda_rowcols.ColReduceKernel`) computes the operand while
it walks the row anyway and adds it into per-block column partials; nothing full-size is
written for it.

Order: a fused kernel runs at its last member, so a candidate joins only when every node
outside the group that reads a member's value comes after that position (the walk of
:mod:`.fuse_groups` keeps the same invariant). Rows must be at most
:data:`~ember.codegen.cuda_rowcols.MAX_COLS` wide and handled by a warp or a block (not a
thread: :func:`.fuse_cuda.strategy`), and the sums' shared-memory accumulators fit
:data:`~ember.codegen.cuda_rowcols.MAX_SHARED` (a 768-wide row under a warp per row: two
sums, dgamma and dbeta). Float sums only, no
``dtype=``. CPU graphs never get here (``fuse_cuda`` only).
"""
from __future__ import annotations

from ...codegen.cuda_rowcols import MAX_COLS, MAX_SHARED, acc_dtype, shared_bytes
from ..ir import Var
from .fuse_groups import classify

__all__ = ["ENABLED", "absorb_colsums"]

#: off: column sums stay separate kernels (benchmarks and tests compare both).
ENABLED = True


def absorb_colsums(graph, groups, strategy_of) -> int:
    """Move eligible column sums (and their operands' elementwise producers) into the row
    reduction groups of ``groups`` in place; ``strategy_of(group)`` names the reduction
    strategy the group's kernel will get. Returns how many sums moved."""
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    users, outs = graph.users(), {v.id for v in graph.outputs}
    group_of = {id(n): g for g in groups for n, _ in g.members}
    moved = 0
    # NOTE: first the sums of values the group does not make (a layer norm's dbeta and
    # dgamma: their operands are computed for nothing else), until none moves (dbeta's
    # cast joins once dgamma's operand has), then sums of the group's outputs (the bias
    # gradient of the layer before), while registers remain
    for late in (False, True):
        again = True
        while again:
            again = False
            for n in graph.nodes:
                for r in _targets(n, groups, group_of, order):
                    if _absorb(n, r, graph, group_of, order, users, outs, strategy_of(r),
                               late):
                        moved, again = moved + 1, True
                        break
    return moved


def _absorb(n, r, graph, group_of, order, users, outs, strategy, late) -> bool:
    """Move column sum ``n`` (and its operand's producers) into ``r`` if it may;
    ``late``: also when ``r`` makes the operand."""
    p = graph.producer(n.inputs[0])
    if not _room(r, n, strategy) or (not late and p is not None and group_of.get(id(p)) is r):
        return False
    add = _operand_nodes(n.inputs[0], r, graph, group_of, users)
    # NOTE: else the operand is loaded as an input where it is written anyway: its
    # producer (or that one's group, closed at the sum: fuse_groups) runs before the
    # sum, so before the kernel
    x = n.inputs[0]
    p = graph.producer(x)
    written = p is None or id(p) not in group_of or x.id in outs or any(
        u is not n for u in users.get(x.id, ()))
    for add in ([] if add is None else [add]) + ([[]] if add and written else []):
        members = {id(m) for m, _ in r.members} | {id(m) for m, _ in add} | {id(n)}
        if _ordered(r.members + add + [(n, "col")], members, order, users, outs):
            break
    else:
        return False
    for m, _ in add:
        old = group_of.get(id(m))
        if old is not None and old is not r:
            old.members = [x for x in old.members if x[0] is not m]
    r.members.extend(add + [(n, "col")])
    for m, _ in add + [(n, "col")]:
        group_of[id(m)] = r
    return True


def _targets(n, groups, group_of, order) -> list:
    """The row reduction groups a column sum ``n`` could join, nearest first (by the
    distance of their last member from ``n``): the kernel computes the sum's operand
    wherever its values come from (a layer norm's ``dbeta`` reads ``dy``, an input of its
    ``dx`` kernel; the layer's bias gradient reads that kernel's output)."""
    if n.op.name != "sum" or len(n.outs) != 1 or id(n) in group_of or \
            n.params.get("dtype") is not None or n.inputs[0].__class__ is not Var:
        return []
    x = n.inputs[0]
    nd = x.ndim
    dim = n.params.get("dim")
    dims = set(range(nd)) if dim is None else {d % nd for d in ((dim,) if isinstance(
        dim, int) else dim)} if nd else set()
    if nd < 2 or dims != set(range(nd - 1)) or not x.dtype.is_floating_point or \
            n.out.dtype is not x.dtype or x.device.type != "cuda" or \
            not 0 < x.shape[-1] <= MAX_COLS:
        return []
    cands = [g for g in groups if g.naxes == 1 and g.space == tuple(x.shape) and g.members]
    at = order[id(n)]
    return sorted(cands, key=lambda g: abs(max(order[id(m)] for m, _ in g.members) - at))


def _room(r, n, strategy: str) -> bool:
    """Whether group ``r`` can hold one more column sum (``n``'s): a warp or block per
    row, its accumulators within :data:`MAX_SHARED`, one accumulation dtype."""
    if strategy not in ("warp", "block"):
        return False
    cols = [m for m, cls in r.members if cls == "col"]
    acc = acc_dtype(n.out.dtype)
    if any(acc_dtype(m.out.dtype) is not acc for m in cols):
        return False
    return shared_bytes(r.space[-1], strategy, len(cols) + 1, acc) <= MAX_SHARED


def _operand_nodes(x, r, graph, group_of, users):
    """``[(node, "full")]``: what joins ``r`` so that it computes ``x`` (a member's value,
    an input it reads, or the output of a full-shape elementwise group or lone node, with
    lone elementwise producers nothing else reads), or None when ``x`` can't be had."""
    mine = {id(m) for m, _ in r.members}
    p = graph.producer(x)
    if p is None or id(p) in mine:
        return []
    g = group_of.get(id(p))
    if g is not None:
        if g.naxes or g.space != r.space or any(c != "full" for _, c in g.members):
            return None
        add = [(m, "full") for m, _ in g.members]
    elif _lone_full(p, r):
        add = [(p, "full")]
    else:
        return []           # NOTE: read as an input of the kernel
    taken = {id(m) for m, _ in add}
    for m, _ in list(add):  # a cast / elementwise node feeding them that nothing else reads
        for v in m.var_inputs():
            q = graph.producer(v)
            if q is None or id(q) in taken or id(q) in mine or group_of.get(id(q)) \
                    is not None or not _lone_full(q, r):
                continue
            if all(id(u) in taken or id(u) in mine for u in users.get(q.out.id, ())):
                add.insert(0, (q, "full"))
                taken.add(id(q))
    return add


def _lone_full(p, r) -> bool:
    """Whether ``p`` is an elementwise GPU node (in no group) of ``r``'s full shape."""
    return classify(p, "cuda", True) == "ew" and tuple(p.out.shape) == r.space


def _ordered(members, ids, order, users, outs) -> bool:
    """Whether every reader outside ``ids`` of a member's value comes after the last
    member (where the fused kernel will run); the group still has a value to write."""
    pos = max(order[id(m)] for m, _ in members)
    written = False
    for m, cls in members:
        readers = [u for u in users.get(m.out.id, ()) if id(u) not in ids]
        if any(order[id(u)] <= pos for u in readers):
            return False
        written = written or (cls != "col" and (readers or m.out.id in outs))
    return written
