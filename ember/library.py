"""``ember.library``: user-defined ops (``torch.library.custom_op``).

A custom op wraps a Python function that Ember treats as one unit: its implementation runs
below autograd (the ops inside record no graph), a registered backward gives its gradient,
a registered *fake* implementation gives its output's shape and dtype on the ``meta``
device, and per-device kernels may replace the implementation. It is also reachable as
``ember.ops.<namespace>.<name>``, as ``torch.ops`` reaches PyTorch's.

Ember deliberately differs from PyTorch in one point: a custom op is not a node of
``ember.compile``'s graphs. Under a trace its implementation runs as written — its Ember
ops are traced inline, and one that reads values on the host (NumPy code) is a graph break.

Example:
    >>> @ember.library.custom_op("mylib::numpy_sin", mutates_args=())
    ... def numpy_sin(x: ember.Tensor) -> ember.Tensor:
    ...     return ember.from_numpy(np.sin(x.numpy()))
    >>> @numpy_sin.register_fake
    ... def _(x):
    ...     return ember.empty_like(x)
    >>> numpy_sin.register_autograd(lambda ctx, g: g * ctx.x.cos(),
    ...                             setup_context=lambda ctx, inputs, out: setattr(ctx, "x", inputs[0]))
"""
from __future__ import annotations

import functools
import inspect
import types

from .autograd.function import Function
from .autograd.grad_mode import no_grad, state
from .tensor import Tensor

__all__ = ["custom_op", "CustomOpDef", "register_fake", "register_autograd", "register_kernel",
           "opcheck", "get_op"]

_OPS: dict = {}      # "namespace::name" -> CustomOpDef


def _detached(v):
    """The implementation sees detached aliases (same memory): it runs below autograd, and
    host code such as ``x.numpy()`` works on inputs that require grad, as in PyTorch."""
    if isinstance(v, Tensor):
        return v.detach()
    if isinstance(v, (list, tuple)) and any(isinstance(t, Tensor) for t in v):
        return type(v)(_detached(t) for t in v)
    return v


def _tensors(values):
    for v in values:
        if isinstance(v, Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (t for t in v if isinstance(t, Tensor))


class CustomOpDef:
    """What :func:`custom_op` returns: call it like the function it wraps."""

    def __init__(self, qualname: str, fn, mutates_args, device_types):
        self._qualname = qualname
        self._name = qualname.split("::", 1)[1]
        self._init_fn = fn
        self._sig = inspect.signature(fn)
        if mutates_args != "unknown":
            unknown = set(mutates_args) - set(self._sig.parameters)
            if unknown:
                raise ValueError(f"custom_op {qualname}: mutates_args names "
                                 f"{sorted(unknown)}, which {fn.__name__} does not take")
        self._mutates = mutates_args
        self._kernels: dict = {}
        if device_types is not None:
            for d in (device_types,) if isinstance(device_types, str) else device_types:
                self._kernels[d] = fn
        self._fake = None
        self._backward = self._setup = None
        self._function = None
        self.default = self          # NOTE: torch.ops.ns.name.default (the one overload)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<CustomOpDef({self._qualname})>"

    # ------------------------------------------------------------------ registration
    def register_fake(self, fn=None):
        """Register the implementation used on ``meta`` tensors: it returns empty tensors of
        the output's shape and dtype (``ember.empty_like`` & co.)."""
        if fn is None:
            return self.register_fake
        self._fake = fn
        return fn

    def register_kernel(self, device_types, fn=None):
        """Run ``fn`` instead of the implementation for inputs on ``device_types``
        (``"cpu"``, ``"cuda"`` or a sequence of them)."""
        if fn is None:
            return functools.partial(self.register_kernel, device_types)
        for d in (device_types,) if isinstance(device_types, str) else device_types:
            self._kernels[d] = fn
        return fn

    def register_autograd(self, backward, *, setup_context=None) -> None:
        """Give the op a gradient: ``setup_context(ctx, inputs, output)`` saves what
        ``backward(ctx, *grads)`` needs; ``backward`` returns one gradient per argument
        (None for the non-tensor ones)."""
        if self._mutates != "unknown" and self._mutates:
            raise RuntimeError(f"{self._qualname}: register_autograd is not supported for "
                               f"ops that mutate their inputs")
        self._backward, self._setup = backward, setup_context

    # ------------------------------------------------------------------ calling
    def _impl(self, tensors):
        for t in tensors:
            k = self._kernels.get(t.device.type)
            if k is not None:
                return k
        return self._init_fn

    def _autograd_function(self):
        if self._function is None:
            op, names = self, list(self._sig.parameters)

            def forward(*args):
                kw = {n: _detached(a) for n, a in zip(names, args)}
                return op._impl(list(_tensors(args)))(**kw)

            def setup_context(ctx, inputs, output):
                if op._setup is not None:
                    op._setup(ctx=ctx, inputs=inputs, output=output)

            def backward(ctx, *grads):
                if op._backward is None:
                    raise RuntimeError(f"{op._qualname}: autograd is not registered for this "
                                       f"custom op; call {op._name}.register_autograd")
                res = op._backward(ctx, *grads)
                return res if isinstance(res, tuple) else (res,)
            self._function = type(self._name, (Function,), {
                "forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
                "backward": staticmethod(backward)})
        return self._function

    def __call__(self, *args, **kwargs):
        bound = self._sig.bind(*args, **kwargs)
        bound.apply_defaults()
        values = tuple(bound.arguments.values())
        tensors = list(_tensors(values))
        if any(t.is_meta for t in tensors):
            if self._fake is None:
                raise RuntimeError(f"{self._qualname}: no fake implementation for meta tensors; "
                                   f"register one with @{self._name}.register_fake")
            return self._fake(*bound.args, **bound.kwargs)
        if not self._mutates and (state.grad_enabled and any(t.requires_grad for t in tensors)
                                  or any(t._fw for t in tensors)):
            # NOTE: without a registered backward the node's backward raises (PyTorch's);
            # forward-mode tangents reach the Function's jvp, which says it has none
            return self._autograd_function().apply(*values)
        with no_grad():
            out = self._impl(tensors)(*[_detached(a) for a in bound.args],
                                      **{k: _detached(v) for k, v in bound.kwargs.items()})
        if self._mutates:
            names = self._sig.parameters if self._mutates == "unknown" else self._mutates
            for n in names:
                for t in _tensors((bound.arguments.get(n),)):
                    t._storage.version += 1
        return out


def custom_op(name: str, fn=None, /, *, mutates_args, device_types=None, schema=None):
    """Declare ``fn`` as the op ``"namespace::name"`` (``torch.library.custom_op``);
    ``mutates_args``: the names of the arguments it writes in place (``()``: none), or
    ``"unknown"``. Usable as a decorator.

    Raises:
        ValueError: ``name`` is not ``"namespace::name"`` or is taken.
    """
    if fn is None:
        return lambda f: custom_op(name, f, mutates_args=mutates_args,
                                   device_types=device_types, schema=schema)
    ns, sep, op_name = name.partition("::")
    if not sep or not ns.isidentifier() or not op_name.isidentifier():
        raise ValueError(f"custom_op: expected a name like 'mylib::my_op', got {name!r}")
    if name in _OPS:
        raise ValueError(f"custom_op: {name} is already defined")
    op = CustomOpDef(name, fn, mutates_args, device_types)
    _OPS[name] = op
    _namespace(ns).__dict__[op_name] = op
    return op


def _namespace(ns: str):
    """``ember.ops.<ns>``, made on first use (``torch.ops.<ns>``)."""
    from . import ops as _ops_pkg
    space = getattr(_ops_pkg, ns, None)
    if space is None:
        space = types.SimpleNamespace()
        setattr(_ops_pkg, ns, space)
    elif not isinstance(space, types.SimpleNamespace):
        raise ValueError(f"custom_op: namespace {ns!r} clashes with ember.ops.{ns}")
    return space


def get_op(name: str) -> CustomOpDef:
    """The custom op named ``"namespace::name"``."""
    try:
        return _OPS[name]
    except KeyError:
        raise KeyError(f"no custom op named {name!r}") from None


def _op(op) -> CustomOpDef:
    return get_op(op) if isinstance(op, str) else op


def register_fake(op, fn=None):
    """``torch.library.register_fake``: ``op`` is a name or a :class:`CustomOpDef`."""
    return _op(op).register_fake(fn)


def register_kernel(op, device_types, fn=None):
    """``torch.library.register_kernel``."""
    return _op(op).register_kernel(device_types, fn)


def register_autograd(op, backward, *, setup_context=None) -> None:
    """``torch.library.register_autograd``."""
    _op(op).register_autograd(backward, setup_context=setup_context)


def opcheck(op, args, kwargs=None, *, raise_exception: bool = True) -> dict:
    """Check a custom op on sample ``args`` (``torch.library.opcheck``): its fake
    implementation gives the real output's shapes and dtypes, and a registered backward
    matches central differences in float64 (``gradcheck``). Returns
    ``{"test_faketensor": ..., "test_autograd_registration": ...}`` ("SUCCESS", "SKIPPED" or
    the error); with ``raise_exception`` the first failure raises."""
    from .autograd.gradcheck import gradcheck
    op, kwargs = _op(op), dict(kwargs or {})
    out = {}

    def run(key, check):
        try:
            out[key] = check()
        except Exception as e:  # noqa: BLE001 - reported, or re-raised below
            if raise_exception:
                raise
            out[key] = e

    def fake():
        if op._fake is None:
            return "SKIPPED"
        real = op(*args, **kwargs)
        meta = op(*[a.to("meta") if isinstance(a, Tensor) else a for a in args], **kwargs)
        rs = real if isinstance(real, (tuple, list)) else (real,)
        ms = meta if isinstance(meta, (tuple, list)) else (meta,)
        got = [(tuple(m.shape), m.dtype) for m in ms]
        want = [(tuple(r.shape), r.dtype) for r in rs]
        if got != want:
            raise AssertionError(f"{op._qualname}: the fake implementation gives {got}, the "
                                 f"real one {want}")
        return "SUCCESS"

    def autograd():
        if op._backward is None:
            return "SKIPPED"
        xs = [a.detach().double().requires_grad_(True) if isinstance(a, Tensor) and
              a.dtype.is_floating_point else a for a in args]
        idx = [i for i, a in enumerate(xs) if isinstance(a, Tensor) and a.requires_grad]

        def f(*ts):
            full = list(xs)
            for i, t in zip(idx, ts):
                full[i] = t
            return op(*full, **kwargs)
        if not gradcheck(f, tuple(xs[i] for i in idx), check_forward_ad=False):
            raise AssertionError(f"{op._qualname}: the registered backward fails gradcheck")
        return "SUCCESS"
    run("test_faketensor", fake)
    run("test_autograd_registration", autograd)
    return out
