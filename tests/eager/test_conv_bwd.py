"""The ``conv_bwd`` pass and its kernels (``ember/codegen/conv_kernels_bwd.py``).

The eager ``F.conv2d``'s compiled backward graph receives the saved columns and the output
gradient as inputs; the pass computes the weight gradient as per-image products summed in
place and the input gradient a chunk of images at a time. Checked against the composite
written in Ember ops (and the kernels against NumPy): float32 within the GEMM's rounding
(the weight gradient's batch sum runs in another order), float64 to ~1e-12; the input
gradient with NumPy's GEMM bitwise. Graphs are checked to hold the new nodes, so a pattern
that stops matching fails here.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember.codegen import conv_kernels as ck
from ember.codegen import conv_kernels_bwd as kb
from ember.codegen import eager_composite as ec
from ember.codegen.toolchain import find_compiler
from ember.ops.conv import _fold_kernel

pytestmark = [pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler"),
              pytest.mark.usefixtures("every_conv_call_compiled")]

TOL = {"float32": dict(rtol=2e-5, atol=2e-5), "float64": dict(rtol=1e-11, atol=1e-11)}


def _grads(xs, ws, kw, dtype, fast, seed=0, bias=True, x_grad=True):
    rng = np.random.default_rng(seed)
    x = em.tensor(rng.standard_normal(xs).astype(dtype)).requires_grad_(x_grad)
    w = em.tensor(rng.standard_normal(ws).astype(dtype)).requires_grad_()
    b = em.tensor(rng.standard_normal(ws[0]).astype(dtype)).requires_grad_() if bias else None
    prev = ec.set_enabled(fast)
    try:
        y = F.conv2d(x, w, b, **kw)
        g = em.tensor(rng.standard_normal(tuple(y.shape)).astype(dtype))
        diff = [t for t in (x, w, b) if t is not None and t.requires_grad]
        grads = em.autograd.grad(y, diff, g)
    finally:
        ec.set_enabled(prev)
    return [y.detach().numpy()] + [t.numpy() for t in grads]


def _backward_graph():
    """The optimised backward graph of the most recently compiled conv2d key."""
    entry = [e for e in F.conv2d._eager_cache.values() if e][-1]
    return next(iter(entry.cf._cache.values())).joint.bwd_graph


# (x shape, weight shape, conv2d kwargs); the first is large enough for Ember's sgemm
# where it runs (sgemm.worth), the rest take NumPy's GEMM
CASES = [
    ((4, 16, 16, 16), (64, 16, 3, 3), dict(padding=1)),
    ((2, 3, 9, 8), (4, 3, 3, 3), dict(padding=1)),
    ((2, 2, 10, 7), (3, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    ((1, 4, 7, 6), (2, 4, 2, 2), dict(stride=2)),
    ((3, 1, 5, 5), (5, 1, 1, 1), {}),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES)
def test_eager_conv_gradients_match_the_composite(case, dtype):
    xs, ws, kw = case
    ref = _grads(xs, ws, kw, dtype, fast=False)
    got = _grads(xs, ws, kw, dtype, fast=True)
    names = [n.op.name for n in _backward_graph().nodes]
    assert "conv_wgrad" in names and "conv_igrad" in names, names
    assert not {"fold_c", "fold_t", "matmul", "matmul_t"} & set(names), names
    for a, b in zip(got, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, **TOL[dtype])


def test_input_without_grad_has_only_the_weight_gradient():
    xs, ws, kw = CASES[0]
    ref = _grads(xs, ws, kw, "float32", fast=False, x_grad=False)
    got = _grads(xs, ws, kw, "float32", fast=True, x_grad=False)
    names = [n.op.name for n in _backward_graph().nodes]
    assert "conv_wgrad" in names and "conv_igrad" not in names, names
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, **TOL["float32"])


def test_grouped_conv_is_left_alone():
    ref = _grads((2, 4, 6, 6), (6, 2, 3, 3), dict(padding=1, groups=2), "float64", fast=False)
    got = _grads((2, 4, 6, 6), (6, 2, 3, 3), dict(padding=1, groups=2), "float64", fast=True)
    names = [n.op.name for n in _backward_graph().nodes]
    assert "conv_wgrad" not in names and "conv_igrad" not in names, names
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, **TOL["float64"])


# ---------------------------------------------------------------- the kernels alone
def _cols(n, ck, ll, dtype, seed):
    return np.random.default_rng(seed).standard_normal((n, ck, ll)).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 64, 256, 144), (5, 16, 144, 72), (3, 4, 30, 27),
                                   (1, 8, 256, 72), (0, 4, 9, 18), (2, 4, 0, 18)])
def test_weight_grad_is_the_batch_sum_of_products(shape, dtype):
    n, co, ll, ck = shape
    dy, cols = _cols(n, co, ll, dtype, 1), _cols(n, ck, ll, dtype, 2)
    want = np.matmul(dy.astype(np.float64), cols.astype(np.float64).transpose(0, 2, 1)).sum(0)
    got = kb.weight_grad(dy, cols)
    assert got.shape == (co, ck) and got.dtype == dtype
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max(
        initial=0)))
    # a non-contiguous operand (Ember's sgemm may sum in another order then), written
    # into a planner's flat buffer
    flat = np.full(co * ck, np.nan, dtype)
    dyt = np.ascontiguousarray(dy.transpose(0, 2, 1)).transpose(0, 2, 1)
    res = kb.weight_grad(dyt, cols, out=flat)
    assert res.shape == (co, ck) and (flat.size == 0 or np.shares_memory(res, flat))
    np.testing.assert_allclose(flat.reshape(co, ck), want, rtol=tol,
                               atol=tol * max(1.0, np.abs(want).max(initial=0)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("chunk", [1 << 20, 4000])       # 4000 bytes: a chunk per image
@pytest.mark.parametrize("geom", [
    dict(n=5, c=8, co=64, hw=(16, 16), k=(3, 3), d=(1, 1), p=((1, 1), (1, 1)), s=(1, 1)),
    dict(n=3, c=2, co=3, hw=(9, 7), k=(3, 2), d=(2, 1), p=((1, 0), (0, 1)), s=(2, 1)),
    dict(n=0, c=2, co=3, hw=(5, 5), k=(3, 3), d=(1, 1), p=((1, 1), (1, 1)), s=(1, 1)),
])
def test_input_grad_is_fold_of_the_products(geom, chunk, dtype, monkeypatch):
    monkeypatch.setattr(kb, "CHUNK_BYTES", chunk)
    g = geom
    kk = g["k"][0] * g["k"][1]
    oh, ow = ((g["hw"][i] + sum(g["p"][i]) - g["d"][i] * (g["k"][i] - 1) - 1) // g["s"][i] + 1
              for i in range(2))
    rng = np.random.default_rng(3)
    w2d = rng.standard_normal((g["co"], g["c"] * kk)).astype(dtype)
    dy = rng.standard_normal((g["n"], g["co"], oh * ow)).astype(dtype)
    args = (g["hw"], g["k"], g["d"], g["p"], g["s"])
    want = _fold_kernel(np, np.matmul(w2d.T.astype(np.float64), dy.astype(np.float64)), *args)
    got = kb.input_grad(w2d.T, dy, *args)
    assert got.shape == want.shape and got.dtype == dtype
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max(initial=1.0))
    flat = np.full(want.size, np.nan, dtype)
    res = kb.input_grad(w2d.T, dy, *args, out=flat)
    assert res.shape == want.shape and (flat.size == 0 or np.shares_memory(res, flat))
    np.testing.assert_array_equal(flat.reshape(want.shape), got)
    # with NumPy's GEMM: the composite's stacked products, folded by the same C loop
    monkeypatch.setattr(kb, "_sgemm_ok", lambda *a: False)
    np.testing.assert_array_equal(kb.input_grad(w2d.T, dy, *args),
                                  ck.fold(np.matmul(w2d.T, dy), *args))
