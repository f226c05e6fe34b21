"""Views: shared storage, strides and offsets (PyTorch conventions), view vs reshape,
version counters, and property tests of slicing/permuting against NumPy."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ember as em


def _ar(*shape, dtype=np.float32):
    return em.from_numpy(np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape))


def test_slice_write_is_visible_in_base():
    x = _ar(5)
    v = x[1:3]
    x[1:3] = 5
    assert v.tolist() == [5, 5]
    v[0] = -1
    assert x.tolist() == [0, -1, 5, 3, 4]


def test_transposed_row_fill_writes_column():
    x = em.zeros(3, 2)
    x.t()[0].fill_(1)
    assert x.tolist() == [[1, 0], [1, 0], [1, 0]]


@pytest.mark.parametrize("make", [
    lambda x: x[1:, ::2], lambda x: x.t()[1:], lambda x: x[:, 1], lambda x: x.narrow(1, 1, 2),
    lambda x: x.permute(1, 0).unsqueeze(0), lambda x: x.diagonal(), lambda x: x.unbind(1)[2],
    lambda x: x.split(2, 1)[1], lambda x: x[None, ..., -1], lambda x: x.view(2, 2, 3),
    lambda x: x.flatten(), lambda x: x.movedim(0, 1), lambda x: x.as_strided((2, 2), (1, 4), 1),
])
def test_views_share_storage_with_torch_geometry(make):
    torch = pytest.importorskip("torch")
    x = _ar(4, 3)
    v = make(x)
    tv = make(torch.arange(12, dtype=torch.float32).reshape(4, 3))
    assert v.untyped_storage() is x.untyped_storage()
    assert tuple(v.shape) == tuple(tv.shape)
    assert v.stride() == tv.stride()
    assert v.storage_offset() == tv.storage_offset()
    np.testing.assert_array_equal(v.numpy(), tv.numpy())


def test_view_errors_on_non_viewable_layout_but_reshape_copies():
    x = _ar(2, 3).t()
    with pytest.raises(ValueError, match="view.*reshape"):
        x.view(6)
    r = x.reshape(6)
    assert r.untyped_storage() is not x.untyped_storage()
    assert r.tolist() == [0, 3, 1, 4, 2, 5]
    assert _ar(2, 3, 4)[:, :, :2].view(6, 2).shape == (6, 2)  # merges dims that are compatible


def test_expand_has_zero_stride_and_refuses_inplace_writes():
    x = em.tensor([1., 2.]).expand(3, 2)
    assert x.stride() == (0, 1)
    with pytest.raises(RuntimeError, match="single memory location"):
        x.add_(1)


def test_version_counter_bumps_on_view_and_setitem_writes():
    x = em.zeros(4)
    v0 = x._version
    x[1] = 2.0
    assert x._version == v0 + 1
    x[1:3].mul_(2)
    assert x._version == v0 + 2
    x[em.tensor([0, 3])] = 1.0
    assert x._version == v0 + 3


def test_saved_tensor_modified_through_view_is_detected():
    a = em.tensor([1., 2., 3.], requires_grad=True)
    y = a * 1
    z = y * y              # saves y
    y[0] = 5.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_contiguous_and_flip_copy():
    x = _ar(2, 3)
    assert x.contiguous() is x
    c = x.t().contiguous()
    assert c.is_contiguous() and c.untyped_storage() is not x.untyped_storage()
    f = x.flip(0)
    f[0, 0] = 100
    assert x[1, 0].item() == 3


def test_split_errors_and_chunk_counts():
    with pytest.raises(ValueError, match="sum exactly to 5"):
        em.zeros(5).split([2, 2])
    assert [c.shape[0] for c in em.zeros(5).chunk(3)] == [2, 2, 1]
    assert [c.shape[0] for c in em.zeros(6).chunk(4)] == [2, 2, 2]
    assert [c.shape[0] for c in em.zeros(5).tensor_split(3)] == [2, 2, 1]


def test_cat_errors_name_tensor_and_dim():
    with pytest.raises(ValueError, match="tensor number 1.*dimension 1"):
        em.cat([em.zeros(2, 3), em.zeros(2, 4)])
    with pytest.raises(ValueError, match="same number of dimensions"):
        em.cat([em.zeros(2, 3), em.zeros(3)])
    r = em.cat([em.zeros(2, dtype=em.int32), em.ones(1)])
    assert r.dtype == em.float32 and r.tolist() == [0, 0, 1]


def test_narrow_and_select_errors():
    with pytest.raises(IndexError, match="out of range"):
        em.zeros(3).select(0, 3)
    with pytest.raises(ValueError, match="exceeds dimension size"):
        em.zeros(3).narrow(0, 2, 2)


def test_as_strided_reads_storage_like_torch():
    x = em.from_numpy(np.arange(10.))
    assert x[2:].as_strided((2,), (1,), 0).tolist() == [0, 1]
    with pytest.raises(ValueError, match="as_strided"):
        x.as_strided((3,), (5,), 0)


_shapes = st.lists(st.integers(0, 4), min_size=1, max_size=4)


@st.composite
def _slicing(draw):
    shape = draw(_shapes)
    key = []
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice", "all"]))
        if kind == "int" and n:
            key.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            key.append(slice(draw(st.none() | st.integers(-5, 5)),
                             draw(st.none() | st.integers(-5, 5)),
                             draw(st.none() | st.integers(1, 3))))
        else:
            key.append(slice(None))
    if draw(st.booleans()):
        key.insert(draw(st.integers(0, len(key))), None)
    return shape, tuple(key)


@settings(max_examples=60, deadline=None)
@given(_slicing())
def test_random_slicing_matches_numpy_and_writes_through(case):
    shape, key = case
    a = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    x = em.from_numpy(a.copy())
    v = x[key]
    np.testing.assert_array_equal(v.numpy(), a[key])
    if v.numel():  # (an empty result owns no elements; it may have its own storage)
        assert v.untyped_storage() is x.untyped_storage()
    v.fill_(-1)
    b = a.copy()
    b[key] = -1
    np.testing.assert_array_equal(x.numpy(), b)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_permute_then_reshape_matches_numpy(data):
    shape = data.draw(_shapes)
    perm = data.draw(st.permutations(range(len(shape))))
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    x = em.from_numpy(a).permute(*perm)
    np.testing.assert_array_equal(x.numpy(), a.transpose(perm))
    np.testing.assert_array_equal(x.reshape(-1).numpy(), a.transpose(perm).reshape(-1))
    want = tuple(s // 4 for s in a.transpose(perm).strides)
    if a.size == 0 and not any(want):    # NumPy's zero strides: PyTorch's row-major ones
        want = em.tensor(a.transpose(perm)).contiguous().stride()
    assert x.stride() == want
