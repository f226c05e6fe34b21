"""``ember.fx.graph``: :class:`Graph`, the ordered list of :class:`~ember.fx.Node` an fx
program is made of (PyTorch's ``torch.fx.Graph``)."""
from __future__ import annotations

import builtins
import contextlib
import inspect
import keyword
import re
from typing import Any, Callable

from . import _codegen
from .node import Node, _format_target, map_arg

__all__ = ["Graph", "PythonCode"]

PythonCode = _codegen.PythonCode
_SUFFIX = re.compile(r"(.*)_(\d+)$")


def _snake_case(s: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", s).lower()


class _Namespace:
    """Unique, valid Python names for Nodes (``add``, ``add_1``, ...)."""

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._base_count: dict[str, int] = {}

    def create_name(self, candidate: str) -> str:
        name = re.sub(r"[^0-9a-zA-Z_]+", "_", candidate) or "_unnamed"
        if name[0].isdigit():
            name = f"_{name}"
        m = _SUFFIX.match(name)
        base, num = (m.group(1), int(m.group(2))) if m else (name, None)
        if num is None and (keyword.iskeyword(name) or hasattr(builtins, name)
                            or name in ("ember", "operator", "self", "inf", "nan")):
            num = 1
        cand = name if num is None else f"{base}_{num}"
        while cand in self._used:
            num = self._base_count.get(base, 0) + 1 if num is None else num + 1
            cand = f"{base}_{num}"
        self._base_count[base] = max(self._base_count.get(base, 0), num or 0)
        self._used.add(cand)
        return cand

    def release(self, name: str) -> None:
        self._used.discard(name)


class _NodeList:
    """The graph's nodes in order; iteration survives erasing the current node."""

    def __init__(self, graph: "Graph", reverse: bool = False) -> None:
        self._graph, self._reverse = graph, reverse

    def __len__(self) -> int:
        return self._graph._len

    def __iter__(self):
        root = self._graph._root
        cur = root._prev if self._reverse else root._next
        while cur is not root:
            if not cur._erased:
                yield cur
            cur = cur._prev if self._reverse else cur._next

    def __reversed__(self):
        return iter(_NodeList(self._graph, not self._reverse))


class Graph:
    """An fx program: Nodes in execution order, each one call or one value.

    Build it by tracing (:func:`ember.fx.symbolic_trace`) or by hand with
    :meth:`placeholder`, :meth:`call_function`... and :meth:`output`; run it through a
    :class:`~ember.fx.GraphModule`.

    Example:
        >>> g = ember.fx.Graph()
        >>> x = g.placeholder("x")
        >>> g.output(g.call_function(ember.relu, (x,)))
        >>> print(g)
        graph():
            %x : [num_users=1] = placeholder[target=x]
            %relu : [num_users=1] = call_function[target=ember.relu](args = (%x,), kwargs = {})
            return relu
    """

    def __init__(self, owning_module=None, tracer_cls=None, tracer_extras=None) -> None:
        self._root = Node(self, "", "root", "", (), {})
        self._namespace = _Namespace()
        self._len = 0
        self._insert = self._root.prepend
        self.owning_module = owning_module
        self._tracer_cls = tracer_cls

    @property
    def nodes(self) -> _NodeList:
        """The Nodes in execution order."""
        return _NodeList(self)

    # ------------------------------------------------------------- building
    def create_node(self, op: str, target, args: tuple | None = None,
                    kwargs: dict | None = None, name: str | None = None,
                    type_expr=None) -> Node:
        """Insert a new Node at the current insertion point (the end by default)."""
        args = () if args is None else tuple(args)
        kwargs = {} if kwargs is None else dict(kwargs)
        candidate = name or self._target_to_name(op, target)
        n = Node(self, self._namespace.create_name(candidate), op, target, args, kwargs,
                 type_expr)
        self._insert(n)
        self._len += 1
        return n

    @staticmethod
    def _target_to_name(op: str, target) -> str:
        if op == "call_function":
            return _snake_case(getattr(target, "__name__", "fn"))
        return _snake_case(str(target).lstrip("*")).replace(".", "_")

    def placeholder(self, name: str, type_expr=None,
                    default_value: Any = inspect.Signature.empty) -> Node:
        """An input of the graph (an argument of the generated ``forward``)."""
        args = () if default_value is inspect.Signature.empty else (default_value,)
        return self.create_node("placeholder", name, args, type_expr=type_expr)

    def get_attr(self, qualified_name: str, type_expr=None) -> Node:
        """Read a parameter, buffer or attribute of the owning module (``"fc.weight"``)."""
        return self.create_node("get_attr", qualified_name, type_expr=type_expr)

    def call_module(self, module_name: str, args=None, kwargs=None, type_expr=None) -> Node:
        """Call the submodule at ``module_name``."""
        return self.create_node("call_module", module_name, args, kwargs,
                                type_expr=type_expr)

    def call_method(self, method_name: str, args=None, kwargs=None, type_expr=None) -> Node:
        """Call ``args[0].<method_name>(*args[1:], **kwargs)``."""
        return self.create_node("call_method", method_name, args, kwargs,
                                type_expr=type_expr)

    def call_function(self, the_function: Callable, args=None, kwargs=None,
                      type_expr=None) -> Node:
        """Call a free function (``ember.relu``, ``operator.add``...)."""
        return self.create_node("call_function", the_function, args, kwargs,
                                type_expr=type_expr)

    def output(self, result, type_expr=None) -> Node:
        """The graph's return value."""
        return self.create_node("output", "output", (result,), type_expr=type_expr)

    def node_copy(self, node: Node, arg_transform: Callable[[Node], Any] = lambda x: x) -> Node:
        """Copy ``node`` (of any graph) into this one, mapping its Node arguments."""
        args = map_arg(node.args, arg_transform)
        kwargs = map_arg(node.kwargs, arg_transform)
        name = node.name if node.op != "placeholder" else node.target
        n = self.create_node(node.op, node.target, args, kwargs, name, node.type)
        n.meta = dict(node.meta)
        return n

    def graph_copy(self, g: "Graph", val_map: dict, return_output_node: bool = False):
        """Copy every Node of ``g`` (except its output) into this graph; ``val_map`` maps
        ``g``'s Nodes to this graph's and is filled. Returns the mapped output value."""
        for n in g.nodes:
            if n in val_map:
                continue
            if n.op == "output":
                out = map_arg(n.args[0], lambda x: val_map[x])
                return (out, n) if return_output_node else out
            val_map[n] = self.node_copy(n, lambda x: val_map[x])
        return None

    @contextlib.contextmanager
    def inserting_before(self, n: Node | None = None):
        """New Nodes go right before ``n`` (the start of the graph if None)."""
        if n is None:
            n = self._root._next
        prev, self._insert = self._insert, n.prepend
        try:
            yield
        finally:
            self._insert = prev

    @contextlib.contextmanager
    def inserting_after(self, n: Node | None = None):
        """New Nodes go after ``n`` (the start of the graph if None), in creation order."""
        anchor = [self._root if n is None else n]

        def insert(x):
            anchor[0].append(x)
            anchor[0] = x
        prev, self._insert = self._insert, insert
        try:
            yield
        finally:
            self._insert = prev

    # ------------------------------------------------------------- editing
    def erase_node(self, to_erase: Node) -> None:
        """Remove a Node nobody uses from the graph.

        Raises:
            RuntimeError: the Node still has users, or is not in this graph.
        """
        if to_erase.users:
            raise RuntimeError(f"Tried to erase Node {to_erase} but it still had "
                               f"{len(to_erase.users)} users in the graph: "
                               f"{to_erase.users}!")
        if to_erase.graph is not self or to_erase._erased:
            raise RuntimeError(f"Node {to_erase} is not in this graph (or already erased)")
        to_erase._remove_from_list()
        to_erase._erased = True
        to_erase._update_args_kwargs((), {})
        self._namespace.release(to_erase.name)
        self._len -= 1

    def eliminate_dead_code(self, is_impure_node: Callable[[Node], bool] | None = None) -> bool:
        """Erase Nodes whose values nobody reads (keeping impure ones).

        Returns:
            Whether anything was erased.
        """
        impure = is_impure_node or (lambda n: n.is_impure())
        changed = False
        for n in reversed(self.nodes):
            if not n.users and not impure(n):
                self.erase_node(n)
                changed = True
        return changed

    def find_nodes(self, *, op: str, target=None) -> list[Node]:
        """The Nodes with this ``op`` (and ``target`` when given)."""
        return [n for n in self.nodes if n.op == op and (target is None or n.target == target)]

    # ----------------------------------------------------------- inspecting
    def lint(self) -> None:
        """Check the graph is well formed: each argument defined earlier in this graph,
        unique names, one ``output`` at the end, targets present in the owning module.

        Raises:
            RuntimeError: naming the first problem.
        """
        seen: set[Node] = set()
        names: set[str] = set()
        nodes = list(self.nodes)
        for n in nodes:
            if n.graph is not self:
                raise RuntimeError(f"Node {n} does not belong to this Graph")
            if n.name in names:
                raise RuntimeError(f"Node redefined name {n.name}!")
            for i in n.all_input_nodes:
                if i not in seen:
                    raise RuntimeError(f"Argument '{i}' of Node '{n}' was used before it "
                                       f"has been defined! Please check that Nodes in the "
                                       f"graph are topologically ordered\n{self}")
            if n.op == "output" and n is not nodes[-1]:
                raise RuntimeError(f"Node {n}: 'output' must be the graph's last node")
            self._lint_target(n)
            seen.add(n)
            names.add(n.name)

    def _lint_target(self, n: Node) -> None:
        m = self.owning_module
        if m is None or n.op not in ("get_attr", "call_module"):
            return
        obj = m
        for i, atom in enumerate(n.target.split(".")):
            if not hasattr(obj, atom):
                owner = ".".join(n.target.split(".")[:i]) or "the root module"
                raise RuntimeError(f"Node {n} target {n.target} references nonexistent "
                                   f"attribute {atom} of {owner}")
            obj = getattr(obj, atom)

    def python_code(self, root_module: str = "self") -> PythonCode:
        """The generated ``forward`` (``.src``) and its globals (``.globals``)."""
        return _codegen.python_code(self, root_module)

    def __str__(self) -> str:
        placeholders: list[str] = []
        lines = []
        for n in self.nodes:
            if n.op == "placeholder":
                n.format_node(placeholders)
            lines.append("    " + n.format_node())
        return "graph():\n" + "\n".join(lines)

    def print_tabular(self) -> None:
        """Print one row per Node: opcode, name, target, args, kwargs (PyTorch's columns;
        plain text formatting, no ``tabulate`` needed)."""
        rows = [["opcode", "name", "target", "args", "kwargs"]]
        for n in self.nodes:
            rows.append([n.op, n.name, _format_target(n.op, n.target), str(n.args),
                         str(n.kwargs)])
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        out = []
        for j, r in enumerate(rows):
            out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
            if j == 0:
                out.append("  ".join("-" * w for w in widths))
        print("\n".join(out))

    def __deepcopy__(self, memo) -> "Graph":
        g = Graph(tracer_cls=self._tracer_cls)
        out = g.graph_copy(self, {})
        memo[id(self)] = g
        g.output(out)
        return g
