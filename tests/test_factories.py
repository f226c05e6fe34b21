"""Factories (dtype inference, ranges, eye) and random numbers (seeding, state, statistics)."""
import math

import numpy as np
import pytest

import ember as em


# ------------------------------------------------------------------ tensor() dtype inference
@pytest.mark.parametrize("data,dtype", [
    (1.5, em.float32), (3, em.int64), (True, em.bool), ([1, 2.5], em.float32),
    ([True, 2], em.int64), ([[True], [False]], em.bool), (np.array([1.5]), em.float64),
    (np.float64(1.5), em.float64), (np.float32(1.5), em.float32), (np.int32(3), em.int32),
    (np.array([1], dtype=np.uint8), em.uint8), ([np.float32(1), np.float32(2)], em.float32),
    ([], em.float32), ([[], []], em.float32), ([np.ones(2), np.ones(2)], em.float64)])
def test_tensor_dtype_inference(data, dtype):
    assert em.tensor(data).dtype == dtype


def test_tensor_nested_tensors():
    a = em.tensor([em.tensor(1, dtype=em.int32), em.tensor(2, dtype=em.int32)])
    assert a.dtype == em.int32 and a.tolist() == [1, 2]
    b = em.tensor([em.tensor(1.0, dtype=em.float64), 1.5])
    assert b.dtype == em.float64 and b.tolist() == [1.0, 1.5]
    c = em.tensor([em.tensor(1, dtype=em.int32), 2.5])
    assert c.dtype == em.float32
    d = em.tensor([[em.ones(2), em.zeros(2)]])
    assert d.shape == (1, 2, 2) and d.tolist() == [[[1.0, 1.0], [0.0, 0.0]]]


def test_tensor_copies_and_detaches():
    x = em.ones(2, requires_grad=True)
    y = em.tensor(x)
    assert not y.requires_grad and y.tolist() == [1.0, 1.0]
    a = np.zeros(2)
    t = em.tensor(a)
    a[0] = 1
    assert t.tolist() == [0.0, 0.0]


def test_tensor_default_dtype_follows_set_default_dtype():
    em.set_default_dtype(em.float64)
    try:
        assert em.tensor([1.0]).dtype == em.float64
        assert em.arange(0, 1, 0.5).dtype == em.float64
    finally:
        em.set_default_dtype(em.float32)


def test_tensor_errors():
    with pytest.raises(TypeError, match="tensor"):
        em.tensor("abc")
    with pytest.raises(TypeError, match="tensor"):
        em.tensor([[1, 2], [3]])
    with pytest.raises(RuntimeError, match="floating point"):
        em.tensor([1, 2], requires_grad=True)


def test_tensor_dtype_inference_matches_torch():
    torch = pytest.importorskip("torch")
    cases = [1.5, 3, True, [1, 2.5], [True, 2], np.arange(3, dtype=np.int16),
             [np.float64(1), 2], [[1, 2], [3, 4]], np.float16(2)]
    for c in cases:
        assert em.tensor(c).dtype.name == str(torch.tensor(c).dtype).replace("torch.", "")


# ------------------------------------------------------------------ ranges / eye
@pytest.mark.parametrize("args", [(5,), (2, 9), (2, 9, 3), (10, 0, -3), (0, 1, 0.1),
                                  (0.5, 2.0, 0.3), (-1, 1, 0.25), (1, 1), (0, 10, 3.0),
                                  (0, 0.3, 0.1), (1e-3, 1, 0.0999)])
def test_arange_lengths_and_values(args):
    r = em.arange(*args)
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args + (1,))[:3]
    n = max(0, math.ceil((end - start) / step))
    assert r.shape == (n,)
    ints = all(isinstance(a, int) for a in args)
    assert r.dtype == (em.int64 if ints else em.float32)
    np.testing.assert_allclose(r.numpy(), start + step * np.arange(n), rtol=1e-6, atol=1e-6)


def _close_to_rounding(e, t, args):
    """Equal up to the rounding of ``start + i * step`` (a couple of eps of the largest
    magnitude involved): PyTorch's vectorised kernels round twice per element."""
    if e.dtype.kind in "iu":
        np.testing.assert_array_equal(e, t)
        return
    scale = max(abs(a) for a in args)
    np.testing.assert_allclose(e, t, rtol=0, atol=2 * np.finfo(e.dtype).eps * scale)


def test_arange_matches_torch():
    # lengths and dtypes agree exactly; values up to rounding
    torch = pytest.importorskip("torch")
    for args in [(0, 1, 0.1), (0.5, 2.0, 0.3), (0, 0.3, 0.1), (-3, 7, 0.7), (10, 0, -3),
                 (1e-3, 1, 0.0999), (3,)]:
        for et, tt in [(None, None), (em.float64, torch.float64)]:
            e, t = em.arange(*args, dtype=et).numpy(), torch.arange(*args, dtype=tt).numpy()
            assert e.dtype == t.dtype and e.shape == t.shape
            _close_to_rounding(e, t, args)


def test_arange_errors():
    with pytest.raises(ValueError, match="nonzero"):
        em.arange(0, 5, 0)
    with pytest.raises(ValueError, match="step sign"):
        em.arange(0, 5, -1)
    with pytest.raises(ValueError, match="step sign"):
        em.arange(5, 0)
    with pytest.raises(TypeError, match="arange"):
        em.arange("a")


def test_arange_kwargs():
    r = em.arange(3, dtype=em.float64, requires_grad=True)
    assert r.dtype == em.float64 and r.requires_grad and r.tolist() == [0.0, 1.0, 2.0]
    assert em.arange(em.tensor(4)).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("args", [(0, 1, 5), (-2.5, 7, 11), (3, 3, 4), (0, 1, 1), (0, 1, 0),
                                  (10, -10, 7), (0, 1, 1000)])
def test_linspace(args):
    r = em.linspace(*args)
    assert r.dtype == em.float32 and r.shape == (args[2],)
    np.testing.assert_allclose(r.numpy(), np.linspace(*args), rtol=1e-6, atol=1e-6)
    if args[2] > 1:
        assert r.numpy()[0] == np.float32(args[0]) and r.numpy()[-1] == np.float32(args[1])


def test_linspace_matches_torch():
    torch = pytest.importorskip("torch")
    for args in [(0, 1, 7), (-2.5, 7, 11), (0.1, 0.9, 100), (10, -10, 33)]:
        for et, tt in [(em.float32, torch.float32), (em.float64, torch.float64),
                       (em.int64, torch.int64)]:
            e, t = em.linspace(*args, dtype=et).numpy(), torch.linspace(*args, dtype=tt).numpy()
            assert e.dtype == t.dtype and e[0] == t[0] and e[-1] == t[-1]
            if et is em.int64:
                np.testing.assert_array_equal(e, t)
            else:
                _close_to_rounding(e, t, args)


def test_linspace_logspace_errors_and_logspace():
    with pytest.raises(ValueError, match="non-negative"):
        em.linspace(0, 1, -1)
    np.testing.assert_allclose(em.logspace(0, 3, 4).numpy(), [1, 10, 100, 1000], rtol=1e-6)
    np.testing.assert_allclose(em.logspace(0, 3, 4, base=2).numpy(), [1, 2, 4, 8])


def test_eye():
    assert em.eye(3).tolist() == np.eye(3).tolist() and em.eye(3).dtype == em.float32
    assert em.eye(2, 4, dtype=em.int64).tolist() == np.eye(2, 4, dtype=int).tolist()
    assert em.eye(0).shape == (0, 0)
    assert em.eye(2, requires_grad=True).requires_grad
    with pytest.raises(ValueError, match="eye"):
        em.eye(-1)


def test_full_and_like_factories():
    assert em.full((2,), 3).dtype == em.int64
    assert em.full((2,), 3.0).dtype == em.float32
    assert em.full((2,), True).dtype == em.bool
    x = em.ones(2, 3, dtype=em.float64)
    for f in (em.zeros_like, em.ones_like, em.empty_like, em.rand_like, em.randn_like):
        y = f(x)
        assert y.shape == (2, 3) and y.dtype == em.float64
    r = em.randint_like(x, 5)
    assert r.dtype == em.float64 and r.numpy().min() >= 0 and r.numpy().max() < 5
    r = em.randint_like(em.zeros(1000, dtype=em.int32), 3, 6)
    assert r.dtype == em.int32 and set(r.tolist()) == {3, 4, 5}


# ------------------------------------------------------------------ seeding and state
def test_manual_seed_reproducible():
    em.manual_seed(123)
    a = [em.rand(5).numpy().copy(), em.randn(3, 2).numpy().copy(),
         em.randint(0, 100, (4,)).numpy().copy(), em.randperm(10).numpy().copy()]
    em.manual_seed(123)
    b = [em.rand(5).numpy(), em.randn(3, 2).numpy(), em.randint(0, 100, (4,)).numpy(),
         em.randperm(10).numpy()]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert em.initial_seed() == 123


def test_default_seed_like_torch():
    g = em.Generator()
    assert g.initial_seed() == 67280421310721
    assert g.manual_seed(-1).initial_seed() == 2 ** 64 - 1


def test_generator_independent_of_global():
    g1 = em.Generator().manual_seed(7)
    g2 = em.Generator().manual_seed(7)
    a = em.randn(4, generator=g1).numpy()
    em.randn(10)  # global draws do not disturb g2
    np.testing.assert_array_equal(a, em.randn(4, generator=g2).numpy())


@pytest.mark.parametrize("as_dict", [False, True])
def test_generator_state_round_trip_bit_exact(as_dict):
    g = em.Generator().manual_seed(2024)
    em.rand(3, generator=g)  # float32 draws leave a buffered half word in PCG64
    st = g.state_dict() if as_dict else g.get_state()
    if not as_dict:
        assert st.dtype == em.uint8 and st.ndim == 1
    draws = [em.rand(7, generator=g).numpy().copy(), em.randn(5, generator=g).numpy().copy(),
             em.randint(0, 2 ** 40, (3,), generator=g).numpy().copy()]
    g2 = em.Generator().manual_seed(1).set_state(st)
    assert g2.initial_seed() == 2024
    again = [em.rand(7, generator=g2).numpy(), em.randn(5, generator=g2).numpy(),
             em.randint(0, 2 ** 40, (3,), generator=g2).numpy()]
    for a, b in zip(draws, again):
        assert a.tobytes() == b.tobytes()
    assert bytes(g.get_state().numpy()) == bytes(g2.get_state().numpy())


def test_global_rng_state_and_fork_rng():
    em.manual_seed(5)
    s = em.get_rng_state()
    a = em.rand(4).numpy().copy()
    em.set_rng_state(s)
    np.testing.assert_array_equal(a, em.rand(4).numpy())
    s = em.get_rng_state()
    with em.fork_rng():
        em.rand(100)
    assert bytes(em.get_rng_state().numpy()) == bytes(s.numpy())
    with pytest.raises(ValueError, match="get_state"):
        em.set_rng_state(em.zeros(3, dtype=em.uint8))


def test_seed_is_random_and_recorded():
    s = em.seed()
    assert em.initial_seed() == s and 0 <= s < 2 ** 64
    em.manual_seed(0)


# ------------------------------------------------------------------ distributions
def test_rand_dtypes_and_range():
    g = em.Generator().manual_seed(0)
    for dt in (em.float16, em.bfloat16, em.float32, em.float64):
        x = em.rand(20000, generator=g, dtype=dt)
        v = x.numpy().astype(np.float64)
        assert x.dtype == dt and v.min() >= 0.0 and v.max() < 1.0
        assert abs(v.mean() - 0.5) < 5 * math.sqrt(1 / 12 / v.size)
    with pytest.raises(TypeError, match="floating"):
        em.rand(3, dtype=em.int64)


def test_randn_moments_and_float32_native():
    g = em.Generator().manual_seed(1)
    v = em.randn(50000, generator=g).numpy().astype(np.float64)
    assert abs(v.mean()) < 5 / math.sqrt(v.size)
    assert abs(v.var() - 1.0) < 5 * math.sqrt(2 / v.size)
    # float32 is drawn natively (not a float64 draw cast down): same stream as NumPy's
    ref = np.random.Generator(np.random.PCG64(1)).standard_normal(4, dtype=np.float32)
    np.testing.assert_array_equal(em.randn(4, generator=em.Generator().manual_seed(1)).numpy(),
                                  ref)


def test_randint_forms_and_errors():
    em.manual_seed(0)
    a = em.randint(5, (1000,))
    assert a.dtype == em.int64 and set(a.tolist()) == set(range(5))
    b = em.randint(-3, 3, size=(2, 3), dtype=em.int8)
    assert b.dtype == em.int8 and b.shape == (2, 3)
    with pytest.raises(ValueError, match="from"):
        em.randint(5, 5, (2,))
    with pytest.raises(ValueError, match="fit"):
        em.randint(0, 300, (2,), dtype=em.uint8)


def test_normal_forms():
    g = em.Generator().manual_seed(3)
    x = em.normal(2.0, 3.0, size=(40000,), generator=g).numpy().astype(np.float64)
    assert abs(x.mean() - 2.0) < 5 * 3 / math.sqrt(x.size)
    assert abs(x.std() - 3.0) < 0.05
    m = em.tensor([[0.0], [100.0]], dtype=em.float64)
    y = em.normal(m, em.tensor([1.0, 0.0, 2.0], dtype=em.float64), generator=g)
    assert y.shape == (2, 3) and y.dtype == em.float64
    assert y.tolist()[1][1] == 100.0 and y.tolist()[0][1] == 0.0
    assert em.normal(em.zeros(3)).shape == (3,)
    with pytest.raises(ValueError, match="std"):
        em.normal(0.0, -1.0, size=(2,))
    with pytest.raises(TypeError, match="size"):
        em.normal(0.0, 1.0)


def test_normal_has_zero_gradient_like_torch():
    mean = em.zeros(3, requires_grad=True)
    out = em.normal(mean, 1.0)
    assert out.requires_grad
    out.sum().backward()
    assert mean.grad.tolist() == [0.0, 0.0, 0.0]


def test_bernoulli_statistics():
    g = em.Generator().manual_seed(11)
    p = em.tensor([0.0, 0.1, 0.5, 0.9, 1.0], dtype=em.float64).expand(20000, 5)
    s = em.bernoulli(p, generator=g)
    assert s.dtype == em.float64 and set(np.unique(s.numpy())) <= {0.0, 1.0}
    means = s.numpy().mean(axis=0)
    for pi, mi in zip([0.0, 0.1, 0.5, 0.9, 1.0], means):
        assert abs(mi - pi) <= 5 * math.sqrt(pi * (1 - pi) / 20000) + 1e-12
    assert em.bernoulli(em.zeros(3), 1.0).tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        em.bernoulli(em.tensor([1.5]))


def test_multinomial_statistics_and_errors():
    g = em.Generator().manual_seed(4)
    w = em.tensor([1.0, 2.0, 7.0])
    s = em.multinomial(w, 30000, replacement=True, generator=g)
    assert s.dtype == em.int64 and s.shape == (30000,)
    freq = np.bincount(s.numpy(), minlength=3) / 30000
    for f, p in zip(freq, [0.1, 0.2, 0.7]):
        assert abs(f - p) < 5 * math.sqrt(p * (1 - p) / 30000)
    rows = em.multinomial(em.tensor([[0.0, 1.0, 1.0, 0.0], [5.0, 0.0, 0.0, 1.0]]), 2,
                          generator=g).tolist()
    assert sorted(rows[0]) == [1, 2] and sorted(rows[1]) == [0, 3]
    # without replacement: first draw frequencies follow the weights
    first = [em.multinomial(w, 3, generator=g).tolist()[0] for _ in range(3000)]
    assert abs(np.mean(np.array(first) == 2) - 0.7) < 5 * math.sqrt(0.21 / 3000)
    with pytest.raises(ValueError, match="without replacement"):
        em.multinomial(w, 4)
    with pytest.raises(ValueError, match="element < 0"):
        em.multinomial(em.tensor([1.0, -1.0]), 1)
    with pytest.raises(ValueError, match="non-zero"):
        em.multinomial(em.tensor([1.0, 0.0, 0.0]), 2)


def test_randperm_is_permutation():
    g = em.Generator().manual_seed(9)
    for n in (0, 1, 17, 1000):
        p = em.randperm(n, generator=g)
        assert p.dtype == em.int64 and sorted(p.tolist()) == list(range(n))
    with pytest.raises(ValueError, match="randperm"):
        em.randperm(-1)


# ------------------------------------------------------------------ in-place fills
def test_inplace_fills():
    g = em.Generator().manual_seed(0)
    x = em.empty(10000)
    assert x.uniform_(-2, 3, generator=g) is x
    v = x.numpy()
    assert v.min() >= -2 and v.max() < 3 and abs(v.mean() - 0.5) < 5 * 5 / math.sqrt(12e4)
    x.normal_(1.0, 0.5, generator=g)
    assert abs(x.numpy().mean() - 1.0) < 5 * 0.5 / 100 and abs(x.numpy().std() - 0.5) < 0.02
    x.bernoulli_(0.25, generator=g)
    assert set(np.unique(x.numpy())) == {0.0, 1.0}
    x.exponential_(2.0, generator=g)
    assert x.numpy().min() >= 0 and abs(x.numpy().mean() - 0.5) < 5 * 0.5 / 100
    x.random_(3, 6, generator=g)
    assert set(np.unique(x.numpy())) == {3.0, 4.0, 5.0}
    i = em.zeros(100, dtype=em.uint8).random_(generator=g)
    assert i.numpy().max() > 100


def test_inplace_fill_writes_through_views_and_checks_leaves():
    base = em.zeros(4, 4)
    base.t().uniform_(5, 6)
    assert base.numpy().min() >= 5
    w = em.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w.normal_()
    with em.no_grad():
        w.normal_()
    assert w.requires_grad and w.is_leaf
    with pytest.raises(TypeError, match="floating"):
        em.zeros(2, dtype=em.int64).uniform_()


def test_inplace_fill_same_seed_same_values():
    a = em.empty(5).uniform_(generator=em.Generator().manual_seed(1))
    b = em.empty(5).uniform_(generator=em.Generator().manual_seed(1))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
