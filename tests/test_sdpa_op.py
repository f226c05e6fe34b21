"""The fused attention primitive ``sdpa`` / ``sdpa_grad``: forward vs NumPy, gradients
(first and second order, forward mode), the C kernels vs the NumPy kernels (and without a
compiler), NaN/Inf, errors, ``ember.compile`` and ONNX."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember import config
from ember.autograd.gradcheck import gradcheck, gradgradcheck
from ember.codegen import attention_kernels as ak
from ember.errors import DTypeError, ShapeError
from ember.ops import attention as A
from ember.ops.attention import sdpa

from opinfo.misc import ref_sdpa

TOL = {np.float32: dict(atol=2e-6, rtol=2e-5), np.float64: dict(atol=1e-12, rtol=1e-10)}
needs_cc = pytest.mark.skipif(not ak.available(), reason="no C compiler: the fallback "
                              "test covers this machine")


def _qkv(rng, b, tq, tk, d, dv, dtype):
    return tuple(rng.standard_normal(s).astype(dtype) for s in
                 (b + (tq, d), b + (tk, d), b + (tk, dv)))


def _ref_grads(g, q, k, v, scale, causal):
    """dq, dk, dv of the reference in float64 (the textbook formulas)."""
    q, k, v, g = (x.astype(np.float64) for x in (q, k, v, g))
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = g @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    return ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, np.swapaxes(p, -1, -2) @ g


SHAPES = [((), 4, 4, 3, 3), ((3,), 5, 7, 3, 4), ((2, 3), 7, 5, 5, 2), ((2, 1, 3), 9, 6, 5, 3),
          ((2, 4), 64, 64, 32, 32), ((1,), 13, 17, 7, 11), ((2,), 1, 1, 1, 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_backward_match_numpy(shape, causal, dtype):
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, *shape, dtype)
    ts = [em.from_numpy(x.copy()).requires_grad_() for x in (q, k, v)]
    out = sdpa(*ts, scale=0.4, is_causal=causal)
    assert out.dtype.np == dtype and tuple(out.shape) == shape[0] + (shape[1], shape[4])
    np.testing.assert_allclose(out.detach().numpy(), ref_sdpa(q, k, v, 0.4, causal),
                               **TOL[dtype])
    g = rng.standard_normal(out.shape).astype(dtype)
    out.backward(em.from_numpy(g))
    for t, r in zip(ts, _ref_grads(g, q, k, v, 0.4, causal)):
        assert t.grad.shape == t.shape
        np.testing.assert_allclose(t.grad.numpy(), r, atol=TOL[dtype]["atol"] * 10,
                                   rtol=TOL[dtype]["rtol"] * 10)


@pytest.mark.parametrize("causal", [False, True])
def test_permuted_views_like_a_gpt(causal):
    """q, k, v as the (B, H, T, hd) views of one packed qkv projection (no copies)."""
    rng = np.random.default_rng(1)
    B, T, H, hd = 3, 10, 2, 4
    qkv = em.tensor(rng.standard_normal((B, T, 3 * H * hd)), requires_grad=True)
    q, k, v = qkv.view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4).unbind(0)
    assert not q.is_contiguous()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert out.grad_fn.op.name == "sdpa"
    ref = ref_sdpa(*(x.detach().numpy() for x in (q, k, v)), is_causal=causal)
    np.testing.assert_allclose(out.detach().numpy(), ref, atol=1e-12)
    # the composite (a mask instead of the flag) agrees, gradients included
    keep = em.ones(T, T, dtype=em.bool).tril() if causal else em.ones(T, T, dtype=em.bool)
    (g1,) = em.autograd.grad(out.square().sum(), qkv)
    comp = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    (g2,) = em.autograd.grad(comp.square().sum(), qkv)
    np.testing.assert_allclose(g1.numpy(), g2.numpy(), atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_gradgradcheck_and_forward_mode(causal):
    rng = np.random.default_rng(2)
    args = tuple(em.tensor(x, requires_grad=True) for x in
                 _qkv(rng, (2,), 4, 5, 3, 2, np.float64))
    f = lambda q, k, v: sdpa(q, k, v, scale=0.8, is_causal=causal)   # noqa: E731
    assert gradcheck(f, args, check_forward_ad=True)
    assert gradgradcheck(f, args)


def test_create_graph_uses_differentiable_ops_else_sdpa_grad():
    rng = np.random.default_rng(3)
    q, k, v = (em.tensor(x, requires_grad=True) for x in _qkv(rng, (2,), 3, 3, 2, 2,
                                                                 np.float64))
    out = sdpa(q, k, v, is_causal=True).sum()
    gq, = em.autograd.grad(out, q, create_graph=True)
    assert gq.requires_grad                      # differentiable: double backward works
    gq2, = em.autograd.grad(sdpa(q, k, v, is_causal=True).sum(), q)
    assert not gq2.requires_grad
    np.testing.assert_allclose(gq.detach().numpy(), gq2.numpy(), atol=1e-14)


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
def test_c_kernels_match_numpy_kernels(causal, dtype):
    rng = np.random.default_rng(4)
    for shape in SHAPES + [((16, 4), 64, 64, 32, 32), ((2,), 3, 70, 9, 5)]:
        q, k, v = _qkv(rng, *shape, dtype)
        q = np.asfortranarray(q)                  # any strides
        g = rng.standard_normal(shape[0] + (shape[1], shape[4])).astype(dtype)
        np.testing.assert_allclose(ak.sdpa(q, k, v, 0.3, causal),
                                   A._sdpa_np(np, q, k, v, 0.3, causal), **TOL[dtype])
        np.testing.assert_allclose(ak.sdpa_grad(g, q, k, v, 0.3, causal),
                                   A._sdpa_grad_np(np, g, q, k, v, 0.3, causal),
                                   atol=TOL[dtype]["atol"] * 10, rtol=TOL[dtype]["rtol"] * 10)


EDGE_T = [1, 5, 6, 7, 12, 13, 15, 16, 17, 63, 65, 130]
EDGE_D = [1, 7, 32, 33]


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", EDGE_D)
def test_c_kernels_at_block_edges(d, causal, dtype):
    """Sizes around the kernels' blocks (4 query/key rows, 16-column register tiles and
    their one-vector tail, 8 x 8 transposes, 8-lane exp): T and D just below, at and above
    them, Tq != Tk, D != Dv, contiguous (the AVX transpose path) and strided operands, a
    negative scale."""
    ak.kernels()
    rng = np.random.default_rng(40 + d)
    for tq, tk in [(t, t) for t in EDGE_T] + [(17, 65), (65, 17), (1, 130), (130, 15)]:
        dv = {1: 7, 7: 1, 32: 32, 33: 16}[d]
        q, k, v = _qkv(rng, (2,), tq, tk, d, dv, dtype)
        g = rng.standard_normal((2, tq, dv)).astype(dtype)
        for scale, kk in ((0.3, k), (-0.7, np.asfortranarray(k))):
            np.testing.assert_allclose(ak.sdpa(q, kk, v, scale, causal),
                                       A._sdpa_np(np, q, k, v, scale, causal), **TOL[dtype])
            np.testing.assert_allclose(ak.sdpa_grad(g, q, kk, v, scale, causal),
                                       A._sdpa_grad_np(np, g, q, k, v, scale, causal),
                                       atol=TOL[dtype]["atol"] * 10,
                                       rtol=TOL[dtype]["rtol"] * 10)


@needs_cc
@pytest.mark.parametrize("where", ["k", "v"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_masked_nan_stays_out_across_blocks(where, value):
    """A non-finite key/value row j inside and at the edges of the 4-row blocks: with the
    causal mask only query rows >= j see it (their output and dq rows are not finite)."""
    ak.kernels()
    rng = np.random.default_rng(9)
    for t, j in ((17, 9), (17, 16), (33, 4), (33, 7), (64, 63)):
        q, k, v = _qkv(rng, (1,), t, t, 32, 32, np.float32)
        {"k": k, "v": v}[where][0, j, 5] = value
        g = rng.standard_normal((1, t, 32)).astype(np.float32)
        got = ak.sdpa(q, k, v, 0.2, True)
        np.testing.assert_allclose(got, A._sdpa_np(np, q, k, v, 0.2, True), equal_nan=True,
                                   **TOL[np.float32])
        nan = np.isnan(value)             # (an inf key can give a -inf score: p = 0)
        assert np.isfinite(got[0, :j]).all() and (not nan or np.isnan(got[0, j:]).any(-1).all())
        flat = ak.sdpa_grad(g, q, k, v, 0.2, True)
        np.testing.assert_allclose(flat, A._sdpa_grad_np(np, g, q, k, v, 0.2, True),
                                   equal_nan=True, atol=2e-5, rtol=2e-4)
        dq = flat[:t * 32].reshape(t, 32)      # dK, dV: query rows >= j reach every key
        assert np.isfinite(dq[:j]).all() and (not nan or np.isnan(dq[j:]).any(-1).all())


def _launch_cases(rng, dtype):
    """(whether a plan is expected, q, k, v): contiguous operands, the GPT's permuted views
    of a packed projection, negative strides, and batch dims that cannot be collapsed
    into two without a copy (the plain path)."""
    yield (True,) + _qkv(rng, (2, 3), 13, 13, 7, 5, dtype)
    packed = rng.standard_normal((2, 12, 3, 4, 8)).astype(dtype)
    yield (True,) + tuple(packed.transpose(2, 0, 3, 1, 4)[i] for i in range(3))
    q, k, v = _qkv(rng, (2,), 6, 65, 33, 1, dtype)
    yield True, q[:, ::-1], k[::-1, ::-1], v[:, :, ::-1]
    q = rng.standard_normal((3, 2, 2, 5, 4)).astype(dtype).transpose(2, 1, 0, 3, 4)
    yield (False, q) + _qkv(rng, (2, 2, 3), 5, 7, 4, 6, dtype)[1:]


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
def test_launch_plans_match_the_plain_path(causal, dtype, monkeypatch):
    """The cached-plan call (one ember_launch) gives bitwise the plain ctypes path's
    results, also when the plan is reused on other arrays of the same layout; layouts
    whose heads need a copy take the plain path."""
    ak.kernels()
    have_launch = ak._launch.raw() is not None
    for (want, q, k, v), (_, q2, k2, v2) in zip(_launch_cases(np.random.default_rng(11), dtype),
                                                 _launch_cases(np.random.default_rng(12), dtype)):
        for q, k, v in ((q, k, v), (q2, k2, v2)):        # the 2nd call reuses the plan
            g = np.random.default_rng(3).standard_normal(q.shape[:-1] + v.shape[-1:])
            g = g.astype(dtype)
            fast = (ak.sdpa(q, k, v, 0.4, causal), ak.sdpa_grad(g, q, k, v, 0.4, causal))
            out = np.empty(q.shape[:-1] + v.shape[-1:], dtype)
            assert (ak._plan("sdpa", (q, k, v), (out,), 0.4, causal) is not None) == (
                want and have_launch)
            with monkeypatch.context() as m:
                m.setattr(ak._launch, "raw", lambda: None)
                m.setattr(ak, "_plans", {})
                plain = (ak.sdpa(q, k, v, 0.4, causal), ak.sdpa_grad(g, q, k, v, 0.4, causal))
                assert all(p is ak._NO_PLAN for p in ak._plans.values())
            np.testing.assert_array_equal(fast[0], plain[0])
            np.testing.assert_array_equal(fast[1], plain[1])
            np.testing.assert_allclose(fast[0], A._sdpa_np(np, q, k, v, 0.4, causal),
                                       **TOL[dtype])
            np.testing.assert_allclose(fast[1], A._sdpa_grad_np(np, g, q, k, v, 0.4, causal),
                                       atol=TOL[dtype]["atol"] * 10,
                                       rtol=TOL[dtype]["rtol"] * 10)


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def _out_layouts(rng, b, tq, tk, d, dv, dtype):
    """(O, (dq, dk, dv)) views to write into: the GPT's (B, T, H, D) output and the slots
    of a (B, T, 3, H, D) gradient, reversed rows, and layouts without a unit last stride
    (written through a temporary)."""
    if len(b) == 2 and tq == tk and d == dv:
        o = np.empty((b[0], tq, b[1], dv), dtype).transpose(0, 2, 1, 3)
        st = np.empty((b[0], tq, 3, b[1], d), dtype).transpose(2, 0, 3, 1, 4)
        yield o, (st[2], st[0], st[1])
    yield (np.empty(b + (tq, dv), dtype)[..., ::-1, :],
           tuple(np.empty(b + (t, e), dtype)[..., ::-1, :] for t, e in
                 ((tq, d), (tk, d), (tk, dv))))
    yield (np.empty(b + (tq, dv), dtype, order="F"),
           tuple(np.empty(b + (t, 2 * e), dtype)[..., ::2] for t, e in
                 ((tq, d), (tk, d), (tk, dv))))


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("plans", [True, False], ids=["plans", "plain"])
def test_outputs_in_any_layout_are_bitwise_the_default(plans, causal, dtype, monkeypatch):
    """``out=``: the same values stored elsewhere, bit for bit (through launch plans and
    the plain path); ``plus_zero`` turns exactly the -0.0 of the default into +0.0."""
    ak.kernels()
    if not plans:
        monkeypatch.setattr(ak._launch, "raw", lambda: None)
        monkeypatch.setattr(ak, "_plans", {})
    rng = np.random.default_rng(13)
    for shape in [((2, 4), 64, 64, 32, 32), ((3, 2), 13, 13, 7, 7), ((2,), 5, 9, 33, 4),
                  ((2, 3), 17, 17, 8, 8)]:
        q, k, v = _qkv(rng, *shape, dtype)
        k[0] = 0                                 # dq = 0 * negative scale: -0.0
        g = rng.standard_normal(shape[0] + (shape[1], shape[4])).astype(dtype)
        ref_o = ak.sdpa(q, k, v, -0.3, causal)
        flat = ak.sdpa_grad(g, q, k, v, -0.3, causal)
        ref = np.split(flat, [q.size, q.size + k.size])
        assert np.signbit(ref[0][flat[:q.size] == 0]).any()
        for o, parts in _out_layouts(rng, *shape, dtype):
            assert ak.sdpa(q, k, v, -0.3, causal, out=o) is o
            np.testing.assert_array_equal(_bits(o), _bits(ref_o))
            ak.sdpa_grad(g, q, k, v, -0.3, causal, out=parts)
            for p, r in zip(parts, ref):
                np.testing.assert_array_equal(_bits(p).reshape(-1), _bits(r))
            ak.sdpa_grad(g, q, k, v, -0.3, causal, out=parts, plus_zero=True)
            for p, r in zip(parts, ref):
                np.testing.assert_array_equal(_bits(p).reshape(-1), _bits(r + 0.0))
            assert not any(np.signbit(p[p == 0]).any() for p in parts)


@needs_cc
def test_bad_outputs_give_clear_errors():
    q = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match=r"sdpa: out must be float32\[2, 3, 4\], got "
                                         r"float64\[2, 3, 4\]"):
        ak.sdpa(q, q, q, 0.5, False, out=np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match=r"sdpa_grad: out must be float32\[2, 3, 4\]"):
        ak.sdpa_grad(q, q, q, q, 0.5, False, out=(q, q, np.zeros((2, 4, 4), np.float32)))
    with pytest.raises(ValueError, match=r"sdpa_grad: out must be \(dq, dk, dv\)"):
        ak.sdpa_grad(q, q, q, q, 0.5, False, out=(q, q))


@pytest.mark.parametrize("c", [True, False], ids=["c", "numpy"])
def test_into_variants_match_the_primitives_kernels(c, monkeypatch):
    """``sdpa_into`` / ``sdpa_grad_into`` (what compiled graphs run) write bitwise the
    primitives' ``"cpu"`` kernels' values, with the C kernels and without (NumPy)."""
    if c and not ak.available():
        pytest.skip("no C compiler: the numpy case covers this machine")
    if not c:
        monkeypatch.setattr(ak, "kernels", lambda: None)
    rng = np.random.default_rng(14)
    for dtype in (np.float32, np.float64, np.float16):
        q, k, v = _qkv(rng, (2, 3), 6, 6, 4, 4, dtype)
        g = rng.standard_normal((2, 3, 6, 4)).astype(dtype)
        o = np.empty((2, 6, 3, 4), dtype).transpose(0, 2, 1, 3)
        A.sdpa_into(np, q, k, v, o, -0.4, True)
        np.testing.assert_array_equal(o, A._sdpa_cpu(np, q, k, v, -0.4, True))
        flat = A._sdpa_grad_cpu(np, g, q, k, v, -0.4, True)
        st = np.empty((2, 6, 3, 3, 4), dtype).transpose(2, 0, 3, 1, 4)
        for pz in (False, True):
            A.sdpa_grad_into(np, g, q, k, v, (st[1], st[2], st[0]), -0.4, True, pz)
            got = np.concatenate([st[j].reshape(-1) for j in (1, 2, 0)])
            want = flat + 0.0 if pz else flat
            np.testing.assert_array_equal(_bits(got), _bits(want))


def test_without_a_compiler_the_numpy_kernels_run(monkeypatch):
    monkeypatch.setattr(ak, "find_compiler", lambda: None)
    monkeypatch.setattr(ak, "_state", {})
    assert ak.kernels() is None and not ak.available()
    rng = np.random.default_rng(5)
    q, k, v = _qkv(rng, (2, 2), 6, 6, 4, 4, np.float32)
    ts = [em.from_numpy(x).requires_grad_() for x in (q, k, v)]
    out = sdpa(*ts, is_causal=True)
    np.testing.assert_array_equal(out.detach().numpy(),
                                  A._sdpa_np(np, q, k, v, 0.5, True))
    out.sum().backward()
    np.testing.assert_allclose(ts[0].grad.numpy(), _ref_grads(
        np.ones(out.shape), q, k, v, 0.5, True)[0], atol=1e-5)


def test_eager_kernels_off_runs_numpy():
    rng = np.random.default_rng(6)
    q, k, v = _qkv(rng, (2,), 5, 5, 4, 4, np.float32)
    prev = config.set_eager_kernels(False)
    try:
        out = sdpa(em.from_numpy(q), em.from_numpy(k), em.from_numpy(v), is_causal=True)
    finally:
        config.set_eager_kernels(prev)
    np.testing.assert_array_equal(out.numpy(), A._sdpa_np(np, q, k, v, 0.5, True))


def _poison(rng, dtype, where, value):
    q, k, v = _qkv(rng, (2,), 6, 6, 4, 3, dtype)
    {"q": q, "k": k, "v": v}[where][1, 3, 1] = value
    return q, k, v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("causal", [False, True])
def test_nan_inf_propagate_like_the_numpy_kernel(causal, value, where, dtype):
    rng = np.random.default_rng(7)
    q, k, v = _poison(rng, dtype, where, value)
    g = rng.standard_normal((2, 6, 3)).astype(dtype)
    ref = A._sdpa_np(np, q, k, v, 0.5, causal)
    ref_g = A._sdpa_grad_np(np, g, q, k, v, 0.5, causal)
    got = sdpa(*(em.from_numpy(x) for x in (q, k, v)), is_causal=causal).numpy()
    np.testing.assert_allclose(got, ref, equal_nan=True, **TOL[dtype])
    got_g = A._sdpa_grad_cpu(np, g, q, k, v, 0.5, causal)
    np.testing.assert_allclose(got_g, ref_g, equal_nan=True, atol=TOL[dtype]["atol"] * 10,
                               rtol=TOL[dtype]["rtol"] * 10)
    if causal and where in "kv":
        # key/value row 3 is masked for query rows 0..2: they stay finite
        assert np.isfinite(got[1, :3]).all() and not np.isfinite(got[1, 3:]).all()
    if where == "q":
        assert not np.isfinite(got[1, 3]).all() and np.isfinite(np.delete(got, 3, 1)).all()


def test_bad_inputs_give_clear_errors():
    x = em.randn(2, 4, 3)
    with pytest.raises(DTypeError, match="sdpa: q, k and v must share one floating"):
        sdpa(x, x.double(), x)
    with pytest.raises(DTypeError, match="sdpa"):
        sdpa(*(em.ones(2, 3, 3, dtype=em.int64),) * 3)
    with pytest.raises(ShapeError, match=r"sdpa: expected q \(\.\.\., Tq, D\).*\(2, 4, 3\)"):
        sdpa(x, em.randn(2, 4, 5), x)
    with pytest.raises(ShapeError, match="same batch dims"):
        sdpa(x, em.randn(3, 4, 3), em.randn(3, 4, 3))
    with pytest.raises(TypeError, match="sdpa: k must be a Tensor"):
        sdpa(x, np.ones((2, 4, 3)), x)


def test_compiled_step_matches_eager():
    em.manual_seed(0)
    qkv = em.nn.Linear(8, 24)
    x = em.randn(3, 6, 8)

    def step(x):
        q, k, v = qkv(x).view(3, 6, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        loss = F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum()
        loss.backward()
        return loss.detach()

    ref = step(x).item()
    ref_g = qkv.weight.grad.numpy().copy()
    compiled = em.compile(step)
    for _ in range(3):
        qkv.zero_grad(set_to_none=False)      # grads exist: one signature, one graph
        got = compiled(x)
    # (the output is not permuted: sdpa stays; dq, dk, dv land in qkv's gradient)
    assert {"sdpa", "sdpa_grad_stacked"} <= {n.op.name for n in compiled.graphs()[0].nodes}
    np.testing.assert_allclose(got.item(), ref, rtol=1e-5)
    np.testing.assert_allclose(qkv.weight.grad.numpy(), ref_g, rtol=1e-4, atol=1e-5)


def test_onnx_export_of_the_fused_op():
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import ember.onnx

    def f(q, k, v):
        return sdpa(q, k, v, is_causal=True) + sdpa(q, k, v, scale=0.3)

    args = [em.randn(2, 3, 5, 4) for _ in range(3)]
    m = ember.onnx.export(f, tuple(args))
    assert "Softmax" in {n.op_type for n in m.graph.node}
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {f"input{i}": a.numpy() for i, a in enumerate(args)})[0]
    np.testing.assert_allclose(got, f(*args).numpy(), atol=1e-5, rtol=1e-5)
