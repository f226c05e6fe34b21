"""``ember.fx._symbolic_trace``: :class:`Tracer`, :func:`symbolic_trace` and :func:`wrap`.

How Ember functions see Proxies: PyTorch routes ``torch.relu(proxy)`` through
``__torch_function__``; Ember has no such hook, so while a trace runs (and only then) a
``_Patcher`` replaces the public callables of ``ember`` and ``ember.nn.functional`` (and
the same objects in the traced function's globals, plus ``math`` functions and names
given to :func:`wrap`) by wrappers that record a ``call_function`` Node when an argument
is a :class:`Proxy` and call the original otherwise. It also patches ``Module.__call__``
(leaf modules become ``call_module``), ``Module.__getattr__`` (parameters become
``get_attr``) and ``Tensor``'s binary operators (``param + proxy`` defers to the Proxy).
Everything is restored when the trace ends, so eager code pays nothing. A function bound
under another name before tracing (``from ember import relu`` in a module other than the
traced function's) is not seen: ``wrap`` it or call it through ``ember.``.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import math
from typing import Any, Callable

from .graph import Graph
from .graph_module import GraphModule
from .proxy import Proxy, TracerBase, TraceError

__all__ = ["Tracer", "symbolic_trace", "wrap", "PH", "recording_functions"]

_WRAPPED: list[tuple[dict, str]] = []      # (globals, name) registered by wrap()
_TENSOR_BINOPS = ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
                  "and", "or", "xor", "lshift", "rshift"]


class _PH:
    """``concrete_args`` value meaning "still a placeholder"."""

    def __repr__(self) -> str:
        return "PH"


PH = _PH()


def wrap(fn_or_name: str | Callable):
    """Keep a global function as one ``call_function`` Node instead of tracing into it.

    Call at module scope: ``ember.fx.wrap("my_fn")`` (or ``wrap(my_fn)``) registers the
    name in the calling module's globals.

    Example:
        >>> def clamp_len(x):            # would fail under tracing: len(Proxy)
        ...     return x[: len(x) // 2]
        >>> ember.fx.wrap("clamp_len")
    """
    name = fn_or_name if isinstance(fn_or_name, str) else getattr(fn_or_name, "__name__")
    if not isinstance(name, str) or (not isinstance(fn_or_name, str)
                                     and not callable(fn_or_name)):
        raise TypeError(f"ember.fx.wrap: expected a function or its name, got {fn_or_name!r}")
    frame = inspect.currentframe().f_back
    if frame.f_code.co_name != "<module>":
        raise NotImplementedError("wrap must be called at the top level of a module")
    _WRAPPED.append((frame.f_globals, name))
    return fn_or_name


def _has_proxy(a) -> bool:
    if isinstance(a, Proxy):
        return True
    if isinstance(a, (tuple, list)):
        return any(_has_proxy(e) for e in a)
    if isinstance(a, dict):
        return any(_has_proxy(e) for e in a.values())
    return False


def _find_proxy(args, kwargs) -> Proxy | None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, Proxy):
            return a
        if isinstance(a, (tuple, list, dict)) and _has_proxy(a):
            vals = a.values() if isinstance(a, dict) else a
            return _find_proxy(tuple(vals), {})
    return None


def _recording(orig: Callable) -> Callable:
    @functools.wraps(orig)
    def wrapped(*args, **kwargs):
        p = _find_proxy(args, kwargs)
        if p is not None:
            return p.tracer.create_proxy("call_function", orig, args, kwargs)
        return orig(*args, **kwargs)
    wrapped.__fx_original__ = orig
    return wrapped


_CACHE: dict = {}     # (kind, id of the original) -> (original, wrapper): built once


def _cached(kind: str, orig: Callable, make: Callable[[], Callable]) -> Callable:
    hit = _CACHE.get((kind, id(orig)))
    if hit is not None and hit[0] is orig:
        return hit[1]
    w = make()
    _CACHE[(kind, id(orig))] = (orig, w)
    return w


def _defer_to_proxy(orig: Callable) -> Callable:
    def op(self, other):
        if isinstance(other, Proxy):
            return NotImplemented
        return orig(self, other)
    return op


class _Patcher:
    """Sets attributes for the duration of a ``with`` block and restores them."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any, bool]] = []

    def setattr(self, obj, name: str, value) -> None:
        had = name in vars(obj) if isinstance(obj, type) or hasattr(obj, "__dict__") else True
        self._undo.append((obj, name, vars(obj).get(name), had))
        setattr(obj, name, value)

    def setitem(self, d: dict, name: str, value) -> None:
        self._undo.append((d, name, d.get(name), name in d))
        d[name] = value

    def __enter__(self) -> "_Patcher":
        return self

    def __exit__(self, *exc) -> None:
        for obj, name, old, had in reversed(self._undo):
            if isinstance(obj, dict):
                if had:
                    obj[name] = old
                else:
                    obj.pop(name, None)
            elif had:
                setattr(obj, name, old)
            else:
                delattr(obj, name)
        self._undo.clear()


def _function_namespaces():
    import ember
    import ember.nn.functional as F
    return [ember, F]


def patch_functions(patcher: _Patcher, extra_globals: list[dict] = (),
                    autowrap_modules=(math,)) -> dict[int, Callable]:
    """Make ``ember``/``ember.nn.functional`` callables (and those of the given globals
    dicts that are the same objects, or functions of ``autowrap_modules``) record on
    Proxies.

    Returns:
        The wrappers installed, by ``id`` of the original function.
    """
    wrappers: dict[int, Callable] = {}
    for ns in _function_namespaces():
        for name, obj in list(vars(ns).items()):
            if name.startswith("_") or isinstance(obj, type) or not callable(obj) \
                    or inspect.ismodule(obj) or name == "compile":
                continue
            w = wrappers.get(id(obj)) or _cached("fn", obj, lambda o=obj: _recording(o))
            wrappers[id(obj)] = w
            patcher.setattr(ns, name, w)
    for mod in autowrap_modules:             # math.sqrt(proxy) and sqrt(proxy), as PyTorch
        for name, obj in list(vars(mod).items()):
            if callable(obj) and not name.startswith("_") and not isinstance(obj, type):
                w = wrappers.setdefault(id(obj), _cached("fn", obj, lambda o=obj: _recording(o)))
                patcher.setattr(mod, name, w)
    for g in extra_globals:
        for name, obj in list(g.items()):
            if id(obj) in wrappers and not name.startswith("__"):
                patcher.setitem(g, name, wrappers[id(obj)])
    for g, name in _WRAPPED:
        fn = g.get(name, getattr(builtins, name, None))
        if fn is not None and not hasattr(fn, "__fx_original__"):
            patcher.setitem(g, name, _recording(fn))
    return wrappers


def _recording_method(name: str, orig: Callable) -> Callable:
    @functools.wraps(orig)
    def method(self, *args, **kwargs):
        p = _find_proxy(args, kwargs)
        if p is not None:
            return p.tracer.create_proxy("call_method", name, (self,) + args, kwargs)
        return orig(self, *args, **kwargs)
    return method


def patch_tensor_operators(patcher: _Patcher) -> None:
    """``tensor + proxy``: Tensor's binary operators return NotImplemented on a Proxy (so
    the Proxy's reflected operator records); ``tensor.add(proxy)`` records a
    ``call_method`` on the tensor (its ``get_attr``), as PyTorch does."""
    from ..tensor import Tensor
    for name, attr in list(vars(Tensor).items()):
        if not name.startswith("_") and inspect.isfunction(attr):
            patcher.setattr(Tensor, name, _cached(
                name, attr, lambda n=name, a=attr: _recording_method(n, a)))
    for op in _TENSOR_BINOPS + ["eq", "ne", "lt", "le", "gt", "ge"]:
        for dunder in (f"__{op}__", f"__r{op}__"):
            orig = getattr(Tensor, dunder, None)
            if orig is not None:
                patcher.setattr(Tensor, dunder, _cached(
                    "defer", orig, lambda o=orig: _defer_to_proxy(o)))


@contextlib.contextmanager
def recording_functions():
    """Let ``ember`` functions record on Proxies outside a trace (Ember-specific: PyTorch
    needs nothing here thanks to ``__torch_function__``). For graphs built by hand from
    Proxies (PyTorch's "Proxy/Retracing" pattern); tracing and ``Transformer`` do this
    themselves.

    Example:
        >>> g = ember.fx.Graph()
        >>> x = ember.fx.Proxy(g.placeholder("x"))
        >>> with ember.fx.recording_functions():
        ...     y = ember.relu(x) + 1
        >>> g.output(y.node)
    """
    with _Patcher() as patcher:
        patch_functions(patcher)
        patch_tensor_operators(patcher)
        yield


class Tracer(TracerBase):
    """Symbolic tracer (PyTorch's ``torch.fx.Tracer``): runs ``forward`` on Proxies and
    records module calls, functions and methods. Subclass and override
    :meth:`is_leaf_module` to choose which modules stay one ``call_module`` Node.

    Example:
        >>> class Deep(ember.fx.Tracer):
        ...     def is_leaf_module(self, m, qualname):
        ...         return False if isinstance(m, MyBlock) else super().is_leaf_module(m, qualname)
        >>> graph = Deep().trace(model)
    """

    def __init__(self, autowrap_modules=(math,), autowrap_functions=(),
                 param_shapes_constant: bool = False) -> None:
        self.param_shapes_constant = param_shapes_constant      # accepted; no effect yet
        self.autowrap_modules = tuple(autowrap_modules)
        self.autowrap_functions = tuple(autowrap_functions)
        self.submodule_paths: dict[int, str] | None = None
        self.root = None
        self._tensor_constants = 0

    # ------------------------------------------------------------- hooks
    def is_leaf_module(self, m, module_qualified_name: str) -> bool:
        """``ember.nn`` library modules (except ``Sequential``) are leaves."""
        from ..nn import Sequential
        mod = type(m).__module__
        return mod.startswith("ember.nn") and not isinstance(m, Sequential)

    def path_of_module(self, mod) -> str:
        """The qualified name of ``mod`` inside the traced root."""
        path = (self.submodule_paths or {}).get(id(mod))
        if path is None:
            raise NameError("module is not installed as a submodule")
        return path

    def call_module(self, m, forward: Callable, args: tuple, kwargs: dict):
        """Record a leaf module as ``call_module``; trace through the others."""
        qualname = self.path_of_module(m)
        if not self.is_leaf_module(m, qualname):
            return forward(*args, **kwargs)
        return self.create_proxy("call_module", qualname, args, kwargs)

    def getattr(self, attr: str, attr_val, parameter_proxy_cache: dict):
        """A parameter read in ``forward`` becomes a ``get_attr`` Proxy."""
        from ..nn.parameter import Parameter
        if isinstance(attr_val, Parameter):
            for n, p in self.root.named_parameters():
                if p is attr_val:
                    if n not in parameter_proxy_cache:
                        parameter_proxy_cache[n] = self.create_proxy("get_attr", n, (), {})
                    return parameter_proxy_cache[n]
        return attr_val

    def create_arg(self, a):
        """Tensors of the root become ``get_attr``; other tensors become constants
        stored on the root as ``_tensor_constant<i>``."""
        from ..tensor import Tensor
        if isinstance(a, Tensor):
            for n, t in [*self.root.named_parameters(), *self.root.named_buffers()]:
                if t is a:
                    return self.create_node("get_attr", n, (), {})
            name = f"_tensor_constant{self._tensor_constants}"
            self._tensor_constants += 1
            self.root.__dict__[name] = a
            return self.create_node("get_attr", name, (), {})
        if isinstance(a, (tuple, list)) and not isinstance(a, Proxy):
            t = [self.create_arg(e) for e in a]
            return type(a)(t) if not hasattr(a, "_fields") else type(a)(*t)
        if isinstance(a, dict):
            return {k: self.create_arg(v) for k, v in a.items()}
        return super().create_arg(a)

    # ------------------------------------------------------------- tracing
    def trace(self, root, concrete_args: dict | None = None) -> Graph:
        """Trace ``root`` (a Module or a function) into a :class:`Graph`."""
        from ..nn import Module
        is_module = isinstance(root, Module)
        if is_module:
            self.root = root
            fn = type(root).forward
        else:
            self.root, fn = Module(), root
        self.graph = Graph(tracer_cls=type(self))
        self.submodule_paths = {id(m): n for n, m in self.root.named_modules()}
        self._tensor_constants = 0
        args = self._create_placeholders(fn, is_module, concrete_args or {})
        with _Patcher() as patcher:
            self._patch(patcher, fn)
            result = fn(*args)
        self.create_node("output", "output", (self.create_arg(result),), {})
        return self.graph

    def _create_placeholders(self, fn, is_module: bool, concrete: dict) -> list:
        params = list(inspect.signature(fn).parameters.values())
        args = [self.root] if is_module else []
        if is_module:
            params = params[1:]
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY):
                raise TraceError(f"symbolic_trace: *args, **kwargs and keyword-only "
                                 f"parameters ({p.name!r} of {fn.__qualname__}) are not "
                                 f"supported; make the inputs positional parameters")
            if p.name in concrete and concrete[p.name] is not PH:
                self.graph.placeholder(p.name, default_value=concrete[p.name])
                args.append(concrete[p.name])
                continue
            default = p.default if p.default is not p.empty else inspect.Signature.empty
            args.append(self.proxy(self.graph.placeholder(p.name, default_value=default)))
        return args

    def _patch(self, patcher: _Patcher, fn) -> None:
        from ..nn.module import Module
        orig_call, orig_getattr = Module.__call__, Module.__getattr__
        cache: dict = {}
        tracer = self

        def module_call(mod, *args, **kwargs):
            def forward(*a, **k):
                return orig_call(mod, *a, **k)
            return tracer.call_module(mod, forward, args, kwargs)

        def module_getattr(mod, name):
            return tracer.getattr(name, orig_getattr(mod, name), cache)
        patcher.setattr(Module, "__call__", module_call)
        patcher.setattr(Module, "__getattr__", module_getattr)
        globs = [getattr(fn, "__globals__", {})]
        patch_functions(patcher, globs, self.autowrap_modules)
        for f in self.autowrap_functions:
            g = getattr(f, "__globals__", {})
            if g.get(f.__name__) is f:
                patcher.setitem(g, f.__name__, _recording(f))
        patch_tensor_operators(patcher)


def symbolic_trace(root, concrete_args: dict | None = None) -> GraphModule:
    """Trace a Module or function into a :class:`GraphModule` (PyTorch's
    ``torch.fx.symbolic_trace``).

    Args:
        root: an ``ember.nn.Module`` or a function of tensors.
        concrete_args: inputs to specialise on (``{"flag": True}``): their values are
            used during tracing and kept as the placeholder's default.

    Example:
        >>> gm = ember.fx.symbolic_trace(model)
        >>> print(gm.code)
    """
    tracer = Tracer()
    graph = tracer.trace(root, concrete_args)
    name = type(root).__name__ if not inspect.isfunction(root) else root.__name__
    return GraphModule(tracer.root, graph, name)


