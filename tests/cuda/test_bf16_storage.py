"""bfloat16 for the GPU: the bit-pattern conversions, their CUDA kernels through NVRTC,
and bfloat16 tensors on the stand-in (which holds real ``ml_dtypes`` bfloat16 arrays).

``ember/device/cuda_bf16.py``'s array-level conversions are the reference the GPU
kernels are tested against (``test_gpu_bf16.py``), so they are checked bit for bit
against ``ml_dtypes`` on every rounding boundary and every bfloat16 pattern.
"""
import re

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.codegen import nvrtc
from ember.device import cuda_bf16 as bf

BF16 = np.dtype(ml_dtypes.bfloat16)


def _boundaries():
    """float32 values at and around every bfloat16 rounding boundary (ties included)."""
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    return np.concatenate([hi + d for d in (0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF)]).astype(
        np.uint32).view(np.float32)


def test_round_bits_is_ml_dtypes_rounding_bit_for_bit():
    x = _boundaries()
    with np.errstate(invalid="ignore"):
        want = x.astype(BF16).view(np.uint16)
    got = bf.round_bits(np, x)
    assert got.dtype == np.uint16 and got.shape == x.shape
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(x.view(np.uint32)[i]), hex(got[i]), hex(want[i]))
                           for i in bad[:5]]


def test_round_bits_strided_and_special_values():
    x = np.array([[0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3.0e38, 3.4e38]],
                 np.float32).repeat(2, 0)[:, ::2]
    got = bf.round_bits(np, x)
    want = x.astype(BF16).view(np.uint16)
    np.testing.assert_array_equal(got, want)


def test_widen_bits_is_exact_for_every_pattern():
    bits = np.arange(1 << 16, dtype=np.uint16)
    got = bf.widen_bits(np, bits)
    want = bits.view(BF16).astype(np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_storage_views_round_trip():
    host = np.array([1.5, -2.0, 3.0e-3], BF16)
    bits = bf.to_storage(host)
    assert bits.dtype == np.uint16 and np.shares_memory(bits, host)
    back = bf.from_storage(bits, BF16)
    np.testing.assert_array_equal(back.astype(np.float32), host.astype(np.float32))


needs_nvrtc = pytest.mark.skipif(
    not (nvrtc.available() and nvrtc.include_dirs()),
    reason="NVRTC or the CUDA bf16 headers are not installed (pip install 'ember[nvrtc]')")


@needs_nvrtc
@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_conversion_kernels_compile_with_nvrtc(arch):
    ptx = nvrtc.compile_ptx(bf.SOURCE, "ember_bf16", arch=arch)
    assert set(re.findall(r"\.entry\s+(\w+)\(", ptx)) == set(bf.KERNELS)
    assert "cvt.rn.bf16.f32" in ptx          # the hardware's round-to-nearest-even


def test_bf16_tensors_on_the_stand_in(fake_cuda):
    assert em.cuda.is_bf16_supported()
    rng = np.random.default_rng(0)
    a32, b32 = rng.standard_normal((5, 7), np.float32), rng.standard_normal((7, 3), np.float32)
    a = em.tensor(a32, device="cuda").to(em.bfloat16)
    b = em.tensor(b32).to(em.bfloat16).cuda()
    assert (a.dtype, a.device.type, b.dtype) == (em.bfloat16, "cuda", em.bfloat16)
    ab, bb = a32.astype(BF16), b32.astype(BF16)
    np.testing.assert_array_equal(a.cpu().numpy(), ab)
    # matmul: operands widened exactly, float32 products and sums, rounded once
    want = (ab.astype(np.float32) @ bb.astype(np.float32)).astype(BF16)
    got = (a @ b).cpu().numpy()
    assert got.dtype == BF16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2 ** -7)
    np.testing.assert_array_equal((a * 2 + 1).cpu().numpy(),
                                  (ab.astype(np.float32) * 2 + 1).astype(BF16))
    z = em.zeros(4, dtype=em.bfloat16, device="cuda")
    assert z.dtype == em.bfloat16 and z.cpu().tolist() == [0.0] * 4
    p = em.tensor(a32).to(em.bfloat16).pin_memory().to("cuda", non_blocking=True)
    np.testing.assert_array_equal(p.cpu().numpy(), ab)


def test_bf16_gradients_on_the_stand_in(fake_cuda):
    w = em.ones(3, 2, device="cuda", requires_grad=True)
    x = em.full((4, 3), 0.5, device="cuda")
    y = (x.to(em.bfloat16) @ w.to(em.bfloat16)).float().sum()
    y.backward()
    assert w.grad.dtype == em.float32 and w.grad.device.type == "cuda"
    assert w.grad.cpu().tolist() == [[2.0, 2.0]] * 3


@needs_nvrtc
def test_compiling_leaves_python_bytes_alone(tmp_path):
    # NOTE: regression: NVRTC wrote its empty log into CPython's cached b" ", so every
    # b" " after a compile was b"\x00" and ember.save's header padding broke ember.load
    nvrtc.compile_ptx(bf.SOURCE, "ember_bf16")
    assert b" " == bytes([32]) and b" " * 3 == bytes([32, 32, 32])
    path = tmp_path / "after_nvrtc.safetensors"
    em.save({"w": em.ones(3), "n": 1}, path)
    assert em.load(path)["n"] == 1
