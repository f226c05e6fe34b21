"""Stacks of small matmuls as one C loop: ``bmm_kernels.bmm`` against NumPy on every
layout attention produces, and the ``small_bmm`` pass in compiled graphs.

Tolerance: each output is a K-term dot product summed in another order than BLAS's, so
the difference is bounded by about ``K * eps * sum(|a_k * b_k|)``.
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import bmm_kernels
from ember.graph.passes import DEFAULT_PASSES, EXACT_PASSES

WITH_BMM = ["simplify", "fold", "cse", "small_bmm", "fuse", "dce"]


@pytest.fixture(autouse=True)
def _need_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path / "kernels"))
    if not bmm_kernels.available():
        pytest.skip("no C compiler: the small_bmm pass leaves graphs unchanged")


def _check(a, b, got):
    k = a.shape[-1]
    bound = k * np.finfo(a.dtype).eps * (np.abs(a) @ np.abs(b)) + np.finfo(a.dtype).tiny
    assert got.shape == np.matmul(a, b).shape and got.dtype == a.dtype
    assert np.all(np.abs(got - np.matmul(a, b)) <= bound)


def _layouts(rng, dtype):
    """(name, a, b) pairs: contiguous, permuted q/k/v slices, transposes, 1 batch dim."""
    qkv = rng.standard_normal((3, 5, 3 * 32), dtype=np.float64).astype(dtype)
    heads = qkv.reshape(3, 5, 3, 4, 8).transpose(2, 0, 3, 1, 4)   # (3, B=3, H=4, T=5, D=8)
    q, k, v = heads
    att = rng.standard_normal((3, 4, 5, 5)).astype(dtype)
    wide = rng.standard_normal((2, 3, 7, 64)).astype(dtype)
    return [
        ("q @ k^T (both permuted views)", q, k.swapaxes(-1, -2)),
        ("att @ v (v permuted)", att, v),
        ("att^T @ g", att.swapaxes(-1, -2), np.ascontiguousarray(v)),
        ("g^T @ att", v.swapaxes(-1, -2), rng.standard_normal((3, 4, 5, 16)).astype(dtype)),
        ("odd M, N = 64", wide, rng.standard_normal((2, 3, 64, 64)).astype(dtype)),
        ("odd M, N = 32", wide, rng.standard_normal((2, 3, 64, 32)).astype(dtype)),
        ("one batch dim", att.reshape(12, 5, 5), np.ascontiguousarray(v).reshape(12, 5, 8)),
        ("expanded operand", att, np.broadcast_to(v[:1], v.shape)),
        ("transposed right operand", q,
         rng.standard_normal((3, 4, 16, 8)).astype(dtype).swapaxes(-1, -2)),
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bmm_matches_numpy_on_attention_layouts(dtype):
    rng = np.random.default_rng(0)
    for name, a, b in _layouts(rng, dtype):
        if not bmm_kernels.fits(a.shape, b.shape, a.dtype):
            continue
        _check(a, b, bmm_kernels.bmm(a, b))
    # and the shapes that matter here all fit
    assert bmm_kernels.fits((16, 4, 64, 64), (16, 4, 64, 32), np.float32)
    assert bmm_kernels.fits((16, 4, 64, 32), (16, 4, 32, 64), np.float32)


def test_bmm_writes_into_out_and_rejects_what_does_not_fit():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 9, 16)).astype(np.float32)
    b = rng.standard_normal((2, 3, 16, 24)).astype(np.float32)
    out = np.full((2, 3, 9, 24), np.nan, np.float32)
    assert bmm_kernels.bmm(a, b, out=out) is out
    _check(a, b, out)
    assert not bmm_kernels.fits((2, 9, 16), (2, 16, 65), np.float32)      # N > 64
    assert not bmm_kernels.fits((2, 9, 16), (2, 16, 12), np.float32)      # N % 8
    assert not bmm_kernels.fits((2, 9, 16), (2, 16, 64), np.float64)      # > 8 vectors
    assert bmm_kernels.fits((2, 9, 16), (2, 16, 32), np.float64)
    assert not bmm_kernels.fits((2, 9, 80), (2, 80, 16), np.float32)      # K > 64
    assert not bmm_kernels.fits((2, 9, 16), (1, 16, 16), np.float32)      # broadcast
    assert not bmm_kernels.fits((9, 16), (16, 16), np.float32)            # 2-D: BLAS
    assert not bmm_kernels.fits((2, 9, 16), (2, 16, 16), np.int64)
    with pytest.raises(ValueError, match=r"bmm_kernels.bmm: unsupported operands"):
        bmm_kernels.bmm(a, b[..., :12])


def _attention(q, k, v):
    att = em.softmax(q @ k.transpose(-1, -2) * 0.25, -1)
    return att @ v


def test_pass_rewrites_attention_matmuls_forward_and_backward():
    em.manual_seed(0)
    qkv = em.randn(2, 8, 3, 2, 16)     # T = 8, D = 16: every N fits

    def f(qkv):
        qkv = qkv.detach().requires_grad_(True)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        y = _attention(q, k, v)
        (g,) = em.autograd.grad((y * y).sum(), [qkv])
        return y.detach(), g

    cf = em.compile(f, passes=WITH_BMM)
    cf(qkv)
    (y, g), (ye, ge) = cf(qkv), f(qkv)
    names = [n.op.name for n in cf.graph.nodes]
    assert names.count("small_bmm") == 6 and "matmul" not in names, names
    np.testing.assert_allclose(y.numpy(), ye.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.numpy(), ge.numpy(), rtol=1e-5, atol=1e-5)
    assert "small_bmm" not in DEFAULT_PASSES and "small_bmm" not in EXACT_PASSES   # opt-in


def test_pass_leaves_2d_and_unfitting_matmuls_alone():
    a, w = em.randn(4, 8, 16), em.randn(16, 32)
    b = em.randn(4, 16, 100)

    def f(a, w, b):
        return a @ w, a @ b
    cf = em.compile(f, passes=WITH_BMM)
    cf(a, w, b)
    names = [n.op.name for n in cf.graph.nodes]
    assert "small_bmm" not in names and names.count("matmul") == 2, names
    r1, r2 = cf(a, w, b)
    np.testing.assert_allclose(r1.numpy(), (a @ w).numpy(), rtol=1e-6)
    np.testing.assert_allclose(r2.numpy(), (a @ b).numpy(), rtol=1e-6)
