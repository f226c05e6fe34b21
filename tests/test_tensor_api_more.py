"""More of PyTorch's tensor/top-level surface (issue 17, item 2): Tensor.unfold, nanmedian,
index_reduce, grids and stacks, searchsorted, real-dtype identities, device predicates and
the top-level flags (determinism, matmul precision, default device, constants). The
differentiable ones also have OpInfo entries (tests/opinfo/breadth.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em


def test_tensor_unfold_is_a_view_with_pytorch_shapes():
    x = em.arange(10.0).reshape(2, 5)
    w = x.unfold(1, 3, 2)
    assert w.shape == (2, 2, 3)
    assert w.tolist() == [[[0.0, 1.0, 2.0], [2.0, 3.0, 4.0]], [[5.0, 6.0, 7.0], [7.0, 8.0, 9.0]]]
    x[0, 2] = 100.0
    assert w[0, 0, 2].item() == 100.0 and w[0, 1, 0].item() == 100.0   # a view
    with pytest.raises(ValueError, match="maximum size"):
        x.unfold(1, 6, 1)
    with pytest.raises(ValueError, match="step"):
        x.unfold(1, 2, 0)
    torch = pytest.importorskip("torch")
    a = np.arange(24.0).reshape(2, 3, 4)
    for args in ((0, 1, 1), (1, 2, 1), (2, 3, 1), (2, 2, 2), (-1, 4, 3)):
        np.testing.assert_array_equal(em.from_numpy(a).unfold(*args).numpy(),
                                      torch.from_numpy(a).unfold(*args).numpy())


def test_nanmedian_follows_torch():
    torch = pytest.importorskip("torch")
    nan = float("nan")
    a = np.array([[1.0, nan, 3.0, 2.0], [4.0, 5.0, nan, nan], [nan, 7.0, 8.0, 6.0]])
    got, want = em.nanmedian(em.from_numpy(a), 1), torch.nanmedian(torch.from_numpy(a), 1)
    np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    assert em.nanmedian(em.from_numpy(a)).item() == torch.nanmedian(torch.from_numpy(a)).item()
    assert math.isnan(em.nanmedian(em.tensor([nan, nan])).item())


def test_index_reduce_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a, s = rng.standard_normal((4, 3)), rng.standard_normal((3, 3))
    idx = np.array([0, 2, 0])
    for reduce in ("prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            got = em.index_reduce(em.from_numpy(a), 0, em.from_numpy(idx), em.from_numpy(s),
                                  reduce, include_self=include_self)
            want = torch.from_numpy(a).index_reduce(0, torch.from_numpy(idx),
                                                    torch.from_numpy(s), reduce,
                                                    include_self=include_self)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="reduce argument"):
        em.index_reduce(em.zeros(2), 0, em.tensor([0]), em.ones(1), "sum")


def test_grids_and_stacks_follow_torch():
    torch = pytest.importorskip("torch")
    a, b = np.arange(2.0), np.arange(3.0)
    for indexing in ("ij", "xy"):
        for g, w in zip(em.meshgrid(em.from_numpy(a), em.from_numpy(b), indexing=indexing),
                        torch.meshgrid(torch.from_numpy(a), torch.from_numpy(b),
                                       indexing=indexing)):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    for name in ("atleast_1d", "atleast_2d", "atleast_3d"):
        for x in (np.array(1.0), np.arange(3.0), np.ones((2, 3))):
            assert getattr(em, name)(em.from_numpy(x)).shape == \
                getattr(torch, name)(torch.from_numpy(x)).shape
        pair = getattr(em, name)(em.ones(2), em.ones(()))
        assert isinstance(pair, tuple) and len(pair) == 2
    xs, ys = em.broadcast_tensors(em.ones(3, 1), em.ones(4))
    assert xs.shape == ys.shape == (3, 4)
    np.testing.assert_array_equal(em.tril_indices(4, 3, -1).numpy(),
                                  torch.tril_indices(4, 3, -1).numpy())
    np.testing.assert_array_equal(em.triu_indices(3, 5, 1).numpy(),
                                  torch.triu_indices(3, 5, 1).numpy())
    np.testing.assert_array_equal(em.row_stack([em.ones(2), em.zeros(2)]).numpy(),
                                  np.vstack([np.ones(2), np.zeros(2)]))


def test_searchsorted_and_bucketize_follow_torch():
    torch = pytest.importorskip("torch")
    seq = np.array([[1.0, 3.0, 5.0, 7.0], [2.0, 4.0, 6.0, 8.0]])
    vals = np.array([[3.0, 6.0, 9.0], [1.0, 4.0, 8.0]])
    for right in (False, True):
        np.testing.assert_array_equal(
            em.searchsorted(em.from_numpy(seq), em.from_numpy(vals), right=right).numpy(),
            torch.searchsorted(torch.from_numpy(seq), torch.from_numpy(vals),
                               right=right).numpy())
        np.testing.assert_array_equal(
            em.bucketize(em.from_numpy(vals), em.from_numpy(seq[0]), right=right).numpy(),
            torch.bucketize(torch.from_numpy(vals), torch.from_numpy(seq[0]),
                            right=right).numpy())
    assert em.searchsorted(em.tensor([1, 3]), em.tensor([2]), out_int32=True).dtype == em.int32
    with pytest.raises(ValueError, match="1-D"):
        em.bucketize(em.ones(2), em.ones(2, 2))


def test_zero_distance_and_zero_gradients_follow_torch():
    torch = pytest.importorskip("torch")
    a = np.array([[0.0, 1.0], [2.0, 3.0]])
    x = em.from_numpy(a.copy()).requires_grad_()
    em.cdist(x, em.from_numpy(a.copy())).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    torch.cdist(tx, torch.tensor(a)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-12)
    s = em.tensor([0.0, 0.5], dtype=em.float64).requires_grad_()
    em.sinc(s).sum().backward()
    ts = torch.tensor([0.0, 0.5], dtype=torch.float64, requires_grad=True)
    torch.sinc(ts).sum().backward()
    np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy(), atol=1e-12)
    nan = float("nan")
    xv, yv = np.array([0.0, 0.0, 2.0, 0.0]), np.array([0.0, nan, 3.0, -1.0])
    np.testing.assert_array_equal(em.xlogy(em.from_numpy(xv), em.from_numpy(yv)).numpy(),
                                  torch.xlogy(torch.from_numpy(xv), torch.from_numpy(yv)).numpy())
    p = np.array([0.0, 0.3, 1.0])
    np.testing.assert_allclose(em.logit(em.from_numpy(p), eps=1e-6).numpy(),
                               torch.logit(torch.from_numpy(p), eps=1e-6).numpy())


def test_real_dtype_identities_and_device_predicates():
    x = em.arange(6.0).reshape(2, 3)
    assert x.conj() is x and x.resolve_conj() is x and x.real is x
    assert not x.is_conj() and not x.is_neg()
    assert x.mH.shape == (3, 2) and x.H.shape == (3, 2) and x.adjoint().shape == (3, 2)
    with pytest.raises(ValueError, match="2-D"):
        em.ones(2, 2, 2).H
    with pytest.raises(TypeError, match="non-complex"):
        x.imag
    for flag in ("is_meta", "is_sparse", "is_quantized", "is_mkldnn", "is_nested", "is_mps",
                 "is_xpu"):
        assert getattr(x, flag) is False
    assert x.get_device() == -1
    assert em.sgn(em.tensor([-2.0, 0.0, 3.0])).tolist() == [-1.0, 0.0, 1.0]
    assert em.positive(x) is x
    with pytest.raises(TypeError, match="bool"):
        em.positive(em.tensor([True]))


def test_inplace_aliases():
    x = em.tensor([2.0, 4.0])
    x.multiply_(2).divide_(4).subtract_(1).negative_()
    assert x.tolist() == [0.0, -1.0]
    m = em.ones(3, 3)
    m.tril_()
    assert m.sum().item() == 6
    y = em.tensor([0.5])
    y.logit_()
    assert y.item() == 0.0


def test_top_level_flags_and_constants():
    assert em.pi == math.pi and em.e == math.e and em.inf == math.inf and math.isnan(em.nan)
    assert em.ones(3)[em.newaxis].shape == (1, 3)
    try:
        em.use_deterministic_algorithms(True, warn_only=True)
        assert em.are_deterministic_algorithms_enabled()
        assert em.is_deterministic_algorithms_warn_only_enabled()
        assert em.get_deterministic_debug_mode() == 1
        em.set_deterministic_debug_mode("error")
        assert em.get_deterministic_debug_mode() == 2
    finally:
        em.use_deterministic_algorithms(False)
    with pytest.raises(ValueError, match="invalid mode"):
        em.set_deterministic_debug_mode(5)
    em.set_float32_matmul_precision("high")
    assert em.get_float32_matmul_precision() == "high"
    em.set_float32_matmul_precision("highest")
    with pytest.raises(ValueError, match="valid are"):
        em.set_float32_matmul_precision("low")
    assert em.get_default_device() == em.device("cpu")
    em.set_default_device("cpu")
    with pytest.raises(RuntimeError, match="CPU"):
        em.set_default_device("cuda")
    assert em.typename(em.ones(1)) == "ember.FloatTensor" and em.typename(1) == "int"


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_and_nanquantile_follow_torch(interpolation):
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(0).standard_normal((4, 6))
    a[1, 2] = np.nan
    for name in ("quantile", "nanquantile"):
        for q in (0.3, [0.1, 0.5, 0.95]):
            for dim, keep in ((None, False), (1, False), (0, True), (None, True)):
                eq = em.tensor(q, dtype=em.float64) if isinstance(q, list) else q
                tq = torch.tensor(q, dtype=torch.float64) if isinstance(q, list) else q
                got = getattr(em, name)(em.from_numpy(a), eq, dim, keep,
                                        interpolation=interpolation).numpy()
                want = getattr(torch, name)(torch.from_numpy(a), tq, dim, keep,
                                            interpolation=interpolation).numpy()
                assert got.shape == want.shape
                np.testing.assert_allclose(got, want, rtol=1e-12)


def test_quantile_gradients_follow_torch_including_q():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(1).standard_normal(7)
    x, q = em.from_numpy(a.copy()).requires_grad_(), em.tensor([0.3, 0.6], dtype=em.float64)
    q.requires_grad_()
    em.quantile(x, q).sum().backward()
    tx, tq = torch.tensor(a, requires_grad=True), torch.tensor([0.3, 0.6], dtype=torch.float64,
                                                               requires_grad=True)
    torch.quantile(tx, tq).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(q.grad.numpy(), tq.grad.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        em.quantile(em.ones(3), 1.5)
    with pytest.raises(TypeError, match="floating point"):
        em.quantile(em.tensor([1, 2]), 0.5)


def test_windows_and_fill_diagonal_follow_torch():
    torch = pytest.importorskip("torch")
    for name in ("hann_window", "hamming_window", "blackman_window", "bartlett_window",
                 "kaiser_window"):
        for n in (0, 1, 5, 8):
            for periodic in (True, False):
                np.testing.assert_allclose(getattr(em, name)(n, periodic).numpy(),
                                           getattr(torch, name)(n, periodic).numpy(),
                                           atol=1e-6, err_msg=f"{name}({n}, {periodic})")
    for shape, wrap in (((7, 3), True), ((7, 3), False), ((3, 7), False), ((3, 3, 3), False)):
        e, t = em.zeros(*shape), torch.zeros(*shape)
        e.fill_diagonal_(5.0, wrap=wrap)
        t.fill_diagonal_(5.0, wrap=wrap)
        np.testing.assert_array_equal(e.numpy(), t.numpy())
    with pytest.raises(ValueError, match="equal length"):
        em.zeros(2, 3, 4).fill_diagonal_(1.0)


def test_integer_and_bit_helpers_follow_torch():
    torch = pytest.importorskip("torch")
    a, b = np.array([12, 18, -4, 0]), np.array([8, 27, 6, 5])
    for name in ("gcd", "lcm"):
        got = getattr(em, name)(em.from_numpy(a), em.from_numpy(b))
        want = getattr(torch, name)(torch.from_numpy(a), torch.from_numpy(b))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(TypeError, match="integer"):
        em.gcd(em.ones(2), em.ones(2))
    f = np.array([8.0, 0.3, -5.0, 0.0])
    em_m, em_e = em.frexp(em.from_numpy(f))
    t_m, t_e = torch.frexp(torch.from_numpy(f))
    np.testing.assert_array_equal(em_m.numpy(), t_m.numpy())
    np.testing.assert_array_equal(em_e.numpy(), t_e.numpy())
    np.testing.assert_array_equal(
        em.nextafter(em.from_numpy(f), em.from_numpy(-f)).numpy(),
        torch.nextafter(torch.from_numpy(f), torch.from_numpy(-f)).numpy())
    np.testing.assert_array_equal(em.angle(em.from_numpy(f)).numpy(),
                                  torch.angle(torch.from_numpy(f)).numpy())
    np.testing.assert_array_equal(em.isin(em.tensor([1, 2, 3]), em.tensor([2, 5])).numpy(),
                                  [False, True, False])
    for got, want in zip(em.unravel_index(em.tensor([5, 7, -1]), (2, 4)),
                         torch.unravel_index(torch.tensor([5, 7, -1]), (2, 4))):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for vals, r, rep in (([1, 2, 3], 2, False), ([1, 2, 3], 3, True), ([1, 2, 3], 0, False),
                         ([1], 2, False), ([1, 2, 3], 1, False)):
        got = em.combinations(em.tensor(vals), r, rep)
        want = torch.combinations(torch.tensor(vals), r, rep)
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_factories_and_aliases():
    t = em.empty_strided((2, 3), (1, 2))
    assert t.shape == (2, 3) and t.stride() == (1, 2)
    assert em.scalar_tensor(3).dtype == em.float32 and em.scalar_tensor(3).ndim == 0
    a = np.arange(3.0)
    shared, copied = em.asarray(a), em.asarray(a, copy=True)
    a[0] = 9.0
    assert shared[0].item() == 9.0 and copied[0].item() == 0.0
    x = em.ones(2, dtype=em.float64)
    assert x.new(2, 3).shape == (2, 3) and x.new(2, 3).dtype == em.float64
    assert x.new([1, 2]).tolist() == [1.0, 2.0]
    assert em.narrow_copy(em.arange(5), 0, 1, 2).tolist() == [1, 2]
    assert em.rsub(em.tensor([1.0]), 5.0).tolist() == [4.0]
    assert em.ones(4).bernoulli().shape == (4,)
    assert em.tensor([0.0, 1.0]).multinomial(3, replacement=True).tolist() == [1, 1, 1]
    with pytest.raises(TypeError, match="float64"):
        em.ones(2).float_power_(2)
    m = em.zeros(2, 2)
    m.addmm_(em.eye(2), em.ones(2, 2))
    assert m.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert em.selu is em.nn.functional.selu and em.pixel_shuffle is em.nn.functional.pixel_shuffle
    assert em.ones(1).layout is em.strided
    y = em.ones(2, 3).t().contiguous(memory_format=em.contiguous_format)
    assert y.is_contiguous(memory_format=em.contiguous_format)
    assert repr(em.preserve_format) == "ember.preserve_format"
    assert em.is_inference(em.ones(1)) is False and em.get_device(em.ones(1)) == -1
    assert em.is_signed(em.ones(1)) and not em.isreal(em.ones(2)).logical_not().any()


def test_inplace_view_ops_restride_the_tensor_itself():
    torch = pytest.importorskip("torch")
    a = np.arange(6.0).reshape(2, 3)
    for op, args in (("unsqueeze_", (0,)), ("unsqueeze_", (-1,)), ("squeeze_", ()),
                     ("t_", ()), ("transpose_", (0, 1)), ("swapdims_", (1, 0))):
        e, t = em.from_numpy(a.copy()), torch.from_numpy(a.copy())
        if op == "squeeze_":
            e, t = e.unsqueeze(0), t.unsqueeze(0)
        assert getattr(e, op)(*args) is e
        getattr(t, op)(*args)
        assert tuple(e.shape) == tuple(t.shape) and e.stride() == t.stride()
        np.testing.assert_array_equal(e.numpy(), t.numpy())
    x = em.zeros(2, 3)
    row = x[0]
    x.t_()
    x[1, 0] = 7.0                      # same storage: the earlier view sees the write
    assert row[1].item() == 7.0
    p = em.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"x = x.unsqueeze\(0\)"):
        p.unsqueeze_(0)
    q = p * 2
    with pytest.raises(RuntimeError, match="autograd history"):
        with em.no_grad():
            q.unsqueeze_(0)
    with em.no_grad():
        p.unsqueeze_(0)
    assert p.shape == (1, 2)


def test_apply_and_map():
    y = em.tensor([1.0, 2.0, 3.0])
    assert y.apply_(lambda v: v * v) is y and y.tolist() == [1.0, 4.0, 9.0]
    y.map_(em.tensor([1.0]), lambda a, b: a - b)
    assert y.tolist() == [0.0, 3.0, 8.0]
    with pytest.raises(RuntimeError, match="callable"):
        em.ones(2, requires_grad=True).apply_(abs)


def test_logcumsumexp_is_stable_and_follows_torch():
    torch = pytest.importorskip("torch")
    a = np.array([[1000.0, -1000.0, 0.5, -2000.0, 3.0], [-np.inf, 0.0, -np.inf, 1.0, 2.0]])
    np.testing.assert_allclose(em.logcumsumexp(em.from_numpy(a), 1).numpy(),
                               torch.logcumsumexp(torch.from_numpy(a), 1).numpy(), rtol=1e-14)
    b = np.random.default_rng(0).standard_normal((3, 7, 4)) * 50   # values far apart
    for d in range(3):
        np.testing.assert_allclose(em.logcumsumexp(em.from_numpy(b), d).numpy(),
                                   torch.logcumsumexp(torch.from_numpy(b), d).numpy(),
                                   rtol=1e-12)


def test_histogram_follows_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal(100)
    cases = [((7,), {}), ((np.array([-1.0, 0.0, 2.0]),), {"density": True}),
             ((5,), {"range": (-1.0, 1.0), "weight": x * x})]
    for args, kw in cases:
        ea = tuple(em.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args)
        ta = tuple(torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args)
        ekw = {k: em.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        tkw = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        (h, e), (th, te) = em.histogram(em.from_numpy(x), *ea, **ekw), \
            torch.histogram(torch.from_numpy(x), *ta, **tkw)
        np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-12)
        np.testing.assert_allclose(e.numpy(), te.numpy(), rtol=1e-12, atol=1e-15)


def test_random_fills_are_seeded_and_distributed_right():
    em.manual_seed(0)
    a = em.empty(200000, dtype=em.float64).log_normal_(0.5, 0.25)
    em.manual_seed(0)
    b = em.empty(200000, dtype=em.float64).log_normal_(0.5, 0.25)
    assert (a.numpy() == b.numpy()).all()                      # the default generator
    la = np.log(a.numpy())
    assert abs(la.mean() - 0.5) < 0.005 and abs(la.std() - 0.25) < 0.005
    c = em.empty(200000, dtype=em.float64).cauchy_(2.0, 3.0).numpy()
    assert abs(np.median(c) - 2.0) < 0.05                      # median of Cauchy(2, 3)
    assert abs(np.percentile(c, 75) - np.percentile(c, 25) - 6.0) < 0.1   # IQR = 2 sigma
    g = em.empty(200000, dtype=em.int64).geometric_(0.25).numpy()
    assert g.min() >= 1 and abs(g.mean() - 4.0) < 0.05         # mean 1/p
    with pytest.raises(ValueError, match="p to be in"):
        em.empty(2).geometric_(1.5)
    with pytest.raises(TypeError, match="floating point"):
        em.empty(2, dtype=em.int64).cauchy_()
    w = em.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w.log_normal_()


def test_dtype_helpers_and_buffers():
    torch = pytest.importorskip("torch")
    pairs = [("float64", "float32"), ("float32", "int64"), ("int64", "float32"),
             ("int32", "bool"), ("bool", "uint8"), ("int8", "uint8")]
    for a, b in pairs:
        assert em.can_cast(getattr(em, a), getattr(em, b)) == \
            torch.can_cast(getattr(torch, a), getattr(torch, b)), (a, b)
    before = em.get_default_dtype()
    try:
        em.set_default_tensor_type("torch.DoubleTensor")
        assert em.get_default_dtype() == em.float64 and em.tensor([1.0]).dtype == em.float64
        em.set_default_tensor_type(em.FloatTensor)
        assert em.get_default_dtype() == em.float32
    finally:
        em.set_default_dtype(before)
    with pytest.raises(TypeError, match="CPU floating point"):
        em.set_default_tensor_type("torch.cuda.FloatTensor")
    assert em.set_flush_denormal(True) is False
    buf = bytearray(np.arange(4, dtype=np.float32).tobytes())
    t = em.frombuffer(buf, dtype=em.float32, count=2, offset=4)
    assert t.tolist() == [1.0, 2.0]
    t[0] = 9.0                                   # shares the buffer's memory
    assert np.frombuffer(buf, np.float32)[1] == 9.0


def test_small_tensor_methods_follow_torch():
    torch = pytest.importorskip("torch")
    a = np.array([[0, 1], [2, 0]])
    for size in (1, 2, 3):
        np.testing.assert_array_equal(em.from_numpy(a).nonzero_static(size=size).numpy(),
                                      torch.from_numpy(a).nonzero_static(size=size).numpy())
    x = em.ones(2)
    assert x.new_empty_strided((2, 2), (1, 2)).stride() == (1, 2)
    assert x.is_set_to(x) and not x.is_set_to(x.clone())
    assert not x.is_shared() and not x.is_distributed()
    assert x.const_data_ptr() == x.data_ptr()
    v = np.array([-1.0, 0.2, 3.0])
    np.testing.assert_array_equal(em.from_numpy(v).hardshrink().numpy(),
                                  torch.from_numpy(v).hardshrink().numpy())
    np.testing.assert_array_equal(em.from_numpy(v).prelu(em.tensor([0.25], dtype=em.float64))
                                  .numpy(),
                                  torch.from_numpy(v).prelu(torch.tensor([0.25],
                                                                         dtype=torch.float64))
                                  .numpy())


def test_gamma_family_special_values_follow_torch():
    torch = pytest.importorskip("torch")
    x = np.array([0.5, 1.0, 2.0, 3.5, 10.0, 100.0, 1e5, 1e300, -0.5, -1.5, -2.7, -100.3, 0.0,
                  -1.0, -2.0, np.inf, -np.inf, np.nan, 1e-10, -1e-10, 1 + 1e-9, 2 - 1e-9])
    for name in ("lgamma", "digamma"):
        got = getattr(em, name)(em.from_numpy(x)).numpy()
        want = getattr(torch, name)(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14, equal_nan=True,
                                   err_msg=name)
    assert em.lgamma(em.tensor([3])).dtype == em.float32
    assert em.lgamma(em.tensor([3.0], dtype=em.bfloat16)).dtype == em.bfloat16


def test_polygamma_and_gradient_chain_match_scipy():
    sp = pytest.importorskip("scipy.special")
    y = np.array([0.3, 1.0, 2.5, 7.0, 30.0, 1e4, -0.5, -2.3])
    for n in (0, 1, 2, 3, 5):
        np.testing.assert_allclose(em.polygamma(n, em.from_numpy(y)).numpy(),
                                   sp.polygamma(n, y), rtol=1e-13)
    x = em.tensor([0.7, 2.5, -1.3], dtype=em.float64).requires_grad_()
    (g,) = em.autograd.grad(em.lgamma(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), sp.digamma(x.detach().numpy()), rtol=1e-13)
    (h,) = em.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), sp.polygamma(1, x.detach().numpy()), rtol=1e-13)
    np.testing.assert_allclose(em.mvlgamma(em.tensor([2.5, 4.0], dtype=em.float64), 3).numpy(),
                               [sp.multigammaln(2.5, 3), sp.multigammaln(4.0, 3)], rtol=1e-13)
    with pytest.raises(ValueError, match="non-negative integer"):
        em.polygamma(-1, x)
    with pytest.raises(ValueError, match="greater than"):
        em.mvlgamma(em.tensor([0.5]), 3)
