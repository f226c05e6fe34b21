"""Issue 19 item 7: ``count_true`` — a whole boolean value's ``sum`` is ``count_nonzero``
(cross-entropy's count of targets that are not ``ignore_index``): exact, int64, 0-d."""
import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember.graph.passes import DEFAULT_PASSES
from ember.graph.passes.count_true import count_true


def _graph(f):
    return [e for e in f._cache.values() if not e.eager and e.program is not None][-1].graph


def _names(g):
    return [n.op.name for n in g.nodes]


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 0, 4), (2, 3, 4)])
def test_whole_sum_of_bools_is_the_count(shape):
    rng = np.random.default_rng(0)
    a = em.tensor(rng.standard_normal(shape).astype(np.float32))
    f = em.compile(lambda a: ((a > 0.3).sum(), (a > 0.3).sum(dim=tuple(range(a.ndim)))),
                   fullgraph=True)
    f(a)
    got = f(a)
    names = _names(_graph(f))
    assert "count_true" in names and "sum" not in names, names
    want = int((a.numpy() > 0.3).sum())
    for g in got:
        assert g.dtype == em.int64 and g.shape == () and int(g) == want


def test_partial_or_keepdim_sums_stay_sums():
    a = em.randn(4, 6)
    f = em.compile(lambda a: ((a > 0).sum(dim=1), (a > 0).sum(keepdim=True, dim=(0, 1)),
                              (a > 0).sum(dtype=em.float32)), fullgraph=True)
    f(a)
    got = f(a)
    assert "count_true" not in _names(_graph(f))
    m = a.numpy() > 0
    np.testing.assert_array_equal(got[0].numpy(), m.sum(1))
    assert got[1].shape == (1, 1) and got[2].dtype == em.float32


def test_cross_entropy_counts_targets_not_ignored():
    rng = np.random.default_rng(1)
    x = em.tensor(rng.standard_normal((9, 4)).astype(np.float32))
    y = em.tensor(np.array([0, -100, 3, 1, -100, 2, 2, 0, 1]))
    f = em.compile(lambda x, y: F.cross_entropy(x, y), fullgraph=True)
    f(x, y)
    got = float(f(x, y))
    assert "count_true" in _names(_graph(f))
    np.testing.assert_allclose(got, float(F.cross_entropy(x, y)), rtol=1e-6)
    assert "count_true" in DEFAULT_PASSES


def test_no_bool_sum_no_change():
    f = em.compile(lambda a: a.sum(), fullgraph=True, passes=["simplify"])
    a = em.randn(3)
    f(a), f(a)
    g = _graph(f)
    assert count_true(g) == (g, {"count_true": 0})
