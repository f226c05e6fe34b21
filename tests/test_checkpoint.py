"""Gradient checkpointing: gradients bitwise equal to the plain run, and memory that drops."""
import warnings

import numpy as np
import pytest

import ember as em
import ember.nn as nn
import ember.nn.functional as F
from ember.errors import GraphError
from op_names import OpNames


def _grads(tensors):
    return [None if t.grad is None else t.grad.numpy().copy() for t in tensors]


def _clear(tensors):
    for t in tensors:
        t.grad = None


def _same_both_ways(fn, make_loss, leaves):
    """Run ``make_loss(fn)`` plainly and checkpointed from the same RNG state; compare."""
    state = em.get_rng_state()
    make_loss(fn).backward()
    plain = _grads(leaves)
    _clear(leaves)
    em.set_rng_state(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # no trap warnings
        make_loss(lambda *a, **k: em.checkpoint(fn, *a, **k)).backward()
    ckpt = _grads(leaves)
    _clear(leaves)
    assert len(plain) == len(ckpt)
    for i, (a, b) in enumerate(zip(plain, ckpt)):
        assert (a is None) == (b is None), f"leaf {i}: gradient presence differs"
        if a is not None:
            assert np.array_equal(a, b), f"leaf {i}: max diff {np.abs(a - b).max()}"
    return plain


@pytest.fixture
def mlp():
    em.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 5))


def test_module_with_dropout_bitwise(mlp):
    x = em.randn(8, 6, requires_grad=True)
    leaves = [x] + list(mlp.parameters())
    grads = _same_both_ways(mlp, lambda f: (f(x) ** 2).sum(), leaves)
    assert all(g is not None for g in grads)


def test_rng_stream_after_checkpoint_is_unchanged(mlp):
    """The recompute replays the generator and then puts it back where it was."""
    x = em.randn(4, 6, requires_grad=True)
    y = em.checkpoint(mlp, x)
    after_forward = em.get_rng_state().numpy().copy()
    y.sum().backward()
    assert np.array_equal(em.get_rng_state().numpy(), after_forward)


def test_explicit_generator_is_replayed():
    g = em.Generator().manual_seed(7)
    w = em.randn(5, requires_grad=True)

    def fn(x):
        return x * em.rand(5, generator=g) * w

    x = em.randn(5, requires_grad=True)
    s = g.get_state()
    fn(x).sum().backward()
    plain = (x.grad.numpy().copy(), w.grad.numpy().copy())
    _clear([x, w])
    g.set_state(s)
    em.checkpoint(fn, x).sum().backward()
    assert np.array_equal(plain[0], x.grad.numpy()) and np.array_equal(plain[1], w.grad.numpy())


def test_preserve_rng_state_false_draws_a_new_mask():
    em.manual_seed(1)
    x = em.ones(200, requires_grad=True)
    y = em.checkpoint(lambda t: F.dropout(t, 0.5), x, preserve_rng_state=False)
    y.backward(em.ones(200))
    assert not np.array_equal((x.grad.numpy() != 0), (y.detach().numpy() != 0))


def test_nested_checkpoints(mlp):
    x = em.randn(3, 6, requires_grad=True)
    inner = lambda t: em.checkpoint(mlp[0], t).tanh()   # noqa: E731

    def outer(t):
        return mlp[3](em.checkpoint(inner, t) * 2 + em.checkpoint(mlp[1], inner(t)))

    _same_both_ways(outer, lambda f: f(x).sum(), [x] + list(mlp.parameters()))


def test_kwargs_and_nested_non_tensor_outputs():
    w = em.randn(4, 4, requires_grad=True)

    def fn(x, *, scale, bias=None):
        h = (x @ w).sin() * scale
        return {"h": h, "pair": (h.exp(), 3), "name": "block", "bias": bias}

    x = em.randn(2, 4, requires_grad=True)
    b = em.randn(4)

    def loss(f):
        out = f(x, scale=1.5, bias=b)
        assert out["name"] == "block" and out["pair"][1] == 3 and out["bias"] is not None
        return out["h"].sum() + (out["pair"][0] * out["bias"]).sum()

    _same_both_ways(fn, loss, [x, w])


def test_inputs_without_requires_grad_still_give_parameter_grads(mlp):
    """PyTorch's reentrant checkpoint drops these gradients; Ember's must not."""
    mlp.eval()
    x = em.randn(4, 6)            # the input does not require grad
    grads = _same_both_ways(mlp, lambda f: f(x).sum(), list(mlp.parameters()))
    assert all(g is not None and np.any(g != 0) for g in grads)


def test_captured_non_leaf_tensor_gets_its_gradient():
    a = em.randn(3, requires_grad=True)
    x = em.randn(3, requires_grad=True)
    grads = []
    for wrap in (lambda f, t: f(t), em.checkpoint):
        h = a.exp()                   # a non-leaf captured by the closure
        y = wrap(lambda t: (t * h).sin(), x)
        (y + h).sum().backward()
        grads.append(_grads([a, x]))
        _clear([a, x])
    for g0, g1 in zip(*grads):
        assert g0 is not None and np.array_equal(g0, g1)


def test_only_some_outputs_used():
    w = em.randn(3, requires_grad=True)
    fn = lambda x: (x * w, (x + w).exp())   # noqa: E731
    x = em.randn(3, requires_grad=True)
    _same_both_ways(fn, lambda f: f(x)[1].sum(), [x, w])


def test_output_that_is_the_input():
    x = em.randn(3, requires_grad=True)
    y, z = em.checkpoint(lambda t: (t, t * 2), x)
    assert y is not x and y.grad_fn is not None and x.grad_fn is None
    (y + z).sum().backward()
    assert np.array_equal(x.grad.numpy(), np.full(3, 3, np.float32))


def test_create_graph_second_order():
    x = em.randn(5, dtype=em.float64, requires_grad=True)
    w = em.randn(5, dtype=em.float64, requires_grad=True)
    fn = lambda t: (t.sin() * w * t).exp()   # noqa: E731

    def second(f):
        gx, gw = em.autograd.grad(f(x).sum(), (x, w), create_graph=True)
        return em.autograd.grad((gx * gx).sum() + gw.sum(), (x, w))

    plain = second(fn)
    ckpt = second(lambda t: em.checkpoint(fn, t))
    for a, b in zip(plain, ckpt):
        assert np.array_equal(a.numpy(), b.numpy())


def test_batchnorm_running_stats_update_once():
    em.manual_seed(0)
    bn = nn.BatchNorm1d(4)
    x = em.randn(8, 4, requires_grad=True)
    y = em.checkpoint(bn, x)
    mean = bn.running_mean.numpy().copy()
    y.sum().backward()
    assert np.array_equal(bn.running_mean.numpy(), mean)
    assert int(bn.num_batches_tracked.item()) == 1


def test_under_no_grad_returns_plain_result():
    x = em.randn(3, requires_grad=True)
    with em.no_grad():
        y = em.checkpoint(lambda t: t * 2, x)
    assert y.grad_fn is None and not y.requires_grad


def test_input_modified_in_place_before_backward_raises():
    x = em.randn(3, requires_grad=True)
    h = x * 1
    y = em.checkpoint(lambda t: t.exp(), h)
    with em.no_grad():
        h.add_(1)
    with pytest.raises(GraphError, match="modified by an inplace operation.*checkpoint"):
        y.sum().backward()


def test_second_backward_without_retain_graph_raises():
    x = em.randn(3, requires_grad=True)
    y = em.checkpoint(lambda t: t.exp(), x).sum()
    y.backward()
    with pytest.raises(GraphError, match="second time"):
        y.backward()


def test_retain_graph_allows_two_backwards():
    x = em.randn(3, requires_grad=True)
    y = em.checkpoint(lambda t: t.exp(), x).sum()
    y.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.backward()
    assert np.array_equal(x.grad.numpy(), 2 * first)


def test_bad_arguments():
    with pytest.raises(TypeError, match="checkpoint: expected a callable"):
        em.checkpoint(3, em.ones(2))
    with pytest.raises(ValueError, match="unknown policy 'fast'"):
        em.checkpoint(lambda t: t, em.ones(2), policy="fast")
    with pytest.raises(ValueError, match=r"segments must be an int in \[1, 2\]"):
        em.checkpoint_sequential([em.exp, em.sin], 3, em.ones(2))
    with pytest.raises(TypeError, match="function 1 is a int"):
        em.checkpoint_sequential([em.exp, 4], 1, em.ones(2))


# --------------------------------------------------------------------- selective policies
@pytest.mark.parametrize("policy", ["save_matmul_conv", {"matmul", "relu"},
                                    lambda name, inputs, params: name == "matmul"])
def test_selective_policy_bitwise_and_skips_matmul_recompute(mlp, policy):
    x = em.randn(8, 6, requires_grad=True)
    leaves = [x] + list(mlp.parameters())
    state = em.get_rng_state()
    (mlp(x) ** 2).sum().backward()
    plain = _grads(leaves)
    _clear(leaves)
    em.set_rng_state(state)
    y = em.checkpoint(mlp, x, policy=policy)
    with OpNames() as c:
        (y ** 2).sum().backward()
    for a, b in zip(plain, _grads(leaves)):
        assert np.array_equal(a, b)
    # backward of the plain graph: 2 matmuls per Linear (dx, dW) but no forward matmul
    with OpNames() as ref:
        em.set_rng_state(state)
        (mlp(x) ** 2).sum().backward()
    assert c.names.count("matmul") == ref.names.count("matmul") - 2


def test_policy_none_recomputes_the_forward(mlp):
    x = em.randn(8, 6, requires_grad=True)
    y = em.checkpoint(mlp, x)
    with OpNames() as c:
        y.sum().backward()
    with OpNames() as ref:
        mlp(x).sum().backward()
    assert c.names.count("matmul") == ref.names.count("matmul")


# --------------------------------------------------------------------- sequential + memory
def _deep(n, width, seed=0):
    em.manual_seed(seed)
    layers = []
    for _ in range(n):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


@pytest.mark.parametrize("segments", [None, 1, 3, 8])
def test_checkpoint_sequential_bitwise(segments):
    model = _deep(8, 16)
    x = em.randn(4, 16, requires_grad=True)
    leaves = [x] + list(model.parameters())
    model(x).sum().backward()
    plain = _grads(leaves)
    _clear(leaves)
    em.checkpoint_sequential(model, segments, x).sum().backward()
    for a, b in zip(plain, _grads(leaves)):
        assert np.array_equal(a, b)


def test_checkpoint_sequential_accepts_lists_and_two_argument_form():
    fns = [em.sin, em.exp, em.tanh, em.cos]
    x = em.randn(5, requires_grad=True)
    a = em.checkpoint_sequential(fns, x)
    b = em.utils.checkpoint.checkpoint_sequential(fns, 2, x)
    assert np.array_equal(a.detach().numpy(), b.detach().numpy())


def _activation_peak(run, model, x):
    """Peak live bytes above params, their (pre-allocated) grads and the input."""
    for p in model.parameters():
        p.grad = em.zeros_like(p)     # as after zero_grad(set_to_none=False): no new grads
    em.reset_peak_memory_stats()
    base = em.memory_stats()["current_bytes"]
    run(model, x).sum().backward()
    return em.memory_stats()["peak_bytes"] - base


def test_memory_drops_with_checkpointing():
    n, width, batch = 16, 64, 1024
    model = _deep(n, width)
    x = em.randn(batch, width)
    act = batch * width * 4
    plain = _activation_peak(lambda m, t: m(t), model, x)
    seg4 = _activation_peak(lambda m, t: em.checkpoint_sequential(m, 4, t), model, x)
    sqrt_n = _activation_peak(lambda m, t: em.checkpoint_sequential(m, None, t), model, x)
    # plain keeps one activation per Linear+ReLU (the ReLU output, also the next matmul's
    # input); 4 segments of 4 layers keep 3 boundaries + the last segment, then one
    # recomputed segment at a time (+ the backward's temporaries: ~2 activations)
    assert plain >= n * act
    assert seg4 <= 0.6 * plain
    assert sqrt_n <= 0.7 * plain          # sqrt(32 modules) -> 6 segments


def _live_after_forward(run, model, x):
    base = em.memory_stats()["current_bytes"]
    y = run(model, x)
    live = em.memory_stats()["current_bytes"] - base
    del y
    return live


class _Block(nn.Module):
    """Linear -> LayerNorm -> GELU -> * sigmoid: several saved values per matmul."""

    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        h = F.gelu(self.norm(self.fc(x)))
        return h * h.sigmoid()


def test_selective_policy_keeps_less_than_plain_more_than_nothing():
    em.manual_seed(0)
    model = nn.Sequential(*[_Block(64) for _ in range(4)])
    x = em.randn(256, 64, requires_grad=True)
    plain = _live_after_forward(lambda m, t: m(t), model, x)
    full = _live_after_forward(lambda m, t: em.checkpoint(m, t), model, x)
    sel = _live_after_forward(lambda m, t: em.checkpoint(m, t, policy="save_matmul_conv"),
                              model, x)
    act = 256 * 64 * 4
    assert full <= act + 64               # only the output (+ the 52-byte RNG state)
    assert sel == full + 4 * act          # + the four matmul outputs
    assert sel < plain / 2
    leaves = [x] + list(model.parameters())
    _same_both_ways(lambda t: model(t), lambda f: f(x).sum(), leaves)
    state = em.get_rng_state()
    model(x).sum().backward()
    plain_g = _grads(leaves)
    _clear(leaves)
    em.set_rng_state(state)
    em.checkpoint(model, x, policy="save_matmul_conv").sum().backward()
    for a, b in zip(plain_g, _grads(leaves)):
        assert np.array_equal(a, b)


def test_autograd_grad_through_checkpoint_returns_grads_and_leaves_dot_grad_alone(mlp):
    from ember.autograd.engine import accumulating
    x = em.randn(4, 6, requires_grad=True)
    params = list(mlp.parameters())
    seen = []

    def block(h):
        seen.append(accumulating())        # recorded forward (False) and the recompute
        return mlp(h)
    state = em.get_rng_state()
    want = em.autograd.grad(mlp(x).sum(), [x] + params)
    em.set_rng_state(state)
    got = em.autograd.grad(em.checkpoint(block, x).sum(), [x] + params)
    assert seen == [False, False]          # autograd.grad: the recompute must not accumulate
    assert all(p.grad is None for p in params) and x.grad is None
    for a, b in zip(want, got):
        assert np.array_equal(a.numpy(), b.numpy())
    em.set_rng_state(state)
    em.checkpoint(block, x).sum().backward()
    assert seen[-1] is True                # .backward(): the recompute runs inside it
    assert not accumulating()
