"""ONNX export of captured Ember graphs (needs the optional ``onnx`` package).

``ember.onnx.export(model, example_inputs, "model.onnx")`` traces the model once with
:func:`ember.compile` and converts each primitive of the graph (:mod:`.ops`,
:mod:`.shape_ops`). Install the extra with ``pip install ember[onnx]`` (onnx, and
onnxruntime to run the result).
"""
from __future__ import annotations

__all__ = ["export"]


def export(model, args=None, f=None, **kwargs):
    """Write ``model`` traced on ``args`` as ONNX to ``f``, with ``torch.onnx.export``'s
    argument names (``input_names``, ``output_names``, ``opset_version``, ``dynamic_axes``;
    Ember's ``example_inputs``/``path``/``opset`` are aliases); see
    :func:`ember.onnx.exporter.export` for the arguments.

    Example:
        >>> model.eval()
        >>> ember.onnx.export(model, ember.randn(1, 8), "mlp.onnx", input_names=["x"],
        ...                   dynamic_axes={"x": {0: "batch"}})
    """
    try:
        from .exporter import export as _export
    except ModuleNotFoundError as e:
        if e.name != "onnx" and not (e.name or "").startswith("onnx."):
            raise
        raise ModuleNotFoundError("ember.onnx.export needs the 'onnx' package: "
                                  "pip install 'ember[onnx]'", name="onnx") from e
    return _export(model, args, f, **kwargs)
