"""Layouts of new tensors, by PyTorch's rules (``ember/ops/layout.py``): the ``*_like``
factories' ``memory_format`` (default ``preserve_format``) and the output layout of
elementwise ops whose operands disagree (the first operand's wins, as TensorIterator's).
PyTorch, where installed, is the oracle for the strides; the values are checked against
NumPy."""
import itertools

import numpy as np
import pytest

import ember as em
from ember.ops import dispatch

LIKE = ["zeros_like", "ones_like", "empty_like", "rand_like", "randn_like"]


def _x(shape=(2, 3, 4, 5), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _views(m, t):
    """The same views of a (2, 3, 4, 5) tensor in Ember or PyTorch (module ``m``)."""
    cl = t.to(memory_format=m.channels_last)
    return {"channels_last": cl, "transposed": t.transpose(1, 3), "sliced": t[:, ::2],
            "channels_last_sliced": cl[:, :, ::2], "channel_1": t[:, :1].contiguous(
                memory_format=m.channels_last), "expanded": t[:1].expand(3, 3, 4, 5),
            "row_major": t}


@pytest.mark.parametrize("fn", LIKE + ["full_like", "randint_like"])
def test_like_factories_keep_a_dense_inputs_strides(fn):
    t = em.tensor(_x())
    for name, v in _views(em, t).items():
        args = (2.0,) if fn == "full_like" else (5,) if fn == "randint_like" else ()
        out = getattr(em, fn)(v, *args)
        assert out.shape == v.shape and out._base is None, name
        want = {"channels_last": v.stride(), "transposed": v.stride(),
                "channel_1": v.stride(),
                # not dense: channels-last strides as suggested, else row-major
                "channels_last_sliced": (30, 1, 15, 3), "sliced": (40, 20, 5, 1),
                "expanded": (60, 20, 5, 1), "row_major": (60, 20, 5, 1)}[name]
        assert out.stride() == want, (name, out.stride())


def test_like_factories_values_and_explicit_formats():
    v = em.tensor(_x()).to(memory_format=em.channels_last)
    assert np.all(em.full_like(v, 2.5).numpy() == 2.5)
    assert np.all(em.zeros_like(v).numpy() == 0) and np.all(em.ones_like(v).numpy() == 1)
    assert em.zeros_like(v, memory_format=em.contiguous_format).is_contiguous()
    assert em.empty_like(v.contiguous(), memory_format=em.channels_last).is_contiguous(
        memory_format=em.channels_last)
    assert em.ones_like(v, dtype=em.float64).stride() == v.stride()
    r = em.randn_like(v, requires_grad=True)
    assert r.requires_grad and r.is_leaf and r.stride() == v.stride()
    with pytest.raises(RuntimeError, match="zeros_like: required rank 4 tensor to use "
                                           "channels_last"):
        em.zeros_like(em.ones(2, 3), memory_format=em.channels_last)
    with pytest.raises(TypeError, match="ones_like: memory_format must be"):
        em.ones_like(v, memory_format="channels_last")
    assert em.empty(2, 3, 4, 5, memory_format=em.channels_last).stride() == (60, 1, 15, 3)
    assert em.empty(2, 3, 4, 5, 6, memory_format=em.channels_last_3d).stride() == \
        (360, 1, 90, 18, 3)


def test_random_like_fills_memory_in_order():
    # The samples fill memory in order (PyTorch's fill kernels do): a channels-last
    # rand_like holds, in memory, the numbers a flat draw of the same generator gives.
    v = em.tensor(_x()).to(memory_format=em.channels_last)
    for fn, flat in [("rand_like", em.rand), ("randn_like", em.randn)]:
        a = getattr(em, fn)(v, generator=em.Generator().manual_seed(7))
        b = flat(120, generator=em.Generator().manual_seed(7))
        assert np.array_equal(a.permute(0, 2, 3, 1).reshape(-1).numpy(), b.numpy())


def test_like_factories_row_major_under_compile():
    # Under ember.compile's tracer a *_like result is row-major (the compiler plans
    # layouts); the values are the same.
    f = em.compile(lambda x: em.zeros_like(x) + em.ones_like(x) * 2)
    v = em.tensor(_x()).to(memory_format=em.channels_last)
    for _ in range(3):
        assert np.all(f(v).numpy() == 2)


def test_elementwise_output_takes_the_first_operands_layout():
    a, b = _x(seed=1), _x(seed=2)
    cl = em.tensor(a).to(memory_format=em.channels_last)
    rm = em.tensor(b)
    cases = {"cl + rm": (cl + rm, a + b, (60, 1, 15, 3)),
             "rm + cl": (rm + cl, b + a, (60, 20, 5, 1)),
             "cl * 2 - rm": (cl * 2 - rm, a * 2 - b, (60, 1, 15, 3)),
             "bias + cl": (em.tensor(b[0, :, :1, :1]) + cl, b[0, :, :1, :1] + a,
                           (60, 1, 15, 3)),
             "where": (em.where(cl > 0, cl, rm), np.where(a > 0, a, b), (60, 1, 15, 3)),
             "transposed": (cl.transpose(2, 3) + rm.transpose(2, 3),
                            (a + b).transpose(0, 1, 3, 2), (60, 1, 3, 15)),
             "maximum": (em.maximum(cl, rm), np.maximum(a, b), (60, 1, 15, 3))}
    for name, (got, want, strides) in cases.items():
        assert got.stride() == strides, (name, got.stride())
        np.testing.assert_array_equal(got.numpy(), want, err_msg=name)
    t = em.tensor(_x((3, 4))).t()
    s = t + em.tensor(_x((4, 3), 1))
    assert s.stride() == (1, 4)
    assert cl.contiguous().is_contiguous() and (cl + rm).contiguous().is_contiguous()


def test_large_unary_ops_keep_the_layout_in_the_generated_kernels():
    # Past dispatch._EAGER_MIN elements, elementwise ops run generated kernels, which write
    # row-major: the operands are seen in memory order, so the layout stays.
    n = dispatch._EAGER_MIN
    x = _x((2, 8, 64, n // 512), seed=3)
    cl = em.tensor(x).to(memory_format=em.channels_last)
    for f, ref in [(em.exp, np.exp), (lambda t: t * 3 + 1, lambda a: a * 3 + 1)]:
        got = f(cl)
        assert got.is_contiguous(memory_format=em.channels_last)
        np.testing.assert_allclose(got.numpy(), ref(x), rtol=1e-6)


def test_gradients_through_mixed_layouts():
    a = em.tensor(_x(seed=4).astype(np.float64)).to(memory_format=em.channels_last)
    b = em.tensor(_x(seed=5).astype(np.float64))
    a.requires_grad_(True)
    b.requires_grad_(True)
    assert em.autograd.gradcheck(lambda x, y: (x * y + x.exp()).sum(), (a, b))
    (a * b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), b.detach().numpy())
    np.testing.assert_array_equal(b.grad.numpy(), a.detach().numpy())


def test_strides_match_pytorch():
    torch = pytest.importorskip("torch")
    x = _x()
    tv, ev = _views(torch, torch.from_numpy(x)), _views(em, em.tensor(x))
    for name in tv:
        for fn in LIKE:
            assert getattr(torch, fn)(tv[name]).stride() == getattr(em, fn)(ev[name]).stride(), \
                (name, fn)
        for mf in ("contiguous_format", "channels_last", "preserve_format"):
            assert torch.empty_like(tv[name], memory_format=getattr(torch, mf)).stride() == \
                em.empty_like(ev[name], memory_format=getattr(em, mf)).stride(), (name, mf)
    # elementwise ops on every pair of layouts (permutations of a 4-D tensor, broadcasts)
    y = _x(seed=1)
    perms = list(itertools.permutations(range(4)))[::5]
    for p, q in itertools.product(perms, repeat=2):
        tp = torch.from_numpy(x).permute(*p).contiguous().permute(*np.argsort(p))
        tq = torch.from_numpy(y).permute(*q).contiguous().permute(*np.argsort(q))
        ep = em.tensor(x).permute(*p).contiguous().permute(*np.argsort(p).tolist())
        eq = em.tensor(y).permute(*q).contiguous().permute(*np.argsort(q).tolist())
        assert (tp * tq).stride() == (ep * eq).stride(), (p, q)
        assert (tp[:, :1] - tq).stride() == (ep[:, :1] - eq).stride(), (p, q)


def test_empty_tensors_report_row_major_strides():
    # NumPy gives a new zero-size array zero strides; PyTorch's strides are row-major
    # (a dim of size 0 counts as 1); views keep the strides they were cut with.
    for shape, want in [((2, 4, 0, 5), (20, 5, 5, 1)), ((0,), (1,)), ((3, 0), (1, 1)),
                        ((0, 3), (3, 1))]:
        for make in (em.zeros, em.empty, em.randn):
            assert make(*shape).stride() == want, (make.__name__, shape)
    v = em.zeros(2, 3, 4, 5)[:, :0].transpose(1, 2)
    assert v.stride() == (60, 5, 20, 1)


def test_compiled_calls_return_the_layout_eager_gave():
    # Inductor's keep_output_stride: every call of a compiled function returns its outputs
    # laid out as the capturing (eager) call did, not only the first.
    x = _x((2, 8, 5, 5), seed=6)
    cl = em.tensor(x).to(memory_format=em.channels_last)

    def fn(t):
        return (t.exp() * 2).relu(), t.transpose(1, 3) * 3, t.sum(1)

    f = em.compile(fn)
    want = [np.maximum(np.exp(x) * 2, 0), x.transpose(0, 3, 2, 1) * 3, x.sum(1)]
    eager = [o.stride() for o in fn(cl)]
    assert eager == [(200, 1, 40, 8), (200, 8, 40, 1), (25, 5, 1)]
    for _ in range(3):
        outs = f(cl)
        assert [o.stride() for o in outs] == eager
        for o, w in zip(outs, want):
            np.testing.assert_allclose(o.numpy(), w, rtol=1e-5, atol=1e-6)
    rm = em.tensor(x)
    assert [o.stride() for o in f(rm)][0] == (200, 25, 5, 1)


def test_compiled_elementwise_graphs_run_in_memory_order(monkeypatch):
    # a fused kernel whose result only leaves the graph runs its loops in the inputs'
    # memory order: contiguous reads and writes, the result laid out as eager's (no copy)
    from ember.graph import capture
    from ember.graph.passes import fuse_lower

    def no_copy(xp, a, order):
        assert a.transpose(order).flags.c_contiguous, "the program's result was copied"
        return a
    monkeypatch.setattr(capture, "in_order", no_copy)
    x, b, r = _x((2, 8, 6, 5), seed=9), _x((8, 1, 1), seed=10), _x((2, 8, 6, 5), seed=11)
    cl = em.tensor(x).to(memory_format=em.channels_last)
    bias, rm = em.tensor(b), em.tensor(r)
    cases = {"cl * bias": (lambda t, u: (t * bias + 1).tanh(), np.tanh(x * b + 1)),
             "cl + rm": (lambda t, u: t.exp() + u, np.exp(x) + r),
             "rm + cl": (lambda t, u: u.exp() + t, np.exp(r) + x)}
    for name, (fn, want) in cases.items():
        f = em.compile(fn)
        eager = fn(cl, rm)
        for _ in range(3):
            got = f(cl, rm)
            assert got.stride() == eager.stride(), (name, got.stride(), eager.stride())
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=name)
        entry = next(iter(f._cache.values()))
        fused = [n for n in entry.graph.nodes if isinstance(n.op, fuse_lower.FusedOp)]
        assert len(fused) == 1 and fused[0].op.memory_order, name
    assert fn(cl, rm).is_contiguous()       # rm + cl: the first operand's layout


def test_compiled_training_and_eager_composites_keep_the_layout():
    x = _x((2, 8, 64, 64), seed=7).astype(np.float64)
    cl = em.tensor(x).to(memory_format=em.channels_last).requires_grad_(True)
    f = em.compile(lambda t: (t * t).tanh())
    for _ in range(3):
        y = f(cl)       # a joint graph: forward program now, backward program later
        assert y.is_contiguous(memory_format=em.channels_last)
        y.sum().backward()
        np.testing.assert_allclose(cl.grad.numpy(), 2 * x * (1 - np.tanh(x * x) ** 2),
                                   rtol=1e-12, atol=1e-14)
        cl.grad = None
    big = em.tensor(x.astype(np.float32)).to(memory_format=em.channels_last)
    from ember.codegen import eager_composite
    runs = eager_composite.stats["runs"]
    for _ in range(eager_composite.WARMUP + 3):    # past MIN_ELEMENTS and its warm-up
        g = em.nn.functional.gelu(big)             # calls: F.gelu runs its compiled graph
        assert g.is_contiguous(memory_format=em.channels_last)
    assert eager_composite.stats["runs"] == runs + 3
    np.testing.assert_allclose(g.numpy(), em.nn.functional.gelu(em.tensor(x)).numpy(),
                               rtol=1e-5, atol=1e-6)
    # gelu/silu/relu are pointwise: a channels-last input runs as the row-major view of
    # its memory (the same compiled call as a row-major input), gradients included
    rm = em.tensor(x.astype(np.float32)).requires_grad_(True)
    want = em.nn.functional.silu(rm)
    want.backward(em.ones_like(want))
    leaf = em.tensor(x.astype(np.float32)).to(memory_format=em.channels_last)
    leaf.requires_grad_(True)
    for _ in range(eager_composite.WARMUP + 2):
        leaf.grad = None
        y = em.nn.functional.silu(leaf)
        assert y.is_contiguous(memory_format=em.channels_last)
        y.backward(em.ones_like(y))
        assert y.detach().numpy().tobytes() == want.detach().numpy().tobytes()
        assert leaf.grad.numpy().tobytes() == rm.grad.numpy().tobytes()


def test_index_select_is_row_major_like_pytorch():
    x = _x((2, 3, 4, 5), seed=8)
    cl = em.tensor(x).to(memory_format=em.channels_last)
    i = em.tensor([3, 0, -1, 1, 1])
    for d in range(4):
        j = em.tensor([k % x.shape[d] for k in (0, 1, -1, 0)])
        got = cl.index_select(d, j)
        assert got.is_contiguous(), (d, got.stride())
        np.testing.assert_array_equal(got.numpy(), np.take(x, j.numpy(), axis=d))
    up = em.nn.functional.interpolate(cl, scale_factor=2)
    assert up.is_contiguous()
    np.testing.assert_array_equal(cl[:, :, i].numpy(), x[:, :, i.numpy()])


def test_pointwise_composites_in_place_return_their_input():
    # F.relu's compiled composite serves 1M+ elements; inplace=True runs as written and
    # returns the very tensor (PyTorch's), channels-last or not
    from ember.codegen import eager_composite
    x = em.tensor(_x((4, 64, 64, 64), seed=12)).to(memory_format=em.channels_last)
    want = np.maximum(x.numpy(), 0)
    for _ in range(eager_composite.WARMUP + 2):
        y = em.nn.functional.relu(x)
        assert y is not x and y.is_contiguous(memory_format=em.channels_last)
        np.testing.assert_array_equal(y.numpy(), want)
    assert em.nn.functional.relu(x, inplace=True) is x
    np.testing.assert_array_equal(x.numpy(), want)
