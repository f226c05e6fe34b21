"""What a compiled function can reach: the modules, parameters and optimizers in its
``self``, closure, globals and arguments, with a readable label for each (``model.fc.weight``).

:func:`discover` feeds ``ember.compile``'s signature (:mod:`ember.graph.signature`), the
tracer's labels and :mod:`ember.graph.sandbox`.
"""
from __future__ import annotations

from ..func._tree import tree_flatten
from ..tensor import Tensor

__all__ = ["Roots", "discover"]


class Roots:
    """What :func:`discover` found: ``(label, object)`` lists of modules, parameters (and
    other leaves needing grad) and optimizers, and ``labels``: ``id(tensor) -> label``."""

    def __init__(self):
        self.modules, self.params, self.optimizers = [], [], []
        self.labels: dict = {}


def _candidates(fn, args, kwargs) -> list:
    """``(label, object)`` of where ``fn``'s state may live: its ``self`` (or the Module
    itself), its closure cells, the globals its code names, its arguments."""
    from ..nn.module import Module
    found = []
    f = fn
    if isinstance(fn, Module):
        found.append(("model", fn))
        f = None
    elif hasattr(fn, "__self__") and hasattr(fn, "__func__"):
        found.append(("self", fn.__self__))
        f = fn.__func__
    if f is not None and hasattr(f, "__code__"):
        code = f.__code__
        for name, cell in zip(code.co_freevars, f.__closure__ or ()):
            try:
                found.append((name, cell.cell_contents))
            except ValueError:
                pass
        names_ = code.co_varnames[code.co_argcount - len(f.__defaults__ or ()):code.co_argcount]
        found += list(zip(names_, f.__defaults__ or ()))
        found += list((f.__kwdefaults__ or {}).items())
        g = getattr(f, "__globals__", {})
        names = set(code.co_names)
        for c in code.co_consts:
            if hasattr(c, "co_names"):
                names.update(c.co_names)
        for name in sorted(names):
            if name in g:
                found.append((name, g[name]))
    for i, a in enumerate(args):
        found.append((f"arg{i}", a))
    for k, a in kwargs.items():
        found.append((k, a))
    return found


def discover(fn, args, kwargs) -> Roots:
    """The modules and optimizers ``fn`` can reach: its self, closure, globals, arguments."""
    from ..nn.module import Module
    from ..optim.optimizer import Optimizer
    found = _candidates(fn, args, kwargs)
    r = Roots()
    seen = {id(x) for x in tree_flatten((args, kwargs))[0] if isinstance(x, Tensor)}

    def visit(label, obj, depth):
        if id(obj) in seen or obj is None:
            return
        if isinstance(obj, Tensor):
            # NOTE: a leaf needing grad that fn reaches other than as an argument (a global,
            # a closure cell): backward() accumulates into its .grad as into a parameter's
            if obj._requires_grad and obj._grad_fn is None:
                seen.add(id(obj))
                r.params.append((label, obj))
                r.labels.setdefault(id(obj), label)
        elif isinstance(obj, Module):
            seen.add(id(obj))
            for name, m in obj.named_modules():
                r.modules.append((f"{label}.{name}" if name else label, m))
            for name, p in obj.named_parameters():
                r.params.append((f"{label}.{name}", p))
                r.labels.setdefault(id(p), f"{label}.{name}")
            for name, b in obj.named_buffers():
                r.labels.setdefault(id(b), f"{label}.{name}")
        elif isinstance(obj, Optimizer):
            seen.add(id(obj))
            r.optimizers.append((label, obj))
            known = {id(p) for _, p in r.params}
            for gi, g in enumerate(obj.param_groups):
                for pi, p in enumerate(g["params"]):
                    if id(p) not in known:
                        r.params.append((f"{label}.param_groups[{gi}][{pi}]", p))
                        r.labels.setdefault(id(p), f"{label}.param_groups[{gi}][{pi}]")
                    for k, v in obj.state.get(p, {}).items():
                        if isinstance(v, Tensor):
                            r.labels.setdefault(id(v), f"{label}.state[{r.labels[id(p)]}].{k}")
        elif hasattr(obj, "optimizer") and depth < 2 and not isinstance(obj, type):
            visit(label + ".optimizer", getattr(obj, "optimizer"), depth + 1)
        elif isinstance(obj, (list, tuple)) and depth < 2:
            seen.add(id(obj))
            for i, x in enumerate(obj):
                visit(f"{label}[{i}]", x, depth + 1)
        elif isinstance(obj, dict) and depth < 2 and len(obj) < 64:
            seen.add(id(obj))
            for k, x in obj.items():
                visit(f"{label}[{k!r}]", x, depth + 1)
        elif depth < 1 and hasattr(obj, "__dict__") and not isinstance(obj, type) and \
                not callable(obj) and type(obj).__module__ != "builtins":
            seen.add(id(obj))
            for k, x in list(vars(obj).items())[:64]:
                visit(f"{label}.{k}", x, depth + 1)

    for label, obj in found:
        visit(label, obj, 0)
    # de-duplicate parameters shared between modules / optimizers
    uniq, ids = [], set()
    for label, p in r.params:
        if id(p) not in ids:
            ids.add(id(p))
            uniq.append((label, p))
    r.params = uniq
    return r
