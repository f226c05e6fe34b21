"""Eager sums over leading/trailing dims on ``cuda`` through generated kernels, run from
their CUDA text on the emulator (``_cuda_emu``; sizes tiny, thresholds lowered).

Each result is checked against the correctly rounded sum (``math.fsum``) of the same
values with the order-insensitive bound ``|got - want| <= 16 eps(acc) sum|x| +
eps(dtype) |want|`` (float16 summed in float32, then rounded once): column sums
(``x.sum(0)``, ``x.sum((0, 1))``, keepdim, a bias gradient through autograd, tails of the
64-column tiles, an uneven last row chunk), row sums
(``x.sum(-1)``, ``mean(-1)``, two trailing dims), and the inputs left to the array module
(a middle dim, a full sum, ``dtype=``, integers, non-contiguous, small).
"""
import math

import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_reduce, nvrtc

import _cuda_emu
from test_cuda_fusion_emu import _launched, emu_gpu  # noqa: F401 - the fixture

emu = pytest.mark.skipif(not _cuda_emu.available(),
                         reason="no g++ with C++20 <barrier> to run the CUDA text on")
EPS = {np.float16: 2.0 ** -11, np.float32: 2.0 ** -24, np.float64: 2.0 ** -53}


@pytest.fixture
def small(monkeypatch):
    # NOTE: the emulator runs a thread per CUDA thread: small inputs, lowered gates
    monkeypatch.setattr(cuda_reduce, "THRESHOLD", 1 << 10)
    monkeypatch.setattr(cuda_reduce, "MIN_ROWS", 4)
    monkeypatch.setattr(cuda_reduce, "_cache", {})


def _fsum(a64, axis, keepdims):
    """The correctly rounded float64 sums (``math.fsum``) over ``axis``."""
    axes = tuple(x % a64.ndim for x in np.atleast_1d(axis))
    keep = [d for d in range(a64.ndim) if d not in axes]
    rows = np.transpose(a64, keep + list(axes)).reshape(
        int(np.prod([a64.shape[d] for d in keep])), -1)
    r = np.array([math.fsum(row) for row in rows]).reshape([a64.shape[d] for d in keep])
    return np.expand_dims(r, axes) if keepdims else r


def _check(got, a, axis, keepdims=False):
    t = got.cpu().numpy()
    a64 = a.astype(np.float64)
    want = _fsum(a64, axis, keepdims)
    bound = np.abs(a64).sum(axis=axis, keepdims=keepdims)
    eps = EPS[a.dtype.type]
    acc_eps = EPS[np.float64 if a.dtype == np.float64 else np.float32]
    assert t.dtype == a.dtype and t.shape == want.shape
    # summation error in any order (float32 sums for float16; a thread adds up to a few
    # dozen rows here, then lanes and chunks) plus the final rounding to the dtype
    tol = 16 * acc_eps * bound + eps * np.abs(want) + 1e-300
    err = np.abs(t.astype(np.float64) - want)
    assert (err <= tol).all(), float((err / tol).max())


def _sample(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype) + 0.25


@emu
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_column_sums(emu_gpu, small, dtype):
    before = cuda_reduce.stats["colsum"]
    a = _sample((300, 130), dtype)              # 3 tiles of 64 columns, the last 2 wide
    x = em.tensor(a, device="cuda")
    _check(x.sum(0), a, 0)
    _check(x.sum(0, keepdim=True), a, 0, True)
    b = _sample((3, 100, 40), dtype, 1)
    _check(em.tensor(b, device="cuda").sum((0, 1)), b, (0, 1))
    c = _sample((333, 70), dtype, 4)            # 5 chunks of 67 rows, the last one 65
    _check(em.tensor(c, device="cuda").sum(0), c, 0)
    m = em.tensor(b, device="cuda").mean(0).cpu().numpy()        # mean: sum / n, rounded
    b64 = b.astype(np.float64)
    np.testing.assert_allclose(m, b64.mean(0), rtol=3 * EPS[dtype],
                               atol=4 * EPS[np.float32] * np.abs(b64).sum(0).max())
    assert cuda_reduce.stats["colsum"] - before == 5
    names = _launched(emu_gpu, "ember_colsum_")
    assert f"ember_colsum_part_{np.dtype(dtype).name}" in names
    assert f"ember_colsum_final_{np.dtype(dtype).name}" in names


@emu
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_row_sums(emu_gpu, small, dtype, monkeypatch):
    monkeypatch.setattr(cuda_reduce, "ROW_SUMS", True)   # off by default (measured)
    before = cuda_reduce.stats["rowsum"]
    a = _sample((60, 70), dtype)
    x = em.tensor(a, device="cuda")
    _check(x.sum(-1), a, -1)
    _check(x.sum(1, keepdim=True), a, 1, True)
    b = _sample((5, 40, 25), dtype, 2)
    _check(em.tensor(b, device="cuda").sum((1, 2)), b, (1, 2))
    m = em.tensor(b, device="cuda").mean(-1).cpu().numpy()
    np.testing.assert_allclose(m, b.astype(np.float64).mean(-1),
                               rtol=8 * EPS[dtype], atol=8 * EPS[dtype] * np.abs(b).max())
    assert cuda_reduce.stats["rowsum"] - before == 4
    assert f"ember_rowsum_{np.dtype(dtype).name}" in _launched(emu_gpu, "ember_rowsum_")


@emu
def test_bias_gradient_takes_the_column_sum(emu_gpu, small):
    rng = np.random.default_rng(3)
    xa = rng.standard_normal((2, 150, 24)).astype(np.float32)
    ga = rng.standard_normal((2, 150, 40)).astype(np.float32)
    lin = em.nn.Linear(24, 40).to("cuda")
    before = cuda_reduce.stats["colsum"]
    lin(em.tensor(xa, device="cuda")).backward(em.tensor(ga, device="cuda"))
    assert cuda_reduce.stats["colsum"] > before
    _check(lin.bias.grad, ga, (0, 1))


@emu
def test_other_sums_keep_the_array_module(emu_gpu, small):
    a = _sample((30, 40, 20), np.float32)
    x = em.tensor(a, device="cuda")
    before = dict(cuda_reduce.stats)
    np.testing.assert_allclose(x.sum(1).cpu().numpy(), a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.sum().item(), a.astype(np.float64).sum(), rtol=1e-5)
    np.testing.assert_allclose(x.sum(0, dtype=em.float64).cpu().numpy(),
                               a.astype(np.float64).sum(0), rtol=1e-12)
    np.testing.assert_array_equal(em.ones(30, 60, dtype=em.int64, device="cuda").sum(0)
                                  .cpu().numpy(), np.full(60, 30))
    np.testing.assert_allclose(x.transpose(0, 2).sum(0).cpu().numpy(),
                               a.transpose(2, 1, 0).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x[:2].sum(0).cpu().numpy(), a[:2].sum(0), rtol=1e-6)
    assert cuda_reduce.stats == before


@pytest.mark.skipif(not (nvrtc.available() and nvrtc.include_dirs()),
                    reason="NVRTC or the CUDA headers are not installed")
@pytest.mark.parametrize("name", ["float16", "float32", "float64", "bfloat16"])
def test_column_sum_text_compiles(name):
    d = getattr(em, name)
    ptx = nvrtc.compile_ptx(cuda_reduce.source(d), f"colsum_{name}")
    assert f"ember_colsum_part_{name}" in ptx and f"ember_colsum_final_{name}" in ptx
