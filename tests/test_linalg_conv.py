"""Behaviour tests for linear algebra, convolution and pooling: every torch.matmul broadcasting
case with gradients, error messages, and PyTorch as an oracle for conv/pool parameter combos."""

import numpy as np
import pytest

import ember as em
from ember.ops import conv as C

from opinfo.linalg import EINSUM, MATMUL_CASES

RNG = np.random.default_rng(1234)
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")


def _arr(*shape):
    return RNG.standard_normal(shape)


def _leaf(a):
    return em.tensor(a, requires_grad=True)


def _close(got, want, atol=1e-10):
    want = np.asarray(want)
    got = got.detach().numpy() if isinstance(got, em.Tensor) else np.asarray(got)
    assert got.shape == want.shape, f"shape {got.shape} vs {want.shape}"
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=atol)


# ------------------------------------------------------------------ matmul
@pytest.mark.parametrize("sa,sb", [(a, b) for a, b, _ in MATMUL_CASES], ids=str)
def test_matmul_forward_and_grad_all_broadcasting_cases(sa, sb):
    a, b = _arr(*sa), _arr(*sb)
    x, y = _leaf(a), _leaf(b)
    out = x @ y
    _close(out, np.matmul(a, b))
    g = _arr(*out.shape)
    out.backward(em.tensor(g))
    # from the definition: promote 1-D operands to matrices, then reduce broadcast dims
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g.reshape(np.matmul(a2, b2).shape)
    _close(x.grad, _reduce_to(np.matmul(g2, np.swapaxes(b2, -1, -2)), a2.shape).reshape(sa))
    _close(y.grad, _reduce_to(np.matmul(np.swapaxes(a2, -1, -2), g2), b2.shape).reshape(sb))


def _reduce_to(g, shape):
    g = g.sum(tuple(range(g.ndim - len(shape)))) if g.ndim > len(shape) else g
    return g.sum(tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)


def test_matmul_grads_match_torch_batched_broadcast():
    torch = pytest.importorskip("torch")
    for sa, sb in [((2, 1, 3, 4), (5, 4, 2)), ((4,), (3, 4, 2)), ((3, 2, 4), (4,)),
                   ((4,), (4,))]:
        a, b = _arr(*sa), _arr(*sb)
        x, y = _leaf(a), _leaf(b)
        ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        (x @ y).sum().backward()
        torch.matmul(ta, tb).sum().backward()
        _close(x.grad, ta.grad.numpy())
        _close(y.grad, tb.grad.numpy())


def test_matmul_of_transposed_views():
    a, b = _arr(4, 3), _arr(5, 4)
    x, y = em.tensor(a), em.tensor(b)
    _close(x.t() @ y.t(), a.T @ b.T)
    xb = em.tensor(_arr(2, 4, 3))
    _close(em.matmul(xb.mT, x), np.matmul(np.swapaxes(xb.numpy(), -1, -2), a))


@pytest.mark.parametrize("sx", [(6, 3), (2, 6, 3)], ids=str)
def test_linear_weight_gradient_is_contiguous_like_the_weight(sx):
    # x @ w.mT: w's gradient is produced in w's layout (the optimizer then walks it fast)
    a, wa, g = _arr(*sx), _arr(5, 3), _arr(*sx[:-1], 5)
    x, w = _leaf(a), _leaf(wa)
    (x @ w.mT).backward(em.tensor(g))
    assert w.grad.is_contiguous()
    _close(w.grad, g.reshape(-1, 5).T @ a.reshape(-1, 3))
    _close(x.grad, g @ wa)


@pytest.mark.parametrize("sa,sb,frag", [
    ((2, 3), (4, 5), "(2, 3) and (4, 5)"),
    ((3,), (4,), "(3,) and (4,)"),
    ((2, 2, 3), (3, 3, 2), "batch dims"),
    ((), (3,), "at least 1 dimension"),
])
def test_matmul_shape_errors_name_both_shapes(sa, sb, frag):
    with pytest.raises(em.ShapeError, match="matmul") as e:
        em.matmul(em.tensor(np.ones(sa)), em.tensor(np.ones(sb)))
    assert frag in str(e.value)


def test_mm_bmm_mv_dot_reject_wrong_ranks():
    m, v, b = em.ones(2, 3), em.ones(3), em.ones(2, 3, 4)
    with pytest.raises(em.ShapeError, match="mm: mat2 must be a matrix"):
        em.mm(m, v)
    with pytest.raises(em.ShapeError, match=r"bmm: input must be a 3-D tensor"):
        em.bmm(m, b)
    with pytest.raises(em.ShapeError, match=r"bmm: expected mat2 of shape \(2, 4, m\)"):
        em.bmm(b, em.ones(3, 4, 2))
    with pytest.raises(em.ShapeError, match="mv: vec must be a vector"):
        em.mv(m, m)
    with pytest.raises(em.ShapeError, match="dot: inconsistent"):
        em.dot(v, em.ones(4))
    with pytest.raises(em.DTypeError, match="same dtype"):
        em.dot(v, em.ones(3, dtype=em.float64))
    with pytest.raises(em.ShapeError, match="outer"):
        em.outer(m, v)


def test_methods_and_out():
    a, b = em.tensor(_arr(2, 3)), em.tensor(_arr(3, 2))
    _close(a.mm(b), a.numpy() @ b.numpy())
    _close(a.matmul(b), a.numpy() @ b.numpy())
    out = em.zeros(2, 2, dtype=em.float64)
    r = em.matmul(a, b, out=out)
    assert r is out
    _close(out, a.numpy() @ b.numpy())
    _close(em.addmm(em.ones(2), a, b, beta=0.5, alpha=2), 0.5 + 2 * (a.numpy() @ b.numpy()))


def test_addmm_beta_zero_ignores_nan():
    a, b = em.tensor(_arr(2, 3)), em.tensor(_arr(3, 2))
    nan = em.tensor(np.full((2, 2), np.nan))
    _close(em.addmm(nan, a, b, beta=0), a.numpy() @ b.numpy())


def test_integer_matmul_stays_integer():
    a = em.tensor([[1, 2], [3, 4]])
    r = a @ a
    assert r.dtype == em.int64 and r.tolist() == [[7, 10], [15, 22]]


# ------------------------------------------------------------------ einsum
@pytest.mark.parametrize("eq,shapes", [(e, s) for e, s, _ in EINSUM], ids=str)
def test_einsum_matches_torch_with_grads(eq, shapes):
    torch = pytest.importorskip("torch")
    arrs = [_arr(*s) for s in shapes]
    xs = [_leaf(a) for a in arrs]
    ts = [torch.tensor(a, requires_grad=True) for a in arrs]
    out, tout = em.einsum(eq, *xs), torch.einsum(eq, *ts)
    _close(out, tout.detach().numpy())
    if out.numel():
        g = _arr(*out.shape)
        out.backward(em.tensor(g))
        tout.backward(torch.tensor(g))
        for x, t in zip(xs, ts):
            _close(x.grad, t.grad.numpy())


def test_einsum_list_operands_and_errors():
    a, b = em.ones(2, 3), em.ones(3, 4)
    assert em.einsum("ij,jk->ik", [a, b]).shape == (2, 4)
    with pytest.raises(em.ShapeError, match="names 2 operands but 1"):
        em.einsum("ij,jk->ik", a)
    with pytest.raises(em.ShapeError, match="do not match the 2 dims of operand 1"):
        em.einsum("ij,j->i", a, b)
    with pytest.raises(em.ShapeError, match="subscript 'j' has size 4"):
        em.einsum("ij,kj->ik", a, b)
    with pytest.raises(ValueError, match="output subscripts"):
        em.einsum("ij->ik", a)
    with pytest.raises(ValueError, match="invalid equation"):
        em.einsum("i1->i", a)


def test_einsum_relabelling_output_does_not_alias_input():
    a = em.tensor(_arr(3, 3))
    r = em.einsum("ij->ji", a)
    r.numpy()[0, 1] = 100.0
    assert a.numpy()[1, 0] != 100.0


# ------------------------------------------------------------------ conv vs torch
def _torch_vs_ember(torch, fn_em, fn_t, arrays, grad=True, atol=1e-10):
    xs = [None if a is None else _leaf(a) for a in arrays]
    ts = [None if a is None else torch.tensor(a, requires_grad=True) for a in arrays]
    out, tout = fn_em(*xs), fn_t(*ts)
    if isinstance(out, tuple):
        _close(out[1], tout[1].numpy())
        out, tout = out[0], tout[0]
    _close(out, tout.detach().numpy(), atol)
    if grad:
        g = _arr(*out.shape)
        out.backward(em.tensor(g))
        tout.backward(torch.tensor(g))
        for x, t in zip(xs, ts):
            if x is not None:
                _close(x.grad, t.grad.numpy(), atol)


CONV_CASES = [
    ((2, 4, 9, 8), (6, 4, 3, 3), {}),
    ((2, 4, 9, 8), (6, 4, 3, 3), {"stride": 2, "padding": 1}),
    ((2, 4, 9, 8), (6, 2, 3, 3), {"groups": 2, "padding": (2, 1), "dilation": (2, 1)}),
    ((2, 4, 9, 8), (4, 1, 3, 3), {"groups": 4, "padding": "same"}),      # depthwise
    ((1, 3, 7, 7), (2, 3, 2, 2), {"padding": "same"}),                   # even kernel
    ((1, 3, 7, 6), (2, 3, 4, 3), {"padding": "same", "dilation": 2}),
    ((1, 3, 7, 6), (2, 3, 2, 4), {"padding": "same", "dilation": (3, 1)}),
    ((1, 3, 7, 6), (2, 3, 3, 3), {"padding": "valid", "stride": (1, 3)}),
    ((2, 2, 5, 5), (3, 2, 5, 5), {}),                                    # kernel == input
    ((2, 3, 6, 6), (4, 3, 1, 1), {"stride": 2}),                         # 1x1
    ((3, 8, 8), (2, 3, 3, 3), {"padding": 1}),                           # unbatched
]


@pytest.mark.parametrize("sx,sw,kw", CONV_CASES, ids=str)
def test_conv2d_matches_torch(sx, sw, kw):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    arrays = [_arr(*sx), _arr(*sw), _arr(sw[0])]
    _torch_vs_ember(torch, lambda x, w, b: C.conv2d(x, w, b, **kw),
                    lambda x, w, b: F.conv2d(x, w, b, **kw), arrays)


@pytest.mark.parametrize("sx,sw,kw", [
    ((2, 4, 11), (6, 2, 3), {"groups": 2, "stride": 2, "padding": 1, "dilation": 2}),
    ((1, 3, 8), (2, 3, 4), {"padding": "same", "dilation": 3}),
    ((3, 9), (2, 3, 2), {}),
], ids=str)
def test_conv1d_matches_torch(sx, sw, kw):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    _torch_vs_ember(torch, lambda x, w, b: C.conv1d(x, w, b, **kw),
                    lambda x, w, b: F.conv1d(x, w, b, **kw), [_arr(*sx), _arr(*sw),
                                                            _arr(sw[0])])


@pytest.mark.parametrize("sx,sw,kw", [
    ((2, 4, 3, 4), (4, 3, 3, 3), {}),
    ((2, 4, 3, 4), (4, 3, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    ((2, 4, 3, 4), (4, 2, 3, 2), {"stride": (3, 2), "padding": (1, 0), "groups": 2,
                                  "output_padding": (2, 1)}),
    ((1, 2, 4, 4), (2, 3, 2, 3), {"dilation": 2, "output_padding": 1}),   # op < dilation
    ((1, 2, 4, 4), (2, 3, 3, 3), {"stride": 2, "dilation": (1, 2), "padding": 2}),
    ((4, 3, 3), (4, 2, 2, 2), {"stride": 2}),                              # unbatched
], ids=str)
def test_conv_transpose2d_matches_torch(sx, sw, kw):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    cout = sw[1] * kw.get("groups", 1)
    _torch_vs_ember(torch, lambda x, w, b: C.conv_transpose2d(x, w, b, **kw),
                    lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
                    [_arr(*sx), _arr(*sw), _arr(cout)])


def test_conv_transpose1d_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    kw = {"stride": 3, "padding": 1, "output_padding": 2, "groups": 2, "dilation": 2}
    _torch_vs_ember(torch, lambda x, w: C.conv_transpose1d(x, w, **kw),
                    lambda x, w: F.conv_transpose1d(x, w, **kw), [_arr(2, 4, 5), _arr(4, 3, 3)])


def test_unfold_fold_match_torch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    kw = {"kernel_size": (3, 2), "dilation": (1, 2), "padding": (1, 2), "stride": (2, 1)}
    _torch_vs_ember(torch, lambda x: C.unfold(x, **kw), lambda x: F.unfold(x, **kw),
                    [_arr(2, 3, 7, 6)])
    cols = F.unfold(torch.zeros(2, 3, 7, 6), **kw)
    _torch_vs_ember(torch, lambda c: C.fold(c, (7, 6), **kw),
                    lambda c: F.fold(c, (7, 6), **kw), [_arr(*cols.shape)])


@pytest.mark.parametrize("kw", [
    {"kernel_size": 2, "stride": 2},                                   # tiles the image
    {"kernel_size": (2, 3), "stride": (3, 4), "padding": (1, 0)},       # gaps between windows
    {"kernel_size": 2, "dilation": 2, "stride": 3},
], ids=str)
def test_fold_of_disjoint_windows_matches_torch(kw):
    # windows that cannot overlap are copied, not added (the max-pool backward)
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    cols = F.unfold(torch.zeros(2, 3, 8, 9), **kw)
    _torch_vs_ember(torch, lambda c: C.fold(c, (8, 9), **kw),
                    lambda c: F.fold(c, (8, 9), **kw), [_arr(*cols.shape)])


@pytest.mark.parametrize("sx,kw", [
    ((2, 3, 7, 6), {"kernel_size": 2}),
    ((2, 3, 7, 6), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((2, 3, 8, 8), {"kernel_size": 3, "stride": 3, "ceil_mode": True}),
    ((2, 3, 7, 9), {"kernel_size": (2, 3), "stride": (3, 2), "padding": (1, 1),
                    "dilation": (2, 3), "ceil_mode": True}),
    ((3, 5, 5), {"kernel_size": 2, "stride": 1}),
], ids=str)
def test_max_pool2d_matches_torch(sx, kw):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    _torch_vs_ember(torch, lambda x: C.max_pool2d(x, return_indices=True, **kw),
                    lambda x: F.max_pool2d(x, return_indices=True, **kw), [_arr(*sx)])


def test_max_pool_gradient_goes_to_one_element_per_window():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    a = np.ones((1, 1, 4, 4))            # every window is a tie
    x, t = _leaf(a), torch.tensor(a, requires_grad=True)
    C.max_pool2d(x, 2).sum().backward()
    F.max_pool2d(t, 2).sum().backward()
    _close(x.grad, t.grad.numpy())
    assert x.grad.sum().item() == 4.0


def test_max_pool_propagates_nan():
    a = np.arange(16.0).reshape(1, 1, 4, 4)
    a[0, 0, 0, 1] = np.nan
    r = C.max_pool2d(em.tensor(a), 2).numpy()
    assert np.isnan(r[0, 0, 0, 0]) and r[0, 0, 1, 1] == 15.0


@pytest.mark.parametrize("sx,kw", [
    ((2, 3, 9, 8), {"kernel_size": 5, "stride": 3, "padding": 2, "dilation": 1,
                    "ceil_mode": True}),
    ((2, 3, 10), {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2}),
    ((3, 7), {"kernel_size": 2}),
], ids=str)
def test_max_pool1d_matches_torch(sx, kw):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    if len(sx) == 4:
        sx = (sx[0], sx[1] * sx[2], sx[3])
    _torch_vs_ember(torch, lambda x: C.max_pool1d(x, return_indices=True, **kw),
                    lambda x: F.max_pool1d(x, return_indices=True, **kw), [_arr(*sx)])


@pytest.mark.parametrize("kw", [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
     "count_include_pad": False},
    {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1), "ceil_mode": True},
    {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1), "ceil_mode": True,
     "count_include_pad": False},
    {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": 4},
    {"kernel_size": 4, "stride": 3, "ceil_mode": True},
], ids=str)
def test_avg_pool2d_matches_torch(kw):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    _torch_vs_ember(torch, lambda x: C.avg_pool2d(x, **kw), lambda x: F.avg_pool2d(x, **kw),
                    [_arr(2, 3, 7, 8)])


def test_avg_pool1d_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    kw = {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
          "count_include_pad": False}
    _torch_vs_ember(torch, lambda x: C.avg_pool1d(x, **kw), lambda x: F.avg_pool1d(x, **kw),
                    [_arr(2, 3, 8)])


@pytest.mark.parametrize("sx,o", [((2, 3, 7, 5), (3, 2)), ((2, 3, 5, 7), (4, 6)),
                                  ((2, 3, 6, 6), 3), ((2, 3, 5, 7), (None, 3)),
                                  ((3, 9, 4), (5, 4)), ((1, 2, 3, 3), (5, 5))], ids=str)
def test_adaptive_pool2d_matches_torch(sx, o):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    _torch_vs_ember(torch, lambda x: C.adaptive_avg_pool2d(x, o),
                    lambda x: F.adaptive_avg_pool2d(x, o), [_arr(*sx)])
    _torch_vs_ember(torch, lambda x: C.adaptive_max_pool2d(x, o, True),
                    lambda x: F.adaptive_max_pool2d(x, o, True), [_arr(*sx)])


def test_adaptive_pool1d_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    for o in (3, 4, 11):
        _torch_vs_ember(torch, lambda x: C.adaptive_avg_pool1d(x, o),
                        lambda x: F.adaptive_avg_pool1d(x, o), [_arr(2, 3, 7)])
        _torch_vs_ember(torch, lambda x: C.adaptive_max_pool1d(x, o, True),
                        lambda x: F.adaptive_max_pool1d(x, o, True), [_arr(2, 3, 7)])


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("call,err,frag", [
    (lambda: C.conv2d(em.ones(1, 3, 5, 5), em.ones(2, 4, 3, 3)), em.ShapeError,
     r"\(1, 3, 5, 5\) \(3 channels\) does not fit weight of shape \(2, 4, 3, 3\)"),
    (lambda: C.conv2d(em.ones(1, 4, 5, 5), em.ones(3, 2, 3, 3), groups=2), em.ShapeError,
     "divisible by groups"),
    (lambda: C.conv2d(em.ones(1, 3, 2, 5), em.ones(2, 3, 3, 3)), em.ShapeError,
     "kernel size 3 is larger than the padded input size 2"),
    (lambda: C.conv2d(em.ones(1, 3, 5, 5), em.ones(2, 3, 3, 3), stride=2, padding="same"),
     ValueError, "not supported for strided"),
    (lambda: C.conv2d(em.ones(1, 3, 5, 5), em.ones(2, 3, 3, 3), padding="full"),
     ValueError, "padding must be"),
    (lambda: C.conv2d(em.ones(1, 3, 5, 5), em.ones(2, 3, 3, 3), em.ones(3)), em.ShapeError,
     r"bias of shape \(2,\)"),
    (lambda: C.conv2d(em.ones(5, 5), em.ones(2, 3, 3, 3)), em.ShapeError,
     "3-D \\(unbatched\\) or 4-D"),
    (lambda: C.conv2d(em.ones(1, 3, 5, 5), em.ones(2, 3, 3, 3, dtype=em.float64)),
     em.DTypeError, "same dtype"),
    (lambda: C.conv2d(em.ones(1, 3, 5, 5), em.ones(2, 3, 3, 3), stride=0), ValueError,
     "stride must be a positive"),
    (lambda: C.conv_transpose2d(em.ones(1, 3, 5, 5), em.ones(2, 3, 3, 3)), em.ShapeError,
     "weight.shape\\[0\\] == 3"),
    (lambda: C.conv_transpose2d(em.ones(1, 2, 5, 5), em.ones(2, 3, 3, 3), stride=2,
                                output_padding=2), ValueError, "output_padding"),
    (lambda: C.max_pool2d(em.ones(1, 1, 5, 5), 2, padding=2), ValueError,
     "at most half of the kernel size"),
    (lambda: C.max_pool2d(em.ones(1, 1, 1, 5), 3), em.ShapeError, "output size would be"),
    (lambda: C.avg_pool2d(em.ones(1, 1, 4, 4), 2, divisor_override=0), ValueError, "non-zero"),
    (lambda: C.fold(em.ones(1, 5, 4), 3, 2), em.ShapeError, "divisible by 4"),
    (lambda: C.adaptive_avg_pool2d(em.ones(1, 1, 4, 4), (2, 2, 2)), ValueError, "tuple of 2"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_conv_pool_errors(call, err, frag):
    with pytest.raises(err, match=frag):
        call()


# ------------------------------------------------------------------ autograd details
def test_conv2d_double_backward_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    a, w = _arr(1, 2, 5, 5), _arr(3, 2, 3, 3)
    x, wx = _leaf(a), _leaf(w)
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(w, requires_grad=True)
    (gx,) = em.autograd.grad((C.conv2d(x, wx, stride=2, padding=1) ** 2).sum(), [x],
                             create_graph=True)
    (tgx,) = torch.autograd.grad((F.conv2d(tx, tw, stride=2, padding=1) ** 2).sum(), [tx],
                                 create_graph=True)
    _close(gx, tgx.detach().numpy())
    (gw,) = em.autograd.grad((gx * gx).sum(), [wx])
    (tgw,) = torch.autograd.grad((tgx * tgx).sum(), [tw])
    _close(gw, tgw.numpy())


def test_unfold_max_pool_forward_mode_ignores_padding():
    from ember.autograd import forward_ad as fwad
    a, t = _arr(1, 1, 4, 4), _arr(1, 1, 4, 4)
    with fwad.dual_level():
        d = fwad.make_dual(em.tensor(a), em.tensor(t))
        out = fwad.unpack_dual(C.max_pool2d(d, 3, stride=2, padding=1, ceil_mode=True))
    assert np.isfinite(out.tangent.numpy()).all()


def test_shape_rules_agree_with_kernels():
    from ember.ops.registry import get_op
    cases = [("matmul", [(2, 1, 3, 4), (5, 4, 2)], {}), ("matmul", [(3,), (2, 3, 4)], {}),
             ("matmul", [(2, 3), (3,)], {}), ("einsum", [(2, 3), (3, 4)],
                                              {"equation": "ij,jk->ki"}),
             ("unfold", [(2, 3, 7, 6)], {"kernel_size": (3, 2), "dilation": (2, 1),
                                         "padding": ((1, 0), (2, 2)), "stride": (1, 2),
                                         "pad_value": 0.0}),
             ("fold", [(2, 6, 25)], {"output_size": (7, 6), "kernel_size": (3, 2),
                                     "dilation": (2, 1), "padding": ((1, 1), (2, 2)),
                                     "stride": (1, 2)})]
    for name, shapes, params in cases:
        op = get_op(name)
        out = op(*[em.ones(*s) for s in shapes], **params)
        assert tuple(out.shape) == tuple(op.shape(*shapes, **params)), name
