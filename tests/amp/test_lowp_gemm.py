"""The native bfloat16 GEMM (issue 16): AMX and AVX512-BF16 kernels, and the fallback.

Reference: float32 BLAS on the exactly converted operands. Products of bfloat16 values are
exact in float32, so the kernels may differ from it only by summation order — bounded by
``gamma_K * (|A| @ |B|)`` with ``gamma_K = K u / (1 - K u)``, ``u = 2**-24`` (any order of
K float32 additions) — and by flushing denormals (DAZ/FTZ). The bfloat16 result is the
kernel's float32 result rounded once (bit-exact). Each native kernel's tests skip, naming
the missing instruction, on a CPU without it; the fallback (``mode = "off"``) runs
everywhere.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen import lowp_gemm as lg
from ember.codegen import runtime

from ._lowp_helpers import BF, U32, kernel  # noqa: F401  (kernel: a fixture)


def _bits(a):
    return np.asarray(a).view(np.uint16 if np.asarray(a).dtype.itemsize == 2 else np.uint32)


def _ref(a, b):
    return np.matmul(a.astype(np.float32), b.astype(np.float32))


def _check_bound(got32, a, b):
    """``|got - ref| <= gamma_K * (|A| @ |B|)`` elementwise (finite inputs)."""
    k = a.shape[-1]
    gamma = k * U32 / (1 - k * U32)
    absprod = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    err = np.abs(got32.astype(np.float64) - np.matmul(a.astype(np.float64),
                                                      b.astype(np.float64)))
    assert np.all(err <= gamma * absprod), float(np.max(err - gamma * absprod))


def _check_bound_rounded(got, a, b):
    """A bfloat16 result: the float32 bound plus rounding once (unit roundoff 2**-8)."""
    k = a.shape[-1]
    gamma = k * U32 / (1 - k * U32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref, absprod = np.matmul(a64, b64), np.matmul(np.abs(a64), np.abs(b64))
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= 2.0 ** -8 * (np.abs(ref) + gamma * absprod) + gamma * absprod)


def _operands(rng, shape_a, shape_b, layout):
    a = rng.standard_normal(shape_a).astype(BF)
    b = rng.standard_normal(shape_b).astype(BF)
    if layout == "bT":        # x @ w.mT (a Linear's weight)
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2)).swapaxes(-1, -2)
    elif layout == "aT":      # g.mT @ x (a weight gradient)
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    elif layout == "flipped":   # negative strides
        a, b = a[..., ::-1, :], b[..., :, ::-1]
    elif layout == "strided":
        a = np.repeat(a, 2, axis=-1)[..., ::2]
        b = np.repeat(b, 3, axis=-2)[..., ::3, :]
    return a, b


SHAPES = [((1, 1), (1, 1)), ((5, 7), (7, 3)), ((33, 65), (65, 70)), ((64, 64), (64, 64)),
          ((100, 33), (33, 130)), ((7, 1), (1, 70)), ((40, 96), (96, 200)),
          ((3, 17, 31), (31, 9)), ((2, 3, 19, 40), (3, 40, 66)), ((4, 1, 8), (1, 8, 5))]


@pytest.mark.parametrize("layout", ["contig", "bT", "aT", "strided", "flipped"])
@pytest.mark.parametrize("sa, sb", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_native_within_summation_bound(kernel, sa, sb, layout):
    a, b = _operands(np.random.default_rng(len(sa) * 131 + sa[-1]), sa, sb, layout)
    got32 = lg.matmul(a, b, out_dtype=np.float32)
    assert got32 is not None and got32.dtype == np.float32
    assert got32.shape == np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (sa[-2], sb[-1])
    _check_bound(got32, a, b)
    got = lg.matmul(a, b)
    assert got.dtype == BF and got.shape == got32.shape
    assert np.array_equal(_bits(got), _bits(got32.astype(BF)))      # rounded once, RNE


def test_native_into_out_and_threads_agree(kernel, monkeypatch):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((130, 77)).astype(BF), rng.standard_normal((77, 150)).astype(BF)
    out = np.full((130, 150), 7, BF)
    monkeypatch.setattr(lg, "PARALLEL_MIN", 1)
    monkeypatch.setattr(lg, "num_threads", lambda: 2)
    assert lg.matmul(a, b, out=out) is out
    monkeypatch.setattr(lg, "num_threads", lambda: 1)
    one = lg.matmul(a, b)
    assert np.array_equal(_bits(one), _bits(out))    # each tile is one thread's, same order


def test_native_inf_nan_propagate(kernel):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((20, 9)).astype(BF), rng.standard_normal((9, 70)).astype(BF)
    a[3, 4], a[5, 0], b[2, 7] = np.inf, np.nan, -np.inf
    b[:, 9] = 0
    a[6, :] = 0
    a[6, 2] = np.inf          # row 6: inf * 0 in column 9 -> NaN
    with np.errstate(invalid="ignore"):
        got, ref = lg.matmul(a, b, out_dtype=np.float32), _ref(a, b)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert np.array_equal(np.isposinf(got), np.isposinf(ref))
    assert np.array_equal(np.isneginf(got), np.isneginf(ref))
    fin = np.isfinite(ref)
    assert np.isnan(ref).any() and np.isinf(ref).any() and fin.any()
    bf = lg.matmul(a, b)
    assert np.array_equal(_bits(bf)[np.isnan(ref)] & 0x7fff,
                          np.full(np.isnan(ref).sum(), 0x7fc0, np.uint16))   # quiet NaN


def test_native_flushes_denormals(kernel):
    """DAZ/FTZ, as documented: a denormal bfloat16 input counts as zero, and a product
    landing in float32's denormal range is flushed to zero."""
    a = np.array([[2.0 ** -130, 1.0]], BF)          # a denormal and a normal number
    b = np.array([[1.0], [0.0]], BF)
    assert _ref(a, b)[0, 0] != 0                  # the exact result is a denormal
    assert lg.matmul(a, b, out_dtype=np.float32)[0, 0] == 0
    c = np.array([[2.0 ** -70]], BF)              # normal * normal -> 2**-140, a denormal
    assert _ref(c, c)[0, 0] != 0 and lg.matmul(c, c, out_dtype=np.float32)[0, 0] == 0


@pytest.mark.parametrize("m, k, n", [(0, 5, 4), (3, 5, 0), (3, 0, 4), (0, 0, 0)])
def test_native_zero_size(kernel, m, k, n):
    a, b = np.ones((2, m, k), BF), np.ones((k, n), BF)
    got = lg.matmul(a, b)
    assert got.shape == (2, m, n) and got.dtype == BF
    assert not got.astype(np.float32).any()


def test_mode_off_returns_none_and_matmul_converts(monkeypatch):
    """The fallback, on any machine: float32 BLAS of the converted operands, rounded once
    (bit-exact against that reference)."""
    monkeypatch.setattr(lg, "mode", "off")
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((48, 80)).astype(BF), rng.standard_normal((80, 24)).astype(BF)
    assert lg.matmul(a, b) is None
    got = (ember.from_numpy(a) @ ember.from_numpy(b)).numpy()
    assert np.array_equal(_bits(got), _bits(_ref(a, b).astype(BF)))


def test_auto_without_amx_returns_none(monkeypatch):
    """``auto`` never takes the AVX512-BF16 kernel (slower than the conversion path)."""
    lg._load()
    monkeypatch.setitem(lg._state, "amx", False)
    monkeypatch.setattr(lg, "mode", "auto")
    assert lg.matmul(np.ones((4, 4), BF), np.ones((4, 4), BF)) is None


def test_auto_leaves_tiny_matrices_to_the_conversion_path(monkeypatch):
    lg._load()
    monkeypatch.setitem(lg._state, "amx", True)
    monkeypatch.setattr(lg, "mode", "auto")
    small = np.ones((32, 16, 64), BF), np.ones((32, 64, 16), BF)     # 16K MACs each
    assert lg.MIN_MACS > 16 * 64 * 16
    assert lg.matmul(*small) is None


def test_float16_and_1d_are_not_served():
    assert lg.matmul(np.ones((4, 4), np.float16), np.ones((4, 4), np.float16)) is None
    assert lg.matmul(np.ones(4, BF), np.ones((4, 4), BF)) is None


@pytest.mark.skipif(not lg.amx_available(), reason="CPU/OS without AMX-BF16 tiles")
def test_ember_matmul_linear_and_grads_take_the_native_kernel(monkeypatch):
    calls = []
    real = lg._run
    monkeypatch.setattr(lg, "_run", lambda *a: calls.append(a[1].shape) or real(*a))
    monkeypatch.setattr(lg, "mode", "auto")
    rng = np.random.default_rng(4)
    x = ember.tensor(rng.standard_normal((6, 10, 40)).astype(np.float32)).bfloat16()
    w = ember.tensor(rng.standard_normal((24, 40)).astype(np.float32)).bfloat16()
    x.requires_grad_(True)
    w.requires_grad_(True)
    y = ember.nn.functional.linear(x, w)
    y.sum().backward()
    assert len(calls) == 3                      # forward, grad of x, grad of w
    xa, wa = x.detach().numpy(), w.detach().numpy()
    _check_bound_rounded(y.detach().numpy(), xa, np.swapaxes(wa, 0, 1))
    _check_bound_rounded(x.grad.numpy(), np.ones((6, 10, 24), BF), wa)
