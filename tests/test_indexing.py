"""Indexing: advanced/bool/mixed getitem vs NumPy, setitem variants, autograd through
setitem and in-place writes on views (against PyTorch when installed), error messages."""
import numpy as np
import pytest

import ember as em


def _ar(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)


@pytest.mark.parametrize("key", [
    ([0, 2],), (slice(None), [1, 0, 1]), ([[0], [2]], [1, 3]), (1, slice(None), [0, 2]),
    ([0, 1], 1, [0, 2]), (Ellipsis, [3, 0]), (None, [1], slice(1, 3)), (-1, [-1, 0]),
])
def test_advanced_indexing_matches_torch_placement(key):
    torch = pytest.importorskip("torch")
    a = _ar(3, 4, 5)
    got = em.from_numpy(a)[key]
    tkey = tuple(torch.tensor(k) if isinstance(k, list) else k for k in key)
    want = torch.from_numpy(a)[tkey].numpy()
    np.testing.assert_array_equal(got.numpy(), want)


def test_int_then_tensor_follows_pytorch_not_numpy():
    x = em.zeros(3, 4, 5)
    assert x[0, :, [1, 2]].shape == (4, 2)      # NumPy would give (2, 4)
    assert x[[0, 1], :, 1].shape == (2, 4)


def test_bool_mask_and_scalar_bools():
    a = _ar(3, 4)
    x = em.from_numpy(a)
    m = a > 4
    np.testing.assert_array_equal(x[em.from_numpy(m)].numpy(), a[m])
    np.testing.assert_array_equal(x[em.from_numpy(m[:, 0]), 1:].numpy(), a[m[:, 0], 1:])
    assert x[True].shape == (1, 3, 4) and x[False].shape == (0, 3, 4)
    assert x[None, ..., None].shape == (1, 3, 4, 1)


def test_advanced_index_is_a_copy_basic_is_a_view():
    x = em.zeros(4)
    x[em.tensor([1, 2])].fill_(5)
    x[em.tensor(1)].fill_(5)
    assert x.tolist() == [0, 0, 0, 0]
    x[1:3].fill_(5)
    assert x.tolist() == [0, 5, 5, 0]


@pytest.mark.parametrize("key,value", [
    ((slice(1, None), 0), 7.0), (([0, 2],), np.array([1., 2., 3., 4.])),
    ((slice(None), [3, 0]), np.array([[1.], [2.], [3.]])), ((Ellipsis, 1), 2),
    (([0, 1], [1, 2]), np.array([9., 8.])),
])
def test_setitem_matches_numpy(key, value):
    a = _ar(3, 4)
    x = em.from_numpy(a.copy())
    x[key] = em.from_numpy(value) if isinstance(value, np.ndarray) else value
    a[key] = value
    np.testing.assert_array_equal(x.numpy(), a)


def test_setitem_mask_casts_and_bumps_version():
    x = em.tensor([1, -2, 3, -4])
    v = x._version
    x[x.numpy() < 0 if False else em.from_numpy(x.numpy() < 0)] = 0.7   # cast to int64
    assert x.tolist() == [1, 0, 3, 0] and x._version == v + 1


def _torch_grads(fn, *vals):
    torch = pytest.importorskip("torch")
    ts = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in vals]
    fn(torch, *ts).sum().backward()
    return [t.grad.numpy() for t in ts]


def _ember_grads(fn, *vals):
    ts = [em.tensor(v, dtype=em.float64, requires_grad=True) for v in vals]
    fn(em, *ts).sum().backward()
    return [t.grad.numpy() for t in ts]


def _setitem_row(lib, x, z):
    y = x * 1
    y[0] = z * 3
    return y * y


def _mul_column(lib, x):
    y = x.clone()
    y[:, 1].mul_(2)
    return y * x


def _adv_setitem(lib, x, z):
    y = x.clone()
    y[[0, 2]] = z
    return y.exp()


def _view_chain(lib, x, z):
    y = x.t().clone()
    y.t()[0, 1:].copy_(z)       # a view of a non-C-contiguous base
    y[0].add_(x[:, 0])
    return y ** 2


def _const_into_view(lib, x, z):
    y = x + z.sum()
    y[1] = 0.0
    y[:, 0].fill_(2.0)
    return y * z.sum()


@pytest.mark.parametrize("fn,vals", [
    (_setitem_row, ([[1., 2.], [3., 4.]], [0.5, -1.])),
    (_mul_column, ([[1., 2., 3.], [4., 5., 6.]],)),
    (_adv_setitem, ([[1., 2.], [3., 4.], [5., 6.]], [[0.1, 0.2], [0.3, 0.4]])),
    (_view_chain, ([[1., 2., 3.], [4., 5., 6.]], [7., 8.])),
    (_const_into_view, ([[1., 2.], [3., 4.]], [0.5, 2.])),
])
def test_gradients_through_setitem_and_inplace_views_match_torch(fn, vals):
    want = _torch_grads(fn, *vals)
    got = _ember_grads(fn, *vals)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_copyslices_by_hand():
    x = em.tensor([1., 2., 3.], requires_grad=True)
    z = em.tensor(10., requires_grad=True)
    y = x * 1
    y[0] = z
    (y * em.tensor([1., 2., 3.])).sum().backward()
    assert x.grad.tolist() == [0., 2., 3.] and z.grad.item() == 1.0
    assert y.grad_fn is not None and y._version == 1


def test_setitem_into_untracked_tensor_makes_it_require_grad():
    z = em.tensor([1., 2.], requires_grad=True)
    buf = em.zeros(2, 2)
    buf[1] = z
    assert buf.requires_grad
    (buf * 3).sum().backward()
    assert z.grad.tolist() == [3., 3.]


def test_second_order_through_setitem():
    x = em.tensor([1., 2.], requires_grad=True)
    y = em.zeros(3)
    y[1:] = x * x
    (g,) = em.autograd.grad(y.sum() * x.sum(), x, create_graph=True)
    (h,) = em.autograd.grad(g.sum(), x)
    # f = (x0^2 + x1^2)(x0 + x1): the Hessian's row sums are 4(x0 + x1) + 4x_i
    assert h.tolist() == pytest.approx([16., 20.])


def test_inplace_errors_on_leaf_and_view_of_leaf():
    x = em.tensor([1., 2.], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x[0] = 3.0
    with pytest.raises(RuntimeError, match="view of a leaf"):
        x[0:1].mul_(2)
    with em.no_grad():
        x[0] = 3.0
    assert x.tolist() == [3., 2.]


def test_detached_alias_write_leaves_history_alone():
    x = em.tensor([1., 2.], requires_grad=True)
    y = x * 2
    y.detach()[0] = 100.0
    y.sum().backward()
    assert x.grad.tolist() == [2., 2.]


@pytest.mark.parametrize("key,err,msg", [
    (5, IndexError, "index 5 is out of bounds for dimension 0 with size 3"),
    ((0, 0, 0), IndexError, "too many indices for tensor of dimension 2"),
    (slice(None, None, -1), ValueError, "step must be greater than zero"),
    (em.tensor([1.0]), IndexError, "must be long, int, byte or bool"),
    (em.tensor([0, 7]), IndexError, "index 7 is out of bounds for dimension 0 with size 3"),
    ((slice(None), em.tensor([4])), IndexError, "dimension 1 with size 4"),
    (em.tensor([True, False]), IndexError, r"shape of the mask \[2\] at index 0"),
    ((Ellipsis, Ellipsis), IndexError, "single ellipsis"),
    ("a", IndexError, "valid indices"),
])
def test_index_errors(key, err, msg):
    x = em.zeros(3, 4)
    with pytest.raises(err, match=msg):
        x[key]


def test_gather_scatter_and_friends_errors():
    x = em.zeros(3, 4)
    with pytest.raises(IndexError, match="out of bounds for dimension 1 with size 4"):
        x.gather(1, em.tensor([[4]]))
    with pytest.raises(TypeError, match="int64"):
        x.gather(1, em.tensor([[0.5]]))
    with pytest.raises(TypeError, match="boolean masks"):
        x.masked_fill(em.zeros(3, 4), 1.0)
    with pytest.raises(ValueError, match="source of shape"):
        x.index_add(0, em.tensor([0]), em.ones(2, 4))
    with pytest.raises(IndexError, match="vector"):
        x.index_select(0, em.tensor([[0]]))
    with pytest.raises(IndexError, match="smaller than num_classes"):
        em.one_hot(em.tensor([3]), 3)


def test_inplace_index_methods():
    x = em.zeros(3)
    x.index_add_(0, em.tensor([0, 0, 2]), em.tensor([1., 2., 3.]))
    assert x.tolist() == [3., 0., 3.]
    x.scatter_(0, em.tensor([1]), em.tensor([5.]))
    x.masked_fill_(em.tensor([True, False, False]), -1)
    x.index_put_((em.tensor([2]),), em.tensor(9.), accumulate=True)
    assert x.tolist() == [-1., 5., 12.]
    assert em.one_hot(em.tensor([0, 2])).tolist() == [[1, 0, 0], [0, 0, 1]]
    assert em.one_hot(em.tensor([1])).dtype == em.int64


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_index_put_accumulates_repeated_and_negative_rows(dtype):
    # whole rows at a 1-D index (an embedding's gradient) take the sort + reduceat path
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, (6, 4)).astype(dtype)
    rows = np.array([1, -5, 3, 3, 0, -1, 5, 1])              # -5 is row 1, -1 row 5
    v = rng.integers(0, 3, (8, 4)).astype(dtype)
    want = x.copy()
    np.add.at(want, rows, v)
    got = em.tensor(x).index_put((em.tensor(rows),), em.tensor(v), accumulate=True)
    np.testing.assert_array_equal(got.numpy(), want)
    e = em.nn.Embedding(6, 4)
    e(em.tensor(rows % 6)).sum().backward()
    np.testing.assert_array_equal(e.weight.grad.numpy(), np.bincount(rows % 6, minlength=6)[:, None]
                                  * np.ones((1, 4)))


def test_nonzero_as_tuple_and_where_single_argument():
    x = em.tensor([[0, 1], [2, 0]])
    rows, cols = x.nonzero(as_tuple=True)
    assert rows.tolist() == [0, 1] and cols.tolist() == [1, 0]
    assert x.nonzero().shape == (2, 2) and x.nonzero().dtype == em.int64


def test_pad_modes_match_torch():
    torch = pytest.importorskip("torch")
    a = _ar(1, 2, 3, 4)
    for mode, pad in [("constant", (1, -1, 2, 0)), ("reflect", (2, 1, 1, 1)),
                      ("replicate", (3, 0, 0, 2)), ("circular", (1, 2, 2, 1))]:
        got = em.pad(em.from_numpy(a), pad, mode=mode).numpy()
        want = torch.nn.functional.pad(torch.from_numpy(a), pad, mode=mode).numpy()
        np.testing.assert_array_equal(got, want, err_msg=mode)


def test_min_max_reads_a_device_array_once():
    # NOTE: a GPU's arrays (any class but np.ndarray) are read back in one transfer: the
    # two 0-d reductions stacked on the device, one tolist()
    from ember.ops._util import min_max

    class XP:                       # the device's array module, counting reads
        reads = 0

        @staticmethod
        def stack(parts):
            r = np.stack(parts)

            class Read:
                def tolist(self):
                    XP.reads += 1
                    return r.tolist()
            return Read()
    a = np.array([3, -1, 7, 2]).view(type("Device", (np.ndarray,), {}))
    assert min_max(XP, a) == (-1, 7) and XP.reads == 1
    assert min_max(XP, np.array([4, 9])) == (4, 9) and XP.reads == 1    # NumPy: no stack
    with pytest.raises(IndexError, match="index 7 is out of bounds"):
        em.zeros(3)[em.tensor([0, 7])]
