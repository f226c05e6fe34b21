"""The ``conv_fwd`` pass and its kernel (``ember/codegen/conv_kernels_fwd.py``).

The eager ``F.conv2d``'s compiled forward graph returns its columns for the backward graph;
the pass runs unfold, GEMM and bias add a chunk of images at a time. The values must be the
composite's bit for bit (same unfold, same GEMM per image, same add); the graph is checked
to hold the new node, so a pattern that stops matching fails here.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember.codegen import conv_kernels_fwd as kf
from ember.codegen import eager_composite as ec
from ember.codegen.toolchain import find_compiler
from ember.ops.conv import _unfold_kernel

pytestmark = [pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler"),
              pytest.mark.usefixtures("every_conv_call_compiled")]


def _forward(xs, ws, kw, dtype, fast, bias, seed=0, transposed=False):
    rng = np.random.default_rng(seed)
    xa = rng.standard_normal(xs).astype(dtype)
    if transposed:                      # the same values in a non-contiguous layout
        x = em.tensor(np.ascontiguousarray(xa.swapaxes(-1, -2))).transpose(-1, -2)
    else:
        x = em.tensor(xa)
    x = x.detach().requires_grad_()
    w = em.tensor(rng.standard_normal(ws).astype(dtype)).requires_grad_()
    b = em.tensor(rng.standard_normal(ws[0]).astype(dtype)).requires_grad_() if bias else None
    prev = ec.set_enabled(fast)
    try:
        y = F.conv2d(x, w, b, **kw)
        g = em.tensor(rng.standard_normal(tuple(y.shape)).astype(dtype))
        grads = em.autograd.grad(y, [t for t in (x, w, b) if t is not None], g)
    finally:
        ec.set_enabled(prev)
    return y.detach().numpy(), [t.numpy() for t in grads]


def _forward_graph():
    entry = [e for e in F.conv2d._eager_cache.values() if e][-1]
    return next(iter(entry.cf._cache.values())).graph


CASES = [
    ((4, 16, 16, 16), (64, 16, 3, 3), dict(padding=1)),      # Ember's sgemm where it runs
    ((2, 3, 9, 8), (4, 3, 3, 3), dict(padding=1)),
    ((2, 2, 10, 7), (3, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    ((3, 1, 5, 5), (5, 1, 1, 1), {}),
]


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES)
def test_eager_conv_forward_is_the_composite_bitwise(case, dtype, bias, transposed):
    xs, ws, kw = case
    ref, ref_g = _forward(xs, ws, kw, dtype, False, bias, transposed=transposed)
    got, got_g = _forward(xs, ws, kw, dtype, True, bias, transposed=transposed)
    names = [n.op.name for n in _forward_graph().nodes]
    assert "conv_fwd" in names, names
    assert not {"unfold_c", "matmul", "add"} & set(names), names
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(got, ref)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == "float32" else dict(rtol=1e-11, atol=1e-11)
    for a, r in zip(got_g, ref_g):
        np.testing.assert_allclose(a, r, **tol)


def test_without_grad_the_columns_are_not_kept_and_the_pass_steps_aside():
    xs, ws, kw = CASES[1]
    x, w = em.randn(*xs), em.randn(*ws)
    with em.no_grad():
        want = F.conv2d.__wrapped_composite__(x, w, **kw).numpy()
        got = F.conv2d(x, w, **kw).numpy()
    names = [n.op.name for n in _forward_graph().nodes]
    assert "conv_fwd" not in names, names
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


# ---------------------------------------------------------------- the kernel alone
@pytest.mark.parametrize("chunk", [2 << 20, 100])          # 100 bytes: one image a chunk
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("geom", [
    dict(x=(5, 3, 8, 9), co=4, k=(3, 3), d=(1, 1), p=((1, 1), (1, 1)), s=(1, 1)),
    dict(x=(3, 2, 9, 7), co=3, k=(3, 2), d=(2, 1), p=((1, 0), (0, 1)), s=(2, 1)),
    dict(x=(0, 2, 5, 5), co=3, k=(3, 3), d=(1, 1), p=((1, 1), (1, 1)), s=(1, 1)),
])
def test_forward_kernel_is_unfold_gemm_bias(geom, dtype, chunk, monkeypatch):
    monkeypatch.setattr(kf, "CHUNK_BYTES", chunk)
    rng = np.random.default_rng(5)
    x = rng.standard_normal(geom["x"]).astype(dtype)
    ckk = geom["x"][1] * geom["k"][0] * geom["k"][1]
    w2d = rng.standard_normal((geom["co"], ckk)).astype(dtype)
    b = rng.standard_normal((geom["co"], 1, 1)).astype(dtype)
    args = (geom["k"], geom["d"], geom["p"], geom["s"])
    cols = _unfold_kernel(np, x, *args, 0.0)
    ref = np.matmul(w2d.astype(np.float64), cols.astype(np.float64))
    for bias in (b, None):
        y, got_cols = kf.forward(x, w2d, bias, *args)
        np.testing.assert_array_equal(got_cols, cols)
        want = (ref + (0 if bias is None else bias.reshape(-1, 1))).reshape(y.shape)
        assert y.dtype == x.dtype and y.shape[:2] == (x.shape[0], geom["co"])
        tol = 1e-12 if dtype == "float64" else 1e-5
        np.testing.assert_allclose(y, want, rtol=tol, atol=tol * np.abs(want).max(initial=1.0))
