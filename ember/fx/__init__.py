"""``ember.fx``: PyTorch's ``torch.fx`` for Ember modules: trace a module's ``forward``
into a :class:`Graph` of module calls, functions and methods, edit it in Python and run
it as a :class:`GraphModule` (eagerly or through ``ember.compile``).

This is user-level program capture (what a PyTorch user writes passes against), not the
dispatcher tracer of ``ember.graph`` (which records primitives for the compiler).

Example:
    >>> gm = ember.fx.symbolic_trace(model)
    >>> gm.graph.print_tabular()
    >>> for n in gm.graph.nodes:
    ...     if n.op == "call_function" and n.target is ember.add:
    ...         n.target = ember.mul
    >>> gm.recompile()
"""
from .graph import Graph
from .graph_module import GraphModule
from .interpreter import Interpreter, Transformer
from .node import Node, has_side_effect, map_arg
from .proxy import Proxy, TraceError, TracerBase
from ._symbolic_trace import PH, Tracer, recording_functions, symbolic_trace, wrap
from . import passes, subgraph_rewriter  # noqa: F401
from .subgraph_rewriter import replace_pattern

__all__ = ["Graph", "GraphModule", "Interpreter", "Transformer", "Node", "has_side_effect",
           "map_arg", "Proxy", "TraceError", "TracerBase", "Tracer", "recording_functions", "symbolic_trace", "wrap", "PH",
           "replace_pattern", "passes", "subgraph_rewriter"]
