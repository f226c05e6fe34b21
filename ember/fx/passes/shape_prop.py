"""``ember.fx.passes.shape_prop``: :class:`ShapeProp` runs a GraphModule on example
inputs and records each Node's result shape and dtype in ``node.meta['tensor_meta']``."""
from __future__ import annotations

from typing import Any, NamedTuple

from ..interpreter import Interpreter
from ..node import map_aggregate

__all__ = ["ShapeProp", "TensorMetadata"]


class TensorMetadata(NamedTuple):
    """PyTorch's fields: ``memory_format`` is None and quantisation fields are empty
    (Ember has neither)."""
    shape: tuple
    dtype: Any
    requires_grad: bool
    stride: tuple
    memory_format: Any
    is_quantized: bool
    qparams: dict


def _extract(t) -> TensorMetadata:
    return TensorMetadata(tuple(t.shape), t.dtype, bool(t.requires_grad), tuple(t.stride()),
                          None, False, {})


class ShapeProp(Interpreter):
    """Fill ``node.meta['tensor_meta']`` (a :class:`TensorMetadata`, or a structure of them
    for tuple results) and ``node.meta['type']`` by running the graph.

    Example:
        >>> ShapeProp(gm).propagate(ember.randn(2, 4))
        >>> [n.meta['tensor_meta'].shape for n in gm.graph.nodes if n.op != 'output']
    """

    def run_node(self, n):
        from ...tensor import Tensor
        result = super().run_node(n)
        found = []

        def meta(x):
            if isinstance(x, Tensor):
                found.append(True)
                return _extract(x)
            return x
        tm = map_aggregate(result, meta)
        if found:
            n.meta["tensor_meta"] = tm
        n.meta["type"] = type(result)
        return result

    def propagate(self, *args) -> Any:
        """Run the graph on ``args``; returns its output."""
        return super().run(*args)
