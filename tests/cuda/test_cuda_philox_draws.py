"""The compiled GPU draws beyond float uniforms, masks and normals that run on the device
(``ember/graph/passes/philox.py``): Bernoulli with a tensor ``p`` (``cast(uniform < p)``,
its uniform a Philox leaf of the kernel that compares), ``randint``/``random_`` (int32 and
int64; multiply-shift of one word, of a 64-bit word over 2**32 values) and float64
uniforms and normals (53-bit, two words an element).

On the stand-in with a GPU's capabilities (``emu_gpu``) each call's values are those of a
NumPy Philox4x32-10 (``ref_words``, written apart from the kernels) at the generator's
seed and the offsets its earlier draws advanced it to: the same counters give the same
words. The program holds no host draw, so ``mode="reduce-overhead"`` captures it and
replays the default mode's values bit for bit; ``randperm`` stays a host draw (the
runner still refuses that program). Eager and CPU graphs keep PCG64 draws.
"""
import numpy as np
import pytest

import ember as em
from ember.graph.passes.philox import PHILOX
from ember.graph.trace import RANDOM

import _cuda_emu
from test_cuda_philox_emu import ref_words
from test_multi_launch import _program, emu_gpu  # noqa: F401 - a fixture

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")

R, C, N = 64, 8, 256
#: per column of the tensor-p draw: 0 and 1 exactly, the rest in between
P = np.array([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 0.5], np.float32)
SEED = 77


def _draws(p, q):
    a = em.bernoulli(p)                                        # p per element
    b = em.empty(R, C, device="cuda").bernoulli_(q)            # q (C,) broadcast
    c = em.randint(-3, 4, (N,), device="cuda")
    d = em.empty(N, dtype=em.int32, device="cuda").random_(5, 9)
    e = em.randint(-2**62, 2**62, (N,), device="cuda")         # 2**63 values: 64-bit words
    f = em.rand(N, device="cuda", dtype=em.float64)
    g = em.randn(N, device="cuda", dtype=em.float64)
    return a, b, c, d, e, f, g


#: counters each draw of ``_draws`` uses (4 elements a counter, 2 for 64-bit ones)
COUNTERS = [R * C // 4, R * C // 4, N // 4, N // 4, N // 2, N // 2, N // 2]


def _run(mode, calls):
    em.manual_seed(SEED)
    p = em.tensor(np.broadcast_to(P, (R, C)).copy()).to("cuda")
    q = em.tensor(P).to("cuda")
    fn = em.compile(_draws, mode=mode)
    return [[t.cpu().numpy().copy() for t in fn(p, q)] for _ in range(calls)], fn


def _words64(offset, n, seed=SEED):
    """The 64-bit words of elements ``0 .. n-1``: words (2j, 2j+1) of a counter, high first."""
    w = ref_words(seed, offset, 2 * n).astype(np.uint64)
    return (w[0::2] << np.uint64(32)) | w[1::2]


def _want(offset):
    """``_draws``'s values from the counters at ``offset`` (float64 normals: NumPy's libm)."""
    offs = np.cumsum([offset] + COUNTERS)
    u24 = [(ref_words(SEED, int(o), R * C) >> 8).astype(np.float32).reshape(R, C) *
           np.float32(2.0 ** -24) for o in offs[:2]]
    w = [ref_words(SEED, int(o), N).astype(np.uint64) for o in offs[2:4]]
    x = [_words64(int(o), N) for o in offs[4:7]]
    u1 = ((x[2][0::2] >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0 ** -53
    t = (x[2][1::2] >> np.uint64(11)).astype(np.float64) * 2.0 ** -53 * 6.283185307179586
    r = np.sqrt(-2 * np.log(u1))
    return [(u24[0] < P).astype(np.float32), (u24[1] < P).astype(np.float32),
            -3 + ((w[0] * np.uint64(7)) >> np.uint64(32)).astype(np.int64),
            (5 + ((w[1] * np.uint64(4)) >> np.uint64(32))).astype(np.int32),
            -2**62 + (x[0] >> np.uint64(1)).astype(np.int64),      # high word of x * 2**63
            (x[1] >> np.uint64(11)).astype(np.float64) * 2.0 ** -53,
            np.stack([r * np.cos(t), r * np.sin(t)], axis=1).reshape(-1)]


def test_draws_are_philox_of_the_generator_and_sane(emu_gpu):
    got, fn = _run(None, calls=4)
    ops = [n.op for n in _program(fn).graph.nodes]
    assert RANDOM not in ops and ops.count(PHILOX) == 5     # tensor-p draws: leaves
    launches = {name for m in emu_gpu for name in m.launches}
    assert {"ember_philox_randint_i64", "ember_philox_randint_i32", "ember_philox_randint64_i64",
            "ember_philox_uniform_f64", "ember_philox_normal_f64"} <= launches
    assert "ember_philox_uniform_f32" not in launches       # the masks' uniforms: fused
    step = sum(COUNTERS)
    for k, vals in enumerate(got[1:]):          # the first call is the traced eager one
        want = _want(k * step)
        for j, (v, w) in enumerate(zip(vals, want)):
            assert v.dtype == w.dtype, j
            if j == 6:
                np.testing.assert_allclose(v, w, rtol=1e-13, atol=1e-13)
            else:
                np.testing.assert_array_equal(v, w, err_msg=str(j))
    a, b, c, d, e, f, g = (np.stack([v[j] for v in got[1:]]) for j in range(7))
    n = 3 * R                                   # per column: p per element, broadcast p
    for m in (a, b):
        assert set(np.unique(m)) <= {0.0, 1.0}
        ones = m.reshape(-1, C).sum(0)
        assert ones[0] == 0 and ones[6] == n
        assert (np.abs(ones - n * P) <= 6 * np.sqrt(n * P * (1 - P))).all(), ones
    for v, lo, hi in ((c, -3, 4), (d, 5, 9)):
        assert v.min() == lo and v.max() == hi - 1
        counts = np.bincount(v.reshape(-1) - lo, minlength=hi - lo)
        k = v.size / (hi - lo)
        assert (np.abs(counts - k) <= 6 * np.sqrt(k)).all(), counts
    assert -2**62 <= e.min() and e.max() < 2**62
    assert abs(e.astype(np.float64).mean()) < 6 * 2.0**63 / np.sqrt(12 * e.size)
    assert 0 <= f.min() and f.max() < 1 and abs(f.mean() - 0.5) < 6 / np.sqrt(12 * f.size)
    assert abs(g.mean()) < 6 / np.sqrt(g.size)
    assert abs(g.var() - 1) < 6 * np.sqrt(2 / g.size)


def test_reduce_overhead_captures_and_replays_the_default_mode(emu_gpu):
    want, _ = _run(None, calls=5)
    got, fn = _run("reduce-overhead", calls=5)
    for w, g in zip(want, got):
        assert all(x.tobytes() == y.tobytes() for x, y in zip(w, g))
    cg = _program(fn).cuda_graph
    assert cg.failed is None and cg.captures == 1 and cg.replays >= 1
    assert not np.array_equal(got[-1][2], got[-2][2])        # new numbers each replay


def test_randperm_and_int16_randint_stay_host_draws(emu_gpu):
    em.manual_seed(0)
    x = em.zeros(6, dtype=em.int64).to("cuda")
    fn = em.compile(lambda x: (x + em.randperm(6, device="cuda"),
                               em.randint(0, 5, (6,), dtype=em.int16, device="cuda")),
                    mode="reduce-overhead")
    for _ in range(4):
        perm, small = (t.cpu().numpy() for t in fn(x))
        assert sorted(perm.tolist()) == list(range(6)) and 0 <= small.min() <= small.max() < 5
    prog = _program(fn)
    assert [n.params["what"] for n in prog.graph.nodes if n.op is RANDOM] == ["randperm",
                                                                            "randint"]
    assert "draws random numbers on the host (randperm)" in prog.cuda_graph.failed


def test_float64_and_integer_draws_feed_fused_kernels(emu_gpu):
    """No Philox leaf for them: the kernel's sample is loaded (bits of the separate entry)."""
    em.manual_seed(4)
    fn = em.compile(lambda: (em.randint(0, 9, (40,), device="cuda") * 2,
                             em.rand(40, device="cuda", dtype=em.float64) + 1.0))
    fn()
    ints, floats = (t.cpu().numpy() for t in fn())
    w = ref_words(4, 0, 40).astype(np.uint64)
    np.testing.assert_array_equal(ints, 2 * ((w * np.uint64(9)) >> np.uint64(32)).astype(np.int64))
    x = _words64(10, 40, seed=4)                 # after randint's 10 counters
    np.testing.assert_array_equal(floats, (x >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
                                  + 1.0)


def test_eager_and_cpu_graph_draws_stay_pcg64(fake_cuda):
    """The plain stand-in and CPU graphs: host draws, eager's numbers."""
    def draws(p):
        return em.bernoulli(p), em.randint(0, 100, (9,), device=p.device)
    for dev in ("cpu", "cuda"):
        em.manual_seed(2)
        p = em.full((5,), 0.4).to(dev)
        want = [t.cpu().numpy() for t in draws(p)]
        em.manual_seed(2)
        fn = em.compile(draws)
        got = [t.cpu().numpy() for t in fn(p)]              # the traced call: eager's
        assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want)), dev
        em.manual_seed(2)
        got = [t.cpu().numpy() for t in fn(p)]              # the graph's host draws
        assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want)), dev
        assert sum(n.op is RANDOM for n in _program(fn).graph.nodes) == 2
    em.manual_seed(2)
    rng = np.random.Generator(np.random.PCG64(2))
    assert em.randint(0, 100, (9,), device="cuda").cpu().numpy().tolist() == \
        rng.integers(0, 100, 9, dtype=np.int64).tolist()
