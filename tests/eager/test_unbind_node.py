"""Eager ``unbind``: one autograd node whose backward stacks the output gradients."""
import numpy as np
import pytest

import ember
from ember.errors import GraphError


def _selects(x, d):
    """The composite eager unbind replaced: one ``select`` per slice."""
    return tuple(x.select(d, i) for i in range(x.shape[d]))


def _grads(split, xn, d, used, make=lambda x: x):
    x = ember.tensor(xn, requires_grad=True)
    outs = split(make(x), d)
    w = np.random.default_rng(1).standard_normal(outs[0].shape)
    loss = sum(((o * ember.tensor(w * (k + 1))).sum() for k, o in enumerate(outs) if k in used),
               ember.tensor(0.0, dtype=ember.float64))
    loss.backward()
    return x.grad.numpy(), outs


@pytest.mark.parametrize("shape,d", [((3, 4, 5), 0), ((3, 4, 5), 1), ((3, 4, 5), -1),
                                     ((2, 0, 3), 0), ((4,), 0)])
@pytest.mark.parametrize("used", [(0, 1, 2), (1,), (0, 2)])
def test_gradient_equals_selects_and_numpy(shape, d, used):
    xn = np.random.default_rng(0).standard_normal(shape)
    new, outs = _grads(lambda x, d: x.unbind(d), xn, d, used)
    old, _ = _grads(_selects, xn, d, used)
    np.testing.assert_array_equal(new, old)
    w = np.random.default_rng(1).standard_normal(outs[0].shape if outs else ())
    ref = np.zeros(shape)
    for k in used:
        if k < shape[d]:
            np.moveaxis(ref, d, 0)[k] = w * (k + 1)
    np.testing.assert_array_equal(new, ref)


def test_one_node_for_all_outputs_and_views_of_the_input():
    x = ember.randn(3, 4, 5, dtype=ember.float64, requires_grad=True)
    y = x * 2
    outs = y.unbind(1)
    assert len({id(o.grad_fn) for o in outs}) == 1
    assert outs[0].grad_fn.name() == "UnbindBackward"
    assert [o._out_nr for o in outs] == [0, 1, 2, 3]
    for k, o in enumerate(outs):
        assert o._base is y and o._storage is y._storage
        np.testing.assert_array_equal(o.detach().numpy(), y.detach().numpy()[:, k])
    assert outs[0].grad_fn.next_functions[0][0] is y.grad_fn


def test_permuted_input_gets_gradient_in_its_memory_layout():
    # The GPT's qkv split: the gradient of the permuted view, permuted back, is contiguous
    B, T, H, D = 2, 5, 3, 4
    qkv = ember.randn(B, T, 3 * H * D, dtype=ember.float64, requires_grad=True)
    p = qkv.view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
    q, k, v = p.unbind(0)
    cn = [np.random.default_rng(i).standard_normal(q.shape) for i in range(3)]
    seen = {}
    p.register_hook(lambda g: seen.setdefault("g", g))
    ((q * ember.tensor(cn[0])).sum() + (v * ember.tensor(cn[2])).sum()).backward()
    g = seen["g"]
    assert g.permute(1, 3, 0, 2, 4).is_contiguous()
    ref = np.zeros((B, T, 3, H, D))
    ref[:, :, 0] = cn[0].transpose(0, 2, 1, 3)
    ref[:, :, 2] = cn[2].transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(qkv.grad.numpy(), ref.reshape(B, T, -1))


def test_non_contiguous_input_not_a_dense_permutation():
    xn = np.random.default_rng(0).standard_normal((6, 4, 5))
    new, _ = _grads(lambda x, d: x.unbind(d), xn, 1, (0, 2), make=lambda x: x[::2, :, 1:])
    old, _ = _grads(_selects, xn, 1, (0, 2), make=lambda x: x[::2, :, 1:])
    np.testing.assert_array_equal(new, old)


def test_double_backward_through_the_stack():
    x = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    a, b, c = (x * x).unbind(0)
    g, = ember.autograd.grad((a * b).sum() + c.sum(), x, create_graph=True)
    g.sum().backward()
    xn = x.detach().numpy()
    # d/dx of sum(g): g0 = 2 x0 x1^2, g1 = 2 x1 x0^2, g2 = 2 x2
    ref = np.stack([2 * xn[1] ** 2 + 4 * xn[0] * xn[1], 2 * xn[0] ** 2 + 4 * xn[0] * xn[1],
                    np.full(4, 2.0)])
    np.testing.assert_allclose(x.grad.numpy(), ref, rtol=1e-12)


def test_in_place_write_into_an_output_reaches_the_base_and_the_gradient():
    x = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    y = x * 1
    a, b, c = y.unbind(0)
    v0 = y._version
    b.mul_(3)
    assert y._version == v0 + 1
    np.testing.assert_array_equal(y.detach().numpy()[1], 3 * x.detach().numpy()[1])
    (a.sum() + b.sum() + y.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2.] * 4, [6.] * 4, [1.] * 4])


def test_saved_output_modified_in_place_raises():
    x = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    a, b, c = (x * 1).unbind(0)
    z = a * a
    a.add_(1)
    with pytest.raises(GraphError, match="modified by an inplace operation"):
        z.sum().backward()


def test_no_grad_inference_and_integer_inputs_make_plain_views():
    x = ember.randn(2, 3, requires_grad=True)
    with ember.no_grad():
        outs = x.unbind(0)
    assert all(o.grad_fn is None and not o.requires_grad and o._base is x for o in outs)
    with ember.inference_mode():
        assert all(o.is_inference() for o in ember.randn(2, 3).unbind(1))
    i = ember.arange(6).reshape(2, 3)
    assert [o.tolist() for o in i.unbind(1)] == [[0, 3], [1, 4], [2, 5]]


def test_forward_ad_and_vmap_keep_their_rules():
    import ember.autograd.forward_ad as fwAD
    x = ember.randn(3, 4, dtype=ember.float64)
    t = ember.randn(3, 4, dtype=ember.float64)
    with fwAD.dual_level():
        outs = fwAD.make_dual(x, t).unbind(1)
        np.testing.assert_array_equal(fwAD.unpack_dual(outs[2]).tangent.numpy(),
                                      t.numpy()[:, 2])
    from ember.func import vmap, grad
    f = lambda r: (r.unbind(0)[1] ** 2).sum()  # noqa: E731
    xs = ember.randn(5, 3, 2, dtype=ember.float64)
    g = vmap(grad(f))(xs).numpy()
    ref = np.zeros((5, 3, 2))
    ref[:, 1] = 2 * xs.numpy()[:, 1]
    np.testing.assert_allclose(g, ref, rtol=1e-12)


def test_compiled_function_equals_eager():
    def f(w, x):
        q, k, v = (x @ w).view(2, 3, 3, 4).permute(2, 0, 1, 3).unbind(0)
        return (q * k + v).sum()
    w = ember.randn(5, 12, dtype=ember.float64, requires_grad=True)
    x = ember.randn(2, 3, 5, dtype=ember.float64)

    def step(fn):
        w.grad = None
        fn(w, x).backward()
        return w.grad.numpy().copy()
    eager = step(f)
    cf = ember.compile(f)
    step(cf)
    np.testing.assert_allclose(step(cf), eager, rtol=1e-12, atol=1e-12)


def test_minus_zero_gradient_becomes_plus_zero_like_the_selects_sum():
    # The compiled graph's scatter_stack writes g + 0.0; eager must give the same bits.
    w = ember.tensor(np.array([-0.0, 1.0] * 4, np.float32))
    for split in (lambda t: t.unbind(0), lambda t: _selects(t, 0)):
        t = ember.randn(2, 8).requires_grad_(True)
        a, b = split(t)
        g = ember.autograd.grad((a * w).sum() + (b * 2.0).sum(), [t])[0].numpy()
        assert not np.signbit(g).any()


def _qkv_grad(split, extra=False, dtype=ember.float64):
    B, T, H, D = 2, 5, 3, 4
    qkv = ember.tensor(np.random.default_rng(0).standard_normal((B, T, 3 * H * D)),
                       dtype=dtype, requires_grad=True)
    p = qkv.view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
    q, k, v = split(p)
    seen = {}
    p.register_hook(lambda g: seen.setdefault("g", g))
    g = ember.tensor(np.random.default_rng(1).standard_normal((B, H, T, D)), dtype=dtype)
    y = ember.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    loss = (y * g).sum() + ((k * 3).sum() if extra else 0)
    loss.backward()
    return qkv.grad.numpy(), seen["g"]


@pytest.mark.parametrize("dtype", [ember.float32, ember.float64])
@pytest.mark.parametrize("extra", [False, True])
def test_attention_gradient_written_into_the_unbind_slots(dtype, extra):
    new, g = _qkv_grad(lambda p: p.unbind(0), extra, dtype)
    old, _ = _qkv_grad(lambda p: _selects(p, 0), extra, dtype)
    np.testing.assert_array_equal(new.view(np.uint8), old.view(np.uint8))   # same bits
    # k's gradient is a sum when k is read twice: then the slots are stacked as usual
    assert getattr(g, "_unbind_slots", False) is not extra
    assert g.permute(1, 3, 0, 2, 4).is_contiguous()


def test_attention_of_outputs_of_two_unbinds_is_not_written_into_slots():
    x = ember.randn(3, 2, 4, 5, dtype=ember.float64, requires_grad=True)
    q, k, _ = x.unbind(0)
    v = ember.randn(2, 4, 5, dtype=ember.float64, requires_grad=True)
    ember.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward()
    ref = ember.randn(3, 2, 4, 5, dtype=ember.float64).copy_(x.detach()).requires_grad_()
    q2, k2 = ref[0], ref[1]
    ember.nn.functional.scaled_dot_product_attention(q2, k2, v.detach()).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), ref.grad.numpy())


def test_hooks_retain_grad_and_grad_of_an_output():
    x = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    a, b, c = (x * 2).unbind(0)
    b.retain_grad()
    seen = []
    c.register_hook(lambda g: seen.append(g.detach().numpy().copy()) or g * 10)
    ((a + b * 3).sum() + c.sum()).backward()
    np.testing.assert_array_equal(b.grad.numpy(), np.full(4, 3.0))
    np.testing.assert_array_equal(seen[0], np.ones(4))
    np.testing.assert_array_equal(x.grad.numpy(), [[2.] * 4, [6.] * 4, [20.] * 4])
    a, b, c = (x * 2).unbind(0)
    gb, gx = ember.autograd.grad((b * b).sum() + a.sum(), [b, x])
    np.testing.assert_array_equal(gb.numpy(), 2 * b.detach().numpy())
    np.testing.assert_allclose(gx.numpy()[1], 8 * x.detach().numpy()[1], rtol=1e-15)
    np.testing.assert_array_equal(gx.numpy()[[0, 2]], [[2.] * 4, [0.] * 4])


def test_anomaly_mode_and_checkpoint():
    from ember.utils.checkpoint import checkpoint
    x = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    f = lambda t: (lambda a, b, c: (a * b).sum() + c.sum())(*(t * 1).unbind(0))  # noqa: E731
    f(x).backward()
    ref = x.grad.numpy().copy()
    x.grad = None
    with ember.autograd.detect_anomaly():
        f(x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), ref)
    x.grad = None
    checkpoint(f, x, use_reentrant=False).backward()
    np.testing.assert_array_equal(x.grad.numpy(), ref)
