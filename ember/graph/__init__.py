"""Static graphs: the IR, capture (``ember.compile``), passes and the executor.

Layers, bottom up: :mod:`.ir` (Var, Node, Graph, GraphBuilder) and :mod:`.meta` (abstract
evaluation from the registry's rules) → :mod:`.trace` (dispatch modes that record ops)
→ :mod:`.passes` (Graph -> Graph) → :mod:`.executor` (runs a graph) → :mod:`.compile`
(signatures, caching, write-back, ``explain()``).
"""
from .ir import Graph, GraphBuilder, GraphOp, Node, Var, CONSTANT
from .trace import GraphBreak
from .executor import Program, run_graph
from .compile import compile, CompiledFunction
from . import passes

__all__ = ["Graph", "GraphBuilder", "GraphOp", "Node", "Var", "CONSTANT", "GraphBreak",
           "Program", "run_graph", "compile", "CompiledFunction", "passes"]
