"""Leaf tensor hooks run once per backward on the summed gradient; gradient edges
(``GradientEdge``, ``get_gradient_edge``) as ``autograd.grad`` inputs and outputs;
``register_multi_grad_hook`` in both modes."""
import numpy as np
import pytest

import ember as em
from ember.autograd.graph import GradientEdge, get_gradient_edge, register_multi_grad_hook


def _l(g):
    return None if g is None else g.tolist()


def test_leaf_hook_runs_once_on_the_whole_gradient():
    x = em.tensor([1.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: (seen.append(g.tolist()), g.clamp(-1, 1))[1])
    (x * 2 + x * 3).sum().backward()
    assert seen == [[5.0]] and x.grad.tolist() == [1.0]      # clamp(5), not clamp(2)+clamp(3)
    (x * 4).sum().backward()                                  # a second pass: one more call
    assert seen == [[5.0], [4.0]] and x.grad.tolist() == [2.0]


def test_leaf_hook_runs_under_autograd_grad_and_backward_inputs():
    x = em.tensor(1.0, requires_grad=True)
    x.register_hook(lambda g: g * 10)
    assert em.autograd.grad(x * 2 + x * 3, x)[0].item() == 50.0
    (x * 2 + x * 3).backward(inputs=[x])
    assert x.grad.item() == 50.0                              # once, not 500
    y = x * 1
    y.register_hook(lambda g: g * 10)
    assert em.autograd.grad(y * 2 + y * 3, y)[0].item() == 50.0


def test_post_accumulate_hook_sees_the_summed_leaf_gradient():
    w = em.tensor([1.0, 2.0], requires_grad=True)
    order = []
    w.register_hook(lambda g: order.append(("hook", g.tolist())))
    w.register_post_accumulate_grad_hook(lambda t: order.append(("post", t.grad.tolist())))
    (w * 2 + w * w).sum().backward()
    assert order == [("hook", [4.0, 6.0]), ("post", [4.0, 6.0])]


def test_leaf_with_a_none_gradient_edge_keeps_what_arrived():
    class HalfNone(em.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g * 3, None      # no gradient for b, though b requires grad
    x = em.tensor([1.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.tolist()))
    (HalfNone.apply(x, x) + x).sum().backward()
    assert seen == [[4.0]] and x.grad.tolist() == [4.0]


def test_gradient_edges_split_a_backward():
    x = em.tensor([1.0, 2.0], requires_grad=True)
    w = em.tensor([3.0, 4.0], requires_grad=True)
    h = x * w
    e = get_gradient_edge(h)
    assert isinstance(e, GradientEdge) and e.node is h.grad_fn and e.output_nr == 0
    assert get_gradient_edge(x).node is get_gradient_edge(x).node
    assert get_gradient_edge(x).node is h.grad_fn.next_functions[0][0]
    (dh,) = em.autograd.grad((h * h).sum(), e, retain_graph=True)
    np.testing.assert_array_equal(dh.numpy(), 2 * h.detach().numpy())
    (dx,) = em.autograd.grad(h, x, grad_outputs=dh, retain_graph=True)   # input grad first
    (dw,) = em.autograd.grad(e, w, grad_outputs=dh)                      # weights later
    np.testing.assert_array_equal(dx.numpy(), dh.numpy() * w.detach().numpy())
    np.testing.assert_array_equal(dw.numpy(), dh.numpy() * x.detach().numpy())
    (dl,) = em.autograd.grad((x * 3).sum(), get_gradient_edge(x))         # a leaf's edge
    assert dl.tolist() == [3.0, 3.0]


def test_gradient_edge_errors():
    with pytest.raises(RuntimeError, match="does not require gradients"):
        get_gradient_edge(em.ones(2))
    x = em.ones(2, requires_grad=True)
    h = x * 2
    with pytest.raises(RuntimeError, match="needs its gradient in grad_outputs"):
        em.autograd.grad(get_gradient_edge(h), x)
    with pytest.raises(RuntimeError, match="GradientEdge of MulBackward output 0"):
        em.autograd.grad((x * 3).sum(), get_gradient_edge(h))


def test_multi_grad_hook_all_mode():
    a, b, c = (em.tensor([float(i)], requires_grad=True) for i in (1, 2, 3))
    got = []
    handle = register_multi_grad_hook((a, b, c), lambda gs: got.append([_l(g) for g in gs]))
    (a * 2 + b * 3).sum().backward()
    (a * 5).sum().backward()
    assert got == [[[2.0], [3.0], None], [[5.0], None, None]]
    handle.remove()
    (a * 2).sum().backward()
    assert len(got) == 2
    m, n = a * 1, b * 1                   # non-leaf tensors; one gradient is zero, not None
    register_multi_grad_hook((m, n), lambda gs: got.append([_l(g) for g in gs]))
    (m * 7 + n * 0).sum().backward()
    assert got[-1] == [[7.0], [0.0]]
    register_multi_grad_hook((a, b), lambda gs: got.append([_l(g) for g in gs]))
    em.autograd.grad((a * 4 + b).sum(), a)       # autograd.grad computes a's gradient only
    assert got[-1] == [[4.0], None]


def test_multi_grad_hook_any_mode_and_bad_mode():
    a, b = em.tensor([1.0], requires_grad=True), em.tensor([2.0], requires_grad=True)
    got = []
    register_multi_grad_hook((a, b), lambda g: got.append(g.tolist()), mode="any")
    (a * 2 + b * 3).sum().backward()
    (a * 2 + b * 3).sum().backward()
    assert len(got) == 2 and got[0] in ([2.0], [3.0])
    with pytest.raises(ValueError, match="'all' or 'any'"):
        register_multi_grad_hook((a,), print, mode="some")


def test_node_hooks_and_prehooks():
    x = em.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    post, pre = [], []
    y.grad_fn.register_hook(lambda gi, go: post.append((_l(gi[0]), _l(gi[1]), _l(go[0]))))
    y.grad_fn.register_prehook(lambda go: (pre.append(_l(go[0])), (go[0] * 10,))[1])
    y.sum().backward()
    assert pre == [[1.0, 1.0]] and post == [([30.0, 30.0], None, [10.0, 10.0])]
    assert x.grad.tolist() == [30.0, 30.0]
    z = x * 1
    handle = z.grad_fn.register_hook(lambda gi, go: (gi[0] * 0, None))   # replaces grad_inputs
    x.grad = None
    z.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0]
    handle.remove()
    x.grad = None
    (x * 1).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]
    w = x * 2
    w.grad_fn.register_hook(lambda gi, go: (gi[0],))
    with pytest.raises(RuntimeError, match=r"incorrect number of values \(got 1, but expected 2"):
        w.sum().backward()


def test_accumulate_grad_node_hooks_the_ddp_way():
    p = em.nn.Parameter(em.ones(3))
    tmp = p.expand_as(p)
    assert tmp.grad_fn is not None and tmp.grad_fn.name() == "ExpandBackward"
    acc = tmp.grad_fn.next_functions[0][0]
    assert acc is get_gradient_edge(p).node
    calls = []
    acc.register_hook(lambda gi, go: calls.append((gi, _l(go[0]))))
    acc.register_prehook(lambda go: (go[0] * 2,))
    (p * 2).sum().backward()
    assert calls == [((), [4.0, 4.0, 4.0])] and p.grad.tolist() == [4.0, 4.0, 4.0]
