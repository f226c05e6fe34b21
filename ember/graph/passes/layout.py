"""Layout: run a convolution in NCHW (Ember's lowering) or NHWC, whichever measures faster.

``F.conv2d`` is traced as ``matmul(W.reshape(C, Cin*kh*kw), unfold(x))``: im2col columns of
shape (N, Cin*kh*kw, OH*OW) and N GEMMs. The NHWC alternative (:data:`CONV_NHWC`) takes
windows of ``x`` in channels-last order and runs *one* GEMM (N*OH*OW, kh*kw*Cin) @
(kh*kw*Cin, C), then hands back the (N, C, OH*OW) result as a transposed view, so the rest
of the graph is unchanged. Which is faster depends on the shapes and the BLAS, so the
pass times both on random data of each conv's shape, once per shape (:data:`DECISIONS`),
and rewrites only when NHWC is at least :data:`MARGIN` faster. :func:`describe` gives the
measurements ("kept NCHW (measured 0.41 ms vs 0.63 ms)"). Opt-in: a different GEMM may
round differently, and the benchmark costs time at compile.
"""
from __future__ import annotations

import time

import numpy as np

from ...ops.registry import REGISTRY
from ..ir import Graph, GraphOp
from ._util import Rewrite

#: NHWC must take at most this fraction of the NCHW time to be chosen.
MARGIN = 0.9
#: ``{shape key: (choice, nchw ms, nhwc ms)}``, filled by measurements at pass time.
DECISIONS: dict = {}


def _run_conv_nhwc(xp, x, w, *, kernel_size, dilation, padding, stride, pad_value):
    n, cin, h, wd = x.shape
    (kh, kw), (dh, dw), (sh, sw) = kernel_size, dilation, stride
    c = w.shape[0]
    xh = xp.transpose(x, (0, 2, 3, 1))                          # NHWC view
    pads = ((0, 0),) + tuple((p0, max(p1, 0)) for p0, p1 in padding) + ((0, 0),)
    xh = xp.pad(xh, pads, constant_values=pad_value) if any(p for pr in pads for p in pr) \
        else xp.ascontiguousarray(xh)
    oh = (h + sum(padding[0]) - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + sum(padding[1]) - dw * (kw - 1) - 1) // sw + 1
    s0, s1, s2, s3 = xh.strides
    win = xp.lib.stride_tricks.as_strided(xh, (n, oh, ow, kh, kw, cin),
                                          (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3))
    cols = win.reshape(n * oh * ow, kh * kw * cin)
    wk = xp.ascontiguousarray(xp.transpose(w.reshape(c, cin, kh, kw), (2, 3, 1, 0)))
    out = cols @ wk.reshape(kh * kw * cin, c)                   # one GEMM, (N*P, C)
    return xp.transpose(out.reshape(n, oh * ow, c), (0, 2, 1))  # (N, C, P) view


CONV_NHWC = GraphOp("conv_nhwc", _run_conv_nhwc)


def _time(fn, reps=3) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def decide(x_shape, w_shape, params: dict, dtype) -> tuple:
    """``(choice, nchw ms, nhwc ms)`` for one conv shape, measured once and cached."""
    key = (tuple(x_shape), tuple(w_shape), tuple(sorted(params.items())), str(dtype))
    if key not in DECISIONS:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(x_shape).astype(dtype)
        w = rng.standard_normal(w_shape).astype(dtype)
        unfold, mm = REGISTRY["unfold"].kernel_for("cpu"), REGISTRY["matmul"].kernel_for("cpu")
        t_nchw = _time(lambda: mm(np, w, unfold(np, x, **params)))
        t_nhwc = _time(lambda: _run_conv_nhwc(np, x, w, **params))
        DECISIONS[key] = ("NHWC" if t_nhwc < MARGIN * t_nchw else "NCHW", t_nchw, t_nhwc)
    return DECISIONS[key]


def describe() -> list:
    """One line per measured conv shape: what was chosen and the two timings."""
    return [f"{'switched to NHWC' if c == 'NHWC' else 'kept NCHW'} for x{list(k[0])} "
            f"w{list(k[1])} (measured NCHW {a:.2f} ms vs NHWC {b:.2f} ms)"
            for k, (c, a, b) in DECISIONS.items()]


def _convs(graph: Graph):
    """``{matmul node id: (unfold node, decision)}`` for each im2col convolution."""
    found = {}
    users = graph.users()
    outs = {v.id for v in graph.outputs}
    for n in graph.nodes:
        if n.op.name != "matmul" or len(n.outs) != 1:
            continue
        w, cols = n.inputs
        u = graph.producer(cols)
        if u is None or u.op.name != "unfold" or w.ndim != 2 or cols.ndim != 3 or \
                len(users.get(cols.id, ())) != 1 or cols.id in outs or \
                not (w.dtype is cols.dtype is n.outs[0].dtype):
            continue
        x = u.inputs[0]
        found[id(n)] = (u, decide(x.shape, w.shape, u.params, w.dtype.np))
    return found


def layout(graph: Graph):
    """Rewrite convolutions to NHWC where measured faster. ``{"nhwc": n, "kept_nchw": m}``."""
    convs = _convs(graph)
    nhwc = {k: u for k, (u, d) in convs.items() if d[0] == "NHWC"}
    counts = {"nhwc": len(nhwc), "kept_nchw": len(convs) - len(nhwc)}
    if not nhwc:
        return graph, counts

    def rule(rw, n, ins):
        u = nhwc.get(id(n))
        if u is None:
            return None
        o = n.outs[0]
        return (rw.b.add1(CONV_NHWC, (rw.env[u.inputs[0].id], ins[0]), dict(u.params),
                          o.shape, o.dtype, o.device),)

    return Rewrite(graph).run(rule), counts
