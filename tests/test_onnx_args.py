"""``ember.onnx.export`` with PyTorch's argument names and ``dynamic_axes`` (issue 17 item 8):
symbolic dims (``dim_param``) in the graph, run by onnxruntime at two batch sizes."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import nn
from ember.errors import GraphError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


class _Reshaper(nn.Module):
    """Linear on (B, T, 6), then a reshape whose target holds the batch size."""

    def __init__(self):
        super().__init__()
        self.fc, self.fc2 = nn.Linear(6, 4), nn.Linear(8, 3)

    def forward(self, x):
        h = self.fc(x).relu().reshape(x.shape[0], -1, 8)
        return self.fc2(h).flatten(1)


def _cnn():
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3 * 2 * 2, 5)).eval()


def _run(proto, feeds):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {k: v.numpy() for k, v in feeds.items()})


def _dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def _check_batches(model, proto, name, shape_of, batches=(1, 5)):
    for b in batches:
        x = ember.randn(*shape_of(b))
        (got,) = _run(proto, {name: x})
        with ember.no_grad():
            ref = model(x).numpy()
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_pytorch_argument_names(tmp_path):
    ember.manual_seed(0)
    m = nn.Linear(4, 2).eval()
    path = tmp_path / "m.onnx"
    ember.onnx.export(m, (ember.randn(3, 4),), str(path), input_names=["x"],
                      output_names=["y"], opset_version=13, verbose=False,
                      do_constant_folding=True, export_params=True)
    proto = onnx.load(str(path))
    assert proto.opset_import[0].version == 13
    assert [i.name for i in proto.graph.input] == ["x"]
    assert [o.name for o in proto.graph.output] == ["y"]
    alias = ember.onnx.export(m, example_inputs=ember.randn(3, 4), opset=14)   # Ember names
    assert alias.opset_import[0].version == 14


def test_argument_errors():
    m = nn.Linear(4, 2).eval()
    x = ember.randn(3, 4)
    with pytest.raises(TypeError, match="unexpected arguments"):
        ember.onnx.export(m, x, None, bogus=1)
    with pytest.raises(TypeError, match="alias"):
        ember.onnx.export(m, x, None, opset_version=13, opset=14)
    with pytest.raises(NotImplementedError, match="export_params"):
        ember.onnx.export(m, x, None, export_params=False)
    with pytest.raises(ValueError, match="neither an input name"):
        ember.onnx.export(m, x, None, input_names=["x"], dynamic_axes={"z": [0]})


def test_dynamic_batch_reshape_runs_at_two_batch_sizes():
    ember.manual_seed(0)
    m = _Reshaper().eval()
    proto = ember.onnx.export(m, (ember.randn(2, 4, 6),), None, input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": {0: "batch"}})
    assert _dims(proto.graph.input[0]) == ["batch", 4, 6]
    assert _dims(proto.graph.output[0]) == ["batch", 6]
    assert any(n.op_type == "Shape" for n in proto.graph.node)
    _check_batches(m, proto, "x", lambda b: (b, 4, 6))


def test_dynamic_batch_cnn_list_form_names():
    ember.manual_seed(0)
    m = _cnn()
    proto = ember.onnx.export(m, ember.randn(2, 2, 4, 4), None, input_names=["img"],
                              dynamic_axes={"img": [0]})
    assert _dims(proto.graph.input[0]) == ["img_dynamic_axes_1", 2, 4, 4]
    _check_batches(m, proto, "img", lambda b: (b, 2, 4, 4), batches=(1, 3))


def test_two_dynamic_dims_product_in_a_reshape():
    def f(x):                              # (B, T, 3) -> (B*T, 3) -> (B, T*3)
        return (x.reshape(-1, 3) * 2.0).reshape(x.shape[0], -1)
    proto = ember.onnx.export(f, (ember.randn(2, 5, 3),), None, input_names=["x"],
                              dynamic_axes={"x": {0: "B", 1: "T"}})
    assert _dims(proto.graph.input[0]) == ["B", "T", 3]
    for b, t in ((1, 2), (4, 7)):
        x = ember.randn(b, t, 3)
        (got,) = _run(proto, {"x": x})
        np.testing.assert_allclose(got, f(x).numpy(), rtol=1e-6)


def test_shape_not_expressible_is_a_clear_error():
    def half(x):
        return x[:, : x.shape[1] // 2] + 1.0
    with pytest.raises(GraphError, match="dynamic"):
        ember.onnx.export(half, ember.randn(2, 4), None, input_names=["x"],
                          dynamic_axes={"x": {1: "T"}})
