"""``ember.autograd.graph``'s saved-tensor hooks (torch.autograd.graph): what a node saves
goes through ``pack_hook`` in the forward and ``unpack_hook`` in the backward — registry
ops, custom Functions, double backward — and ``save_on_cpu`` /
``disable_saved_tensors_hooks``. PyTorch's gradients and hook counts where it is installed."""
import contextlib

import numpy as np
import pytest

import ember as em
from ember.autograd.graph import (disable_saved_tensors_hooks, increment_version,
                                  save_on_cpu, saved_tensors_hooks)

A = [1.0, 2.0, 3.0]
B = [0.5, -1.0, 2.0]


def _program(lib, hooks, create_graph=False):
    a = lib.tensor(A, dtype=lib.float64, requires_grad=True)
    b = lib.tensor(B, dtype=lib.float64, requires_grad=True)
    with hooks:
        c = (a * b).exp()
        y = (c * a).sin().sum()
    g = lib.autograd.grad(y, (a, b), create_graph=create_graph)
    if create_graph:
        g = g + lib.autograd.grad(g[0].sum(), (a, b))
    return [t.detach().numpy() for t in g]


class _Counting:
    def __init__(self, lib, scale=1.0):
        self.packs = self.unpacks = 0
        self.lib, self.scale = lib, scale

    def hooks(self):
        def pack(t):
            self.packs += 1
            return t.detach().numpy().copy() * self.scale      # a host copy, not the tensor

        def unpack(a):
            self.unpacks += 1
            return self.lib.from_numpy(a)
        return self.lib.autograd.graph.saved_tensors_hooks(pack, unpack)


@pytest.mark.parametrize("create_graph", [False, True])
def test_round_trip_hooks_leave_gradients_as_they_were(create_graph):
    plain = _program(em, em.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t),
                     create_graph)
    ref = _program(em, contextlib.nullcontext(), create_graph)
    counting = _Counting(em)
    hooked = _program(em, counting.hooks(), create_graph)
    for p, r, h in zip(plain, ref, hooked):
        if create_graph:
            # NOTE: a packed input's unpacked value reaches its origin through one more
            # node, which can change the order second-order contributions are summed in
            np.testing.assert_allclose(p, r, rtol=1e-13, atol=0)
            np.testing.assert_allclose(h, r, rtol=1e-13, atol=0)
        else:
            np.testing.assert_array_equal(p, r)
            np.testing.assert_array_equal(h, r)
    assert counting.packs > 0 and counting.unpacks >= counting.packs


def test_the_backward_reads_what_unpack_returns():
    # saved values doubled: exp's saved output and the products' saved inputs are wrong
    # by design, so the gradient changes (PyTorch's behaviour: hooks own the values)
    counting = _Counting(em, scale=2.0)
    got = _program(em, counting.hooks())
    ref = _program(em, contextlib.nullcontext())
    assert not np.allclose(got[0], ref[0])
    a = em.tensor(A, dtype=em.float64, requires_grad=True)
    with _Counting(em, scale=2.0).hooks():
        y = (a * a).sum()                     # both saved inputs doubled: grad 2 * (2a)
    y.backward()
    np.testing.assert_array_equal(a.grad.numpy(), 4 * np.array(A))


def test_custom_functions_pack_their_saved_tensors():
    class Cube(em.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x * x * x
            ctx.save_for_backward(x, y)
            return y

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return 3 * g * y / x

    counting = _Counting(em)
    x = em.tensor([2.0, -1.0], dtype=em.float64, requires_grad=True)
    with counting.hooks():
        y = Cube.apply(x)
    y.sum().backward()
    assert (counting.packs, counting.unpacks) == (2, 2)
    np.testing.assert_allclose(x.grad.numpy(), [12.0, 3.0])


def test_innermost_hooks_apply_and_hooks_never_record():
    outer, inner = _Counting(em), _Counting(em)
    a = em.tensor(A, requires_grad=True)
    with outer.hooks():
        with inner.hooks():
            y = (a * a).sum()
    y.backward()
    assert outer.packs == 0 and inner.packs == 2
    seen = []
    with saved_tensors_hooks(lambda t: seen.append(em.is_grad_enabled()) or t * 1,
                             lambda t: t):
        (a * a).sum()
    assert seen == [False, False]


def test_freed_after_backward_and_version_bumps():
    a = em.tensor(A, requires_grad=True)
    with _Counting(em).hooks():
        y = (a * a).sum()
    y.backward()
    with pytest.raises(em.errors.GraphError, match="backward through the graph a second time"):
        y.backward()
    b = em.tensor(A, requires_grad=True)
    z = (b * b).sum()
    increment_version(b)
    with pytest.raises(em.errors.GraphError, match="modified by an inplace operation"):
        z.backward()


def test_disable_refuses_hooks_with_the_message():
    with disable_saved_tensors_hooks("activation offloading is off here"):
        with pytest.raises(RuntimeError, match="activation offloading is off here"):
            with saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
    with saved_tensors_hooks(lambda t: t, lambda t: t):
        with pytest.raises(RuntimeError, match="no hooks"):
            with disable_saved_tensors_hooks("no hooks"):
                pass


def test_save_on_cpu_keeps_cpu_tensors_and_gradients():
    ref = _program(em, contextlib.nullcontext())
    got = _program(em, save_on_cpu())
    for r, g in zip(ref, got):
        np.testing.assert_array_equal(r, g)


@pytest.mark.parametrize("create_graph", [False, True])
def test_matches_pytorch_gradients_and_hook_counts(create_graph):
    torch = pytest.importorskip("torch")
    mine, theirs = _Counting(em), _Counting(torch)
    got = _program(em, mine.hooks(), create_graph)
    want = _program(torch, theirs.hooks(), create_graph)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert (mine.packs, mine.unpacks) == (theirs.packs, theirs.unpacks)
    scaled = _program(em, _Counting(em, 2.0).hooks())
    for g, w in zip(scaled, _program(torch, _Counting(torch, 2.0).hooks())):
        np.testing.assert_allclose(g, w, rtol=1e-12)
