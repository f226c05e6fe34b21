"""``ember.fx.graph_module``: :class:`GraphModule`, an ``nn.Module`` whose ``forward`` is
Python generated from an fx :class:`~ember.fx.Graph` (PyTorch's ``torch.fx.GraphModule``)."""
from __future__ import annotations

import copy
import itertools
import linecache

from ..nn import Module
from .graph import Graph

__all__ = ["GraphModule"]

_KEYS = itertools.count()


def _exec_forward(src: str, globals_: dict):
    """Compile the generated source under a unique file name registered with
    ``linecache`` (so tracebacks and ``inspect.getsource`` show it)."""
    key = f"<eval_with_key>.{next(_KEYS)}"
    linecache.cache[key] = (len(src), None, src.splitlines(True), key)
    g = dict(globals_)
    exec(compile(src, key, "exec"), g)
    return g["forward"]


def _copy_attr(from_module, to_module, target: str) -> None:
    *prefix, field = target.split(".")
    for item in prefix:
        f = getattr(from_module, item)
        t = getattr(to_module, item, None)
        if f is t:
            return
        if t is None:
            t = Module()
            setattr(to_module, item, t)
        from_module, to_module = f, t
    orig = getattr(from_module, field)
    if isinstance(from_module, Module) and field in from_module._buffers:
        to_module.register_buffer(field, orig,
                                  persistent=field not in from_module._non_persistent_buffers)
    else:
        setattr(to_module, field, orig)


def _assign_attr(obj, to_module, target: str) -> None:
    *prefix, field = target.split(".")
    for item in prefix:
        t = getattr(to_module, item, None)
        if t is None:
            t = Module()
            setattr(to_module, item, t)
        to_module = t
    setattr(to_module, field, obj)


class GraphModule(Module):
    """A Module built from a root module (or a dict of attributes) and a Graph: the
    submodules and attributes the graph's ``call_module``/``get_attr`` nodes name are
    copied from ``root``, and ``forward`` is generated from the graph (``.code``). Edit
    ``.graph`` and call :meth:`recompile` to regenerate it.

    Each instance has its own class (as in PyTorch) so ``recompile`` can set ``forward``.

    Example:
        >>> gm = ember.fx.GraphModule(model, graph)
        >>> gm.graph.lint(); gm.recompile()
        >>> out = gm(x)
    """

    def __new__(cls, *args, **kwargs):
        for t in cls.__mro__:
            if t.__qualname__.split(".")[-1] != "GraphModuleImpl":
                cls = t
                break

        class GraphModuleImpl(cls):
            pass
        return super().__new__(GraphModuleImpl)

    def __init__(self, root, graph: Graph, class_name: str = "GraphModule") -> None:
        super().__init__()
        self.__class__.__name__ = class_name
        if isinstance(root, Module):
            if hasattr(root, "training"):
                self.training = root.training
            for node in graph.nodes:
                if node.op in ("get_attr", "call_module"):
                    _copy_attr(root, self, node.target)
        elif isinstance(root, dict):
            for node in graph.nodes:
                if node.op in ("get_attr", "call_module"):
                    if node.target not in root:
                        raise RuntimeError(f"Node {node} referenced target {node.target} "
                                           f"but that target was not provided in root!")
                    _assign_attr(root[node.target], self, node.target)
        else:
            raise RuntimeError(f"GraphModule: unsupported type {type(root).__name__} for "
                               f"root; valid: an ember.nn.Module or a dict")
        self.__dict__["_tracer_cls"] = graph._tracer_cls
        self.graph = graph

    # ``graph`` and ``code`` live in __dict__ (not registered as modules/params)
    @property
    def graph(self) -> Graph:
        """The Graph this module runs; assigning one recompiles."""
        return self.__dict__["_graph"]

    @graph.setter
    def graph(self, g: Graph) -> None:
        if not isinstance(g, Graph):
            raise TypeError(f"GraphModule.graph must be an ember.fx.Graph, got "
                            f"{type(g).__name__}")
        self.__dict__["_graph"] = g
        g.owning_module = self
        self.recompile()

    def __setattr__(self, name: str, value) -> None:
        if name == "graph":
            GraphModule.graph.fset(self, value)
            return
        super().__setattr__(name, value)

    @property
    def code(self) -> str:
        """The generated Python source of ``forward``."""
        return self.__dict__["_code"]

    def recompile(self):
        """Regenerate ``forward`` from ``self.graph`` (call after editing the graph).

        Returns:
            The graph's :class:`~ember.fx.graph.PythonCode`.
        """
        pc = self.graph.python_code(root_module="self")
        self.__dict__["_code"] = pc.src
        type(self).forward = _exec_forward(pc.src, pc.globals)
        return pc

    def add_submodule(self, target: str, m: Module) -> bool:
        """Install ``m`` at dotted path ``target``, creating empty parents as needed."""
        *prefix, field = target.split(".")
        mod = self
        for item in prefix:
            sub = getattr(mod, item, None)
            if sub is None:
                sub = Module()
                setattr(mod, item, sub)
            if not isinstance(sub, Module):
                return False
            mod = sub
        setattr(mod, field, m)
        return True

    def delete_submodule(self, target: str) -> bool:
        """Remove the submodule at ``target``; False if there is none."""
        *prefix, field = target.split(".")
        mod = self
        for item in prefix:
            mod = getattr(mod, item, None)
            if not isinstance(mod, Module):
                return False
        if field not in mod._modules:
            return False
        delattr(mod, field)
        return True

    def delete_all_unused_submodules(self) -> None:
        """Remove the submodules no ``call_module``/``get_attr`` Node reaches."""
        used: set[str] = set()
        for n in self.graph.nodes:
            if n.op in ("call_module", "get_attr"):
                parts = n.target.split(".")
                used.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                if n.op == "call_module":
                    sub = self.get_submodule(n.target)
                    used.update(f"{n.target}.{k}" for k, _ in sub.named_modules() if k)
        for name, _ in reversed(list(self.named_modules())):
            if name and name not in used:
                self.delete_submodule(name)

    def print_readable(self, print_output: bool = True) -> str:
        """The module as a class definition with its generated ``forward``."""
        body = "\n".join("    " + ln if ln else ln for ln in self.code.strip("\n").split("\n"))
        out = f"class {type(self).__name__}(ember.nn.Module):\n{body.rstrip()}\n"
        if print_output:
            print(out)
        return out

    def __deepcopy__(self, memo) -> "GraphModule":
        res = type(self).__new__(type(self))
        memo[id(self)] = res
        fake = Module()
        fake.__dict__.update(copy.deepcopy({k: v for k, v in self.__dict__.items()
                                            if k not in ("_graph", "_code")}, memo))
        GraphModule.__init__(res, fake, copy.deepcopy(self.graph), type(self).__name__)
        return res

    def __copy__(self) -> "GraphModule":
        return GraphModule(self, self.graph, type(self).__name__)

    def __str__(self) -> str:
        return super().__str__() + "\n\n\n" + self.code.strip("\n")
