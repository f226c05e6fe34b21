"""ember.func.vmap: in/out dims, pytrees, nesting, errors, in-place ops, randomness."""
import warnings

import numpy as np
import pytest

import ember as em
from ember.func import grad, vmap

RNG = np.random.default_rng(0)


def T(*shape):
    return em.from_numpy(RNG.standard_normal(shape))


def close(a, b, tol=1e-12):
    np.testing.assert_allclose(np.asarray(a.numpy()), np.asarray(b.numpy()), rtol=tol, atol=tol)


def loop(f, *args, in_dims=0):
    dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
    n = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    return em.stack([f(*[a if d is None else a.select(d, b) for a, d in zip(args, dims)])
                     for b in range(n)])


# ---------------------------------------------------------------------------- dims


def test_in_dims_none_negative_and_out_dims():
    x, w = T(3, 5), T(3)
    f = lambda a, b: (a * b).sum()          # noqa: E731
    close(vmap(f, in_dims=(1, None))(x, w), loop(f, x, w, in_dims=(1, None)))
    close(vmap(f, in_dims=(-1, None))(x, w), loop(f, x, w, in_dims=(1, None)))
    g = lambda a: a * 2                      # noqa: E731
    out = vmap(g, in_dims=1, out_dims=1)(x)
    assert tuple(out.shape) == (3, 5)
    close(out, x * 2)
    close(vmap(g, in_dims=1, out_dims=-1)(x), x * 2)


def test_pytrees_in_and_out_with_per_output_out_dims():
    a, b = T(4, 2), T(2, 4)

    def f(d):
        return {"s": d["x"] + d["y"], "p": (d["x"] * d["y"],)}
    out = vmap(f, in_dims=({"x": 0, "y": 1},))({"x": a, "y": b})
    close(out["s"], a + b.mT)
    close(out["p"][0], a * b.mT)
    s, p = vmap(lambda x: (x.sum(), x * 3), out_dims=(0, 1))(a)
    close(s, a.sum(1))
    close(p, (a * 3).mT)


def test_python_scalars_kwargs_and_closures_pass_through():
    w = T(3)
    x = T(6, 3)

    def f(v, scale, *, shift):
        return (v * w).sum() * scale + shift
    close(vmap(f, in_dims=(0, None))(x, 2.0, shift=1.5), (x @ w) * 2.0 + 1.5)


def test_unbatched_outputs_are_broadcast_and_none_out_dim():
    x, c = T(4, 2), T(2)
    out = vmap(lambda a: c * 1)(x)
    assert tuple(out.shape) == (4, 2)
    close(out, c.expand(4, 2))
    same = vmap(lambda a: c, out_dims=None)(x)
    assert same is c
    with pytest.raises(ValueError, match="can not return a BatchedTensor when out_dim is None"):
        vmap(lambda a: a, out_dims=None)(x)


def test_nested_vmap_levels_are_distinct():
    x, y = T(3), T(4)
    outer = vmap(vmap(lambda a, b: a * b, in_dims=(None, 0)), in_dims=(0, None))(x, y)
    close(outer, x[:, None] * y[None, :])
    m = T(3, 4)
    # inner maps over columns of each row: a row-wise softmax done element by element
    r = vmap(lambda row: vmap(lambda e: e * row.sum())(row))(m)
    close(r, m * m.sum(1, keepdim=True))


def test_chunk_size_matches_unchunked():
    x, w = T(10, 3), T(3, 2)
    f = lambda a: (a @ w).tanh()           # noqa: E731
    close(vmap(f, chunk_size=3)(x), vmap(f)(x))
    close(vmap(f, chunk_size=3, out_dims=1)(x), f(x).mT)


def test_matmul_einsum_reductions_and_indexing_rules():
    a, b = T(5, 3, 4), T(4, 2)
    close(vmap(lambda m: m @ b)(a), a @ b)
    close(vmap(lambda m, n: em.einsum("ij,jk->ik", m, n), in_dims=(0, None))(a, b), a @ b)
    close(vmap(lambda m: m.amax(-1))(a), a.amax(-1))
    close(vmap(lambda m: m.argmax())(a), a.reshape(5, -1).argmax(-1))
    idx = em.tensor([[2, 0], [1, 1], [0, 2], [2, 2], [1, 0]])
    close(vmap(lambda m, i: m[i])(a, idx), loop(lambda m, i: m[i], a, idx))
    close(vmap(lambda m, i: m[:, i])(a, idx), loop(lambda m, i: m[:, i], a, idx))


# ---------------------------------------------------------------------------- errors


def test_batch_size_mismatch_names_the_sizes():
    with pytest.raises(ValueError, match=r"Expected all tensors to have the same size in the "
                                         r"mapped dimension, got sizes \[3, 4\] for the mapped "
                                         r"dimension"):
        vmap(lambda a, b: a + b)(T(3, 2), T(4, 2))


def test_argument_errors():
    with pytest.raises(ValueError, match="We cannot vmap over non-Tensor arguments"):
        vmap(lambda a, s: a * s)(T(3), 2.0)
    with pytest.raises(ValueError, match="expected in_dim to satisfy -2 <= in_dim < 2"):
        vmap(lambda a: a, in_dims=2)(T(3, 2))
    with pytest.raises(ValueError, match="none of the inputs are Tensors over which"):
        vmap(lambda a: a, in_dims=None)(T(3))
    with pytest.raises(ValueError, match="randomness"):
        vmap(lambda a: a, randomness="sometimes")
    with pytest.raises(ValueError, match="must only return Tensors"):
        vmap(lambda a: 3.0)(T(3))


def test_item_and_data_dependent_control_flow_raise():
    with pytest.raises(RuntimeError, match=r"vmap: It looks like you're calling \.item\(\)"):
        vmap(lambda a: a.sum().item())(T(3, 2))
    with pytest.raises(RuntimeError, match="data-dependent control flow"):
        vmap(lambda a: a if bool(a.sum() > 0) else -a)(T(3, 2))
    with pytest.raises(RuntimeError, match="dynamic shape.*nonzero"):
        vmap(lambda a: a.nonzero())(T(3, 2))


def test_loop_fallback_warns_once_and_can_be_refused():
    from ember.ops.registry import REGISTRY
    from ember.func import _vmap_mode
    op = REGISTRY["tril"]
    saved = op.batch
    op.batch = None
    _vmap_mode._warned.discard("tril")           # the warning is once per op and process
    try:
        x = T(3, 4, 4)
        with pytest.warns(UserWarning, match="tril has no batching rule"):
            out = vmap(lambda m: m.tril())(x)
        close(out, x.tril())
        with pytest.raises(RuntimeError, match="allow_fallback=False"):
            vmap(lambda m: m.tril(), allow_fallback=False)(x)
    finally:
        op.batch = saved


# ---------------------------------------------------------------------------- in-place


def test_inplace_on_batched_tensors():
    x = T(4, 3)
    c = T(3)

    def f(a):
        b = a.clone()
        b.mul_(2)
        b.add_(c)                          # unbatched other into batched self: allowed
        b[0] = 0.0
        return b
    want = x * 2 + c
    want[:, 0] = 0.0
    close(vmap(f)(x), want)


def test_inplace_batched_into_unbatched_raises_torch_error():
    buf = em.zeros(3)
    with pytest.raises(RuntimeError, match=r"vmap: inplace arithmetic\(self, \*extra_args\) is "
                                           r"not possible because there exists a Tensor `other` "
                                           r"in extra_args that has more elements than `self`"):
        vmap(lambda a: buf.add_(a))(T(4, 3))
    assert float(buf.abs().sum()) == 0.0       # nothing was written


def test_inplace_writes_reach_the_physical_tensor():
    x = T(4, 3)
    y = x.clone()
    vmap(lambda a: a.mul_(3))(y)
    close(y, x * 3)


# ---------------------------------------------------------------------------- randomness


def test_randomness_error_names_the_op():
    with pytest.raises(RuntimeError, match="random operation randn while in randomness error"):
        vmap(lambda a: a + em.randn(3))(T(4, 3))
    with pytest.raises(RuntimeError, match="randomness error mode"):
        vmap(lambda a: em.nn.functional.dropout(a, 0.5, training=True))(T(4, 3))


def test_randomness_same_and_different():
    x = em.zeros(5, 3)
    same = vmap(lambda a: a + em.randn(3), randomness="same")(x)
    assert np.allclose(same.numpy(), same.numpy()[0])
    diff = vmap(lambda a: a + em.randn(3), randomness="different")(x)
    assert tuple(diff.shape) == (5, 3)
    assert len({tuple(r) for r in np.round(diff.numpy(), 12)}) == 5
    drop = vmap(lambda a: em.nn.functional.dropout(a + 1, 0.5, training=True),
                randomness="different")(em.zeros(64, 32))
    masks = drop.numpy() == 0
    assert 0.3 < masks.mean() < 0.7 and not (masks == masks[0]).all()


def test_randomness_different_in_place_on_unbatched_raises():
    buf = em.zeros(3)

    def f(a):
        buf.normal_()
        return a + buf
    with pytest.raises(RuntimeError, match="inplace arithmetic"):
        vmap(f, randomness="different")(T(4, 3))


def test_no_warnings_for_ruled_primitives():
    x = T(4, 3, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vmap(lambda a: (a.softmax(-1) @ a.mT).cumsum(0).flip(1).permute(1, 0).sum())(x)


def test_tensor_made_inside_vmap_takes_batched_writes():
    x = T(4, 3)

    def f(a):
        out = em.zeros(3)
        out.add_(a)                            # made inside: becomes batched, as per example
        out[0] = a[1]
        return out
    close(vmap(f)(x), loop(f, x))


_GETS = {
    "adjacent_from_0": lambda x, i, j, k: x[i, j],
    "adjacent_middle": lambda x, i, j, k: x[:, j, k],
    "split": lambda x, i, j, k: x[i, :, k],
    "one_middle": lambda x, i, j, k: x[:, j],
    "one_last": lambda x, i, j, k: x[..., k],
}


@pytest.mark.parametrize("name", sorted(_GETS))
def test_advanced_indexing_every_batching_pattern(name):
    """Batched data and/or batched index tensors, indices adjacent or split (NumPy's layout
    rules), against a per-example loop."""
    import itertools
    f = _GETS[name]
    full = [T(3, 4, 5, 6), em.from_numpy(RNG.integers(0, 4, (3, 2, 3))),
            em.from_numpy(RNG.integers(0, 5, (3, 3))), em.from_numpy(RNG.integers(0, 6, (3, 2, 3)))]
    for dims in itertools.product([0, None], repeat=4):
        if dims == (None,) * 4:
            continue
        args = [a if d is not None else a[0] for a, d in zip(full, dims)]
        want = em.stack([f(*[a if d is None else a[b] for a, d in zip(args, dims)])
                         for b in range(3)])
        close(vmap(f, in_dims=dims)(*args), want)


@pytest.mark.parametrize("key", [lambda i, j: (i, j), lambda i, j: (i, slice(None), j),
                                 lambda i, j: (slice(None), i, j)],
                         ids=["adjacent_from_0", "split", "adjacent_middle"])


def test_index_put_every_batching_pattern(key):
    import itertools
    x, i, j = T(3, 4, 4, 5), em.from_numpy(RNG.integers(0, 4, (3, 2))), \
        em.from_numpy(RNG.integers(0, 4, (3, 2)))

    def f(x, i, j, v):
        y = x.clone()
        y[key(i, j)] = v
        return y
    region = tuple(x[0][key(i[0], j[0])].shape)
    v = T(3, *region)
    for dims in itertools.product([0, None], repeat=4):
        if dims[0] is None:
            continue                             # a batched write into an unbatched copy
        args = [a if d is not None else a[0] for a, d in zip((x, i, j, v), dims)]
        want = em.stack([f(*[a if d is None else a[b] for a, d in zip(args, dims)])
                         for b in range(3)])
        close(vmap(f, in_dims=dims)(*args), want)


def test_chunks_share_the_draw_with_randomness_same():
    out = vmap(lambda a: a + em.randn(2), randomness="same", chunk_size=2)(em.zeros(5, 2))
    assert np.allclose(out.numpy(), out.numpy()[0])
    out = vmap(lambda a: a + em.randn(2), randomness="different", chunk_size=2)(em.zeros(5, 2))
    assert len({tuple(r) for r in np.round(out.numpy(), 12)}) == 5


def test_sampling_from_batched_parameters():
    p = em.from_numpy(np.array([[0.0] * 50, [1.0] * 50, [0.5] * 50]))
    out = vmap(lambda q: em.bernoulli(q), randomness="different")(p)
    assert out[0].sum().item() == 0 and out[1].sum().item() == 50
    assert 5 < out[2].sum().item() < 45
    with pytest.raises(RuntimeError, match="randomness='same' does not support a batched"):
        vmap(lambda q: em.bernoulli(q), randomness="same")(p)


def test_printing_a_batched_tensor_shows_the_batch(capsys):
    vmap(lambda a: print(a, f"{a}") or a)(em.ones(2, 3))
    out = capsys.readouterr().out
    assert out.count("BatchedTensor(lvl=") == 2 and "bdim=0" in out


@pytest.mark.parametrize("dims", [(0, 0, 0), (0, 0, None), (None, None, 0), (0, None, -1)])
def test_ldl_solve_broadcasts_leading_dims_per_input(dims):
    a = T(3, 4, 4)
    a = a + a.mT
    ld, piv = em.linalg.ldl_factor(a)
    b = T(3, 4, 2)
    args = [t if d is not None else t[0] for t, d in zip((ld, piv, b.movedim(0, -1)
                                                          if dims[2] == -1 else b), dims)]
    got = vmap(em.linalg.ldl_solve, in_dims=dims)(*args)
    want = em.stack([em.linalg.ldl_solve(*[x if d is None else x.select(d, i)
                                           for x, d in zip(args, dims)]) for i in range(3)])
    close(got, want, 1e-10)


def test_shape_errors_inside_vmap_name_the_per_example_shapes():
    with pytest.raises(ValueError, match=r"vmap: add on per-example shapes \(3,\), \(5,\) "
                                         r"\(batch dims 0, None, batch size 4\)"):
        vmap(lambda a, b: a + b, in_dims=(0, None))(T(4, 3), T(5))
    with pytest.raises(ValueError, match=r"vmap: matmul on per-example shapes \(3,\), "
                                         r"\(5, 2\)"):
        vmap(vmap(lambda a, b: a @ b, in_dims=(0, None)), in_dims=(0, None))(T(2, 4, 3), T(5, 2))


def test_empty_batch():
    x = em.zeros(0, 3)
    assert tuple(vmap(lambda a: (a.sin() @ em.ones(3, 2)).softmax(-1).sum())(x).shape) == (0,)
    assert tuple(vmap(grad(lambda a: (a ** 2).sum()))(x).shape) == (0, 3)
    assert tuple(vmap(lambda a: a[em.tensor([0, 2])])(x).shape) == (0, 2)


def test_host_reading_composites_loop_per_example():
    from ember.func import _vmap_mode
    x = T(4, 6)
    _vmap_mode._warned.discard("cummax")
    with pytest.warns(UserWarning, match="cummax reads values on the host"):
        got = vmap(lambda a: em.cummax(a, 0).values)(x)
    close(got, em.cummax(x, 1).values)
    with pytest.raises(RuntimeError, match="allow_fallback=False"):
        vmap(lambda a: em.cummax(a, 0).values, allow_fallback=False)(x)
    per = vmap(grad(lambda a: (em.cummax(a, 0).values ** 2).sum()))(x)
    close(per, em.stack([grad(lambda a: (em.cummax(a, 0).values ** 2).sum())(x[i])
                         for i in range(4)]))
    g = grad(lambda v: vmap(lambda a: em.cummax(a, 0).values)(v).sum())(x)
    close(g, grad(lambda v: em.cummax(v, 1).values.sum())(x))


def test_embedding_bag_under_vmap_uses_every_examples_indices():
    w = T(10, 4)
    idx = em.from_numpy(RNG.integers(0, 10, (3, 2, 5)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = vmap(lambda i: em.nn.functional.embedding_bag(i, w, mode="sum"))(idx)
    want = em.stack([em.nn.functional.embedding_bag(idx[b], w, mode="sum") for b in range(3)])
    close(got, want)


@pytest.mark.parametrize("in_dim", [0, 1])
def test_view_dtype_of_batched_values(in_dim):
    x = em.from_numpy(RNG.standard_normal((3, 4)).astype(np.float32))
    phys = x if in_dim == 0 else x.mT.contiguous()
    for dt in (em.int32, em.int16):
        got = vmap(lambda v: v.view(dt), in_dims=in_dim)(phys)
        assert bool((got == x.view(dt)).all())


def test_tensor_factory_of_batched_values_raises():
    with pytest.raises(RuntimeError, match=r"vmap: ember.tensor\(\) copies values"):
        vmap(lambda a: em.tensor([a[0], a[1]]))(T(3, 2))


def test_a_rule_may_decline_a_batching_pattern():
    from ember.ops.registry import REGISTRY
    from ember.func import _vmap_mode
    op = REGISTRY["triu"]
    saved = op.batch
    op.batch = lambda inputs, bdims, **p: NotImplemented
    _vmap_mode._warned.discard("triu")
    try:
        x = T(3, 4, 4)
        with pytest.warns(UserWarning, match="triu is marked to run per example"):
            close(vmap(lambda m: m.triu())(x), x.triu())
    finally:
        op.batch = saved


def test_batched_tensor_kept_after_vmap_raises_when_used():
    keep = []
    out = vmap(lambda a: keep.append(a * 2) or a.sin())(T(3, 2))
    assert tuple(out.shape) == (3, 2)
    with pytest.raises(RuntimeError, match="used after the vmap that made it had returned"):
        keep[0] + 1


def test_backward_inside_vmap_raises():
    w = em.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"vmap: backward\(\) called inside vmap"):
        vmap(lambda a: (a * w).sum().backward())(T(4, 3))
    assert w.grad is None
