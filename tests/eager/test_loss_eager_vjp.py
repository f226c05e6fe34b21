"""The eager cross-entropy's backward nodes' ``eager_vjp`` (``log_softmax`` in
ops/softmax.py, ``nll_loss`` in ops/nll.py): a plain eager backward runs the kernel their
VJP would dispatch (``log_softmax_backward``, ``nll_loss_backward``) on the raw arrays, the
same bits; a dispatch mode or ``create_graph`` keeps the dispatched rules."""
import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.ops.nll import nll_loss_p
from ember.ops.softmax import log_softmax_p
from op_names import OpNames


@pytest.fixture
def calls(monkeypatch):
    n = {"log_softmax": 0, "nll_loss": 0}
    for op in (log_softmax_p, nll_loss_p):
        rule = op.eager_vjp

        def counted(*a, _rule=rule, _name=op.name, **k):
            r = _rule(*a, **k)
            n[_name] += r is not None
            return r
        monkeypatch.setattr(op, "eager_vjp", counted)
    return n


def _grad(x, y, reduction):
    t = ember.tensor(x, requires_grad=True)
    loss = F.cross_entropy(t, ember.tensor(y), reduction=reduction)
    loss.backward()
    return float(loss), t.grad.numpy().copy()


@pytest.mark.parametrize("shape", [(128, 10), (4, 3), (2, 17)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_same_bits_as_the_dispatched_rules(shape, dtype, reduction, calls, monkeypatch):
    rng = np.random.default_rng(5)
    x = (3 * rng.standard_normal(shape)).astype(dtype)
    y = rng.integers(0, shape[1], shape[0])
    loss, fast = _grad(x, y, reduction)
    assert calls == {"log_softmax": 1, "nll_loss": 1}
    monkeypatch.setattr(log_softmax_p, "eager_vjp", None)
    monkeypatch.setattr(nll_loss_p, "eager_vjp", None)
    loss2, slow = _grad(x, y, reduction)
    assert loss == loss2
    np.testing.assert_array_equal(fast, slow, strict=True)
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(shape[0]), y] -= 1
    np.testing.assert_allclose(fast, p / (shape[0] if reduction == "mean" else 1),
                               rtol=1e-5, atol=1e-6)


def test_declines_where_the_ops_must_be_seen(calls):
    x = ember.randn(8, 5, requires_grad=True)
    y = ember.randint(0, 5, (8,))
    loss = F.cross_entropy(x, y)
    with OpNames() as rec:
        loss.backward()
    assert calls == {"log_softmax": 0, "nll_loss": 0}
    # (under a mode log_softmax's rule is its composite: exp, sum, mul, sub)
    assert "nll_loss_backward" in rec.names and "exp" in rec.names
    (gx,) = ember.autograd.grad(F.cross_entropy(x, y), [x], create_graph=True)
    assert calls == {"log_softmax": 0, "nll_loss": 0} and gx.requires_grad
