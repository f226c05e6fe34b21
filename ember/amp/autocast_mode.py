"""``ember.autocast``: regions where listed ops run in a lower precision (``torch.autocast``).

Inside a region, the dispatcher and the composites' entry points look an op up in the
region's table (built from :data:`ember.amp.op_lists.OP_LISTS`) and cast its float inputs:
to the region's dtype (matmul, linear, conv...), to float32 (losses...), or to their widest
dtype (cat, stack...). Casts are ordinary ``cast`` ops, so autograd records them (the
gradient reaching a float32 weight is float32) and ``ember.compile`` captures them as graph
nodes. The backward pass runs in the dtypes the forward chose: the engine runs VJPs with
autocast off (see :func:`ember.autograd.engine.run_backward`).

NOTE: PyTorch recommends calling ``backward()`` outside the region, where the two agree. A
``backward()`` inside one re-autocasts PyTorch's backward ATen ops; Ember's VJPs are written
in Ember primitives that do not map one to one onto those, so autocasting them would choose
dtypes PyTorch never does (e.g. a bfloat16 ``mv`` gradient). A custom ``Function``'s backward
decorated with :func:`custom_bwd` runs under its forward's autocast state, as in PyTorch.

The switches are thread-local. ``state.autocast`` (``ember.autograd.grad_mode``) holds the
merged table of the enabled device types, or ``None``: the one attribute the dispatcher's hot
path reads.
"""
from __future__ import annotations

import functools
import threading
import warnings
import weakref

from .. import dtypes as _dt
from ..autograd.grad_mode import enable_grad, state
from ..errors import describe
from ..ops.arith import to_dtype
from ..tensor import Tensor
from .op_lists import OP_LISTS

_DEVICE_TYPES = ("cpu", "cuda")
_SUPPORTED = {"cpu": (_dt.bfloat16, _dt.float16), "cuda": (_dt.bfloat16, _dt.float16)}


class _Switches(threading.local):
    def __init__(self):
        self.enabled = {"cpu": False, "cuda": False}
        self.dtype = {"cpu": _dt.bfloat16, "cuda": _dt.float16}
        self.cache_enabled = True
        self.nesting = 0
        self.cache: dict = {}     # id(float32 leaf) -> (weakref to it, its cast, version)


_sw = _Switches()
_tables: dict = {}


def _refresh() -> None:
    """Rebuild ``state.autocast`` from the switches (once per region entry/exit)."""
    key = tuple((d, _sw.dtype[d]) for d in _DEVICE_TYPES if _sw.enabled[d])
    table = _tables.get(key)
    if table is None and key:
        table = {}
        for dev, dtype in key:
            for name, policy in OP_LISTS[dev].items():
                table[name] = table.get(name, ()) + ((dev, policy, dtype),)
        _tables[key] = table
    state.autocast = table


def _check_device_type(device_type, fn: str) -> str:
    if not isinstance(device_type, str):
        raise TypeError(f"{fn}: device_type must be a string such as 'cpu' or 'cuda', got "
                        f"{type(device_type).__name__}")
    dev = device_type.split(":")[0]
    if dev not in _DEVICE_TYPES:
        raise ValueError(f"{fn}: unsupported device_type {device_type!r}; expected one of "
                         f"{', '.join(repr(d) for d in _DEVICE_TYPES)}")
    return dev


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast has op lists for ``device_type`` (``torch.amp.is_autocast_available``):
    ``"cpu"`` and ``"cuda"`` in Ember.

    Example:
        >>> ember.amp.is_autocast_available("cuda"), ember.amp.is_autocast_available("mps")
        (True, False)
    """
    if not isinstance(device_type, str):
        raise TypeError(f"is_autocast_available: device_type must be a string such as 'cpu' "
                        f"or 'cuda', got {type(device_type).__name__}")
    return device_type.split(":")[0] in _DEVICE_TYPES


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether autocast is on for ``device_type`` (``torch.is_autocast_enabled``)."""
    return _sw.enabled[_check_device_type(device_type, "is_autocast_enabled")]


def set_autocast_enabled(device_type: str, enabled: bool) -> None:
    """Turn autocast on or off for ``device_type`` (``torch.set_autocast_enabled``)."""
    _sw.enabled[_check_device_type(device_type, "set_autocast_enabled")] = bool(enabled)
    _refresh()


def get_autocast_dtype(device_type: str = "cuda"):
    """The dtype autocast lowers to on ``device_type`` (default: bfloat16 on CPU, float16 on
    CUDA), like ``torch.get_autocast_dtype``."""
    return _sw.dtype[_check_device_type(device_type, "get_autocast_dtype")]


def set_autocast_dtype(device_type: str, dtype) -> None:
    """Set the dtype autocast lowers to on ``device_type`` (``torch.set_autocast_dtype``)."""
    _sw.dtype[_check_device_type(device_type, "set_autocast_dtype")] = _dt.as_dtype(dtype)
    _refresh()


def is_autocast_cache_enabled() -> bool:
    """Whether casts of float32 leaf weights are cached within a region."""
    return _sw.cache_enabled


def set_autocast_cache_enabled(enabled: bool) -> None:
    _sw.cache_enabled = bool(enabled)


def clear_autocast_cache() -> None:
    """Drop the cached weight casts (done on exit of the outermost region)."""
    _sw.cache.clear()


class autocast:
    """A region (context manager or decorator) where listed ops run in ``dtype``.

    Args:
        device_type: ``"cpu"`` or ``"cuda"``: tensors on other device types are left alone.
        dtype: the lower precision, ``ember.bfloat16`` or ``ember.float16``; default
            :func:`get_autocast_dtype` (bfloat16 on CPU, float16 on CUDA).
        enabled: ``False`` turns autocast off inside the region (e.g. nested in another).
        cache_enabled: cache the casts of float32 leaf tensors that require grad (weights)
            within the region; default :func:`is_autocast_cache_enabled`.

    Example:
        >>> lin = ember.nn.Linear(4, 3)
        >>> with ember.autocast("cpu"):
        ...     y = lin(ember.randn(2, 4))
        >>> y.dtype
        ember.bfloat16
    """

    def __init__(self, device_type: str, dtype=None, enabled: bool = True,
                 cache_enabled: bool | None = None):
        self.device = _check_device_type(device_type, "autocast")
        self.fast_dtype = get_autocast_dtype(self.device) if dtype is None else \
            _dt.as_dtype(dtype)
        self._enabled = bool(enabled)
        self._cache_enabled = is_autocast_cache_enabled() if cache_enabled is None else \
            bool(cache_enabled)
        if self._enabled and self.fast_dtype not in _SUPPORTED[self.device]:
            warnings.warn(f"In {self.device.upper()} autocast, but the target dtype "
                          f"{self.fast_dtype.name} is not supported (supported: "
                          f"{', '.join(d.name for d in _SUPPORTED[self.device])}). "
                          f"Disabling autocast.", UserWarning, stacklevel=2)
            self._enabled = False
        self._args = (device_type, dtype, enabled, cache_enabled)

    def __enter__(self):
        d = self.device
        self._prev = (_sw.enabled[d], _sw.dtype[d], _sw.cache_enabled)
        _sw.enabled[d], _sw.dtype[d] = self._enabled, self.fast_dtype
        _sw.cache_enabled = self._cache_enabled
        _sw.nesting += 1
        _refresh()
        return self

    def __exit__(self, *exc):
        _sw.nesting -= 1
        if _sw.nesting == 0:
            _sw.cache.clear()
        d = self.device
        _sw.enabled[d], _sw.dtype[d], _sw.cache_enabled = self._prev
        _refresh()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(*self._args):
                return fn(*args, **kwargs)
        return wrapper


# ---------------------------------------------------------------- casting an op's inputs
def _eligible(x, dev) -> bool:
    return (x.__class__ is Tensor or isinstance(x, Tensor)) and x._dtype.is_floating_point \
        and x._device.type == dev


def _cached_cast(x: Tensor, dtype) -> Tensor:
    """``x`` cast to ``dtype``, once per region for a float32 leaf that requires grad.

    NOTE: like PyTorch, only float32 leaves that require grad (weights) are cached, not in
    inference mode, and not while a tracer records (a cast made outside the trace would be
    lifted as an input). The cached cast is always made with grad enabled (PyTorch 2.10+,
    pytorch#158232): one first made under ``no_grad`` still carries the gradient to the
    leaf when a later use in the region records. Unlike PyTorch, an entry is keyed by the
    leaf's version too: an in-place write to the weight inside the region (an optimizer
    step, ``no_grad`` edits) makes the next use cast it again instead of reading the stale
    low-precision copy PyTorch keeps.
    """
    if not (_sw.cache_enabled and x._dtype is _dt.float32 and x._requires_grad
            and x._grad_fn is None and x._base is None and not state.modes
            and not state.inference):
        return to_dtype(x, dtype)
    hit = _sw.cache.get(id(x))
    version = x._storage.version
    if hit is not None and hit[0]() is x and hit[1]._dtype is dtype and hit[2] == version:
        return hit[1]
    with enable_grad():
        r = to_dtype(x, dtype)
    _sw.cache[id(x)] = (weakref.ref(x), r, version)
    return r


def _promote_dtype(name, lower, leaves, dev):
    to = lower
    for x in leaves:
        if not _eligible(x, dev) or x._dtype is _dt.float64:
            continue
        if to is _dt.float32 or x._dtype is _dt.float32:
            to = _dt.float32
        elif x._dtype is not lower:
            raise RuntimeError(f"{name}: autocast to {lower.name} cannot promote a "
                               f"{x._dtype.name} input (inputs: {describe(leaves)}); cast it "
                               f"to {lower.name} or float32 first")
    return to


def _cast_one(x, to, dev, lower):
    if not _eligible(x, dev) or x._dtype is to or x._dtype is _dt.float64:
        return x
    return _cached_cast(x, to) if to is lower else to_dtype(x, to)


def _cast_tree(x, to, dev, lower):
    if isinstance(x, (list, tuple)):
        return type(x)(_cast_tree(v, to, dev, lower) for v in x)
    return _cast_one(x, to, dev, lower)


def _leaves(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _leaves(a)
        else:
            yield a


def cast_inputs(name: str, entries, args: tuple, kwargs: dict | None = None):
    """``(args, kwargs)`` cast for op ``name`` under ``entries`` (its ``state.autocast`` row:
    ``(device type, policy, lower dtype)`` per enabled device type)."""
    for dev, policy, lower in entries:
        if policy == "banned":
            raise RuntimeError(
                f"{name}: unsafe to autocast (inputs {describe(tuple(_leaves(args)))}). Many "
                f"models use a sigmoid layer right before the binary cross entropy layer; in "
                f"that case, combine the two layers using "
                f"ember.nn.functional.binary_cross_entropy_with_logits or "
                f"ember.nn.BCEWithLogitsLoss, which are safe to autocast.")
        if policy == "lower":
            to = lower
        elif policy == "fp32":
            to = _dt.float32
        else:
            to = _promote_dtype(name, lower, list(_leaves(args)) + list(
                _leaves((kwargs or {}).values())), dev)
        args = tuple(_cast_tree(a, to, dev, lower) for a in args)
        if kwargs:
            kwargs = {k: _cast_tree(v, to, dev, lower) for k, v in kwargs.items()}
    return args, kwargs


def signature_key():
    """What a compiled graph is specialised on: the enabled device types and their dtypes."""
    return tuple((d, _sw.dtype[d].name) for d in _DEVICE_TYPES if _sw.enabled[d]) \
        if state.autocast is not None else ()


# ---------------------------------------------------------------- custom autograd Functions
def custom_fwd(fwd=None, *, device_type: str, cast_inputs=None):
    """Decorate a custom ``Function.forward`` for autocast (``torch.amp.custom_fwd``).

    Args:
        fwd: the ``forward`` staticmethod (or use ``@custom_fwd(device_type=...)``).
        device_type: ``"cpu"`` or ``"cuda"``.
        cast_inputs: ``None`` runs ``forward`` under the caller's autocast state and records
            it for :func:`custom_bwd`; a float dtype, when autocast is on, casts the float
            tensor arguments on ``device_type`` (not float64) to it and runs ``forward`` with
            autocast off.

    Example:
        >>> class Mul2(ember.autograd.Function):
        ...     @staticmethod
        ...     @ember.amp.custom_fwd(device_type="cpu", cast_inputs=ember.float32)
        ...     def forward(ctx, x): return x * 2
        ...     @staticmethod
        ...     @ember.amp.custom_bwd(device_type="cpu")
        ...     def backward(ctx, g): return g * 2
    """
    dev = _check_device_type(device_type, "custom_fwd")
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args, **kwargs):
        ctx = args[0]
        ctx._dtype = get_autocast_dtype(dev)
        if cast_inputs is None:
            ctx._fwd_used_autocast = is_autocast_enabled(dev)
            return fwd(*args, **kwargs)
        on = is_autocast_enabled(dev)
        ctx._fwd_used_autocast = False
        if not on:
            return fwd(*args, **kwargs)
        to = _dt.as_dtype(cast_inputs)
        args = (ctx,) + tuple(_cast_tree(a, to, dev, None) for a in args[1:])
        kwargs = {k: _cast_tree(v, to, dev, None) for k, v in kwargs.items()}
        with autocast(dev, enabled=False):
            return fwd(*args, **kwargs)
    return decorate_fwd


def custom_bwd(bwd=None, *, device_type: str):
    """Decorate a custom ``Function.backward``: it runs under the autocast state its forward
    ran under (``torch.amp.custom_bwd``)."""
    dev = _check_device_type(device_type, "custom_bwd")
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(*args, **kwargs):
        ctx = args[0]
        with autocast(dev, enabled=getattr(ctx, "_fwd_used_autocast", False),
                      dtype=getattr(ctx, "_dtype", None)):
            return bwd(*args, **kwargs)
    return decorate_bwd
