"""``ember.onnx.export``: capture an inference graph with ``ember.compile``, write ONNX.

The model (or function) is traced once on the example inputs under ``no_grad`` with the
exact passes only (no fused graph-only ops), then each IR node goes through its converter
in :mod:`ember.onnx.ops`. The call's tensor arguments become the ONNX graph inputs;
everything else the graph read (parameters, buffers, closure tensors) becomes an
initializer holding its current value, named by its label (``"model.0.weight"``).
"""
from __future__ import annotations

import os

import numpy as np
import onnx

from ..autograd.grad_mode import no_grad
from ..dtypes import bool_
from ..errors import GraphError
from ..graph import CONSTANT, Var, compile
from ..tensor import Tensor
from . import shape_ops  # noqa: F401 - registers the movement/indexing converters
from .builder import OnnxBuilder
from .ops import CONVERTERS, unsupported

#: The passes run before conversion: all exact, none produces a graph-only fused op.
EXPORT_PASSES = ["simplify", "fold", "cse", "dce"]


def export(model_or_fn, example_inputs, path=None, *, input_names=None, output_names=None,
           opset: int = 17, check: bool = True):
    """Trace ``model_or_fn(*example_inputs)`` and write it as an ONNX model to ``path``.

    The module is exported in its *current* mode, like ``torch.onnx.export``: call
    ``model.eval()`` first so Dropout is off and BatchNorm uses its running statistics
    (a training-mode BatchNorm would export its batch statistics, and Dropout fails:
    random draws have no ONNX conversion). Shapes are fixed to the example inputs'.

    Args:
        model_or_fn: an ``nn.Module`` or a function of tensors.
        example_inputs: a tensor or a tuple of positional arguments.
        path: where to write the ``.onnx`` file (``None``: only return the model).
        input_names / output_names: ONNX names (default ``input0...``, ``output0...``).
        opset: the ONNX opset to target (17 by default; 13 or later).
        check: run ``onnx.checker`` on the result.

    Returns:
        The ``onnx.ModelProto``.

    Example:
        >>> model.eval()
        >>> ember.onnx.export(model, ember.randn(1, 3, 32, 32), "model.onnx")
    """
    if opset < 13:
        raise ValueError(f"ember.onnx.export: opset {opset} is too old; 13 or later")
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    graph, sources, labels, outputs = capture(model_or_fn, args)
    model = to_onnx(graph, sources, labels, outputs, input_names=input_names,
                    output_names=output_names, opset=opset,
                    name=getattr(model_or_fn, "__name__", type(model_or_fn).__name__))
    if check:
        onnx.checker.check_model(model)
    if path is not None:
        onnx.save(model, os.fspath(path))
    return model


def capture(fn, args):
    """Trace ``fn(*args)`` for export: ``(graph, sources, arg_labels, user_outputs)``.

    ``sources`` pairs each lifted graph input (after the call's tensor arguments) with
    where it is read from; ``arg_labels`` names the argument inputs by position.
    """
    compiled = compile(fn, passes=EXPORT_PASSES, fullgraph=True)
    with no_grad():
        compiled(*args)
    info = compiled.last_capture()
    n_args = len(info.arg_slots)
    for s in info.sources:
        if s.kind != "tensor":
            raise GraphError(f"ember.onnx.export: the graph reads {s.label} ({s.kind}); only "
                             f"tensors can become ONNX initializers")
    if len(info.graph.inputs) != n_args + len(info.sources):
        raise GraphError("ember.onnx.export: the captured graph's inputs do not match its "
                         "sources (internal error)")
    return info.graph, info.sources, [f"arg{i}" for i in info.arg_slots], info.outputs


def to_onnx(graph, sources, arg_labels, outputs, *, input_names=None, output_names=None,
            opset: int = 17, name: str = "graph"):
    """Convert a captured IR graph to an ``onnx.ModelProto`` (see :func:`export`)."""
    b = OnnxBuilder(opset)
    env: dict = {}
    n_args = len(arg_labels)
    input_names = list(input_names or [f"input{i}" for i in range(n_args)])
    if len(input_names) != n_args:
        raise ValueError(f"ember.onnx.export: {len(input_names)} input_names for {n_args} "
                         f"tensor inputs")
    onnx_inputs = []
    for v, nm in zip(graph.inputs[:n_args], input_names):
        env[v.id] = b.reserve(nm)
        onnx_inputs.append(b.value_info(env[v.id], v))
    for v, src in zip(graph.inputs[n_args:], sources):
        a = np.asarray(src.read())
        env[v.id] = b.const(a.astype(v.dtype.np, copy=False), name=src.label or v.name)
    for node in graph.nodes:
        _convert_node(b, node, env)
    output_names = list(output_names or [f"output{i}" for i in range(len(outputs))])
    if len(output_names) != len(outputs):
        raise ValueError(f"ember.onnx.export: {len(output_names)} output_names for "
                         f"{len(outputs)} tensor outputs")
    onnx_outputs = []
    for v, nm in zip(outputs, output_names):
        out = b.op("Identity", [env[v.id]], name=b.reserve(nm))
        onnx_outputs.append(b.value_info(out, v))
    return b.model(onnx_inputs, onnx_outputs, name,
                   doc=f"exported by ember from {graph.name}")


def _convert_node(b, node, env) -> None:
    if node.op is CONSTANT:
        v = node.out
        env[v.id] = b.const(np.asarray(node.params["value"]).astype(v.dtype.np, copy=False))
        return
    conv = CONVERTERS.get(node.op.name)
    if conv is None:
        hint = " (a random draw: put the model in eval() mode)" if node.is_random() else ""
        raise unsupported(node, "not implemented" + hint)
    ins = _inputs(b, node, env)
    outs = conv(b, node, ins)
    outs = [outs] if isinstance(outs, str) else list(outs)
    for o, name in zip(node.outs, outs):
        env[o.id] = name


def _inputs(b, node, env) -> list:
    """ONNX names of the node's inputs, cast as the executor casts (see executor._casts)."""
    ct = node.ct
    keep_bool = node.op.elementwise and any(
        x.__class__ is Var and x.dtype is ct for x in node.inputs)
    out = []
    for x in node.inputs:
        if x.__class__ is Var:
            name = env[x.id]
            if ct is not None and x.dtype is not ct and not (keep_bool and x.dtype is bool_):
                name = b.cast(name, ct)
            out.append(name)
        elif isinstance(x, (bool, int, float, np.number, np.bool_)):
            out.append(b.scalar(x, ct or node.outs[0].dtype))
        elif isinstance(x, Tensor):
            out.append(b.const(x._data))
        else:
            raise unsupported(node, f"input of type {type(x).__name__}")
    return out


__all__ = ["export", "capture", "to_onnx", "EXPORT_PASSES"]
