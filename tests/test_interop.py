"""Interop: NumPy memory sharing, DLPack, tolist/item, dtype conversion, and repr strings."""
import numpy as np
import pytest

import ember as em


# ------------------------------------------------------------------ NumPy sharing
def test_from_numpy_shares_memory_both_ways():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = em.from_numpy(a)
    a[0, 0] = 42.0
    assert t.tolist()[0][0] == 42.0
    t.numpy()[1, 2] = -1.0
    assert a[1, 2] == -1.0
    assert t.numpy() is a or np.shares_memory(t.numpy(), a)


def test_numpy_of_view_shares_and_array_protocol():
    t = em.arange(12, dtype=em.float64).reshape(3, 4)
    v = t.t()
    assert np.shares_memory(v.numpy(), t.numpy())
    assert np.asarray(t).dtype == np.float64
    np.testing.assert_array_equal(np.asarray(v), np.arange(12.0).reshape(3, 4).T)


def test_numpy_refuses_requires_grad():
    x = em.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="detach"):
        x.numpy()
    assert x.detach().numpy().tolist() == [1.0, 1.0]


def test_as_tensor_shares_numpy_memory():
    a = np.zeros(3)
    t = em.as_tensor(a)
    a[1] = 5
    assert t.tolist() == [0.0, 5.0, 0.0] and t.dtype == em.float64


# ------------------------------------------------------------------ DLPack
def test_dlpack_numpy_round_trip_shares_memory():
    a = np.arange(4, dtype=np.float32)
    t = em.from_dlpack(a)
    a[0] = 9
    assert t.tolist()[0] == 9
    b = np.from_dlpack(t)
    b[1] = 7
    assert t.tolist()[1] == 7 and a[1] == 7


def test_dlpack_requires_grad_refused():
    with pytest.raises(RuntimeError, match="detach"):
        np.from_dlpack(em.ones(2, requires_grad=True))


def test_dlpack_torch_round_trip_shares_memory():
    torch = pytest.importorskip("torch")
    tt = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    e = em.from_dlpack(tt)
    assert e.shape == (2, 3) and e.dtype == em.float32
    tt[0, 1] = 100.0
    assert e.tolist()[0][1] == 100.0
    back = torch.from_dlpack(e)
    back[1, 2] = -5.0
    assert tt[1, 2].item() == -5.0 and e.tolist()[1][2] == -5.0
    ei = em.arange(5)
    ti = torch.from_dlpack(ei)
    assert ti.dtype == torch.int64 and ti.tolist() == [0, 1, 2, 3, 4]
    ti[0] = 10
    assert ei.tolist()[0] == 10


def test_dlpack_non_contiguous_view():
    torch = pytest.importorskip("torch")
    e = em.arange(6, dtype=em.float64).reshape(2, 3).t()
    tt = torch.from_dlpack(e)
    assert tt.shape == (3, 2) and tt.stride() == e.stride()
    np.testing.assert_array_equal(tt.numpy(), e.numpy())


# ------------------------------------------------------------------ item / tolist / to
@pytest.mark.parametrize("dtype,value,expected", [
    (em.float32, 1.5, 1.5), (em.float64, 0.1, 0.1), (em.float16, 2.5, 2.5),
    (em.bfloat16, 3.0, 3.0), (em.int64, 7, 7), (em.int32, -3, -3), (em.int8, -8, -8),
    (em.int16, 300, 300), (em.uint8, 200, 200), (em.bool, True, True)])
def test_item_all_dtypes(dtype, value, expected):
    r = em.tensor([value], dtype=dtype).item()
    assert r == expected and type(r) is type(expected)


def test_tolist_python_types():
    assert em.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    r = em.tensor([1.5, 2.0], dtype=em.bfloat16).tolist()
    assert r == [1.5, 2.0] and all(type(v) is float for v in r)
    assert em.tensor(2.5).tolist() == 2.5
    assert type(em.tensor([1], dtype=em.float16).tolist()[0]) is float
    assert em.tensor([True]).tolist() == [True]


def test_item_errors_on_many_elements():
    with pytest.raises(RuntimeError, match="3 elements"):
        em.ones(3).item()


def test_to_and_type_as():
    x = em.tensor([1.7, -2.2])
    assert x.to(em.int64).tolist() == [1, -2]
    assert x.to(em.float64).dtype == em.float64
    assert x.to("cpu") is x
    y = em.zeros(2, dtype=em.float16)
    assert x.type_as(y).dtype == em.float16
    assert x.to(y).dtype == em.float16
    b = em.tensor([0.1, 1.0 / 3], dtype=em.bfloat16)
    np.testing.assert_array_equal(b.to(em.float32).numpy(),
                                  np.array([0.1, 1 / 3], dtype=b.dtype.np).astype(np.float32))


def test_tensor_from_bfloat16_values():
    b = em.tensor([1.0, 0.1, 300.0], dtype=em.bfloat16)
    assert b.dtype == em.bfloat16 and b.tolist() == [1.0, 0.10009765625, 300.0]
    c = em.tensor(b.numpy())
    assert c.dtype == em.bfloat16 and c.tolist() == b.tolist()


# ------------------------------------------------------------------ repr (hand-written)
REPRS = [
    (lambda: em.tensor([[1., 2.], [3., 4.]]), "tensor([[1., 2.],\n        [3., 4.]])"),
    (lambda: em.tensor([1, 2, 3]), "tensor([1, 2, 3])"),
    (lambda: em.tensor(3.5), "tensor(3.5000)"),
    (lambda: em.tensor([0.1, 0.2], dtype=em.float64),
     "tensor([0.1000, 0.2000], dtype=ember.float64)"),
    (lambda: em.tensor([1., 2.]), "tensor([1., 2.])"),
    (lambda: em.tensor([1e-5, 1.]), "tensor([1.0000e-05, 1.0000e+00])"),
    (lambda: em.tensor([1., 2000.]), "tensor([1.0000e+00, 2.0000e+03])"),
    (lambda: em.tensor([1e9]), "tensor([1.0000e+09])"),
    (lambda: em.tensor([float("nan"), float("-inf"), 1.5]), "tensor([   nan,   -inf, 1.5000])"),
    (lambda: em.tensor([True, False]), "tensor([ True, False])"),
    (lambda: em.tensor([1, 2], dtype=em.int32), "tensor([1, 2], dtype=ember.int32)"),
    (lambda: em.tensor([-1, 100]), "tensor([ -1, 100])"),
    (lambda: em.zeros(0, 3), "tensor([], size=(0, 3))"),
    (lambda: em.zeros(0, dtype=em.int64), "tensor([], dtype=ember.int64)"),
    (lambda: em.zeros(0), "tensor([])"),
    (lambda: em.tensor([1.5], dtype=em.bfloat16), "tensor([1.5000], dtype=ember.bfloat16)"),
    (lambda: em.ones(2, requires_grad=True), "tensor([1., 1.], requires_grad=True)"),
    (lambda: em.ones(2, requires_grad=True) * 2, "tensor([2., 2.], grad_fn=<MulBackward>)"),
    (lambda: em.arange(1001), "tensor([   0,    1,    2,  ...,  998,  999, 1000])"),
    (lambda: em.arange(1000, 3000, dtype=em.float32).reshape(100, 20),
     "tensor([[1000., 1001., 1002.,  ..., 1017., 1018., 1019.],\n"
     "        [1020., 1021., 1022.,  ..., 1037., 1038., 1039.],\n"
     "        [1040., 1041., 1042.,  ..., 1057., 1058., 1059.],\n"
     "        ...,\n"
     "        [2940., 2941., 2942.,  ..., 2957., 2958., 2959.],\n"
     "        [2960., 2961., 2962.,  ..., 2977., 2978., 2979.],\n"
     "        [2980., 2981., 2982.,  ..., 2997., 2998., 2999.]])"),
    (lambda: em.arange(8).reshape(2, 2, 2),
     "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]])"),
    (lambda: em.linspace(0, 1, 25),
     "tensor([0.0000, 0.0417, 0.0833, 0.1250, 0.1667, 0.2083, 0.2500, 0.2917, 0.3333,\n"
     "        0.3750, 0.4167, 0.4583, 0.5000, 0.5417, 0.5833, 0.6250, 0.6667, 0.7083,\n"
     "        0.7500, 0.7917, 0.8333, 0.8750, 0.9167, 0.9583, 1.0000])"),
]


@pytest.mark.parametrize("make,expected", REPRS, ids=[r[1][:30] for r in REPRS])
def test_repr_exact(make, expected):
    t = make()
    assert repr(t) == expected
    assert str(t) == expected


def test_format_and_printoptions():
    assert f"{em.tensor(2.0):.2f}" == "2.00"
    try:
        em.set_printoptions(precision=2)
        assert repr(em.tensor([0.123456])) == "tensor([0.12])"
        em.set_printoptions(sci_mode=True)
        assert repr(em.tensor([1.5])) == "tensor([1.50e+00])"
        em.set_printoptions(threshold=5, edgeitems=1)
        assert repr(em.arange(10)) == "tensor([0,  ..., 9])"
    finally:
        em.set_printoptions(profile="default")
    with em.printoptions(precision=1):
        assert repr(em.tensor([0.25])) == "tensor([0.2])"
    assert repr(em.tensor([0.25])) == "tensor([0.2500])"


# ------------------------------------------------------------------ repr vs torch
def _torch_cases(torch):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 4)), rng.standard_normal(1500) * 1e4,
              rng.standard_normal((40, 40)), rng.standard_normal((2, 3, 4)) * 1e-6,
              rng.integers(-1000, 1000, (5, 7)), rng.standard_normal((12, 3, 50)),
              np.round(rng.standard_normal((6, 6)) * 100), np.array([1e-3, 1e3, 5.0]),
              np.array(123456789.0), rng.standard_normal(30) * 1000,
              rng.integers(0, 2, (4, 4)).astype(bool), np.array([0.0, -0.0, 1e-10])]
    for a in arrays:
        yield em.tensor(a), torch.tensor(a)
        if a.dtype.kind == "f":
            yield em.tensor(a, dtype=em.float32), torch.tensor(a, dtype=torch.float32)
            yield em.tensor(a, dtype=em.float16), torch.tensor(a, dtype=torch.float16)


def test_repr_matches_torch():
    torch = pytest.importorskip("torch")
    for e, t in _torch_cases(torch):
        assert repr(e) == repr(t).replace("torch.", "ember."), repr(t)


def test_repr_matches_torch_with_options():
    torch = pytest.importorskip("torch")
    opts = [dict(precision=2), dict(linewidth=40), dict(edgeitems=1, threshold=10),
            dict(sci_mode=False), dict(edgeitems=0, threshold=10)]
    try:
        for o in opts:
            em.set_printoptions(**o)
            torch.set_printoptions(**o)
            for e, t in _torch_cases(torch):
                assert repr(e) == repr(t).replace("torch.", "ember."), (o, repr(t))
            em.set_printoptions(profile="default")
            torch.set_printoptions(profile="default")
    finally:
        em.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")


def test_dlpack_bfloat16_import_error_is_clear():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="bfloat16"):
        em.from_dlpack(torch.ones(2, dtype=torch.bfloat16))
