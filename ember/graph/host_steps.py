"""A device graph's CPU values, kept on the host by the executor (:mod:`.executor`).

A compiled training step on a GPU reads CPU 0-d tensors: the optimizer's step counts
(PyTorch keeps ``state["step"]`` on the CPU), the lifted learning rate, and what is
computed from them (Adam's bias corrections, one chain per parameter:
:class:`~ember.graph.passes.host_scalars.HostFusedOp`). The executor once bound every CPU
input as a device array (a copy each) and ran those chains on the GPU, copying the new
step counts back (a copy each that waits for the GPU): ~600 tiny launches and copies a
GPT step, each tens of microseconds of host time.

Instead (:func:`host_values`): the CPU inputs stay NumPy arrays, the steps that read only
such values and write CPU values run on the host with NumPy before the device steps, and
:class:`Uploads` gives the device steps that read a host value a device copy — a 0-d
value read by a kernel writing new memory, a slot of one per-stream device buffer per
dtype refilled by one upload a run (no view made per run), anything else a copy made
each run. Nothing waits for the device.
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen.ir import Kernel
from .ir import Graph, GraphOp, Var

__all__ = ["HOST_MAX", "Uploads", "host_values", "writes_new"]


#: CPU values of at most this many elements stay on the host (larger CPU inputs are
#: copied to the device once when bound, as before).
HOST_MAX = 64


def _small_cpu(v) -> bool:
    return v.device is not None and v.device.type == "cpu" and math.prod(v.shape) <= HOST_MAX


def host_values(graph: Graph) -> tuple:
    """``(var ids, node indices)`` a device graph computes on the host: its small CPU
    inputs and the small CPU outputs of registry ops (or ``host`` graph ops:
    ``HostFusedOp``, a device draw's Philox key) reading only such values (an optimizer's
    step counts and their bias corrections)."""
    hv = {v.id for v in graph.inputs if _small_cpu(v)}
    hn: set = set()
    # NOTE: a host op with no inputs (a device draw's Philox key: passes/philox.py) is one
    if not hv and not any(getattr(n.op, "host", False) is True and not n.inputs
                          for n in graph.nodes):
        return hv, hn
    for i, n in enumerate(graph.nodes):
        op = n.op
        if not n.outs or (getattr(op, "host", False) is not True if isinstance(op, GraphOp)
                          else getattr(op, "random", False)):
            continue
        if all(_small_cpu(o) for o in n.outs) and all(
                x.id in hv if x.__class__ is Var else not isinstance(x, np.ndarray)
                for x in n.inputs):
            hn.add(i)
            hv.update(o.id for o in n.outs)
    return hv, hn


def _space(op, j: int, v):
    """The loop shape to pre-broadcast a 0-d host value to as input ``j`` of a generated
    elementwise kernel (its launcher then passes it as is: no ``broadcast_to`` per launch,
    ~5 us in CuPy, three a parameter of an AdamW step), else None."""
    k = getattr(op, "kernel", None)
    if not hasattr(op, "module") or not isinstance(k, Kernel) or j >= len(k.inputs) or \
            k.inputs[j].dtype is not v.dtype:
        return None
    return tuple(k.out.shape) or None


def writes_new(op) -> bool:
    """Whether a device step's output is always new memory (never a view of an input): a
    generated kernel or an elementwise registry op other than a cast."""
    if getattr(op, "view", False):
        return False
    return hasattr(op, "module") or (getattr(op, "elementwise", False) and op.name != "cast")


class Uploads:
    """The device copies of the host values device steps read (see the module doc).

    ``redirect`` points the steps' arguments at new constant slots; ``bind`` puts the
    current stream's buffer views in those slots (a new stream gets buffers of its own:
    work on one stream runs in order, so a run's upload never overtakes the previous
    run's readers); ``upload`` refills them from a run's host values.
    """

    def __init__(self, backend):
        self.backend = backend
        self.packed: tuple = ()     # per dtype: (dtype, host var ids, ((slot, index,
        #                             broadcast shape or None), ...))
        self.fresh: tuple = ()      # (slot, host var id): a device copy made each run
        self.bufs: list = []
        self._by_key: dict = {}
        self.key = None

    def redirect(self, steps, nodes, skip, hostv, var_of, slots, consts, nvars) -> int:
        """Rewrite the arguments of ``steps`` (but those in ``skip``: ids of host steps)
        that read host values; returns the new slot count (``consts`` grows with it)."""
        up: dict = {}           # (host var id, broadcast shape or None) -> its slot
        fresh: dict = {}        # host var id -> its slot for a per-run copy
        for s, n in zip(steps, nodes):
            if id(s) in skip:
                continue
            args = list(s.args)
            for j, a in enumerate(args):
                if a >= nvars or a not in hostv:
                    continue
                if var_of[a].shape == () and writes_new(n.op):
                    key = (a, _space(n.op, j, var_of[a]))
                    if key not in up:
                        up[key] = slots
                        consts.append(None)
                        slots += 1
                    args[j] = up[key]
                else:
                    if a not in fresh:
                        fresh[a] = slots
                        consts.append(None)
                        slots += 1
                    args[j] = fresh[a]
            s.args = tuple(args)
            if s.buf in hostv:          # NOTE: never a host array as a device kernel's out
                s.buf, s.outfn, s.reinterp, s.count = -1, None, None, 1   # _CHECK
            if s.bufs is not None and any(b in hostv for b in s.bufs):
                s.bufs = tuple(-1 if b in hostv else b for b in s.bufs)
        by_dt: dict = {}        # dtype -> ({host var id: index}, [(slot, index, shape)])
        for (vid, space), slot in up.items():
            index, views = by_dt.setdefault(var_of[vid].dtype.np, ({}, []))
            views.append((slot, index.setdefault(vid, len(index)), space))
        self.packed = tuple((dt, tuple(index), tuple(views))
                            for dt, (index, views) in by_dt.items())
        self.fresh = tuple((slot, vid) for vid, slot in fresh.items())
        return slots

    def bind(self, consts: list, base: int) -> None:
        """The current stream's device buffers (made on its first run), their 0-d views
        in the constants' slots (``consts[slot - base]``)."""
        key = self.backend.stream_key()
        got = self._by_key.get(key)
        if got is None:
            got = self._by_key[key] = []
            xp = self.backend.xp
            for dt, vids, views in self.packed:
                dev = self.backend.empty((len(vids),), dt)
                got.append((dev, [(slot, dev[i, ...] if space is None else
                                   xp.broadcast_to(dev[i, ...], space))
                                  for slot, i, space in views]))
        for _dev, views in got:
            for slot, v in views:
                consts[slot - base] = v
        self.bufs = [dev for dev, _ in got]
        self.key = key

    def upload(self, vals: list, fresh=None) -> None:
        """One upload per dtype of this run's host values, and the per-run copies
        (``fresh``: ``((slot, host var id, device array), ...)`` to refill instead: the
        arrays a CUDA graph reads, :mod:`.cuda_graphs`)."""
        be = self.backend
        for (dt, vids, _slots), dev in zip(self.packed, self.bufs):
            be.upload_into(dev, np.array([vals[v] for v in vids], dtype=dt))
        if fresh is not None:
            for slot, vid, dev in fresh:
                be.upload_into(dev, np.asarray(vals[vid], dtype=dev.dtype))
                vals[slot] = dev
            return
        for slot, vid in self.fresh:
            vals[slot] = be.asarray(vals[vid])
