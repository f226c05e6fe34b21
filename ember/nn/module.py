"""``Module``: the base class of every layer and model (PyTorch's ``nn.Module`` surface).

Assigning a :class:`Parameter`, a :class:`Module` or a registered buffer as an attribute
registers it; ``parameters()``, ``state_dict()``, ``to()``, ``train()``... walk the tree.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterator

from ..tensor import Tensor
from .parameter import Buffer, Parameter


class _IncompatibleKeys(tuple):
    """``(missing_keys, unexpected_keys)`` returned by ``load_state_dict``."""

    def __new__(cls, missing, unexpected):
        r = tuple.__new__(cls, (missing, unexpected))
        return r

    @property
    def missing_keys(self):
        return self[0]

    @property
    def unexpected_keys(self):
        return self[1]

    def __repr__(self) -> str:
        return f"<All keys matched successfully>" if not self[0] and not self[1] else \
            f"_IncompatibleKeys(missing_keys={self[0]}, unexpected_keys={self[1]})"


class Module:
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

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent_buffers"] = set()
        d["_modules"] = OrderedDict()
        d["_forward_pre_hooks"] = OrderedDict()
        d["_forward_hooks"] = OrderedDict()

    # ------------------------------------------------------------ registration
    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        if "_parameters" not in d and isinstance(value, (Parameter, Module)):
            raise AttributeError("cannot assign parameters or modules before "
                                 "Module.__init__() call")
        params, mods, bufs = d.get("_parameters"), d.get("_modules"), d.get("_buffers")
        if isinstance(value, Parameter):
            self._discard(name)
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            self._discard(name)
            mods[name] = value
        elif isinstance(value, Buffer):
            self._discard(name)
            self.register_buffer(name, value, persistent=value.__dict__.get("persistent", True))
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter "
                                f"'{name}' (ember.nn.Parameter or None expected)")
            params[name] = None
        elif mods is not None and name in mods:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (ember.nn.Module or None expected)")
            mods[name] = None
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
            if name in d[k]:
                del d[k][name]
                d["_non_persistent_buffers"].discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or None) under ``name``."""
        _check_name(self, name, "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (ember.nn.Parameter or None required)")
        self.__dict__["_parameters"][name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True):
        """Add a buffer: state saved in ``state_dict`` (if persistent) but not trained."""
        _check_name(self, name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                            f"'{name}' (ember.Tensor or None required)")
        self.__dict__.pop(name, None)
        self.__dict__["_buffers"][name] = tensor
        if persistent:
            self.__dict__["_non_persistent_buffers"].discard(name)
        else:
            self.__dict__["_non_persistent_buffers"].add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        """Add a child module under ``name``."""
        _check_name(self, name, "module")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self.__dict__["_modules"][name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> "Module":
        mod = self
        for part in target.split(".") if target else []:
            if part not in mod._modules:
                raise AttributeError(f"{type(mod).__name__} has no submodule `{part}`")
            mod = mod._modules[part]
        return mod

    def get_parameter(self, target: str) -> Parameter:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"{type(mod).__name__} has no parameter `{name}`")
        return mod._parameters[name]

    # ------------------------------------------------------------ traversal
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
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
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for k, v in getattr(m, kind).items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield mp + ("." if mp else "") + k, v

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True):
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
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
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            m.__dict__["training"] = mode
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_()
                    p.grad.zero_()

    def apply(self, fn) -> "Module":
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
        for hook in tuple(d["_forward_pre_hooks"].values()):
            r = hook(self, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
        out = self.forward(*args, **kwargs)
        for hook in tuple(d["_forward_hooks"].values()):
            r = hook(self, args, out)
            if r is not None:
                out = r
        return out

    def register_forward_pre_hook(self, hook):
        """``hook(module, args) -> None | new args`` runs before ``forward``."""
        return _Handle(self.__dict__["_forward_pre_hooks"], hook)

    def register_forward_hook(self, hook):
        """``hook(module, args, output) -> None | new output`` runs after ``forward``."""
        return _Handle(self.__dict__["_forward_hooks"], hook)

    # ------------------------------------------------------------ state
    def state_dict(self, *, destination=None, prefix: str = "", keep_vars: bool = False):
        """Parameters and persistent buffers by dotted name (detached unless ``keep_vars``)."""
        out = OrderedDict() if destination is None else destination
        for mp, m in self.named_modules(prefix=prefix.rstrip(".")):
            pre = mp + ("." if mp else "")
            for k, v in m._parameters.items():
                if v is not None:
                    out[pre + k] = v if keep_vars else v.detach()
            for k, v in m._buffers.items():
                if v is not None and k not in m._non_persistent_buffers:
                    out[pre + k] = v if keep_vars else v.detach()
        return out

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy tensors from ``state_dict`` into this module's parameters and buffers."""
        from ..autograd.grad_mode import no_grad
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        for k, dst in own.items():
            if k not in state_dict:
                continue
            src = state_dict[k]
            if not isinstance(src, Tensor):
                errors.append(f"for {k}: expected a Tensor, got {type(src).__name__}")
            elif tuple(src.shape) != tuple(dst.shape):
                errors.append(f"size mismatch for {k}: copying a param with shape "
                              f"{tuple(src.shape)} from checkpoint, the shape in current "
                              f"model is {tuple(dst.shape)}.")
        if strict:
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in missing) + ".")
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in unexpected) + ".")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))
        with no_grad():
            for k, dst in own.items():
                if k in state_dict:
                    dst.copy_(state_dict[k])
        return _IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------ conversion
    def _apply_tensors(self, fn) -> "Module":
        from ..autograd.grad_mode import no_grad
        with no_grad():
            for m in self.modules():
                for k, p in m._parameters.items():
                    if p is not None:
                        new = fn(p)
                        if new is not p:
                            np_ = Parameter(new, requires_grad=p.requires_grad)
                            m._parameters[k] = np_
                for k, b in m._buffers.items():
                    if b is not None:
                        m._buffers[k] = fn(b)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """Move/cast parameters and buffers (floating point ones only for dtypes)."""
        def conv(t):
            r = t.to(*args, **kwargs)
            if not t.dtype.is_floating_point and r.dtype != t.dtype:
                return t.to(r.device)   # like PyTorch: dtype casts skip integer tensors
            return r
        return self._apply_tensors(conv)

    def float(self) -> "Module":
        from .. import dtypes
        return self.to(dtypes.float32)

    def double(self) -> "Module":
        from .. import dtypes
        return self.to(dtypes.float64)

    def half(self) -> "Module":
        from .. import dtypes
        return self.to(dtypes.float16)

    def cpu(self) -> "Module":
        return self.to("cpu")

    # ------------------------------------------------------------ printing
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, m in self._modules.items():
            mr = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {mr}")
        main = type(self).__name__ + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                return main + lines[0] + ")"
            return main + "\n  " + "\n  ".join(lines) + "\n)"
        return main + ")"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._modules) |
                      set(self._buffers))


def _check_name(mod, name, what):
    if not isinstance(name, str):
        raise TypeError(f"{what} name should be a string, got {type(name).__name__}")
    if "." in name or name == "":
        raise KeyError(f"{what} name can't contain \".\" or be empty, got {name!r}")
    if "_parameters" not in mod.__dict__:
        raise AttributeError(f"cannot assign {what} before Module.__init__() call")


class _Handle:
    _next = 0

    def __init__(self, store, hook):
        _Handle._next += 1
        self.id = _Handle._next
        self._store = store
        store[self.id] = hook

    def remove(self) -> None:
        self._store.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
