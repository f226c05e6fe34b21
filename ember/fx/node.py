"""``ember.fx.node``: :class:`Node`, one instruction of an fx :class:`~ember.fx.Graph`
(PyTorch's ``torch.fx.node``), and the helpers that map over nested arguments."""
from __future__ import annotations

import builtins
import operator
import types
from typing import Any, Callable

__all__ = ["Node", "map_arg", "map_aggregate", "has_side_effect", "Target", "Argument"]

Target = Any      # a callable (call_function) or a string (the other opcodes)
Argument = Any    # nested tuples/lists/dicts/slices of Nodes and Python constants

_OPCODES = ("placeholder", "call_method", "call_module", "call_function", "get_attr",
            "output", "root")


def map_aggregate(a: Argument, fn: Callable) -> Argument:
    """Apply ``fn`` to each leaf of a nested tuple/list/dict/slice structure."""
    if isinstance(a, tuple):
        t = tuple(map_aggregate(e, fn) for e in a)
        return t if not hasattr(a, "_fields") else type(a)(*t)   # namedtuple
    if isinstance(a, list):
        return [map_aggregate(e, fn) for e in a]
    if isinstance(a, dict):
        return {k: map_aggregate(v, fn) for k, v in a.items()}
    if isinstance(a, slice):
        return slice(map_aggregate(a.start, fn), map_aggregate(a.stop, fn),
                     map_aggregate(a.step, fn))
    return fn(a)


def map_arg(a: Argument, fn: Callable[["Node"], Argument]) -> Argument:
    """Apply ``fn`` to each :class:`Node` inside a nested argument structure."""
    if not callable(fn):
        raise TypeError("torch.fx.map_arg(a, fn): fn must be a callable")
    return map_aggregate(a, lambda x: fn(x) if isinstance(x, Node) else x)


def _qualified_name(fn) -> str:
    """``ember.relu``, ``operator.add``, ``ember.nn.functional.linear``: how a function
    target prints and how the generated code reaches it."""
    if getattr(builtins, getattr(fn, "__name__", ""), None) is fn:
        return f"builtins.{fn.__name__}"
    if getattr(operator, getattr(fn, "__name__", ""), None) is fn:
        return f"operator.{fn.__name__}"
    name = getattr(fn, "__name__", None)
    if name is not None:
        import ember
        import ember.nn.functional as F
        if getattr(ember, name, None) is fn:
            return f"ember.{name}"
        if getattr(F, name, None) is fn:
            return f"ember.nn.functional.{name}"
    mod = getattr(fn, "__module__", None) or "__main__"
    return f"{mod}.{getattr(fn, '__qualname__', name or repr(fn))}"


def _format_target(op: str, target) -> str:
    if op == "call_function" and callable(target):
        return _qualified_name(target)
    return str(target)


class Node:
    """One instruction of a :class:`~ember.fx.Graph`: ``op`` is one of ``placeholder``,
    ``get_attr``, ``call_function``, ``call_method``, ``call_module``, ``output``;
    ``target`` what it calls or reads; ``args``/``kwargs`` its inputs (other Nodes or
    constants); ``users`` the Nodes reading its value; ``meta`` free-form metadata.

    Example:
        >>> gm = ember.fx.symbolic_trace(model)
        >>> [n.op for n in gm.graph.nodes]
        ['placeholder', 'call_module', 'call_function', 'output']
    """

    def __init__(self, graph, name: str, op: str, target, args: tuple, kwargs: dict,
                 return_type=None) -> None:
        if op not in _OPCODES:
            raise ValueError(f"Node: op {op!r} is not one of {_OPCODES[:-1]}")
        if op == "call_function" and not callable(target):
            raise ValueError(f"Node [graph = {graph}, name = '{name}'] target {target} "
                             f"has type {type(target)} but a Callable is expected")
        if op in ("placeholder", "call_method", "call_module", "get_attr", "output") \
                and not isinstance(target, str):
            raise ValueError(f"Node [graph = {graph}, name = '{name}'] target {target} "
                             f"has type {type(target)} but a str is expected")
        self.graph = graph
        self.name = name
        self.op = op
        self.target = target
        self._input_nodes: dict[Node, None] = {}
        self.users: dict[Node, None] = {}
        self.type = return_type
        self._prev = self
        self._next = self
        self._erased = False
        self.meta: dict[str, Any] = {}
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._update_args_kwargs(args, kwargs)

    # ----------------------------------------------------------- args and users
    @property
    def args(self) -> tuple:
        """The positional arguments (setting them updates ``users``)."""
        return self._args

    @args.setter
    def args(self, a) -> None:
        self._update_args_kwargs(tuple(a), self._kwargs)

    @property
    def kwargs(self) -> dict:
        """The keyword arguments (setting them updates ``users``)."""
        return self._kwargs

    @kwargs.setter
    def kwargs(self, k) -> None:
        self._update_args_kwargs(self._args, dict(k))

    def update_arg(self, idx: int, arg: Argument) -> None:
        """Set ``args[idx]``."""
        a = list(self._args)
        a[idx] = arg
        self.args = tuple(a)

    def update_kwarg(self, key: str, arg: Argument) -> None:
        """Set ``kwargs[key]``."""
        self.kwargs = {**self._kwargs, key: arg}

    def _update_args_kwargs(self, args: tuple, kwargs: dict) -> None:
        for old in self._input_nodes:
            old.users.pop(self, None)
        self._input_nodes = {}
        self._args = map_arg(args, self._add_input)
        self._kwargs = map_arg(kwargs, self._add_input)

    def _add_input(self, n: "Node") -> "Node":
        if n.graph is not self.graph:
            raise RuntimeError(f"Node {self.name}: argument {n.name} belongs to another "
                               f"graph; copy it with Graph.node_copy first")
        self._input_nodes.setdefault(n)
        n.users.setdefault(self)
        return n

    @property
    def all_input_nodes(self) -> list["Node"]:
        """The distinct Nodes in ``args`` and ``kwargs``, in order of appearance."""
        return list(self._input_nodes)

    def replace_all_uses_with(self, replace_with: "Node",
                              delete_user_cb: Callable[["Node"], bool] = lambda u: True,
                              *, propagate_meta: bool = False) -> list["Node"]:
        """Make every user of this Node read ``replace_with`` instead.

        Returns:
            The users that were changed.
        """
        if propagate_meta:
            for k, v in self.meta.items():
                replace_with.meta.setdefault(k, v)
        changed = [u for u in list(self.users) if delete_user_cb(u)]
        for u in changed:
            u.replace_input_with(self, replace_with)
        return changed

    def replace_input_with(self, old_input: "Node", new_input: "Node") -> None:
        """Replace every occurrence of ``old_input`` in this Node's arguments."""
        swap = (lambda n: new_input if n is old_input else n)
        self._update_args_kwargs(map_arg(self._args, swap), map_arg(self._kwargs, swap))

    # ----------------------------------------------------------------- order
    @property
    def next(self) -> "Node":
        """The next Node in the graph (the graph's root sentinel after the last)."""
        return self._next

    @property
    def prev(self) -> "Node":
        """The previous Node in the graph."""
        return self._prev

    def prepend(self, x: "Node") -> None:
        """Move (or insert) ``x`` right before this Node."""
        if x is self:
            return
        x._remove_from_list()
        p = self._prev
        p._next, x._prev, x._next, self._prev = x, p, self, x

    def append(self, x: "Node") -> None:
        """Move (or insert) ``x`` right after this Node."""
        self._next.prepend(x)

    def _remove_from_list(self) -> None:
        p, n = self._prev, self._next
        p._next, n._prev = n, p

    # ---------------------------------------------------------------- queries
    def is_impure(self) -> bool:
        """Whether dead-code elimination must keep this Node although nobody reads it:
        placeholders, the output, calls of side-effecting functions and in-place methods
        (``add_``: Ember keeps them; PyTorch keeps in-place ATen ops)."""
        if self.op in ("placeholder", "output"):
            return True
        if self.op == "call_function":
            return self.target in _side_effectful_functions
        if self.op == "call_method":
            t = self.target
            return t.endswith("_") and not t.endswith("__")
        if self.op == "call_module" and self.graph.owning_module is not None:
            try:
                mod = self.graph.owning_module.get_submodule(self.target)
            except AttributeError:
                return False
            return bool(getattr(mod, "_is_impure", False))
        return False

    def format_node(self, placeholder_names: list | None = None,
                    maybe_return_typename: list | None = None) -> str | None:
        """PyTorch's one-line form:
        ``%relu : [num_users=1] = call_function[target=ember.relu](args = (%x,), kwargs = {})``.
        """
        if self.op == "placeholder":
            arg_str = self.target
            if self.args:
                arg_str += f" = {self.args[0]!r}"
            if placeholder_names is not None:
                placeholder_names.append(arg_str)
                return None
            default = f"(default={self.args[0]})" if self.args else ""
            return (f"%{self.name} : [num_users={len(self.users)}] = "
                    f"placeholder[target={self.target}]{default}")
        if self.op == "get_attr":
            return (f"%{self.name} : [num_users={len(self.users)}] = "
                    f"get_attr[target={self.target}]")
        if self.op == "output":
            return f"return {self.args[0]}"
        return (f"%{self.name} : [num_users={len(self.users)}] = "
                f"{self.op}[target={_format_target(self.op, self.target)}](args = "
                f"{_format_arg(self._args)}, kwargs = {_format_arg(self._kwargs)})")

    def __repr__(self) -> str:
        return self.name


def _format_arg(a) -> str:
    if isinstance(a, Node):
        return f"%{a.name}"
    if isinstance(a, tuple):
        items = ", ".join(_format_arg(e) for e in a)
        return f"({items},)" if len(a) == 1 else f"({items})"
    if isinstance(a, list):
        return "[" + ", ".join(_format_arg(e) for e in a) + "]"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k}: {_format_arg(v)}" for k, v in a.items()) + "}"
    if isinstance(a, types.FunctionType):
        return _qualified_name(a)
    return str(a)


_side_effectful_functions: set = {operator.setitem}


def has_side_effect(fn: Callable) -> Callable:
    """Mark ``fn`` so :meth:`Graph.eliminate_dead_code` keeps its calls (decorator)."""
    _side_effectful_functions.add(fn)
    return fn
