"""ONNX export: models and functions exported by ``ember.onnx.export`` and run by
onnxruntime agree with Ember (skipped when onnx/onnxruntime are not installed)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.errors import GraphError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import ember.onnx  # noqa: E402
from ember.training.models import Block, GPT  # noqa: E402


def run_onnx(model_proto, args, names=None):
    sess = ort.InferenceSession(model_proto.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    names = names or [f"input{i}" for i in range(len(args))]
    return sess.run(None, {n: a.numpy() for n, a in zip(names, args)})


def check(fn, *args, atol=1e-5, opset=17, tmp_path=None):
    path = None if tmp_path is None else tmp_path / "m.onnx"
    m = ember.onnx.export(fn, args, path, opset=opset)
    got = run_onnx(m if path is None else onnx.load(str(path)), args)
    with em.no_grad():
        ref = fn(*args)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    assert len(got) == len(refs)
    for g, r in zip(got, refs):
        assert g.shape == tuple(r.shape) and g.dtype == r.numpy().dtype
        np.testing.assert_allclose(g, r.numpy(), atol=atol, rtol=1e-5)
    return m


def test_mlp(tmp_path):
    em.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 32), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 5)).eval()
    m = check(model, em.randn(4, 3, 4), tmp_path=tmp_path)
    assert (tmp_path / "m.onnx").exists()
    inits = {t.name for t in m.graph.initializer}
    assert "model.1.weight" in inits and "model.6.bias" in inits
    assert [i.name for i in m.graph.input] == ["input0"]


def test_cnn_with_batchnorm_eval():
    em.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(8, 4, 3, stride=2, padding=1), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 2 * 2, 5))
    model.train()
    for _ in range(3):            # move the running statistics away from 0 / 1
        model(em.randn(4, 3, 8, 8) * 2 + 1)
    model.eval()
    m = check(model, em.randn(2, 3, 8, 8))
    assert "model.1.running_mean" in {t.name for t in m.graph.initializer}


def test_gpt_block_and_model():
    em.manual_seed(0)
    block = Block(16, 2, dropout=0.1).eval()
    mask = em.triu(em.full((6, 6), -math.inf), diagonal=1)
    check(block, em.randn(2, 6, 16), mask)
    gpt = GPT(13, 8, d_model=16, n_heads=4, n_layers=2).eval()
    check(gpt, em.randint(0, 13, (3, 8)))


def test_names_and_several_outputs():
    def f(x, y):
        return x + y, (x * y).sum(1)
    x, y = em.randn(3, 4), em.randn(3, 4)
    m = ember.onnx.export(f, (x, y), input_names=["a", "b"], output_names=["s", "p"])
    assert [i.name for i in m.graph.input] == ["a", "b"]
    assert [o.name for o in m.graph.output] == ["s", "p"]
    s, p = run_onnx(m, (x, y), ["a", "b"])
    np.testing.assert_allclose(s, (x + y).numpy(), atol=1e-6)
    np.testing.assert_allclose(p, (x * y).sum(1).numpy(), atol=1e-5)


def _elementwise(x, y):
    a = em.where(x > 0, em.exp2(x), em.log1p(x.abs())) + em.expm1(y) * em.erfc(x)
    b = em.clamp(x, -0.5, 0.5) * em.sigmoid(y) - em.trunc(x * 3) + em.round(y * 4)
    c = em.maximum(x, y) / (em.minimum(x, y).abs() + 1) + em.log2(x.abs() + 1)
    d = (x >= y).float() + (x != y).float() + em.logical_and(x > 0, y < 0).float()
    return a + b + c + d + em.remainder(x, 0.7) + em.fmod(y, 0.3) + x.pow(2) + x.sign()


def _reductions(x, y):
    r = x.sum(1, keepdim=True) + x.amax(1, keepdim=True) - x.amin(1, keepdim=True)
    r = r + x.mean(1, keepdim=True) + x.prod(1, keepdim=True)
    r = r + em.softmax(x, 1) + em.log_softmax(y, 0) + em.cumsum(x, 1) + em.cumsum(y, 0).flip(0)
    flags = (x > 0).all(1, keepdim=True).float() + (y > 2).any(1, keepdim=True).float()
    return r + flags + x.argmax(1, keepdim=True).float() + x.argmin().float()


def _shapes(x, y):
    z = em.cat([x, y], 0)[1:5:2, 1:]                   # (2, 3)
    tri = em.tril(x[:2, :2]) + em.triu(y[:2, 1:3], 1)    # (2, 2)
    p = nn.functional.pad(x, (1, 2), value=-1.0)        # (3, 7)
    idx = em.tensor([2, 0, 1, 2])
    g = x[idx][:, idx[:3]]                              # (4, 3)
    two = x[em.tensor([0, 2]), em.tensor([1, 3])]       # (2,)
    apart = x.reshape(3, 2, 2)[em.tensor([1, 2]), :, em.tensor([0, 1])]   # (2, 2)
    inner = x.reshape(3, 2, 2)[:, em.tensor([1, 0, 1]), em.tensor([0, 1, 1])]   # (3, 3)
    sorted_ = em.take_along_dim(x, x.argmax(1, keepdim=True), 1)
    return z, tri, p, g, two, apart, inner, x.flip(1), x.t().reshape(2, 6).expand(2, 2, 6), sorted_


@pytest.mark.parametrize("fn", [_elementwise, _reductions, _shapes])
@pytest.mark.parametrize("opset", [17, 18])
def test_op_coverage(fn, opset):
    em.manual_seed(1)
    x, y = em.randn(3, 4), em.randn(3, 4)
    check(fn, x, y, opset=opset)


def test_conv_variants():
    em.manual_seed(2)
    x = em.randn(2, 3, 9, 9)
    conv = nn.Conv2d(3, 4, 3, stride=2, padding=2, dilation=2)
    check(lambda t: conv(t), x)
    check(lambda t: nn.functional.avg_pool2d(t, 3, stride=2, padding=1), x)
    check(lambda t: nn.functional.max_pool2d(t, 2, ceil_mode=True), x)
    conv1 = nn.Conv1d(3, 2, 3, padding="same")
    check(lambda t: conv1(t), em.randn(2, 3, 7))


def test_integer_and_mixed_dtypes():
    def f(i, x):
        return (i * 2 + 1).float() * x + (i > 1).float(), (i + 3).sum(0)
    check(f, em.tensor([[1, 2, 3]]), em.randn(2, 3))


def test_unsupported_op_is_named():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    with pytest.raises(GraphError, match="random"):
        ember.onnx.export(model, em.randn(2, 4))
    with pytest.raises(GraphError, match="'fold'"):
        ember.onnx.export(lambda t: nn.functional.conv_transpose2d(t, em.ones(2, 1, 2, 2)),
                          em.randn(1, 2, 3, 3))


def test_old_opset_is_refused():
    with pytest.raises(ValueError, match="opset"):
        ember.onnx.export(lambda t: t + 1, em.randn(2), opset=11)
