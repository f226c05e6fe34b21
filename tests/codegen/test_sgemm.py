"""Ember's float32 GEMM (``ember/codegen/sgemm.py``): every variant this CPU runs against
a float64 reference on edge sizes (1, the register tile +-1, the cache blocks +-1,
zero-size), transposed and strided operands without copies, alpha/beta, batches, 1 vs 2
threads bitwise, the variant forced by ``EMBER_SGEMM``, and the path ``matmul`` takes."""
import os
import subprocess
import sys

import numpy as np
import pytest

import ember as em
from ember.codegen import sgemm
from ember.codegen.sgemm_c import KC, KC_ONE, KC_T, MC, NC

VARIANTS = ["generic", "avx2", "avx512"]
EPS = np.finfo(np.float32).eps
# (M, K, N): 1, around each variant's tile (4/6 rows; 16/64 columns), around KC, KC_ONE, KC_T
# (transposed A) and MC
SHAPES = [(1, 1, 1), (1, 7, 1), (5, 3, 15), (6, 9, 16), (7, 17, 17), (13, 31, 63),
          (4, KC - 1, 65), (12, KC, 64), (11, KC + 1, 33), (MC + 1, 40, 129),
          (7, KC_T - 1, 48), (8, KC_T + 1, 80),
          (3, 2 * KC + 1, 70), (2, 20, NC + 1), (7, KC_ONE, 40), (6, KC_ONE + 1, 65)]
LAYOUTS = ["nn", "nt", "tn", "tt", "strided"]


def _variant(name):
    if not sgemm.runnable():
        pytest.skip("no C compiler: matmul runs OpenBLAS")
    if name not in sgemm.runnable():
        pytest.skip(f"this CPU does not run the {name} variant (runs {sgemm.runnable()})")
    return name


def _operand(rng, rows, cols, layout):
    """A float32 (rows, cols) matrix: row-major, a transposed view, or every other
    element of a larger array (no unit stride)."""
    if layout == "t":
        return rng.standard_normal((cols, rows), dtype=np.float32).T
    if layout == "s":
        return rng.standard_normal((2 * rows, 3 * cols), dtype=np.float32)[::2, ::3]
    return rng.standard_normal((rows, cols), dtype=np.float32)


def _pair(M, K, N, layout, seed=0):
    rng = np.random.default_rng(seed)
    la, lb = ("s", "s") if layout == "strided" else tuple(layout)
    return _operand(rng, M, K, la), _operand(rng, K, N, lb)


def _check(c, a, b, alpha=1.0, beta=0.0, c0=None):
    """``c`` against ``alpha * a @ b + beta * c0`` in float64, within float32 rounding of
    a sum of K products (``(K + 2) * eps`` of the sum of magnitudes)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = alpha * (a64 @ b64)
    mag = abs(alpha) * (np.abs(a64) @ np.abs(b64))
    if c0 is not None and beta != 0:
        ref = ref + beta * c0.astype(np.float64)
        mag = mag + abs(beta) * np.abs(c0.astype(np.float64))
    K = a.shape[-1]
    bound = (K + 2) * EPS * mag + np.finfo(np.float32).tiny
    assert c.shape == ref.shape and c.dtype == np.float32
    assert np.all(np.abs(c - ref) <= bound), float(np.max(np.abs(c - ref) - bound))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_float64_reference(variant, layout):
    _variant(variant)
    for i, (M, K, N) in enumerate(SHAPES):
        a, b = _pair(M, K, N, layout, seed=i)
        c = sgemm.gemm(a, b, variant=variant, nthreads=1)
        _check(c, a, b)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_avx2_and_avx512_give_the_same_bits(layout):
    """Both run one FMA chain per element over the same k blocks (explicit FMA
    instructions), so their results agree bitwise, alpha/beta included."""
    _variant("avx2")
    _variant("avx512")
    rng = np.random.default_rng(5)
    for i, (M, K, N) in enumerate(SHAPES + [(128, 784, 512)]):
        a, b = _pair(M, K, N, layout, seed=i)
        np.testing.assert_array_equal(sgemm.gemm(a, b, variant="avx2"),
                                      sgemm.gemm(a, b, variant="avx512"))
        c0 = rng.standard_normal((M, N), dtype=np.float32)
        c2, c5 = c0.copy(), c0.copy()
        sgemm.gemm(a, b, c2, alpha=0.5, beta=-2.0, variant="avx2")
        sgemm.gemm(a, b, c5, alpha=0.5, beta=-2.0, variant="avx512")
        np.testing.assert_array_equal(c2, c5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_transposed_operands_are_not_copied(variant, monkeypatch):
    _variant(variant)
    a, b = _pair(9, 50, 70, "tt")
    copies = []
    real = np.ascontiguousarray
    monkeypatch.setattr(np, "ascontiguousarray", lambda *x, **k: copies.append(1) or real(*x, **k))
    c = sgemm.gemm(a, b, variant=variant, nthreads=1)
    assert not copies
    _check(c, a, b)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, -2.0), (-1.5, 0.0), (2.0, 1.0)])
def test_alpha_beta(variant, alpha, beta):
    _variant(variant)
    rng = np.random.default_rng(1)
    for M, K, N in [(7, KC + 3, 65), (13, 5, 16), (1, 1, 1)]:
        a, b = _pair(M, K, N, "nt", seed=M)
        c0 = rng.standard_normal((M, N), dtype=np.float32)
        c = c0.copy()
        assert sgemm.gemm(a, b, c, alpha=alpha, beta=beta, variant=variant) is c
        _check(c, a, b, alpha, beta, c0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_beta_zero_never_reads_c(variant):
    _variant(variant)
    a, b = _pair(7, 300, 70, "nn")
    c = np.full((7, 70), np.nan, np.float32)
    sgemm.gemm(a, b, c, beta=0.0, variant=variant)
    _check(c, a, b)


def test_zero_sizes_and_empty_sum():
    _variant("avx512" if "avx512" in sgemm.runnable() else "generic")
    v = sgemm.runnable()[-1]
    assert sgemm.gemm(np.ones((0, 3), np.float32), np.ones((3, 4), np.float32),
                      variant=v).shape == (0, 4)
    assert sgemm.gemm(np.ones((2, 3), np.float32), np.ones((3, 0), np.float32),
                      variant=v).shape == (2, 0)
    c = np.full((2, 4), 3.0, np.float32)
    sgemm.gemm(np.ones((2, 0), np.float32), np.ones((0, 4), np.float32), c, beta=0.5,
               variant=v)
    np.testing.assert_array_equal(c, np.full((2, 4), 1.5, np.float32))
    r = sgemm.gemm(np.ones((2, 0), np.float32), np.ones((0, 4), np.float32), variant=v)
    np.testing.assert_array_equal(r, np.zeros((2, 4), np.float32))


@pytest.mark.parametrize("variant", VARIANTS)
def test_batched_with_broadcast_batch(variant):
    _variant(variant)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 70, 13), dtype=np.float32).transpose(0, 2, 1)  # (3, 13, 70)
    b = np.broadcast_to(rng.standard_normal((70, 65), dtype=np.float32), (3, 70, 65))
    c = sgemm.gemm(a, b, variant=variant, nthreads=2)
    for i in range(3):
        _check(c[i], a[i], b[i])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "strided"])
def test_one_and_two_threads_bitwise(variant, layout):
    _variant(variant)
    # (M, K, N): split by columns (many panels), by rows (one panel of columns)
    for M, K, N in [(128, 300, 512), (97, 300, 10), (256, 64, 200)]:
        a, b = _pair(M, K, N, layout, seed=N)
        one = sgemm.gemm(a, b, variant=variant, nthreads=1)
        two = sgemm.gemm(a, b, variant=variant, nthreads=2)
        np.testing.assert_array_equal(one, two)
        _check(two, a, b)


def test_unknown_variant_names_the_valid_ones():
    if not sgemm.runnable():
        pytest.skip("no C compiler")
    with pytest.raises(ValueError, match="EMBER_SGEMM.*avx512"):
        sgemm.gemm(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32),
                   variant="avx3")


def test_matmul_takes_the_gemm_where_worth_it():
    if sgemm._isa(None) is None:
        pytest.skip(f"EMBER_SGEMM={sgemm.mode} or no AVX-512 here: matmul runs OpenBLAS")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 784), dtype=np.float32)
    w = rng.standard_normal((512, 784), dtype=np.float32)
    assert sgemm.worth(128, 784, 512)
    out = em.matmul(em.tensor(x), em.tensor(w).mT).numpy()
    np.testing.assert_array_equal(out, sgemm.gemm(x, w.T))
    # batch dims folded into rows
    x3 = x.reshape(4, 32, 784)
    out3 = em.matmul(em.tensor(x3), em.tensor(w).mT).numpy()
    np.testing.assert_array_equal(out3.reshape(128, 512), sgemm.gemm(x, w.T))
    # too small / too narrow: OpenBLAS, NumPy's bits
    for a, b in [(x[:, :10], w[:10, :10]), (x, w[:10].T)]:
        assert not sgemm.worth(a.shape[0], a.shape[1], b.shape[1])
        np.testing.assert_array_equal(em.matmul(em.tensor(a), em.tensor(b)).numpy(), a @ b)


def test_matmul_batched_broadcast_matches_reference():
    if sgemm._isa(None) is None:
        pytest.skip(f"EMBER_SGEMM={sgemm.mode} or no AVX-512 here: matmul runs OpenBLAS")
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 1, 96, 128), dtype=np.float32)
    b = rng.standard_normal((3, 128, 96), dtype=np.float32).transpose(0, 2, 1)  # (3,96,128)
    b = np.ascontiguousarray(b).transpose(0, 2, 1)                              # (3,128,96)
    r = sgemm.matmul(a, b)
    assert r is not None and r.shape == (2, 3, 96, 96)
    for i in range(2):
        for j in range(3):
            _check(r[i, j], a[i, 0], b[j])


@pytest.mark.parametrize("env", ["avx512", "avx2", "generic", "off"])
def test_env_var_forces_the_variant(env):
    if env != "off":
        _variant(env)
    code = (
        "import numpy as np, ember as em\n"
        "from ember.codegen import sgemm\n"
        f"assert sgemm.mode == {env!r}, sgemm.mode\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.standard_normal((128, 300), dtype=np.float32)\n"
        "w = rng.standard_normal((256, 300), dtype=np.float32)\n"
        "r = em.matmul(em.tensor(x), em.tensor(w).mT).numpy()\n"
        f"want = x @ w.T if {env!r} == 'off' else sgemm.gemm(x, w.T, variant={env!r})\n"
        "np.testing.assert_array_equal(r, want)\n"
        "print('ok')\n")
    env_vars = dict(os.environ, EMBER_SGEMM=env)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env_vars, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


def test_matmul_out_overlapping_an_operand_is_left_to_numpy():
    if sgemm._isa(None) is None:
        pytest.skip(f"EMBER_SGEMM={sgemm.mode} or no AVX-512 here: matmul runs OpenBLAS")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((128, 128), dtype=np.float32)
    w = rng.standard_normal((128, 128), dtype=np.float32)
    assert sgemm.worth(128, 128, 128)
    assert sgemm.matmul(x, w, out=x) is None
    assert sgemm.matmul(x, w, out=w[:, ::-1][:, ::-1]) is None
    out = np.empty((128, 128), np.float32)
    assert sgemm.matmul(x, w, out=out) is out
    _check(out, x, w)


def test_threads_follow_the_adaptive_policy(monkeypatch):
    from ember import _contention
    from ember.codegen import runtime
    monkeypatch.setattr(runtime, "_threads", dict(runtime._threads, n=2))
    monkeypatch.setattr(_contention, "running", lambda: True)
    monkeypatch.setitem(_contention._state, "used", 1)
    assert sgemm._threads() == 1        # other processes hold a CPU: no split
    monkeypatch.setitem(_contention._state, "used", 2)
    assert sgemm._threads() == 2
    monkeypatch.setattr(_contention, "running", lambda: False)   # policy off: as asked
    monkeypatch.setitem(_contention._state, "used", 1)
    assert sgemm._threads() == 2


@pytest.mark.parametrize("variant", VARIANTS)
def test_negative_and_zero_strides(variant):
    _variant(variant)
    rng = np.random.default_rng(7)
    for M, K, N in [(13, 300, 70), (128, 100, 65), (7, KC_T + 1, 20)]:
        b = rng.standard_normal((N, K), dtype=np.float32).T[::-1]                # (K, N)
        a = rng.standard_normal((M, K), dtype=np.float32)[::-1, ::-1]
        _check(sgemm.gemm(a, b, variant=variant), a, b)
        at = rng.standard_normal((K, M), dtype=np.float32).T[:, ::-1]             # columns
        _check(sgemm.gemm(at, b[:, ::-1], variant=variant, nthreads=2), at, b[:, ::-1])
        row = np.broadcast_to(rng.standard_normal(K, dtype=np.float32), (M, K))  # stride 0
        _check(sgemm.gemm(row, b, variant=variant), row, b)


# gemm_sum: (B, M, K, N); 64x256x288 is W2 conv2's weight gradient (the swapped path: B a
# transposed view, M < N), 300x40x20 runs unswapped, KC_ONE + 1 crosses a k block
SUM_SHAPES = [(7, 64, 256, 288), (3, 5, KC_ONE + 1, 70), (4, 300, 40, 20), (1, 8, 8, 8),
              (2, 13, 31, 130)]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("bt,M,K,N", SUM_SHAPES)
@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5])
def test_gemm_sum_is_the_per_matrix_loop_bitwise(variant, bt, M, K, N, beta):
    """One summed call = gemm(a[0], b[0], beta) then gemm(a[t], b[t], beta=1): the same
    bits, for a transposed and a row-major B and 1 or 2 threads; near float64."""
    _variant(variant)
    rng = np.random.default_rng(bt * M + N)
    a = rng.standard_normal((bt, M, K), dtype=np.float32)
    bT = rng.standard_normal((bt, N, K), dtype=np.float32).transpose(0, 2, 1)
    c0 = rng.standard_normal((M, N), dtype=np.float32)
    loop = c0.copy()
    sgemm.gemm(a[0], bT[0], loop, beta=beta, variant=variant, nthreads=1)
    for t in range(1, bt):
        sgemm.gemm(a[t], bT[t], loop, beta=1.0, variant=variant, nthreads=1)
    for b in (bT, np.ascontiguousarray(bT)):
        for nt in (1, 2):
            c = c0.copy()
            assert sgemm.gemm_sum(a, b, c, beta=beta, variant=variant, nthreads=nt) is c
            assert np.array_equal(c, loop), (b.strides, nt)
    ref_a = a.transpose(1, 0, 2).reshape(M, bt * K)       # the sum as one product
    ref_b = bT.reshape(bt * K, N)
    _check(loop, ref_a, ref_b, 1.0, beta, c0)


def test_gemm_sum_edges():
    """A new result without ``c``, zero-size batches, operands that do not multiply, and
    another dtype (None: nothing runs)."""
    _variant("generic")
    a = np.ones((2, 3, 4), np.float32)
    b = np.ones((2, 4, 5), np.float32)
    r = sgemm.gemm_sum(a, b, variant="generic")
    assert r.shape == (3, 5) and np.array_equal(r, np.full((3, 5), 8, np.float32))
    c = np.full((3, 5), 2, np.float32)
    sgemm.gemm_sum(a[:0], b[:0], c, beta=0.5, variant="generic")
    assert np.array_equal(c, np.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match="gemm_sum"):
        sgemm.gemm_sum(a, b[:, :3], variant="generic")
    assert sgemm.gemm_sum(a.astype(np.float64), b, variant="generic") is None


def test_cached_plan_still_checks_dtypes_and_c():
    """A second call with the same shapes takes the cached plan; another dtype or an
    unusable ``c`` of a new layout still returns None."""
    _variant("generic")
    a, b = _pair(9, 20, 33, "nt")
    c = np.empty((9, 33), np.float32)
    for _ in range(2):
        assert sgemm.gemm(a, b, c, variant="generic") is c
        _check(c, a, b)
    assert sgemm.gemm(a.astype(np.float64), b, c, variant="generic") is None
    assert sgemm.gemm(a, b, np.empty((9, 33), np.float64), variant="generic") is None
    assert sgemm.gemm(a, b, np.empty((33, 9), np.float32).T, variant="generic") is None
    assert sgemm.gemm(a, b, np.empty((9, 34), np.float32), variant="generic") is None
