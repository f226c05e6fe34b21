"""The native bfloat16 GEMM's 2-D fast path (issue 16, last follow-up).

Two 2-D operands skip the batch planning (``lowp_gemm._matmul2d``); the packed kernel is
the same, so the result must equal, bit for bit, the batched path's on the same operands
(a leading batch dim of one), and stay within the summation-order bound
``gamma_K * (|A| @ |B|)`` of float32 BLAS on the exactly converted operands. The
per-thread packing buffer is reused by address across calls of growing and shrinking
size. Each native kernel's tests skip, naming the missing instruction, on a CPU without
it; the fallback (``mode = "off"``, and tiny products under ``"auto"``) runs everywhere.
"""
from __future__ import annotations

import numpy as np
import pytest

from ember.codegen import lowp_gemm as lg

from ._lowp_helpers import BF, U32, kernel  # noqa: F401  (kernel: a fixture)


def _bf(rng, *shape):
    return rng.standard_normal(shape).astype(BF)


def _bound_ok(r, a, b):
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    ref = (a32.astype(np.float64) @ b32.astype(np.float64))
    k = a.shape[-1]
    gam = k * U32 / (1 - k * U32)
    err = np.abs(r.astype(np.float64) - ref)
    # one float32 rounding of the sum on top of the order bound
    return bool(np.all(err <= gam * (np.abs(a32) @ np.abs(b32)) + U32 * np.abs(ref) + 1e-30))


# W1's shapes (128 x 784-512-512-10 forward and backward) and tile edges
SHAPES = [(128, 784, 512), (128, 512, 10), (10, 128, 512), (512, 128, 10), (33, 65, 31),
          (1, 1, 1), (17, 2, 70)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_2d_equals_batched_path_bitwise(kernel, m, k, n):
    rng = np.random.default_rng(m * 1000 + k + n)
    a, b = _bf(rng, m, k), _bf(rng, k, n)
    fast = lg.matmul(a, b)
    batched = lg.matmul(a[None], b[None])[0]             # the batch-planning path
    assert fast.shape == (m, n) and fast.dtype == BF
    assert np.array_equal(fast.view(np.uint16), batched.view(np.uint16))
    f32 = lg.matmul(a, b, out_dtype=np.float32)
    assert f32.dtype == np.float32 and _bound_ok(f32, a, b)
    # the bfloat16 result is the float32 result rounded once (nearest even)
    assert np.array_equal(fast.view(np.uint16), f32.astype(BF).view(np.uint16))


def test_2d_transposed_and_strided_operands(kernel):
    rng = np.random.default_rng(3)
    w = _bf(rng, 96, 200)                                 # a Linear's weight: x @ w.mT
    x = _bf(rng, 50, 400)[:, ::2]                          # non-contiguous rows
    r = lg.matmul(x, w.T)
    ref = lg.matmul(np.ascontiguousarray(x)[None], np.ascontiguousarray(w.T)[None])[0]
    assert np.array_equal(r.view(np.uint16), ref.view(np.uint16))


def test_2d_out_and_zero_sizes(kernel):
    rng = np.random.default_rng(4)
    a, b = _bf(rng, 40, 64), _bf(rng, 64, 48)
    out = np.full((40, 48), 7, BF)
    r = lg.matmul(a, b, out=out)
    assert r is out and np.array_equal(out.view(np.uint16), lg.matmul(a, b).view(np.uint16))
    assert lg.matmul(a, b, out=np.empty((40, 47), BF)) is None      # wrong shape
    assert lg.matmul(a, b, out=np.empty((48, 40), BF).T) is None    # not C-contiguous
    assert lg.matmul(a, b, out=np.empty((40, 48), np.float32)) is None  # wrong dtype
    z = lg.matmul(_bf(rng, 5, 0), _bf(rng, 0, 6))
    assert z.shape == (5, 6) and not np.any(z.astype(np.float32))
    assert lg.matmul(_bf(rng, 0, 4), _bf(rng, 4, 6)).shape == (0, 6)
    assert lg.matmul(_bf(rng, 3, 4), _bf(rng, 5, 6)) is None         # K mismatch


def test_scratch_reused_across_sizes(kernel):
    rng = np.random.default_rng(5)
    pairs = [(_bf(rng, m, k), _bf(rng, k, n)) for m, k, n in
             [(8, 8, 8), (300, 500, 260), (8, 8, 8), (64, 1024, 33)]]
    first = [lg.matmul(a, b) for a, b in pairs]
    again = [lg.matmul(a, b) for a, b in reversed(pairs)][::-1]
    for (a, b), r1, r2 in zip(pairs, first, again):
        assert np.array_equal(r1.view(np.uint16), r2.view(np.uint16))
        f32 = lg.matmul(a, b, out_dtype=np.float32)
        assert _bound_ok(f32, a, b)
        assert np.array_equal(r1.view(np.uint16), f32.astype(BF).view(np.uint16))


def test_fallback_and_tiny_threshold(monkeypatch):
    rng = np.random.default_rng(6)
    a, b = _bf(rng, 16, 16), _bf(rng, 16, 16)
    monkeypatch.setattr(lg, "mode", "off")
    assert lg.matmul(a, b) is None
    monkeypatch.setattr(lg, "mode", "auto")
    assert 16 ** 3 < lg.MIN_MACS
    assert lg.matmul(a, b) is None                       # tiny: the conversion path
    assert lg.matmul(a.astype(np.float16), b.astype(np.float16)) is None


def test_packing_scratch_is_64_byte_aligned(monkeypatch):
    """Tile rows must not straddle cache lines (1.4-1.7x slower): every scratch buffer
    handed to the kernel starts on a 64-byte boundary, fresh or kept, large or small."""
    for n in (1, 1000, (1 << 16) + 3, lg.SCRATCH_KEEP + 5):
        monkeypatch.setattr(lg._local, "buf", None, raising=False)
        buf, addr = lg._scratch(n)
        assert addr % 64 == 0 and addr == buf.__array_interface__["data"][0]
        assert buf.size >= n and buf.dtype == np.uint32


@pytest.mark.parametrize("sa, sb, bt", [((128, 784), (512, 784), True),
                                        ((70, 1000), (1000, 700), False),
                                        ((2, 40, 600), (600, 130), False)])
def test_long_k_runs_in_chunks_exactly(kernel, sa, sb, bt):
    """K over several of the AMX kernel's chunks (partial sums spilled between them) and N
    over several L2 groups: on small integers every float32 sum is exact, so the product
    must equal the integer one whatever the order; random values within the bound."""
    rng = np.random.default_rng(sa[-1])
    ai = rng.integers(-3, 4, sa)
    bi = rng.integers(-3, 4, sb)
    a, b = ai.astype(BF), bi.astype(BF)
    bm, bim = (b.T, bi.T) if bt else (b, bi)
    got = lg.matmul(a, bm, out_dtype=np.float32)
    np.testing.assert_array_equal(got, (ai @ bim).astype(np.float32))
    a, b = _bf(rng, *sa), _bf(rng, *sb)
    bm = b.T if bt else b
    r = lg.matmul(a, bm, out_dtype=np.float32)
    assert _bound_ok(r, a, bm)
    np.testing.assert_array_equal(lg.matmul(a, bm).view(np.uint16), r.astype(BF).view(np.uint16))
