"""A small helper that accumulates ONNX nodes and initializers with fresh names.

Converters (:mod:`ember.onnx.ops`) call :meth:`OnnxBuilder.op` the way a pass calls a
:class:`~ember.graph.ir.GraphBuilder`: ``b.op("Add", [x, y])`` appends a node and returns
the name of its output; constants become initializers (``b.const``, ``b.ints``).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import GraphError

#: Ember dtype name -> ONNX element type.
ONNX_DTYPES = {
    "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
    "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16,
    "int64": TensorProto.INT64, "int32": TensorProto.INT32, "int16": TensorProto.INT16,
    "int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "bool": TensorProto.BOOL,
}


def onnx_dtype(dtype) -> int:
    """The ONNX element type of an Ember dtype; a clear error for the ones ONNX lacks."""
    try:
        return ONNX_DTYPES[dtype.name]
    except KeyError:
        raise GraphError(f"ember.onnx.export: dtype {dtype.name} has no ONNX equivalent "
                         f"here") from None


def host_array(a) -> np.ndarray:
    """``a`` as a NumPy array: a copy of a GPU model's device array (its weights, constants),
    which NumPy cannot read directly."""
    if hasattr(a, "__cuda_array_interface__") and not isinstance(a, np.ndarray):
        from ..device.base import _backends
        return _backends["cuda"].to_host(a)
    return np.asarray(a)


class OnnxBuilder:
    """Nodes and initializers of one ONNX graph under construction."""

    def __init__(self, opset: int):
        self.opset = opset
        self.nodes: list = []
        self.initializers: list = []
        self._taken: set = set()
        self._n = 0

    def fresh(self, hint: str = "t") -> str:
        """A name no other value of this graph has."""
        while True:
            self._n += 1
            name = f"{hint}_{self._n}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    def reserve(self, name: str) -> str:
        """Claim ``name`` (made unique with a suffix if already taken)."""
        base, k = name, 0
        while name in self._taken:
            k += 1
            name = f"{base}_{k}"
        self._taken.add(name)
        return name

    def op(self, op_type: str, inputs, n_out: int = 1, name: str | None = None, **attrs):
        """Append ``op_type(*inputs, **attrs)``; returns its output name (a list if n_out > 1).

        An input given as ``""`` is an omitted optional input, as ONNX spells it.
        """
        outs = [name or self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs,
                                           name=self.fresh("n_" + op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, array, hint: str = "const", name: str | None = None) -> str:
        """An initializer holding ``array`` (copied); returns its name."""
        name = self.reserve(name) if name is not None else self.fresh(hint)
        a = host_array(array)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def ints(self, values) -> str:
        """A 1-D int64 initializer (shapes, axes, starts...)."""
        return self.const(np.asarray(list(values), dtype=np.int64), "ints")

    def scalar(self, value, dtype) -> str:
        """A 0-d initializer of the Ember ``dtype``."""
        return self.const(np.asarray(value, dtype=dtype.np), "scalar")

    def cast(self, x: str, dtype) -> str:
        return self.op("Cast", [x], to=onnx_dtype(dtype))

    def reduce(self, op_type: str, x: str, axes, keepdims: bool) -> str:
        """``Reduce*`` over ``axes``: an input from opset 18 (13 for ReduceSum), else an
        attribute."""
        axes = list(axes)
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.op(op_type, [x, self.ints(axes)], keepdims=int(keepdims))
        return self.op(op_type, [x], axes=axes, keepdims=int(keepdims))

    def value_info(self, name: str, var, symbols: dict | None = None):
        """The graph input/output declaration; ``symbols`` ({axis: name}) are dim_params."""
        shape = [(symbols or {}).get(d, n) for d, n in enumerate(var.shape)]
        return helper.make_tensor_value_info(name, onnx_dtype(var.dtype), shape)

    def model(self, inputs, outputs, graph_name: str, doc: str = ""):
        """The finished ``onnx.ModelProto`` (inputs/outputs: ValueInfoProtos)."""
        g = helper.make_graph(self.nodes, graph_name, inputs, outputs,
                              initializer=self.initializers, doc_string=doc)
        m = helper.make_model(g, producer_name="ember",
                              opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = min(m.ir_version, _max_ir_version())
        return m


def _max_ir_version() -> int:
    """The newest IR version onnxruntime is known to read (onnx may write newer ones)."""
    # NOTE: onnx 1.16+ writes IR 10+, older onnxruntime builds reject it; IR 8 covers
    # opsets up to 18, IR 9 up to 20.
    return 10 if onnx.IR_VERSION >= 10 else onnx.IR_VERSION
