"""float16/bfloat16 convolutions and max-pools in compiled graphs: the ``pool`` and
``conv_gemm`` passes' C loops (:mod:`ember.codegen.conv_kernels`) in 16-bit.

The kernels are checked bitwise against the float32 computation rounded once (copies and
maxima exactly, sums as float32's); compiled forward/backward against eager Ember in the
same dtype, and the graphs against holding the rewritten nodes, so a low-precision graph
that falls back to ``unfold`` + batched matmul + ``fold`` fails here.
"""
import sys
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember.codegen import conv_kernels as ck
from ember.graph.passes import DEFAULT_PASSES
from tests.graph._kernels import needs_compiler, op_names

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from train import WORKLOADS  # noqa: E402

F = em.nn.functional
POOL = [p for p in DEFAULT_PASSES if p != "conv_gemm"]
LOWP = [em.bfloat16, em.float16]
_need_compiler = needs_compiler("the passes leave graphs unchanged")
# (kernel, dilation, padding, stride): tiling windows, then overlapping ones with padding
GEOMS = [((2, 2), (1, 1), ((0, 0), (0, 0)), (2, 2)),
         ((3, 2), (1, 2), ((1, 1), (0, 1)), (2, 1))]


def _x(shape, dt, seed=0):
    xa = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
    xa.flat[::7] = 0.25                               # ties: the first maximum wins
    return xa.astype(dt.np)


def _eq(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def _tol(got, want, k, dt):
    # sums of k terms, each operand rounded once to dt: k roundings of the largest term
    for g, e in zip(got, want):
        assert g.dtype is e.dtype is dt
        ga, ea = g.numpy().astype(np.float64), e.numpy().astype(np.float64)
        tol = 4 * k * float(em.finfo(dt).eps)
        np.testing.assert_allclose(ga, ea, rtol=tol, atol=tol * np.abs(ea).max(initial=1.0))


@pytest.mark.parametrize("dt", LOWP)
@pytest.mark.parametrize("geom", GEOMS)
@pytest.mark.parametrize("cf", [False, True])
def test_kernels_equal_float32_rounded_once(dt, geom, cf):
    assert ck.kernels() is not None
    n, c, h, w = 2, 3, 9, 8
    x = _x((n, c, h, w), dt)
    x32 = x.astype(np.float32)
    cols = ck.unfold(x, *geom, 0.0, channel_first=cf)
    _eq(cols, ck.unfold(x32, *geom, 0.0, channel_first=cf).astype(dt.np))
    big = _x(cols.shape, dt, 1)                       # fold: overlap sums in float32
    _eq(ck.fold(big, (h, w), *geom, batch=n if cf else None),
        ck.fold(big.astype(np.float32), (h, w), *geom, batch=n if cf else None).astype(dt.np))
    planes = x.reshape(n * c, 1, h, w)
    chans = c if cf else None
    vals, arg = ck.maxpool(planes, *geom, float("-inf"), channels=chans)
    v32, a32 = ck.maxpool(planes.astype(np.float32), *geom, float("-inf"), channels=chans)
    _eq(vals, v32.astype(dt.np))
    np.testing.assert_array_equal(arg, a32)
    g = _x(vals.shape, dt, 2)
    _eq(ck.maxpool_grad(g, arg, (h, w), *geom, channels=chans),
        ck.maxpool_grad(g.astype(np.float32), arg, (h, w), *geom, channels=chans)
        .astype(dt.np))


@pytest.mark.parametrize("dt", LOWP)
def test_unfold_pads_with_the_dtypes_bits(dt):
    assert ck.kernels() is not None
    x = _x((1, 1, 3, 3), dt)
    cols = ck.unfold(x, (2, 2), (1, 1), ((1, 1), (1, 1)), (1, 1), float("-inf"))
    assert np.isneginf(cols.astype(np.float32)[0, 0, 0]) and cols.dtype == dt.np


@pytest.mark.parametrize("dt", LOWP)
@pytest.mark.parametrize("geom", GEOMS)
@pytest.mark.parametrize("cf", [False, True])
def test_bias_relu_prologue_rounds_the_add_like_eager(dt, geom, cf):
    """relu(x + bias) is rounded to the dtype before the compares: values that tie only
    after rounding pick eager's first maximum."""
    assert ck.kernels() is not None
    n, c, h, w = 2, 3, 9, 8
    # rows alternate 1 and 1 + eps; + 2 rounds both to 3 (a tie to even): in float32 the
    # second would win
    x = _x((n * c, 1, h, w), dt, 4)
    x[:, :, 0::2, :] = 1.0
    x[:, :, 1::2, :] = np.array(1 + float(em.finfo(dt).eps), dt.np)
    x[0, 0, 0, 0] = -5.0
    bias = np.array([2.0, -3.0, 2.0], dt.np)
    vals, arg = ck.maxpool(x, *geom, float("-inf"), bias=bias, channels=c if cf else None)
    # eager: the add rounded once to dt, relu, then the pool of those values
    x32 = x.astype(np.float32).reshape(c, n, h, w) if cf else \
        x.astype(np.float32).reshape(n, c, h, w)
    b = bias.astype(np.float32).reshape((c, 1, 1, 1) if cf else (1, c, 1, 1))
    act = np.maximum((x32 + b).astype(dt.np).astype(np.float32), 0)
    if cf:
        act = act.transpose(1, 0, 2, 3)
    v32, a32 = ck.maxpool(np.ascontiguousarray(act).reshape(n * c, 1, h, w), *geom,
                          float("-inf"))
    _eq(vals, v32.astype(dt.np))
    np.testing.assert_array_equal(arg, a32)


@pytest.mark.parametrize("dt", LOWP)
@pytest.mark.parametrize("pool_args", [(2, 2, 0), (3, 2, 1)])
def test_compiled_max_pool_matches_eager(dt, pool_args):
    x = em.tensor(_x((2, 3, 9, 7), dt))

    def f(x):
        x = x.detach().requires_grad_(True)
        y, ind = F.max_pool2d(x * 2, *pool_args, return_indices=True)
        (dx,) = em.autograd.grad((y * y).sum(), [x])
        return y.detach(), ind, dx

    cf = em.compile(f, fullgraph=True, passes=POOL)
    cf(x)
    names = op_names(cf.graph)
    assert "maxpool" in names and "maxpool_grad" in names, names
    assert "argmax" not in names and "scatter_add_along_dim" not in names, names
    got, want = cf(x), f(x)
    _eq(got[0].numpy(), want[0].numpy())
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    _tol(got[2:], want[2:], 9, dt)


@pytest.mark.parametrize("dt", LOWP)
@pytest.mark.parametrize("bias", [True, False])
def test_compiled_conv_relu_pool_takes_the_conv_gemm_pass(dt, bias):
    rng = np.random.default_rng(3)
    x = em.tensor(rng.standard_normal((3, 2, 9, 11)), dtype=dt)
    w = em.tensor(rng.standard_normal((4, 2, 3, 3)), dtype=dt)
    b = (em.tensor(rng.standard_normal(4), dtype=dt),) if bias else ()

    def f(x, w, *b):
        x, w = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        b = tuple(t.detach().requires_grad_(True) for t in b)
        y = F.max_pool2d(F.relu(F.conv2d(x, w, *b, padding=1)), 2)
        grads = em.autograd.grad((y * y).sum(), [x, w, *b])
        return (y.detach(),) + tuple(grads)

    cf = em.compile(f, fullgraph=True)
    cf(x, w, *b)
    names = op_names(cf.graph)
    assert {"unfold_t", "fold_t"} <= set(names), names
    assert not {"unfold", "fold", "unfold_c", "fold_c", "argmax"} & set(names), names
    assert any(n.startswith("maxpool_grad") for n in names), names
    if bias:            # the pool reads the GEMM's planes, relu(x + bias) inside it
        assert "maxpool_bias_relu_cf" in names and "contiguous" not in names, names
    _tol(cf(x, w, *b), f(x, w, *b), 3 * 9 * 11, dt)


@pytest.mark.parametrize("dt", LOWP)
def test_compiled_w2_step_under_autocast_matches_eager(dt):
    wl = WORKLOADS["W2 CNN SGD"]
    size = dict(wl.tiny, hw=12, batch=3)
    losses, params = {}, {}
    for key in ("compiled", "eager"):
        em.manual_seed(0)
        model, opt = wl.build(em, **size)
        xa, ya = wl.data(np.random.default_rng(0), **size)
        x, y = em.tensor(xa), em.tensor(ya)

        def step(x, y):
            opt.zero_grad()
            with em.autocast("cpu", dtype=dt):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        cf = em.compile(step) if key == "compiled" else step
        losses[key] = [float(cf(x, y)) for _ in range(3)]
        params[key] = [p.detach().numpy().copy() for p in model.parameters()]
        if key == "compiled":
            names = op_names(cf.graph)
            assert names.count("unfold_t") == 2 and names.count("fold_t") == 1, names
            assert names.count("maxpool_bias_relu_cf") == 2, names
            assert sum(n.startswith("maxpool_grad") for n in names) == 2, names
            assert not {"unfold", "fold", "argmax"} & set(names), names
    # float32 master weights; the low-precision GEMMs sum in another order
    tol = 8 * float(em.finfo(dt).eps)
    np.testing.assert_allclose(losses["compiled"], losses["eager"], rtol=tol)
    for a, b in zip(params["compiled"], params["eager"]):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())


@pytest.mark.parametrize("dt", LOWP)
def test_compiled_avg_pool_takes_the_16_bit_loops(dt):
    """avg_pool2d: the windows by ``unfold_c`` (a bit copy), its backward's overlap sums by
    ``fold_c`` (the 16-bit loop, float32 sums rounded once): bitwise eager's."""
    x = em.tensor(_x((2, 3, 9, 8), dt))

    def f(x):
        x = x.detach().requires_grad_(True)
        y = F.avg_pool2d(x, 3, 2, 1)
        (dx,) = em.autograd.grad((y * y).sum(), [x])
        return y.detach(), dx

    cf = em.compile(f, fullgraph=True)
    cf(x)
    names = op_names(cf.graph)
    assert "unfold_c" in names and "fold_c" in names, names
    for got, want in zip(cf(x), f(x)):
        _eq(got.numpy(), want.numpy())
