"""A device graph's chains of view steps as one executor step each.

A compiled GPU step is ~45% view steps (a GPT layer: the fused QKV output reshaped,
permuted, sliced and reshaped again per head; the attention output permuted and
reshaped; each weight transposed): each is a full executor step (~1-2 us of Python
around one ~2-5 us CuPy call). Where a view's only reader is the view right after it in
the step list (``reshape -> permute``, ``slice -> reshape``, ``permute -> reshape``), the
two run as one step calling both kernels in order: the same CuPy calls, the same
arrays, one step less and no slot for the value in between. Views right before a step
that alone reads them (a weight's ``permute(1, 0)`` before its GEMM, the weight-gradient
GEMM's two views) run inside that step, as its arguments' prologue (:class:`Prologue`).

NOTE: a reshape that copies (a strided input) inside a prologue is a temporary of that
step, not counted by the allocator (like a kernel's own temporaries); at the end of a
chain it is the step's result and counted as before.

Only device graphs are chained (:class:`~.executor.Program` on a non-CPU backend); the
CPU executor's steps are unchanged.
"""
from __future__ import annotations

from .ir import Var

__all__ = ["ViewChain", "chain_views", "chainable"]


class ViewChain:
    """``run(xp, a) -> array``: the view kernels ``kernels`` (with their ``params``)
    applied one after another to ``a``."""

    __slots__ = ("kernels", "params")

    def __init__(self, kernels, params):
        self.kernels, self.params = tuple(kernels), tuple(params)

    def __call__(self, xp, a):
        for k, p in zip(self.kernels, self.params):
            a = k(xp, a, **p)
        return a


def chainable(n, s) -> bool:
    """Whether node ``n`` (lowered as step ``s``) is a plain view of one value: one graph
    input, one output of the input's dtype, no cast, no planned buffer, not random."""
    return len(n.outs) == 1 and len(n.inputs) == 1 and n.inputs[0].__class__ is Var and \
        getattr(n.op, "view", False) in (True, "maybe") and s.casts is None and \
        s.buf < 0 and s.bufs is None and n.outs[0].dtype is n.inputs[0].dtype and \
        not getattr(n.op, "random", False)


def chain_views(serial: list, steps: list, nodes: list, keep, xp) -> list:
    """``serial`` (a subsequence of ``steps``, node ``nodes[i]`` lowered as ``steps[i]``)
    with each run of neighbouring view steps (:func:`chainable`) whose values have that
    next step as their only reader (``keep``: graph outputs and pinned values, never
    merged away) merged into one step, and the view steps right before a step whose
    values only it reads made its arguments' prologue (:func:`_folded`); new step
    objects: the originals, which the profiler's path runs, are left as they were.
    ``xp``: the device's array module (a planned-buffer function gets no ``xp``)."""
    views = {id(s) for s, n in zip(steps, nodes) if chainable(n, s)}
    readers: dict = {}
    for n in nodes:
        for x in n.inputs:
            if x.__class__ is Var:
                readers[x.id] = readers.get(x.id, 0) + 1
    out: list = []
    for s in serial:
        prev = out[-1] if out else None
        if prev is not None and id(s) in views and _is_view(prev, views) \
                and s.args == prev.outs and readers.get(prev.outs[0]) == 1 and \
                prev.outs[0] not in keep:
            out[-1] = _merged(prev, s)
        elif id(s) not in views and s.casts is None and out and _is_view(out[-1], views):
            out.append(_folded(s, out, views, readers, keep, xp))
        else:
            out.append(s)
    return out


def _is_view(s, views) -> bool:
    return id(s) in views or s.kernel.__class__ is ViewChain


def _folded(s, out, views, readers, keep, xp):
    """Step ``s`` with the view steps right before it in ``out`` whose values only ``s``
    reads taken out of ``out`` and run as its arguments' prologue (:class:`Prologue`),
    or ``s`` itself when there is none."""
    pro: dict = {}
    frees, untracks = (), ()
    j = len(out) - 1
    while j >= 0 and _is_view(out[j], views):
        v = out[j]
        o = v.outs[0]
        # NOTE: not a view the step writes into (a planned buffer): that array must exist
        if readers.get(o) == 1 and o not in keep and s.args.count(o) == 1 and \
                v.args[0] not in s.args and o != s.buf and o not in (s.bufs or ()):
            k = s.args.index(o)
            pro[k] = (v.args[0], v.kernel if v.kernel.__class__ is ViewChain else
                      ViewChain((v.kernel,), (v.params,)))
            frees, untracks = frees + v.free, untracks + v.untrack
            del out[j]
        j -= 1
    if not pro:
        return s
    f = s.__class__()
    for name in s.__slots__:
        setattr(f, name, getattr(s, name))
    f.args = tuple(pro[i][0] if i in pro else a for i, a in enumerate(s.args))
    chains = tuple((i, c) for i, (_a, c) in sorted(pro.items()))
    f.kernel = Prologue(s.kernel, chains, None)
    if s.outfn is not None:
        f.outfn = Prologue(s.outfn, chains, xp)
    f.free = tuple(dict.fromkeys(s.free + frees))
    f.untrack = tuple(dict.fromkeys(s.untrack + untracks))
    f.name = "+".join([s.name] + ["view"] * len(chains))
    return f


class Prologue:
    """``fn`` (a step's kernel, called ``(xp, *arrays, **params)``, or its planned-buffer
    function, ``(*arrays, out=)``) with the arrays at some positions first put through
    their :class:`ViewChain` (``chains``: ``((position, chain), ...)``): the views their
    own steps made before, inside this call. ``xp``: None for a kernel (its first
    argument), else the array module of a planned-buffer function (no ``xp`` argument)."""

    __slots__ = ("fn", "chains", "xp")

    def __init__(self, fn, chains, xp):
        self.fn, self.chains, self.xp = fn, chains, xp

    def __call__(self, *args, **kw):
        args = list(args)
        xp, off = (args[0], 1) if self.xp is None else (self.xp, 0)
        for i, c in self.chains:
            args[i + off] = c(xp, args[i + off])
        return self.fn(*args, **kw)


def _merged(a, b):
    """One step running view step ``a`` then view step ``b`` (``a``'s output read by ``b``
    only): ``a``'s input, ``b``'s output; both steps' frees, after both views."""
    s = b.__class__()
    ka = a.kernel.kernels if a.kernel.__class__ is ViewChain else (a.kernel,)
    pa = a.kernel.params if a.kernel.__class__ is ViewChain else (a.params,)
    s.kernel = ViewChain(ka + (b.kernel,), pa + (b.params,))
    s.args, s.casts, s.params, s.outs, s.odts = a.args, None, {}, b.outs, b.odts
    s.multi, s.buf, s.bufs, s.outfn, s.reinterp = False, -1, None, None, None
    s.free = tuple(dict.fromkeys(a.free + b.free))
    s.untrack = tuple(dict.fromkeys(a.untrack + b.untrack))
    s.name = f"{a.name}+{b.name}"
    s.count = max(a.count, b.count)     # NOTE: a reshape may copy: its result is checked
    return s
