"""``ember.fx.interpreter``: :class:`Interpreter` runs a GraphModule one Node at a time
(override a method to change what a kind of Node does); :class:`Transformer` does the
same on Proxies to build a new GraphModule (PyTorch's ``torch.fx.interpreter``)."""
from __future__ import annotations

import inspect
from contextlib import contextmanager
from typing import Any

from .graph import Graph
from .graph_module import GraphModule
from .node import Node, map_aggregate, map_arg
from .proxy import Proxy, TracerBase

__all__ = ["Interpreter", "Transformer"]


class Interpreter:
    """Run a :class:`GraphModule` Node by Node.

    Example:
        >>> class NegSigmoid(ember.fx.Interpreter):
        ...     def call_function(self, target, args, kwargs):
        ...         if target is ember.sigmoid:
        ...             return ember.neg(*args, **kwargs)
        ...         return super().call_function(target, args, kwargs)
        >>> NegSigmoid(gm).run(x)
    """

    def __init__(self, module, garbage_collect_values: bool = True,
                 graph: Graph | None = None) -> None:
        self.module = module
        self.submodules = dict(module.named_modules())
        self.graph = graph if graph is not None else module.graph
        self.env: dict[Node, Any] = {}
        self.name = "Interpreter"
        self.garbage_collect_values = garbage_collect_values
        self.current_node: Node | None = None
        self.user_to_last_uses: dict[Node, list[Node]] = {}
        if garbage_collect_values:
            seen: set[Node] = set()
            for n in reversed(self.graph.nodes):
                for i in n.all_input_nodes:
                    if i not in seen:
                        seen.add(i)
                        self.user_to_last_uses.setdefault(n, []).append(i)

    def run(self, *args, initial_env: dict | None = None,
            enable_io_processing: bool = True) -> Any:
        """Run the graph on ``args``; returns what its ``output`` Node returns."""
        self.env = dict(initial_env or {})
        self.args_iter = iter(args)
        for node in self.graph.nodes:
            if node in self.env:
                continue
            self.env[node] = self.run_node(node)
            if self.garbage_collect_values:
                for dead in self.user_to_last_uses.get(node, []):
                    self.env.pop(dead, None)
            if node.op == "output":
                return self.env[node]
        return None

    @contextmanager
    def _set_current_node(self, node: Node):
        prev, self.current_node = self.current_node, node
        try:
            yield
        finally:
            self.current_node = prev

    def run_node(self, n: Node) -> Any:
        """Run one Node: fetch its arguments, call the method named by ``n.op``."""
        with self._set_current_node(n):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            return getattr(self, n.op)(n.target, args, kwargs)

    # ------------------------------------------------------------ per opcode
    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Any:
        """The next positional input (or the placeholder's default)."""
        if target.startswith("*"):
            return list(self.args_iter)
        try:
            return next(self.args_iter)
        except StopIteration:
            if args:
                return args[0]
            raise RuntimeError(f"Expected positional argument for parameter {target}, but "
                               f"one was not passed in!") from None

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        """Read ``target`` from the module."""
        return self.fetch_attr(target)

    def call_function(self, target, args: tuple, kwargs: dict) -> Any:
        """``target(*args, **kwargs)``."""
        return target(*args, **kwargs)

    def call_method(self, target: str, args: tuple, kwargs: dict) -> Any:
        """``args[0].<target>(*args[1:], **kwargs)``."""
        self_obj, *rest = args
        return getattr(self_obj, target)(*rest, **kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        """Call the submodule ``target``."""
        return self.fetch_attr(target)(*args, **kwargs)

    def output(self, target, args: tuple, kwargs: dict) -> Any:
        """The graph's result."""
        return args[0]

    # ------------------------------------------------------------ helpers
    def fetch_attr(self, target: str) -> Any:
        """The attribute at dotted path ``target`` of the module."""
        obj = self.module
        for i, atom in enumerate(target.split(".")):
            if not hasattr(obj, atom):
                raise RuntimeError(f"Node referenced nonexistent target "
                                   f"{'.'.join(target.split('.')[:i + 1])}")
            obj = getattr(obj, atom)
        return obj

    def fetch_args_kwargs_from_env(self, n: Node) -> tuple[tuple, dict]:
        """``n``'s args and kwargs with each Node replaced by its value."""
        return self.map_nodes_to_values(n.args, n), self.map_nodes_to_values(n.kwargs, n)

    def map_nodes_to_values(self, args, n: Node):
        """Replace the Nodes in ``args`` by their computed values."""
        def load(a: Node):
            if a not in self.env:
                raise RuntimeError(f"Node {n} referenced nonexistent value {a}! Run "
                                   f"Graph.lint() to diagnose such issues")
            return self.env[a]
        return map_arg(args, load)


class _TransformerTracer(TracerBase):
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def is_leaf_module(self, m, qualname: str) -> bool:
        return True


class Transformer(Interpreter):
    """Run a GraphModule on Proxies to build a new one (override a method to rewrite a
    kind of Node); :meth:`transform` returns the new :class:`GraphModule`.

    Example:
        >>> class AddToMul(ember.fx.Transformer):
        ...     def call_function(self, target, args, kwargs):
        ...         if target is ember.add:
        ...             target = ember.mul
        ...         return super().call_function(target, args, kwargs)
        >>> new_gm = AddToMul(gm).transform()
    """

    def __init__(self, module: GraphModule) -> None:
        super().__init__(module)
        self.new_graph = Graph()
        self.new_graph._tracer_cls = getattr(module.graph, "_tracer_cls", None)
        self.tracer = _TransformerTracer(self.new_graph)
        self.tracer.root = module
        self._wrappers: dict = {}

    def run_node(self, n: Node) -> Any:
        # NOTE: while transforming, ``ember.sigmoid`` names the recording wrapper, so an
        # override's ``target is ember.sigmoid`` must see that wrapper; Nodes get the original.
        if n.op != "call_function" or id(n.target) not in self._wrappers:
            return super().run_node(n)
        with self._set_current_node(n):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            return self.call_function(self._wrappers[id(n.target)], args, kwargs)

    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        default = args[0] if args else inspect.Signature.empty
        return Proxy(self.new_graph.placeholder(target, default_value=default), self.tracer)

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        return self.tracer.create_proxy("get_attr", target, args, kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        return self.tracer.create_proxy("call_module", target, args, kwargs)

    def call_function(self, target, args: tuple, kwargs: dict) -> Proxy:
        return self.tracer.create_proxy("call_function", target, args, kwargs)

    def transform(self) -> GraphModule:
        """Run the Transformer and return the new GraphModule. Ember functions called on
        the Proxies inside overridden methods record Nodes (same patching as tracing)."""
        from ._symbolic_trace import _Patcher, patch_functions, patch_tensor_operators
        with _Patcher() as patcher:
            self._wrappers = patch_functions(patcher)
            patch_tensor_operators(patcher)
            try:
                result = super().run(enable_io_processing=False)
            finally:
                self._wrappers = {}
        if result is not None:
            self.new_graph.output(map_aggregate(
                result, lambda a: a.node if isinstance(a, Proxy) else a))
        return GraphModule(self.module, self.new_graph, type(self.module).__name__)
