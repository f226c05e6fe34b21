"""Tensor methods of ember/ops/tensor_api2.py: resize_/resize_as_/resize/resize_as, set_,
share_memory_ across a fork, cfloat/cdouble, conj_physical_, as_subclass, map2_,
module_load — against NumPy / defining properties, and PyTorch when installed."""
import os
import sys

import numpy as np
import pytest

import ember as em


def test_resize_keeps_leading_elements():
    t = em.arange(6.)
    assert t.resize_(2, 2) is t
    np.testing.assert_array_equal(t.numpy(), [[0, 1], [2, 3]])
    v0 = t._version
    t.resize_((3, 3))
    assert tuple(t.shape) == (3, 3) and t._version > v0
    np.testing.assert_array_equal(t.numpy().reshape(-1)[:4], [0, 1, 2, 3])
    u = em.zeros(5).resize_as_(em.ones(1, 5))
    assert tuple(u.shape) == (1, 5)
    with pytest.raises(RuntimeError, match="require grad"):
        em.ones(2, requires_grad=True).resize_(3)


def test_resize_out_of_place_is_differentiable_reshape():
    x = em.arange(6., requires_grad=True)
    with pytest.warns(UserWarning, match="deprecated"):
        y = x.resize(2, 3)
    (y * em.arange(6.).reshape(2, 3)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(6.))
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="preserving the number"):
        x.resize(4)
    with pytest.warns(UserWarning):
        assert tuple(x.resize_as(em.ones(3, 2)).shape) == (3, 2)


def test_set_shares_memory():
    a, b = em.zeros(3), em.ones(2, 2)
    a.set_(b)
    a[0, 0] = 5
    assert float(b[0, 0]) == 5 and tuple(a.shape) == (2, 2)
    s = em.arange(10.)
    v = em.empty(0).set_(s.untyped_storage(), 2, (2, 2), (3, 1))
    np.testing.assert_array_equal(v.numpy(), [[2, 3], [5, 6]])
    assert em.ones(3).set_().numel() == 0
    with pytest.raises(RuntimeError, match="need 15 elements"):
        em.empty(0).set_(s.untyped_storage(), 5, (3, 2), (4, 1))
    with pytest.raises(RuntimeError, match="requires grad"):
        em.ones(2, requires_grad=True).set_(b)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_share_memory_is_seen_by_a_forked_child():
    x = em.zeros(4)
    assert not x.is_shared()
    assert x.share_memory_() is x and x.is_shared()
    pid = os.fork()
    if pid == 0:           # the child writes; the parent must see it
        x[1] = 7.0
        os._exit(0)
    os.waitpid(pid, 0)
    np.testing.assert_array_equal(x.numpy(), [0, 7, 0, 0])
    y = em.zeros(4)
    pid = os.fork()
    if pid == 0:           # private memory: the parent must not see it
        y[1] = 7.0
        os._exit(0)
    os.waitpid(pid, 0)
    np.testing.assert_array_equal(y.numpy(), [0, 0, 0, 0])
    with pytest.raises(RuntimeError, match="not resizable"):
        x.resize_(8)


def test_complex_casts_and_conj_physical_():
    assert em.ones(2).cfloat().dtype == em.complex64
    assert em.ones(2).cdouble().dtype == em.complex128
    z = em.tensor([1 + 2j, -3j])
    assert z.conj_physical_() is z
    np.testing.assert_array_equal(z.numpy(), [1 - 2j, 3j])
    r = em.tensor([1.0, -2.0])
    np.testing.assert_array_equal(r.conj_physical_().numpy(), [1.0, -2.0])


def test_as_subclass_map2_module_load():
    class Mine(em.Tensor):
        pass
    x = em.ones(2, requires_grad=True)
    m = (x * 2).as_subclass(Mine)
    assert type(m) is Mine and m.grad_fn is not None
    with pytest.raises(TypeError, match="subclass of ember.Tensor"):
        x.as_subclass(int)
    y = em.ones(3)
    y.map2_(em.arange(3.), em.tensor(2.), lambda a, b, c: a + b * c)
    np.testing.assert_array_equal(y.numpy(), [1, 3, 5])
    w = em.zeros(2, dtype=em.float64)
    got = w.module_load(em.ones(2, dtype=em.float32))
    assert got.dtype == em.float64
    assert w.module_load(em.ones(2), assign=True).dtype == em.float32


def test_resize_and_set_match_torch():
    torch = pytest.importorskip("torch")
    t, e = torch.arange(6.), em.arange(6.)
    t.resize_(2, 2)
    e.resize_(2, 2)
    np.testing.assert_array_equal(e.numpy(), t.numpy())
    ts, es = torch.arange(10.), em.arange(10.)
    tv = torch.empty(0).set_(ts.untyped_storage(), 1, (3, 2), (3, 2))
    ev = em.empty(0).set_(es.untyped_storage(), 1, (3, 2), (3, 2))
    np.testing.assert_array_equal(ev.numpy(), tv.numpy())
    assert em.ones(2).cfloat().numpy().dtype == torch.ones(2).cfloat().numpy().dtype
