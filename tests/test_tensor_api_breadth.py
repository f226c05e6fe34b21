"""Tensor and top-level methods PyTorch programs use (issue 17, item 2): new_*, type(),
legacy constructors, size=, isclose/allclose, predicates, value-dependent composites and
their gradients, checked against NumPy and (where installed) PyTorch. The differentiable
composites also have OpInfo entries (tests/opinfo/breadth.py)."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.autograd import forward_ad as fwad


def _t(a, **kw):
    return em.from_numpy(np.array(a, dtype=np.float64)).requires_grad_(kw.get("grad", False))


# ------------------------------------------------------------------ regression: maximum JVP
def test_maximum_jvp_keeps_a_0d_float64_tangent_exact():
    # The tie weight was built in float32; a 0-d float64 tangent times a dimensioned float32
    # weight computed in float32 and lost 8 digits.
    a, b = np.array(4.28499258022538), np.array([-0.767574608302851, 4.407366844413811])
    ta = np.array(0.33043707618338714)
    for fn in (em.maximum, em.minimum):
        with fwad.dual_level():
            out = fn(fwad.make_dual(em.from_numpy(a.copy()), em.from_numpy(ta.copy())),
                     em.from_numpy(b.copy()))
            t = fwad.unpack_dual(out).tangent
        assert t.dtype == em.float64
        want = np.where((a > b) if fn is em.maximum else (a < b), ta, 0.0)
        np.testing.assert_array_equal(t.numpy(), want)


# ------------------------------------------------------------------ new_* and type()
def test_new_factories_inherit_dtype_and_device():
    w = em.zeros(2, 3, dtype=em.float64)
    for t in (w.new_zeros(4, 5), w.new_ones((4, 5)), w.new_empty(size=(4, 5)),
              w.new_full((4, 5), 7)):
        assert t.dtype == em.float64 and t.shape == (4, 5) and t.device == w.device
    np.testing.assert_array_equal(w.new_zeros(3).numpy(), np.zeros(3))
    np.testing.assert_array_equal(w.new_ones(2).numpy(), np.ones(2))
    np.testing.assert_array_equal(w.new_full((2,), 7).numpy(), [7.0, 7.0])
    assert w.new_zeros(2, dtype=em.int64).dtype == em.int64
    assert w.new_ones(2, requires_grad=True).requires_grad
    src = em.tensor([1, 2], dtype=em.int32)
    nt = w.new_tensor(src)
    assert nt.dtype == em.float64 and nt.tolist() == [1.0, 2.0]
    assert w.new_tensor([[1, 2]]).shape == (1, 2)
    with pytest.raises(TypeError, match="both positionally"):
        w.new_zeros(2, size=(3,))


def test_type_names_and_casts():
    x = em.tensor([1.5, 2.5])
    assert x.type() == "ember.FloatTensor"
    assert em.tensor([1]).type() == "ember.LongTensor"
    assert x.type(em.int64).dtype == em.int64
    assert x.type("torch.DoubleTensor").dtype == em.float64
    assert x.type(em.IntTensor).dtype == em.int32
    assert x.type(em.float64).tolist() == [1.5, 2.5]


def test_legacy_constructors():
    assert em.Tensor(2, 3).shape == (2, 3) and em.Tensor(2, 3).dtype == em.float32
    assert em.Tensor([1, 2]).tolist() == [1.0, 2.0] and em.Tensor([1, 2]).dtype == em.float32
    assert em.Tensor((2, 3)).tolist() == [2.0, 3.0]   # a tuple is data, as in PyTorch
    assert em.Tensor().shape == (0,)
    assert em.Tensor(em.Size([2, 4])).shape == (2, 4)
    assert em.LongTensor([1, 2]).dtype == em.int64
    assert em.FloatTensor(3).shape == (3,)
    assert em.ByteTensor([1]).dtype == em.uint8 and em.BoolTensor([True]).dtype == em.bool
    assert em.DoubleTensor(np.arange(3)).tolist() == [0.0, 1.0, 2.0]
    assert isinstance(em.zeros(2), em.FloatTensor)
    assert not isinstance(em.zeros(2), em.LongTensor)
    assert isinstance(em.zeros(2, dtype=em.int64), em.LongTensor)
    p = em.nn.Parameter(em.ones(2))   # subclasses still construct themselves
    assert isinstance(p, em.nn.Parameter) and p.requires_grad
    with pytest.raises(TypeError, match="dtype"):
        em.LongTensor(em.zeros(2))
    with pytest.raises(TypeError, match="integer sizes"):
        em.Tensor(2, "3")
    with pytest.raises(TypeError, match="must be a sequence"):
        em.Tensor(3.5)                # PyTorch: new(): data must be a sequence (got float)


@pytest.mark.parametrize("fn", [em.zeros, em.ones, em.empty, em.rand, em.randn])
def test_size_keyword_of_factories(fn):
    assert fn(size=(2, 3)).shape == (2, 3)
    assert fn(size=[4]).shape == (4,)
    with pytest.raises(TypeError, match="both positionally"):
        fn(2, size=(3,))


def test_predicates():
    x = em.ones(2, 3)
    assert em.is_tensor(x) and not em.is_tensor(np.ones(2))
    assert em.numel(x) == 6
    assert em.is_floating_point(x) and not em.is_floating_point(em.tensor([1]))
    assert not em.is_complex(x) and not x.is_complex()
    assert x.is_signed() and not em.tensor([1], dtype=em.uint8).is_signed()
    assert em.is_nonzero(em.tensor([1.0]))
    with pytest.raises(RuntimeError, match="ambiguous"):
        em.is_nonzero(x)


def test_pin_memory_is_a_truthful_noop():
    x = em.ones(3)
    assert x.pin_memory() is x and not x.is_pinned()


# ------------------------------------------------------------------ isclose / allclose
def test_isclose_matches_numpy_including_nonfinite():
    a = np.array([1.0, 1e10, np.inf, -np.inf, np.nan, 0.0, 1.0, np.inf])
    b = np.array([1.0 + 1e-9, 1.00001e10, np.inf, np.inf, np.nan, 1e-9, 1.1, np.nan])
    for equal_nan in (False, True):
        got = em.isclose(em.from_numpy(a), em.from_numpy(b), equal_nan=equal_nan).numpy()
        np.testing.assert_array_equal(got, np.isclose(a, b, equal_nan=equal_nan))
    assert em.allclose(em.tensor([1.0, 2.0]), em.tensor([1.0, 2.0 + 1e-7]))
    assert not em.allclose(em.tensor([1.0]), em.tensor([1.1]))
    assert em.tensor([1, 2]).allclose(em.tensor([1, 2]))
    assert em.isclose(em.tensor([1, 5]), em.tensor([1, 6]), rtol=0, atol=1).all()
    with pytest.raises(TypeError, match="same dtype"):
        em.isclose(em.ones(1), em.ones(1, dtype=em.float64))


# ------------------------------------------------------------------ elementwise composites
def test_inverse_hyperbolics_accuracy_and_gradient_at_zero():
    x = np.array([0.0, 1e-10, -1e-8, 0.5, -3.0, 1e5, -1e20, 1e300])
    np.testing.assert_allclose(em.asinh(_t(x)).numpy(), np.arcsinh(x), rtol=1e-14)
    y = np.array([1.0, 1.0 + 1e-12, 1.5, 10.0, 1e20, 1e300])
    np.testing.assert_allclose(em.acosh(_t(y)).numpy(), np.arccosh(y), rtol=1e-12)
    z = np.array([0.0, 1e-12, -0.5, 0.99])
    np.testing.assert_allclose(em.atanh(_t(z)).numpy(), np.arctanh(z), rtol=1e-14)
    xs = _t([0.0], grad=True)
    em.asinh(xs).sum().backward()
    assert xs.grad.tolist() == [1.0]
    x32 = em.tensor([3e30, -2.0])      # float32: x*x would overflow
    np.testing.assert_allclose(em.asinh(x32).numpy(), np.arcsinh(np.float32([3e30, -2.0])),
                               rtol=1e-6)
    assert em.arcsinh is em.asinh and em.tensor([2.0]).arccosh().tolist()[0] > 0
    assert em.asinh(em.tensor([1])).dtype == em.float32


def test_logaddexp_infinities():
    inf = float("inf")
    a, b = [0.0, -inf, inf, -inf, 1000.0], [0.0, -inf, inf, 3.0, 1000.0]
    got = em.logaddexp(em.tensor(a, dtype=em.float64), em.tensor(b, dtype=em.float64))
    np.testing.assert_allclose(got.numpy(), np.logaddexp(a, b))
    got2 = em.logaddexp2(em.tensor(a, dtype=em.float64), em.tensor(b, dtype=em.float64))
    np.testing.assert_allclose(got2.numpy(), np.logaddexp2(a, b))


def test_heaviside_deg2rad_float_power():
    x = em.tensor([-1.5, 0.0, 2.0])
    assert em.heaviside(x, em.tensor([0.5])).tolist() == [0.0, 0.5, 1.0]
    with pytest.raises(TypeError, match="same dtype"):
        em.heaviside(x, em.tensor([1]))
    np.testing.assert_allclose(em.deg2rad(em.tensor([180])).numpy(), [np.pi], rtol=1e-7)
    np.testing.assert_allclose(em.rad2deg(em.tensor([np.pi])).numpy(), [180.0], rtol=1e-6)
    fp = em.float_power(em.tensor([2, 3]), 2)
    assert fp.dtype == em.float64 and fp.tolist() == [4.0, 9.0]


def test_addc_inplace_and_integer_addcdiv():
    x = em.ones(3)
    x.addcmul_(em.tensor([1.0, 2.0, 3.0]), em.tensor([2.0, 2.0, 2.0]), value=0.5)
    assert x.tolist() == [2.0, 3.0, 4.0]
    x.addcdiv_(em.tensor([2.0, 2.0, 2.0]), em.tensor([4.0, 1.0, 2.0]))
    assert x.tolist() == [2.5, 5.0, 5.0]
    with pytest.raises(TypeError, match="integer division"):
        em.addcdiv(em.ones(2), em.tensor([1, 2]), em.tensor([1, 2]))


def test_trace_and_renorm_errors():
    with pytest.raises(ValueError, match="2-D"):
        em.trace(em.ones(3))
    with pytest.raises(ValueError, match="at least 2"):
        em.renorm(em.ones(3), 2, 0, 1.0)
    assert em.trace(em.tensor([[1, 2], [3, 4]])).item() == 5


# ------------------------------------------------------------------ shape composites
def test_splits_match_numpy():
    a = np.arange(24.0).reshape(2, 3, 4)
    t = em.from_numpy(a)
    for em_fn, np_fn, arg in ((em.hsplit, np.hsplit, 3), (em.vsplit, np.vsplit, 2),
                              (em.dsplit, np.dsplit, 2), (em.hsplit, np.hsplit, [1, 2]),
                              (em.dsplit, np.dsplit, [1, 3])):
        got, want = em_fn(t, arg), np_fn(a, arg)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w)
    assert [p.shape[0] for p in em.hsplit(em.arange(6), 3)] == [2, 2, 2]
    with pytest.raises(ValueError, match="not divisible"):
        em.hsplit(t, 2)
    with pytest.raises(ValueError, match="at least 3"):
        em.dsplit(em.ones(2, 2), 2)
    parts = em.split_with_sizes(t, [1, 3], dim=2)
    assert [tuple(p.shape) for p in parts] == [(2, 3, 1), (2, 3, 3)]
    with pytest.raises(ValueError, match="summing exactly"):
        t.split_with_sizes([1, 2], dim=2)


def test_rot90_and_diag_errors():
    with pytest.raises(ValueError, match="different"):
        em.rot90(em.ones(2, 2), 1, (0, 0))
    with pytest.raises(ValueError, match="1-D or 2-D"):
        em.diag(em.ones(2, 2, 2))
    with pytest.raises(ValueError, match="size equal"):
        em.diagonal_scatter(em.zeros(3, 3), em.ones(2))
    with pytest.raises(IndexError, match="out of range"):
        em.select_scatter(em.zeros(3, 3), em.ones(3), 0, 3)


# ------------------------------------------------------------------ value-dependent ops
def test_unique_and_unique_consecutive():
    a = np.array([[3, 1, 3], [2, 1, 3]])
    vals, inv, counts = em.unique(em.from_numpy(a), return_inverse=True, return_counts=True)
    wv, wi, wc = np.unique(a, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(vals.numpy(), wv)
    np.testing.assert_array_equal(inv.numpy(), wi.reshape(a.shape))
    np.testing.assert_array_equal(counts.numpy(), wc)
    rows = em.unique(em.tensor([[1, 2], [0, 5], [1, 2]]), dim=0)
    assert rows.tolist() == [[0, 5], [1, 2]]
    v, i, c = em.unique_consecutive(em.tensor([1, 1, 2, 2, 3, 1, 1]), return_inverse=True,
                                    return_counts=True)
    assert v.tolist() == [1, 2, 3, 1] and c.tolist() == [2, 2, 1, 2]
    assert i.tolist() == [0, 0, 1, 1, 2, 3, 3]
    cols = em.unique_consecutive(em.tensor([[1, 1, 2], [3, 3, 4]]), dim=1)
    assert cols.tolist() == [[1, 2], [3, 4]]


def test_bincount_and_histc():
    x = np.array([0, 1, 1, 4])
    np.testing.assert_array_equal(em.bincount(em.from_numpy(x)).numpy(), np.bincount(x))
    assert em.bincount(em.from_numpy(x), minlength=7).shape == (7,)
    w = em.tensor([0.5, 1.0, 1.0, 2.0])
    got = em.bincount(em.from_numpy(x), weights=w)
    assert got.dtype == em.float32 and got.tolist() == [0.5, 2.0, 0.0, 0.0, 2.0]
    assert em.bincount(em.from_numpy(x), weights=em.tensor([1, 2, 3, 4])).dtype == em.float64
    with pytest.raises(ValueError, match="non-negative"):
        em.bincount(em.tensor([-1, 2]))
    with pytest.raises(ValueError, match="1-D"):
        em.bincount(em.tensor([[1]]))
    d = np.random.default_rng(0).standard_normal(1000)
    np.testing.assert_array_equal(em.histc(em.from_numpy(d), bins=7, min=-1, max=1).numpy(),
                                  np.histogram(d, 7, (-1, 1))[0])
    np.testing.assert_array_equal(em.histc(em.from_numpy(d), bins=5).numpy(),
                                  np.histogram(d, 5, (d.min(), d.max()))[0])
    with pytest.raises(TypeError, match="floating point"):
        em.histc(em.tensor([1, 2]))


def test_cummax_cummin_ties_and_nan_follow_torch():
    torch = pytest.importorskip("torch")
    nan = float("nan")
    for vals in ([1.0, 3.0, 3.0, 2.0, nan, 5.0, nan], [3.0, 1.0, 1.0, 2.0, 0.5]):
        for name in ("cummax", "cummin"):
            got = getattr(em, name)(em.tensor(vals), 0)
            want = getattr(torch, name)(torch.tensor(vals), 0)
            np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
            np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())


def test_mode_follows_torch_and_its_gradient_reaches_the_index():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(1).integers(0, 4, (5, 7)).astype(np.float64)
    for dim, keep in ((1, False), (0, True)):
        got, want = em.mode(em.from_numpy(a), dim, keep), torch.mode(torch.from_numpy(a), dim,
                                                                    keep)
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    x = _t(a, grad=True)
    v, idx = em.mode(x, 1)
    v.sum().backward()
    want = np.zeros_like(a)
    want[np.arange(5), idx.numpy()] = 1
    np.testing.assert_array_equal(x.grad.numpy(), want)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_values_and_grads_match_torch(reduce, include_self):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    a = rng.integers(-2, 3, (4, 3)).astype(np.float64)   # small ints: ties and zeros
    s = rng.integers(-2, 3, (3, 3)).astype(np.float64)
    idx = np.array([[0, 2, 1], [0, 2, 1], [1, 2, 1]])
    ea, es = _t(a, grad=True), _t(s, grad=True)
    got = em.scatter_reduce(ea, 0, em.from_numpy(idx), es, reduce, include_self=include_self)
    ta = torch.tensor(a, requires_grad=True)
    ts = torch.tensor(s, requires_grad=True)
    want = torch.scatter_reduce(ta, 0, torch.from_numpy(idx), ts, reduce,
                                include_self=include_self)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    c = rng.standard_normal(a.shape)
    (got * em.from_numpy(c)).sum().backward()
    (want * torch.from_numpy(c)).sum().backward()
    np.testing.assert_allclose(ea.grad.numpy(), ta.grad.numpy(), rtol=1e-12, atol=1e-12)
    if include_self or reduce not in ("amax", "amin"):
        np.testing.assert_allclose(es.grad.numpy(), ts.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_scatter_reduce_amax_without_self_splits_gradient_among_src_ties_only():
    # Deliberate difference from PyTorch (see scatter_reduce's docstring): the excluded
    # input value 5 equals the result but takes no part, so each of the two tied src
    # elements gets half of the gradient and the shares sum to 1.
    x = _t([5.0, 0.0], grad=True)
    s = _t([5.0, 5.0, 1.0], grad=True)
    out = em.scatter_reduce(x, 0, em.tensor([0, 0, 1]), s, "amax", include_self=False)
    assert out.tolist() == [5.0, 1.0]
    out.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0]
    assert s.grad.tolist() == [0.5, 0.5, 1.0]


def test_scatter_reduce_inplace_and_errors():
    x = em.zeros(3)
    x.scatter_reduce_(0, em.tensor([0, 0]), em.tensor([2.0, 5.0]), "amax", include_self=False)
    assert x.tolist() == [5.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="reduce argument"):
        em.scatter_reduce(x, 0, em.tensor([0]), em.ones(1), "max")


def test_value_ops_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 4))
    cases = [("renorm", (2, 0, 1.0)), ("renorm", (1, 1, 0.5)), ("nansum", ()),
             ("nanmean", (1,)), ("diag", ()), ("trace", ()), ("rot90", (3, (1, 0)))]
    for name, args in cases:
        got = getattr(em, name)(em.from_numpy(a), *args).numpy()
        want = getattr(torch, name)(torch.from_numpy(a), *args).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=name)
    b = rng.standard_normal((2, 3))
    np.testing.assert_array_equal(em.diag_embed(em.from_numpy(b), -1, 0, 2).numpy(),
                                  torch.diag_embed(torch.from_numpy(b), -1, 0, 2).numpy())
