"""``fuse_index`` (issue 21): which constants are an ``arange`` along one axis of a kernel's
loop space, and the C kernels with the Index leaf in their place.

GPU graphs get the rewrite (``fuse_cuda``: ``tests/cuda/test_cuda_index*.py``); CPU graphs
keep their iota input by default. Here the CPU ``fuse`` pass is made to apply it too, so
the C renderer's Index path runs inside compiled cross-entropy steps: losses and
parameters are bit for bit those of the graph without it, and the default pipeline's
kernels hold no Index leaf (CPU graphs keep their bits and their form)."""
import importlib

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember import dtypes as dt
from ember.codegen import available
from ember.codegen.ir import Index, nodes_of
from ember.graph.passes.fuse_index import index_leaves, iota_leaf

fuse_mod = importlib.import_module("ember.graph.passes.fuse")


@pytest.mark.parametrize("value,strides,space,want", [
    (np.arange(7).reshape(1, 7), (0, 1), (5, 7), Index(7, 1)),
    (np.arange(7), (0, 1), (5, 7), Index(7, 1)),
    (np.arange(5, dtype=np.int32).reshape(5, 1), (1, 0), (5, 7), Index(5, 7, dt.int32)),
    (np.arange(6, dtype=np.uint8).reshape(1, 6, 1), (0, 1, 0), (2, 6, 3), Index(6, 3, dt.uint8)),
    (np.arange(12).reshape(1, 3, 4), (0, 4, 1), (2, 3, 4), Index(12, 1)),    # two axes
    (np.arange(12).reshape(3, 1, 4), (4, 0, 1), (3, 2, 4), None),   # not one block
    (np.arange(12).reshape(3, 1, 4), (4, 0, 1), (3, 1, 4), Index(12, 1)),   # size-1 axis
    (np.arange(7)[::-1].copy(), (0, 1), (5, 7), None),          # reversed
    (np.arange(1, 8), (0, 1), (5, 7), None),                     # starts at 1
    (np.arange(7.0), (0, 1), (5, 7), None),                      # float
    (np.arange(35).reshape(7, 5).T.copy(), (1, 5), (5, 7), None),   # transposed
    (np.arange(7) * 2, (0, 2), (5, 7), None),                    # stride 2
    (np.zeros(1, np.int64), (0, 0), (5, 7), None),               # a scalar
])
def test_iota_leaf_recognises_arange_along_one_block_of_axes(value, strides, space, want):
    d = dt.as_dtype(value.dtype) if value.dtype.kind in "iu" else dt.int64
    assert iota_leaf(value, strides, space, d) == want


def _leaves(graph) -> set:
    out = set()
    for n in graph.nodes:
        k = getattr(n.op, "kernel", None)
        if k is None:
            continue
        for _d, e, *_ in k.outputs:
            if e is not None:
                for a in nodes_of(e):
                    out |= {x for x in a.args if isinstance(x, Index)}
        for st in getattr(k, "stages", ()):
            for a in nodes_of(st.body):
                out |= {x for x in a.args if isinstance(x, Index)}
    return out


def _step(reduction, classes, smoothing):
    em.manual_seed(0)
    m = em.nn.Linear(16, classes)
    opt = em.optim.SGD(m.parameters(), lr=0.5)
    x, y = em.randn(24, 16), em.randint(0, classes, (24,))
    y[::5] = -100

    def step(x, y):
        loss = F.cross_entropy(m(x), y, reduction=reduction, label_smoothing=smoothing)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    cf = em.compile(step)
    losses = [cf(x, y).numpy() for _ in range(3)]
    return cf, losses, [p.detach().numpy() for p in m.parameters()]


@pytest.mark.skipif(not available(), reason="no C compiler: fuse leaves graphs alone")
@pytest.mark.parametrize("reduction,classes,smoothing", [("sum", 40, 0.0),
                                                         ("mean", 300, 0.1),
                                                         ("mean", 10, 0.0)])
def test_c_kernels_with_the_leaf_keep_the_bits(monkeypatch, reduction, classes, smoothing):
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    cf, losses, params = _step(reduction, classes, smoothing)
    assert not _leaves(cf.graphs()[-1])              # the default CPU pipeline: no leaf
    real = fuse_mod.lower_groups

    def lower_groups(graph, groups):
        order, member_of, lowered = real(graph, groups)
        return order, member_of, [index_leaves(lw, graph.producer) for lw in lowered]
    monkeypatch.setattr(fuse_mod, "lower_groups", lower_groups)
    cf2, losses2, params2 = _step(reduction, classes, smoothing)
    got = _leaves(cf2.graphs()[-1])
    if classes > 16 or reduction != "mean" or smoothing:
        # fuse (not ce_rows) made the backward: its kernel computes the column
        assert Index(classes, 1, dt.int64) in got, got
    for a, b in zip(losses + params, losses2 + params2):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not available(), reason="no C compiler")
def test_c_renderer_computes_every_axis_leaf_on_any_layout():
    """Elementwise (a 1-d loop over contiguous operands, a 2-d one over a transposed
    operand) and reduction kernels (leaves inside and outside the row, a per-row output)
    with leaves of every axis of a 3-d space: exactly the interpreter's integers."""
    from ember.codegen import interp, runtime
    from ember.codegen.ir import (InputSpec, Kernel, Load, OutSpec, Reduce, ReduceKernel,
                                  Row, call, index_of)
    shape = (3, 5, 7)
    i0, i1, i2 = (index_of(shape, d) for d in range(3))
    code = i0 * 100 + i1 * 10 + i2
    k = Kernel([InputSpec(dt.int64, (35, 7, 1)), InputSpec(dt.int64, (1, 0, 0))],
               OutSpec(dt.int64, shape), Load(0) * 1000 + Load(1) * 100000 + code, "ix_c_ew")
    x = np.arange(105, dtype=np.int64).reshape(shape)
    g0, g1, g2 = np.indices(shape)
    ck = runtime.compile(k)
    # loops: 1-d (contiguous, a scalar), rows of 35 (a value per first-axis slice: the
    # last two axes merge), rows of 7 (a transposed operand)
    for a, b in ((x, np.int64(3)), (x, np.arange(3).reshape(3, 1, 1)),
                 (np.ascontiguousarray(x.transpose(2, 1, 0)).transpose(2, 1, 0), 2)):
        np.testing.assert_array_equal(ck(a, b), interp.run_elementwise(k, [a, b]))
        np.testing.assert_array_equal(ck(a, b), a * 1000 + np.asarray(b) * 100000 +
                                      g0 * 100 + g1 * 10 + g2)
    for naxes in (1, 2):
        rk = ReduceKernel([InputSpec(dt.int64, (35, 7, 1))], shape, naxes,
                          [Reduce("sum", Load(0) + code)], Row(0) * 1000 + code,
                          OutSpec(dt.int64, shape), full=True, name=f"ix_c_red{naxes}",
                          extra=((dt.int64, Row(0) + i0 * 7, False),))
        got = runtime.compile(rk)(x)
        want = interp.run_reduction(rk, [x])
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    assert call("eq", Load(0), i2).args[1] == Index(7, 1)
