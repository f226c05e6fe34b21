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
from .builder import OnnxBuilder, host_array
from .ops import CONVERTERS, unsupported

#: The passes run before conversion: all exact, none produces a graph-only fused op.
EXPORT_PASSES = ["simplify", "fold", "cse", "dce"]


#: PyTorch export arguments accepted with no effect here (what they control is fixed).
_NO_EFFECT = {"verbose": "logging only", "do_constant_folding": "Ember always folds",
              "dynamo": "one exporter", "optimize": "Ember's export passes always run",
              "external_data": "weights are stored inline", "report": "no report",
              "verify": "use onnxruntime on the result", "fallback": "one exporter",
              "operator_export_type": "standard ONNX ops only", "training": "see docstring"}


def export(model, args=None, f=None, *, kwargs=None, export_params: bool = True,
           input_names=None, output_names=None, opset_version: int | None = None,
           dynamic_axes=None, keep_initializers_as_inputs: bool | None = None,
           check: bool = True, example_inputs=None, path=None, opset: int | None = None,
           **options):
    """Trace ``model(*args)`` and write it as an ONNX model to ``f`` (``torch.onnx.export``).

    The module is exported in its *current* mode, like ``torch.onnx.export``: call
    ``model.eval()`` first so Dropout is off and BatchNorm uses its running statistics
    (``training=`` is accepted only as None/"eval"/"preserve"). Shapes are fixed to the
    example inputs' except the ``dynamic_axes``, which become symbolic (``dim_param``)
    dimensions: the graph then computes the shapes that depend on them with
    ``Shape``/``Gather`` at run time (see :mod:`ember.onnx.dynamic`).

    Args:
        model: an ``nn.Module`` or a function of tensors.
        args: a tensor or a tuple of positional arguments (alias: ``example_inputs``).
        f: where to write the ``.onnx`` file (alias: ``path``; ``None``: only return it).
        kwargs: keyword arguments to the model; only empty is supported.
        export_params: must be True (the weights are initializers of the graph).
        input_names / output_names: ONNX names (default ``input0...``, ``output0...``).
        opset_version: the ONNX opset (alias: ``opset``; 17 by default, 13 or later).
        dynamic_axes: ``{input or output name: [axes]}`` or ``{name: {axis: "symbol"}}``;
            a symbol shared by several inputs is one dimension.
        keep_initializers_as_inputs: must be falsy.
        check: run ``onnx.checker`` on the result.
        **options: PyTorch arguments with no effect here (``verbose``,
            ``do_constant_folding``, ``dynamo``, ``optimize``, ...).

    Returns:
        The ``onnx.ModelProto``.

    Raises:
        TypeError: an unknown argument.
        NotImplementedError: an argument value Ember's exporter cannot honour.
        GraphError: a shape cannot be made symbolic, or an op has no conversion.

    Example:
        >>> model.eval()
        >>> ember.onnx.export(model, ember.randn(2, 8), "mlp.onnx", input_names=["x"],
        ...                   dynamic_axes={"x": {0: "batch"}}, opset_version=17)
    """
    args = _pick("args", args, "example_inputs", example_inputs)
    f = _pick("f", f, "path", path)
    opset = _pick("opset_version", opset_version, "opset", opset)
    opset = 17 if opset is None else int(opset)
    _check_options(kwargs, export_params, keep_initializers_as_inputs, options)
    if opset < 13:
        raise ValueError(f"ember.onnx.export: opset {opset} is too old; 13 or later")
    if args is None:
        raise TypeError("ember.onnx.export: missing the example inputs (args)")
    args = args if isinstance(args, tuple) else (args,)
    if dynamic_axes:
        from .dynamic_export import export_dynamic
        model_proto = export_dynamic(model, args, input_names, output_names, opset,
                                     dynamic_axes)
    else:
        graph, sources, labels, outputs = capture(model, args)
        model_proto = to_onnx(graph, sources, labels, outputs, input_names=input_names,
                              output_names=output_names, opset=opset, name=_name(model))
    if check:
        onnx.checker.check_model(model_proto)
    if f is not None:
        onnx.save(model_proto, f if hasattr(f, "write") else os.fspath(f))
    return model_proto


def _name(model) -> str:
    return getattr(model, "__name__", type(model).__name__)


def _pick(name, value, alias, alias_value):
    if alias_value is not None:
        if value is not None:
            raise TypeError(f"ember.onnx.export: got both {name}= and its alias {alias}=")
        return alias_value
    return value


def _check_options(kwargs, export_params, keep_inputs, options) -> None:
    unknown = sorted(set(options) - set(_NO_EFFECT))
    if unknown:
        raise TypeError(f"ember.onnx.export: unexpected arguments {unknown}; accepted with no "
                        f"effect: {sorted(_NO_EFFECT)}")
    if kwargs:
        raise NotImplementedError("ember.onnx.export: kwargs= (keyword inputs) is not "
                                  "supported; pass the inputs positionally in args")
    if not export_params:
        raise NotImplementedError("ember.onnx.export: export_params=False is not supported "
                                  "(the weights are always stored in the graph)")
    if keep_inputs:
        raise NotImplementedError("ember.onnx.export: keep_initializers_as_inputs=True is "
                                  "not supported")
    training = options.get("training")
    if training is not None and str(getattr(training, "name", training)).lower() not in (
            "eval", "preserve", "false"):
        raise NotImplementedError(f"ember.onnx.export: training={training!r}; export in "
                                  f"the module's current mode (call model.eval() first)")


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
            opset: int = 17, name: str = "graph", builder=None, in_dims=None, out_dims=None):
    """Convert a captured IR graph to an ``onnx.ModelProto`` (see :func:`export`).

    ``builder`` (a :class:`~ember.onnx.dynamic.RecordingBuilder`) and ``in_dims``/
    ``out_dims`` (``{position: {axis: symbol}}``) make dimensions symbolic.
    """
    b = builder if builder is not None else OnnxBuilder(opset)
    env: dict = {}
    n_args = len(arg_labels)
    input_names = list(input_names or [f"input{i}" for i in range(n_args)])
    if len(input_names) != n_args:
        raise ValueError(f"ember.onnx.export: {len(input_names)} input_names for {n_args} "
                         f"tensor inputs")
    onnx_inputs = []
    for i, (v, nm) in enumerate(zip(graph.inputs[:n_args], input_names)):
        env[v.id] = b.reserve(nm)
        onnx_inputs.append(b.value_info(env[v.id], v, (in_dims or {}).get(i)))
    b.input_names = [env[v.id] for v in graph.inputs[:n_args]]
    for v, src in zip(graph.inputs[n_args:], sources):
        a = host_array(src.read())
        env[v.id] = b.const(a.astype(v.dtype.np, copy=False), name=src.label or v.name)
    for node in graph.nodes:
        _convert_node(b, node, env)
    output_names = list(output_names or [f"output{i}" for i in range(len(outputs))])
    if len(output_names) != len(outputs):
        raise ValueError(f"ember.onnx.export: {len(output_names)} output_names for "
                         f"{len(outputs)} tensor outputs")
    onnx_outputs = []
    for i, (v, nm) in enumerate(zip(outputs, output_names)):
        out = b.op("Identity", [env[v.id]], name=b.reserve(nm))
        onnx_outputs.append(b.value_info(out, v, (out_dims or {}).get(i)))
    return b.model(onnx_inputs, onnx_outputs, name,
                   doc=f"exported by ember from {graph.name}")


def _convert_node(b, node, env) -> None:
    if node.op is CONSTANT:
        v = node.out
        env[v.id] = b.const(host_array(node.params["value"]).astype(v.dtype.np, copy=False))
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
