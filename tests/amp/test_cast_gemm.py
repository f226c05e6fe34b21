"""The ``cast_gemm`` pass and :func:`lowp_gemm.matmul_cast_b`: a bfloat16 product whose B is
a float32 value cast to bfloat16 rounds it while packing — bit for bit the cast-then-matmul
result (inf/NaN/denormal/overflowing weights, transposed and row-major B, odd K, tile
edges), and a compiled autocast step gives the same bits with and without the pass, the
bfloat16 weight copies gone from its graph. Without AMX the kernel declines (None) and the
op casts and multiplies as the two nodes did."""
import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.codegen import lowp_gemm as lg
from ember.codegen.convert_kernels import from_float32
from ember.graph.passes import DEFAULT_PASSES
from ember.graph.passes.cast_gemm import _run_matmul_castb
from tests.graph._kernels import needs_compiler, op_names

BF = np.dtype(ml_dtypes.bfloat16)
_need_compiler = needs_compiler("no AMX kernel without a compiler")
amx = pytest.mark.skipif(not lg.amx_available(), reason="CPU/OS without AMX-BF16 tiles")
SPECIAL = np.array([np.nan, -np.inf, np.inf, 1e-40, -1e-45, 3.4e38, -0.0,
                    np.float32(1.0039062), 1.00390625, 0x7F7FFFFF], np.float32)


def _operands(m, k, n, transposed, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(BF)
    w = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    w.flat[:min(w.size, SPECIAL.size)] = SPECIAL[:min(w.size, SPECIAL.size)]
    return x, (w.T if transposed else w)


@amx
@pytest.mark.parametrize("m,k,n", [(128, 784, 512), (128, 512, 10), (33, 65, 70),
                                   (64, 31, 130), (7, 1001, 64)])
@pytest.mark.parametrize("transposed", [True, False])
def test_equals_cast_then_matmul_bitwise(m, k, n, transposed):
    x, w = _operands(m, k, n, transposed, m + k)
    got = lg.matmul_cast_b(x, w)
    want = lg.matmul(x, from_float32(w, BF))
    assert got is not None and got.dtype == BF and got.shape == (m, n)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    out = np.empty((m, n), BF)
    assert lg.matmul_cast_b(x, w, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


def test_declines_where_the_kernel_would_not_run(monkeypatch):
    x, w = _operands(4, 5, 6, False)                  # tiny: the conversion path's
    assert lg.matmul_cast_b(x, w) is None
    x, w = _operands(64, 64, 64, True)
    assert lg.matmul_cast_b(x, w.astype(np.float64)) is None
    assert lg.matmul_cast_b(x.astype(np.float32), w) is None
    assert lg.matmul_cast_b(x, w, out=np.empty((64, 64), np.float32)) is None
    monkeypatch.setattr(lg, "mode", "off")
    assert lg.matmul_cast_b(x, w) is None
    want = from_float32(x.astype(np.float32) @ w.astype(BF).astype(np.float32), BF)
    got = _run_matmul_castb(np, x, w)                 # the op's fallback: cast, multiply
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def _w1_step(passes, steps=3):
    em.manual_seed(0)
    model = em.nn.Sequential(em.nn.Linear(96, 80), em.nn.ReLU(), em.nn.Linear(80, 64),
                             em.nn.ReLU(), em.nn.Linear(64, 10))
    opt = em.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    x = em.tensor(rng.standard_normal((48, 96)).astype(np.float32))
    y = em.tensor(rng.integers(0, 10, 48))

    def step():
        opt.zero_grad()
        with em.autocast("cpu", dtype=em.bfloat16):
            loss = em.nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        return loss

    cf = em.compile(step, passes=passes)
    losses = [float(cf()) for _ in range(steps)]
    return losses, [p.detach().numpy().copy() for p in model.parameters()], cf


@amx
def test_compiled_autocast_step_same_bits_without_the_weight_copies():
    without = [p for p in DEFAULT_PASSES if p != "cast_gemm"]
    assert "cast_gemm" in DEFAULT_PASSES
    l0, p0, c0 = _w1_step(without)
    l1, p1, c1 = _w1_step(DEFAULT_PASSES)
    assert l0 == l1
    for a, b in zip(p0, p1):
        np.testing.assert_array_equal(a, b)
    names = op_names(c1.graph)
    assert names.count("matmul_castb") >= 4, names
    # the two hidden layers' weights (80 x 96, 64 x 80) are never copied; x (48 x 96, an
    # A operand) and the last layer (48 x 64 x 10: below MIN_MACS, converted) still are
    big_casts = [n for n in c1.graph.nodes if n.op.name == "cast"
                 and tuple(n.outs[0].shape) in ((80, 96), (64, 80))]
    assert not big_casts, [str(n.outs[0].shape) for n in big_casts]
    assert "matmul_castb" not in op_names(c0.graph)


@amx
@pytest.mark.parametrize("transposed", [True, False])
def test_batched_rows_fold_into_one_product(transposed):
    """A (..., M, K) x (a transformer's activations) multiplies as one matrix of rows, as
    :func:`lowp_gemm.matmul` does; an x whose rows are no view declines."""
    x, w = _operands(96, 128, 384, transposed, 7)
    x3 = x.reshape(4, 24, 128)
    got = lg.matmul_cast_b(x3, w)
    want = lg.matmul(x3, from_float32(w, BF))
    assert got.shape == (4, 24, 384)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    out = np.empty((4, 24, 384), BF)
    assert lg.matmul_cast_b(x3, w, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))
    xt = np.ascontiguousarray(x3.transpose(1, 0, 2)).transpose(1, 0, 2)
    assert lg.matmul_cast_b(xt, w) is None
    got = _run_matmul_castb(np, xt, w)               # the op's fallback: cast, multiply
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@amx
def test_compiled_tiny_gpt_step_same_bits():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from train import WORKLOADS
    wl = WORKLOADS["W3 GPT AdamW"]
    # products of >= MIN_MACS multiply-adds (128 rows x 64 x 192...), one layer
    size = dict(wl.tiny, ctx=16, batch=8, d_model=64, heads=2, layers=1, d_mlp=128, vocab=32)
    runs = []
    for passes in ([p for p in DEFAULT_PASSES if p != "cast_gemm"], DEFAULT_PASSES):
        em.manual_seed(0)
        model, opt = wl.build(em, **size)
        xa, ya = wl.data(np.random.default_rng(0), **size)
        x, y = em.tensor(xa), em.tensor(ya)

        def step():
            opt.zero_grad()
            with em.autocast("cpu", dtype=em.bfloat16):
                out = model(x)
                loss = em.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(),
                                                      y.reshape(-1))
            loss.backward()
            opt.step()
            return loss
        cf = em.compile(step, passes=passes)
        runs.append(([float(cf()) for _ in range(2)],
                     [p.detach().numpy().copy() for p in model.parameters()],
                     op_names(cf.graph).count("matmul_castb")))
    (l0, p0, n0), (l1, p1, n1) = runs
    assert n0 == 0 and n1 > 0
    assert l0 == l1
    for a, b in zip(p0, p1):
        np.testing.assert_array_equal(a, b)
