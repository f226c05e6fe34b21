"""Views whose base is later written in place get their history rebuilt (PyTorch semantics)."""
import numpy as np
import pytest

import ember as em


def _x():
    return em.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)


def test_view_taken_before_write_into_sibling_view():
    x = _x()
    y = x * 1
    a = y[:, 0]
    y[0].mul_(2)                       # a[0] now reads 2 * x[0, 0]
    ((a * a).sum() + y.sum()).backward()
    xv = np.arange(6.0).reshape(2, 3)
    expected = np.array([[2 + 8 * xv[0, 0], 2, 2], [1 + 2 * xv[1, 0], 1, 1]])
    np.testing.assert_allclose(x.grad.numpy(), expected)


def test_view_taken_before_write_into_base():
    x = _x()
    y = x * 1
    v = y[0]
    y.mul_(3)                          # v now reads 3 * x[0]
    (v * v).sum().backward()
    xv = np.arange(6.0).reshape(2, 3)
    expected = np.zeros((2, 3))
    expected[0] = 18 * xv[0]
    np.testing.assert_allclose(x.grad.numpy(), expected)


def test_overlapping_views_match_torch():
    torch = pytest.importorskip("torch")

    def run(lib):
        x = lib.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
        y = x * 1
        v, w = y[1], y[:, 1]
        w.mul_(5)
        ((v * 2).sum() + (w * w).sum()).backward()
        return x.grad.numpy()

    np.testing.assert_allclose(run(em), run(torch))


def test_graph_order_survives_view_refresh():
    # the rebuilt view node is made while its consumer's node is being built; the
    # consumer must still run first in backward
    x = _x()
    y = x * 1
    a = y[:, 0]
    y[1].add_(1)
    s = (a * a).sum()
    s.backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy()[:, 0], 2 * (np.arange(6.0).reshape(2, 3)[:, 0]
                                                         + np.array([0, 1])))
