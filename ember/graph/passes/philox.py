"""A GPU graph's random draws generated on the device (Philox4x32-10).

Traced, a random draw is a ``random`` node that samples again at every run
(:meth:`ember.graph.trace.Tracer.random`); on a GPU that is a host draw (PCG64) and a
host-to-device copy of the whole sample — a GPT step's dropout masks are hundreds of MB —
and a program holding one cannot be replayed as a CUDA graph (a replay would repeat the
captured draws). On a device with the ``cuda_kernels`` capability this pass replaces each
draw it can generate, tagged by its sampler (:func:`ember.random._sampling`):

* ``rand``/``uniform_``, ``bernoulli``/``bernoulli_`` with a number ``p`` (dropout's
  mask), ``randn``/``normal``/``normal_`` — float32, float16, bfloat16 or float64 (53-bit
  uniforms, float64 Box-Muller), no tensor inputs;
* ``bernoulli(p)``/``bernoulli_(p)`` with a floating tensor ``p`` on the draw's device
  (broadcast to the output): ``cast(uniform < p)``, the uniform float32 (float64 for a
  float64 ``p``), so ``p``'s probabilities are kept to 2**-24 like the number-``p`` mask;
  ``fuse_cuda`` joins the comparison to its readers and the uniform becomes their Philox
  leaf (:mod:`.fuse_philox`): the mask, like dropout's, need not be written;
* ``randint``/``random_`` writing int32 or int64 (``cuda_philox``'s multiply-shift: a
  32-bit word for ranges of at most 2**32 integers, a 64-bit one for wider ranges);

by two nodes (for a tensor ``p``, then the comparison and cast):

* ``philox_key`` (a host step: :mod:`ember.graph.host_steps`; one for up to
  :data:`PER_KEY` draws) takes each draw's ``(seed, offset)`` from its generator (a
  device's default generator for ``generator=None``) and advances that generator's
  Philox offset by the counters the draw uses, on the host, at every run, in graph
  order — so ``ember.manual_seed`` makes compiled runs reproducible and every run draws
  new numbers. The executor uploads the pairs (one copy a key op) like the optimizer's
  step counts;
* ``philox``: the kernel of :mod:`ember.codegen.cuda_philox` reading its pair (row
  ``slot``) from device memory. A CUDA graph's replay refills the pairs before launching
  (:mod:`ember.graph.cuda_graphs`), so such programs may be captured.

When a compiled call is split into a forward and a backward graph (:mod:`..joint`),
:func:`redraw_saved` makes a saved draw's key row the saved value instead of its sample:
the backward draws it again, bit for bit.

Other traced draws stay host draws, as before: ``randperm`` (a device permutation would
be a sort of random keys, not a small change), ``exponential_``, ``randint``/``random_``
of other dtypes, a number-``p`` Bernoulli fill of a non-float tensor, a Bernoulli ``p``
on another device, and draws from a generator that is no ``ember.Generator``
(``multinomial`` and ``normal`` with tensor mean/std are graph breaks).

Like PyTorch's compiled code, compiled GPU draws differ from eager ones (eager draws stay
PCG64 on the host, bit for bit as before), and so do CPU graphs and the stand-in without
a GPU's capabilities (the pass changes nothing there). A generator's Philox offset starts
at 0 when it is seeded (``manual_seed``, ``seed``) and is not part of ``get_state`` /
``set_state`` (nor ``fork_rng``): restoring a state repeats eager draws, not compiled
GPU ones.
"""
from __future__ import annotations

import math
import os
import weakref

import numpy as np

from ... import dtypes as _dt
from ... import random as _random
from ...device import device as _device, get_backend
from ..ir import BufferOp, Graph, GraphOp, Node, Var
from ..trace import RANDOM
from ._util import Rewrite

__all__ = ["PHILOX", "PHILOX_KEY", "REDRAW", "philox", "redraw_saved", "reserve"]

_U64 = 1 << 64
_offsets: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def reserve(gen, counters: int) -> tuple:
    """``(seed, offset)`` for a draw of ``counters`` Philox counters from ``gen``; the
    generator's offset advances past them (it restarts at 0 when ``gen`` is seeded)."""
    rec = _offsets.get(gen)
    if rec is None or rec[0] is not gen._bitgen:     # NOTE: manual_seed makes a new one
        rec = _offsets[gen] = [gen._bitgen, 0]
    off = rec[1]
    rec[1] = (off + counters) % _U64
    return gen._seed % _U64, off


class _KeyOp(GraphOp):
    """``(seed, offset)`` of up to :data:`PER_KEY` draws, a row of two int64 words (uint64
    bits) each, made on the host at every run; ``random`` (never folded, merged or
    removed), ``host`` (the executor runs it with NumPy before the device steps and uploads
    it: one copy for all its draws), ``device_random`` (a CUDA graph may replay the
    program: the pairs are refilled before each replay)."""

    __slots__ = ()
    host = True
    device_random = True


#: draws sharing one key op: its (PER_KEY, 2) words stay a host value (``HOST_MAX``).
PER_KEY = 32


def _run_key(_xp, *, draws):
    """``draws``: ``((generator or None, device index, counters), ...)`` in graph order."""
    rows = []
    for gen, index, n in draws:
        rows.append(reserve(gen if gen is not None else _random.cuda_generator(index), n))
    return np.array(rows, dtype=np.uint64).view(np.int64)


def _run_philox(xp, key, out=None, *, slot, kind, scalars, shape, dtype):
    from ...codegen.cuda_philox import launch
    return launch(xp, key[slot], kind, shape, scalars, out, dtype)


PHILOX_KEY = _KeyOp("philox_key", _run_key, random=True)
#: the kernel: new memory, or a dead buffer of its size the memory planner gives it
PHILOX = BufferOp("philox", _run_philox)


def _spec(n):
    """``(kind, generator, scalars, dtype, tensor_p)`` when node ``n`` is a draw the kernels
    generate: the kernel's kind, parameters and dtype; ``tensor_p``: a Bernoulli draw with
    a tensor ``p`` (its input), made as ``cast(uniform < p)`` (module doc)."""
    from ...codegen.cuda_philox import DTYPES, INT_DTYPES
    if n.op is not RANDOM or len(n.inputs) > 1 or len(n.outs) != 1:
        return None
    o = n.outs[0]
    if o.device is None or o.device.type != "cuda" or \
            not get_backend(o.device).has("cuda_kernels"):
        return None
    tag = getattr(n.params.get("draw"), "sample", None)
    if tag is None:
        return None
    kind, gen, args = tag
    if gen is not None and not isinstance(gen, _random.Generator):
        return None
    if n.inputs:
        p = n.inputs[0]
        if kind != "bernoulli" or args or p.__class__ is not Var or \
                not p.dtype.is_floating_point or p.device != o.device or \
                _broadcast(p.shape, o.shape) != tuple(o.shape):
            return None
        return "uniform", gen, (0.0, 1.0), np.dtype(
            np.float64 if p.dtype is _dt.float64 else np.float32), True
    if kind == "randint":
        low, span = int(args[0]), int(args[1]) - int(args[0])
        if o.dtype.np not in INT_DTYPES or not 0 < span < _U64:
            return None
        return "randint" if span <= 1 << 32 else "randint64", gen, (low, span), o.dtype.np, False
    if kind not in ("uniform", "bernoulli", "normal") or o.dtype.np not in DTYPES or not all(
            isinstance(a, (int, float)) and math.isfinite(a) for a in args):
        return None
    return kind, gen, tuple(float(a) for a in args), o.dtype.np, False


def _broadcast(a, b):
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        return None


def philox(graph: Graph):
    """Replace the device-generated draws of a GPU graph (module doc); ``{"device_draws":
    count}``."""
    if not any(_spec(n) is not None for n in graph.nodes):
        return graph, {"device_draws": 0}
    from ...codegen.cuda_philox import counters, per_counter
    specs = [(n, _spec(n)) for n in graph.nodes]
    draws = [(spec[1], n.outs[0].device.index or 0,
              counters(n.outs[0].numel(), per_counter(spec[0], spec[3])))
             for n, spec in specs if spec is not None]
    cpu = _device("cpu")
    count = 0
    key = None

    def rule(rw, n, ins):
        nonlocal count, key
        spec = _spec(n)
        if spec is None:
            return None
        kind, gen, scalars, dtype, tensor_p = spec
        o = n.outs[0]
        slot = count % PER_KEY
        if slot == 0:       # NOTE: its draws' (seed, offset) rows, reserved in graph order
            part = tuple(draws[count:count + PER_KEY])
            key = rw.b.add1(PHILOX_KEY, (), {"draws": part}, (len(part), 2), _dt.int64, cpu)
        count += 1
        out = rw.b.add(PHILOX, (key,), {"slot": slot, "kind": kind, "scalars": scalars,
                                        "shape": tuple(o.shape), "dtype": dtype},
                       [(o.shape, _dt.as_dtype(dtype), o.device)], None)
        if not tensor_p:
            return out
        # NOTE: elementwise ops fuse_cuda joins to their readers; the uniform becomes a Philox leaf
        return (rw.emit("cast", (rw.emit("lt", (out[0], ins[0])),), dtype=o.dtype),)

    return Rewrite(graph).run(rule), {"device_draws": count}


#: whether a compiled call's backward graph draws a forward draw again from its saved
#: ``(seed, offset)`` instead of reading the saved sample (:func:`redraw_saved`;
#: ``EMBER_PHILOX_REDRAW=0`` saves the sample, for comparison).
REDRAW = os.environ.get("EMBER_PHILOX_REDRAW", "1") != "0"


def redraw_saved(b, fwd_nodes, bwd_nodes, saved, keep) -> tuple:
    """``(forward nodes, backward nodes, saved vars)`` where each saved forward draw the
    kernels generate (dropout's mask) is saved as its ``(seed, offset)`` instead.

    At the split of a traced call into a forward and a backward graph (:mod:`..joint`),
    a dropout's mask is a saved value: the forward writes the whole sample and keeps it
    until the backward reads it. Here such a draw becomes, in the forward, a
    ``philox`` node on a ``philox_key`` (one for up to :data:`PER_KEY` such draws, placed
    before the first: their ``(seed, offset)`` rows, reserved at every run in graph order,
    as the pass does); the key rows are saved (16 bytes a draw, a host value of both
    graphs) and the backward starts with the same ``philox`` node on
    it — the same counters, so the same bits (PyTorch's compiled dropout also redraws
    from the saved Philox state). ``fuse_cuda`` then makes both halves' readers compute
    the draw themselves (:mod:`.fuse_philox`): the mask is never written nor held.
    Draws returned by the forward (``keep``: var ids) or with a tensor ``p`` keep their
    sample; ``b``: the trace's builder (new vars)."""
    from ...codegen.cuda_philox import counters, per_counter
    from ...codegen.ir import LEAF_DTYPES, PHILOX_KINDS
    if not REDRAW:
        return fwd_nodes, bwd_nodes, saved
    producer = {o.id: n for n in fwd_nodes for o in n.outs}
    redraw = {}
    for x in saved:
        n = producer.get(x.id)
        spec = None if n is None or x.id in keep else _spec(n)
        if spec is not None and not spec[4] and spec[0] in PHILOX_KINDS and \
                x.dtype in LEAF_DTYPES:
            redraw[x.id] = spec
    if not redraw:
        return fwd_nodes, bwd_nodes, saved
    cpu = _device("cpu")
    order = [n.outs[0].id for n in fwd_nodes if len(n.outs) == 1 and n.outs[0].id in redraw]
    chunk = {vid: divmod(i, PER_KEY) for i, vid in enumerate(order)}   # (key, slot)
    fwd, keys, sub, head = [], [], {}, []
    for n in fwd_nodes:
        o = n.outs[0] if len(n.outs) == 1 else None
        if o is None or o.id not in chunk:
            fwd.append(n)
            continue
        kind, gen, scalars, dtype, _ = redraw[o.id]
        c, slot = chunk[o.id]
        if slot == 0:   # NOTE: one key op a PER_KEY draws, reserved in graph order (as the pass)
            part = order[c * PER_KEY:(c + 1) * PER_KEY]
            draws = tuple((redraw[v][1], producer[v].outs[0].device.index or 0,
                           counters(producer[v].outs[0].numel(),
                                    per_counter(redraw[v][0], redraw[v][3]))) for v in part)
            keys.append(b.new_var((len(part), 2), _dt.int64, cpu))
            fwd.append(Node(PHILOX_KEY, (), {"draws": draws}, (keys[-1],), loc=n.loc))
        k = keys[c]
        params = {"slot": slot, "kind": kind, "scalars": scalars, "shape": tuple(o.shape),
                  "dtype": dtype}
        fwd.append(Node(PHILOX, (k,), params, (o,), loc=n.loc))
        sub[o.id] = b.new_var(o.shape, o.dtype, o.device)
        head.append(Node(PHILOX, (k,), dict(params), (sub[o.id],), loc=n.loc))
    bwd = head + [Node(n.op, tuple(sub.get(x.id, x) if x.__class__ is Var else x
                                   for x in n.inputs), n.params, n.outs, n.ct, n.loc)
                  for n in bwd_nodes]
    out, seen = [], set()
    for x in saved:        # NOTE: a draw's key row once for all the draws sharing it
        x = keys[chunk[x.id][0]] if x.id in chunk else x
        if x.id not in seen:
            seen.add(x.id)
            out.append(x)
    return fwd, bwd, out
