"""``ember.compiler``: ``torch.compiler``'s names over :func:`ember.compile`.

Library code written for PyTorch asks ``torch.compiler.is_compiling()`` to skip what a
trace should not see, and marks functions with ``torch.compiler.disable``; here those
questions are answered for Ember's tracer.

Example:
    >>> def f(x):
    ...     if not ember.compiler.is_compiling():
    ...         print("eager")
    ...     return x * 2
"""
from __future__ import annotations

import functools

__all__ = ["compile", "reset", "disable", "is_compiling", "is_dynamo_compiling",
           "is_exporting", "allow_in_graph", "assume_constant_result", "list_backends",
           "cudagraph_mark_step_begin", "set_stance"]


def compile(*args, **kwargs):
    """:func:`ember.compile` under ``torch.compiler.compile``'s name."""
    from ..graph.compile import compile as _compile
    return _compile(*args, **kwargs)


def _tracer():
    """The innermost ``ember.compile`` tracer running on this thread, or None."""
    from ..autograd.grad_mode import state
    from ..graph.trace import _Mode
    for m in reversed(state.modes):
        if isinstance(m, _Mode):
            return m
    return None


def is_compiling() -> bool:
    """Whether the code runs under an ``ember.compile`` trace (``torch.compiler.is_compiling``).

    Ember traces with real values, so the traced call computes the same results as eager;
    code that branches on this flag is recorded along the branch it takes here."""
    return _tracer() is not None


def is_dynamo_compiling() -> bool:
    """Same as :func:`is_compiling` (Ember has one tracer, no TorchDynamo)."""
    return is_compiling()


def is_exporting() -> bool:
    """False: Ember has no ``torch.export`` (``ember.onnx.export`` traces on its own)."""
    return False


def disable(fn=None, recursive: bool = True, *, reason: str | None = None):
    """Run ``fn`` outside compiled graphs (``torch.compiler.disable``): called under an
    ``ember.compile`` trace, it is a graph break — the rest of that call runs eagerly
    (``fullgraph=True`` raises ``GraphBreak`` naming it). Usable as ``@disable`` or
    ``disable(fn)``.

    Example:
        >>> @ember.compiler.disable
        ... def log_stats(x):
        ...     print(x.mean().item())
    """
    if fn is None:
        return functools.partial(disable, recursive=recursive, reason=reason)
    name = getattr(fn, "__qualname__", type(fn).__name__)

    @functools.wraps(fn)
    def eager(*args, **kwargs):
        m = _tracer()
        if m is not None and hasattr(m, "unsupported"):
            m.unsupported(f"ember.compiler.disable'd function {name}" +
                          (f" ({reason})" if reason else ""))
        return fn(*args, **kwargs)
    return eager


def allow_in_graph(fn):
    """``fn`` itself: Ember's tracer records the ops of any function it runs."""
    return fn


def assume_constant_result(fn):
    """``fn`` itself: Ember traces with real values, so ``fn`` runs at every trace."""
    return fn


def list_backends(exclude_tags=("debug", "experimental")) -> list:
    """The ``backend=`` names ``ember.compile`` accepts: its one compiler."""
    return ["ember"]


def cudagraph_mark_step_begin() -> None:
    """A no-op: a ``reduce-overhead`` graph's outputs are copies already (see
    :func:`ember.compile`), so no step boundary needs marking."""


def set_stance(stance: str = "default", *, skip_guard_eval_unsafe: bool = False,
               force_backend=None):
    """Accepted for ``"default"`` only; Ember has no other stance.

    Raises:
        NotImplementedError: another stance (``"force_eager"``, ``"eager_on_recompile"``...).
    """
    if stance != "default":
        raise NotImplementedError(f"ember.compiler.set_stance({stance!r}): Ember has only the "
                                  f"'default' stance; call the function uncompiled instead")
    return None


def reset() -> None:
    """Forget every compiled graph of every live ``ember.compile``'d function, so each
    traces again on its next call (``torch.compiler.reset``); the disk cache stays."""
    from ..graph.compile import reset_all
    reset_all()
