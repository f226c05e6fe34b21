"""Behaviour of the reduction family beyond the OpInfo table: dtype rules, return types,
errors, tie gradients, numerical stability, gradients at zeros, zero-size inputs."""
import math

import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError, ShapeError
from ember.ops.registry import REGISTRY


def t64(a, grad=False):
    return em.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def grad_of(f, x):
    x = t64(x, grad=True)
    f(x).backward()
    return x.grad.numpy()


# ------------------------------------------------------------------ dtype rules
@pytest.mark.parametrize("dt", [em.int32, em.int64, em.uint8, em.bool])
def test_sum_prod_cumsum_of_ints_and_bools_give_int64(dt):
    x = em.tensor([[1, 0, 1], [1, 1, 1]]).to(dt)
    assert x.sum().dtype == em.int64 and x.sum(1).dtype == em.int64
    assert x.prod(1).dtype == em.int64 and x.cumsum(1).dtype == em.int64
    assert x.sum().item() == 5 and x.prod(1).tolist() == [0, 1]


def test_dtype_argument():
    x = em.tensor([1, 2, 3], dtype=em.int32)
    assert x.sum(dtype=em.float64).dtype == em.float64
    assert x.mean(dtype=em.float64).item() == 2.0
    assert x.cumsum(0, dtype=em.float32).dtype == em.float32
    assert em.softmax(x, 0, dtype=em.float64).dtype == em.float64


def test_mean_of_integers_needs_dtype():
    with pytest.raises(DTypeError, match=r"mean\(\).*int64"):
        em.tensor([1, 2, 3]).mean()
    with pytest.raises(DTypeError, match="var"):
        em.tensor([1, 2, 3]).var()
    with pytest.raises(DTypeError, match="softmax"):
        em.tensor([1, 2, 3]).softmax(0)


def test_index_and_logical_output_dtypes():
    x = em.tensor([[1., 0.], [3., 4.]])
    assert x.argmax().dtype == em.int64 and x.argmin(1).dtype == em.int64
    assert x.max(1).indices.dtype == em.int64 and x.argsort().dtype == em.int64
    assert x.all().dtype == em.bool and x.any(1).dtype == em.bool
    assert x.all().item() is False and x.any(1).tolist() == [True, True]
    assert em.tensor([1, 2], dtype=em.uint8).all().dtype == em.uint8   # like PyTorch
    assert x.count_nonzero().dtype == em.int64 and x.count_nonzero(0).tolist() == [2, 1]
    assert em.tensor([0., float("nan")]).count_nonzero().item() == 1


def test_max_keeps_integer_dtype():
    x = em.tensor([[3, 7], [9, 1]])
    assert x.max().dtype == em.int64 and x.max().item() == 9
    r = x.min(0)
    assert r.values.tolist() == [3, 1] and r.values.dtype == em.int64


# ------------------------------------------------------------------ return types
def test_namedtuple_results():
    x = em.tensor([[1., 5., 2.], [7., 0., 3.]])
    r = x.max(dim=1)
    assert type(r).__name__ == "max" and r._fields == ("values", "indices")
    assert r.values.tolist() == [5., 7.] and r.indices.tolist() == [1, 0]
    values, indices = em.min(x, 1, keepdim=True)
    assert values.shape == (2, 1) and indices.tolist() == [[0], [1]]
    s = x.sort(descending=True)
    assert s.values.tolist() == [[5., 2., 1.], [7., 3., 0.]] and s.indices.tolist() == \
        [[1, 2, 0], [0, 2, 1]]
    k = x.topk(2, dim=1, largest=False)
    assert type(k).__name__ == "topk" and k.values.tolist() == [[1., 2.], [0., 3.]]
    assert x.kthvalue(2, 1).values.tolist() == [2., 3.] and x.kthvalue(2, 1).indices.tolist() \
        == [2, 2]
    assert x.median(1).values.tolist() == [2., 3.] and x.median().item() == 2.0
    mm = x.aminmax()
    assert mm.min.item() == 0. and mm.max.item() == 7.


def test_max_on_0d_and_dim_keyword():
    x = em.tensor(3.0)
    r = x.max(0)
    assert r.values.shape == () and r.values.item() == 3.0 and r.indices.item() == 0
    assert em.tensor([[1., 2.]]).max(dim=-1, keepdim=True).values.shape == (1, 1)


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("fn,name", [
    (lambda x: x.sum(2), "sum"), (lambda x: x.mean(-3), "mean"), (lambda x: x.amax(5), "amax"),
    (lambda x: x.prod(2), "prod"), (lambda x: x.max(2), "max"), (lambda x: x.argmax(3),
                                                                   "argmax"),
    (lambda x: x.var(2), "var"), (lambda x: x.cumsum(2), "cumsum"), (lambda x: x.sort(4), "sort"),
    (lambda x: x.softmax(2), "softmax"), (lambda x: x.logsumexp(2), "logsumexp"),
    (lambda x: x.all(2), "all"), (lambda x: x.norm(dim=2), "norm")])
def test_out_of_range_dim_names_the_op(fn, name):
    with pytest.raises(IndexError, match=rf"{name}.*range"):
        fn(em.ones(2, 3))


def test_duplicate_dims():
    with pytest.raises(ShapeError, match="multiple"):
        em.ones(2, 3).amax((1, -1))


def test_empty_reductions_without_identity_raise():
    e = em.ones(0, 3)
    with pytest.raises(ShapeError, match=r"amax\(\).*dim 0"):
        e.amax(0)
    with pytest.raises(ShapeError, match=r"max\(\).*numel\(\) == 0"):
        e.max()
    with pytest.raises(ShapeError, match=r"argmax\(\)"):
        e.argmax()
    with pytest.raises(ShapeError, match=r"argmin\(\).*dim 0"):
        e.argmin(0)
    assert e.amax(1).shape == (0,) and e.max(1).values.shape == (0,)


def test_zero_size_identities():
    e = em.ones(0, 3)
    assert e.sum().item() == 0 and e.prod().item() == 1
    assert e.sum(0).tolist() == [0., 0., 0.] and e.prod(0).tolist() == [1., 1., 1.]
    assert all(math.isnan(v) for v in e.mean(0).tolist()) and math.isnan(e.mean().item())
    assert e.logsumexp(0).tolist() == [-math.inf] * 3
    assert e.all().item() is True and e.any().item() is False
    assert e.cumsum(0).shape == (0, 3) and e.sort(0).values.shape == (0, 3)


def test_selection_errors():
    x = em.ones(2, 3)
    with pytest.raises(IndexError, match="topk"):
        x.topk(4)
    with pytest.raises(IndexError, match="kthvalue"):
        x.kthvalue(0)
    with pytest.raises(DTypeError, match="int64"):
        em.take_along_dim(x, em.tensor([[0]], dtype=em.int32), 1)
    with pytest.raises(IndexError, match="out of range"):
        em.take_along_dim(x, em.tensor([[3]]), 1)
    with pytest.raises(ValueError, match="'fro', 'nuc' or a number"):
        x.norm(p="bad")
    assert float(x.norm(p="nuc")) == pytest.approx(6 ** 0.5)   # rank 1: the only σ is √6
    with pytest.raises(TypeError, match="correction"):
        x.var(unbiased=True, correction=0)


# ------------------------------------------------------------------ gradients at ties
def test_amax_splits_gradient_equally_among_ties():
    np.testing.assert_allclose(grad_of(lambda x: x.amax(), [1., 3., 3., 2.]), [0, .5, .5, 0])
    np.testing.assert_allclose(grad_of(lambda x: x.max(), [3., 3., 3.]), [1 / 3] * 3)
    g = grad_of(lambda x: (x.amin(1) * t64([1., 10.])).sum(), [[0., 0., 4.], [2., 5., 2.]])
    np.testing.assert_allclose(g, [[.5, .5, 0], [5., 0, 5.]])
    np.testing.assert_allclose(grad_of(lambda x: x.norm(p=math.inf), [-2., 1., 2.]),
                               [-.5, 0, .5])


def test_amax_jvp_averages_tangents_of_ties():
    from ember.autograd import forward_ad as fwad
    with fwad.dual_level():
        x = fwad.make_dual(t64([1., 3., 3.]), t64([5., 2., 4.]))
        assert fwad.unpack_dual(x.amax()).tangent.item() == 3.0


def test_max_with_dim_sends_gradient_to_the_chosen_index():
    g = grad_of(lambda x: x.max(0).values.sum(), [[3., 1.], [3., 2.]])
    np.testing.assert_allclose(g, [[1., 0.], [0., 1.]])   # first maximum, like PyTorch


@pytest.mark.parametrize("shape,dim", [((64, 4, 300), 1), ((9000, 3), 1), ((5, 600, 7), 2),
                                       ((16, 2048), 0)])
def test_argmax_short_axis_kernel_matches_numpy(shape, dim):
    # big enough for the slice-by-slice kernel; integers give many ties (first index wins)
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, shape).astype(np.float32)
    for a in (x, x.astype(np.int32), x > 0):
        for fn in ("argmax", "argmin"):
            got = getattr(em.tensor(a), fn)(dim, keepdim=True).numpy()
            np.testing.assert_array_equal(got, np.expand_dims(getattr(np, fn)(a, dim), dim))
    x.flat[rng.integers(0, x.size, 40)] = np.nan        # the first NaN wins, like PyTorch
    for fn in ("argmax", "argmin"):
        np.testing.assert_array_equal(getattr(em.tensor(x), fn)(dim).numpy(),
                                      getattr(np, fn)(x, dim))


def test_max_dim_gradient_of_a_short_axis_is_exact():
    # the one-index-per-slice scatter: zeros elsewhere even where the incoming gradient is inf
    rng = np.random.default_rng(1)
    x = rng.integers(-2, 3, (64, 4, 300)).astype(np.float32)
    w = rng.standard_normal((64, 300)).astype(np.float32)
    w[0, :2] = [np.inf, np.nan]
    xt = em.tensor(x, requires_grad=True)
    vals = xt.max(1).values                 # a flat gather (take_along_dim's large-input path)
    np.testing.assert_array_equal(vals.detach().numpy(), x.max(1))
    (vals * em.tensor(w)).sum().backward()
    want = np.zeros_like(x)
    np.put_along_axis(want, x.argmax(1)[:, None], w[:, None], 1)
    got = xt.grad.numpy()
    np.testing.assert_array_equal(got, want)
    assert not np.signbit(got[want == 0]).any()


def test_sort_and_topk_gradients_route_back():
    g = grad_of(lambda x: (x.sort().values * t64([1., 2., 3.])).sum(), [2., 0., 1.])
    np.testing.assert_allclose(g, [3., 1., 2.])
    g = grad_of(lambda x: x.topk(2).values.sum(), [5., 0., 9., 1.])
    np.testing.assert_allclose(g, [1., 0., 1., 0.])


# ------------------------------------------------------------------ numerics
def test_logsumexp_and_softmax_are_stable_for_large_inputs():
    x = em.tensor([[1000., 1000.], [-1000., -1000.]])
    np.testing.assert_allclose(x.logsumexp(1).numpy(), [1000 + math.log(2), -1000 + math.log(2)],
                               rtol=1e-6)
    np.testing.assert_allclose(x.softmax(1).numpy(), [[.5, .5], [.5, .5]])
    np.testing.assert_allclose(x.log_softmax(1).numpy(), np.full((2, 2), -math.log(2)),
                               rtol=1e-6)
    y = t64([1000., 999., 1001.], grad=True)
    y.logsumexp(0).backward()
    assert np.isfinite(y.grad.numpy()).all()
    np.testing.assert_allclose(y.grad.numpy().sum(), 1.0)


def test_logsumexp_of_infinities():
    inf = math.inf
    r = em.tensor([[-inf, -inf], [inf, 1.], [-inf, 0.]]).logsumexp(1).tolist()
    assert r[0] == -inf and r[1] == inf and r[2] == 0.0


def test_prod_gradient_with_zeros():
    np.testing.assert_allclose(grad_of(lambda x: x.prod(), [2., 0., 3.]), [0., 6., 0.])
    np.testing.assert_allclose(grad_of(lambda x: x.prod(), [2., 0., 0.]), [0., 0., 0.])
    np.testing.assert_allclose(grad_of(lambda x: x.prod(), [2., 4., 3.]), [12., 6., 8.])
    g = grad_of(lambda x: x.prod(1).sum(), [[0., 5., 2.], [1., 2., 3.], [0., 0., 1.]])
    np.testing.assert_allclose(g, [[10., 0., 0.], [6., 3., 2.], [0., 0., 0.]])


def test_norm_gradient_at_zero_is_zero():
    for p in (2, "fro", 3, 1):
        g = grad_of(lambda x: x.norm(p=p), [0., 0., 0.])
        assert not np.isnan(g).any() and (g == 0).all(), p
    g = grad_of(lambda x: x.norm(dim=1).sum(), [[0., 0.], [3., 4.]])
    np.testing.assert_allclose(g, [[0., 0.], [.6, .8]])


def test_var_corrections_and_legacy_unbiased():
    x = em.tensor([1., 2., 3., 4.])
    assert x.var().item() == pytest.approx(5 / 3)
    assert x.var(correction=0).item() == pytest.approx(1.25)
    assert x.var(0, False).item() == pytest.approx(1.25)
    assert x.var(unbiased=False).item() == pytest.approx(1.25)
    assert x.std(correction=2).item() == pytest.approx(math.sqrt(2.5))
    assert math.isnan(em.tensor([1.]).var().item())
    v, m = em.var_mean(x.reshape(2, 2), 1, keepdim=True)
    assert v.shape == (2, 1) and m.tolist() == [[1.5], [3.5]]


def test_sort_nan_and_stability():
    nan = math.nan
    x = em.tensor([1., nan, 3., 1., 2.])
    asc = x.sort(stable=True)
    assert asc.indices.tolist() == [0, 3, 4, 2, 1]
    desc = x.sort(descending=True, stable=True)
    assert desc.indices.tolist() == [1, 2, 4, 0, 3]
    assert em.tensor([2, 1, 2, 1]).argsort(stable=True).tolist() == [1, 3, 0, 2]
    assert em.tensor([True, False, True]).sort().values.tolist() == [False, True, True]


def test_topk_partition_path_matches_full_sort():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 200))
    x = em.tensor(a)
    for largest in (True, False):
        r = x.topk(5, largest=largest)
        order = np.argsort(-a if largest else a, axis=1)[:, :5]
        np.testing.assert_array_equal(r.indices.numpy(), order)
        np.testing.assert_array_equal(r.values.numpy(), np.take_along_axis(a, order, 1))


def test_cumsum_backward_is_reverse_cumsum_and_inplace():
    np.testing.assert_allclose(grad_of(lambda x: x.cumsum(0).sum(), [1., 2., 3.]), [3., 2., 1.])
    y = em.tensor([1., 2., 3.])
    y.cumsum_(0)
    assert y.tolist() == [1., 3., 6.]


def test_softmax_double_backward():
    x = t64([[0.1, 0.5, -0.3]], grad=True)
    (g,) = em.autograd.grad((x.softmax(1) * t64([[1., 0., 0.]])).sum(), [x], create_graph=True)
    (gg,) = em.autograd.grad(g.sum(), [x])
    assert gg.shape == (1, 3) and np.isfinite(gg.numpy()).all()


# ------------------------------------------------------------------ registry hygiene
SHAPE_CASES = [("sum", {"dim": (1,), "keepdim": True, "dtype": None}),
               ("prod", {"dim": (0, 2), "keepdim": False, "dtype": None}),
               ("amax", {"dim": (2,), "keepdim": False}), ("amin", {"dim": (0, 1, 2),
                                                                   "keepdim": True}),
               ("argmax", {"dim": None, "keepdim": True}), ("argmin", {"dim": 1,
                                                                       "keepdim": False}),
               ("all", {"dim": (1,), "keepdim": False}), ("any", {"dim": (0, 2),
                                                                   "keepdim": True}),
               ("cumsum", {"dim": 1, "reverse": True, "dtype": None}),
               ("cumprod", {"dim": 0, "reverse": False, "dtype": None}),
               ("argsort", {"dim": 2, "descending": True, "stable": False, "k": 2}),
               ("softmax", {"dim": 1}), ("log_softmax", {"dim": 0})]


@pytest.mark.parametrize("name,params", SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_shape_rules_match_kernels(name, params):
    op = REGISTRY[name]
    x = em.tensor(np.random.default_rng(1).uniform(0.5, 2, (2, 3, 4)))
    assert tuple(op(x, **params).shape) == tuple(op.shape((2, 3, 4), **params))


def test_params_are_normalised():
    x = em.ones(2, 3, 4, requires_grad=True)
    for y, dims in ((x.amax((-1, 0)), (0, 2)), (x.prod(-2), (1,)), (x.amin(None), (0, 1, 2))):
        assert y.grad_fn.params["dim"] == dims and y.grad_fn.params["keepdim"] is False


# ------------------------------------------------------------------ PyTorch as an oracle
def test_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 4))
    a[0, 1] = 0.0
    cases = [
        (lambda m: m.var(1, correction=0), lambda t: t.var(1, correction=0)),
        (lambda m: m.std(0, keepdim=True), lambda t: t.std(0, keepdim=True)),
        (lambda m: m.norm(p=3, dim=1), lambda t: t.norm(p=3, dim=1)),
        (lambda m: m.norm(), lambda t: t.norm()),
        (lambda m: m.logsumexp((0, 1)), lambda t: t.logsumexp((0, 1))),
        (lambda m: m.log_softmax(0), lambda t: t.log_softmax(0)),
        (lambda m: m.prod(1), lambda t: t.prod(1)),
        (lambda m: (m + 5).cumprod(1), lambda t: (t + 5).cumprod(1)),   # no zeros: see docs
        (lambda m: m.topk(2, 0).values, lambda t: t.topk(2, 0).values),
        (lambda m: m.median(1).values, lambda t: t.median(1).values),
        (lambda m: m.amax(1) + m.amin(0).sum(), lambda t: t.amax(1) + t.amin(0).sum()),
    ]
    w = rng.standard_normal
    for i, (fe, ft) in enumerate(cases):
        xe, xt = t64(a, grad=True), torch.tensor(a, requires_grad=True)
        re, rt = fe(xe), ft(xt)
        np.testing.assert_allclose(re.detach().numpy(), rt.detach().numpy(), rtol=1e-10,
                                   atol=1e-12, err_msg=f"case {i}")
        cot = w(tuple(rt.shape))
        (re * t64(cot)).sum().backward()
        (rt * torch.tensor(cot)).sum().backward()
        np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-8, atol=1e-10,
                                   err_msg=f"grad case {i}")


def test_sum_dims_like_pytorch():
    assert em.tensor(3.).sum(0).item() == 3.0 and em.tensor(3.).sum(-1, keepdim=True).shape == ()
    assert em.ones(2, 3).sum(()).item() == 6.0          # dim=() reduces everything, like torch
    out = em.zeros(3)
    assert em.sum(em.ones(2, 3), 0, out=out) is out and out.tolist() == [2., 2., 2.]
