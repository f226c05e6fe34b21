"""``gemm_epilogue``: elementwise work that follows a float32 GEMM, done inside the GEMM.

Ember's GEMM (:func:`ember.codegen.sgemm.gemm`) can finish each output tile while it is in
registers, or each block of rows while it is in L2; three chains of a linear layer's
training step go there instead of into kernels that read the product back (issue 19, the
compiled W1 MLP step):

* **SGD's step.** A traced SGD update without momentum or weight decay is ``w_new =
  sub(w, mul(g, lr))`` after ``g = matmul(a, b)``, the weight gradient. Run apart, the
  update streams ``g`` back in after the GEMM wrote it (W1's two big weights: 1.6 + 1 MB).
  The chain becomes one ``matmul_sgd(a, b, w, lr)`` node with two outputs, ``(g,
  w_new)``: the GEMM writes ``g`` (still the parameter's ``.grad``) and then, over each
  block of rows it has just finished (in L2), ``w - lr * g``, into ``w``'s own buffer
  when the memory planner donates it (``accepts_outs = "inplace"``; each element of ``w``
  is read before it is written). (Doing it in each tile's stores instead measured
  slower: ``w`` is then read 6 rows x 256 bytes at a time.)
* **Bias and relu.** ``relu(add(matmul(a, b), bias))`` (the relu optional), the bias a row
  ``(N,)`` or, in a feature-major layer (``feature_major``), a column ``(M, 1)``, becomes
  one ``matmul_bias`` node, whose GEMM sums ``k`` in one block where B's packed block
  stays in L2 (``sgemm.ONE_BLOCK_BYTES``: the forward products of W1's first two layers,
  ``K`` 784 and 512).
* **Relu's backward.** ``threshold_backward(matmul(a, b), y, 0)`` (``y`` the forward's
  relu output) becomes one ``matmul_mask`` node; a ``sum`` of its rows (the layer's bias
  gradient) comes out of the same stores as a second output, and when SGD's step of the
  layer's bias reads that gradient alone, the step too (``bias_sgd``: one C call over the
  finished sums, ``codegen/sgd_vec.py``; a third output instead of a fused node).

Bits: the update is rounded once (an FMA), as the ``fuse`` pass's kernel for the same
chain computes it (its C contracts ``mul`` + ``sub``); the bias add is rounded on its
own, relu keeps NaN and turns ``-0`` into ``+0`` as the fused ``add,relu`` kernel, the
mask is ``threshold_backward``'s (``y <= 0 ? 0 : g``). Two things change bits: a forward
product whose ``k`` now runs in one block (another summation order than ``KC`` blocks),
and the row sums, added in float32 in the GEMM's stores (the fused reduction sums in
double): float32 rounding either way. 2-D transposed operands are read in place
(``ta``/``tb``, as ``matmul_t``). Only where Ember's GEMM runs the product
(:func:`~ember.codegen.sgemm.worth` and a variant this CPU runs; elsewhere the graph is
left alone): CPU graphs (a host pass), before ``fuse``, which would otherwise take the
chains into elementwise kernels of their own.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as _dt
from ...codegen import sgd_vec, sgemm
from ..ir import BufferOp, Graph, GraphOp, Var
from ._util import Rewrite
from .matmul_t import _run_matmul_t, _transposed

__all__ = ["gemm_epilogue", "MATMUL_SGD", "MATMUL_BIAS", "MATMUL_MASK"]

_F32 = np.dtype(np.float32)


class _SgdGemmOp(GraphOp):
    """``(g, w_new) = matmul_sgd(a, b, w, lr)``: ``g`` new memory, ``w_new`` written into
    ``w``'s buffer where the planner donates it."""

    __slots__ = ()
    accepts_outs = "inplace"
    fresh_out = True


def _operands(a, b, ta, tb):
    return a.T if ta else a, b.T if tb else b


def _run_matmul_sgd(xp, a, b, w, lr, outs=None, *, ta=False, tb=False):
    wo = outs[1] if outs is not None and outs[1] is not None else None
    lr32 = float(np.float32(lr))         # the mul's cast of the learning rate
    if xp is np:
        into = np.empty(w.shape, _F32) if wo is None else wo
        g = sgemm.gemm(*_operands(a, b, ta, tb), update=(w, into, lr32))
        if g is not None:
            return g, into
    g = _run_matmul_t(xp, a, b, ta=ta, tb=tb)
    # NOTE: no Ember GEMM here: w - g * lr in float64 rounded to float32, the FMA's bits
    # but for double rounding (rarely one ulp)
    new = (w.astype(np.float64) - g.astype(np.float64) * np.float64(lr32)).astype(_F32)
    if wo is not None:
        wo[...] = new
        new = wo
    return g, new


def _run_matmul_bias(xp, a, b, bias, out=None, *, ta=False, tb=False, rows=False,
                     relu=False):
    x, y = _operands(a, b, ta, tb)
    if xp is np:
        r = sgemm.gemm(x, y, out, bias=bias.reshape(-1), bias_rows=rows, relu=relu)
        if r is not None:
            return r
    r = _run_matmul_t(xp, a, b, ta=ta, tb=tb)
    r = xp.add(r, bias, out=r)
    if relu:
        r = xp.where((r > 0) | (r != r), r, xp.zeros((), r.dtype))
    if out is not None:
        out[...] = r
        return out
    return r


def _run_matmul_mask(xp, a, b, y, *sgd, out=None, ta=False, tb=False, rowsum=False,
                     bias_sgd=False):
    x, yy = _operands(a, b, ta, tb)
    r = None
    if xp is np:
        sums = np.empty(x.shape[0], _F32) if rowsum else None
        r = sgemm.gemm(x, yy, out, mask=y, row_sums=sums)
    if r is None:
        r = _run_matmul_t(xp, a, b, ta=ta, tb=tb)
        r = xp.where(y <= 0, xp.zeros((), r.dtype), r)   # threshold_backward's template
        if out is not None:
            out[...] = r
            r = out
        sums = r.sum(axis=1) if rowsum else None
    if not rowsum:
        return r
    if not bias_sgd:
        return r, sums
    bias, lr = sgd                    # the layer's bias, SGD's step on its gradient
    if xp is not np:
        return r, sums, (bias.astype(np.float64) - sums.astype(np.float64)
                         * np.float64(np.float32(lr))).astype(bias.dtype)
    return r, sums, sgd_vec.step(bias, sums, float(lr))


#: ``(g, w - lr * g)`` for ``g = a @ b`` (``a.T``/``b.T`` with ``ta``/``tb``), float32
MATMUL_SGD = _SgdGemmOp("matmul_sgd", _run_matmul_sgd)
#: ``[relu](a @ b + bias)``, bias ``(N,)`` or (``rows``) ``(M, 1)``, float32
MATMUL_BIAS = BufferOp("matmul_bias", _run_matmul_bias, accepts_out="out")
#: ``threshold_backward(a @ b, y, 0)``: the product where ``y > 0`` (or NaN), else +0;
#: with ``rowsum``, also its rows' sums (a second output, in float32); with ``bias_sgd``
#: (two more inputs, ``bias`` and ``lr``) also ``bias - lr * sums`` (SGD's step of the
#: layer's bias, one rounding as the fused kernel's)
MATMUL_MASK = BufferOp("matmul_mask", _run_matmul_mask, accepts_out="out")


#: multiply-adds from which a product whose relu backward (and row sums) it takes runs
#: Ember's GEMM, though :func:`~ember.codegen.sgemm.worth` leaves it to OpenBLAS: W1's
#: ``W3.T @ g`` (512x10x128, 0.66 M) then replaces a GEMM and a fused mask-and-sum kernel
#: (in the compiled step, one process: 55 + 48 -> 71 us); the SGD fold keeps ``worth``
#: (W1's 10x128x512 weight gradient measured slower in Ember's GEMM)
MASK_MIN_MACS = 1 << 18


def _f32_matmul(n, min_macs=None) -> bool:
    """Whether ``n`` is a 2-D float32 ``matmul`` that Ember's GEMM runs (``min_macs``:
    also from that many multiply-adds, with :func:`~ember.codegen.sgemm.worth`'s least
    rows and columns)."""
    if n is None or n.op.name != "matmul" or hasattr(n.op, "run") or len(n.outs) != 1:
        return False
    x, y = n.inputs
    o = n.outs[0]
    if not (x.__class__ is Var and y.__class__ is Var and x.ndim == 2 and y.ndim == 2 and
            o.dtype is _dt.float32 and x.dtype is o.dtype and y.dtype is o.dtype and
            n.ct in (None, o.dtype)):
        return False
    M, K, N = x.shape[0], x.shape[1], y.shape[1]
    if sgemm._isa(None) is None:
        return False
    return sgemm.worth(M, K, N) or (min_macs is not None and M * K * N >= min_macs and
                                    N >= sgemm.MIN_N and M >= sgemm.MIN_M)


def _plain(n, name, nin) -> bool:
    return n is not None and n.op.name == name and not hasattr(n.op, "run") and \
        len(n.inputs) == nin and len(n.outs) == 1 and n.ct in (None, _dt.float32) and \
        n.outs[0].dtype is _dt.float32


def _scalar(v) -> bool:
    return v.__class__ is Var and v.shape == () and v.dtype in (_dt.float32, _dt.float64)


class _Graph:
    """Producers, positions and readers of a graph's values."""

    def __init__(self, graph: Graph):
        self.prod, self.pos, self.readers = {}, {}, {}
        for i, n in enumerate(graph.nodes):
            for o in n.outs:
                self.prod[o.id], self.pos[o.id] = n, i
            for x in n.inputs:
                if x.__class__ is Var:
                    self.readers.setdefault(x.id, []).append(n)
        self.outs = {v.id for v in graph.outputs}

    def only(self, v) -> bool:
        """Whether value ``v`` has one reader and is not a graph output."""
        return v.__class__ is Var and len(self.readers.get(v.id, ())) == 1 and \
            v.id not in self.outs

    def before(self, v, i) -> bool:
        return self.pos.get(v.id, -1) < i


def _sgd(gr: _Graph, s):
    """``(matmul node, ("sgd", [mul, sub], w, lr))`` when ``s`` is ``sub(w, mul(g, lr))``
    after a GEMM making ``g``, else None."""
    if not _plain(s, "sub", 2):
        return None
    w, t = s.inputs
    mul = gr.prod.get(t.id) if t.__class__ is Var else None
    if not _plain(mul, "mul", 2) or not gr.only(t):
        return None
    g, lr = mul.inputs if _scalar(mul.inputs[1]) else mul.inputs[::-1]
    m = gr.prod.get(g.id) if g.__class__ is Var else None
    if not _scalar(lr) or not _f32_matmul(m) or w.__class__ is not Var or \
            w.dtype is not _dt.float32 or w.shape != g.shape:
        return None
    at = gr.pos[g.id]
    if not (gr.before(lr, at) and gr.before(w, at)):
        return None                     # made after the product: cannot move there
    return m, ("sgd", [mul, s], w, lr)


def _bias(gr: _Graph, add):
    """``(matmul node, ("bias", members, bias, rows, relu))`` when ``add`` adds a bias row
    ``(N,)`` or column ``(M, 1)`` to a GEMM's product read by nothing else (the node is
    emitted where the add or its relu was: the bias may be made after the product)."""
    if not _plain(add, "add", 2):
        return None
    for m_v, b_v in (add.inputs, add.inputs[::-1]):
        m = gr.prod.get(m_v.id) if m_v.__class__ is Var else None
        if not _f32_matmul(m) or not gr.only(m_v) or b_v.__class__ is not Var or \
                b_v.dtype is not _dt.float32:
            continue
        M, N = m_v.shape
        rows = b_v.shape == (M, 1)
        if not rows and b_v.shape not in ((N,), (1, N)):
            continue
        members, o, relu = [add], add.outs[0], False
        if gr.only(o) and _plain(gr.readers[o.id][0], "relu", 1):
            members.append(gr.readers[o.id][0])
            relu = True
        return m, ("bias", members, b_v, rows, relu)
    return None


def _mask(gr: _Graph, n):
    """``(matmul node, ("mask", [n], y, sum node or None))`` when ``n`` is
    ``threshold_backward(g, y, 0)`` of a GEMM's product ``g`` read by nothing else (relu's
    backward; ``y``, the forward's relu output, made before the product: the node takes
    the product's place); a ``sum`` of its rows (the layer's bias gradient) is taken in the
    same stores."""
    if not _plain(n, "threshold_backward", 2) or n.params.get("threshold") != 0.0:
        return None
    g, y = n.inputs
    m = gr.prod.get(g.id) if g.__class__ is Var else None
    if not _f32_matmul(m, MASK_MIN_MACS) or not gr.only(g) or y.__class__ is not Var or \
            y.dtype is not _dt.float32 or y.shape != g.shape or not gr.before(y, gr.pos[g.id]):
        return None
    rows = next((r for r in gr.readers.get(n.outs[0].id, ()) if _row_sum(r)), None)
    upd = None if rows is None else _bias_sgd(gr, rows.outs[0], gr.pos[g.id])
    return m, ("mask", [n], y, rows, upd)


def _bias_sgd(gr: _Graph, s, at):
    """``(mul, sub, bias, lr)`` when row sums ``s`` (a bias gradient) are read by SGD's
    step ``sub(bias, mul(s, lr))`` alone (besides graph outputs), ``bias`` and ``lr``
    made before position ``at``; else None."""
    readers = gr.readers.get(s.id, ())
    if len(readers) != 1 or not _plain(readers[0], "mul", 2):
        return None
    mul = readers[0]
    lr = mul.inputs[1] if mul.inputs[0] is s else mul.inputs[0]
    sub = gr.readers.get(mul.outs[0].id, [None])
    sub = sub[0] if len(sub) == 1 and mul.outs[0].id not in gr.outs else None
    if not (_scalar(lr) and _plain(sub, "sub", 2) and sub.inputs[1] is mul.outs[0]):
        return None
    bias = sub.inputs[0]
    if bias.__class__ is not Var or bias.dtype is not _dt.float32 or bias.shape != s.shape \
            or not (gr.before(bias, at) and gr.before(lr, at)):
        return None
    return mul, sub, bias, lr


def _row_sum(r) -> bool:
    """Whether node ``r`` is a float32 ``sum`` of a 2-D value over its last dim."""
    if r.op.name != "sum" or hasattr(r.op, "run") or r.outs[0].dtype is not _dt.float32:
        return False
    dim = r.params.get("dim")
    dims = (dim,) if isinstance(dim, int) else tuple(dim or ())
    return dims in ((1,), (-1,)) and not r.params.get("keepdim") and \
        r.params.get("dtype") is None


_RULES = {"sub": _sgd, "add": _bias, "threshold_backward": _mask}


def _matches(graph: Graph) -> tuple:
    """``({id(matmul node): what to fold}, _Graph)`` (:func:`_sgd`, :func:`_bias`,
    :func:`_mask`)."""
    gr = _Graph(graph)
    found = {}
    for n in graph.nodes:
        rule = _RULES.get(n.op.name)
        hit = rule(gr, n) if rule is not None else None
        if hit is not None and id(hit[0]) not in found:
            found[id(hit[0])] = hit[1]
    return found, gr


def gemm_epilogue(graph: Graph):
    """Fold SGD's ``w - lr * g``, bias + relu and relu's backward into the GEMMs they
    follow; returns ``(graph, {"gemm_sgd": n, "gemm_bias": n, "gemm_mask": n})``."""
    found, gr = _matches(graph)
    counts = {f"gemm_{k}": sum(1 for f in found.values() if f[0] == k)
              for k in ("sgd", "bias", "mask")}
    if not found:
        return graph, counts
    skip = {id(x) for f in found.values() for x in f[1][:-1]}
    skip |= {id(f[4][0]) for f in found.values() if f[0] == "mask" and f[4] is not None}
    # the last member of each chain -> the new var that stands for its output, or (bias)
    # the matmul node whose GEMM is emitted there
    last = {id(f[1][-1]): None for f in found.values()}
    for n in graph.nodes:
        f = found.get(id(n))
        if f is not None and f[0] == "bias":
            last[id(f[1][-1])] = n

    def operands(rw, n):
        new, flags = [], {}
        for v, flag in zip(n.inputs, ("ta", "tb")):
            p = gr.prod.get(v.id)
            if _transposed(p) and gr.only(v):
                new.append(rw.env[p.inputs[0].id])
                flags[flag] = True
            else:
                new.append(rw.env[v.id])
        return new, flags

    def mask(rw, n, hit):
        _, (thr,), y, rows, upd = hit
        new, flags = operands(rw, n)
        o = thr.outs[0]
        spec = [(o.shape, o.dtype, o.device)]
        if rows is None:
            (t,) = rw.b.add(MATMUL_MASK, (*new, rw.env[y.id]), flags, spec, None)
        else:
            so = rows.outs[0]
            spec.append((so.shape, so.dtype, so.device))
            if upd is None:
                t, sums = rw.b.add(MATMUL_MASK, (*new, rw.env[y.id]),
                                   dict(flags, rowsum=True), spec, None)
            else:
                _, sub, bias, lr = upd
                bo = sub.outs[0]
                t, sums, bn = rw.b.add(
                    MATMUL_MASK, (*new, rw.env[y.id], rw.env[bias.id], rw.env[lr.id]),
                    dict(flags, rowsum=True, bias_sgd=True),
                    spec + [(bo.shape, bo.dtype, bo.device)], None)
                last[id(sub)] = bn      # the bias's step, met later, is this output
            last[id(rows)] = sums       # the row sum, met later, is this output
        last[id(thr)] = t               # so is relu's backward
        return (None,)                  # the product itself: read only by the mask

    def rule(rw, n, ins):
        if id(n) in skip:
            return (None,)              # an inner member: only the last one is read
        at = last.get(id(n), False)
        if at is not False and at.__class__ is Var:
            return (at,)                # a sub or sum met later: an output of the GEMM
        if at is not False:             # a bias chain's end: the GEMM goes here
            _, members, bias, rows, relu = found[id(at)]
            new, flags = operands(rw, at)
            return rw.b.add(MATMUL_BIAS, (*new, rw.env[bias.id]),
                            dict(flags, rows=rows, relu=relu),
                            [(n.outs[0].shape, n.outs[0].dtype, n.outs[0].device)], None)
        hit = found.get(id(n))
        if hit is None:
            return None
        if hit[0] == "bias":
            return (None,)              # read only by the add: emitted at its chain's end
        if hit[0] == "mask":
            return mask(rw, n, hit)
        _, members, w, lr = hit
        new, flags = operands(rw, n)
        o, end = n.outs[0], members[-1].outs[0]
        g, wn = rw.b.add(MATMUL_SGD, (*new, rw.env[w.id], rw.env[lr.id]), flags,
                         [(o.shape, o.dtype, o.device), (end.shape, end.dtype, end.device)],
                         None)
        last[id(members[-1])] = wn
        return (g,)

    return Rewrite(graph).run(rule), counts
