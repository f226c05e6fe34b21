"""Hypothesis property tests: broadcasting, strides, views and promotion vs NumPy/PyTorch rules."""
import numpy as np
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import ember as em
from ember import dtypes as D

SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def broadcastable_pair(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4,
                                                    max_side=4))
    a = draw(hnp.arrays(np.float64, shapes.input_shapes[0],
                        elements=st.floats(-10, 10, allow_nan=False)))
    b = draw(hnp.arrays(np.float64, shapes.input_shapes[1],
                        elements=st.floats(-10, 10, allow_nan=False)))
    return a, b, shapes.result_shape


@SETTINGS
@given(broadcastable_pair())
def test_binary_ops_broadcast_like_numpy(pair):
    a, b, shape = pair
    ta, tb = em.from_numpy(a), em.from_numpy(b)
    for op, ref in ((em.add, np.add), (em.mul, np.multiply), (em.sub, np.subtract),
                    (em.maximum, np.maximum)):
        r = op(ta, tb)
        assert tuple(r.shape) == shape
        np.testing.assert_array_equal(r.numpy(), ref(a, b))


@SETTINGS
@given(broadcastable_pair())
def test_broadcast_gradients_sum_back_to_input_shapes(pair):
    a, b, _ = pair
    ta = em.tensor(a, requires_grad=True)
    tb = em.tensor(b, requires_grad=True)
    (ta * tb).sum().backward()
    bb = np.broadcast_arrays(a, b)
    ga = bb[1].copy()
    gb = bb[0].copy()
    # reduce like the inverse of broadcasting
    def reduce_to(g, shape):
        while g.ndim > len(shape):
            g = g.sum(0)
        for i, n in enumerate(shape):
            if n == 1 and g.shape[i] != 1:
                g = g.sum(i, keepdims=True)
        return g
    np.testing.assert_allclose(ta.grad.numpy(), reduce_to(ga, a.shape), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tb.grad.numpy(), reduce_to(gb, b.shape), rtol=1e-12, atol=1e-12)


@st.composite
def array_and_perm(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, max_side=5))
    a = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    perm = draw(st.permutations(range(len(shape))))
    return a, tuple(perm)


@SETTINGS
@given(array_and_perm())
def test_permute_is_a_view_with_permuted_strides(ap):
    a, perm = ap
    t = em.from_numpy(a)
    p = t.permute(*perm)
    np.testing.assert_array_equal(p.numpy(), a.transpose(perm))
    assert p.stride() == tuple(t.stride()[i] for i in perm)
    assert p.untyped_storage() is t.untyped_storage()
    if p.numel():
        p.numpy()[(0,) * p.ndim] = -1          # a write through the view reaches the base
        assert a.reshape(-1)[0] == -1


@st.composite
def array_and_slices(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=6))
    idx = []
    for n in shape:
        start = draw(st.integers(-n, n))
        stop = draw(st.integers(-n, n))
        step = draw(st.integers(1, 3))
        idx.append(slice(start, stop, step))
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape), tuple(idx)


@SETTINGS
@given(array_and_slices())
def test_basic_slicing_matches_numpy_and_shares_memory(asl):
    a, idx = asl
    t = em.from_numpy(a)
    v = t[idx]
    np.testing.assert_array_equal(v.numpy(), a[idx])
    assert v.untyped_storage() is t.untyped_storage()
    if v.numel():
        first = v.storage_offset()
        assert a.reshape(-1)[first] == v.numpy().reshape(-1)[0]


@SETTINGS
@given(hnp.array_shapes(min_dims=1, max_dims=4, max_side=4), st.data())
def test_reshape_roundtrip_and_view_on_contiguous(shape, data):
    n = int(np.prod(shape))
    a = np.arange(n, dtype=np.float32).reshape(shape)
    t = em.from_numpy(a)
    new = data.draw(st.sampled_from([(n,), (1, n), (n, 1), tuple(reversed(shape))]))
    v = t.view(*new)
    assert v.untyped_storage() is t.untyped_storage()
    np.testing.assert_array_equal(v.numpy(), a.reshape(new))
    np.testing.assert_array_equal(v.reshape(shape).numpy(), a)


@SETTINGS
@given(hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
       hnp.array_shapes(min_dims=0, max_dims=2, max_side=4))
def test_expand_has_zero_strides_where_broadcast(shape, lead):
    a = np.ones(shape, np.float32)
    target = tuple(lead) + tuple(shape)
    t = em.from_numpy(a).expand(*target)
    assert tuple(t.shape) == target
    st_ = t.stride()
    for i in range(len(lead)):
        assert st_[i] == 0


DTS = [D.bool_, D.uint8, D.int8, D.int16, D.int32, D.int64, D.float16, D.bfloat16, D.float32,
       D.float64]


@SETTINGS
@given(st.sampled_from(DTS), st.sampled_from(DTS), st.sampled_from(DTS))
def test_promote_types_is_commutative_and_associative(a, b, c):
    assert D.promote_types(a, b) is D.promote_types(b, a)
    assert D.promote_types(D.promote_types(a, b), c) is D.promote_types(a, D.promote_types(b, c)) \
        or {a, b, c} >= {D.float16, D.bfloat16}   # f16+bf16 -> f32 breaks associativity (torch too)


@SETTINGS
@given(st.sampled_from(DTS), st.sampled_from(DTS))
def test_promotion_matches_torch(a, b):
    import pytest
    torch = pytest.importorskip("torch")
    ta = getattr(torch, a.name)
    tb = getattr(torch, b.name)
    assert D.promote_types(a, b).name == str(torch.promote_types(ta, tb)).replace("torch.", "")
