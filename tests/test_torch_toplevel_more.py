"""ember/_torch_toplevel_more.py: *_copy variants (values of the view, never aliasing),
top-level functionals, RNN cells (vs NumPy formulas and gradcheck), legacy autocast
switches, sym_* helpers, torch.range — and PyTorch where installed."""
import warnings

import numpy as np
import pytest

import ember as em
from ember.autograd import gradcheck

RNG = np.random.default_rng(1799)

COPIES = [("transpose_copy", (0, 1)), ("diagonal_copy", ()), ("slice_copy", (1, 1, 3)),
          ("select_copy", (0, 1)), ("unsqueeze_copy", (0,)), ("t_copy", ()),
          ("permute_copy", ((1, 0),)), ("expand_copy", ((2, 3, 4),)), ("view_copy", ((4, 3),)),
          ("squeeze_copy", ()), ("unfold_copy", (1, 2, 1)), ("alias_copy", ()),
          ("detach_copy", ()), ("as_strided_copy", ((2, 2), (1, 2)))]


def _view(name, x, args):
    view = {"transpose_copy": lambda: x.transpose(*args), "diagonal_copy": x.diagonal,
            "slice_copy": lambda: x[:, 1:3:1], "select_copy": lambda: x.select(*args),
            "unsqueeze_copy": lambda: x.unsqueeze(0), "t_copy": x.t,
            "permute_copy": lambda: x.permute(1, 0), "expand_copy": lambda: x.expand(2, 3, 4),
            "view_copy": lambda: x.view(4, 3), "squeeze_copy": x.squeeze,
            "unfold_copy": lambda: x.unfold(1, 2, 1), "alias_copy": lambda: x,
            "detach_copy": x.detach, "as_strided_copy": lambda: x.as_strided((2, 2), (1, 2))}
    return view[name]()


@pytest.mark.parametrize("name,args", COPIES)
def test_copy_variants_equal_the_view_and_do_not_alias(name, args):
    x = em.tensor(RNG.standard_normal((3, 4)))
    y = getattr(em, name)(x, *args)
    np.testing.assert_array_equal(y.numpy(), _view(name, x, args).numpy())
    before = x.numpy().copy()
    y.fill_(7.0)
    np.testing.assert_array_equal(x.numpy(), before)


def test_split_copies_and_complex_copies():
    x = em.arange(10.).reshape(2, 5)
    parts = em.split_copy(x, 2, 1)
    assert [tuple(p.shape) for p in parts] == [(2, 2), (2, 2), (2, 1)]
    parts[0].fill_(-1)
    assert float(x[0, 0]) == 0
    a, b = em.split_with_sizes_copy(x, [3, 2], 1)
    np.testing.assert_array_equal(b.numpy(), [[3, 4], [8, 9]])
    assert len(em.unbind_copy(x, 1)) == 5
    z = em.view_as_complex_copy(em.tensor([[1., 2.], [3., 4.]]))
    np.testing.assert_array_equal(z.numpy(), [1 + 2j, 3 + 4j])
    np.testing.assert_array_equal(em.view_as_real_copy(z).numpy(), [[1, 2], [3, 4]])


def _sig(v):
    return 1 / (1 + np.exp(-v))


def test_rnn_cells_vs_numpy_and_gradcheck():
    x, h, c = (RNG.standard_normal(s) for s in ((2, 3), (2, 4), (2, 4)))
    w_ih, w_hh = RNG.standard_normal((16, 3)), RNG.standard_normal((16, 4))
    b_ih, b_hh = RNG.standard_normal(16), RNG.standard_normal(16)
    g = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    i, f, gg, o = np.split(g, 4, axis=1)
    c2 = _sig(f) * c + _sig(i) * np.tanh(gg)
    T = em.tensor
    h_got, c_got = em.lstm_cell(T(x), (T(h), T(c)), T(w_ih), T(w_hh), T(b_ih), T(b_hh))
    np.testing.assert_allclose(c_got.numpy(), c2, rtol=1e-12)
    np.testing.assert_allclose(h_got.numpy(), _sig(o) * np.tanh(c2), rtol=1e-12)
    gi, gh = x @ w_ih[:12].T + b_ih[:12], h @ w_hh[:12].T + b_hh[:12]
    r, z = _sig(gi[:, :4] + gh[:, :4]), _sig(gi[:, 4:8] + gh[:, 4:8])
    n = np.tanh(gi[:, 8:] + r * gh[:, 8:])
    got = em.gru_cell(T(x), T(h), T(w_ih[:12]), T(w_hh[:12]), T(b_ih[:12]), T(b_hh[:12]))
    np.testing.assert_allclose(got.numpy(), (1 - z) * n + z * h, rtol=1e-12)
    got = em.rnn_relu_cell(T(x), T(h), T(w_ih[:4]), T(w_hh[:4]))
    np.testing.assert_allclose(got.numpy(), np.maximum(x @ w_ih[:4].T + h @ w_hh[:4].T, 0),
                               rtol=1e-12)
    args = [em.tensor(a, requires_grad=True) for a in (x, h, w_ih[:12], w_hh[:12])]
    assert gradcheck(em.gru_cell, tuple(args))
    assert gradcheck(lambda *a: em.rnn_tanh_cell(*a), (args[0], args[1],
                                                       em.tensor(w_ih[:4], requires_grad=True),
                                                       em.tensor(w_hh[:4], requires_grad=True)))


def test_toplevel_functionals_and_inplace():
    x = em.randn(1, 2, 4, 4, 4)
    np.testing.assert_array_equal(em.max_pool3d(x, 2).numpy(),
                                  em.nn.functional.max_pool3d(x, 2).numpy())
    v, i = em.max_pool1d_with_indices(em.tensor([[[1., 3., 2., 0.]]]), 2)
    assert v.tolist() == [[[3., 2.]]] and i.tolist() == [[[1, 2]]]
    np.testing.assert_array_equal(em.constant_pad_nd(em.ones(1, 2), (1, 0), 5.).numpy(),
                                  [[5, 1, 1]])
    y = em.channel_shuffle(em.arange(4.).reshape(1, 4, 1), 2)
    assert y.reshape(-1).tolist() == [0., 2., 1., 3.]
    t = em.ones(3, requires_grad=True) * 2
    assert em.detach_(t) is t and t.grad_fn is None
    z = em.tensor([1 + 1j])
    assert em.conj_physical_(z) is z and z.tolist() == [1 - 1j]
    idx = em.nonzero_static(em.tensor([0, 3, 0, 4]), size=3)
    assert idx.tolist() == [[1], [3], [-1]]


def test_legacy_autocast_switches_and_sym():
    with pytest.warns(DeprecationWarning, match="get_autocast_dtype"):
        assert em.get_autocast_cpu_dtype() == em.bfloat16
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert em.is_autocast_cpu_enabled() is False
        with em.autocast("cpu"):
            assert em.is_autocast_cpu_enabled() is True
    assert em.is_autocast_cache_enabled() in (True, False)
    assert (em.sym_int(-2.7), em.sym_float(3), em.sym_max(2, 5), em.sym_min(2, 5)) == \
        (-2, 3.0, 5, 2)
    assert em.sym_not(True) is False and em.sym_sqrt(9) == 3.0 and em.sym_sum([1, 2, 3]) == 6
    assert em.sym_ite(False, "t", "f") == "f"
    assert em.is_distributed(em.ones(1)) is False and em.is_vulkan_available() is False


def test_range_is_inclusive_and_warns():
    with pytest.warns(UserWarning, match="deprecated"):
        r = em.range(1, 4, 0.5)
    np.testing.assert_array_equal(r.numpy(), np.arange(1, 4.25, 0.5))
    assert r.dtype == em.float32
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="inconsistent"):
        em.range(4, 1)


def test_vs_torch():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((3, 4))
    for name, args in COPIES:
        a = getattr(torch, name)(torch.tensor(x), *args).numpy()
        np.testing.assert_array_equal(getattr(em, name)(em.tensor(x), *args).numpy(), a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for args in [(1, 4), (0, 1, 0.1), (-2, 3, 0.7)]:
            np.testing.assert_allclose(em.range(*args).numpy(), torch.range(*args).numpy(),
                                       rtol=1e-6)
    xi, h, c = (RNG.standard_normal(s) for s in ((2, 3), (2, 4), (2, 4)))
    w_ih, w_hh = RNG.standard_normal((16, 3)), RNG.standard_normal((16, 4))
    T = torch.tensor
    a = torch.lstm_cell(T(xi), (T(h), T(c)), T(w_ih), T(w_hh))
    b = em.lstm_cell(em.tensor(xi), (em.tensor(h), em.tensor(c)), em.tensor(w_ih),
                     em.tensor(w_hh))
    for p, q in zip(a, b):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-12)
