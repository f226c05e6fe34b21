"""Issue 19: the ``ce_rows`` pass (a small classifier's cross-entropy and its backward, with
the logits' bias and product, in one C call).

A compiled MLP SGD step gets one ``ce_rows`` node in place of the log-softmax, gather,
mask, count, one-hot and softmax-backward nodes (and, for a classifier of <= 16 classes,
its product); losses, gradients and parameters follow the pipeline without the pass
within float32 rounding. Graphs the pattern does not describe are left alone: float64,
class weights, label smoothing, ``reduction='sum'``, a log-softmax over dim 0, a
log-softmax something else reads.
"""
import importlib

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember import nn
from ember.codegen import ce_rows as K
from ember.codegen import sgemm
from ember.graph.passes import DEFAULT_PASSES, EXACT_PASSES, HOST_PASSES

# NOTE: the package's attribute ``ce_rows`` is the pass function, not the module
cr = importlib.import_module("ember.graph.passes.ce_rows")

WITHOUT = [p for p in DEFAULT_PASSES if p != "ce_rows"]


def _needs_kernels():
    if not K.available():
        pytest.skip("no C compiler: the pass leaves graphs alone")


def _mlp(sizes, dtype=em.float32):
    em.manual_seed(0)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b, dtype=dtype), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _data(sizes, batch, dtype=np.float32, ignore=None, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, sizes[-1], batch)
    if ignore is not None:
        y[::5] = ignore
    return em.tensor(rng.standard_normal((batch, sizes[0])).astype(dtype)), em.tensor(y)


def _compiled(passes, sizes, dtype=em.float32, loss_fn=None, lr=0.05, opt=None):
    model = _mlp(sizes, dtype)
    opt = (opt or (lambda ps: em.optim.SGD(ps, lr=lr)))(model.parameters())
    loss_fn = loss_fn or F.cross_entropy

    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return em.compile(step, fullgraph=True, passes=passes), model


def _entry(f):
    return [e for e in f._cache.values() if not e.eager and e.program is not None][-1]


def _changed(f):
    return {r["pass"]: r["changed"] for r in _entry(f).report}["ce_rows"]


def _run(passes, sizes, batch, steps=4, **kw):
    data = _data(sizes, batch, ignore=kw.pop("ignore", None))
    f, model = _compiled(passes, sizes, **kw)
    losses = [float(f(*data)) for _ in range(steps)]
    return f, losses, [p.detach().numpy().copy() for p in model.parameters()], \
        [p.grad.numpy().copy() for p in model.parameters()]


def test_pipeline_position():
    assert DEFAULT_PASSES.index("gemm_epilogue") < DEFAULT_PASSES.index("ce_rows") \
        < DEFAULT_PASSES.index("fuse")
    assert "ce_rows" in HOST_PASSES and "ce_rows" not in EXACT_PASSES


@pytest.mark.parametrize("sizes,batch,product", [
    ((64, 128, 128, 10), 128, True),     # W1's shape class: feature-major, 128 rows at once
    ((20, 24, 7), 37, True),             # ragged rows (16-row blocks, a 5-row tail)
    ((20, 24, 40), 19, False),           # 40 classes: the product stays a GEMM
])
def test_mlp_step_folds_the_loss_and_follows_the_unfused_pipeline(sizes, batch, product):
    _needs_kernels()
    f1, l1, p1, g1 = _run(DEFAULT_PASSES, sizes, batch)
    assert _changed(f1) == {"ce_rows": 1, "ce_rows_product": int(product)}
    ops = [n.op.name for n in _entry(f1).graph.nodes]
    assert ops.count("ce_rows") == 1, ops
    assert not {"log_softmax", "take_rows", "count_true", "exp"} & set(ops), ops
    (node,) = [n for n in _entry(f1).graph.nodes if n.op is cr.CE_ROWS]
    assert node.params["db"] and node.params["bias"] and len(node.outs) == 3
    f0, l0, p0, g0 = _run(WITHOUT, sizes, batch)
    assert not any(n.op is cr.CE_ROWS for n in _entry(f0).graph.nodes)
    # NOTE: float32 rounding apart: the logits' product sums k in another order than BLAS
    np.testing.assert_allclose(l1, l0, rtol=2e-6)
    for a, b in zip(p1 + g1, p0 + g0):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-7)


def _head_runs() -> bool:
    """Whether gemm_epilogue folds the classifier's input gradient with relu's backward
    (Ember's GEMM runs here), which the head fold starts from."""
    return sgemm._isa(None) is not None


@pytest.mark.parametrize("opt", ["sgd", "momentum", "adam"])
def test_the_classifier_backward_and_sgd_step_fold_too(opt):
    """W1's layout past ``gemm_epilogue.MASK_MIN_MACS``: under plain SGD the classifier's
    input gradient (relu's backward and its row sums), weight gradient and the SGD steps
    of its weight, its bias and the previous layer's bias are outputs of the same node;
    with momentum or Adam only the loss folds. Results follow the pipeline without it."""
    _needs_kernels()
    sizes, batch = (64, 256, 256, 10), 128
    make = {"sgd": None, "momentum": lambda ps: em.optim.SGD(ps, lr=0.05, momentum=0.9),
            "adam": lambda ps: em.optim.Adam(ps, lr=1e-3)}[opt]
    f1, l1, p1, g1 = _run(DEFAULT_PASSES, sizes, batch, opt=make)
    (node,) = [n for n in _entry(f1).graph.nodes if n.op is cr.CE_ROWS]
    head = opt == "sgd" and _head_runs()
    assert bool(node.params.get("head")) == head and len(node.outs) == (9 if head else 3)
    assert bool(node.params.get("bias2")) == head
    ops = [n.op.name for n in _entry(f1).graph.nodes]
    if head:     # one matmul_mask left (the first hidden layer's), no classifier GEMM
        assert ops.count("matmul_mask") == 1 and "matmul_t" not in ops, ops
        assert "fused" not in ops, ops      # the first layer's bias step: in its GEMM's
    # gemm_epilogue's bias step from the mask's row sums: plain SGD only
    masks = [n for n in _entry(f1).graph.nodes if n.op.name == "matmul_mask"]
    assert all(bool(n.params.get("bias_sgd")) == (opt == "sgd") for n in masks), masks
    f0, l0, p0, g0 = _run(WITHOUT, sizes, batch, opt=make)
    np.testing.assert_allclose(l1, l0, rtol=2e-6)
    for a, b in zip(p1 + g1, p0 + g0):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-7)


def test_ignore_index_is_honoured():
    """A non-default ``ignore_index`` (some targets equal to it) folds, and the ignored rows
    get no gradient: results follow the pipeline without the pass."""
    _needs_kernels()
    sizes, batch = (12, 16, 6), 40

    def loss_fn(z, y):
        return F.cross_entropy(z, y, ignore_index=3)
    f1, l1, p1, g1 = _run(DEFAULT_PASSES, sizes, batch, ignore=3, loss_fn=loss_fn)
    assert _changed(f1)["ce_rows"] == 1
    (node,) = [n for n in _entry(f1).graph.nodes if n.op is cr.CE_ROWS]
    assert node.params["ignore_index"] == 3
    f0, l0, p0, g0 = _run(WITHOUT, sizes, batch, ignore=3, loss_fn=loss_fn)
    np.testing.assert_allclose(l1, l0, rtol=2e-6)
    for a, b in zip(p1 + g1, p0 + g0):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-7)


@pytest.mark.parametrize("case", ["float64", "weight", "label_smoothing", "sum", "dim0",
                                  "lsm_read_elsewhere"])
def test_left_alone(case):
    _needs_kernels()
    sizes, batch, dtype = (12, 16, 6), 24, em.float32
    w = em.tensor(np.linspace(0.5, 1.5, 6).astype(np.float32))
    fns = {
        "float64": F.cross_entropy,
        "weight": lambda z, y: F.cross_entropy(z, y, weight=w),
        "label_smoothing": lambda z, y: F.cross_entropy(z, y, label_smoothing=0.1),
        "sum": lambda z, y: F.cross_entropy(z, y, reduction="sum"),
        # a "cross-entropy" over the batch dim: log_softmax(dim=0) then NLL
        "dim0": lambda z, y: F.nll_loss(F.log_softmax(z, dim=0), y),
        "lsm_read_elsewhere": lambda z, y: F.nll_loss(F.log_softmax(z, dim=1), y)
        + F.log_softmax(z, dim=1).mean() * 0.5,
    }
    if case == "float64":
        dtype = em.float64
    data = _data(sizes, batch, dtype=np.float64 if case == "float64" else np.float32)
    for passes in (DEFAULT_PASSES, WITHOUT):
        f, _ = _compiled(passes, sizes, dtype=dtype, loss_fn=fns[case])
        f(*data)
        f(*data)
        if passes is DEFAULT_PASSES:
            assert _changed(f) == {"ce_rows": 0, "ce_rows_product": 0}
            assert not any(n.op is cr.CE_ROWS for n in _entry(f).graph.nodes)


def test_the_plain_nll_of_log_softmax_folds_too():
    """``nll_loss(log_softmax(z, 1), y)`` is the same graph as ``cross_entropy``."""
    _needs_kernels()
    f, _ = _compiled(DEFAULT_PASSES, (12, 16, 6),
                     loss_fn=lambda z, y: F.nll_loss(F.log_softmax(z, dim=1), y))
    data = _data((12, 16, 6), 24)
    f(*data)
    f(*data)
    assert _changed(f)["ce_rows"] == 1


# ------------------------------------------------------------------------------ the kernel
def _reference(z, t, ii, seed):
    """float64 cross-entropy (mean over kept rows) and its gradient, by NumPy."""
    z = z.astype(np.float64)
    lsm = z - z.max(1, keepdims=True)
    lsm -= np.log(np.exp(lsm).sum(1, keepdims=True))
    keep = t != ii
    cnt = keep.sum()
    loss = -lsm[np.arange(len(t))[keep], t[keep]].sum() / cnt if cnt else np.nan
    d = np.exp(lsm) * seed / max(cnt, 1)
    d[np.arange(len(t))[keep], t[keep]] -= seed / max(cnt, 1)
    d[~keep] = 0
    return loss, d


@pytest.mark.parametrize("n,k,c,layout", [
    (128, 512, 10, "feature_major"), (256, 64, 3, "feature_major"), (37, 20, 16, "rows"),
    (130, 33, 5, "feature_major"), (9, 5, 1, "rows"), (50, 8, 40, "none"),
    (3, 4, 700, "none")])
def test_kernel_matches_float64(n, k, c, layout):
    _needs_kernels()
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, k)).astype(np.float32)
    w = (rng.standard_normal((c, k)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    t = rng.integers(0, c, n)
    t[1::4] = -100
    if layout == "feature_major":
        a = np.ascontiguousarray(a.T).T              # columns contiguous (W1's h2.T)
    z64 = a.astype(np.float64) @ w.T.astype(np.float64) + bias
    if layout == "none":
        got = K.ce_rows((a @ w.T).astype(np.float32), None, bias, t, seed=2.0, want_db=True)
    else:
        got = K.ce_rows(a, w.T, bias, t, seed=2.0, want_db=True)
    loss, d = _reference(z64, t, -100, 2.0)
    assert got[0].shape == () and got[1].shape == (n, c) and got[2].shape == (c,)
    np.testing.assert_allclose(got[0], loss, rtol=1e-5)
    np.testing.assert_allclose(got[1], d, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(got[2], d.sum(0), rtol=1e-4, atol=1e-6)
    assert np.all(got[1][1::4] == 0)                   # ignored rows: no gradient


@pytest.mark.parametrize("n,k,c", [(128, 512, 10), (37, 20, 3), (50, 33, 16), (64, 8, 1)])
def test_kernel_head_matches_float64(n, k, c):
    """The classifier's backward and SGD steps (``lr``): relu's backward of the input
    gradient (``y <= 0`` masked to +0, NaN passes), its row sums, the weight gradient and
    the updates ``w - lr * g`` (``lr`` in float32) against float64 NumPy."""
    _needs_kernels()
    rng = np.random.default_rng(2)
    y = np.maximum(rng.standard_normal((k, n)), 0).astype(np.float32)   # feature-major
    w = (rng.standard_normal((c, k)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    b2 = rng.standard_normal(k).astype(np.float32)
    t = rng.integers(0, c, n)
    t[::3] = -100
    lr = 0.1
    got = K.ce_rows(y.T, w.T, bias, t, want_db=True, lr=lr, bias2=b2)
    assert len(got) == 9
    loss, d, db, dx, rs, dw, wn, bn, b2n = got
    z = y.T.astype(np.float64) @ w.T.astype(np.float64) + bias
    want_loss, want_d = _reference(z, t, -100, 1.0)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    np.testing.assert_allclose(d, want_d, rtol=1e-4, atol=1e-7)
    want_dx = w.T.astype(np.float64) @ d.T.astype(np.float64)
    want_dx[y <= 0] = 0
    assert np.all(dx[y <= 0] == 0) and not np.signbit(dx[y <= 0]).any()   # +0
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(rs, want_dx.sum(1), rtol=1e-4, atol=1e-6)
    want_dw = d.T.astype(np.float64) @ y.T.astype(np.float64)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-4, atol=1e-6)
    lr32 = np.float64(np.float32(lr))
    # the steps are one rounding of w - lr * (the kernel's own gradient)
    np.testing.assert_array_equal(wn, (w - lr32 * dw.astype(np.float64)).astype(np.float32))
    np.testing.assert_array_equal(bn, (bias - lr32 * db.astype(np.float64)).astype(np.float32))
    np.testing.assert_array_equal(b2n, (b2 - lr32 * rs.astype(np.float64)).astype(np.float32))
    y[0, :] = np.nan                              # NaN activations pass the gradient on
    dx2 = K.ce_rows(y.T, w.T, bias, t, want_db=True, lr=lr)[3]
    assert np.isnan(dx2[0]).all()


def test_kernel_all_ignored_and_bad_targets():
    _needs_kernels()
    z = np.ones((20, 4), np.float32)
    loss, d, db = K.ce_rows(z, None, None, np.full(20, -100), want_db=True)
    assert np.isnan(loss) and not d.any() and not db.any()   # 0 / 0, as the graph's mean
    t = np.zeros(20, np.int64)
    t[7] = 4
    with pytest.raises(IndexError, match="target 4 in row 7"):
        K.ce_rows(z, None, None, t)
    t[7] = -1
    with pytest.raises(IndexError, match="target -1 in row 7"):
        K.ce_rows(z, None, None, t)
