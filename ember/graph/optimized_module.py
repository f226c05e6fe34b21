"""``ember.compile(module)``: an ``nn.Module`` whose calls run through compiled graphs.

What PyTorch's ``torch.compile(module)`` returns (``OptimizedModule``), so training
scripts written for it run unchanged: the original module is the registered child
``_orig_mod`` (``parameters()``, ``state_dict()`` and ``named_modules()`` name everything
``_orig_mod.<name>``, as in PyTorch), ``forward`` is the
:class:`~ember.graph.compile.CompiledFunction` of the original's ``__call__`` (its hooks
included), ``training`` is the original's flag (``train()``/``eval()`` reach it; every
submodule's flag is part of the compiled signature, so dropout and batch norm retrace
when it changes), and any other attribute reads and writes fall through to the original.
The compiled function's own reports (``explain()``, ``graphs()``, ``memory_plan()``...)
are reachable on the wrapper where the original has no attribute of that name.
"""
from __future__ import annotations

from ..nn.module import Module

__all__ = ["OptimizedModule"]


class OptimizedModule(Module):
    """A module that forwards its calls to a compiled version of ``_orig_mod``.

    Example:
        >>> model = ember.nn.Sequential(ember.nn.Linear(4, 8), ember.nn.Dropout(0.1))
        >>> cm = ember.compile(model)
        >>> cm.eval() is cm and not model.training
        True
        >>> next(iter(cm.state_dict()))
        '_orig_mod.0.weight'
    """

    _opt_mod_attributes = frozenset({"_orig_mod", "forward", "_super_module_initialized"})

    def __init__(self, mod: Module, compiled):
        if not isinstance(mod, Module):
            raise TypeError(f"OptimizedModule: expected an ember.nn.Module to wrap, got "
                            f"{type(mod).__name__}")
        # NOTE: first, so that attribute reads during Module.__init__ find the original
        object.__setattr__(self, "_orig_mod", mod)
        object.__setattr__(self, "_super_module_initialized", False)
        super().__init__()
        self.__dict__.pop("training", None)    # the property below is the one flag
        self._orig_mod = mod                   # registers it (and drops the plain attribute)
        self.forward = compiled
        self._super_module_initialized = True

    @property
    def training(self) -> bool:
        return self._orig_mod.training

    @training.setter
    def training(self, value: bool) -> None:
        if self.__dict__.get("_super_module_initialized"):
            self._orig_mod.training = value

    def __getattr__(self, name: str):
        d = self.__dict__
        mods = d.get("_modules")
        if mods is None or "_orig_mod" not in mods:
            raise AttributeError(f"'OptimizedModule' object has no attribute '{name}'")
        if name == "_orig_mod":
            return mods["_orig_mod"]
        try:
            return getattr(mods["_orig_mod"], name)
        except AttributeError:
            compiled = d.get("forward")
            if not name.startswith("__") and compiled is not None and hasattr(compiled, name):
                return getattr(compiled, name)
            raise

    def __setattr__(self, name: str, value) -> None:
        if hasattr(type(self), name) or name in OptimizedModule._opt_mod_attributes:
            return super().__setattr__(name, value)
        return setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if hasattr(type(self), name) or name in OptimizedModule._opt_mod_attributes:
            return super().__delattr__(name)
        return delattr(self._orig_mod, name)

    def __len__(self) -> int:
        return len(self._orig_mod)

    def __dir__(self):
        return sorted(set(dir(self._orig_mod)) | set(super().__dir__()))

    def __reduce__(self):
        c = self.__dict__["forward"]
        kw = {"fullgraph": c.fullgraph, "dynamic": c.dynamic, "passes": c.passes,
              "parallel": c.parallel, "memory_budget": c.memory_budget, "name": c.name}
        return (_rebuild, (self._orig_mod, kw))


def _rebuild(mod: Module, kw: dict) -> OptimizedModule:
    """Unpickle / deep-copy: compile the (copied) original afresh."""
    from .compile import compile
    return compile(mod, **kw)
