"""The executor: runs a :class:`~ember.graph.ir.Graph` with each node's kernel.

:class:`Program` lowers a graph once — kernels looked up, input casts and output dtypes
resolved, each value's last use found — so a run is one tight loop: gather the inputs,
cast where the dispatcher would have cast, call the kernel, drop every buffer right after
its last reader. Values live in a flat list indexed by var id.

A device graph's CPU values (optimizer step counts, their bias corrections) stay on the
host: the steps computing them run first, with NumPy, and the device steps read them
from one upload a run (:mod:`.host_steps`).

``parallel=True`` runs the graph level by level on a thread pool: the nodes of one level
are independent, and NumPy releases the GIL inside BLAS and most ufuncs. Whether that is
faster depends on the graph (on two cores, BLAS already uses both): measure with
``bench/compile.py``.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
import functools

import numpy as np

from ..autograd.grad_mode import state as _state
from ..device.base import _backends
from ..dtypes import bool_ as _bool
from .host_steps import Uploads, host_values
from .ir import CONSTANT, Graph, Var
from .levels import level_frees as _level_frees, levels as _levels
from .view_chains import chain_views


class _Step:
    __slots__ = ("kernel", "args", "casts", "params", "outs", "odts", "free", "untrack", "name",
                 "multi", "buf", "bufs", "outfn", "reinterp", "count")


#: ``count`` of a step: its outputs alias an input (count nothing) / may be fresh (check).
_NONE, _CHECK = 0, 1


class Program:
    """A graph lowered for execution. ``program.run(input_arrays) -> output arrays``.

    The program follows its :class:`~ember.graph.memory_plan.MemoryPlan` (``self.plan``):
    values planned in place or into a dead buffer are computed with ``out=`` (``outs=``
    for a multi-output kernel writing state into its own arrays); every buffer
    a kernel allocates is reported to the device allocator when it appears and when its
    last reader is done, and the outputs' bytes are handed over (untracked) at the end —
    the tensors wrapping them count them from then on. Constant nodes run no step: their
    values sit in slots of their own from the start of every run.
    """

    def __init__(self, graph: Graph, parallel: bool = False, workers: int = 2,
                 uncounted=(), pinned=(), saved=(), donate=()):
        from .memory_plan import plan as _plan, UFUNCS, INPLACE, REUSE, ALIAS, CONST, INPUT
        self.graph = graph
        self.parallel = parallel
        nvars = max((v.id for v in graph.vars()), default=-1) + 1
        slots = nvars
        consts: list = []
        mp = _plan(graph, reuse=not parallel, uncounted=uncounted, pinned=pinned, saved=saved,
                   donate=donate)
        self.plan = mp
        last_use: dict = {}
        for i, n in enumerate(graph.nodes):
            for x in n.inputs:
                if x.__class__ is Var:
                    last_use[x.id] = i
        keep = {v.id for v in graph.outputs} | set(pinned)
        # NOTE: values only returned to the caller (no reader in the graph, not saved for a
        # backward): an elementwise kernel may lay them out in its inputs' memory order
        user_outs = {v.id for v in graph.outputs} - set(saved)
        frees: dict = {}
        untracks: dict = {}
        for b in mp.buffers.values():
            if b.dies < len(graph.nodes):
                frees.setdefault(b.dies, []).extend(b.members)
                untracks.setdefault(b.dies, []).extend(b.members)
        for vid, k in mp.kind.items():
            if mp.group.get(vid) is None and vid not in keep:
                i = last_use.get(vid)
                if i is None and k not in (INPUT,):
                    i = next((j for j, n in enumerate(graph.nodes)
                              if any(o.id == vid for o in n.outs)), None)
                if i is not None:
                    frees.setdefault(i, []).append(vid)
        var_of = {v.id: v for v in graph.vars()}
        # NOTE: a GPU graph may start with a CPU scalar (a lifted learning rate): its
        # arrays and allocator are the device's
        types = [v.device.type for v in graph.inputs if v.device is not None]
        btype = next((t for t in types if t != "cpu"), types[0] if types else "cpu")
        self.xp = xp = _backends[btype].xp
        self.alloc = _backends[btype].allocator
        steps, self._serial, self._pre, self._host = [], [], [], []
        inview = {v.id for v in graph.inputs}      # graph inputs and views made of them
        preset: dict = {}       # a constant node's var id -> its slot among the constants
        # NOTE: only where device arrays are not host memory (a GPU; the stand-in's NumPy
        # arrays take CPU values as they are)
        hostv, hostn = host_values(graph) if not parallel and btype != "cpu" and not \
            _backends[btype].has("host_kernels") else (set(), set())
        for i, n in enumerate(graph.nodes):
            s = _Step()
            dev = n.outs[0].device if n.outs else None
            s.kernel = n.op.kernel_for(dev.type if dev is not None else "cpu")
            args = []
            for x in n.inputs:
                if x.__class__ is Var:
                    args.append(preset.get(x.id, x.id))
                else:
                    consts.append(x if xp is np or not isinstance(x, np.ndarray)
                                  else xp.asarray(x))
                    args.append(slots)
                    slots += 1
            s.args = tuple(args)
            s.casts = _casts(n) if n.ct is not None else None
            s.params = n.params
            if xp is np and len(n.outs) == 1 and getattr(n.op, "memory_order", False) and \
                    n.outs[0].id in user_outs and n.outs[0].id not in last_use:
                s.params = dict(n.params, memory_order=True)
            s.outs = tuple(o.id for o in n.outs)
            s.multi = len(n.outs) != 1
            s.odts = tuple(o.dtype.np for o in n.outs)
            s.free = tuple(frees.get(i, ()))
            s.untrack = tuple(untracks.get(i, ()))
            s.name = n.op.name
            kinds = [mp.kind.get(o.id) for o in n.outs]
            s.count = _NONE if all(k in (ALIAS, CONST, INPLACE, REUSE) for k in kinds) and \
                getattr(n.op, "view", False) != "maybe" else _CHECK
            s.buf, s.bufs, s.outfn, s.reinterp = -1, None, None, None
            if s.multi and INPLACE in kinds:
                # per output: the donated input array it is written into, or -1 (new)
                s.bufs = tuple(mp.src[o.id] if k == INPLACE else -1
                               for o, k in zip(n.outs, kinds))
                s.count = _CHECK        # an unusable buffer falls back to a new array
            if not s.multi and kinds[0] in (INPLACE, REUSE):
                o = n.outs[0]
                s.buf = mp.src[o.id]
                if n.op.name in UFUNCS and not hasattr(n.op, "run"):
                    s.outfn = getattr(xp, UFUNCS[n.op.name])
                elif n.op.name == "matmul" and not hasattr(n.op, "run"):
                    # NOTE: the kernel, not xp.matmul: float16/bfloat16 convert to float32
                    # inside (never NumPy's scalar float16 loop), and float32 runs Ember's
                    # own GEMM where eager's does (codegen/sgemm.py): eager's bits
                    s.outfn = functools.partial(s.kernel, xp)
                else:
                    s.outfn = functools.partial(n.op.run, xp, **n.params)
                sv = var_of[s.buf]
                if kinds[0] == REUSE and (sv.shape != o.shape or sv.dtype is not o.dtype):
                    s.reinterp = (o.dtype.np, o.shape)
            steps.append(s)
            if i in hostn:
                # NOTE: a device graph's CPU values (step counts, their bias corrections)
                # are computed on the host, before the device steps: no launch, no copy
                s.buf, s.bufs, s.outfn, s.reinterp, s.count = -1, None, None, None, _NONE
                s.free = s.untrack = ()
                self._host.append(s)
            elif n.op is CONSTANT and len(n.outs) == 1 and n.outs[0].id not in keep:
                # NOTE: its value sits in a slot of its own from the start of every run: no
                # step (a Python call per run, ~3 us on caches the GEMMs just evicted)
                v = xp.asarray(n.params["value"])
                consts.append(v if v.dtype == s.odts[0] else v.astype(s.odts[0]))
                preset[n.outs[0].id] = slots
                slots += 1
            elif _input_view(n, s, inview, keep, mp.kind.get(n.outs[0].id) if n.outs else None,
                             ALIAS):
                # NOTE: a view of a graph input (a bias as a column, the targets reshaped)
                # is made right after the inputs are bound, not by a step among the GEMMs
                self._pre.append(s)
                inview.add(n.outs[0].id)
            else:
                self._serial.append(s)
        self.steps = steps
        self._hosting = bool(hostv)
        self._uploads = Uploads(_backends[btype])
        hosted = {id(s) for s in self._host}
        if hostv:
            slots = self._uploads.redirect(steps, graph.nodes, hosted, hostv, var_of, slots,
                                           consts, nvars)
        self._dev_steps = [s for s in steps if id(s) not in hosted]
        if btype != "cpu" and not parallel:
            # NOTE: views read by one step only run inside that step (.view_chains)
            self._serial = chain_views(self._serial, steps, graph.nodes, keep, xp)
        self.nslots = slots
        self.nvars = nvars
        self._consts = consts
        self._const_base = nvars
        self.input_ids = tuple(v.id for v in graph.inputs)
        # NOTE: a device graph's CPU inputs (0-d tensors: a lifted learning rate) become
        # device arrays when bound, as eager's dispatch moves a CPU scalar; CuPy's kernels
        # refuse NumPy arrays
        self._host_inputs = () if xp is np else tuple(
            k for k, v in enumerate(graph.inputs) if v.device is not None and
            v.device.type == "cpu" and v.id not in hostv)
        # ... and its CPU outputs (that scalar's update: Adam's step count) go back to host
        self._host_outputs = () if xp is np else tuple(
            k for k, v in enumerate(graph.outputs) if v.device is not None and
            v.device.type == "cpu")
        self._to_host = _backends[btype].to_host
        self.output_ids = tuple(v.id for v in graph.outputs)
        self.reused = sum(1 for st in steps if st.buf >= 0)
        self.last_held = 0
        self._levels = _levels(graph) if parallel else None
        self._level_frees = _level_frees(graph, self._levels, keep) if parallel else None
        self._pool = ThreadPoolExecutor(workers) if parallel else None
        self.hostv = frozenset(hostv)
        self.cuda_graph = None       # a GraphRunner (.cuda_graphs) replays it as a CUDA graph

    def run(self, arrays, hold=None) -> list:
        """Outputs for ``arrays`` (one per graph input).

        ``hold``: output var ids whose bytes stay counted after the call (saved for a later
        program); their total is left in ``self.last_held`` for the caller to release.
        A program given a :class:`~ember.graph.cuda_graphs.GraphRunner` (``cuda_graph``)
        replays its device steps as a CUDA graph.
        """
        g = self.cuda_graph
        if g is not None:
            return g.run(arrays, hold)
        return self.run_plain(arrays, hold)

    def run_plain(self, arrays, hold=None) -> list:
        """:meth:`run` without a CUDA graph: every step from Python."""
        vals, own = self.bind(arrays)
        try:
            if self._hosting:
                self.run_host(vals, own)
            self.run_device(vals, own)
        except BaseException:
            self.alloc.current -= sum(own)      # nothing this call made outlives the error
            raise
        return self.finish(vals, own, hold)

    def bind(self, arrays) -> tuple:
        """``(vals, own)``: the slots with the constants and ``arrays`` bound (CPU inputs
        of a device graph as device arrays), and the per-value counted bytes."""
        vals = self.bind_host(arrays)
        xp = self.xp
        for k in self._host_inputs:
            vals[self.input_ids[k]] = xp.asarray(arrays[k])
        return vals, [0] * self.nvars

    def bind_host(self, arrays) -> list:
        """The slots with the constants and ``arrays`` bound as they are."""
        up = self._uploads
        if up.packed and up.backend.stream_key() != up.key:
            up.bind(self._consts, self._const_base)
        vals = [None] * self.nslots
        vals[self._const_base:] = self._consts
        for vid, a in zip(self.input_ids, arrays):
            vals[vid] = a
        return vals

    def run_device(self, vals, own, rec=None) -> None:
        """The device steps (``rec``: the stand-in's CUDA-graph recording, which runs and
        records each step: :class:`.cuda_graphs._Recording`)."""
        xp, alloc = self.xp, self.alloc
        if rec is not None:
            for s in self._pre:             # NOTE: moved first: their frees are not theirs
                rec.step(s, vals, own, alloc, xp, free=False)
            for s in self._serial:
                rec.step(s, vals, own, alloc, xp)
            return
        if self._levels is None and _state.profiler is None:
            for s in self._pre:
                a = vals[s.args[0]]
                vals[s.outs[0]] = s.kernel(xp, a, **s.params)
                if s.count:                 # reshape: a copy if the input is strided
                    _count(s, vals, own, alloc, [a])
        if self._levels is not None:
            self._run_levels(vals, own, alloc, xp)
        elif _state.profiler is not None:      # ember.profiler: each kernel by its name
            prof = _state.profiler
            for s in self._dev_steps:
                prof.call(s.name, "kernel", _exec, s, vals, own, alloc, xp)
        else:
            for s in self._serial:
                _exec(s, vals, own, alloc, xp)

    def finish(self, vals, own, hold=None) -> list:
        """The outputs of a run, its counted bytes handed over (``hold``: see :meth:`run`)."""
        alloc = self.alloc
        held = 0
        if hold is not None:
            for vid in hold:
                held += own[vid]
                own[vid] = 0
        self.last_held = held
        alloc.current -= sum(own)          # outputs: the tensors wrapping them count them
        return self.collect(vals)

    def collect(self, vals) -> list:
        """The output values of ``vals``, CPU outputs of a device graph on the host."""
        outs = [vals[i] for i in self.output_ids]
        for k in self._host_outputs:
            if not isinstance(outs[k], np.ndarray):
                outs[k] = self._to_host(outs[k])
        return outs

    def run_host(self, vals, own, fresh=None) -> None:
        """The host steps and uploads (``fresh``: see :meth:`.host_steps.Uploads.upload`)."""
        self._run_host(vals, own, self.alloc, fresh)

    def _run_host(self, vals, own, alloc, fresh=None) -> None:
        """The host steps (NumPy), then the uploads of the host values device steps read
        (:mod:`.host_steps`); no wait for the device."""
        prof = _state.profiler
        for s in self._host:
            if prof is None:
                _exec(s, vals, own, alloc, np)
            else:
                prof.call(s.name, "kernel", _exec, s, vals, own, alloc, np)
        self._uploads.upload(vals, fresh)

    def _run_levels(self, vals, own, alloc, xp):
        steps = self.steps
        for level, frees in zip(self._levels, self._level_frees):
            if len(level) == 1:
                _exec(steps[level[0]], vals, own, alloc, xp, free=False)
            else:
                list(self._pool.map(lambda i: _exec(steps[i], vals, None, None, xp, free=False),
                                    level))
                for i in level:             # count on this thread: += is not atomic
                    s = steps[i]
                    if s.count:
                        _count(s, vals, own, alloc, [vals[a] for a in s.args])
            for f in frees:
                if f < len(own) and own[f]:
                    alloc.current -= own[f]
                    alloc.num_frees += 1
                    own[f] = 0
                vals[f] = None


    def hold_ids(self, vids) -> tuple:
        """The values whose counted bytes back outputs ``vids`` and no other output."""
        mp = self.plan
        want = set(vids)
        others = set(self.output_ids) - want
        out = []
        for b in mp.buffers.values():
            if any(m in want for m in b.members) and not any(m in others for m in b.members):
                out.extend(b.members)
        return tuple(out)


class Held:
    """Bytes a program left counted (saved activations); released when this object dies."""

    __slots__ = ("alloc", "nbytes")

    def __init__(self, alloc, nbytes):
        self.alloc, self.nbytes = alloc, nbytes

    def __del__(self):
        self.alloc.current -= self.nbytes
        self.alloc.num_frees += 1


def _owned(res, args) -> int:
    """Bytes of new memory behind kernel result ``res`` (0 when it views an input)."""
    if res.base is None:
        for a in args:
            if a is res:
                return 0
        return res.nbytes
    root = res
    while isinstance(root.base, np.ndarray):
        root = root.base
    for a in args:
        if a.__class__ is np.ndarray:
            r = a
            while isinstance(r.base, np.ndarray):
                r = r.base
            if r is root:
                return 0
    return root.nbytes if root.base is None else res.nbytes


def _count(s, vals, own, alloc, args) -> None:
    ids = None          # NOTE: a multi-launch node has ~100 outputs and ~300 inputs
    for o in s.outs:
        res = vals[o]
        if res is None or own[o]:
            continue
        if res.base is None:        # _owned's first case, one set lookup per output
            if ids is None:
                ids = {id(a) for a in args}
            nb = 0 if id(res) in ids else res.nbytes
        else:
            nb = _owned(res, args)
        if nb:
            if alloc.limit is None:      # NOTE: CountingAllocator.track inlined: hot path
                cur = alloc.current = alloc.current + nb
                alloc.num_allocs += 1
                if cur > alloc.peak:
                    alloc.peak = cur
            else:
                alloc.track(nb)          # may raise MemoryError: count it only once tracked
            own[o] = nb


def _exec(s: _Step, vals, own, alloc, xp, free: bool = True):
    args = [vals[i] for i in s.args]
    if s.casts is not None:
        args = [a if c is None or a.dtype == c else a.astype(c) for a, c in zip(args, s.casts)]
    fresh = s.count
    if s.buf >= 0:
        buf = vals[s.buf]
        if buf is not None and _writeable(buf.flags) and buf.flags.c_contiguous:
            if s.reinterp is not None:
                buf = buf.reshape(-1).view(s.reinterp[0]).reshape(s.reinterp[1])
            res = s.outfn(*args, out=buf)       # planned: write into a dead buffer
        else:
            res = s.kernel(xp, *args, **s.params)
            fresh = _CHECK
    elif s.bufs is not None:
        outs = [None if b < 0 else _usable(vals[b]) for b in s.bufs]
        res = s.kernel(xp, *args, outs=outs, **s.params)
    else:
        res = s.kernel(xp, *args, **s.params)
    if s.multi:
        for o, r in zip(s.outs, res):
            vals[o] = r
        if fresh and own is not None:
            _count(s, vals, own, alloc, args)
    else:
        # NOTE: the hot path of every step (~1 us of a small kernel's ~2): identity tests
        # before the NumPy dtype comparison, the single output counted inline
        if res.__class__ is not _ND and res.__class__ is not xp.ndarray:
            res = xp.asarray(res)
        dt = s.odts[0]
        rd = res.dtype
        if rd is not dt and rd != dt:
            res = res.astype(dt)
        o = s.outs[0]
        vals[o] = res
        if fresh and own is not None and not own[o]:
            nb = _owned(res, args)
            if nb:
                if alloc.limit is None:      # NOTE: CountingAllocator.track inlined
                    cur = alloc.current = alloc.current + nb
                    alloc.num_allocs += 1
                    if cur > alloc.peak:
                        alloc.peak = cur
                else:
                    alloc.track(nb)          # may raise MemoryError: count it once tracked
                own[o] = nb
    if free:
        release(s, vals, own, alloc)


def release(s: _Step, vals, own, alloc) -> None:
    """Drop the values whose last reader is step ``s`` and uncount their bytes."""
    for f in s.untrack:
        nb = own[f]
        if nb:
            alloc.current -= nb
            alloc.num_frees += 1
            own[f] = 0
    for f in s.free:
        vals[f] = None


_ND = np.ndarray


def _input_view(n, s, inview, keep, kind, alias) -> bool:
    """Whether node ``n`` (step ``s``) is a view of a graph input (or of such a view) the
    planner placed as an alias: made once at the start of a run, outside the step loop."""
    return len(n.outs) == 1 and len(n.inputs) == 1 and n.inputs[0].__class__ is Var and \
        n.inputs[0].id in inview and getattr(n.op, "view", False) in (True, "maybe") and \
        kind == alias and s.casts is None and s.buf < 0 and n.outs[0].id not in keep and \
        n.outs[0].dtype is n.inputs[0].dtype and not getattr(n.op, "random", False)


def _usable(buf):
    """``buf`` when a kernel may write into it (writeable, C-contiguous), else None."""
    if buf is not None and _writeable(buf.flags) and buf.flags.c_contiguous:
        return buf
    return None


def _writeable(flags) -> bool:
    # NOTE: CuPy's flags have no ``writeable`` (device arrays always are)
    return getattr(flags, "writeable", True)


def _casts(n):
    """Per input: the NumPy dtype the dispatcher cast it to, or None (see dispatch)."""
    ct = n.ct
    keep_bool = n.op.elementwise and any(
        x.__class__ is Var and x.dtype is ct for x in n.inputs)
    out = []
    for x in n.inputs:
        if x.__class__ is Var and x.dtype is not ct and not (keep_bool and x.dtype is _bool):
            out.append(ct.np)
        else:
            out.append(None)
    return out if any(c is not None for c in out) else None


def run_graph(graph: Graph, arrays) -> list:
    """Run ``graph`` once on NumPy/CuPy ``arrays`` (one per graph input)."""
    return Program(graph).run([np.asarray(a) if not hasattr(a, "dtype") else a
                               for a in arrays])
