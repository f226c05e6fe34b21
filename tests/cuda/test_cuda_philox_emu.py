"""The Philox4x32-10 kernels (``ember/codegen/cuda_philox.py``) run from their CUDA text.

The device function against Random123's known-answer vectors (``kat_vectors``:
counter, key -> four words), every entry on the CPU emulator (``_cuda_emu``) against an
independent NumPy Philox4x32-10 written from Salmon et al. 2011 (bits exactly; uniforms
and Bernoulli masks exactly; normals within float32 rounding of the host's libm), offsets
that carry into the counter's high word, odd sizes, and the text compiled by NVRTC.
"""
import ml_dtypes
import numpy as np
import pytest

from ember.codegen import cuda_cache, cuda_philox, nvrtc
from ember.codegen.render_cuda import NVRTC_HEAD

import _cuda_emu

emu = pytest.mark.skipif(not _cuda_emu.available(),
                         reason="no g++ with C++20 <barrier> to run the CUDA text on")

#: Random123's kat_vectors for philox4x32 10: counter (4 words), key (2), expected (4).
KAT = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
       ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6,
                                               0x6d5451fd)),
       ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
        (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]


def philox_ref(ctr, key):
    """NumPy Philox4x32-10 of counters ``ctr`` ((n, 4) uint32) under ``key`` (2 words)."""
    c = [np.asarray(ctr[:, j], np.uint64) for j in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    m32 = np.uint64(0xffffffff)
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m32, (k1 + np.uint64(0xBB67AE85)) & m32
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & m32, (p0 >> np.uint64(32)) ^ c[3] ^ k1,
             p0 & m32]
    return np.stack(c, axis=1).astype(np.uint32)


def ref_words(seed, offset, n):
    """The words the kernels use: element ``4g + j`` = word ``j`` of counter offset + g."""
    g = np.arange(-(-n // 4), dtype=np.uint64)
    c = (np.uint64(offset) + g)
    ctr = np.stack([c & np.uint64(0xffffffff), c >> np.uint64(32), 0 * c, 0 * c], axis=1)
    return philox_ref(ctr, (seed & 0xffffffff, seed >> 32)).reshape(-1)[:n]


def _key(seed, offset):
    return np.array([seed, offset], dtype=np.uint64).view(np.int64)


def test_reference_known_answers():
    for ctr, key, want in KAT:
        got = philox_ref(np.array([ctr], np.uint64), key)[0]
        assert [int(x) for x in got] == list(want)


@pytest.fixture
def emu_loader(monkeypatch, tmp_path_factory):
    work = str(tmp_path_factory.getbasetemp())
    monkeypatch.setattr(cuda_cache, "module_loader",
                        lambda src, name: _cuda_emu.EmuModule(src, work, 2))
    monkeypatch.setattr(cuda_philox, "_module", {})


@emu
def test_device_function_known_answers(tmp_path_factory):
    src = NVRTC_HEAD + cuda_philox.DEVICE_TEXT + """
extern "C" __global__ void kat(const uint32_t *in, uint32_t *out, int64_t n) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const uint32_t *a = in + 6 * i;
        ember_u32x4 c = {a[0], a[1], a[2], a[3]};
        ember_u32x4 r = philox4x32_10(c, a[4], a[5]);
        out[4 * i] = r.x; out[4 * i + 1] = r.y; out[4 * i + 2] = r.z; out[4 * i + 3] = r.w;
    }
}
"""
    mod = _cuda_emu.EmuModule(src, str(tmp_path_factory.getbasetemp()))
    ins = np.array([list(c) + list(k) for c, k, _ in KAT], np.uint32)
    out = np.zeros((len(KAT), 4), np.uint32)
    mod.get_function("kat")((1,), (32,), (ins, out, np.int64(len(KAT))))
    assert out.tolist() == [list(w) for _, _, w in KAT]


@emu
@pytest.mark.parametrize("seed,offset,n", [(0, 0, 4), (67280421310721, 5, 1029),
                                           (2**64 - 1, 2**32 - 3, 37)])
def test_bits_match_reference(emu_loader, seed, offset, n):
    out = np.zeros(n, np.uint32)
    cuda_philox.function("bits")((2,), (cuda_philox.BLOCK,), (_key(seed, offset), out,
                                                              np.int64(n)))
    np.testing.assert_array_equal(out, ref_words(seed, offset, n))
    if seed == 0 and offset == 0:
        assert out.tolist() == [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]


@emu
def test_uniform_bernoulli_normal_match_reference(emu_loader):
    seed, offset, n = 1234567890123, 77, 1001
    w = ref_words(seed, offset, n)
    u = (w >> 8).astype(np.float32) * np.float32(2.0 ** -24)
    key = _key(seed, offset)
    got = cuda_philox.launch(np, key, "uniform", (7, 143), (0.0, 1.0))
    assert got.shape == (7, 143) and got.dtype == np.float32
    np.testing.assert_array_equal(got.reshape(-1), u)
    assert got.min() >= 0.0 and got.max() < 1.0
    ab = cuda_philox.launch(np, key, "uniform", (n,), (-2.0, 5.0))
    np.testing.assert_array_equal(ab, u * np.float32(5.0) + np.float32(-2.0))
    mask = cuda_philox.launch(np, key, "bernoulli", (n,), (0.3,))
    np.testing.assert_array_equal(mask, (u.astype(np.float64) < 0.3).astype(np.float32))
    z = cuda_philox.launch(np, key, "normal", (n,), (1.5, 2.0))
    g = -(-n // 4)
    wp = ref_words(seed, offset, 4 * g).reshape(g, 4)     # a last partial group's words
    zs = []
    for a, b in ((0, 1), (2, 3)):
        u1 = ((wp[:, a] >> 8) + 1).astype(np.float64) * 2.0 ** -24
        t = (wp[:, b] >> 8).astype(np.float64) * 2.0 ** -24 * 2 * np.pi
        r = np.sqrt(-2 * np.log(u1))
        zs += [r * np.cos(t), r * np.sin(t)]
    want = np.stack(zs, axis=1).reshape(-1)[:n] * 2.0 + 1.5
    np.testing.assert_allclose(z, want, rtol=2e-5, atol=2e-5)


@emu
@pytest.mark.parametrize("dtype,bits", [(np.float16, 11), (ml_dtypes.bfloat16, 8)],
                         ids=["float16", "bfloat16"])
def test_half_precision_outputs(emu_loader, dtype, bits):
    seed, offset, n = 99, 2**32 - 1, 203
    w = ref_words(seed, offset, n)
    key = _key(seed, offset)
    u = cuda_philox.launch(np, key, "uniform", (n,), (0.0, 1.0), dtype=dtype)
    assert u.dtype == np.dtype(dtype)
    want = ((w >> (32 - bits)).astype(np.float32) * np.float32(2.0 ** -bits)).astype(dtype)
    np.testing.assert_array_equal(u, want)              # exact in the dtype: never 1.0
    assert float(u.astype(np.float32).max()) < 1.0
    m = cuda_philox.launch(np, key, "bernoulli", (n,), (0.9,), dtype=dtype)
    u24 = (w >> 8).astype(np.float64) * 2.0 ** -24
    np.testing.assert_array_equal(m.astype(np.float32), (u24 < 0.9).astype(np.float32))
    z = cuda_philox.launch(np, key, "normal", (n,), (0.0, 1.0), dtype=dtype)
    z32 = cuda_philox.launch(np, key, "normal", (n,), (0.0, 1.0))
    np.testing.assert_allclose(z.astype(np.float32), z32, rtol=2 ** -(bits - 1), atol=1e-6)


@emu
def test_empty_and_bad_kind(emu_loader):
    assert cuda_philox.launch(np, _key(1, 0), "uniform", (0, 3), (0.0, 1.0)).shape == (0, 3)
    with pytest.raises(ValueError, match="kind must be one of"):
        cuda_philox.launch(np, _key(1, 0), "gamma", (3,))
    with pytest.raises(ValueError, match="dtype must be float32, float16 or bfloat16"):
        cuda_philox.launch(np, _key(1, 0), "uniform", (3,), (0.0, 1.0), dtype=np.float64)


def test_counters():
    assert [cuda_philox.counters(n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]


@pytest.mark.skipif(not (nvrtc.available() and nvrtc.include_dirs()),
                    reason="NVRTC or the CUDA headers are not installed")
def test_nvrtc_compiles_every_entry():
    import re
    ptx = nvrtc.compile_ptx(cuda_philox.source(), "ember_philox")
    entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
    assert entries == {f"ember_philox_{k}_{t}" for k in cuda_philox.KINDS
                       for t in ("f32", "f16", "bf16")} | {"ember_philox_bits"}
    assert "mul.hi.u32" in ptx
