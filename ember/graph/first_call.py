"""Which first calls of a compiled function will change their own signature.

A training step's first call usually creates its optimizer's state (Adam's moments, SGD's
momentum buffers): the signature changes (it counts each parameter's state entries), so the
graph traced at that call can never replay and is thrown away (:mod:`ember.graph.compile`).
Tracing it still costs its recording (~0.2 s of W3's ~0.37 s first call). When no earlier
process has recorded the signature as unstable (:func:`ember.graph.warm_start.
known_unstable`: a cold cache), :func:`predicts_unstable` says so from the state itself, and
the call runs under the recording-free tracer instead (same numerics as a traced call).

A wrong guess costs one traced call later, never a result: the signature's second call is
traced as usual (the hint is used once per signature).
"""
from __future__ import annotations

__all__ = ["predicts_unstable"]


def _creates_state(opt) -> bool:
    """Whether ``opt``'s step stores per-parameter state. PyTorch's ``SGD`` without
    momentum keeps none; every other optimizer of ``torch.optim`` (and a user's) may."""
    from ..optim.sgd import SGD
    if isinstance(opt, SGD):
        return any(g.get("momentum", 0) for g in opt.param_groups)
    return True


def predicts_unstable(roots) -> bool:
    """Whether a call may create optimizer state: an optimizer the function reaches
    (``roots``, :func:`ember.graph.discover.discover`) holds a parameter needing a gradient
    without any state yet, and its step stores some."""
    for _, opt in roots.optimizers:
        state = opt.state
        if any(p._requires_grad and not state.get(p) for g in opt.param_groups
               for p in g["params"]) and _creates_state(opt):
            return True
    return False
