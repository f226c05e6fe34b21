"""ember.func.vmap composed with the other transforms (grad, jvp, vjp, jacrev, hessian),
custom autograd Functions, checkpointing and ember.compile, against loops."""
import numpy as np
import pytest

import ember as em
from ember.func import grad, vmap

RNG = np.random.default_rng(1)


def T(*shape):
    return em.from_numpy(RNG.standard_normal(shape))


def close(a, b, tol=1e-12):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def loop(f, *args, in_dims=0):
    dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
    n = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    return em.stack([f(*[a if d is None else a.select(d, b) for a, d in zip(args, dims)])
                     for b in range(n)])


# ---------------------------------------------------------------------------- composition


def _mlp(params, x):
    w1, b1, w2, b2 = params
    return ((x @ w1 + b1).tanh() @ w2 + b2)


def _loss(params, x, y):
    return ((_mlp(params, x) - y) ** 2).mean()


def _params():
    return (T(4, 8), T(8), T(8, 2), T(2))


def test_vmap_grad_per_sample_gradients_match_a_loop():
    params, xs, ys = _params(), T(6, 4), T(6, 2)
    per = vmap(grad(_loss), in_dims=(None, 0, 0))(params, xs, ys)
    for k, p in enumerate(params):
        want = em.stack([grad(_loss)(params, xs[i], ys[i])[k] for i in range(6)])
        assert tuple(per[k].shape) == (6,) + tuple(p.shape)
        close(per[k], want, 1e-10)


def test_grad_of_vmap_matches_grad_of_loop():
    params, xs, ys = _params(), T(6, 4), T(6, 2)
    g = grad(lambda p: vmap(_loss, in_dims=(None, 0, 0))(p, xs, ys).sum())(params)
    want = grad(lambda p: sum(_loss(p, xs[i], ys[i]) for i in range(6)))(params)
    for a, b in zip(g, want):
        close(a, b, 1e-10)


def test_vmap_jvp_and_vmap_vjp_match_loops():
    x, t = T(5, 3), T(5, 3)
    f = lambda v: (v.sin() * v).sum(-1, keepdim=True) * v     # noqa: E731
    out, tan = vmap(lambda a, b: em.func.jvp(f, (a,), (b,)))(x, t)
    for i in range(5):
        o, tt = em.func.jvp(f, (x[i],), (t[i],))
        close(out[i], o)
        close(tan[i], tt, 1e-10)
    cot = T(5, 3)

    def vjp_one(a, c):
        return em.func.vjp(f, a)[1](c)[0]
    got = vmap(vjp_one)(x, cot)
    close(got, loop(vjp_one, x, cot), 1e-10)


def test_vmap_of_jacrev_and_hessian_match_loops():
    x = T(4, 3)
    f = lambda v: (v ** 3).sum()                # noqa: E731
    close(vmap(em.func.jacrev(f))(x), 3 * x ** 2, 1e-10)
    h = vmap(em.func.hessian(f))(x)
    close(h, loop(em.func.hessian(f), x), 1e-10)


def test_grad_of_grad_through_vmap():
    x = T(5)
    f = lambda v: (v.sin() ** 2)                 # noqa: E731
    d2 = vmap(grad(grad(lambda s: f(s))))(x)
    close(d2, 2 * (2 * x).cos(), 1e-10)


def test_per_sample_gradients_match_torch_func():
    torch = pytest.importorskip("torch")
    params, xs, ys = _params(), T(6, 4), T(6, 2)
    per = vmap(grad(_loss), in_dims=(None, 0, 0))(params, xs, ys)
    tp = tuple(torch.from_numpy(p.numpy().copy()) for p in params)

    def tloss(p, x, y):
        w1, b1, w2, b2 = p
        return ((((x @ w1 + b1).tanh() @ w2 + b2) - y) ** 2).mean()
    want = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0, 0))(
        tp, torch.from_numpy(xs.numpy().copy()), torch.from_numpy(ys.numpy().copy()))
    for a, b in zip(per, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


def _inplace_fns():
    def add_slice(a):
        b = a * 2
        b[1:] += a[:-1]
        return (b * a).sum()

    def mul_(a):
        b = a * 2
        b.mul_(a)
        return b.sum()

    def set_slice(a):
        b = a.sin()
        b[1:] = a[:-1] * 5
        return (b * b).sum()

    def view_add(a):
        b = a * 2
        t = b[1:]
        t.add_(a[:-1].exp())
        return (b ** 2).sum()
    return [add_slice, mul_, set_slice, view_add]


@pytest.mark.parametrize("f", _inplace_fns(), ids=lambda f: f.__name__)
def test_inplace_under_grad_of_vmap_and_vmap_of_grad(f):
    x = T(4, 3)
    want = grad(lambda v: sum(f(v[i]) for i in range(4)))(x)
    close(grad(lambda v: vmap(f)(v).sum())(x), want, 1e-10)
    close(vmap(grad(f))(x), want, 1e-10)
    close(vmap(f)(x), em.stack([f(x[i]) for i in range(4)]), 1e-12)


def test_backward_through_vmap_of_a_module_reaches_its_parameters():
    em.manual_seed(0)
    m = em.nn.Sequential(em.nn.Linear(3, 4), em.nn.Tanh(), em.nn.Linear(4, 2)).double()
    x = T(5, 3)
    vmap(m)(x).pow(2).sum().backward()
    got = [p.grad.clone() for p in m.parameters()]
    for p in m.parameters():
        p.grad = None
    m(x).pow(2).sum().backward()
    for g, p in zip(got, m.parameters()):
        close(g, p.grad, 1e-12)


@pytest.mark.parametrize("name", ["eigvalsh", "svdvals"])
def test_jvp_of_vmap_through_value_only_decompositions(name):
    """Composites that pick a differentiable path see an outer jvp's tangents under vmap."""
    f = getattr(em.linalg, name)
    a, t = T(3, 4, 4), T(3, 4, 4)
    a, t = a + a.mT, t + t.mT
    _, got = em.func.jvp(lambda m: vmap(f)(m), (a,), (t,))
    _, want = em.func.jvp(f, (a,), (t,))
    close(got, want, 1e-10)


def test_vmap_inside_compile_replays_per_example_draws_and_writes():
    def one(a):
        b = a * 2
        b[0] = 1.0
        b.add_(1)
        return em.nn.functional.dropout(b, 0.5, training=True)
    cf = em.compile(lambda x: vmap(one, randomness="different")(x))
    x = em.ones(4, 6)
    r1, r2 = cf(x).numpy(), cf(x).numpy()
    assert not np.array_equal(r1, r2)                       # the graph draws again
    assert not all(np.array_equal(r1[0], r) for r in r1[1:])  # per example
    assert set(np.unique(np.concatenate([r1, r2]))) <= {0.0, 4.0, 6.0}
    assert np.all((r1[:, 0] == 0) | (r1[:, 0] == 4.0))


class _Cube(em.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g


def test_custom_function_under_vmap():
    x = T(4, 3)
    close(vmap(_Cube.apply)(x), x ** 3)
    close(vmap(grad(lambda v: _Cube.apply(v).sum()))(x), 3 * x ** 2, 1e-12)
    with pytest.raises(NotImplementedError, match=r"_Cube.apply on a batched tensor that an "
                                                  r"enclosing grad/jvp differentiates"):
        grad(lambda v: vmap(_Cube.apply)(v).sum())(x)


def test_checkpoint_inside_vmap_keeps_gradients():
    from ember.autograd.checkpoint import checkpoint
    f = lambda v: (v.sin() * v).sum()            # noqa: E731
    x = T(4, 3)
    want = x.cos() * x + x.sin()
    close(grad(lambda v: vmap(lambda a: checkpoint(f, a, use_reentrant=False))(v).sum())(x),
          want, 1e-12)
    close(vmap(grad(lambda a: checkpoint(f, a, use_reentrant=False)))(x), want, 1e-12)


@pytest.mark.parametrize("cell", ["LSTM", "GRU", "RNN"])
def test_recurrent_layers_batch_without_a_loop_and_give_per_sample_grads(cell):
    import warnings
    em.manual_seed(0)
    m = getattr(em.nn, cell)(4, 5, batch_first=True).double()
    x = T(3, 2, 6, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)      # no per-example loop fallback
        got = vmap(lambda a: m(a)[0])(x)
    close(got, em.stack([m(x[i])[0] for i in range(3)]), 1e-12)
    p = {k: v.detach() for k, v in m.named_parameters()}

    def loss(p, a):
        return em.func.functional_call(m, p, (a,))[0].pow(2).sum()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        per = vmap(grad(loss), in_dims=(None, 0))(p, x)
    for k in p:
        close(per[k], em.stack([grad(loss)(p, x[i])[k] for i in range(3)]), 1e-10)
