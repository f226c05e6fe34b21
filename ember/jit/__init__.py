"""``ember.jit``: ``torch.jit``'s decorators and predicates, for code written against
TorchScript.

Ember deliberately has no TorchScript: ``script`` and ``trace`` return the function or
module they are given, which then runs eagerly with the same results (compile it with
:func:`ember.compile` for speed), ``is_scripting()``/``is_tracing()`` answer False, and
the annotation helpers (``ignore``, ``unused``, ``export``, ``Final``, ``annotate``...)
change nothing. What needs TorchScript's IR — ``save``/``load`` of a ScriptModule, its
``.graph``/``.code`` — raises, naming what Ember offers instead.

Example:
    >>> @ember.jit.script
    ... def gelu_tanh(x):
    ...     return 0.5 * x * (1 + ember.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))
    >>> gelu_tanh(ember.ones(2)).shape
    ember.Size([2])
"""
from __future__ import annotations

from typing import Final  # noqa: F401 - torch.jit.Final

__all__ = ["script", "trace", "trace_module", "script_if_tracing", "ignore", "unused",
           "export", "interface", "is_scripting", "is_tracing", "annotate", "Attribute",
           "Final", "fork", "wait", "freeze", "optimize_for_inference", "save", "load",
           "ScriptModule", "ScriptFunction", "RecursiveScriptModule", "TracerWarning",
           "Error", "enable_onednn_fusion", "onednn_fusion_enabled", "set_fusion_strategy",
           "strict_fusion", "isinstance"]

_NO_IR = ("Ember has no TorchScript: save weights with ember.save(model.state_dict(), path) "
          "and export a graph with ember.onnx.export(model, args, path)")


class Error(RuntimeError):
    """``torch.jit.Error``: what TorchScript raises (nothing in Ember does)."""


class TracerWarning(Warning):
    """``torch.jit.TracerWarning`` (Ember's ``trace`` never warns: it does not trace)."""

    @staticmethod
    def ignore_lib_warnings() -> None:
        return None


class ScriptModule:
    """``torch.jit.ScriptModule``: nothing is one in Ember (``script`` returns the module)."""


class RecursiveScriptModule(ScriptModule):
    """``torch.jit.RecursiveScriptModule`` (see :class:`ScriptModule`)."""


class ScriptFunction:
    """``torch.jit.ScriptFunction``: nothing is one in Ember (``script`` returns the function)."""


def script(obj=None, optimize=None, _frames_up: int = 0, _rcb=None, example_inputs=None):
    """``obj`` itself (a function, method or ``nn.Module``), which runs eagerly.

    Ember deliberately differs from ``torch.jit.script``: it compiles nothing and checks no
    TorchScript typing rules; :func:`ember.compile` is its compiler."""
    if obj is None:
        return script
    return obj


def trace(func, example_inputs=None, optimize=None, check_trace: bool = True,
          check_inputs=None, check_tolerance: float = 1e-5, strict: bool = True, **kwargs):
    """``func`` itself (Ember deliberately differs from ``torch.jit.trace``: no trace is
    recorded, so data-dependent branches stay live rather than frozen)."""
    return func


def trace_module(mod, inputs, **kwargs):
    """``mod`` itself (see :func:`trace`)."""
    return mod


def script_if_tracing(fn):
    """``fn`` itself."""
    return fn


def ignore(drop=False, **kwargs):
    """``@ignore`` / ``@ignore(drop=True)``: the function itself (nothing is scripted)."""
    if callable(drop):
        return drop
    return lambda fn: fn


def unused(fn):
    """``fn`` itself."""
    return fn


def export(fn):
    """``fn`` itself."""
    return fn


def interface(obj):
    """``obj`` itself."""
    return obj


def is_scripting() -> bool:
    """False: Ember never runs code as TorchScript."""
    return False


def is_tracing() -> bool:
    """False: Ember has no ``torch.jit`` tracer (``ember.compiler.is_compiling`` tells
    whether ``ember.compile`` is tracing)."""
    return False


def annotate(the_type, the_value):
    """``the_value`` (a TorchScript type hint)."""
    return the_value


def Attribute(value, type=None):  # noqa: N802 - torch.jit.Attribute
    """``value`` (a TorchScript attribute type hint)."""
    return value


def isinstance(obj, target_type) -> bool:  # noqa: A001 - torch.jit.isinstance
    """Python's ``isinstance`` for plain types; for ``List[int]``-style generics, the
    container's type (TorchScript refines element types; Ember has no need to)."""
    import builtins
    import typing
    origin = typing.get_origin(target_type)
    return builtins.isinstance(obj, origin if origin is not None else target_type)


class _Future:
    """A finished ``torch.jit.Future``: :func:`fork` runs its function at once."""

    def __init__(self, value):
        self._value = value

    def wait(self):
        return self._value

    def done(self) -> bool:
        return True


def fork(func, *args, **kwargs) -> _Future:
    """Run ``func(*args, **kwargs)`` now and return its finished future (PyTorch runs it
    asynchronously only inside TorchScript; eagerly it also runs synchronously)."""
    return _Future(func(*args, **kwargs))


def wait(future):
    """The value of a :func:`fork`'s future."""
    return future.wait()


def freeze(mod, preserved_attrs=None, optimize_numerics: bool = True):
    """``mod`` itself (nothing to freeze without TorchScript)."""
    return mod


def optimize_for_inference(mod, other_methods=None):
    """``mod`` itself; for speed, ``ember.compile(mod)`` under ``ember.no_grad()``."""
    return mod


def save(m, f, _extra_files=None) -> None:
    """Refused: there is no ScriptModule to serialise.

    Raises:
        RuntimeError: always, naming ``ember.save`` and ``ember.onnx.export``."""
    raise Error(f"ember.jit.save: {_NO_IR}")


def load(f, map_location=None, _extra_files=None, _restore_shapes: bool = False):
    """Refused: Ember cannot run TorchScript archives.

    Raises:
        RuntimeError: always, naming ``ember.load`` for state dicts."""
    raise Error(f"ember.jit.load: {_NO_IR}; load a state dict with ember.load(path)")


_onednn = [False]


def enable_onednn_fusion(enabled: bool) -> None:
    """Recorded, with no effect (Ember's fusion is its own compiler's)."""
    _onednn[0] = bool(enabled)


def onednn_fusion_enabled() -> bool:
    return _onednn[0]


def set_fusion_strategy(strategy):
    """Accepted with no effect; returns the strategy given (TorchScript's fuser knob)."""
    return strategy


class strict_fusion:  # noqa: N801 - torch.jit.strict_fusion
    """A context manager that checks nothing (TorchScript's fusion assertion)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

