"""ember.func.functional_call and stack_module_state: torch.func semantics."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import func, nn


def _n(t):
    return t.detach().numpy()


def _linear(n_in=3, n_out=2, seed=0):
    em.manual_seed(seed)
    return nn.Linear(n_in, n_out, dtype=em.float64)


class Tied(nn.Module):
    """Two Linear layers sharing one weight (``b.weight is a.weight``)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2, bias=False, dtype=em.float64)
        self.b = nn.Linear(2, 2, bias=False, dtype=em.float64)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x))


class Counter(nn.Module):
    """Rebinds a buffer during forward (``self.count = self.count + 1``)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", em.zeros((), dtype=em.float64))

    def forward(self, x):
        self.count = self.count + 1
        return x + self.count


class Boom(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        raise KeyError("boom")


# ---------------------------------------------------------------- calling
def test_swaps_for_the_call_and_restores():
    m = _linear()
    w, b = em.randn(2, 3, dtype=em.float64), em.randn(2, dtype=em.float64)
    x = em.randn(4, 3, dtype=em.float64)
    old_w, old_b = m.weight, m.bias
    out = func.functional_call(m, {"weight": w, "bias": b}, x)
    np.testing.assert_allclose(_n(out), _n(x) @ _n(w).T + _n(b), rtol=1e-12)
    assert m.weight is old_w and m.bias is old_b
    # a partial dict keeps the module's own tensors for the rest; args as a tuple, kwargs
    out = func.functional_call(m, {"bias": b}, (), {"input": x})
    np.testing.assert_allclose(_n(out), _n(x) @ _n(old_w).T + _n(b), rtol=1e-12)


def test_several_dicts_and_duplicate_keys():
    m = _linear()
    w, b = em.randn(2, 3, dtype=em.float64), em.randn(2, dtype=em.float64)
    x = em.randn(4, 3, dtype=em.float64)
    out = func.functional_call(m, ({"weight": w}, {"bias": b}), (x,))
    np.testing.assert_allclose(_n(out), _n(x) @ _n(w).T + _n(b), rtol=1e-12)
    with pytest.raises(ValueError, match=r"\['weight'\] appeared in multiple dictionaries"):
        func.functional_call(m, [{"weight": w}, {"weight": w}], (x,))
    with pytest.raises(ValueError, match="to be dictionaries"):
        func.functional_call(m, ({"weight": w}, 3), (x,))
    with pytest.raises(ValueError, match="a dict, or a list/tuple of dicts"):
        func.functional_call(m, 3, (x,))
    with pytest.raises(TypeError, match="'weight' must be a Tensor"):
        func.functional_call(m, {"weight": 3.0}, (x,))


def test_strict_names_missing_and_unexpected_keys():
    m = _linear()
    x = em.randn(4, 3, dtype=em.float64)
    with pytest.raises(RuntimeError, match=r"missing keys \['bias'\], unexpected keys \[\]"):
        func.functional_call(m, {"weight": m.weight}, x, strict=True)
    full = {"weight": m.weight, "bias": m.bias, "extra": m.bias}
    with pytest.raises(RuntimeError, match=r"missing keys \[\], unexpected keys \['extra'\]"):
        func.functional_call(m, full, x, strict=True)
    del full["extra"]
    np.testing.assert_allclose(_n(func.functional_call(m, full, x, strict=True)), _n(m(x)))
    with pytest.raises(AttributeError, match="'extra'"):   # a typo is not ignored
        func.functional_call(m, {"extra": m.bias}, x)
    with pytest.raises(AttributeError, match="no submodule 'nope'"):
        func.functional_call(m, {"nope.weight": m.bias}, x)


def test_restores_the_module_when_the_call_raises():
    m = Boom()
    old = m.lin.weight
    with pytest.raises(KeyError, match="boom"):
        func.functional_call(m, {"lin.weight": em.zeros(2, 2)}, em.ones(1, 2))
    assert m.lin.weight is old


# ---------------------------------------------------------------- tied weights
def test_tied_weight_given_once_is_used_for_all_aliases():
    m = Tied()
    old = m.a.weight
    w = em.eye(2, dtype=em.float64) * 2
    x = em.ones(1, 2, dtype=em.float64)
    np.testing.assert_allclose(_n(func.functional_call(m, {"a.weight": w}, x)), [[4.0, 4.0]])
    np.testing.assert_allclose(_n(func.functional_call(m, {"b.weight": w}, x)), [[4.0, 4.0]])
    # the same tensor under both names is fine; different tensors are not
    np.testing.assert_allclose(
        _n(func.functional_call(m, {"a.weight": w, "b.weight": w}, x)), [[4.0, 4.0]])
    with pytest.raises(ValueError, match=r"\['a.weight', 'b.weight'\], which are tied"):
        func.functional_call(m, {"a.weight": w, "b.weight": w.clone()}, x)
    # tie_weights=False: only the given name changes
    untied = func.functional_call(m, {"a.weight": w}, x, tie_weights=False)
    np.testing.assert_allclose(_n(untied), _n(x * 2) @ _n(old).T, rtol=1e-12)
    assert m.a.weight is old and m.b.weight is old
    # strict counts tied aliases as given when tie_weights fills them in
    func.functional_call(m, {"a.weight": w}, x, strict=True)
    with pytest.raises(RuntimeError, match=r"missing keys \['b.weight'\]"):
        func.functional_call(m, {"a.weight": w}, x, strict=True, tie_weights=False)


# ---------------------------------------------------------------- buffers
def test_batchnorm_running_stats_update_the_given_buffers_in_train_mode():
    em.manual_seed(0)
    bn = nn.BatchNorm1d(3, dtype=em.float64)
    own_mean = _n(bn.running_mean).copy()
    params = {k: v.detach().clone() for k, v in bn.named_parameters()}
    buffers = {k: v.clone() for k, v in bn.named_buffers()}
    x = em.randn(8, 3, dtype=em.float64) * 2 + 1
    out = func.functional_call(bn, (params, buffers), (x,))
    xs = _n(x)
    np.testing.assert_allclose(_n(out), (xs - xs.mean(0)) / np.sqrt(xs.var(0) + 1e-5),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_n(buffers["running_mean"]), 0.1 * xs.mean(0), rtol=1e-12)
    np.testing.assert_allclose(_n(buffers["running_var"]), 0.9 + 0.1 * xs.var(0, ddof=1),
                               rtol=1e-12)
    assert int(buffers["num_batches_tracked"].item()) == 1
    np.testing.assert_array_equal(_n(bn.running_mean), own_mean)   # the module's untouched
    assert int(bn.num_batches_tracked.item()) == 0


def test_rebound_buffer_is_written_back_into_the_given_dict():
    m = Counter()
    d = {"count": em.tensor(5.0, dtype=em.float64)}
    out = func.functional_call(m, d, em.zeros((), dtype=em.float64))
    assert out.item() == 6.0 and d["count"].item() == 6.0
    assert m.count.item() == 0.0


def test_stateless_functional_call_shares_the_code():
    from ember.nn.utils.stateless import functional_call
    m = Tied()
    w = em.eye(2, dtype=em.float64) * 3
    out = functional_call(m, {"b.weight": w}, em.ones(1, 2, dtype=em.float64))
    np.testing.assert_allclose(_n(out), [[9.0, 9.0]])
    with pytest.raises(TypeError, match="tuple of dicts"):
        functional_call(m, ({"b.weight": w},), em.ones(1, 2))


# ---------------------------------------------------------------- under transforms
def _mlp(seed=0):
    em.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 5, dtype=em.float64), nn.Tanh(),
                         nn.Linear(5, 2, dtype=em.float64))


def test_grad_and_vjp_with_respect_to_a_params_dict():
    model = _mlp()
    x, t = em.randn(6, 4, dtype=em.float64), em.randn(6, 2, dtype=em.float64)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, x, t):
        return nn.functional.mse_loss(func.functional_call(model, p, (x,)), t)

    g = func.grad(loss)(params, x, t)
    nn.functional.mse_loss(model(x), t).backward()
    assert sorted(g) == sorted(params)
    for k, p in model.named_parameters():
        np.testing.assert_allclose(_n(g[k]), _n(p.grad), rtol=1e-12, atol=1e-14)
    assert all(p.grad is not None for p in model.parameters())   # only the backward above
    out, vjp_fn = func.vjp(lambda p: func.functional_call(model, p, (x,)), params)
    (gv,) = vjp_fn(em.ones_like(out))
    model.zero_grad()
    model(x).sum().backward()
    for k, p in model.named_parameters():
        np.testing.assert_allclose(_n(gv[k]), _n(p.grad), rtol=1e-12, atol=1e-14)


def test_jacrev_with_respect_to_a_params_dict_matches_rows_of_grads():
    model = _mlp(1)
    x = em.randn(3, 4, dtype=em.float64)
    params = {k: v.detach() for k, v in model.named_parameters()}
    jac = func.jacrev(lambda p: func.functional_call(model, p, (x,)))(params)
    for i in range(3):
        for j in range(2):
            g = func.grad(lambda p: func.functional_call(model, p, (x,))[i, j])(params)
            for k in params:
                np.testing.assert_allclose(_n(jac[k][i, j]), _n(g[k]), rtol=1e-12,
                                           atol=1e-14)
    assert jac["0.weight"].shape == (3, 2, 5, 4)


# ---------------------------------------------------------------- stack_module_state
def test_stack_module_state_stacks_detached_leaves():
    models = [_mlp(s) for s in range(3)]
    for m in models:
        m.register_buffer("scale", em.full((2,), float(len(models)), dtype=em.float64))
    params, buffers = func.stack_module_state(models)
    assert list(params) == [k for k, _ in models[0].named_parameters()]
    assert list(buffers) == ["scale"]
    for k, v in params.items():
        assert v.shape == (3,) + tuple(models[0].get_parameter(k).shape)
        assert v.is_leaf and v.requires_grad
        for i, m in enumerate(models):
            np.testing.assert_array_equal(_n(v[i]), _n(m.get_parameter(k)))
    assert not buffers["scale"].requires_grad and buffers["scale"].shape == (3, 2)
    with em.no_grad():
        models[0][0].weight.add_(1.0)          # the stack is a copy, not a view
    assert not np.array_equal(_n(params["0.weight"][0]), _n(models[0][0].weight))
    opt = em.optim.SGD(list(params.values()), lr=0.1)   # optimizable leaves
    sum(v.sum() for v in params.values()).backward()
    opt.step()
    assert models[1][0].weight.grad is None


def test_stack_module_state_errors():
    with pytest.raises(RuntimeError, match="at least one model"):
        func.stack_module_state([])
    a, b = _mlp(0), _mlp(1)
    b.eval()
    with pytest.raises(RuntimeError, match="same training/eval mode"):
        func.stack_module_state([a, b])
    with pytest.raises(RuntimeError, match="same class"):
        func.stack_module_state([nn.Linear(2, 2), nn.Conv1d(2, 2, 1)])
    with pytest.raises(RuntimeError, match=r"'weight' differs across models"):
        func.stack_module_state([nn.Linear(2, 2), nn.Linear(3, 2)])
    with pytest.raises(RuntimeError, match=r"model 1 has different parameters.*'bias'"):
        func.stack_module_state([nn.Linear(2, 2), nn.Linear(2, 2, bias=False)])
    c, d = nn.Linear(2, 2), nn.Linear(2, 2)
    d.weight.requires_grad_(False)
    with pytest.raises(RuntimeError, match="weight from each model to have the same"):
        func.stack_module_state([c, d])


# ---------------------------------------------------------------- torch.func oracle
def test_matches_torch_func_functional_call_with_batchnorm():
    torch = pytest.importorskip("torch")
    em.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3, dtype=em.float64), nn.BatchNorm1d(3, dtype=em.float64))
    tmodel = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).double()
    tmodel.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((8, 4))
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    bufs = {k: v.clone() for k, v in model.named_buffers()}
    tparams = {k: torch.tensor(_n(v)) for k, v in params.items()}
    tbufs = {k: torch.tensor(_n(v)) for k, v in bufs.items()}

    def loss(p, b, x):
        return func.functional_call(model, (p, b), (x,)).pow(2).sum()

    def tloss(p, b, x):
        return torch.func.functional_call(tmodel, (p, b), (x,)).pow(2).sum()

    g = func.grad(loss)(params, bufs, em.tensor(x))
    tg = torch.func.grad(tloss)(tparams, tbufs, torch.tensor(x))
    for k in params:
        np.testing.assert_allclose(_n(g[k]), tg[k].numpy(), rtol=1e-10, atol=1e-12)
    for k in bufs:
        np.testing.assert_allclose(_n(bufs[k]), tbufs[k].numpy(), rtol=1e-12)
