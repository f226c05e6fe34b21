"""``ember.nn.utils.parametrize``: tensors of a module computed from others on access.

Same layout as PyTorch's: after ``register_parametrization(m, "weight", P)``, ``m.weight``
is a property computing ``P(m.parametrizations.weight.original)``, the module's class is a
generated subclass (``Parametrized<Name>``), and ``state_dict`` keys read
``parametrizations.weight.original`` (``original0``, ``original1``... when the
parametrization's ``right_inverse`` returns a tuple).

Example:
    >>> class Sym(ember.nn.Module):
    ...     def forward(self, x):
    ...         return x.triu() + x.triu(1).T
    >>> m = ember.nn.Linear(3, 3)
    >>> register_parametrization(m, "weight", Sym())
"""
from __future__ import annotations

import contextlib
import copy

from ...autograd.grad_mode import no_grad
from ...tensor import Tensor
from ..module import Module
from ..modules.container import ModuleDict, ModuleList
from ..parameter import Parameter

__all__ = ["register_parametrization", "remove_parametrizations", "is_parametrized",
           "cached", "type_before_parametrizations", "ParametrizationList"]

_cache_enabled = 0
_cache: dict = {}


@contextlib.contextmanager
def cached():
    """Context manager: each parametrized tensor is computed once inside it.

    Example:
        >>> with cached():
        ...     out = model(x)   # ``model.weight`` evaluated once however often read
    """
    global _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache.clear()


def _register(owner: Module, name: str, t: Tensor, like: Tensor) -> None:
    # NOTE: a parametrized Parameter stays a Parameter, a buffer a buffer (as torch)
    if isinstance(like, Parameter):
        owner.register_parameter(name, t if isinstance(t, Parameter)
                                 else Parameter(t.detach(), like.requires_grad))
    else:
        owner.register_buffer(name, t.detach())


def _check_same(what: str, shape: tuple, dtype, t: Tensor) -> None:
    if tuple(t.shape) != shape or t.dtype != dtype:
        raise ValueError(f"register_parametrization: {what} from shape {shape} dtype {dtype} "
                         f"to shape {tuple(t.shape)} dtype {t.dtype}; pass unsafe=True to "
                         f"allow it")


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, plus its unparametrized ``original``.

    Args:
        modules: the parametrizations, applied first to last.
        original: the tensor (or Parameter) being parametrized.
        unsafe: skip the shape/dtype consistency checks.
    """

    def __init__(self, modules, original: Tensor, unsafe: bool = False):
        if not modules:
            raise ValueError("ParametrizationList requires one or more modules")
        super().__init__(modules)
        self.unsafe = unsafe
        shape, dtype = tuple(original.shape), original.dtype
        with no_grad():
            new = original
            for m in reversed(self):
                inv = getattr(m, "right_inverse", None)
                if inv is not None:
                    new = inv(new)
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        self._store_originals(new, original, unsafe)
        if not unsafe:
            z = self()
            if not isinstance(z, Tensor):
                raise ValueError(f"register_parametrization: the parametrization must return "
                                 f"a Tensor, got {type(z).__name__}")
            _check_same("the parametrization changes the tensor", shape, dtype, z)

    def _store_originals(self, new, original: Tensor, unsafe: bool) -> None:
        """Register ``right_inverse``'s result as ``original`` (or ``original0``, ...)."""
        if not self.is_tensor:
            for i, t in enumerate(new):
                if not isinstance(t, Tensor):
                    raise TypeError(f"register_parametrization: right_inverse must return "
                                    f"Tensors, got {type(t).__name__} at position {i}")
                _register(self, f"original{i}", t, original)
            return
        shape = tuple(original.shape)
        if not unsafe:
            _check_same("right_inverse changed the tensor", shape, original.dtype, new)
        if new is not original and tuple(new.shape) == shape:
            with no_grad():
                original.copy_(new)
            new = original
        _register(self, "original", new, original)

    def right_inverse(self, value: Tensor) -> None:
        """Set ``original`` so that the parametrized tensor equals ``value``."""
        with no_grad():
            for m in reversed(self):
                inv = getattr(m, "right_inverse", None)
                if inv is None:
                    raise RuntimeError(f"parametrization {type(m).__name__} does not "
                                       f"implement right_inverse; cannot assign to it")
                value = inv(value)
            if self.is_tensor:
                if not isinstance(value, Tensor):
                    raise ValueError(f"right_inverse must return a Tensor, got "
                                     f"{type(value).__name__}")
                self.original.copy_(value)
            else:
                if len(value) != self.ntensors:
                    raise ValueError(f"right_inverse returned {len(value)} tensors; expected "
                                     f"{self.ntensors}")
                for i, t in enumerate(value):
                    getattr(self, f"original{i}").copy_(t)

    def forward(self) -> Tensor:
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for m in list(self)[1:]:
            x = m(x)
        return x


def _get(module: Module, name: str) -> Tensor:
    plist = module.parametrizations[name]
    if not _cache_enabled:
        return plist()
    key = (id(module), name)
    if key not in _cache:
        _cache[key] = plist()
    return _cache[key]


def _inject_new_class(module: Module) -> None:
    cls = module.__class__

    def getstate(self):
        raise RuntimeError("Serialization of parametrized modules is only supported through "
                           "state_dict()")

    def deepcopy(self, memo):
        # NOTE: as torch, the copy shares the generated class (and its properties)
        replica = memo.get(id(self))
        if replica is None:
            replica = self.__new__(self.__class__)
            memo[id(self)] = replica
            replica.__dict__ = copy.deepcopy(self.__dict__, memo)
        return replica

    new = type(f"Parametrized{cls.__name__}", (cls,),
               {"__getstate__": getstate, "__deepcopy__": deepcopy})
    module.__class__ = new


def _inject_property(module: Module, name: str) -> None:
    def get(self):
        return _get(self, name)

    def set_(self, value):
        self.parametrizations[name].right_inverse(value)

    setattr(module.__class__, name, property(get, set_))


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """True if ``module`` has a parametrization (on ``tensor_name`` if given)."""
    plists = module.__dict__.get("_modules", {}).get("parametrizations")
    if plists is None or not isinstance(plists, ModuleDict):
        return False
    return len(plists) > 0 if tensor_name is None else tensor_name in plists


def type_before_parametrizations(module: Module) -> type:
    """The module's class before ``register_parametrization`` swapped it."""
    return module.__class__.__bases__[0] if is_parametrized(module) else type(module)


def register_parametrization(module: Module, tensor_name: str, parametrization: Module,
                             *, unsafe: bool = False) -> Module:
    """Make ``module.<tensor_name>`` the output of ``parametrization`` on the original.

    Args:
        module: the module owning the parameter or buffer.
        tensor_name: its name.
        parametrization: a Module whose ``forward`` maps the original to the tensor used;
            an optional ``right_inverse`` maps a value back (used at registration and on
            assignment).
        unsafe: skip the consistency checks of shapes and dtypes.

    Returns:
        ``module``.

    Raises:
        ValueError: ``tensor_name`` is neither a parameter nor a buffer of ``module``, or
            the parametrization changes its shape/dtype (without ``unsafe``).
    """
    if not isinstance(parametrization, Module):
        raise TypeError(f"register_parametrization: parametrization must be an nn.Module, "
                        f"got {type(parametrization).__name__}")
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        plist = module.parametrizations[tensor_name]
        if not unsafe:
            y = getattr(module, tensor_name)
            x = parametrization(y)
            if not isinstance(x, Tensor) or tuple(x.shape) != tuple(y.shape) \
                    or x.dtype != y.dtype:
                name = type(parametrization).__name__
                raise ValueError(f"register_parametrization: appending {name} to "
                                 f"'{tensor_name}' changes its shape or dtype")
        plist.append(parametrization)
        plist.unsafe = plist.unsafe or unsafe
        return module
    params, bufs = module._parameters, module._buffers
    if tensor_name not in params and tensor_name not in bufs:
        raise ValueError(f"register_parametrization: module {type(module).__name__} has no "
                         f"parameter or buffer named '{tensor_name}' (parameters: "
                         f"{list(params)}, buffers: {list(bufs)})")
    original = getattr(module, tensor_name)
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        _inject_new_class(module)
        module.parametrizations = ModuleDict()
    _inject_property(module, tensor_name)
    module.parametrizations[tensor_name] = plist
    return module


def remove_parametrizations(module: Module, tensor_name: str,
                            leave_parametrized: bool = True) -> Module:
    """Remove the parametrizations on ``module.<tensor_name>``.

    Args:
        module: the parametrized module.
        tensor_name: the parametrized tensor's name.
        leave_parametrized: keep the current parametrized value (True) or the original.

    Returns:
        ``module``.
    """
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"remove_parametrizations: module {type(module).__name__} has no "
                         f"parametrization on '{tensor_name}'")
    plist = module.parametrizations[tensor_name]
    if plist.is_tensor:
        original = plist.original
        if leave_parametrized:
            with no_grad():
                t = getattr(module, tensor_name)
            with no_grad():
                if tuple(t.shape) == tuple(original.shape) and t.dtype == original.dtype:
                    original.copy_(t)
                else:
                    original = Parameter(t.detach(), original.requires_grad)
    else:
        if not leave_parametrized:
            raise ValueError("remove_parametrizations: leave_parametrized=False is not "
                             "possible when right_inverse returned several tensors")
        t = getattr(module, tensor_name)   # NOTE: with grad mode, so requires_grad is kept
        original = Parameter(t.detach(), True) if t.requires_grad else t.detach()
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    if isinstance(original, Parameter):
        module.register_parameter(tensor_name, original)
    else:
        module.register_buffer(tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module
