"""Several launches of one generated elementwise kernel as one (its ``NAME_m`` entry).

A compiled GPU step launches the same kernel many times over independent operands: AdamW's
update once per parameter (one text for every 2-D weight, one for every 1-D one). The
``multi_launch`` pass (:mod:`ember.graph.passes.multi_launch`) makes such a group one graph
node whose runner (:class:`MultiLaunch`) launches the kernel's multi-tensor entry point
(:func:`~.render_cuda_ew.render_multi_entry`, PyTorch's ``multi_tensor_apply``) once per
:data:`MAX_RECORDS` records: each record is one ``NAME_c`` launch (pointers, ``flags``,
``n``, first block), its grid the very one :func:`~.cuda_launch.kernel_plan` gives that
launch, so every element is computed by the same code as the single launch's.

Per layout of the operands (:func:`~.cuda_launch._layout_key` of every record) the
runner checks once that each record would take the ``NAME_c`` entry (else it launches
the records one by one, as :meth:`~.cuda_launch.CudaModule.runner` does) and keeps the
records' sizes and first blocks; the device table is rebuilt and uploaded (one small
host-to-device copy) only when a pointer differs from the previous call's — never while
the allocator hands back the same buffers (parameters and optimizer state are updated in
place: their pointers are stable). Per call, an array that is the very object of the
previous call (a weak reference says so: parameters, optimizer state, the host values'
device slots) is not looked at again; the others (new gradients) are checked for the
layout and read for the pointer.

NOTE: an output written into a given buffer that another record of the group reads (the
memory planner may donate a state input read by one record to another record's output
when both are one node) would be a race between blocks: such an output gets a new array.
"""
from __future__ import annotations

import numpy as np

import weakref

from .cuda_launch import ALIGNED, BLOCK, _asarray, _layout_key, _ptr, kernel_plan, vec_bytes

__all__ = ["MAX_RECORDS", "MultiLaunch"]

#: records per launch of a ``NAME_m`` entry (larger groups are several launches): the
#: binary search stays short and the table small.
MAX_RECORDS = 256


class _Table:
    """One layout's records: per record its size, grid, flags without ALIGNED, each
    pointer's vector alignment (0: a scalar operand); per position of the flat
    arrays + outputs, the number's device copy (else None), the last call's object (a
    weak reference, or a number as ``(class, value)``), layout and pointer."""

    __slots__ = ("n", "blocks", "flags", "vecs", "scalars", "refs", "lays", "ptrs",
                 "chunks", "hazard")

    def __init__(self):
        self.n, self.blocks, self.flags, self.vecs, self.scalars = [], [], [], [], []
        self.refs = self.lays = self.ptrs = None
        self.chunks = ()        # ((device table, records, blocks), ...)
        self.hazard = False


def _ref(a):
    return (a.__class__, a) if isinstance(a, (int, float, bool)) else weakref.ref(a)


def _lay(a):
    return (a.shape, a.strides, a.dtype.char) if hasattr(a, "strides") else (a.__class__, a)


class MultiLaunch:
    """``run(xp, *arrays, outs=None) -> tuple``: the records' launches of ``kernels``
    (one kernel text under several IRs: each record's own shapes) in one ``NAME_m``
    launch per :data:`MAX_RECORDS` records. ``arrays`` are the records' inputs one record
    after another, ``outs`` their output buffers (or None), ``metas`` per record its
    outputs' ``(shape, NumPy dtype)``; ``xp`` the device's array module."""

    def __init__(self, module, kernels, metas, xp=None):
        self.module, self.kernels, self.metas, self.xp = module, list(kernels), metas, xp
        self.nin = [len(k.inputs) for k in self.kernels]
        self.nout = [len(k.outputs) for k in self.kernels]
        self.flat_metas = [m for ms in metas for m in ms]
        self.name = self.kernels[0].name + "_m"
        self.singles = [module.runner(k, m, xp) for k, m in zip(self.kernels, metas)]
        self.tables: dict = {}
        self.last = None            # the table of the previous call
        self.fn = None

    def __call__(self, xp, *arrays, out=None, outs=None, **_params):
        xp = self.xp or xp
        given = [xp.empty(sh, dt) if g is None else g for g, (sh, dt) in zip(
            outs if outs is not None else [None] * len(self.flat_metas), self.flat_metas)]
        flat = arrays + tuple(given)
        t = self.last
        if t is None or not self._same_layout(t, flat):
            t = self._find(xp, arrays, given, flat)
            if t is None:           # NOTE: some record is no NAME_c launch: one each
                return self._singles(xp, arrays, given)
        if t.hazard or not t.chunks:
            self._upload(xp, t, arrays, given)
        if self.fn is None:
            self.fn = self.module.function(self.name)
        for table, nrec, nblocks in t.chunks:
            if nblocks:
                self.fn((nblocks,), (BLOCK,), (table, np.int32(nrec)))
        return tuple(given)

    def _same_layout(self, t, flat) -> bool:
        """Whether ``flat`` has table ``t``'s layout; refreshes the references and
        pointers of the arrays that are new objects (an upload is due when a pointer
        changed: ``t.chunks`` emptied)."""
        refs, lays, ptrs = t.refs, t.lays, t.ptrs
        for i, a in enumerate(flat):
            w = refs[i]
            if w.__class__ is tuple:
                if a.__class__ is not w[0] or a != w[1]:
                    return False
            elif w() is not a:
                if not hasattr(a, "strides") or _lay(a) != lays[i]:
                    return False
                refs[i] = weakref.ref(a)
                p = _ptr(a)
                if p != ptrs[i]:
                    ptrs[i] = p
                    t.chunks = ()
        return True

    def _find(self, xp, arrays, given, flat):
        """The table of ``flat``'s layout (made on first sight), its references and
        pointers set; None when some record would not take ``NAME_c``."""
        ins, gvn = self._split(arrays, given)
        key = tuple(_layout_key(x, g, xp.ndarray) for x, g in zip(ins, gvn))
        if None in key:
            return None
        t = self.tables.get(key, 0)
        if t == 0:
            if len(self.tables) > 16:
                self.tables.clear()
            t = self.tables[key] = self._table(xp, ins, gvn)
        if t is not None:
            t.refs = [_ref(a) for a in flat]
            t.lays = [_lay(a) for a in flat]
            t.ptrs = [_ptr(a if c is None else c) for a, c in zip(flat, t.scalars)]
            t.chunks = ()
        self.last = t
        return t

    def _split(self, arrays, given) -> tuple:
        ins, gvn, a, o = [], [], 0, 0
        for ni, no in zip(self.nin, self.nout):
            ins.append(arrays[a:a + ni])
            gvn.append(given[o:o + no])
            a, o = a + ni, o + no
        return ins, gvn

    def _singles(self, xp, arrays, given) -> tuple:
        ins, gvn = self._split(arrays, given)
        res = [self.singles[r](xp, *ins[r], outs=gvn[r]) for r in range(len(ins))]
        return tuple(x for rr, no in zip(res, self.nout) for x in (rr if no > 1 else (rr,)))

    def _table(self, xp, ins, gvn):
        """The layout's :class:`_Table`, or None when a record would not take ``NAME_c``."""
        t = _Table()
        scalars_out = []
        for k, x, g, metas in zip(self.kernels, ins, gvn, self.metas):
            if any(not isinstance(v, (xp.ndarray, int, float, bool)) or
                   isinstance(v, xp.ndarray) and v.dtype != s.dtype.np
                   for v, s in zip(x, k.inputs)):
                return None             # NOTE: a conversion would make a temporary
            name, grid, _block, args, _res = kernel_plan(k, x, xp, "block", g)
            if name != k.name + "_c":
                return None
            n, flags = int(args[-1]), int(args[-2]) & ~ALIGNED
            t.n.append(n)
            t.blocks.append(grid[0] if n else 0)
            t.flags.append(flags)
            t.scalars += [_asarray(xp, v, s.dtype.np) if not isinstance(v, xp.ndarray)
                          else None for v, s in zip(x, k.inputs)]
            scalars_out += [None] * len(g)
            t.vecs.append([0 if flags >> i & 1 else vec_bytes(s.dtype.itemsize)
                           for i, s in enumerate(k.inputs)] +
                          [vec_bytes(np.dtype(d).itemsize) for _sh, d in metas])
        t.scalars += scalars_out
        t.n, t.blocks, t.flags, t.vecs = (np.array(v, dtype=np.int64) for v in (
            t.n, t.blocks, t.flags, t.vecs))
        return t

    def _upload(self, xp, t, arrays, given) -> None:
        """The records' pointers from ``t.ptrs`` (inputs, then outputs: every record has
        the kernel's counts), the hazard check (module note: such outputs get new arrays
        in ``given``), the device tables."""
        r, ni, no = len(self.kernels), self.nin[0], self.nout[0]
        p = np.array(t.ptrs, dtype=np.int64)
        pin, pout = p[:r * ni].reshape(r, ni), p[r * ni:].reshape(r, no)
        t.hazard = _unshare(xp, pin, pout, given, t.n)
        t.chunks = _tables(xp, t, np.concatenate([pin, pout], axis=1))


def _unshare(xp, pin, pout, given, n) -> bool:
    """Give a new array (in ``given``, its pointer in ``pout``) to each output whose
    buffer another record reads (see the module note); whether there was one."""
    no = pout.shape[1]
    owner = {q: r for r, row in enumerate(pout.tolist()) if n[r] for q in row}
    found = False
    for r, row in enumerate(pin.tolist()):
        for q in row:
            w = owner.get(q, r)
            if w != r:
                for j in range(no):
                    if pout[w, j] == q:
                        g = given[w * no + j]
                        given[w * no + j] = g = xp.empty(g.shape, g.dtype)
                        pout[w, j] = _ptr(g)
                found = True
    return found


def _tables(xp, t, p) -> tuple:
    """The device tables of the records (:data:`MAX_RECORDS` a launch): pointers,
    flags (ALIGNED when every non-scalar pointer is on its vector size), n, first block."""
    ok = np.where(t.vecs == 0, True, p % np.maximum(t.vecs, 1) == 0).all(axis=1)
    flags = t.flags | np.where(ok, ALIGNED, 0)
    chunks = []
    for c0 in range(0, len(p), MAX_RECORDS):
        sl = slice(c0, c0 + MAX_RECORDS)
        blocks = t.blocks[sl]
        first = np.cumsum(blocks) - blocks
        host = np.concatenate([p[sl], flags[sl, None], t.n[sl, None], first[:, None]],
                              axis=1).astype(np.int64)
        chunks.append((xp.asarray(host), len(blocks), int(blocks.sum())))
    return tuple(chunks)
