"""A float16/bfloat16 GEMM's two operands converted in one kernel call (issue 16, part C).

``convert_kernels.to_float32_pair`` converts both operands of a low-precision matmul in one
call (one range over both buffers, split over the pool like one buffer): bit-identical to
``astype`` on each, wherever the pool's chunk boundary falls (inside the first operand, at
the seam, inside the second).
"""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen import convert_kernels as ck
from ember.codegen import lowp_gemm

LOW = [ember.float16, ember.bfloat16]
needs_cc = pytest.mark.skipif(not ck.available(), reason="no C compiler")


def _bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint16 if np.asarray(a).dtype.itemsize == 2 else np.uint32)


def _all_patterns(dt) -> np.ndarray:
    return np.arange(65536, dtype=np.uint16).view(dt.np)


@needs_cc
@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
@pytest.mark.parametrize("n0, pooled", [(65536, False), (65536, True), (37, True),
                                        (65536 + 64, True)],
                         ids=["serial", "split-at-seam", "split-in-second", "split-in-first"])
def test_pair_bit_exact_every_pattern(dt, n0, pooled, monkeypatch):
    if pooled:
        monkeypatch.setattr(ck, "PARALLEL_MIN", 1)
        monkeypatch.setattr(ck, "num_threads", lambda: 2)
    pat = _all_patterns(dt)
    x = np.resize(pat, n0).reshape(-1, 1)
    y = pat[::-1].copy().reshape(256, 256)
    if n0 == 65536 + 64:      # the chunk boundary ((n0 + n1) / 2, 64-aligned) inside x
        y = y[:1].copy()
    half = -(-(x.size + y.size) // 2)                  # the pool's chunk, 64-aligned
    chunk = (half + 63) // 64 * 64
    assert not pooled or (chunk == x.size) == (n0 == 65536)
    assert not pooled or (chunk < x.size) == (n0 == 65536 + 64)
    xf, yf = ck.to_float32_pair(x, y)
    assert xf.dtype == yf.dtype == np.float32 and xf.shape == x.shape and yf.shape == y.shape
    assert np.array_equal(_bits(xf), _bits(x.astype(np.float32)))
    assert np.array_equal(_bits(yf), _bits(y.astype(np.float32)))


@needs_cc
@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_pair_transposed_operand_in_the_kernel(dt, monkeypatch):
    """``x @ w.mT`` (a Linear): the transposed weight converts as its buffer in the same
    call, and its float32 copy keeps the transposed layout (a BLAS transpose flag)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 33, 40)).astype(dt.np)
    w = rng.standard_normal((24, 40)).astype(dt.np)
    monkeypatch.setattr(ck, "to_float32", lambda a: pytest.fail("per-operand fallback"))
    for a, b in ((x, w.T), (w.T, x.transpose(0, 2, 1)), (w.T, w)):
        af, bf = ck.to_float32_pair(a, b)
        assert af.shape == a.shape and bf.shape == b.shape
        assert af.flags.c_contiguous == a.flags.c_contiguous
        assert bf.flags.c_contiguous == b.flags.c_contiguous
        assert np.array_equal(_bits(af), _bits(a.astype(np.float32)))
        assert np.array_equal(_bits(bf), _bits(b.astype(np.float32)))


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_pair_falls_back_per_operand(dt):
    """A strided (not permuted-contiguous) operand, mixed dtypes, or float32: each converts
    alone, same bits."""
    a = np.random.default_rng(0).standard_normal((40, 24)).astype(dt.np)
    for x, y in ((a, a[:, ::2]), (a[::3], a.T), (a, a.astype(np.float32))):
        xf, yf = ck.to_float32_pair(x, y)
        assert np.array_equal(_bits(xf), _bits(x.astype(np.float32)))
        assert np.array_equal(_bits(yf), _bits(y.astype(np.float32)))
        assert xf.shape == x.shape and yf.shape == y.shape


@needs_cc
@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_matmul_converts_both_operands_in_one_call(dt, monkeypatch):
    monkeypatch.setattr(lowp_gemm, "mode", "off")     # not the native GEMM (test_lowp_gemm)
    calls = []
    pair = ck.to_float32_pair
    monkeypatch.setattr(ck, "to_float32_pair", lambda *a: calls.append(1) or pair(*a))
    rng = np.random.default_rng(2)
    a = rng.standard_normal((48, 80)).astype(np.float32)
    b = rng.standard_normal((80, 24)).astype(np.float32)
    x, y = ember.from_numpy(a).to(dt), ember.from_numpy(b).to(dt)
    got = (x @ y).numpy()
    ref = (x.numpy().astype(np.float32) @ y.numpy().astype(np.float32)).astype(dt.np)
    assert calls == [1]
    assert np.array_equal(_bits(got), _bits(ref))
