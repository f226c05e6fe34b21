"""Issue 19: the ``gemm_epilogue`` pass (SGD's update and bias + relu in Ember's GEMM stores).

A compiled MLP SGD step large enough for Ember's GEMM gets ``matmul_bias`` nodes for its
hidden layers' forward products and ``matmul_sgd`` nodes for the weight gradients whose
update follows; the weights are updated in their own buffers; results are those of the
pipeline without the pass (the update rounded once, as the fused ``mul,sub`` kernel).
"""
import importlib

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember import nn
from ember.codegen import sgemm
from ember.graph.passes import DEFAULT_PASSES, EXACT_PASSES, HOST_PASSES

# NOTE: the package's attribute ``gemm_epilogue`` is the pass function, not the module
ge = importlib.import_module("ember.graph.passes.gemm_epilogue")

WITHOUT = [p for p in DEFAULT_PASSES if p != "gemm_epilogue"]
SIZES, BATCH = (64, 128, 128, 3), 128        # every hidden product past sgemm.worth


def _needs_gemm():
    if sgemm._isa(None) is None:
        pytest.skip("Ember's GEMM does not run here (no AVX-512 or no C compiler): the "
                    "pass leaves graphs alone")


def _mlp(seed=0, sizes=SIZES):
    em.manual_seed(seed)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _data():
    rng = np.random.default_rng(0)
    return (em.tensor(rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)),
            em.tensor(rng.integers(0, SIZES[-1], BATCH)))


def _compiled(passes, lr=0.05, sizes=SIZES):
    model = _mlp(sizes=sizes)
    opt = em.optim.SGD(model.parameters(), lr=lr)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return em.compile(step, fullgraph=True, passes=passes), model


def _entry(f):
    return [e for e in f._cache.values() if not e.eager and e.program is not None][-1]


def _sgd(w, g, lr):
    return (w.astype(np.float64) - g.astype(np.float64) * np.float64(np.float32(lr))
            ).astype(np.float32)


def test_pipeline_position():
    assert DEFAULT_PASSES.index("feature_major") < DEFAULT_PASSES.index("gemm_epilogue") \
        < DEFAULT_PASSES.index("fuse")
    assert "gemm_epilogue" in HOST_PASSES and "gemm_epilogue" not in EXACT_PASSES


def test_mlp_step_folds_updates_and_biases():
    _needs_gemm()
    x, y = _data()
    f, model = _compiled(DEFAULT_PASSES)
    f(x, y)
    f(x, y)                                      # the replayed graph (grads now exist)
    e = _entry(f)
    changed = {r["pass"]: r["changed"] for r in e.report}["gemm_epilogue"]
    # the second hidden layer's relu backward follows a GEMM of Ember's (W2.T @ g); the
    # first's follows the classifier's small one (OpenBLAS): not folded
    assert changed == {"gemm_sgd": 2, "gemm_bias": 2, "gemm_mask": 1}, changed
    ops = [n.op.name for n in e.graph.nodes]
    assert ops.count("matmul_sgd") == 2 and ops.count("matmul_bias") == 2, ops
    (mask,) = [n for n in e.graph.nodes if n.op is ge.MATMUL_MASK]
    assert mask.params["rowsum"] and len(mask.outs) == 3     # with the bias gradient
    assert mask.params["bias_sgd"]                  # and the bias's SGD step
    assert all(n.params["rows"] and n.params["relu"] for n in e.graph.nodes
               if n.op is ge.MATMUL_BIAS)       # feature-major: bias columns
    # the updated weights are planned into the weights' own buffers ...
    plan = e.program.plan
    sgd_outs = [n.outs[1].id for n in e.graph.nodes if n.op is ge.MATMUL_SGD]
    assert all(plan.kind[v] == "inplace" for v in sgd_outs)
    # ... and are written there: the parameters keep their arrays
    params = list(model.parameters())
    before = [p.detach().numpy().copy() for p in params]
    addrs = [p.detach().numpy().ctypes.data for p in params]
    f(x, y)
    assert [p.detach().numpy().ctypes.data for p in params] == addrs
    for i in (0, 2):                             # the two folded weights: w - lr * grad
        w, g = params[i].detach().numpy(), params[i].grad.numpy()
        np.testing.assert_array_equal(w, _sgd(before[i], g, 0.05))


def test_results_follow_the_pipeline_without_the_pass():
    _needs_gemm()
    x, y = _data()
    runs = {}
    for name, passes in (("with", DEFAULT_PASSES), ("without", WITHOUT)):
        f, model = _compiled(passes)
        losses = [float(f(x, y)) for _ in range(4)]
        runs[name] = (losses, [p.detach().numpy().copy() for p in model.parameters()],
                      [p.grad.numpy().copy() for p in model.parameters()])
        folded = sum(n.op in (ge.MATMUL_SGD, ge.MATMUL_BIAS, ge.MATMUL_MASK)
                     for n in _entry(f).graph.nodes)
        assert folded == (5 if name == "with" else 0)
    (l1, p1, g1), (l0, p0, g0) = runs["with"], runs["without"]
    # NOTE: not bitwise: the forward products sum k in one block, the first layer's bias
    # gradient is summed in float32 in the GEMM's stores (the fused kernel sums in double)
    np.testing.assert_allclose(l1, l0, rtol=1e-6)
    for a, b in zip(p1 + g1, p0 + g0):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_a_smaller_product_takes_relu_backward_but_not_the_update():
    """A 16-class classifier: its input gradient (128x16x128, below ``sgemm.worth``) takes
    the next layer's relu backward (``MASK_MIN_MACS``); its weight gradient keeps its
    update apart (``worth``)."""
    _needs_gemm()
    rng = np.random.default_rng(0)
    x = em.tensor(rng.standard_normal((BATCH, SIZES[0])).astype(np.float32))
    y = em.tensor(rng.integers(0, 16, BATCH))
    f, _ = _compiled(DEFAULT_PASSES, sizes=SIZES[:-1] + (16,))
    f(x, y)
    f(x, y)
    changed = {r["pass"]: r["changed"] for r in _entry(f).report}["gemm_epilogue"]
    assert changed == {"gemm_sgd": 2, "gemm_bias": 2, "gemm_mask": 2}, changed


def test_not_rewritten_where_openblas_runs_the_product(monkeypatch):
    monkeypatch.setattr(sgemm, "mode", "off")
    x, y = _data()
    f, _ = _compiled(DEFAULT_PASSES)
    f(x, y)
    f(x, y)
    e = _entry(f)
    assert {r["pass"]: r["changed"] for r in e.report}["gemm_epilogue"] == \
        {"gemm_sgd": 0, "gemm_bias": 0, "gemm_mask": 0}
    assert not any(n.op in (ge.MATMUL_SGD, ge.MATMUL_BIAS, ge.MATMUL_MASK)
                   for n in e.graph.nodes)


@pytest.mark.parametrize("gemm", ["ember", "numpy"])
def test_run_functions_match_the_unfused_chain(gemm, monkeypatch):
    if gemm == "ember":
        _needs_gemm()
    else:
        monkeypatch.setattr(sgemm, "mode", "off")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((40, 96), dtype=np.float32)     # used as a.T: (96, 40)
    b = rng.standard_normal((40, 300), dtype=np.float32)
    w = rng.standard_normal((96, 300), dtype=np.float32)
    lr = np.array(0.1)                                        # float64, as a lifted lr
    prod = a.T.astype(np.float64) @ b.astype(np.float64)
    w_in = w.copy()
    g, wn = ge._run_matmul_sgd(np, a, b, w_in, lr, outs=[None, w_in], ta=True)
    assert wn is w_in
    np.testing.assert_allclose(g, prod, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(wn, _sgd(w, g, 0.1))
    bias = rng.standard_normal((96, 1), dtype=np.float32)
    out = np.empty((96, 300), np.float32)
    r = ge._run_matmul_bias(np, a, b, bias, out=out, ta=True, rows=True, relu=True)
    assert r is out
    g2 = ge._run_matmul_t(np, a, b, ta=True)
    want = g2 + bias
    np.testing.assert_array_equal(r, np.where(want > 0, want, np.float32(0)))
    y = np.maximum(want, 0)
    y[0, :3] = np.nan                                  # NaN passes the gradient on
    m, sums = ge._run_matmul_mask(np, a, b, y, ta=True, rowsum=True)
    np.testing.assert_array_equal(m, np.where(y <= 0, np.float32(0), g2))
    np.testing.assert_allclose(sums, m.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(ge._run_matmul_mask(np, a, b, y, ta=True), m)
    bias1 = rng.standard_normal(96, dtype=np.float32)
    m2, sums2, bn = ge._run_matmul_mask(np, a, b, y, bias1, lr, ta=True, rowsum=True,
                                        bias_sgd=True)
    np.testing.assert_array_equal(m2, m)
    np.testing.assert_array_equal(sums2, sums)
    np.testing.assert_array_equal(bn, _sgd(bias1, sums, 0.1))    # one rounding
