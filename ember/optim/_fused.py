"""The ``fused=True`` path of SGD, Adam and AdamW: one compiled update per step.

Run eagerly, an optimizer step dispatches several whole-tensor NumPy passes per parameter
(Adam: ``lerp_``, ``mul_``, ``addcmul_``, ``sqrt``, ``div_``, ``add_``, ``addcdiv_``), each
reading and writing full parameter-sized arrays. PyTorch's ``foreach=True``/``fused=True``
run all parameters' updates as a few multi-tensor kernels instead. Ember's equivalent is the
*compiled form of the optimizer's own update code*: ``ember.compile`` of
``_update_group`` over every group (the same capture an ``ember.compile``'d training step
makes of its optimizer part: the learning rate a 0-d graph input, Adam's bias corrections
tensor ops, the state's in-place updates written back), so each parameter's update becomes
one generated elementwise kernel that reads ``p``, ``grad`` and the moments once — and the
whole step is one program run. No second implementation of the math: the graph is traced
from ``_update_group``.

On a GPU ``fused=True`` takes the loop, whose update of each parameter is already one
generated CUDA kernel there (``codegen/cuda_optim.py``, the C loops' steps).

When: ``fused=True`` (PyTorch's flag for its fused kernels, which likewise round differently
from the for-loop), every parameter with a gradient is a CPU float32/float64 tensor, no
dispatch mode (tracer), forward AD or anomaly mode is active and a C compiler exists. The
default (``fused=None``) and ``foreach=True`` keep the per-parameter loop, which already
updates whole raw arrays without dispatch: the generated kernels contract ``a * b + c``
into FMAs (``-ffp-contract=fast``), so the fused update differs from the loop in the last
bits, and eager steps stay bit-identical to ``ember.compile``'s exact-pass graphs and to
``foreach``/``capturable`` runs unless ``fused=True`` asks otherwise.
A step that creates state (the first) runs the loop; otherwise a step whose signature is
new is first captured with its effects undone and then replayed, so every update on this
path is the compiled program's (bit-reproducible across a ``state_dict`` resume). A capture
that fails (a graph break) leaves the loop for good. A scheduler that cycles momentum
(``OneCycleLR``, ``CyclicLR``) changes a folded hyper-parameter every step: it turns the
path off from the start (``_fused_off``); so would any other per-step hyper-parameter
change other than the learning rate (lifted), after ``ember.compile``'s recompile limit.
"""
from __future__ import annotations

import warnings

from ..autograd.grad_mode import no_grad, state as _grad_state
from ..errors import GraphError

_FLOATS = frozenset(("float32", "float64"))
_cc: dict = {}
#: steps run through the compiled update (tests read it).
stats = {"steps": 0}


def _have_compiler() -> bool:
    if "ok" not in _cc:
        from ..codegen.toolchain import find_compiler
        _cc["ok"] = find_compiler() is not None
    return _cc["ok"]


def wanted(opt) -> bool:
    """Whether ``opt``'s step may take the compiled path now (module docstring)."""
    st = _grad_state
    d = opt.__dict__
    if st.modes or st.fw_levels or st.anomaly or d.get("_fused_broken") or d.get("_fused_off"):
        return False
    for group in opt.param_groups:
        if group.get("fused") is not True or group.get("differentiable") or \
                not opt._fused_worth(group):
            return False
        for p in group["params"]:
            g = p.grad
            if g is not None and (p._device.type != "cpu" or p._dtype.name not in _FLOATS
                                  or g._dtype is not p._dtype):
                return False
    return _have_compiler()


def step(opt) -> None:
    """One compiled update of every group of ``opt`` (``opt._update_group`` traced)."""
    st = opt.state
    if any(p.grad is not None and not st.get(p) for g in opt.param_groups
           for p in g["params"]):
        _loop(opt)            # NOTE: this step creates state: the loop makes it, as always
        return
    cf = opt.__dict__.get("_fused_update")
    if cf is None:
        from ..graph.compile import compile as _compile
        cf = opt.__dict__["_fused_update"] = _compile(_traced(opt))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        # NOTE: a new signature is captured with its effects undone (graph/sandbox.py), then
        # replayed: every update this path makes is the compiled program's, never the traced
        # eager call's, so a run resumed from a state_dict reproduces the same bits.
        try:
            cf._plan_entry((0,), {})
        except GraphError:
            pass                     # it runs eagerly (the warning below says why)
        cf(0)
    # NOTE: ember.compile warns where it ran the update eagerly instead (a graph break, too
    # many recompiles): the step is done either way; later steps keep the loop.
    if any("ember.compile" in str(w.message) for w in caught):
        opt.__dict__["_fused_broken"] = True
        return
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    stats["steps"] += 1


def _loop(opt) -> None:
    with no_grad():
        for group in opt.param_groups:
            opt._update_group(group)


def _traced(opt):
    """The function ``ember.compile`` traces: every group's ``_update_group``. ``opt`` is a
    closure cell, so the compiler discovers the optimizer, its parameters, their ``.grad``
    (read anew at every run) and its state (``graph/discover.py``)."""
    def update(_token):
        _loop(opt)
    update.__name__ = update.__qualname__ = f"{type(opt).__name__}.step"
    return update
