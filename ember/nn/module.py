"""``Module``: the base class of every layer and model (PyTorch's ``nn.Module`` surface).

Assigning a :class:`Parameter`, a :class:`Module` or a registered buffer as an attribute
registers it; ``parameters()``, ``state_dict()``, ``to()``, ``train()``... walk the tree.
Hooks (forward pre/post, full backward) live in :mod:`ember.nn._hooks`; state-dict
saving/loading (:mod:`ember.nn._state_dict`) follows PyTorch's per-module
``_save_to_state_dict`` / ``_load_from_state_dict`` protocol so layers can override it.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterator

from ..tensor import Tensor
from . import _hooks
from ._convert import _ConversionMixin
from ._hooks import (register_module_forward_hook, register_module_forward_pre_hook,  # noqa
                     RemovableHandle)
from ._state_dict import _IncompatibleKeys, _StateDictMixin  # noqa: F401
from .parameter import Buffer, Parameter

__all__ = ["Module", "register_module_forward_pre_hook", "register_module_forward_hook"]


_Handle = RemovableHandle   # NOTE: the first version's name, kept for compatibility


# NOTE: the global hook dicts are mutated in place, never rebound, so aliasing them is safe
_GLOBAL_PRE, _GLOBAL_POST = _hooks._global_forward_pre_hooks, _hooks._global_forward_hooks
_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks",
               "_backward_hooks")


class Module(_StateDictMixin, _ConversionMixin):
    """Base class for all neural-network modules.

    Example:
        >>> class Net(ember.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = ember.nn.Linear(4, 2)
        ...     def forward(self, x):
        ...         return self.fc(x).relu()
    """

    training: bool
    call_super_init: bool = False

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments "
                            f"{args or ''}{kwargs or ''}")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent_buffers"] = set()
        d["_modules"] = OrderedDict()
        for k in _HOOK_DICTS:
            d[k] = OrderedDict()
        d["_forward_pre_hooks_with_kwargs"] = set()
        d["_forward_hooks_with_kwargs"] = set()

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        d = self.__dict__
        for k in _HOOK_DICTS:
            d.setdefault(k, OrderedDict())
        d.setdefault("_forward_pre_hooks_with_kwargs", set())
        d.setdefault("_forward_hooks_with_kwargs", set())
        d.setdefault("_non_persistent_buffers", set())

    # ------------------------------------------------------------ registration
    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        params, mods, bufs = d.get("_parameters"), d.get("_modules"), d.get("_buffers")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._discard(name)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter "
                                f"'{name}' (ember.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            if mods is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._discard(name)
            mods[name] = value
        elif mods is not None and name in mods:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (ember.nn.Module or None expected)")
            mods[name] = None
        elif isinstance(value, Buffer):
            if bufs is None:
                raise AttributeError("cannot assign buffer before Module.__init__() call")
            self._discard(name)
            self.register_buffer(name, value, persistent=value.persistent)
        elif bufs is not None and name in bufs:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                f"(ember.Tensor or None expected)")
            bufs[name] = value
        else:
            object.__setattr__(self, name, value)

    def _discard(self, name: str) -> None:
        d = self.__dict__
        d.pop(name, None)
        for k in ("_parameters", "_modules", "_buffers"):
            d[k].pop(name, None)
        d["_non_persistent_buffers"].discard(name)

    def __getattr__(self, name: str):
        d = self.__dict__
        for k in ("_parameters", "_buffers", "_modules"):
            store = d.get(k)
            if store is not None and name in store:
                return store[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        d = self.__dict__
        for k in ("_parameters", "_buffers", "_modules"):
            if name in d.get(k, ()):
                del d[k][name]
                d["_non_persistent_buffers"].discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or None) under ``name``.

        Example:
            >>> m = ember.nn.Module()
            >>> m.register_parameter("w", ember.nn.Parameter(ember.zeros(2)))
        """
        _check_name(self, name, "parameter", "_parameters")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (ember.nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                             f"parameters must be created explicitly. To express '{name}' as "
                             f"a function of another Tensor, compute the value in the "
                             f"forward() method.")
        self.__dict__["_parameters"][name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True):
        """Add a buffer: state saved in ``state_dict`` (if persistent) but not trained.

        Example:
            >>> m = ember.nn.Module()
            >>> m.register_buffer("running_mean", ember.zeros(3))
        """
        _check_name(self, name, "buffer", "_buffers")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                            f"'{name}' (ember.Tensor or None required)")
        if isinstance(tensor, Buffer):
            tensor = tensor.detach()   # NOTE: the marker class is not kept (as torch.nn.Buffer)
        self.__dict__["_buffers"][name] = tensor
        if persistent:
            self.__dict__["_non_persistent_buffers"].discard(name)
        else:
            self.__dict__["_non_persistent_buffers"].add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        """Add a child module under ``name`` (same as attribute assignment)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        _check_name(self, name, "module", "_modules")
        self.__dict__["_modules"][name] = module

    def register_module(self, name: str, module: "Module | None") -> None:
        """Alias of :meth:`add_module`."""
        self.add_module(name, module)

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path ``target`` (``""`` is ``self``)."""
        mod = self
        for part in target.split(".") if target else []:
            if part not in mod.__dict__["_modules"]:
                raise AttributeError(f"{mod._get_name()} has no attribute `{part}`")
            mod = mod._modules[part]
            if not isinstance(mod, Module):
                raise AttributeError(f"`{part}` is not an nn.Module")
        return mod

    def set_submodule(self, target: str, module: "Module") -> None:
        """Replace the submodule at dotted path ``target`` (its parent must exist)."""
        if not target:
            raise ValueError("Cannot set the submodule without a target name!")
        parent_path, _, name = target.rpartition(".")
        parent = self.get_submodule(parent_path)
        if not isinstance(module, Module):
            raise ValueError(f"`module` is not an nn.Module, found {type(module)}")
        setattr(parent, name, module)

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path ``target`` (e.g. ``"0.weight"``)."""
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if not hasattr(mod, name):
            raise AttributeError(f"{mod._get_name()} has no attribute `{name}`")
        p = getattr(mod, name)
        if not isinstance(p, Parameter):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return p

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path ``target``."""
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if not hasattr(mod, name):
            raise AttributeError(f"{mod._get_name()} has no attribute `{name}`")
        if name not in mod._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return mod._buffers[name]

    # ------------------------------------------------------------ traversal
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        """Yield ``(dotted_name, module)`` for self and all descendants (pre-order)."""
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, prefix + ("." if prefix else "") + name,
                                           remove_duplicate)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, kind: str, prefix: str, recurse: bool, remove_duplicate=True):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for mp, m in mods:
            for k, v in m.__dict__[kind].items():
                if v is None or id(v) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(v))
                yield mp + ("." if mp else "") + k, v

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True):
        """Yield ``(dotted_name, parameter)``; shared parameters once (by default)."""
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Yield the parameters (what an optimizer takes).

        Example:
            >>> opt = ember.optim.SGD(model.parameters(), lr=0.1)   # doctest: +SKIP
        """
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True):
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ------------------------------------------------------------ modes and grads
    def train(self, mode: bool = True) -> "Module":
        """Set training mode on this module and (through their ``train``) its children."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset gradients: to None (default) or to zeros in place."""
        from ..autograd.engine import zero_grads
        zero_grads(self.parameters(), set_to_none)

    def apply(self, fn) -> "Module":
        """Call ``fn(m)`` on every submodule (children first) and self; returns self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------ calling
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"Module [{type(self).__name__}] is missing the required "
                                  f"\"forward\" function")

    def __call__(self, *args, **kwargs):
        d = self.__dict__
        if (d["_forward_pre_hooks"] or d["_forward_hooks"] or d["_backward_hooks"]
                or d["_backward_pre_hooks"] or _GLOBAL_PRE or _GLOBAL_POST
                or "_compiled_call_impl" in d):
            c = d.get("_compiled_call_impl")
            if c is not None:
                return c(*args, **kwargs)
            return _hooks.call_with_hooks(self, args, kwargs)
        return self.forward(*args, **kwargs)

    def _call_impl(self, *args, **kwargs):
        """The call without :meth:`compile`'s compiled version (what that compiles)."""
        d = self.__dict__
        if (d["_forward_pre_hooks"] or d["_forward_hooks"] or d["_backward_hooks"]
                or d["_backward_pre_hooks"] or _GLOBAL_PRE or _GLOBAL_POST):
            return _hooks.call_with_hooks(self, args, kwargs)
        return self.forward(*args, **kwargs)

    def compile(self, *args, **kwargs) -> None:
        """Compile this module's calls in place with :func:`ember.compile` (PyTorch's
        ``Module.compile``): the module stays itself (same ``state_dict()`` keys), its
        ``__call__`` runs the compiled version. Arguments go to :func:`ember.compile`.

        Example:
            >>> model.compile()
            >>> out = model(x)       # traced on the first call, compiled graphs after
        """
        from ..graph.compile import compile as _compile
        self.__dict__["_compiled_call_impl"] = _compile(self._call_impl, *args, **kwargs)

    def register_forward_pre_hook(self, hook, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` (or ``hook(module, args, kwargs)`` with ``with_kwargs``)
        runs before ``forward``; it may return new args (or ``(args, kwargs)``)."""
        d = self.__dict__
        extra = (d["_forward_pre_hooks_with_kwargs"],)
        h = RemovableHandle(d["_forward_pre_hooks"], hook, prepend, extra)
        if with_kwargs:
            d["_forward_pre_hooks_with_kwargs"].add(h.id)
        return h

    def register_forward_hook(self, hook, *, prepend: bool = False,
                              with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``) runs
        after ``forward``; it may return a new output."""
        d = self.__dict__
        h = RemovableHandle(d["_forward_hooks"], hook, prepend,
                            (d["_forward_hooks_with_kwargs"],))
        if with_kwargs:
            d["_forward_hooks_with_kwargs"].add(h.id)
        return h

    def register_full_backward_pre_hook(self, hook, prepend: bool = False):
        """``hook(module, grad_output) -> None | new grad_output`` runs when the gradients
        of the module's outputs are known."""
        return RemovableHandle(self.__dict__["_backward_pre_hooks"], hook, prepend)

    def register_full_backward_hook(self, hook, prepend: bool = False):
        """``hook(module, grad_input, grad_output) -> None | new grad_input`` runs when the
        gradients of the module's tensor inputs are computed."""
        return RemovableHandle(self.__dict__["_backward_hooks"], hook, prepend)

    # ------------------------------------------------------------ printing / summary
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """Override to show a layer's configuration inside its ``repr``."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({k}): " + repr(m).replace("\n", "\n  ")
                       for k, m in self._modules.items()]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __dir__(self):
        keys = (dir(type(self)) + list(self.__dict__) + list(self._parameters)
                + list(self._modules) + list(self._buffers))
        return sorted(k for k in set(keys) if not k[0].isdigit())

    def summary(self, *inputs, **kwargs):
        """Per-layer output shapes, parameter counts, FLOPs and activation bytes for one
        forward pass on ``inputs`` (see :func:`ember.nn.summary.summary`)."""
        from .summary import summary
        return summary(self, *inputs, **kwargs)


def _check_name(mod, name, what, store):
    d = mod.__dict__
    if store not in d:
        raise AttributeError(f"cannot assign {what} before Module.__init__() call")
    if not isinstance(name, str):
        raise TypeError(f"{what} name should be a string. Got {type(name).__name__}")
    if name == "":
        raise KeyError(f"{what} name can't be empty string \"\"")
    if "." in name:
        raise KeyError(f"{what} name can't contain \".\", got: {name}")
    if name not in d[store] and hasattr(mod, name):
        raise KeyError(f"attribute '{name}' already exists")
