"""``ember.fx.proxy``: :class:`Proxy`, the stand-in value symbolic tracing passes through
user code, and :class:`TracerBase`, what records the Proxies' operations as Nodes."""
from __future__ import annotations

import bisect
import dis
import inspect
import operator

from .graph import Graph
from .node import Node, map_aggregate

__all__ = ["Proxy", "Attribute", "TracerBase", "TraceError", "GraphAppendingTracer"]


class TraceError(ValueError):
    """A program cannot be traced symbolically (control flow on a traced value...)."""


class TracerBase:
    """Records Proxy operations into ``self.graph`` (PyTorch's ``TracerBase``)."""

    graph: Graph

    def create_node(self, kind: str, target, args, kwargs, name=None, type_expr=None) -> Node:
        """Insert a Node (override to add metadata to every traced Node)."""
        target = getattr(target, "__fx_original__", target)    # not the tracing wrapper
        return self.graph.create_node(kind, target, args, kwargs, name, type_expr)

    def proxy(self, node: Node) -> "Proxy":
        """Wrap ``node`` in a :class:`Proxy`."""
        return Proxy(node, self)

    def create_proxy(self, kind: str, target, args, kwargs, name=None, type_expr=None,
                     proxy_factory_fn=None) -> "Proxy":
        """Turn ``args``/``kwargs`` into Node arguments, record a Node, return its Proxy."""
        args_ = self.create_arg(args)
        kwargs_ = self.create_arg(kwargs)
        node = self.create_node(kind, target, args_, kwargs_, name, type_expr)
        return self.proxy(node) if proxy_factory_fn is None else proxy_factory_fn(node)

    def create_arg(self, a):
        """A Node argument for ``a``: Proxies become their Nodes, containers are mapped;
        other values are kept as constants."""
        def leaf(x):
            if isinstance(x, Proxy):
                return x.node
            return x
        return map_aggregate(a, leaf)

    def to_bool(self, obj: "Proxy") -> bool:
        """Called when a Proxy is converted to bool (``if x:``): an error by default."""
        raise TraceError("symbolically traced variables cannot be used as inputs to control "
                         "flow")

    def iter(self, obj: "Proxy"):
        """Called when a Proxy is iterated (``for v in x``): an error by default."""
        raise TraceError("Proxy object cannot be iterated. This can be attempted when the "
                         "Proxy is used in a loop or as a *args or **kwargs function "
                         "argument. See the torch.fx docs on pytorch.org for a more detailed "
                         "explanation of what types of control flow can be traced, and check "
                         "out the Proxy docstring for help troubleshooting Proxy iteration "
                         "errors")

    def keys(self, obj: "Proxy"):
        """Called for ``**x``: records ``x.keys()``."""
        return Attribute(obj, "keys")()


class GraphAppendingTracer(TracerBase):
    """A tracer that only appends to an existing graph (for Proxies made by hand)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph


class Proxy:
    """A traced value: every operation on it is recorded as a Node instead of computed.

    Attribute reads become ``getattr`` calls (or ``call_method`` when called), Python
    operators ``operator.*`` calls, ``ember`` functions ``call_function`` Nodes. A
    Proxy has no value, so ``if proxy:``, ``len(proxy)`` and ``for v in proxy`` raise
    :class:`TraceError` (pass the value as ``concrete_args`` or ``wrap`` the function).

    ``ember`` functions record on Proxies only while a trace or ``Transformer`` runs (or
    under :func:`ember.fx.recording_functions`); operators and methods always record.
    """

    __array_ufunc__ = None       # NumPy defers to our reflected operators

    def __init__(self, node: Node, tracer: TracerBase | None = None) -> None:
        self.node = node
        self.tracer = tracer if tracer is not None else GraphAppendingTracer(node.graph)

    def __repr__(self) -> str:
        return f"Proxy({self.node.name})"

    def __getattr__(self, k: str) -> "Attribute":
        if k.startswith("__") and k.endswith("__"):
            raise AttributeError(k)
        return Attribute(self, k)

    def __call__(self, *args, **kwargs) -> "Proxy":
        return self.tracer.create_proxy("call_method", "__call__", (self,) + args, kwargs)

    def __iter__(self):
        frame = inspect.currentframe().f_back
        insts = list(dis.get_instructions(frame.f_code))
        i = bisect.bisect_left([x.offset for x in insts], frame.f_lasti)
        if i < len(insts) and insts[i].opname == "UNPACK_SEQUENCE":
            return (self[j] for j in range(insts[i].argval))      # a, b = proxy
        return self.tracer.iter(self)

    def __bool__(self) -> bool:
        return self.tracer.to_bool(self)

    def __len__(self) -> int:
        raise RuntimeError("'len' is not supported in symbolic tracing by default. If you "
                           "want this call to be recorded, please call ember.fx.wrap('len') "
                           "at module scope")

    def keys(self):
        return self.tracer.keys(self)

    def __setitem__(self, key, value) -> None:
        self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})

    def __hash__(self) -> int:
        return id(self)

    def __deepcopy__(self, memo):
        raise TraceError(f"Proxy {self.node.name} cannot be deep-copied while tracing")


class Attribute(Proxy):
    """``proxy.name``: a ``call_method`` Node when called, else a ``getattr`` Node."""

    def __init__(self, root: Proxy, attr: str) -> None:
        self.root, self.attr, self.tracer = root, attr, root.tracer
        self._node = None

    @property
    def node(self) -> Node:
        if self._node is None:
            self._node = self.tracer.create_proxy("call_function", getattr,
                                                  (self.root, self.attr), {}).node
        return self._node

    def __call__(self, *args, **kwargs) -> Proxy:
        return self.tracer.create_proxy("call_method", self.attr, (self.root,) + args, kwargs)


_BINARY = ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "lshift",
           "rshift", "and_", "or_", "xor"]
_COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
_UNARY = ["neg", "pos", "invert", "abs"]


def _dunder(name: str) -> str:
    return f"__{name.rstrip('_')}__"


def _install() -> None:
    for name in _BINARY + _COMPARE + ["getitem"]:
        fn = getattr(operator, name)

        def method(self, other, _fn=fn):
            return self.tracer.create_proxy("call_function", _fn, (self, other), {})
        setattr(Proxy, _dunder(name), method)
    for name in _UNARY:
        fn = getattr(operator, name)

        def unary(self, _fn=fn):
            return self.tracer.create_proxy("call_function", _fn, (self,), {})
        setattr(Proxy, _dunder(name), unary)
    for name in _BINARY:
        fn = getattr(operator, name)

        def reflected(self, other, _fn=fn):
            return self.tracer.create_proxy("call_function", _fn, (other, self), {})
        setattr(Proxy, f"__r{name.rstrip('_')}__", reflected)


_install()
