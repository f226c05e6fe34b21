"""Eager ops on ``cuda`` through the generated CUDA kernels, run from their text (emulator).

On a device with ``cuda_kernels`` (here the stand-in given a GPU's capabilities, its
modules compiled by g++ under ``_cuda_emu``'s shim, as in ``test_cuda_fusion_emu.py``):

* a large elementwise primitive runs its generated kernel (``codegen/cuda_eager.py``),
  contiguous, misaligned, broadcast and scalar operands, float32/float64/float16 — and
  gives NumPy's values (exactly for arithmetic, within 2 ulps for libm functions);
* an eager composite (``F.gelu``, ``F.layer_norm``) runs its compiled graph's fused CUDA
  kernels, forward and backward, equal to the composite's ops within float32 rounding;
* small tensors, integers and the plain stand-in (C kernels) keep their old paths.
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_eager, eager_composite

import _cuda_emu
from test_cuda_fusion_emu import _launched, emu_gpu  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")
F = em.nn.functional
N = 1 << 15


@pytest.fixture
def small_threshold(monkeypatch):
    # NOTE: the emulator runs a thread per CUDA thread: tests keep sizes near the
    # dispatcher's own gate (32K elements) instead of the GPU's threshold
    monkeypatch.setattr(cuda_eager, "THRESHOLD", N)


def _np(t):
    return t.cpu().numpy()


def test_large_elementwise_ops_run_generated_kernels(emu_gpu, small_threshold):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(N + 3).astype(np.float32)
    b = rng.standard_normal((N // 128, 128)).astype(np.float32)
    c = rng.standard_normal((N // 64, 128)).astype(np.float32)
    x, y = em.tensor(a, device="cuda"), em.tensor(b, device="cuda")
    z = em.tensor(c, device="cuda")
    before = cuda_eager.stats["runs"]
    exact = [(x * 2, a * 2), (x[1:] + x[:-1], a[1:] + a[:-1]),          # misaligned view
             (y + y[0], b + b[0]), (1.5 - x, np.float32(1.5) - a),
             (y.t() * 3.0, b.T * np.float32(3.0)),                      # transposed
             (z[:, ::2] * 3.0, c[:, ::2] * np.float32(3.0))]            # strided
    for got, want in exact:
        assert got.device.type == "cuda" and got.dtype == em.float32
        np.testing.assert_array_equal(_np(got), want)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    # ulps of float32: libm's 2; float32 tanh is the prelude's rational form (<= 4.5 ulp,
    # codegen/eager.py's docstring)
    for got, want, ulps in [(em.exp(x), np.exp(a64), 2), (em.tanh(y), np.tanh(b64), 4.5),
                            (em.sigmoid(x), 1 / (1 + np.exp(-a64)), 2)]:
        np.testing.assert_allclose(_np(got), want, rtol=ulps * 2 ** -23, atol=1e-37)
    x64 = x.double()
    np.testing.assert_allclose(_np(em.log1p(x64.abs())), np.log1p(np.abs(a.astype(np.float64))),
                               rtol=2 ** -51)
    h = x.half()
    want = (a.astype(np.float16).astype(np.float32) * np.float32(0.5)).astype(np.float16)
    np.testing.assert_array_equal(_np(h * 0.5), want)
    assert cuda_eager.stats["runs"] - before == 12      # abs and log1p: two
    # a transposed operand is read in memory order by the contiguous entry, and the
    # result keeps its layout (the first operand's, as PyTorch's TensorIterator)
    assert exact[4][0].stride() == (1, 128)
    launched = _launched(emu_gpu, "ember_eager_")
    assert "ember_eager_mul_float32_2_p_c" in launched        # contiguous entry
    assert "ember_eager_add_float32_2_p_r" in launched        # a broadcast row (bias)
    assert "ember_eager_mul_float32_2_p" in launched          # strided (a step slice)


def test_small_integer_and_unknown_ops_keep_the_array_module(emu_gpu, small_threshold):
    x = em.ones(N - 1, device="cuda")
    i = em.arange(2 * N, device="cuda")
    before = cuda_eager.stats["runs"]
    np.testing.assert_array_equal(_np(x * 2), np.full(N - 1, 2, np.float32))
    np.testing.assert_array_equal(_np(i * 3), np.arange(2 * N) * 3)
    assert cuda_eager.stats["runs"] == before and not _launched(emu_gpu, "ember_eager_")


def test_plain_stand_in_keeps_the_host_kernels(plain_fake_cuda, monkeypatch):
    from ember.codegen import eager
    if not eager._compiler():
        pytest.skip("no C compiler: the stand-in runs NumPy")
    monkeypatch.setattr(cuda_eager, "THRESHOLD", N)
    x = em.ones(1 << 16, device="cuda")
    before = eager.stats["runs"]
    np.testing.assert_allclose(_np(em.exp(x)), np.full(1 << 16, np.e, np.float32), rtol=1e-6)
    assert eager.stats["runs"] == before + 1


def _composite_grads(fn, dev, x0, *args):
    x = em.tensor(x0, device=dev, requires_grad=True)
    outs = []
    for _ in range(eager_composite.WARMUP + 2):        # the compiled form from call 3
        x.grad = None
        y = fn(x, *args)
        (y * y).sum().backward()
        outs.append((_np(y.detach()), _np(x.grad)))
    return outs


@pytest.mark.parametrize("which", ["gelu", "gelu_tanh", "layer_norm"])
def test_eager_composites_run_fused_cuda_kernels(emu_gpu, which):
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal((64, 512)).astype(np.float32)
    fn = {"gelu": lambda x: F.gelu(x), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
          "layer_norm": lambda x: F.layer_norm(x, (512,))}[which]
    runs = eager_composite.stats["runs"]
    got = _composite_grads(fn, "cuda", x0)
    assert eager_composite.stats["runs"] > runs and _launched(emu_gpu, "ember_fused_")
    prev = eager_composite.set_enabled(False)
    try:
        want = _composite_grads(fn, "cpu", x0)[0]       # the composite's own ops
    finally:
        eager_composite.set_enabled(prev)
    for y, g in got:
        np.testing.assert_allclose(y, want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g, want[1], rtol=1e-4, atol=1e-5)


def test_broadcast_rows_run_the_row_entry_exactly(emu_gpu, small_threshold):
    """A bias add (``x @ W.mT + b`` under float16 autocast) reads the row at ``i % cols``
    in the ``_r`` entry: vector loads when ``cols`` is a multiple of 4 and aligned, element
    loads otherwise (odd cols, a misaligned row); float32 inside, rounded once."""
    rng = np.random.default_rng(5)
    h = np.float16

    def r(*s):
        return rng.standard_normal(s).astype(h)
    x, b = r(64, 512), r(512)
    xo, bo = r(128, 259), r(260)
    x3, b1 = r(4, 16, 520), r(1, 520)
    f32 = np.float32
    cases = [
        (lambda: em.tensor(x, device="cuda") + em.tensor(b, device="cuda"),
         (x.astype(f32) + b.astype(f32)).astype(h)),
        (lambda: em.tensor(x3, device="cuda") * em.tensor(x3[1], device="cuda"),  # 2-D row
         (x3.astype(f32) * x3[1].astype(f32)).astype(h)),
        (lambda: em.tensor(xo, device="cuda") - em.tensor(bo, device="cuda")[1:],  # odd, off
         (xo.astype(f32) - bo[1:].astype(f32)).astype(h)),
        (lambda: em.tensor(x3, device="cuda") + em.tensor(b1, device="cuda"),    # (1, C) row
         (x3.astype(f32) + b1.astype(f32)).astype(h)),
    ]
    before, rows = cuda_eager.stats["runs"], cuda_eager.stats["rows"]
    for make, want in cases:
        got = make()
        assert got.dtype == em.float16 and got.shape == want.shape
        np.testing.assert_array_equal(_np(got), want)
    assert cuda_eager.stats["runs"] - before == 4 and cuda_eager.stats["rows"] - rows == 4
    assert "ember_eager_add_float16_2_p_r" in _launched(emu_gpu, "ember_eager_")
    # a strided row (every other element) is no row: the strided entry, same values
    bs = r(1024)
    got = em.tensor(x, device="cuda") + em.tensor(bs, device="cuda")[::2]
    np.testing.assert_array_equal(_np(got), (x.astype(f32) + bs[::2].astype(f32)).astype(h))
    assert cuda_eager.stats["rows"] - rows == 4


def test_per_row_columns_run_the_row_entry_exactly(emu_gpu, small_threshold):
    """A column of per-row values (``x * rstd`` with keepdims statistics) reads element
    ``i / cols`` in the ``_r`` entry (one value per vector when aligned, per element for
    odd cols), beside a row (a bias) of the same cols; float32 inside, rounded once."""
    rng = np.random.default_rng(6)
    h, f32 = np.float16, np.float32

    def r(*s):
        return rng.standard_normal(s).astype(h)
    x, c, b = r(64, 512), r(64, 1), r(512)
    xo, co = r(128, 259), r(128, 1)
    x3, c3 = r(4, 16, 520), r(4, 16, 1)
    cases = [
        (lambda: em.tensor(x, device="cuda") * em.tensor(c, device="cuda"),
         (x.astype(f32) * c.astype(f32)).astype(h)),
        (lambda: em.tensor(xo, device="cuda") - em.tensor(co, device="cuda"),     # odd cols
         (xo.astype(f32) - co.astype(f32)).astype(h)),
        (lambda: em.tensor(x3, device="cuda") + em.tensor(c3, device="cuda"),     # 3-D
         (x3.astype(f32) + c3.astype(f32)).astype(h)),
    ]
    for make, want in cases:
        rows = cuda_eager.stats["rows"]
        got = make()
        assert got.shape == want.shape
        np.testing.assert_array_equal(_np(got), want)
        assert cuda_eager.stats["rows"] - rows == 1
