"""Transforms composed on top of vmap: Jacobians in one batched pass (chunk_size), per-sample
gradients and ensembles with functional_call/stack_module_state, vmap inside ember.compile —
each against a loop of the unbatched computation."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import func, nn

F = nn.functional


def _n(t):
    return t.detach().numpy()


def f64(data):
    return em.tensor(data, dtype=em.float64)


def _mlp(sizes=(4, 5, 3), seed=0, act=nn.Tanh):
    em.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b, dtype=em.float64))
        if i < len(sizes) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


def _rows_jacobian(f, x):
    """The Jacobian of ``f`` at ``x`` one output element at a time (``grad`` per row)."""
    out = f(x)
    rows = [func.grad(lambda v, i=i: f(v).reshape(-1)[i])(x) for i in range(out.numel())]
    return np.stack([_n(r) for r in rows]).reshape(tuple(out.shape) + tuple(x.shape))


# ---------------------------------------------------------------- jacobians over vmap
@pytest.mark.parametrize("chunk_size", [None, 1, 2, 5, 100])
def test_jacrev_and_jacfwd_of_an_mlp_match_the_row_loop(chunk_size):
    model = _mlp((4, 6, 5))
    x = em.randn(3, 4, dtype=em.float64)
    want = _rows_jacobian(model, x)
    for jac in (func.jacrev, func.jacfwd):
        got = jac(model, chunk_size=chunk_size)(x)
        assert got.shape == (3, 5, 3, 4)
        assert got.requires_grad        # as torch.func: it depends on the model's parameters
        np.testing.assert_allclose(_n(got), want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("chunk_size", [None, 1, 3])
def test_jacobians_of_pytrees_are_the_same_for_every_chunk_size(chunk_size):
    a, b = f64([[1.0, 2.0], [3.0, -1.0]]), f64([0.5, 2.0, -3.0])

    def f(a, b):
        return {"m": a.sin() * b.sum(), "s": (a.exp().sum() * b, b[:2] * a[0])}

    for jac in (func.jacrev, func.jacfwd):
        ref = jac(f, argnums=(0, 1), chunk_size=1)(a, b)
        got = jac(f, argnums=(0, 1), chunk_size=chunk_size)(a, b)
        ref_l, ref_spec = func.tree_flatten(ref)
        got_l, got_spec = func.tree_flatten(got)
        assert ref_spec == got_spec
        for r, g in zip(ref_l, got_l):
            assert r.shape == g.shape
            np.testing.assert_allclose(_n(g), _n(r), rtol=1e-12, atol=1e-14)
    # and jacrev agrees with jacfwd
    jr, jf = func.jacrev(f, argnums=(0, 1))(a, b), func.jacfwd(f, argnums=(0, 1))(a, b)
    for r, g in zip(func.tree_flatten(jr)[0], func.tree_flatten(jf)[0]):
        np.testing.assert_allclose(_n(g), _n(r), rtol=1e-12, atol=1e-14)


def test_jacobian_of_a_function_of_its_input_only_does_not_require_grad():
    x = f64([0.5, -1.0])
    for jac in (func.jacrev, func.jacfwd):
        got = jac(lambda v: v.sin() * v.sum())(x)
        assert not got.requires_grad and got.grad_fn is None


def test_vmap_of_jvp_with_an_unbatched_primal_and_batched_tangents():
    """jacfwd's building block: the tangent's JVP ops are batched though the primal is not."""
    x = f64([0.5, -1.0, 2.0])

    def f(v):
        return v.exp() * v.sum()

    ts = em.randn(4, 3, dtype=em.float64)
    got = func.vmap(lambda t: func.jvp(f, (x,), (t,))[1])(ts)
    for i in range(4):
        np.testing.assert_allclose(_n(got[i]), _n(func.jvp(f, (x,), (ts[i],))[1]),
                                   rtol=1e-12)


def test_chunk_size_is_validated():
    for jac in (func.jacrev, func.jacfwd):
        with pytest.raises(ValueError, match="chunk_size should be None or a positive int"):
            jac(em.sin, chunk_size=0)


def test_jacobian_of_a_constant_output_and_of_an_empty_output():
    x = f64([1.0, 2.0])
    for jac in (func.jacrev, func.jacfwd):
        np.testing.assert_array_equal(_n(jac(lambda v: em.ones(3, dtype=em.float64))(x)),
                                      np.zeros((3, 2)))
        assert jac(lambda v: v[:0] * 2)(x).shape == (0, 2)


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_hessian_is_jacfwd_of_jacrev_and_matches_reverse_over_reverse(chunk_size):
    model = _mlp((3, 4, 1), seed=3)

    def f(x):
        return model(x).sum() * x.pow(2).sum()

    x = f64([0.3, -0.7, 1.1])
    h = func.hessian(f)(x)
    rr = func.jacrev(func.jacrev(f, chunk_size=chunk_size), chunk_size=chunk_size)(x)
    want = _rows_jacobian(func.grad(f), x)
    for got in (h, rr):
        np.testing.assert_allclose(_n(got), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_n(h), _n(h).T, rtol=1e-12)


def test_vmap_of_jacrev_is_a_batch_of_jacobians():
    model = _mlp((3, 4, 2), seed=4)
    xs = em.randn(5, 3, dtype=em.float64)
    got = func.vmap(func.jacrev(model))(xs)
    for i in range(5):
        np.testing.assert_allclose(_n(got[i]), _rows_jacobian(model, xs[i]), rtol=1e-12,
                                   atol=1e-14)


# ---------------------------------------------------------------- per-sample gradients
def _loss_one(model):
    def loss(params, x, y):
        return F.cross_entropy(func.functional_call(model, params, (x.unsqueeze(0),)),
                               y.unsqueeze(0))
    return loss


def test_per_sample_gradients_with_functional_call_match_a_loop():
    model = _mlp((6, 8, 4), seed=1, act=nn.ReLU)
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = em.randn(7, 6, dtype=em.float64), em.randint(0, 4, (7,))
    got = func.vmap(func.grad(_loss_one(model)), in_dims=(None, 0, 0))(params, x, y)
    for i in range(7):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        for k, p in model.named_parameters():
            np.testing.assert_allclose(_n(got[k][i]), _n(p.grad), rtol=1e-12, atol=1e-14)
    # the mean of the per-sample gradients is the batch gradient
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    for k, p in model.named_parameters():
        np.testing.assert_allclose(_n(got[k].mean(0)), _n(p.grad), rtol=1e-10, atol=1e-12)


def test_per_sample_gradients_match_torch_func():
    torch = pytest.importorskip("torch")
    model = _mlp((6, 8, 4), seed=2, act=nn.ReLU)
    tm = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(),
                             torch.nn.Linear(8, 4)).double()
    tm.load_state_dict({k: torch.tensor(_n(v)) for k, v in model.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 6))
    y = np.array([0, 3, 1, 1, 2])
    params = {k: v.detach() for k, v in model.named_parameters()}
    got = func.vmap(func.grad(_loss_one(model)), in_dims=(None, 0, 0))(
        params, f64(x), em.tensor(y))

    def tloss(p, xi, yi):
        return torch.nn.functional.cross_entropy(
            torch.func.functional_call(tm, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))

    want = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0, 0))(
        dict(tm.named_parameters()), torch.tensor(x), torch.tensor(y))
    for k in params:
        np.testing.assert_allclose(_n(got[k]), want[k].detach().numpy(), rtol=1e-12,
                                   atol=1e-14)


# ---------------------------------------------------------------- ensembles
def _ensemble(n=4):
    models = [_mlp((5, 6, 3), seed=10 + i) for i in range(n)]
    params, buffers = func.stack_module_state(models)
    return models, params, buffers


def test_ensemble_forward_over_stacked_weights_matches_the_models():
    models, params, buffers = _ensemble()

    def fmodel(p, b, x):
        return func.functional_call(models[0], (p, b), (x,))

    x = em.randn(7, 5, dtype=em.float64)
    same = func.vmap(fmodel, in_dims=(0, 0, None))(params, buffers, x)
    assert same.shape == (4, 7, 3)
    xs = em.randn(4, 7, 5, dtype=em.float64)
    diff = func.vmap(fmodel)(params, buffers, xs)
    for i, m in enumerate(models):
        np.testing.assert_allclose(_n(same[i]), _n(m(x)), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(_n(diff[i]), _n(m(xs[i])), rtol=1e-12, atol=1e-14)
    before = models[0][0].weight
    assert models[0][0].weight is before          # the base model is restored


def test_gradient_through_the_ensemble_reaches_the_stacked_leaves():
    models, params, buffers = _ensemble(3)
    x, t = em.randn(6, 5, dtype=em.float64), em.randn(6, 3, dtype=em.float64)

    def loss(p, b, x):
        return F.mse_loss(func.functional_call(models[0], (p, b), (x,)), t)

    func.vmap(loss, in_dims=(0, 0, None))(params, buffers, x).sum().backward()
    for i, m in enumerate(models):
        F.mse_loss(m(x), t).backward()
        for k, p in m.named_parameters():
            np.testing.assert_allclose(_n(params[k].grad[i]), _n(p.grad), rtol=1e-12,
                                       atol=1e-14)


def test_ensemble_of_batchnorm_models_updates_each_models_running_stats():
    em.manual_seed(0)
    models = [nn.Sequential(nn.Linear(3, 4, dtype=em.float64),
                            nn.BatchNorm1d(4, dtype=em.float64)) for _ in range(3)]
    params, buffers = func.stack_module_state(models)
    xs = em.randn(3, 8, 3, dtype=em.float64)
    out = func.vmap(lambda p, b, x: func.functional_call(models[0], (p, b), (x,)))(
        params, buffers, xs)
    for i, m in enumerate(models):
        np.testing.assert_allclose(_n(out[i]), _n(m(xs[i])), rtol=1e-10, atol=1e-12)
        for k, v in m.named_buffers():         # m(xs[i]) updated the model's own stats
            np.testing.assert_allclose(_n(buffers[k][i]), _n(v), rtol=1e-12)


# ---------------------------------------------------------------- vmap inside ember.compile
def test_vmapped_function_is_captured_as_one_graph():
    model = _mlp((4, 5, 2), seed=5)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def per_example(p, x):
        return func.functional_call(model, p, (x,)).tanh().sum()

    batched = func.vmap(per_example, in_dims=(None, 0))
    compiled = em.compile(batched, fullgraph=True)
    xs = em.randn(6, 4, dtype=em.float64)
    want = batched(params, xs)
    for _ in range(2):
        np.testing.assert_allclose(_n(compiled(params, xs)), _n(want), rtol=1e-12)
    log = compiled.explain()
    assert not log.breaks and len(log.captures) == 1
    graph = compiled.graphs()[0]
    assert any(n.op.name == "matmul" for n in graph.nodes), graph
    xs2 = em.randn(6, 4, dtype=em.float64)       # new data, same graph
    np.testing.assert_allclose(_n(compiled(params, xs2)), _n(batched(params, xs2)), rtol=1e-12)
    assert len(compiled.explain().captures) == 1


def test_per_sample_gradients_compiled_match_eager():
    model = _mlp((4, 5, 3), seed=6, act=nn.ReLU)
    params = {k: v.detach() for k, v in model.named_parameters()}
    psg = func.vmap(func.grad(_loss_one(model)), in_dims=(None, 0, 0))
    x, y = em.randn(5, 4, dtype=em.float64), em.randint(0, 3, (5,))
    want = psg(params, x, y)
    compiled = em.compile(psg)
    for _ in range(2):
        got = compiled(params, x, y)
        for k in want:
            np.testing.assert_allclose(_n(got[k]), _n(want[k]), rtol=1e-12, atol=1e-14)
    assert not compiled.explain().breaks


def test_jacrev_runs_no_vjp_for_inputs_it_does_not_differentiate():
    """autograd.grad (and so jacrev) skips the VJP of an input that leads to no requested
    input: the weight's gradient of ``x @ w`` is never formed (PyTorch's needs_input_grad)."""
    w = em.randn(3, 4, dtype=em.float64, requires_grad=True)
    x = em.randn(3, dtype=em.float64)
    with em.profiler.profile() as prof:
        jac = func.jacrev(lambda v: v @ w)(x)
    counts = {e.key: e.count for e in prof.key_averages()}
    assert counts["matmul"] == 2, counts        # the forward and g @ w.T, not x.T @ g
    np.testing.assert_allclose(_n(jac), _n(w).T, rtol=1e-12)
    with em.profiler.profile() as prof:
        (gx,) = em.autograd.grad((x.requires_grad_() @ w).sum(), [x])
    assert {e.key: e.count for e in prof.key_averages()}["matmul"] == 2
    np.testing.assert_allclose(_n(gx), _n(w).sum(1), rtol=1e-12)
    assert w.grad is None


def test_gradient_through_an_inner_transform_requires_grad_only_when_its_input_does():
    """grad of ``w -> jacrev(f(., w))(x)`` (the inner transform finished, its stand-ins
    retired) is a plain tensor, unless ``w`` itself requires grad; values match the loop."""
    x, w = f64([0.3, -0.5, 1.2]), f64([0.7, 1.1, -0.4])

    def through_jacrev(w):
        return func.jacrev(lambda v: (w * v).sin() * v.sum())(x).pow(2).sum()

    def through_rows(w):
        rows = [func.grad(lambda v, i=i: ((w * v).sin() * v.sum())[i])(x) for i in range(3)]
        return em.stack(rows).pow(2).sum()

    g, g_rows = func.grad(through_jacrev)(w), func.grad(through_rows)(w)
    assert not g.requires_grad and not g_rows.requires_grad
    np.testing.assert_allclose(_n(g), _n(g_rows), rtol=1e-12)
    wr = w.clone().requires_grad_()
    g2 = func.grad(through_jacrev)(wr)
    assert g2.requires_grad                       # an outer graph tracks w: keep it
    np.testing.assert_allclose(_n(g2), _n(g), rtol=1e-12)
