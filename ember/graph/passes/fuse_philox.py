"""A fused GPU kernel reads no device draw: it computes the draw's elements itself.

The ``philox`` pass turns a GPU graph's draw into a ``philox`` node, a kernel writing the
whole sample (dropout's mask) that the consumers' kernels read back: in a training step
the forward's multiply and the backward's (``grad * mask * scale``) each load it, and its
kernel stores it — a float32 mask of a GPT's activations is hundreds of MB a step.

:func:`philox_leaves` replaces such an input of a lowered group by the
:class:`~ember.codegen.ir.Philox` leaf: element ``f`` of the loop space computes word
``f % 4`` of counter ``offset + f // 4`` under the draw's key, the very numbers the
separate kernel writes there (``codegen/cuda_philox.py``: bitwise the same results). An
input qualifies when it is made by a ``philox`` node, is laid out C-contiguously over
the whole loop space (no broadcast, no transpose: the flat position must be the draw's),
is a 32-bit float draw (uniform, Bernoulli or normal of float32/float16/bfloat16: float64
and integer draws, two words an element or no leaf kind, keep their kernel's sample) and
is no graph output (a returned draw, or a forward graph that saves the mask for its
backward graph with ``EMBER_PHILOX_REDRAW=0``, writes it anyway).
The leaf reads ``(seed, offset)`` from two 0-d int64 kernel operands: a ``philox_words``
host step per draw (:class:`Words`) takes them from the draw's ``philox_key`` row, so the
executor uploads them with its other host values (a CUDA graph's replay refills them).
Once no kernel reads the sample, ``dce`` drops the ``philox`` node: the mask is never
written, and the backward recomputes it from the same words (the forward and backward
kernels of a whole-step graph each hold the leaf; a compiled model's separate backward
graph draws again from the key row its forward saved: ``philox.redraw_saved``).

Only ``fuse_cuda`` calls it (GPU graphs). ``ENABLED`` (``EMBER_PHILOX_FUSE=0`` turns it
off) keeps the separate-kernel path for comparison (tests/cuda/test_cuda_philox_fuse.py).
"""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from ... import dtypes as _dt
from ...codegen.ir import (LEAF_DTYPES, PHILOX_KINDS, InputSpec, Kernel, Load, Philox,
                           ReduceKernel)
from ..ir import GraphOp, Node, Var
from .fuse_index import _substitute
from .fuse_lower import Lowered
from .philox import PHILOX

__all__ = ["ENABLED", "WORDS", "Words", "philox_leaves"]

#: whether fuse_cuda computes draws inside their consumers' kernels (module doc).
ENABLED = os.environ.get("EMBER_PHILOX_FUSE", "1") != "0"


class _WordsOp(GraphOp):
    """``(seed, offset)`` of key row ``slot`` as two 0-d int64 values: a host step (the
    executor runs it with NumPy on the key's host value and uploads what kernels read)."""

    __slots__ = ()
    host = True


def _run_words(_xp, key, *, slot):
    return key[slot, 0].copy(), key[slot, 1].copy()


WORDS = _WordsOp("philox_words", _run_words)


class Words:
    """The ``philox_words`` nodes of one graph, made on first use: one per ``philox``
    node (:meth:`of`), placed right after it (:attr:`after`)."""

    def __init__(self, graph):
        ids = [v.id for v in graph.inputs] + [o.id for n in graph.nodes for o in n.outs]
        self._next = max(ids, default=-1) + 1
        self._of: dict = {}
        self.after: dict = {}           # id(philox node) -> [its words node]
        self.outputs = {v.id for v in graph.outputs}

    def of(self, n) -> tuple:
        """``(seed, offset)`` Vars of ``philox`` node ``n``'s draw."""
        got = self._of.get(id(n))
        if got is None:
            key = n.inputs[0]
            got = tuple(Var(self._next + j, (), _dt.int64, key.device) for j in range(2))
            self._next += 2
            self._of[id(n)] = got
            self.after[id(n)] = [Node(WORDS, (key,), {"slot": n.params["slot"]}, got,
                                      loc=n.loc)]
        return got


def _c_strides(space) -> tuple:
    st, acc = [], 1
    for s in reversed(space):
        st.append(acc if s != 1 else 0)
        acc *= s
    return tuple(reversed(st))


def _draw(n, spec, space) -> bool:
    """Whether input ``spec`` made by node ``n`` is a whole draw over loop space ``space``."""
    if n is None or n.op is not PHILOX or len(n.outs) != 1 or \
            PHILOX_KINDS.get(n.params["kind"]) is None or n.outs[0].dtype not in LEAF_DTYPES:
        return False            # NOTE: float64 and integer draws keep their kernel
    numel = int(np.prod(space, dtype=np.int64))
    return numel > 0 and n.outs[0].numel() == numel and all(
        a == b for a, b, s in zip(spec.strides, _c_strides(space), space) if s != 1)


def philox_leaves(lw: Lowered | None, producer, words: Words) -> Lowered | None:
    """``lw`` with each whole-draw input (module doc) replaced by its Philox leaf, its
    key words appended as inputs; ``lw`` itself when it has none."""
    if lw is None or not ENABLED:
        return lw
    k = lw.kernel
    space = tuple(k.shape) if isinstance(k, ReduceKernel) else tuple(k.out.shape)
    # NOTE: a draw that is a graph output (returned, or a forward graph saving the mask
    # for its backward graph) is written anyway: its readers load it
    draws = {j: producer(x) for j, (x, spec) in enumerate(zip(lw.inputs, k.inputs))
             if x.id not in words.outputs and _draw(producer(x), spec, space)}
    if not draws:
        return lw
    keep = [j for j in range(len(lw.inputs)) if j not in draws]
    table = {j: Load(keep.index(j)) for j in keep}
    inputs, specs = [lw.inputs[j] for j in keep], [k.inputs[j] for j in keep]
    word_spec = InputSpec(_dt.int64, (0,) * len(space))
    for j, n in draws.items():
        p = n.params
        w = words.of(n)
        table[j] = Philox(p["kind"], Load(len(inputs)), Load(len(inputs) + 1),
                          int(np.prod(space)), tuple(p["scalars"]), _dt.as_dtype(p["dtype"]))
        inputs += list(w)
        specs += [word_spec, word_spec]
    return Lowered(_rebuilt(k, specs, _substitute(table)), inputs, lw.outs, lw.ops, lw.group)


def _rebuilt(k, specs, sub):
    """Kernel ``k`` over inputs ``specs`` with ``sub`` applied to every expression."""
    if isinstance(k, Kernel):
        return Kernel(specs, k.out, sub(k.body), k.name,
                      extra=tuple((d, sub(e)) for d, e in k.extra))
    cls, more = ReduceKernel, {}
    if getattr(k, "cols", ()):          # NOTE: column sums (fuse_colsum) kept
        from ...codegen.cuda_rowcols import ColReduceKernel
        cls, more = ColReduceKernel, {"cols": tuple((d, sub(e)) for d, e in k.cols)}
    return cls(specs, k.shape, k.naxes, tuple(replace(st, body=sub(st.body)) for st in k.stages),
               None if k.epilogue is None else sub(k.epilogue), k.out, k.full, k.name,
               extra=tuple((d, None if e is None else sub(e), f) for d, e, f in k.extra),
               **more)
