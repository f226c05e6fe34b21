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


def _words64(seed, offset, n):
    """64-bit words: element 2c + j = words (2j, 2j + 1) of counter offset + c, high first."""
    w = ref_words(seed, offset, 2 * n).astype(np.uint64)
    return (w[0::2] << np.uint64(32)) | w[1::2]


@emu
def test_float64_draws_match_reference(emu_loader):
    """53-bit uniforms from two words an element (the counters' words: ``ref_words``);
    float64 Box-Muller on an element pair's words."""
    seed, offset, n = 2**63 + 5, 2**32 - 2, 1001             # the offset carries
    key = _key(seed, offset)
    x = _words64(seed, offset, n + 1)
    u = (x >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    got = cuda_philox.launch(np, key, "uniform", (7, 143), (-2.0, 5.0), dtype=np.float64)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got.reshape(-1), u[:n] * 5.0 - 2.0)
    m = cuda_philox.launch(np, key, "bernoulli", (n,), (0.3,), dtype=np.float64)
    np.testing.assert_array_equal(m, (u[:n] < 0.3).astype(np.float64))
    z = cuda_philox.launch(np, key, "normal", (n,), (1.5, 2.0), dtype=np.float64)
    u1 = ((x[0::2] >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0 ** -53
    r, t = np.sqrt(-2 * np.log(u1)), u[1::2] * 2 * np.pi
    want = np.stack([r * np.cos(t), r * np.sin(t)], axis=1).reshape(-1)[:n] * 2.0 + 1.5
    np.testing.assert_allclose(z, want, rtol=1e-13, atol=1e-13)
    for kind, sc in (("uniform", (-2.0, 5.0)), ("bernoulli", (0.3,)), ("normal", (1.5, 2.0))):
        ref = cuda_philox.reference(kind, seed, offset, n, sc, np.float64)
        np.testing.assert_allclose(ref, {"uniform": got.reshape(-1), "bernoulli": m,
                                         "normal": z}[kind], rtol=1e-13, atol=1e-13)


@emu
def test_randint_matches_reference_and_spans_its_range(emu_loader):
    """``low + (w * span >> 32)`` of a word (span <= 2**32), ``low + hi64(x * span)`` of a
    64-bit word (randint64): every value in range, none outside, counts within 6 sigma."""
    seed, offset, n = 31337, 2**32 - 1, 4003
    key = _key(seed, offset)
    w = ref_words(seed, offset, n).astype(np.uint64)
    a = cuda_philox.launch(np, key, "randint", (n,), (-3, 7), dtype=np.int64)
    np.testing.assert_array_equal(a, -3 + ((w * np.uint64(7)) >> np.uint64(32)).astype(np.int64))
    assert a.min() == -3 and a.max() == 3
    counts = np.bincount(a + 3)
    assert (np.abs(counts - n / 7) < 6 * np.sqrt(n / 7)).all(), counts
    b = cuda_philox.launch(np, key, "randint", (n,), (-2**31, 2**32), dtype=np.int32)
    np.testing.assert_array_equal(b, (w.astype(np.int64) - 2**31).astype(np.int32))
    x = _words64(seed, offset, n)
    c = cuda_philox.launch(np, key, "randint64", (n,), (-2**63, 2**64 - 1), dtype=np.int64)
    want = [(-2**63 + (int(v) * (2**64 - 1) >> 64)) for v in x[:50]]
    assert c[:50].tolist() == want
    d = cuda_philox.launch(np, key, "randint64", (n,), (10, 3 * 2**40), dtype=np.int64)
    assert d.min() >= 10 and d.max() < 10 + 3 * 2**40
    assert abs(d.mean() - (10 + 1.5 * 2**40)) < 6 * 3 * 2**40 / np.sqrt(12 * n)
    for kind, sc, arr, dt in (("randint", (-3, 7), a, np.int64),
                              ("randint", (-2**31, 2**32), b, np.int32),
                              ("randint64", (-2**63, 2**64 - 1), c, np.int64),
                              ("randint64", (10, 3 * 2**40), d, np.int64)):
        np.testing.assert_array_equal(cuda_philox.reference(kind, seed, offset, n, sc, dt), arr)


@emu
def test_empty_and_bad_kind(emu_loader):
    assert cuda_philox.launch(np, _key(1, 0), "uniform", (0, 3), (0.0, 1.0)).shape == (0, 3)
    with pytest.raises(ValueError, match="kind must be one of"):
        cuda_philox.launch(np, _key(1, 0), "gamma", (3,))
    with pytest.raises(ValueError, match="dtype must be one of float32, float16, bfloat16, "
                                         "float64, got int32"):
        cuda_philox.launch(np, _key(1, 0), "uniform", (3,), (0.0, 1.0), dtype=np.int32)
    with pytest.raises(ValueError, match=r"dtype must be one of int32, int64 \(randint64"):
        cuda_philox.launch(np, _key(1, 0), "randint64", (3,), (0, 2**40), dtype=np.int32)
    with pytest.raises(ValueError, match=r"span must be in \[1, 2\*\*32\]"):
        cuda_philox.launch(np, _key(1, 0), "randint", (3,), (0, 2**32 + 1), dtype=np.int64)


def test_counters():
    assert [cuda_philox.counters(n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]
    assert [cuda_philox.counters(n, 2) for n in (0, 1, 2, 3)] == [0, 1, 1, 2]
    assert [cuda_philox.per_counter(k, t) for k, t in (
        ("uniform", np.float32), ("normal", np.float64), ("randint", np.int64),
        ("randint64", np.int64))] == [4, 2, 4, 2]


@pytest.mark.skipif(not (nvrtc.available() and nvrtc.include_dirs()),
                    reason="NVRTC or the CUDA headers are not installed")
def test_nvrtc_compiles_every_entry():
    import re
    ptx = nvrtc.compile_ptx(cuda_philox.source(), "ember_philox")
    entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
    assert entries == {f"ember_philox_{k}_{t}" for k in ("uniform", "bernoulli", "normal")
                       for t in ("f32", "f16", "bf16", "f64")} | {
        "ember_philox_randint_i32", "ember_philox_randint_i64", "ember_philox_randint64_i64",
        "ember_philox_bits"}
    assert "mul.hi.u32" in ptx and "mul.hi.u64" in ptx
