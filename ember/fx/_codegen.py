"""Python source for an fx :class:`~ember.fx.Graph` (PyTorch's ``CodeGen``): one line per
Node, ``x = None`` after a value's last use, globals for what the code calls."""
from __future__ import annotations

import builtins
import keyword
import math
import operator
import re

from .node import Node, _qualified_name

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# operator.* that print as Python syntax (PyTorch's magic_methods table)
BINARY = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//",
          "mod": "%", "pow": "**", "matmul": "@", "lshift": "<<", "rshift": ">>",
          "and_": "&", "or_": "|", "xor": "^", "eq": "==", "ne": "!=", "lt": "<",
          "le": "<=", "gt": ">", "ge": ">="}
UNARY = {"neg": "-", "pos": "+", "invert": "~"}


class PythonCode:
    """What :meth:`Graph.python_code` returns: ``src`` and the ``globals`` it needs."""

    def __init__(self, src: str, globals_: dict) -> None:
        self.src = src
        self.globals = globals_


def attr_expr(base: str, target: str) -> str:
    """``self.layers.0.weight`` as valid Python: ``getattr(self.layers, "0").weight``."""
    expr = base
    for part in target.split("."):
        expr = f"{expr}.{part}" if _IDENT.match(part) and not keyword.iskeyword(part) \
            else f'getattr({expr}, "{part}")'
    return expr


class _Emitter:
    def __init__(self, root_module: str, local_names: set) -> None:
        import ember
        self.root = root_module
        self.locals = local_names
        self.globals: dict = {"ember": ember, "operator": operator, "inf": math.inf,
                              "nan": math.nan}
        self._by_id: dict[int, str] = {}

    def global_name(self, obj, hint: str) -> str:
        """A name in the generated module's globals bound to ``obj``."""
        if id(obj) in self._by_id:
            return self._by_id[id(obj)]
        base = re.sub(r"\W", "_", hint) or "_obj"
        if base[0].isdigit():
            base = "_" + base
        name, i = base, 0
        while name in self.locals or (name in self.globals and self.globals[name] is not obj):
            i += 1
            name = f"{base}_{i}"
        self.globals[name] = obj
        self._by_id[id(obj)] = name
        return name

    def callee(self, fn) -> str:
        q = _qualified_name(fn)
        if q.startswith("builtins."):
            return q[len("builtins."):]
        if q.startswith(("ember.", "operator.")):
            return q
        return self.global_name(fn, getattr(fn, "__name__", "fn"))

    def arg(self, a) -> str:
        if isinstance(a, Node):
            return a.name
        if isinstance(a, tuple):
            items = ", ".join(self.arg(e) for e in a)
            if hasattr(a, "_fields"):
                return f"{self.global_name(type(a), type(a).__name__)}({items})"
            return f"({items},)" if len(a) == 1 else f"({items})"
        if isinstance(a, list):
            return "[" + ", ".join(self.arg(e) for e in a) + "]"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{k!r}: {self.arg(v)}" for k, v in a.items()) + "}"
        if isinstance(a, slice):
            return f"slice({self.arg(a.start)}, {self.arg(a.stop)}, {self.arg(a.step)})"
        if a is None or a is Ellipsis or isinstance(a, (bool, int, str, complex)):
            return repr(a)
        if isinstance(a, float):
            return repr(a) if math.isfinite(a) else ("inf" if a > 0 else "-inf"
                                                     if a < 0 else "nan")
        return self.global_name(a, _hint(a))

    def call_args(self, args, kwargs) -> str:
        parts = [self.arg(a) for a in args] + [f"{k} = {self.arg(v)}"
                                               for k, v in kwargs.items()]
        return ", ".join(parts)

    def expr(self, n: Node) -> str:
        if n.op == "get_attr":
            return attr_expr(self.root, n.target)
        if n.op == "call_module":
            return f"{attr_expr(self.root, n.target)}({self.call_args(n.args, n.kwargs)})"
        if n.op == "call_method":
            obj, *rest = n.args
            return f"{self.arg(obj)}.{n.target}({self.call_args(rest, n.kwargs)})"
        return self.function_expr(n)

    def function_expr(self, n: Node) -> str:
        t, a = n.target, n.args
        name = getattr(t, "__name__", "")
        if getattr(operator, name, None) is t and not n.kwargs:
            if name in BINARY and len(a) == 2:
                return f"{self.arg(a[0])} {BINARY[name]} {self.arg(a[1])}"
            if name in UNARY and len(a) == 1:
                return f"{UNARY[name]}{self.arg(a[0])}"
            if name == "getitem" and len(a) == 2:
                return f"{self.arg(a[0])}[{self.arg(a[1])}]"
        if t is builtins.getattr and len(a) == 2 and isinstance(a[1], str) \
                and _IDENT.match(a[1]):
            return f"{self.arg(a[0])}.{a[1]}"
        return f"{self.callee(t)}({self.call_args(a, n.kwargs)})"


def _hint(a) -> str:
    r = repr(a)
    if r.startswith("ember.") and _IDENT.match(r[6:]):
        return r[6:]                              # ember.float32 -> float32
    return type(a).__name__.lower()


def python_code(graph, root_module: str = "self") -> PythonCode:
    """The ``forward`` source of ``graph`` and the globals it runs in."""
    nodes = list(graph.nodes)
    em = _Emitter(root_module, {n.name for n in nodes} | {root_module})
    last_use: dict[Node, Node] = {}
    for n in reversed(nodes):
        for i in n.all_input_nodes:
            last_use.setdefault(i, n)
    frees: dict[Node, list[str]] = {}
    for v, user in last_use.items():
        frees.setdefault(user, []).append(v.name)
    params, body = [root_module], []
    for n in nodes:
        if n.op == "placeholder":
            params.append(n.target if not n.args else f"{n.target} = {em.arg(n.args[0])}")
            if n.target.lstrip("*") != n.name:
                body.append(f"{n.name} = {n.target.lstrip('*')}")
            continue
        if n.op == "output":
            body.append(f"return {em.arg(n.args[0])}")
            continue
        line = f"{n.name} = {em.expr(n)}"
        dead = [name for name in frees.get(n, ())]
        if not n.users:
            dead.append(n.name)
        if dead:
            line += ";  " + " = ".join(dead) + " = None"
        body.append(line)
    if not body or not body[-1].startswith("return"):
        body.append("return None")
    src = f"\n\n\ndef forward({', '.join(params)}):\n" + \
        "\n".join("    " + b for b in body) + "\n    "
    return PythonCode(src, em.globals)
