"""Fusion groups: which nodes of a graph run together in one generated kernel.

One walk over the nodes in order. A *group* iterates over a ``space`` (a shape) and has
``naxes`` reduced trailing axes (0: an elementwise group). Its members are

* ``full``  elementwise nodes whose output has the space's shape,
* ``row``   elementwise nodes on per-row values (the space with the reduced axes kept as
            size 1: a layer norm's mean and rstd),
* ``stage`` reductions over the trailing ``naxes`` axes of a full value (or an input),
            and softmax / log_softmax over the last axis (two stages and a full value).

A node joins a group of one of its producers when its shape fits; open groups it reads
from that fit as well are merged in, every other group it reads from is *closed* (no more
members), because a fused kernel runs at the position of its last member: once a value of
the group has been read by a node outside it, a later member could no longer run before
that reader. So the fused graph keeps every reader after the kernel that writes its input.

Never fused: ops without a C ``expr`` template (matmul, conv, index/gather/scatter, views,
cat...), random draws, reductions over leading axes or with a ``dtype=`` argument.
"""
from __future__ import annotations

from ..ir import GraphOp, Var

#: reductions that may become a stage (their C kind).
REDUCTIONS = {"sum": "sum", "amax": "amax", "amin": "amin"}
#: row-wise ops lowered as stages + a full value.
ROWWISE = ("softmax", "log_softmax")


class Group:
    """A fusion group: members in graph order, each with its class (full/row/stage)."""

    __slots__ = ("id", "space", "naxes", "members", "open")

    def __init__(self, gid: int, space: tuple, naxes: int = 0):
        self.id = gid
        self.space = tuple(space)
        self.naxes = naxes
        self.members: list = []          # [(node, cls)]
        self.open = True

    @property
    def row_shape(self) -> tuple:
        k = len(self.space) - self.naxes
        return self.space[:k] + (1,) * self.naxes

    @property
    def flat_shape(self) -> tuple:
        return self.space[:len(self.space) - self.naxes]

    def n_ops(self) -> int:
        return len(self.members)

    def __repr__(self) -> str:
        ops = ",".join(n.op.name for n, _ in self.members)
        return f"<group {self.id} {self.space}/{self.naxes}: {ops}>"


def classify(n, device: str = "cpu", host_scalars: bool = False) -> str | None:
    """``"ew"``, ``"reduce"``, ``"rowwise"`` or None (not fusible) for a kernel on a
    ``device`` (type) array: every input there, or a 0-d CPU scalar beside them.
    ``host_scalars``: a 0-d CPU node of 0-d inputs counts as on ``device`` too (a GPU
    graph's executor holds its CPU scalars as device arrays: Adam's step counts)."""
    op = n.op
    if isinstance(op, GraphOp) or getattr(op, "random", False) or len(n.outs) != 1:
        return None
    vins = n.var_inputs()
    if not vins:
        return None
    scalar = host_scalars and n.out.ndim == 0 and n.out.device.type == "cpu" and all(
        x.ndim == 0 for x in vins)
    if not scalar and (n.out.device.type != device or any(
            x.device.type != device and not (x.ndim == 0 and x.device.type == "cpu")
            for x in vins)):
        return None
    if any(x.__class__ is not Var and not isinstance(x, (bool, int, float)) for x in n.inputs):
        return None
    if any(_is_complex(x.dtype) for x in vins) or _is_complex(n.out.dtype):
        return None
    if op.expr is not None:
        return "ew"
    if op.name in REDUCTIONS and len(n.inputs) == 1 and n.params.get("dtype") is None:
        return "reduce" if reduced_axes(n) is not None else None
    if op.name in ROWWISE and len(n.inputs) == 1 and n.out.dtype.is_floating_point:
        x = n.inputs[0]
        if x.ndim >= 1 and n.params.get("dim", -1) % x.ndim == x.ndim - 1 and \
                x.dtype is n.out.dtype:
            return "rowwise"
    return None


def _is_complex(d) -> bool:
    return d.name.startswith("complex")


def reduced_axes(n) -> int | None:
    """How many trailing axes reduction ``n`` reduces, or None (not trailing)."""
    x = n.inputs[0]
    dim = n.params.get("dim")
    nd = x.ndim
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        dims = set(range(nd))
    else:
        dims = {d % nd for d in ((dim,) if isinstance(dim, int) else dim)} if nd else set()
    k = len(dims)
    if k == 0 or dims != set(range(nd - k, nd)):
        return None
    return k


def partition(graph, device: str = "cpu", host_scalars: bool = False) -> list:
    """The fusion groups of ``graph`` (every group with at least one member) of the nodes
    computing on ``device`` (a device type: ``"cuda"`` for :mod:`.fuse_cuda`);
    ``host_scalars``: see :func:`classify`."""
    owner: dict = {}          # var id -> (group, cls) of the member that makes it
    groups: list = []

    def new(space, naxes=0):
        g = Group(len(groups), space, naxes)
        groups.append(g)
        return g

    def add(g, n, cls):
        g.members.append((n, cls))
        owner[n.out.id] = (g, cls)

    for n in graph.nodes:
        kind = classify(n, device, host_scalars)
        prods = []
        for x in n.var_inputs():
            o = owner.get(x.id)
            if o is not None and o[0].open and o[0] not in prods:
                prods.append(o[0])
        if kind == "ew":
            target, cls = None, None
            for g in sorted(prods, key=lambda g: -g.naxes):     # reduction groups first
                cls = _fits(g, n, owner)
                if cls is not None:
                    target = g
                    break
            if target is None:
                target, cls = new(n.out.shape), "full"
            for g in prods:
                if g is not target and not _merge(target, g, owner):
                    g.open = False
            add(target, n, cls)
        elif kind in ("reduce", "rowwise"):
            x = n.inputs[0]
            k = reduced_axes(n) if kind == "reduce" else 1
            target = None
            o = owner.get(x.id)
            if o is not None and o[0].open and o[1] == "full" and o[0].space == x.shape and \
                    (o[0].naxes in (0, k)):
                target = o[0]
                target.naxes = k
            if target is None:
                if o is not None:
                    o[0].open = False
                target = new(x.shape, k)
            add(target, n, "stage" if kind == "reduce" else "full")
        else:
            for g in prods:
                g.open = False
    _absorb_rows(graph, groups)
    return [g for g in groups if g.members]


def _absorb_rows(graph, groups) -> None:
    """An elementwise group over a reduction group's per-row shape whose values only that
    group reads joins it as row members (one kernel fewer): cross-entropy's masked row
    gradient ``where(mask, g, 0)`` ahead of log-softmax's backward. The walk above could
    not merge it when it met it: the reading group was not yet a reduction then. The
    kernel runs at its last member, after every member of both, and nothing else reads
    the absorbed values, so every reader still follows the kernel that writes its input."""
    users, outs = graph.users(), {v.id for v in graph.outputs}
    group_of = {id(n): g for g in groups for n, _ in g.members}
    for g in groups:
        if g.naxes or not g.members:
            continue
        mine = {id(n) for n, _ in g.members}
        readers = {id(group_of.get(id(u))): group_of.get(id(u)) for n, _ in g.members
                   for u in users.get(n.out.id, ()) if id(u) not in mine}
        if len(readers) != 1 or any(n.out.id in outs for n, _ in g.members):
            continue
        (t,) = readers.values()
        if t is None or not t.naxes or t.space == g.space or g.space != t.row_shape:
            continue
        t.members.extend((n, "row") for n, _ in g.members)
        for n, _ in g.members:
            group_of[id(n)] = t
        g.members = []


def _fits(g: Group, n, owner) -> str | None:
    """The class ``n`` would have as a member of ``g``, or None."""
    shape = n.out.shape
    ins = [x for x in n.var_inputs() if x.id in owner and owner[x.id][0] is g]
    if g.naxes == 0:
        return "full" if shape == g.space else None
    # NOTE: a reduction without kept dims (shape space[:-naxes]) would broadcast against
    # the wrong axes: such a value only leaves the group.
    if any(x.shape != g.space and x.shape != g.row_shape for x in ins):
        return None
    if shape == g.space:
        return "full"
    if shape == g.row_shape and all(owner[x.id][1] != "full" for x in ins):
        return "row"
    return None


def _merge(target: Group, g: Group, owner) -> bool:
    """Merge open elementwise group ``g`` into ``target`` when its shape fits."""
    if g.naxes != 0:
        return False
    if g.space == target.space:
        cls = "full"
    elif target.naxes and g.space == target.row_shape:
        cls = "row"
    else:
        return False
    for n, _ in g.members:
        owner[n.out.id] = (target, cls)
    target.members.extend((n, cls) for n, _ in g.members)
    g.members = []
    g.open = False
    return True
