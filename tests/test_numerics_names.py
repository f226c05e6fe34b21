"""Issue 18, item 6: PyTorch's top-level and ``Tensor`` numerics names exist in Ember and
behave as PyTorch's (``histogramdd``, the functional in-place forms ``torch.exp_(x)``, ``i0``,
``igamma``/``igammac``, and the issue's list)."""
import math

import numpy as np
import pytest

import ember as em
from ember.ops.toplevel_numerics import INPLACE

#: the issue's list (linear algebra ones, e.g. det/inverse/svd/cholesky, are ember.linalg's)
ISSUE_NAMES = ("diag", "cdist", "kron", "cross", "meshgrid", "searchsorted", "bucketize",
               "unique", "histc", "bincount", "quantile", "cov", "lgamma", "digamma", "logit",
               "allclose", "isclose", "cummax", "logcumsumexp", "diff")
SIBLINGS = ("corrcoef", "histogram", "histogramdd", "cummin", "i0", "xlogy", "sinc",
            "trapezoid", "trapz", "cumulative_trapezoid", "vander", "tril_indices",
            "triu_indices", "cartesian_prod", "combinations", "block_diag", "renorm", "nanmean",
            "nansum", "nanmedian", "frexp", "ldexp", "gcd", "lcm", "heaviside", "logaddexp",
            "logaddexp2", "float_power", "nextafter", "igamma", "igammac", "mvlgamma", "sgn",
            "polygamma", "erfinv", "special")
TENSOR_NAMES = ("i0", "i0_", "igamma", "igamma_", "igammac", "igammac_", "xlogy", "xlogy_",
                "sinc", "sinc_", "logit", "logit_", "erfinv_", "lgamma_", "digamma_",
                "polygamma", "polygamma_", "mvlgamma", "sgn", "ldexp", "frexp", "heaviside",
                "float_power", "nextafter", "cummin", "cummax", "logcumsumexp", "diff", "kron",
                "histc", "bincount", "quantile", "nanquantile", "renorm", "nanmean", "nansum")


@pytest.mark.parametrize("name", ISSUE_NAMES + SIBLINGS)
def test_top_level_name_exists(name):
    assert callable(getattr(em, name, None)) or name == "special", name


@pytest.mark.parametrize("name", TENSOR_NAMES)
def test_tensor_method_exists(name):
    assert callable(getattr(em.Tensor, name, None)), name


@pytest.mark.parametrize("name", [n for n in INPLACE if n not in ("gcd", "lcm", "ldexp",
                                                                   "xlogy", "fill", "clamp",
                                                                   "clamp_max", "clamp_min",
                                                                   "clip")])
def test_functional_inplace_is_the_method(name):
    x = em.tensor([0.25, 0.5, 0.75], dtype=em.float64)
    y = x.clone()
    fn = getattr(em, name + "_")
    r = fn(y)
    assert r is y
    np.testing.assert_array_equal(y.numpy(), getattr(x.clone(), name + "_")().numpy())


def test_functional_inplace_with_arguments():
    x = em.tensor([-1.0, 0.5, 3.0])
    assert em.clamp_(x, 0, 1) is x
    np.testing.assert_array_equal(x.numpy(), [0.0, 0.5, 1.0])
    a = em.tensor([1.0, 2.0])
    em.xlogy_(a, em.tensor([math.e, 1.0]))
    np.testing.assert_allclose(a.numpy(), [1.0, 0.0])
    i = em.tensor([12, 18])
    em.gcd_(i, em.tensor([8, 12]))
    np.testing.assert_array_equal(i.numpy(), [4, 6])
    f = em.tensor([1.0, 2.0])
    em.fill_(f, 7.0)
    np.testing.assert_array_equal(f.numpy(), [7.0, 7.0])
    g = em.fill(f, 3.0)
    assert g is not f and g.numpy().tolist() == [3.0, 3.0] and f.numpy().tolist() == [7.0, 7.0]


def test_functional_inplace_keeps_autograd_rules():
    w = em.tensor([0.5, 1.5], requires_grad=True)
    h = w * 2
    em.exp_(h)
    h.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * np.exp(2 * np.array([0.5, 1.5])),
                               rtol=1e-6)
    with pytest.raises(Exception, match="in-place"):
        em.exp_(w)


def _np_hist(pts, **kw):
    return np.histogramdd(pts, **kw)


@pytest.mark.parametrize("kw", [dict(bins=3), dict(bins=[2, 3, 4]),
                                dict(bins=2, range=[0.0, 1.0, 0.0, 2.0, -1.0, 1.0],
                                     density=True)])
def test_histogramdd_matches_numpy(kw):
    pts = np.random.default_rng(0).random((5, 10, 3))
    got = em.histogramdd(em.tensor(pts), **kw)
    rng = kw.get("range")
    ref_h, ref_e = np.histogramdd(pts.reshape(-1, 3), bins=kw["bins"], density=kw.get(
        "density", False), range=None if rng is None else list(zip(rng[::2], rng[1::2])))
    np.testing.assert_allclose(got.hist.numpy(), ref_h)
    assert isinstance(got.bin_edges, tuple) and len(got.bin_edges) == 3
    for g, r in zip(got.bin_edges, ref_e):
        np.testing.assert_allclose(g.numpy(), r)
    assert got.hist.dtype is em.float64


def test_histogramdd_edges_weights_and_errors():
    pts = np.random.default_rng(1).random((40, 2)).astype(np.float32)
    edges = [em.tensor([0.0, 0.3, 1.0]), em.tensor([0.0, 0.5, 0.7, 1.0])]
    w = em.tensor(pts[:, 0])
    got = em.histogramdd(em.tensor(pts), bins=edges, weight=w)
    ref, _ = np.histogramdd(pts, bins=[e.numpy() for e in edges], weights=pts[:, 0])
    np.testing.assert_allclose(got.hist.numpy(), ref, rtol=1e-6)
    assert got.hist.dtype is em.float32
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        em.histogramdd(em.tensor([1.0, 2.0]), bins=2)
    with pytest.raises(TypeError, match="histogramdd"):
        em.histogramdd(em.tensor([[1, 2]]), bins=2)
    with pytest.raises(ValueError, match="2 sequences"):
        em.histogramdd(em.tensor(pts), bins=[2, 2, 2])


def test_histogramdd_matches_pytorch():
    torch = pytest.importorskip("torch")
    pts = np.random.default_rng(2).standard_normal((64, 2))
    for kw in (dict(bins=4), dict(bins=[3, 5], density=True)):
        a, b = em.histogramdd(em.tensor(pts), **kw), torch.histogramdd(torch.tensor(pts), **kw)
        np.testing.assert_allclose(a.hist.numpy(), b.hist.numpy(), rtol=1e-12)
        for x, y in zip(a.bin_edges, b.bin_edges):
            np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-12)


def test_igamma_top_level_matches_pytorch():
    torch = pytest.importorskip("torch")
    a = np.array([0.5, 1.0, 3.0])
    x = np.array([0.2, 1.0, 5.0])
    np.testing.assert_allclose(em.igamma(em.tensor(a), em.tensor(x)).numpy(),
                               torch.igamma(torch.tensor(a), torch.tensor(x)).numpy(),
                               rtol=1e-14)
    np.testing.assert_allclose(em.tensor(a).igammac(em.tensor(x)).numpy(),
                               torch.tensor(a).igammac(torch.tensor(x)).numpy(), rtol=1e-14)
    np.testing.assert_allclose(em.i0(em.tensor(x)).numpy(), torch.i0(torch.tensor(x)).numpy(),
                               rtol=1e-14)


@pytest.mark.parametrize("name", [n for n in INPLACE if n not in ("gcd", "lcm", "ldexp",
                                                                   "xlogy", "fill", "clamp",
                                                                   "clamp_max", "clamp_min",
                                                                   "clip")])
def test_functional_inplace_matches_pytorch(name):
    torch = pytest.importorskip("torch")
    v = np.array([0.25, 0.5, 0.75])
    x, t = em.tensor(v), torch.tensor(v)
    getattr(em, name + "_")(x)
    getattr(torch, name + "_")(t)
    np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-15, atol=0)


@pytest.mark.parametrize("kw", [{}, {"spacing": 2.0}, {"edge_order": 2}, {"dim": 1},
                                {"spacing": [0.5, 3.0], "edge_order": 2}, {"dim": -1,
                                                                          "coords": True},
                                {"coords": True, "edge_order": 2, "dim": 0}])
def test_gradient_matches_numpy(kw):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((5, 6))
    kw = dict(kw)
    if kw.pop("coords", False):
        d = kw["dim"]
        x = np.cumsum(rng.uniform(0.2, 1.0, a.shape[d]))
        kw["spacing"] = [em.tensor(x)]
        ref = np.gradient(a, x, axis=d, edge_order=kw.get("edge_order", 1))
    else:
        sp = kw.get("spacing", 1.0)
        ref = np.gradient(a, *(sp if isinstance(sp, list) else [sp]), axis=kw.get("dim"),
                          edge_order=kw.get("edge_order", 1))
    got = em.gradient(em.tensor(a), **kw)
    ref = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    assert isinstance(got, tuple) and len(got) == len(ref)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g.numpy(), r, rtol=1e-12, atol=1e-12)


def test_gradient_is_differentiable_and_checks_sizes():
    x = em.tensor(np.random.default_rng(10).standard_normal((4, 3)), requires_grad=True)
    c = em.tensor([0.0, 0.4, 1.5, 2.0])
    assert em.autograd.gradcheck(lambda t: em.gradient(t, spacing=[c], dim=0, edge_order=2),
                                 (x,))
    assert em.gradient(em.tensor([1, 4, 9]))[0].dtype is em.float32
    with pytest.raises(ValueError, match="at least edge_order\\+1"):
        em.gradient(em.tensor([1.0, 2.0]), edge_order=2)
    with pytest.raises(ValueError, match="spacing"):
        em.gradient(x, spacing=[1.0, 2.0, 3.0])


def test_gradient_matches_pytorch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(11).standard_normal((4, 5))
    x = np.array([0.0, 0.3, 1.0, 1.2, 2.5])
    for kw_e, kw_t in (({"spacing": [em.tensor(x)], "dim": 1, "edge_order": 2},
                        {"spacing": [torch.tensor(x)], "dim": 1, "edge_order": 2}),
                       ({"spacing": 0.5}, {"spacing": 0.5})):
        for g, r in zip(em.gradient(em.tensor(a), **kw_e), torch.gradient(torch.tensor(a),
                                                                          **kw_t)):
            np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-12)


def test_top_level_ctc_loss_and_pdist_match_pytorch():
    torch = pytest.importorskip("torch")
    lp = np.log(np.random.default_rng(12).dirichlet(np.ones(4), (5, 2)))
    tg, il, tl = [[1, 2], [1, 0]], [5, 4], [2, 1]
    for r in (0, 1, 2):
        np.testing.assert_allclose(
            em.ctc_loss(em.tensor(lp), em.tensor(tg), il, tl, 0, r).numpy(),
            torch.ctc_loss(torch.tensor(lp), torch.tensor(tg), il, tl, 0, r, False).numpy(),
            rtol=1e-12)
    np.testing.assert_allclose(em.ctc_loss(em.tensor(lp), em.tensor(tg), il, tl).numpy(),
                               torch.ctc_loss(torch.tensor(lp), torch.tensor(tg), il,
                                              tl).numpy(), rtol=1e-12)
    pts = np.random.default_rng(13).standard_normal((5, 3))
    np.testing.assert_allclose(em.pdist(em.tensor(pts), 1.5).numpy(),
                               torch.pdist(torch.tensor(pts), 1.5).numpy(), rtol=1e-12)
